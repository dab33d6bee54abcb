"""The patches a trace runs under: PIL.Image.open, the other openers and the transforms' `__call__`.

Active on the tracing thread only (other threads get the originals), nested traces share
one patching; `tracing_patches(dataset)` also swaps the openers the dataset's own modules
bound by name.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Tuple

import PIL.Image
import torch

from fastload.trace import masks, open_calls
from fastload.trace.call import TracedImage, TracedOutput, enter
from fastload.trace.openers import LAZY, TracedBytesIO, TracedFile
from fastload.trace.state import (active_call, global_rng_moved, global_rng_restore, record, source_of, stop_trace,
                                  where_frame)
from fastload.trace.targets import enter_with_targets, holds_boxes
from fastload.trace.where import where_defined


# Class modules whose transforms are intercepted where a traced image enters them (what
# fastload.compat.torchvision and fastload.compat.timm map).
_TRANSFORM_MODULES = ("torchvision.transforms", "timm.data")
# albumentations' transforms take the image as a keyword: transform(image=array)["image"].
_ALBUMENTATIONS = "albumentations"


# ---- the patches, active on the tracing thread only ---------------------------------------

_PATCH_LOCK = threading.Lock()
_patch_depth = 0
_patches: List[Tuple[Any, str, Any]] = []


def _is_transform(obj: Any) -> bool:
    return type(obj).__module__.startswith(_TRANSFORM_MODULES + (_ALBUMENTATIONS + ".",)) or \
        type(obj) is torch.nn.Sequential


def _intercepting(original: Any) -> Any:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = active_call()
        if call is not None and args and not kwargs and isinstance(args[0], _traced_kinds()) and _is_transform(self):
            if len(args) == 1:
                return enter(call, self, args[0])
            if holds_boxes(args[1:]):  # v2's transform(image, target) of a detection dataset (targets.py)
                return enter_with_targets(call, self, args)
            if len(args) == 2:  # (image, mask): one joint call of torchvision's v2 transforms (masks.py)
                return masks.enter_v2(call, self, *args)
        if call is not None and len(args) == 1 and not kwargs and type(args[0]) in (dict, tuple, list) and \
                _is_transform(self) and masks.holds_mask(args[0]):  # v2 given the sample: {"image": ..., "mask": ...}
            return masks.enter_v2_sample(call, self, args[0])
        return original(self, *args, **kwargs)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _traced_kinds() -> Tuple[type, ...]:
    return (TracedImage, TracedOutput) + LAZY


def _intercepting_albumentations(original: Any) -> Any:
    """An albumentations __call__: `transform(image=traced)` returns {"image": output}."""
    def __call__(self: Any, *args: Any, force_apply: bool = False, **data: Any) -> Any:
        call = active_call()
        if call is not None and not args and isinstance(data.get("image"), _traced_kinds()):
            others = sorted(k for k in data if k not in ("image", "mask"))
            if others:
                stop_trace(f"passes {', '.join(others)} with the image to {type(self).__name__} (followed: image= "
                      "alone, or image= and mask=; the native path makes the image and a mask)")
            if "mask" in data:
                return masks.enter_albumentations(call, self, data["image"], data["mask"])
            return {"image": enter(call, self, data["image"])}
        if call is not None and not args and isinstance(data.get("image"), masks.LabelMap):
            stop_trace(f"passes a single-channel array as image= to {type(self).__name__} (the native path makes RGB "
                       "images: cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB))")
        return original(self, *args, force_apply=force_apply, **data)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _albumentations_classes() -> List[type]:
    """albumentations' classes with a __call__ of their own (Compose, BasicTransform, ...)."""
    out, seen = [], set()
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(_ALBUMENTATIONS + "."):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and id(value) not in seen and "__call__" in vars(value) \
                    and value.__module__.startswith(_ALBUMENTATIONS + "."):
                seen.add(id(value))
                out.append(value)
    return out


def _read_before(fp: Any) -> bool:
    return isinstance(fp, TracedBytesIO)


def _path_of(fp: Any) -> Tuple[Optional[str], str]:
    """(the file's path, "") when `fp` is a path or a file opened from one and not yet
    read; else (None, what it is)."""
    if isinstance(fp, TracedFile):
        return (fp.name, "") if fp.untouched() else (None, f"a file already read from ({fp.name!r})")
    if isinstance(fp, TracedBytesIO):
        return source_of(fp)[1], ""
    if isinstance(fp, (str, bytes, os.PathLike)):
        path = os.fspath(fp)
        return (os.fsdecode(path) if isinstance(path, bytes) else path), ""
    if isinstance(fp, (io.BufferedReader, io.FileIO)):
        name = getattr(fp, "name", None)
        if not isinstance(name, (str, bytes)):
            return None, "a file object without a path"
        if fp.closed or "b" not in getattr(fp, "mode", "b"):
            return None, f"a closed or text-mode file ({name!r})"
        if fp.tell() != 0:
            return None, f"a file already read from ({name!r})"
        return os.fsdecode(name), ""
    return None, f"a {type(fp).__name__} (bytes whose file fastload does not know)"


def _opening(original: Any) -> Any:
    def open(fp: Any, mode: str = "r", formats: Any = None) -> Any:  # noqa: A001 - PIL's name
        call = active_call()
        if call is None:
            return original(fp, mode, formats)
        path, what = _path_of(fp)
        if not _read_before(fp):  # (bytes read in the call were counted as opened when read)
            call.opened.append(path)
        if path is None:
            stop_trace(f"opens an image from {what} (fastload reads image files by path: Image.open(path) or "
                  "Image.open(open(path, 'rb')))")
        if mode != "r" or formats is not None:
            stop_trace("calls Image.open with mode= or formats= (not followed)")
        return TracedImage(call, path, None)  # type: ignore[arg-type]

    open.__wrapped__ = original  # type: ignore[attr-defined]
    return open


def _plain_transform_classes() -> List[type]:
    """torchvision/timm transform classes with a __call__ of their own that are not
    nn.Modules (v1 Compose, ToTensor, Lambda, ...); nn.Modules go through Module.__call__."""
    out, seen = [], set()
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(_TRANSFORM_MODULES):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and id(value) not in seen and "__call__" in vars(value) \
                    and value.__module__.startswith(_TRANSFORM_MODULES) and not issubclass(value, torch.nn.Module):
                seen.add(id(value))
                out.append(value)
    return out


@contextmanager
def tracing_patches(dataset: Any = None) -> Iterator[None]:
    """PIL.Image.open, the other openers and the transforms' __call__ patched for the
    process (acting only on a thread with a traced call), restored when the last trace
    ends; with `dataset`, also the openers its own modules bound by name."""
    with _patched_process():
        if dataset is None:
            yield
        else:
            with user_globals_swapped(dataset):
                yield


@contextmanager
def _patched_process() -> Iterator[None]:
    global _patch_depth
    with _PATCH_LOCK:
        if _patch_depth == 0:
            targets = [(PIL.Image, "open", PIL.Image.open, _opening),
                       (torch.nn.Module, "__call__", vars(torch.nn.Module)["__call__"], _intercepting)]
            targets += [(cls, "__call__", vars(cls)["__call__"], _intercepting) for cls in _plain_transform_classes()]
            targets += [(cls, "__call__", vars(cls)["__call__"], _intercepting_albumentations)
                        for cls in _albumentations_classes()]
            targets += open_calls.targets()
            for owner, name, original, wrap in targets:
                _patches.append((owner, name, original))
                setattr(owner, name, wrap(original))
        _patch_depth += 1
    try:
        yield
    finally:
        with _PATCH_LOCK:
            _patch_depth -= 1
            if _patch_depth == 0:
                while _patches:
                    owner, name, original = _patches.pop()
                    setattr(owner, name, original)


@contextmanager
def user_globals_swapped(dataset: Any) -> Iterator[None]:
    """The openers bound by name in the dataset's modules (`from torchvision.io import
    read_image`) swapped for the tracing ones while it is traced (inside tracing_patches)."""
    with _PATCH_LOCK:
        done = open_calls.user_globals(dataset, list(_patches))
    try:
        yield
    finally:
        for namespace, key, original in done:
            namespace[key] = original


def where_drawn(dataset: Any, index: int, before: Any) -> str:
    """file:line of the user's code running when the global generators first moved in a
    trace of `index` (run again line by line)."""
    last: List[str] = [where_defined(dataset)]
    found: List[Optional[str]] = [None]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if found[0] is not None:
            return None
        if event in ("line", "return", "call"):
            if global_rng_moved(before):
                found[0] = last[0]
                return None
            if event != "call":
                last[0] = where_frame(frame)
        return tracer

    global_rng_restore(before)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        record(dataset, index)
    finally:
        sys.settrace(previous)
    return found[0] or where_defined(dataset)
