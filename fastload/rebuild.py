"""A fastload loader that a framework rebuilds stays fastload's, with its extras.

Accelerate's `prepare()` and `skip_first_batches()` (a resumed Trainer epoch goes through
it) do not keep the loader they are given: they read torch's arguments off it (dataset,
collate_fn, num_workers, ...) and build a new loader over the same dataset object with a
sharded (or skipping) batch_sampler, through the DataLoader class Accelerate bound at
import. Under `fastload.patch()` that class is fastload's, so the rebuilt loader runs the
batch_sampler natively; without the patch, the name is bound to a builder that makes a
fastload loader over the dataset of a live fastload loader (torch's over any other).
Either way the rebuilt loader also keeps the extras of the fastload loader it replaces
(device, dtype, seed, decode_on, ...), which torch's arguments cannot carry.

- `offer(loader)`: every fastload loader, when built, becomes the template of its
  dataset object (the newest one wins).
- `extras_for(dataset, given)`: the template's extras that `given` does not name, for a
  loader built over that dataset object (the patched class and the builder ask).
- `before_accelerate_prepare(loader)`: Accelerate is about to rebuild the loader: without
  the patch, Accelerate's name for torch's class is bound to the builder from then on
  (`bind_accelerate`; the patch and unpatch() put their own class there instead).
- `Rebuildable`: fastload.DataLoader's base for what frameworks ask a loader about
  (Accelerate: `_is_accelerate_prepared`, answered by before_accelerate_prepare).

Templates are held weakly (a template dies with its loader) and match by identity of the
dataset object, never by equality.

Example:
    >>> import torch
    >>> from fastload import DataLoader
    >>> ds = torch.utils.data.TensorDataset(torch.arange(4.0))
    >>> loader = DataLoader(ds, dtype=torch.float16, seed=3)  # (held weakly: keep a reference)
    >>> offer(loader); sorted(extras_for(ds, {"seed": 1}).items())[:3]
    [('accelerate', 'auto'), ('dct_scaling', True), ('decode_on', 'auto')]
    >>> extras_for(ds, {})["dtype"], extras_for(ds, {"seed": 1}).get("seed")
    (torch.float16, None)
"""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from typing import Any, Dict, Mapping

# fastload.DataLoader's keyword-only extras a rebuilt loader takes from its template
# (`exact` is the old spelling of dct_scaling, so it is not carried twice).
EXTRAS = ("device", "dtype", "memory_format", "prefetch_to_device", "accelerate", "decode_on", "on_error",
          "distributed", "uneven", "seed", "dct_scaling", "tail_on", "trace")

_lock = threading.Lock()
_templates: Dict[int, "weakref.ref[Any]"] = {}  # id(dataset) -> the loader offered for it
_warned = False


def offer(loader: Any) -> None:
    """Makes `loader` the template of loaders later built over its dataset object."""
    key = id(loader.dataset)

    # (the lock and the table bound here: a loader collected at interpreter exit calls this
    # after the module's globals are cleared)
    def forget(_: Any, key: int = key, lock: Any = _lock, templates: Dict[int, Any] = _templates) -> None:
        with lock:
            if templates.get(key) is ref:
                del templates[key]

    ref = weakref.ref(loader, forget)
    with _lock:
        _templates[key] = ref


def template_of(dataset: Any) -> Any:
    """The live fastload loader offered last for this dataset object, or None."""
    with _lock:
        ref = _templates.get(id(dataset))
    template = ref() if ref is not None else None
    return template if template is not None and template.dataset is dataset else None


def extras_for(dataset: Any, given: Mapping[str, Any]) -> Dict[str, Any]:
    """The extras of the template offered for this dataset object (none: {}), less those
    named in `given` (what the new loader's caller passed wins)."""
    template = template_of(dataset)
    if template is None:
        return {}
    extras = {name: getattr(template, name) for name in EXTRAS if name not in given and hasattr(template, name)}
    if "seed" in extras and extras["seed"] is None:
        # The augmentation seed the template drew: the rebuilt loader (for the rest of an
        # epoch, say) draws the same random parameters for the same samples.
        extras["seed"] = template.state_dict().get("native_seed")
    return extras


def before_accelerate_prepare(loader: Any) -> bool:
    """What a fastload loader answers when Accelerate asks `_is_accelerate_prepared`: False
    (Accelerate then shards it, places its batches and tracks its end, as for any loader),
    after offering it as the template of the loader Accelerate builds in its place.

    Without fastload.patch(), Accelerate builds that loader through torch's class (the
    name accelerate.data_loader.DataLoader): that name is bound, for the rest of the
    process, to a builder (`_RebuildOver`) that makes a fastload loader over a template's
    dataset and torch's over any other, so that skip_first_batches later (a resumed
    epoch) builds fastload's again. Where that cannot be done (Accelerate without that
    name, or another class under it), a warning, once per process, says how to keep
    fastload.
    """
    global _warned
    offer(loader)
    bind_accelerate()
    module = sys.modules.get("accelerate.data_loader")
    bound = getattr(module, "DataLoader", None)
    if bound is None or _is_fastload(bound) or _RebuildOver in getattr(bound, "__mro__", ()):
        return False  # not imported (nothing to rebuild), patched, or the builder: the rebuild is fastload's
    if not _warned:
        _warned = True
        warnings.warn(
            "fastload.DataLoader: accelerate's prepare() rebuilds this loader over "
            f"{getattr(bound, '__qualname__', bound)!r}, not a fastload loader, so the prepared loader runs "
            f"without fastload's native path or extras ({loader.path.split(':')[0]} here). Call fastload.patch() "
            "before accelerator.prepare(), or run the script with `python -m fastload run SCRIPT.py` "
            "(docs/frameworks.md).", UserWarning, stacklevel=4)
    return False


def bind_accelerate() -> None:
    """Binds accelerate.data_loader.DataLoader, where it is torch's class, to `_RebuildOver`
    (nothing when Accelerate is not imported)."""
    module = sys.modules.get("accelerate.data_loader")
    bound = getattr(module, "DataLoader", None)
    if isinstance(bound, type) and bound.__module__ == "torch.utils.data.dataloader" and bound.__name__ == "DataLoader":
        setattr(module, "DataLoader", _RebuildOver.bound_to(module, bound))


def unbind_accelerate() -> None:
    """Puts torch's class back under accelerate.data_loader.DataLoader where bind_accelerate() bound it."""
    module = sys.modules.get("accelerate.data_loader")
    bound = getattr(module, "DataLoader", None)
    if _RebuildOver in getattr(bound, "__mro__", ()) and bound is not _RebuildOver:
        setattr(module, "DataLoader", bound.torch_class)


class _TorchInstances(type):
    """isinstance/issubclass against a _RebuildOver answer as against torch's class."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.torch_class)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.torch_class)


class _RebuildOver(metaclass=_TorchInstances):
    """Stands for torch's DataLoader in Accelerate's module: a loader built through it over
    the dataset object of a live fastload loader (its template: the one built last over
    that object) is a fastload loader with the template's extras (prepare()'s rebuild,
    skip_first_batches' one, a resumed Trainer epoch's); any other loader is torch's, as
    Accelerate built it before."""

    module: Any = None
    torch_class: Any = None

    @classmethod
    def bound_to(cls, module: Any, torch_class: type) -> type:
        return type("DataLoader", (cls,), {"module": module, "torch_class": torch_class,
                                           "__module__": __name__})

    def __new__(cls, dataset: Any, *args: Any, **kwargs: Any) -> Any:
        template = template_of(dataset)
        if template is None:
            return cls.torch_class(dataset, *args, **kwargs)
        fastload_class = next(c for c in type(template).__mro__ if _is_fastload_loader(c))
        return fastload_class(dataset, *args, **{**extras_for(dataset, kwargs), **kwargs})


def _is_fastload_loader(cls: Any) -> bool:
    """cls is fastload.DataLoader (named: this module sits under fastload.loader)."""
    return cls.__module__ == "fastload.loader" and cls.__name__ == "DataLoader"


def _is_fastload(cls: Any) -> bool:
    """cls is fastload.DataLoader or a subclass (fastload.patch's PatchedDataLoader)."""
    return any(_is_fastload_loader(base) for base in getattr(cls, "__mro__", ()))


class Rebuildable:
    """What frameworks ask a loader before they rebuild it; a base of fastload.DataLoader.

    Accelerate's prepare() reads `_is_accelerate_prepared` first (True: it keeps the loader
    as it is) and sets it on what prepare() returned. A fastload loader answers False
    (Accelerate shards it, places its batches and tracks its end, as for any loader) after
    offering itself as the template of the rebuild (before_accelerate_prepare).
    """

    @property
    def _is_accelerate_prepared(self) -> bool:
        marked = self.__dict__.get("_accelerate_prepared")
        return marked if marked is not None else before_accelerate_prepare(self)

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:
        self.__dict__["_accelerate_prepared"] = value
