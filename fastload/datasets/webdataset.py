"""A webdataset pipeline, read back stage by stage, run on fastload's tar-shard engine.

`fastload.DataLoader(wds.WebDataset(urls, ...).shuffle(1000).decode("pil")
.to_tuple("jpg", "cls").map_tuple(transform, int), batch_size=64)` is an IterableDataset:
left as it is, torch's machinery iterates it (one Python sample at a time). Its stage list
(`DataPipeline.pipeline`) says exactly what it does, so it is read back, never guessed:
each stage is a webdataset object (a shard list, an opener), one of its functions
(`split_by_node`, `split_by_worker`, ...) or a `FilterFunction` holding the function of a
`pipelinefilter` (`_shuffle`, `_decode`, `_to_tuple`, ...) with its arguments (`.f`,
`.args`, `.kw`). A pipeline built only of the stages below becomes `WebDatasetSamples`, a
map-style dataset over the same shards (fastload.TarShards' member index) whose sample i
is what the pipeline yields for that member, and whose compat analysis is a SampleIndex +
one transform pipeline: the engine, the order, resume, DDP and stats run it unchanged.

Mapped stages:

- shards: a brace pattern, a list, "::"-lists; local paths, file://, http(s):// and
  fsspec URLs as fastload.TarShards reads them (remote ones are downloaded once into its
  cache); `pipe:<command>` runs the command once and caches its output the same way;
- `shardshuffle=`, `shuffle(n)`, `detshuffle`: a global shuffle of every sample through
  the member index (at least as random as a buffer of n: any sample can come next), drawn
  as the loader draws any order: torch's RandomSampler on one process (`torch.manual_seed`
  or `generator=`), (seed, epoch) under DDP; resumable mid-epoch;
- `split_by_node` / `single_node_only` / `split_by_worker` (`nodesplitter=`,
  `workersplitter=`): the loader's own DDP split (equal batch counts on every rank, no
  uneven-epoch hangs; `distributed=` and `uneven=` decide); engine threads, not worker
  processes, read the shards;
- `decode("pil" | "pilrgb" | "torchrgb8" | "torchrgb" | "torch")`, `decode()` with
  `wds.imagehandler(...)` and handlers of other extensions: the image as webdataset's
  ImageHandler makes it (the tensor modes: torchvision's PILToTensor / ToTensor first),
  `.cls` as int;
- `to_tuple`, `rename`, `map_dict`, `map_tuple` (the image's transform: what
  fastload.compat.torchvision maps natively, the rest as a Python tail; a label's function
  runs per sample in Python; `int` on an int label is left out);
- `map(f)` of the user's own function, seen through once with fastload's tracer
  (fastload/trace/): f runs on stand-ins, the image a traced image (a transform
  fastload maps is intercepted where the image enters it), every other field a stand-in
  that may only be passed on; f must return a flat tuple, list or dict of those (the
  image's transform output among them) and draw no random numbers outside the
  transforms. A function that computes with a field (`s["cls"] + 1`), reads the image
  (`.crop`, `.size`), or returns anything else is not followed, and the reason says what
  it did and where;
- `select(predicate)` over the label and key fields: evaluated once per sample when the
  loader is built;
- `batched(n)` last: the batch size (the loader's batch_size must be None, as with
  wds.WebLoader), `partial=False` is drop_last;
- `with_epoch(n)` (n items of the pipeline per process and epoch: samples, or batches
  after `batched`) and `repeat(k)`: an epoch of that many samples per rank, the member
  index repeated; shorter than one pass over the shards is not mapped (the loader's epoch
  always covers the whole index).

Fields: the image (jpg, jpeg, png, webp, ppm, bmp, tiff, gif, as TarShards reads them),
`cls` (an int), `__key__`, `__url__`, `__local_path__`. A sample holding other members in
a dict output, or a field fastload's index does not keep (json, txt, ...), is not mapped.
Anything else (an unknown stage, a map function that computes with a field, a predicate
that reads the image, a field the index does not keep) leaves the pipeline on the generic
path, `loader.path` naming the stage and where it was built ("generic: webdataset pipeline
stage map (train.py:42) is not mapped: ...").

`wds.WebLoader` is a loader itself (a torch DataLoader in its first stage): pass the
dataset it wraps to fastload.DataLoader in its place (`fastload.DataLoader(ds,
batch_size=None)` for a pipeline ending in `batched(n)`).

Example:
    >>> import webdataset as wds
    >>> reason = not_mapped(wds.DataPipeline(wds.SimpleShardList(["a.tar"]), wds.tarfile_to_samples(),
    ...                                       wds.slice(10)))
    >>> reason.split(": ")[0]
    'webdataset pipeline stage islice (itertools) is not mapped'
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import subprocess
import sys
import urllib.parse
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload import trace
from fastload.compat.conversion import AnalysedSource, Analysis
from fastload.datasets.tar import TarShards
from fastload.source.index import FlatStrings, SampleIndex

_IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "ppm", "bmp", "tiff", "gif")  # what TarShards reads as images
_META = ("__key__", "__url__", "__local_path__")
# webdataset image decodes and the torchvision transform that turns its PIL RGB image into
# the same value ("" : none, the PIL image itself).
_DECODES = {"pil": "", "pilrgb": "", "torchrgb8": "PILToTensor", "torchrgb": "ToTensor", "torch": "ToTensor"}
_FIX = ("use the stages fastload maps (see fastload/datasets/webdataset.py), or leave the pipeline as it is "
        "(it runs on torch's machinery)")


class _NotMapped(Exception):
    """A stage, field or argument of a webdataset pipeline that fastload does not map."""


def is_pipeline(obj: Any) -> bool:
    """True for a webdataset DataPipeline (WebDataset, DataPipeline, WebLoader, FluidWrapper),
    told by its class's module: webdataset itself is never imported to find out."""
    return any(c.__module__.split(".")[0] == "webdataset" for c in type(obj).__mro__) \
        and isinstance(getattr(obj, "pipeline", None), list)


# ---- reading the stage list -------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One value of a sample: where it comes from and the callables applied to it."""

    source: Tuple[str, ...]  # alternatives: image extensions ("jpg", "png"), ("cls",) or a meta name
    fns: Tuple[Any, ...] = ()

    @property
    def kind(self) -> str:
        if self.source[0] in _META:
            return self.source[0]
        return "cls" if self.source == ("cls",) else "image"


@dataclass
class Recipe:
    """What a pipeline does, as fastload runs it."""

    urls: List[str]
    shuffle: bool = False
    decode: Optional[str] = None  # webdataset imagespec, or None (bytes)
    tuple_fields: Optional[List[Field]] = None  # a tuple sample; None: a dict sample
    dict_fields: Dict[str, Field] = field(default_factory=dict)  # explicit names of a dict sample
    dict_rest: bool = True  # the dict also holds every other member of the sample
    removed: set = field(default_factory=set)  # members renamed away (not in the dict any more)
    predicates: List[Tuple[Any, str, bool]] = field(default_factory=list)  # (predicate, where, after decode)
    batch: Optional[Tuple[int, bool]] = None  # (n, partial)
    epoch_items: Optional[int] = None  # with_epoch / repeat: items per process and epoch
    repeat_passes: Optional[int] = None
    stages: List[str] = field(default_factory=list)

    def fields(self) -> List[Field]:
        return list(self.tuple_fields) if self.tuple_fields is not None else list(self.dict_fields.values())


def _name_of(obj: Any) -> str:
    f = getattr(obj, "f", None)
    if f is not None and hasattr(obj, "args"):
        if obj.args and _wds(obj.args[0], "autodecode", "Decoder"):
            return "decode"  # FluidInterface.decode() is map(Decoder(...))
        return getattr(f, "__name__", type(f).__name__).lstrip("_")
    return getattr(obj, "__name__", type(obj).__name__)


def _where(obj: Any) -> str:
    """file:line of the code a stage runs: a user's function given to a webdataset filter
    (map's f, select's predicate) where they wrote it, else the stage's own function."""
    target = obj
    f = getattr(obj, "f", None)
    if f is not None and hasattr(obj, "args"):
        args = obj.args or tuple(v for k, v in obj.kw.items() if k in ("f", "predicate"))
        user = args[0] if args and callable(args[0]) and not _is_wds(args[0]) else None
        target = user if user is not None else f
    target = inspect.unwrap(target) if inspect.isfunction(target) else target
    code = getattr(target, "__code__", None)
    if code is None:
        code = getattr(getattr(type(target), "__call__", None), "__code__", None)
    if code is None:  # a builtin or C class (itertools.islice): its module
        module = getattr(target, "__module__", None) if inspect.isclass(target) else None
        return module or type(target).__module__
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def _is_wds(obj: Any) -> bool:
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    return getattr(target, "__module__", "").split(".")[0] == "webdataset"


def _refuse(stage: Any, why: str) -> _NotMapped:
    if stage is None:  # (inside a map's function: the map stage names itself)
        return _NotMapped(why)
    return _NotMapped(f"webdataset pipeline stage {_name_of(stage)} ({_where(stage)}) is not mapped: {why}")


def _wds(obj: Any, module: str, name: str) -> bool:
    """obj is webdataset's `module.name` (a function or a class instance)."""
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    return getattr(target, "__module__", "") == f"webdataset.{module}" and getattr(target, "__name__", "") == name


def _filter(stage: Any, module: str, name: str) -> bool:
    f = getattr(stage, "f", None)
    return f is not None and hasattr(stage, "args") and hasattr(stage, "kw") and _wds(f, module, name)


def _continues(handler: Any) -> bool:
    """A webdataset handler other than reraise_exception (the default): it drops samples."""
    return handler is not None and not (_is_wds(handler) and getattr(handler, "__name__", "") == "reraise_exception")


def read_pipeline(pipeline: Any) -> Recipe:
    """The Recipe of a webdataset pipeline, else _NotMapped naming the first stage that is not."""
    if type(pipeline).__name__ == "WebLoader":
        raise _NotMapped("a wds.WebLoader is a loader itself (a torch DataLoader runs its dataset): pass the dataset "
                        "it wraps to fastload.DataLoader in its place (batch_size=None for a pipeline ending in "
                        "batched(n))")
    stages = list(pipeline.pipeline)
    if not stages:
        raise _NotMapped("an empty webdataset pipeline")
    recipe = Recipe(urls=[])
    source = stages[0]
    if _wds(source, "shardlists", "SimpleShardList"):
        recipe.urls = [os.fspath(u) for u in source.urls]
        if source.seed is not None:
            recipe.shuffle = True
    else:
        raise _refuse(source, "fastload reads a fixed shard list (wds.SimpleShardList: a brace pattern or a list); "
                      "resampled or directory/yaml shard sources are not mapped")
    state = "urls"  # urls -> streams -> samples (dicts) -> tuples -> batches
    for stage in stages[1:]:
        recipe.stages.append(_label(stage, state))
        if state == "batches":
            raise _refuse(stage, "a stage after batched(n) (fastload batches last)")
        if state in ("urls", "streams") and _filter(stage, "filters", "_shuffle"):
            recipe.shuffle |= _shuffles(stage)
            continue
        if state == "urls":
            if any(_wds(stage, "shardlists", n) for n in ("split_by_node", "single_node_only", "split_by_worker")):
                continue  # the loader's DDP split; engine threads read the shards
            if _wds(stage, "filters", "detshuffle"):
                recipe.shuffle |= int(getattr(stage, "bufsize", 1000) or 0) > 1
                continue
            if _wds(stage, "cache", "StreamingOpen") or _wds(stage, "cache", "FileCache"):
                state = "streams"
                continue
            if _filter(stage, "tariterators", "tarfile_samples"):
                _check_expander(stage)
                state = "samples"
                continue
        if state == "streams":
            if _filter(stage, "tariterators", "tar_file_expander"):
                _check_expander(stage)
                continue
            if _filter(stage, "tariterators", "group_by_keys"):
                kw = stage.kw
                if kw.get("suffixes") is not None or kw.get("lcase", True) is not True or \
                        kw.get("keys", None) not in (None,) and not _wds(kw["keys"], "tariterators", "base_plus_ext"):
                    raise _refuse(stage, "group_by_keys with keys=, lcase= or suffixes= of its own")
                if _continues(kw.get("handler")):
                    raise _refuse(stage, "a handler that continues past errors; pass on_error='skip' to "
                                  "fastload.DataLoader instead")
                state = "samples"
                continue
        if state in ("samples", "tuples"):
            if _wds(stage, "compat", "check_empty"):
                continue
            if _filter(stage, "filters", "_shuffle"):
                recipe.shuffle |= _shuffles(stage)
                continue
            if _wds(stage, "filters", "detshuffle"):
                recipe.shuffle |= int(getattr(stage, "bufsize", 1000) or 0) > 1
                continue
            if _filter(stage, "filters", "_batched"):
                _batched(stage, recipe)
                state = "batches"
                continue
            if state == "samples":
                if _decode_stage(stage, recipe):
                    continue
                if _filter(stage, "filters", "_to_tuple"):
                    recipe.tuple_fields = _to_tuple(stage, recipe)
                    state = "tuples"
                    continue
                if _filter(stage, "filters", "_rename"):
                    _rename(stage, recipe)
                    continue
                if _filter(stage, "filters", "_map_dict"):
                    _map_dict(stage, recipe)
                    continue
                if _filter(stage, "filters", "_select"):
                    _check_handler(stage)
                    recipe.predicates.append((stage.args[0] if stage.args else stage.kw["predicate"], _where(stage),
                                              recipe.decode is not None))
                    continue
            else:
                if _filter(stage, "filters", "_map_tuple"):
                    _check_handler(stage)
                    fns = [f for f in stage.args]
                    for i, f in enumerate(fns[:len(recipe.tuple_fields)]):
                        if f is not None:
                            recipe.tuple_fields[i] = replace(recipe.tuple_fields[i],
                                                             fns=recipe.tuple_fields[i].fns + (f,))
                    continue
            if _filter(stage, "filters", "_map"):
                state = _map(stage, recipe, state)
                continue
        raise _refuse(stage, f"no equivalent on fastload's tar-shard engine ({_FIX})")
    recipe.stages = [name for name in recipe.stages if name]
    if state not in ("samples", "tuples", "batches"):
        raise _NotMapped("a webdataset pipeline that does not read tar samples (no tarfile_to_samples stage)")
    _epoch(pipeline, recipe)
    if recipe.decode is None and any(f.kind == "image" for f in _output_fields(recipe)):
        raise _NotMapped("webdataset pipeline: the image reaches the sample undecoded (bytes): add "
                        "decode('pil') (fastload decodes the image itself)")
    return recipe


_PLUMBING = ("single_node_only", "split_by_worker", "StreamingOpen", "FileCache", "tar_file_expander",
             "group_by_keys", "check_empty", "tarfile_samples")


def _label(stage: Any, state: str) -> str:
    """How loader.path names a stage ("" for webdataset's plumbing)."""
    name = _name_of(stage)
    if name in _PLUMBING:
        return ""
    if name == "shuffle" and getattr(stage, "args", None) is not None:
        size = stage.args[0] if stage.args else stage.kw.get("bufsize", 1000)
        if not size or int(size) <= 1:
            return ""
        return f"shardshuffle({size})" if state == "urls" else f"shuffle({size})"
    if name == "batched":
        return f"batched({(stage.args or (stage.kw.get('batchsize', 20),))[0]})"
    return name


def _shuffles(stage: Any) -> bool:
    """A _shuffle stage reorders: a buffer of more than one (WebDataset(shardshuffle=False)
    appends one of size False, which keeps the order)."""
    bufsize = stage.args[0] if stage.args else stage.kw.get("bufsize", 1000)
    return bool(bufsize) and int(bufsize) > 1


def _check_handler(stage: Any) -> None:
    if _continues(stage.kw.get("handler")):
        raise _refuse(stage, "a handler that drops samples that raise; pass on_error='skip' to fastload.DataLoader "
                      "instead")


def _check_expander(stage: Any) -> None:
    kw = stage.kw
    if kw.get("select_files") is not None or kw.get("rename_files") is not None:
        raise _refuse(stage, "select_files= / rename_files= (fastload's index groups every member by its name)")
    if _continues(kw.get("handler")):
        raise _refuse(stage, "a handler that continues past errors; pass on_error='skip' to fastload.DataLoader "
                      "instead")


def _decode_stage(stage: Any, recipe: Recipe) -> bool:
    """Reads a decode stage into the recipe; False when `stage` is not one."""
    if _filter(stage, "filters", "_decode"):
        _check_handler(stage)
        args, kw = stage.args, {k: v for k, v in stage.kw.items() if k != "handler"}
        handlers = [_imagehandler(a) if isinstance(a, str) else a for a in args]
    elif _filter(stage, "filters", "_map") and stage.args and _wds(stage.args[0], "autodecode", "Decoder"):
        _check_handler(stage)
        decoder = stage.args[0]
        handlers, kw = _user_handlers(decoder, stage), {}
        if decoder.only is not None:
            kw["only"] = decoder.only
    else:
        return False
    if recipe.decode is not None:
        raise _refuse(stage, "a second decode stage")
    if kw.get("pre") is not None or kw.get("post") is not None:
        raise _refuse(stage, "decode(pre=..., post=...) handlers of its own")
    only = kw.get("only")
    if isinstance(only, str):
        only = only.split()
    images = [h for h in handlers if _wds(h, "autodecode", "ImageHandler")]
    if len(images) != 1:
        raise _refuse(stage, "decode() without exactly one image handler ('pil', 'torchrgb8', ...; fastload decodes "
                      "the image itself)")
    for h in handlers:
        if h in images:
            continue
        exts = _extension_handler(h)
        if exts is None:
            raise _refuse(stage, f"the decode handler {_name_of(h)} ({_where(h)}) is a function of its own "
                          "(fastload cannot tell which members it decodes)")
        if set(exts) & (set(_IMAGE_EXTS) | {"cls"}):
            raise _refuse(stage, f"a decode handler of its own for {'/'.join(sorted(exts))} members")
    handler = images[0]
    if handler.imagespec not in _DECODES:
        raise _refuse(stage, f"decode({handler.imagespec!r}): the native pipeline makes RGB PIL images or "
                      f"tensors; mapped: {', '.join(repr(k) for k in _DECODES)}")
    missing = [e for e in _IMAGE_EXTS if e not in handler.extensions]
    if missing and any(e in ("jpg", "jpeg", "png", "webp") for e in missing):
        raise _refuse(stage, f"an image handler that leaves {'/'.join(missing)} undecoded")
    if only is not None and not {"cls"} <= set(only):
        raise _refuse(stage, "decode(only=...) leaving the .cls label as bytes")
    recipe.decode = handler.imagespec
    recipe.stages[-1] = f"decode({handler.imagespec!r})"
    return True


def _imagehandler(spec: str) -> Any:
    from webdataset import autodecode

    return autodecode.imagehandler(spec)


def _user_handlers(decoder: Any, stage: Any) -> List[Any]:
    from webdataset import autodecode

    handlers = list(decoder.handlers)
    pre, post = list(autodecode.default_pre_handlers), list(autodecode.default_post_handlers)
    if handlers[:len(pre)] != pre or (post and handlers[-len(post):] != post):
        raise _refuse(stage, "a Decoder with pre/post handlers of its own")
    return handlers[len(pre):len(handlers) - len(post)]


def _extension_handler(h: Any) -> Optional[List[str]]:
    """The extensions of a wds.handle_extension(...) handler, or None for anything else."""
    if isinstance(h, functools.partial) and _wds(h.func, "autodecode", "call_extension_handler"):
        return [e.split(".")[-1] for e in h.keywords.get("extensions", [])]
    return None


def _field(name: str, stage: Any) -> Field:
    alternatives = tuple(name.split(";"))
    if len(alternatives) == 1 and alternatives[0] in _META + ("cls",):
        return Field(alternatives)
    if all(a in _IMAGE_EXTS for a in alternatives):
        return Field(alternatives)
    raise _refuse(stage, f"the field {name!r}: fastload's index keeps the image ({'/'.join(_IMAGE_EXTS)}), "
                  f"the .cls label and {', '.join(_META)}")


def _lookup(recipe: Recipe, name: Any, stage: Any) -> Field:
    if isinstance(name, (list, tuple)) and all(isinstance(n, str) for n in name):
        name = ";".join(name)  # (getfirst takes a list of alternatives too)
    for alternative in name.split(";"):
        if alternative in recipe.dict_fields:
            return recipe.dict_fields[alternative]
    alternatives = [a for a in name.split(";") if a not in recipe.removed]
    if not recipe.dict_rest or not alternatives:
        raise _refuse(stage, f"the field {name!r} is not in the sample")
    return _field(";".join(alternatives), stage)


def _to_tuple(stage: Any, recipe: Recipe) -> List[Field]:
    _check_handler(stage)
    if stage.kw.get("missing_is_error", True) is not True or stage.kw.get("none_is_error") not in (None, True):
        raise _refuse(stage, "missing_is_error=False / none_is_error=False (samples without a field)")
    args = stage.args
    if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
        args = tuple(args[0].split())
    return [_lookup(recipe, a, stage) for a in args]


def _rename(stage: Any, recipe: Recipe) -> None:
    _check_handler(stage)
    keep = stage.kw.get("keep", True)
    names = {k: v for k, v in stage.kw.items() if k not in ("handler", "keep")}
    new = {k: _lookup(recipe, v, stage) for k, v in names.items()}
    if keep:
        replaced = {x for v in names.values() for x in (v.split(";") if isinstance(v, str) else v)}
        recipe.dict_fields = {**{k: f for k, f in recipe.dict_fields.items() if k not in replaced}, **new}
        recipe.removed |= replaced - set(new)
    else:
        recipe.dict_fields, recipe.dict_rest = new, False


def _map_dict(stage: Any, recipe: Recipe) -> None:
    _check_handler(stage)
    for k, f in stage.kw.items():
        if k == "handler":
            continue
        current = _lookup(recipe, k, stage)
        recipe.dict_fields[k] = replace(current, fns=current.fns + (f,))


def _map(stage: Any, recipe: Recipe, state: str) -> str:
    """A map(f) of the user's own function, seen through (see `_see_through`): the state
    after it ("tuples" or "samples" for a dict)."""
    _check_handler(stage)
    f = stage.args[0] if stage.args else stage.kw.get("f")
    try:
        result = _see_through(f, recipe, state)
    except _NotMapped as why:
        raise _refuse(stage, f"map({_name_of(f)}): {why}") from None
    if isinstance(result, dict):
        if state == "samples":  # webdataset's map keeps the key of a dict sample
            result.setdefault("__key__", Field(("__key__",)))
        recipe.tuple_fields, recipe.dict_fields, recipe.dict_rest = None, result, False
        return "samples"
    recipe.tuple_fields = list(result)
    return "tuples"


class _Stand:
    """Stands for one field of the sample while a map's function is seen through: it may
    only be passed on as it is (any use of it could depend on its value)."""

    __slots__ = ("field",)

    def __init__(self, field_: Field):
        object.__setattr__(self, "field", field_)

    def _used(self, *args: Any, **kwargs: Any) -> Any:
        raise _NotMapped(f"the function uses the field {';'.join(object.__getattribute__(self, 'field').source)!r} "
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


def _see_through(f: Any, recipe: Recipe, state: str) -> Any:
    """What `f` returns for a sample, in fields: a list (a tuple sample) or a dict of
    Field. `f` runs once on stand-ins under fastload's tracer (fastload/trace/):
    the image is a traced image (a transform fastload maps is intercepted where it enters
    it), every other field a `_Stand` that may only be passed on. _NotMapped when `f` does
    anything else with them, draws random numbers outside the transforms, raises, or
    returns something that is not such a field."""
    patched, Call, TracedImage, TracedOutput, local, Stop, rng_state, rng_moved, rng_restore, where_tb = (
        trace.tracing_patches, trace.TracedCall, trace.TracedImage, trace.TracedOutput, trace.thread_state,
        trace.StopTrace, trace.global_rng_state, trace.global_rng_moved, trace.global_rng_restore,
        trace.where_in_traceback)
    if not trace.enabled():
        raise _NotMapped(f"{trace.TRACE_ENV}=0 turns the tracer off")
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
            return stand(_lookup(recipe, name, None))

        probe = _ProbeSample(resolve, {k: stand(v) for k, v in recipe.dict_fields.items()})
    before = rng_state()
    local.call = call
    try:
        with patched():
            result = f(probe)
    except Stop:
        why = call.problem.why if call.problem else "stopped"
        raise _NotMapped(f"{why} at {call.problem.where if call.problem else '?'}") from None
    except _NotMapped:
        raise
    except Exception as error:  # noqa: BLE001 - the user's code raised on the stand-ins: not followed
        raise _NotMapped(f"raised {type(error).__name__}: {error} at {where_tb(error.__traceback__)}") from None
    finally:
        local.call = None
        moved = rng_moved(before)
        rng_restore(before)
    if moved:
        raise _NotMapped(f"draws random numbers outside the transforms ({', '.join(moved)})")
    if len(call.outputs) > 1:
        raise _NotMapped(f"calls transforms {len(call.outputs)} times per sample (one call is followed)")

    def field_of(value: Any) -> Field:
        if isinstance(value, _Stand):
            return object.__getattribute__(value, "field")
        if type(value) is TracedImage and id(value) in images:
            return images[id(value)]
        if type(value) is TracedOutput and id(value.image) in images:
            base = images[id(value.image)]
            return replace(base, fns=base.fns + (value.transform,))
        raise _NotMapped(f"returns a {type(value).__name__} (followed: the sample's fields passed on as they are, "
                        "the image through one transform fastload maps, in a flat tuple, list or dict)")

    if type(result) in (tuple, list):
        return [field_of(v) for v in result]
    if type(result) is dict:
        return {k: field_of(v) for k, v in result.items()}
    raise _NotMapped(f"returns a {type(result).__name__} (followed: a flat tuple, list or dict of the sample's fields)")


def _batched(stage: Any, recipe: Recipe) -> None:
    args = dict(zip(("batchsize", "collation_fn", "partial"), stage.args))
    args.update(stage.kw)
    collation = args.get("collation_fn", None)
    from webdataset import filters

    if "collation_fn" in args and collation is not filters.default_collation_fn:
        raise _refuse(stage, "a collation_fn of its own (or listed(): lists, not batches)")
    n = int(args.get("batchsize", 20))
    if n < 1:
        raise _refuse(stage, f"batched({n})")
    recipe.batch = (n, bool(args.get("partial", True)))


def _epoch(pipeline: Any, recipe: Recipe) -> None:
    repetitions, nsamples = getattr(pipeline, "repetitions", 1), getattr(pipeline, "nsamples", -1)
    if repetitions == 1:
        return
    if repetitions == sys.maxsize:
        if nsamples is None or nsamples <= 0:
            raise _NotMapped("webdataset pipeline: repeat() without a length (an endless epoch; use with_epoch(n) or "
                            "the loader's epochs)")
        recipe.epoch_items = int(nsamples)
        return
    recipe.repeat_passes = int(repetitions)
    if nsamples is not None and nsamples > 0:
        raise _NotMapped(f"webdataset pipeline: repeat({repetitions}, nbatches={nsamples}) (a per-pass cut)")


def _output_fields(recipe: Recipe) -> List[Field]:
    """The fields of the pipeline's sample (a dict's other members: its image and .cls)."""
    out = recipe.fields()
    if recipe.tuple_fields is None and recipe.dict_rest:
        names = set(recipe.dict_fields)
        out += [Field(tuple(e for e in _IMAGE_EXTS if e not in recipe.removed and e not in names))]
    return out


def _read(pipeline: Any) -> Recipe:
    """read_pipeline, where an unexpected shape of a stage (another webdataset version, an
    argument of a type the walk does not know) is a reason, never a crash of the loader."""
    try:
        return read_pipeline(pipeline)
    except _NotMapped:
        raise
    except Exception as error:  # noqa: BLE001 - the pipeline itself still runs, on the generic path
        raise _NotMapped(f"webdataset pipeline: fastload could not read its stages ({type(error).__name__}: "
                        f"{error}; the walk follows webdataset 1.0.2's stages, this is {_version()})") from None


def _version() -> str:
    module = sys.modules.get("webdataset")
    return str(getattr(module, "__version__", "?"))


def not_mapped(pipeline: Any) -> Optional[str]:
    """Why `pipeline` stays on the generic path (its stage list alone), or None."""
    try:
        _read(pipeline)
    except _NotMapped as why:
        return str(why)
    return None


# ---- shards -------------------------------------------------------------------------------


def _local_shards(urls: Sequence[str], cache_dir: str) -> List[str]:
    """The URLs as TarShards takes them: a `pipe:` command's output cached once."""
    out = []
    for url in urls:
        if url.startswith("pipe:"):
            out.append(_piped(url, cache_dir))
        else:
            out.append(url)
    return out


def _piped(url: str, cache_dir: str) -> str:
    """Runs `pipe:<command>` once; its output, a tar, is cached under cache_dir/shards
    (keyed by the command: remove the file to run it again)."""
    from fastload.source.urls import cached_shard

    command = url[len("pipe:"):]

    def run(out) -> None:
        done = subprocess.run(command, shell=True, stdout=out, stderr=subprocess.PIPE)
        if done.returncode != 0:
            raise OSError(f"fastload: the shard command {command!r} exited with {done.returncode}: "
                          f"{done.stderr.decode('utf-8', 'replace')[-500:]}. Check the command (webdataset's pipe: URL).")

    return cached_shard(cache_dir, hashlib.sha1(url.encode("utf-8", "surrogateescape")).hexdigest()[:16] + "-pipe.tar",
                        run)


# ---- the map-style view -------------------------------------------------------------------




def _apply(fns: Sequence[Any], value: Any) -> Any:
    for f in fns:
        value = f(value)
    return value


def _label_fns(fns: Sequence[Any]) -> Tuple[Any, ...]:
    # int() of an int label is the label: dropped, so the index's labels stay the batch's.
    return tuple(f for f in fns if f is not int)


class WebDatasetSamples(AnalysedSource, torch.utils.data.Dataset):
    """A webdataset pipeline as a map-style dataset over the same shards.

    Sample i is what the pipeline yields for the i-th sample of its shards (fastload's
    member index, fastload.TarShards): the image decoded as the pipeline's decode() does,
    its transforms applied, the label an int from `.cls`, in the pipeline's structure
    (tuple or dict). fastload.DataLoader builds it from a pipeline it maps
    (`from_pipeline`) and runs it natively through its compat analysis; indexed directly,
    or on the generic path, it runs the pipeline's own callables per sample.

    Attributes:
        pipeline: the user's webdataset pipeline.
        recipe: what fastload read from its stages.
        shards: the fastload.TarShards holding the member index.
        rows: per sample of this view, its row in `shards.index` (a with_epoch longer
            than one pass repeats rows).

    Example:
        >>> import webdataset as wds                                            # doctest: +SKIP
        >>> ds = wds.WebDataset("train-{0..9}.tar", shardshuffle=100).decode("pil").to_tuple("jpg", "cls")  # doctest: +SKIP
        >>> view = WebDatasetSamples.from_pipeline(ds)                           # doctest: +SKIP
        >>> image, label = view[0]                                               # doctest: +SKIP
    """

    def __init__(self, pipeline: Any, recipe: Recipe, shards: Any, rows: np.ndarray, members: Dict[str, Any]):
        self.pipeline, self.recipe, self.shards = pipeline, recipe, shards
        self.rows = rows
        self._members = members  # per image row: {"ext": image ext}

    @classmethod
    def from_pipeline(cls, pipeline: Any, *, on_error: str = "raise", world_size: int = 1,
                      cache_dir: Optional[str] = None, recipe: Optional[Recipe] = None) -> "WebDatasetSamples":
        """The view of `pipeline` (its `recipe` when already read); _NotMapped when a stage or
        the shards' content is not mapped. A shard that cannot be read raises as
        fastload.TarShards does (on_error). Each shard's index is read once: its samples'
        members are checked as TarShards groups them (_checked_shards)."""
        from fastload.source.tar_index import default_cache_dir

        recipe = recipe if recipe is not None else _read(pipeline)
        cache = cache_dir or default_cache_dir()
        urls = _local_shards(recipe.urls, cache)
        shards = _checked_shards(urls, recipe, cache_dir=cache, on_error=on_error, progress=False)
        shards.urls = list(recipe.urls)  # as the pipeline names them (its __url__)
        exts = shards.exts
        rows = _keep(shards, recipe, shards.raw_labels)
        n = len(rows)
        if recipe.repeat_passes is not None:
            rows = np.tile(rows, recipe.repeat_passes)
        elif recipe.epoch_items is not None:
            per_item = recipe.batch[0] if recipe.batch else 1
            total = recipe.epoch_items * per_item * max(1, world_size)
            if total < n:
                raise _NotMapped(f"webdataset pipeline: with_epoch({recipe.epoch_items}) is "
                                f"{total} samples per epoch over {max(1, world_size)} rank(s), fewer than the "
                                f"shards' {n}: fastload's epochs each cover the whole index (drop with_epoch and "
                                "use the loader's epochs, or keep it on the generic path)")
            rows = np.resize(rows, total)
        return cls(pipeline, recipe, shards, rows.astype(np.int64), {"ext": exts})

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return (f"WebDatasetSamples({len(self.shards.urls)} shards, {len(self)} samples, "
                f"stages={' -> '.join(self.recipe.stages)})")

    # -- one sample, as the pipeline makes it (the generic path, and the reference) ----------
    def _value(self, f: Field, row: int, image: Callable[[], Any]) -> Any:
        kind = f.kind
        if kind == "image":
            value = image()
            return value if value is trace.SLOT else _apply(f.fns, value)  # the slot: the engine applied them
        if kind == "cls":
            return _apply(f.fns, int(self.shards.index.labels[row]))
        if kind == "__key__":
            return _apply(f.fns, self.shards.keys[row])
        url = self.shards.urls[int(self.shards.sample_shards[row])]
        if kind == "__url__":
            return _apply(f.fns, url)
        return _apply(f.fns, _local_path(url))

    def _structure(self, row: int, image: Callable[[], Any]) -> Any:
        recipe = self.recipe
        if recipe.tuple_fields is not None:
            return tuple(self._value(f, row, image) for f in recipe.tuple_fields)
        return {k: self._value(f, row, image) for k, f in self._dict_fields().items()}

    def _dict_fields(self) -> Dict[str, Field]:
        if not self.recipe.dict_rest:
            return self.recipe.dict_fields
        out = {"__key__": Field(("__key__",)), "__url__": Field(("__url__",))}
        out.update({"__local_path__": Field(("__local_path__",))} if self._has_local_path() else {})
        image_ext = self._members["ext"][0] if len(self._members["ext"]) else "jpg"
        out[image_ext] = Field((image_ext,))
        out["cls"] = Field(("cls",))
        out = {k: f for k, f in out.items() if k not in self.recipe.removed}
        out.update(self.recipe.dict_fields)
        return out

    def _has_local_path(self) -> bool:
        return bool(self.shards.urls) and _local_path(self.shards.urls[0]) is not None

    def __getitem__(self, i: int) -> Any:
        row = int(self.rows[i])

        def image() -> Any:
            from webdataset import autodecode

            data = self.shards.index.read(row)
            ext = self._members["ext"][row]
            return autodecode.ImageHandler(self.recipe.decode)("." + ext, data)

        return self._structure(row, image)

    # -- the compat analysis (the native and hybrid paths) ---------------------------------
    def image_transform(self) -> Any:
        """The image's transforms as one callable (webdataset's tensor decodes: torchvision's
        PILToTensor / ToTensor first), or None."""
        image = next(f for f in _output_fields(self.recipe) if f.kind == "image") \
            if any(f.kind == "image" for f in _output_fields(self.recipe)) else None
        first = _DECODES.get(self.recipe.decode or "", "")
        fns: List[Any] = list(image.fns) if image is not None else []
        if first:
            from torchvision import transforms as T

            fns.insert(0, getattr(T, first)())
        if not fns:
            return None
        if len(fns) == 1:
            return fns[0]
        from torchvision import transforms as T

        return T.Compose(fns)

    def analysis(self, wrapped: bool = False) -> Analysis:
        from fastload.compat.torchvision import flatten, split_transform

        out = Analysis(f"webdataset pipeline [{' -> '.join(self.recipe.stages)}]")
        if wrapped:
            return out.refuse("a webdataset pipeline inside a Subset or ConcatDataset",
                              "pass the pipeline to fastload.DataLoader itself")
        fields_ = list(_output_fields(self.recipe)) if self.recipe.tuple_fields is not None \
            else list(self._dict_fields().values())
        images = [f for f in fields_ if f.kind == "image"]
        if len(images) != 1:
            return out.refuse(f"{len(images)} images per sample (the engine makes one)", _FIX)
        transform = self.image_transform()
        if transform is None:
            return out.refuse("the image reaches the batch as a PIL image (no transform makes a tensor)", _FIX)
        out.transform = transform
        out.pipeline = split_transform(transform, to_run=True)
        out.wrappers = flatten(transform)[1]
        index = self.shards.index
        take = lambda a: a[self.rows]  # noqa: E731
        members = _take_strings(index.members, self.rows) if index.members is not None else None
        simple = self.recipe.tuple_fields is not None and len(fields_) == 2 and fields_[0].kind == "image" \
            and fields_[1].kind == "cls" and not _label_fns(fields_[1].fns)
        labels = take(index.labels) if simple else np.arange(len(self.rows), dtype=np.int64)
        out.index = SampleIndex(index.files, take(index.file_ids), take(index.offsets), take(index.sizes),
                                labels.astype(np.int64), members, remote=index.remote)
        if not simple:
            out.rebuild = self._rebuild
        return out

    def _rebuild(self, images: Any, rows: torch.Tensor) -> Any:
        """The batch of view samples `rows` (int64 [B]) as torch's default_collate makes it
        from the pipeline's samples, `images` (the engine's batch) in the image's place."""
        return trace.collated([self._structure(int(self.rows[r]), lambda: trace.SLOT) for r in rows.tolist()], images)


def _local_path(url: str) -> Optional[str]:
    parsed = urllib.parse.urlparse(url)
    return parsed.path if parsed.scheme in ("", "file") and not url.startswith("pipe:") else None


def _take_strings(strings: FlatStrings, rows: np.ndarray) -> FlatStrings:
    """strings[rows] as FlatStrings, without a Python string per row."""
    if len(rows) == len(strings) and np.array_equal(rows, np.arange(len(strings))):
        return strings
    starts, ends = strings.offsets[rows], strings.offsets[rows + 1]
    lengths = ends - starts
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # byte k of the result is byte k - offsets[j] + starts[j] of the source, j its string
    at = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    return FlatStrings(strings.data[at], offsets)


def _checked_shards(urls: List[str], recipe: Recipe, **kwargs: Any) -> Any:
    """fastload.TarShards over `urls` whose index pass also checks each sample's members
    for the pipeline (each shard's index read once): `exts` (per sample of the index, its
    image's extension) and `raw_labels` (its .cls text, when select() predicates need it)
    on the result; _NotMapped when a sample's members say the pipeline would see it
    otherwise (another image first among to_tuple's alternatives, no .cls, members of a
    dict output the index does not keep)."""
    return _CheckedShards(urls, recipe, **kwargs)


class _CheckedShards(TarShards):
    """fastload.TarShards checking each shard's samples for a webdataset pipeline as its
    index is read (see _checked_shards)."""

    def __init__(self, urls: List[str], recipe: Recipe, **kwargs: Any):
        self.recipe = recipe
        self.exts: List[str] = []
        self.raw_labels: List[bytes] = []
        super().__init__(urls, **kwargs)

    def _grouped(self, url: str, record: Dict[str, Any], groups: Dict[str, Dict[str, int]], keys: List[str]) -> None:
        shard = self.recipe.urls[len(self.index_status) - 1]  # (this shard's status was just appended)
        _check_shard(self.recipe, shard, record, groups, keys, self.exts, self.raw_labels)


def _check_shard(recipe: Recipe, url: str, record: Dict[str, Any], groups: Dict[str, Dict[str, int]],
                 keys: List[str], exts: List[str], raw_labels: List[bytes]) -> None:
    """Checks the samples `keys` of one shard (their image and label members grouped by
    TarShards: `groups`), appending each one's image extension and .cls text."""
    from fastload.datasets.tar import IMAGE_EXTS, PREPARED_IMAGE_EXTS
    from fastload.source.tar_index import LABEL_EXTS, split_key

    image_fields = [f for f in recipe.fields() if f.kind == "image"]
    dict_rest = recipe.tuple_fields is None and recipe.dict_rest
    grouped = set(IMAGE_EXTS + PREPARED_IMAGE_EXTS + LABEL_EXTS)
    if dict_rest or any(a not in grouped for f in image_fields for a in f.source):
        # Members TarShards does not group matter here: every member of every key.
        everything: Dict[str, Dict[str, int]] = {}
        for i, name in enumerate(record["names"]):
            key, ext = split_key(name)
            everything.setdefault(key, {})[ext] = i
        groups = everything
    order = IMAGE_EXTS + PREPARED_IMAGE_EXTS  # TarShards' choice of a key's image
    texts, predicates = record["labels_text"], bool(recipe.predicates)
    sources = [f.source for f in image_fields]
    for key in keys:  # (plain loops: a generator per sample would cost more than the checks)
        present = groups[key]
        for ext in order:
            if ext in present:
                break
        if "cls" not in present:
            raise _NotMapped(f"webdataset pipeline: sample {key!r} of {url!r} has no .cls member "
                             "(its label comes from another member; the pipeline's .cls field would be missing)")
        for source in sources:
            first = None
            for alternative in source:
                if alternative in present:
                    first = alternative
                    break
            if first != ext:
                f = image_fields[sources.index(source)]
                raise _NotMapped(f"webdataset pipeline: sample {key!r} of {url!r}: the field "
                                 f"{';'.join(f.source)!r} is its .{first} member, fastload's index reads .{ext}")
        if dict_rest:
            extra = sorted(set(present) - {ext, "cls"})
            if extra:
                raise _NotMapped(f"webdataset pipeline: sample {key!r} holds .{', .'.join(extra)} members, which "
                                 "a dict sample carries and fastload's index does not keep (select the fields "
                                 "with to_tuple(...) or rename(..., keep=False))")
        exts.append(ext)
        if predicates:
            raw_labels.append(texts.get(str(present["cls"]), "").encode("utf-8"))


def _keep(shards: Any, recipe: Recipe, raw_labels: List[bytes]) -> np.ndarray:
    """The index rows the pipeline's select() predicates keep (all without one)."""
    n = len(shards.index)
    if not recipe.predicates:
        return np.arange(n, dtype=np.int64)
    keep = []
    for row in range(n):
        url = shards.urls[int(shards.sample_shards[row])]
        fields_ = {"__key__": shards.keys[row], "__url__": url}
        if (local := _local_path(url)) is not None:
            fields_["__local_path__"] = local
        ok = True
        for predicate, where, decoded in recipe.predicates:
            # As the predicate sees the sample there: .cls decoded to an int after decode(), else its bytes.
            sample = _PredicateSample({**fields_, "cls": int(shards.index.labels[row]) if decoded else raw_labels[row]})
            ok = ok and _predicate(predicate, where, sample)
        if ok:
            keep.append(row)
    return np.asarray(keep, dtype=np.int64)


class _PredicateSample(dict):
    """A sample for select(): the label and key fields; the image is not read."""

    def __missing__(self, key: str) -> Any:
        raise _NotMapped(f"select(predicate) reads the sample's {key!r} (fastload evaluates predicates on "
                        f"{', '.join(sorted(self))} when the loader is built)")


def _predicate(p: Any, where: str, sample: Dict[str, Any]) -> bool:
    try:
        return bool(p(sample))
    except _NotMapped as why:
        raise _NotMapped(f"webdataset pipeline stage select ({where}) is not mapped: {why}") from None
    except Exception as error:  # noqa: BLE001 - the pipeline raises it itself, on the generic path
        raise _NotMapped(f"webdataset pipeline stage select ({where}) is not mapped: the predicate raised "
                        f"{type(error).__name__}: {error}") from None


# ---- the loader's hook ----------------------------------------------------------------------

_REASONS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def adopt(dataset: Any, *, batch_size: Optional[int], shuffle: Optional[bool], drop_last: bool, on_error: str,
          accelerate: Any, distributed: Any = "auto") -> Optional[Tuple[WebDatasetSamples, Optional[int], bool, bool]]:
    """(view, batch_size, shuffle, drop_last) the loader uses in place of a webdataset
    pipeline it maps, else None (the pipeline stays as it is; `generic_reason` says why).

    With batched(n) in the pipeline the loader's batch_size must be None (as with
    wds.WebLoader): n becomes the batch size and partial=False drop_last. shuffle is the
    pipeline's (a shard or sample shuffle) unless the loader was given one.
    """
    if not is_pipeline(dataset) or accelerate is False:
        return None
    try:
        recipe = _read(dataset)
        if recipe.batch is not None and batch_size is not None:
            raise _NotMapped(f"webdataset pipeline: batched({recipe.batch[0]}) in the pipeline and "
                            f"batch_size={batch_size} in the loader (batches of batches); pass batch_size=None")
        if recipe.batch is None and batch_size is None:
            raise _NotMapped("webdataset pipeline without batched(n) and batch_size=None (samples one by one)")
        from fastload.sampling.distributed import resolve_distributed

        world = resolve_distributed(distributed)[1]
        view = WebDatasetSamples.from_pipeline(dataset, on_error=on_error, world_size=world, recipe=recipe)
    except _NotMapped as why:
        _REASONS[dataset] = str(why)
        return None
    if recipe.batch is not None:
        batch_size, drop_last = recipe.batch[0], not recipe.batch[1]
    return view, batch_size, (recipe.shuffle if shuffle is None else bool(shuffle)), drop_last


def generic_reason(dataset: Any) -> Optional[str]:
    """"generic: <why>" for a webdataset pipeline fastload did not map, else None."""
    if not is_pipeline(dataset):
        return None
    why = _REASONS.get(dataset) or not_mapped(dataset)
    if why is None:
        return None
    return f"generic: {why}"
