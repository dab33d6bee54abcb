"""A webdataset pipeline read back stage by stage into a `Recipe`: what the native view of its shards must do.

`read_pipeline` walks `DataPipeline.pipeline` (shard lists, splitters, openers, the
decoder, `to_tuple` / `rename` / `map_dict` / `map` / `select` / `batched` /
`with_epoch`); every stage fastload maps becomes part of the Recipe, any other stage a
`NotMapped` naming it and its file:line. `map(f)` of the user's own function is seen
through once under fastload's tracer (fastload.trace). fastload/datasets/webdataset.py
builds the view from the Recipe; its docstring lists what is mapped.

Example:
    >>> import webdataset as wds
    >>> reason = not_mapped(wds.DataPipeline(wds.SimpleShardList(["a.tar"]), wds.tarfile_to_samples(),
    ...                                       wds.slice(10)))
    >>> reason.split(": ")[0]
    'webdataset pipeline stage islice (itertools) is not mapped'
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from dataclasses import replace
from typing import Any, List, Optional

from fastload.datasets.webdataset_fields import DECODES, FIX, IMAGE_EXTS_READ, Field, NotMapped, Recipe, lookup
from fastload.datasets.webdataset_map import see_through


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


def _refuse(stage: Any, why: str) -> NotMapped:
    if stage is None:  # (inside a map's function: the map stage names itself)
        return NotMapped(why)
    return NotMapped(f"webdataset pipeline stage {_name_of(stage)} ({_where(stage)}) is not mapped: {why}")


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
    """The Recipe of a webdataset pipeline, else NotMapped naming the first stage that is not."""
    if type(pipeline).__name__ == "WebLoader":
        raise NotMapped("a wds.WebLoader is a loader itself (a torch DataLoader runs its dataset): pass the dataset "
                        "it wraps to fastload.DataLoader in its place (batch_size=None for a pipeline ending in "
                        "batched(n))")
    stages = list(pipeline.pipeline)
    if not stages:
        raise NotMapped("an empty webdataset pipeline")
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
        raise _refuse(stage, f"no equivalent on fastload's tar-shard engine ({FIX})")
    recipe.stages = [name for name in recipe.stages if name]
    if state not in ("samples", "tuples", "batches"):
        raise NotMapped("a webdataset pipeline that does not read tar samples (no tarfile_to_samples stage)")
    _epoch(pipeline, recipe)
    if recipe.decode is None and any(f.kind == "image" for f in output_fields(recipe)):
        raise NotMapped("webdataset pipeline: the image reaches the sample undecoded (bytes): add "
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
        if set(exts) & (set(IMAGE_EXTS_READ) | {"cls"}):
            raise _refuse(stage, f"a decode handler of its own for {'/'.join(sorted(exts))} members")
    handler = images[0]
    if handler.imagespec not in DECODES:
        raise _refuse(stage, f"decode({handler.imagespec!r}): the native pipeline makes RGB PIL images or "
                      f"tensors; mapped: {', '.join(repr(k) for k in DECODES)}")
    missing = [e for e in IMAGE_EXTS_READ if e not in handler.extensions]
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


def _to_tuple(stage: Any, recipe: Recipe) -> List[Field]:
    _check_handler(stage)
    if stage.kw.get("missing_is_error", True) is not True or stage.kw.get("none_is_error") not in (None, True):
        raise _refuse(stage, "missing_is_error=False / none_is_error=False (samples without a field)")
    args = stage.args
    if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
        args = tuple(args[0].split())
    return [lookup(recipe, a, lambda why: _refuse(stage, why)) for a in args]


def _rename(stage: Any, recipe: Recipe) -> None:
    _check_handler(stage)
    keep = stage.kw.get("keep", True)
    names = {k: v for k, v in stage.kw.items() if k not in ("handler", "keep")}
    new = {k: lookup(recipe, v, lambda why: _refuse(stage, why)) for k, v in names.items()}
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
        current = lookup(recipe, k, lambda why: _refuse(stage, why))
        recipe.dict_fields[k] = replace(current, fns=current.fns + (f,))


def _map(stage: Any, recipe: Recipe, state: str) -> str:
    """A map(f) of the user's own function, seen through (see `_see_through`): the state
    after it ("tuples" or "samples" for a dict)."""
    _check_handler(stage)
    f = stage.args[0] if stage.args else stage.kw.get("f")
    try:
        result = see_through(f, recipe, state)
    except NotMapped as why:
        raise _refuse(stage, f"map({_name_of(f)}): {why}") from None
    if isinstance(result, dict):
        if state == "samples":  # webdataset's map keeps the key of a dict sample
            result.setdefault("__key__", Field(("__key__",)))
        recipe.tuple_fields, recipe.dict_fields, recipe.dict_rest = None, result, False
        return "samples"
    recipe.tuple_fields = list(result)
    return "tuples"



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
            raise NotMapped("webdataset pipeline: repeat() without a length (an endless epoch; use with_epoch(n) or "
                            "the loader's epochs)")
        recipe.epoch_items = int(nsamples)
        return
    recipe.repeat_passes = int(repetitions)
    if nsamples is not None and nsamples > 0:
        raise NotMapped(f"webdataset pipeline: repeat({repetitions}, nbatches={nsamples}) (a per-pass cut)")


def output_fields(recipe: Recipe) -> List[Field]:
    """The fields of the pipeline's sample (a dict's other members: its image and .cls)."""
    out = recipe.fields()
    if recipe.tuple_fields is None and recipe.dict_rest:
        names = set(recipe.dict_fields)
        out += [Field(tuple(e for e in IMAGE_EXTS_READ if e not in recipe.removed and e not in names))]
    return out


def read_recipe(pipeline: Any) -> Recipe:
    """read_pipeline, where an unexpected shape of a stage (another webdataset version, an
    argument of a type the walk does not know) is a reason, never a crash of the loader."""
    try:
        return read_pipeline(pipeline)
    except NotMapped:
        raise
    except Exception as error:  # noqa: BLE001 - the pipeline itself still runs, on the generic path
        raise NotMapped(f"webdataset pipeline: fastload could not read its stages ({type(error).__name__}: "
                        f"{error}; the walk follows webdataset 1.0.2's stages, this is {webdataset_version()})") from None


def webdataset_version() -> str:
    module = sys.modules.get("webdataset")
    return str(getattr(module, "__version__", "?"))


def not_mapped(pipeline: Any) -> Optional[str]:
    """Why `pipeline` stays on the generic path (its stage list alone), or None."""
    try:
        read_recipe(pipeline)
    except NotMapped as why:
        return str(why)
    return None


# ---- shards -------------------------------------------------------------------------------
