"""A webdataset `map(f)` of the user's own function, seen through once under fastload's tracer (fastload.trace).

`f` runs on stand-ins: the image a traced image (a transform fastload maps is intercepted
where it enters it), every other field a stand-in that may only be passed on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict

from fastload import trace
from fastload.datasets.webdataset_fields import Field, NotMapped, Recipe, lookup


class _Stand:
    """Stands for one field of the sample while a map's function is seen through: it may
    only be passed on as it is (any use of it could depend on its value)."""

    __slots__ = ("field",)

    def __init__(self, field_: Field):
        object.__setattr__(self, "field", field_)

    def _used(self, *args: Any, **kwargs: Any) -> Any:
        raise NotMapped(f"the function uses the field {';'.join(object.__getattribute__(self, 'field').source)!r} "
                        "(followed: fields passed on as they are, the image through a transform fastload maps)")

    def __getattr__(self, name: str) -> Any:
        self._used()

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __int__ = __index__ = __float__ = _used
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = __mod__ = _used
    __getitem__ = __len__ = __iter__ = __contains__ = __call__ = __str__ = __format__ = __hash__ = _used

    def __repr__(self) -> str:
        return f"<field {';'.join(object.__getattribute__(self, 'field').source)}>"


class _ProbeSample(dict):
    """A dict sample whose members are looked up as the pipeline would hold them."""

    def __init__(self, resolve: Callable[[str], Any], items: Dict[str, Any]):
        super().__init__(items)
        self._resolve = resolve

    def __missing__(self, key: str) -> Any:
        value = self._resolve(key)
        self[key] = value
        return value


def see_through(f: Any, recipe: Recipe, state: str) -> Any:
    """What `f` returns for a sample, in fields: a list (a tuple sample) or a dict of
    Field. `f` runs once on stand-ins under fastload's tracer (fastload/trace/):
    the image is a traced image (a transform fastload maps is intercepted where it enters
    it), every other field a `_Stand` that may only be passed on. NotMapped when `f` does
    anything else with them, draws random numbers outside the transforms, raises, or
    returns something that is not such a field."""
    patched, Call, TracedImage, TracedOutput, local, Stop, rng_state, rng_moved, rng_restore, where_tb = (
        trace.tracing_patches, trace.TracedCall, trace.TracedImage, trace.TracedOutput, trace.thread_state,
        trace.StopTrace, trace.global_rng_state, trace.global_rng_moved, trace.global_rng_restore,
        trace.where_in_traceback)
    if not trace.enabled():
        raise NotMapped(f"{trace.TRACE_ENV}=0 turns the tracer off")
    call = Call()
    images: Dict[int, Field] = {}

    def stand(field_: Field) -> Any:
        if field_.kind == "image" and not field_.fns:
            image = TracedImage(call, "<webdataset image>", "RGB")  # decode('pil'...): RGB, as the engine's
            images[id(image)] = field_
            return image
        return _Stand(field_)

    if state == "tuples":
        probe: Any = tuple(stand(f_) for f_ in recipe.tuple_fields)
    else:
        def resolve(name: str) -> Any:
            return stand(lookup(recipe, name, NotMapped))

        probe = _ProbeSample(resolve, {k: stand(v) for k, v in recipe.dict_fields.items()})
    before = rng_state()
    local.call = call
    try:
        with patched():
            result = f(probe)
    except Stop:
        why = call.problem.why if call.problem else "stopped"
        raise NotMapped(f"{why} at {call.problem.where if call.problem else '?'}") from None
    except NotMapped:
        raise
    except Exception as error:  # noqa: BLE001 - the user's code raised on the stand-ins: not followed
        raise NotMapped(f"raised {type(error).__name__}: {error} at {where_tb(error.__traceback__)}") from None
    finally:
        local.call = None
        moved = rng_moved(before)
        rng_restore(before)
    if moved:
        raise NotMapped(f"draws random numbers outside the transforms ({', '.join(moved)})")
    if len(call.outputs) > 1:
        raise NotMapped(f"calls transforms {len(call.outputs)} times per sample (one call is followed)")

    def field_of(value: Any) -> Field:
        if isinstance(value, _Stand):
            return object.__getattribute__(value, "field")
        if type(value) is TracedImage and id(value) in images:
            return images[id(value)]
        if type(value) is TracedOutput and id(value.image) in images:
            base = images[id(value.image)]
            return replace(base, fns=base.fns + (value.transform,))
        raise NotMapped(f"returns a {type(value).__name__} (followed: the sample's fields passed on as they are, "
                        "the image through one transform fastload maps, in a flat tuple, list or dict)")

    if type(result) in (tuple, list):
        return [field_of(v) for v in result]
    if type(result) is dict:
        return {k: field_of(v) for k, v in result.items()}
    raise NotMapped(f"returns a {type(result).__name__} (followed: a flat tuple, list or dict of the sample's fields)")
