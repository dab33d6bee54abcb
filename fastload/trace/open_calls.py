"""The calls the tracer swaps while a dataset is traced: open(), io.BytesIO, torchvision.io, cv2, np.array."""

from __future__ import annotations

import io
import os
import sys
from typing import Any, List, Optional, Tuple

import PIL.Image
import torch
from fastload.trace import masks
from fastload.trace.call import TracedImage
from fastload.trace.openers import (check_orientation, header_or_stop, PixelArray, TracedArray, TracedBytes,
                                    TracedBytesIO, TracedFile, TracedFileTensor, TracedTensor)
from fastload.trace.state import active_call, source_of, stop_trace


# ---- the patches ---------------------------------------------------------------------------


def _image_extensions() -> frozenset:
    return frozenset(ext.lower() for ext in PIL.Image.registered_extensions())


def _opening_file(original: Any) -> Any:
    """builtins.open / io.open: an image file (by PIL's registered extensions) opened
    "rb" on a traced call returns a TracedFile; anything else the real file."""
    extensions = _image_extensions()

    def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - the builtin's name
        call = active_call()
        if call is not None and sorted(mode) == ["b", "r"] and isinstance(file, (str, os.PathLike)) and \
                _defaults(args, kwargs):
            path = os.fspath(file)
            if os.path.splitext(path)[1].lower() in extensions and os.path.isfile(path):
                return TracedFile(path, (mode,), {})  # (a missing file: open() raises as it would)
        return original(file, mode, *args, **kwargs)

    open.__wrapped__ = original  # type: ignore[attr-defined]
    return open


# open()'s arguments after mode, and their defaults (pathlib passes them positionally).
_OPEN_DEFAULTS = (("buffering", -1), ("encoding", None), ("errors", None), ("newline", None), ("closefd", True),
                  ("opener", None))


def _defaults(args: Tuple[Any, ...], kwargs: dict) -> bool:
    """open()'s other arguments are all their defaults (the file is read as it is)."""
    if len(args) > len(_OPEN_DEFAULTS) or set(kwargs) - {name for name, _ in _OPEN_DEFAULTS}:
        return False
    given = dict(zip((name for name, _ in _OPEN_DEFAULTS), args), **kwargs)
    return all(given.get(name, default) == default for name, default in _OPEN_DEFAULTS)


class _BytesIOMeta(type):
    """isinstance / issubclass against the patched io.BytesIO answer as for the real one."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _REAL_BYTESIO)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, _REAL_BYTESIO)


_REAL_BYTESIO = io.BytesIO


class _TracingBytesIO(io.BytesIO, metaclass=_BytesIOMeta):
    """io.BytesIO while tracing: a TracedBytesIO for traced bytes on a traced call, a real
    BytesIO otherwise."""

    __wrapped__ = io.BytesIO

    def __new__(cls, initial_bytes: Any = b"", *args: Any, **kwargs: Any) -> Any:
        if isinstance(initial_bytes, TracedBytes):
            call, path, _ = source_of(initial_bytes)
            if active_call() is call:
                return TracedBytesIO(call, path, None)
            stop_trace("makes a BytesIO of bytes read in an earlier __getitem__ call")
        return _REAL_BYTESIO(initial_bytes, *args, **kwargs)


def _mode_name(mode: Any) -> str:
    return getattr(mode, "name", str(mode))


def _io_mode(mode: Any, path: str, who: str) -> str:
    """The tensor's mode for torchvision.io's ImageReadMode `mode` (UNCHANGED: from the
    file's header)."""
    name = _mode_name(mode)
    if name == "RGB":
        return "RGB"
    if name == "UNCHANGED":
        _, _, channels = header_or_stop(path, f"{who} with ImageReadMode.UNCHANGED (the file's channels)")
        return {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}.get(channels, f"{channels} channels")
    stop_trace(f"calls {who} with mode=ImageReadMode.{name} (followed: RGB, or UNCHANGED on 3-channel files; the "
                 "native path makes RGB)")
    raise AssertionError  # (not reached)


def _io_checks(call: Any, path: Optional[str], what: str, who: str, exif: bool, device: Any = "cpu",
               counted: bool = False) -> str:
    if not counted:  # (read_file counted its file already)
        call.opened.append(path)
    if path is None:
        stop_trace(f"calls {who} on {what} (fastload reads image files by path: read_image(path), "
                     "decode_image(path or read_file(path)), decode_jpeg(read_file(path)))")
    if torch.device(device).type != "cpu":
        stop_trace(f"calls {who} with device={device!r} (followed: the CPU decode; fastload's DataLoader(..., "
                     "device='cuda') moves batches)")
    if exif:
        check_orientation(path, f"{who}(apply_exif_orientation=True)", "pass apply_exif_orientation=False")
    return path


def _io_path(value: Any) -> Tuple[Optional[str], str]:
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value), ""
    if isinstance(value, TracedFileTensor):
        return source_of(value)[1], ""
    return None, f"a {type(value).__name__} (bytes whose file fastload does not know)"


def _read_image(original: Any) -> Any:
    def read_image(path: Any, mode: Any = None, apply_exif_orientation: bool = False) -> Any:
        call = active_call()
        if call is None:
            return original(path, *(() if mode is None else (mode,)), apply_exif_orientation=apply_exif_orientation)
        where, what = _io_path(path) if not isinstance(path, TracedFileTensor) else (None, "read_file's bytes")
        where = _io_checks(call, where, what, "read_image", apply_exif_orientation,
                           counted=isinstance(path, TracedFileTensor))
        return TracedTensor(call, where, _io_mode(mode if mode is not None else "UNCHANGED", where, "read_image"))

    read_image.__wrapped__ = original  # type: ignore[attr-defined]
    return read_image


def _decoding(original: Any, who: str) -> Any:
    def decode(input: Any, mode: Any = None, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 - torchvision's name
        call = active_call()
        if call is None or not isinstance(input, (str, os.PathLike, TracedFileTensor)):
            if call is not None and isinstance(input, (list, tuple)):
                stop_trace(f"calls {who} on a list (one image per sample is followed)")
            return original(input, *(() if mode is None else (mode,)), *args, **kwargs)
        if who == "decode_jpeg" and not isinstance(input, TracedFileTensor):
            return original(input, *(() if mode is None else (mode,)), *args, **kwargs)  # (torchvision refuses it)
        if args:
            stop_trace(f"calls {who} with positional arguments after mode (followed: keywords)")
        unknown = set(kwargs) - {"apply_exif_orientation", "device"}
        if unknown:
            stop_trace(f"calls {who} with {', '.join(sorted(unknown))} (not followed)")
        path, what = _io_path(input)
        path = _io_checks(call, path, what, who, bool(kwargs.get("apply_exif_orientation", False)),
                          kwargs.get("device", "cpu"), counted=isinstance(input, TracedFileTensor))
        return TracedTensor(call, path, _io_mode(mode if mode is not None else "UNCHANGED", path, who))

    decode.__wrapped__ = original  # type: ignore[attr-defined]
    return decode


def _read_file(original: Any) -> Any:
    def read_file(path: Any) -> Any:
        call = active_call()
        if call is None or not isinstance(path, (str, os.PathLike)):
            return original(path)
        call.opened.append(os.fspath(path))
        return TracedFileTensor(call, os.fspath(path), None)

    read_file.__wrapped__ = original  # type: ignore[attr-defined]
    return read_file


def _imread(original: Any) -> Any:
    import cv2

    rgb_flag = getattr(cv2, "IMREAD_COLOR_RGB", None)
    ignore = cv2.IMREAD_IGNORE_ORIENTATION

    def imread(filename: Any, flags: int = cv2.IMREAD_COLOR, *args: Any, **kwargs: Any) -> Any:
        call = active_call()
        if call is None or args or kwargs or not isinstance(filename, (str, os.PathLike)):
            return original(filename, flags, *args, **kwargs)
        path = os.fspath(filename)
        call.opened.append(path)
        colour = flags & ~ignore
        labels = masks.grayscale_read(call, path, bool(flags & ignore)) if colour in (
            cv2.IMREAD_GRAYSCALE, cv2.IMREAD_UNCHANGED) else None
        if labels is not None:  # a mask file's label map (an L PNG or a grayscale JPEG)
            return labels
        if colour == cv2.IMREAD_COLOR:
            mode = "BGR"
        elif rgb_flag is not None and colour == rgb_flag:
            mode = "RGB"
        else:
            stop_trace(f"calls cv2.imread with flags={flags} (followed: cv2.IMREAD_COLOR, the default, or "
                         "IMREAD_COLOR_RGB; the native path makes 3-channel RGB)")
        if not flags & ignore:
            check_orientation(path, "cv2.imread", "pass cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION")
        return TracedArray(call, path, mode)

    imread.__wrapped__ = original  # type: ignore[attr-defined]
    return imread


def _cvt_color(original: Any) -> Any:
    import cv2

    swaps = {cv2.COLOR_BGR2RGB, cv2.COLOR_RGB2BGR}

    def cvtColor(src: Any, code: int, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - OpenCV's name
        call = active_call()
        if call is None or not isinstance(src, TracedArray):
            return original(src, code, *args, **kwargs)
        owner, path, mode = source_of(src)
        if owner is not call:
            stop_trace("converts an array opened in an earlier __getitem__ call (a cache of images? the tracer "
                         "follows images opened in the call)")
        if code not in swaps or args or kwargs:
            stop_trace(f"calls cv2.cvtColor with code {code} (followed: cv2.COLOR_BGR2RGB; the native path makes "
                         "RGB)")
        return TracedArray(call, path, "RGB" if mode == "BGR" else "BGR")

    cvtColor.__wrapped__ = original  # type: ignore[attr-defined]
    return cvtColor


def _to_array(original: Any, who: str) -> Any:
    """numpy.array / numpy.asarray: a traced PIL image converted to RGB becomes the HWC
    uint8 array it stands for (`np.array(Image.open(path).convert("RGB"))`, then
    albumentations); anything else goes to numpy."""
    def to_array(obj: Any, *args: Any, **kwargs: Any) -> Any:
        call = active_call()
        if call is None or not isinstance(obj, (TracedImage, masks.LabelMap, masks.MaskOutput)):
            return original(obj, *args, **kwargs)
        if not isinstance(obj, TracedImage):  # a mask
            if args[1:] or set(kwargs) - {"dtype", "copy"}:
                stop_trace(f"calls np.{who} on the mask with other arguments than dtype= and copy=")
            return masks.array_of(obj, kwargs.get("dtype", args[0] if args else None), who)
        owner, path, mode = source_of(obj)
        if owner is not call:
            stop_trace(f"calls np.{who} on an image opened in an earlier __getitem__ call (a cache of images? the "
                         "tracer follows images opened in the call)")
        dtype = kwargs.pop("dtype", args[0] if args else None)
        if args[1:] or set(kwargs) - {"copy"} or (dtype is not None and np_dtype(dtype) != np_dtype("uint8")):
            stop_trace(f"calls np.{who} on the image with other arguments than copy= (followed: "
                         f"np.{who}(image), dtype uint8)")
        labels = masks.array_of_image(call, obj, who) if mode is None else None
        if labels is not None:  # a mask file's label map (an L or P PNG, a grayscale JPEG)
            return labels
        if mode != "RGB":
            stop_trace(f"calls np.{who} on the image without .convert('RGB') (an L, P or CMYK file would give "
                         "another array; the native path decodes to RGB)")
        return PixelArray(call, path, "RGB")

    to_array.__wrapped__ = original  # type: ignore[attr-defined]
    return to_array


def _to_tensor(original: Any, who: str) -> Any:
    """torch.from_numpy / torch.as_tensor / torch.tensor: a mask's label map or transformed
    mask becomes the tensor it stands for (masks.py); anything else goes to torch."""
    def to_tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        if active_call() is None or not isinstance(data, (masks.LabelMap, masks.MaskOutput)):
            return original(data, *args, **kwargs)
        dtype = kwargs.pop("dtype", args[0] if args else None)
        device = kwargs.pop("device", args[1] if len(args) > 1 else None)
        if args[2:] or set(kwargs) - {"requires_grad", "pin_memory"} or any(kwargs.values()) or (
                device is not None and torch.device(device).type != "cpu"):
            stop_trace(f"calls torch.{who} on the mask with other arguments than dtype= (followed: "
                       f"torch.{who}(mask[, dtype=torch.int64]))")
        return masks.tensor_of(data, dtype, who)

    to_tensor.__wrapped__ = original  # type: ignore[attr-defined]
    return to_tensor


def _tv_mask(original: Any) -> Any:
    """tv_tensors.Mask.__new__: a mask file's PIL image or label map becomes a LabelMap
    standing for the tv_tensors.Mask (masks.py); anything else goes to torchvision."""
    make = original.__func__ if isinstance(original, staticmethod) else original

    def __new__(cls: Any, data: Any, *args: Any, dtype: Any = None, **kwargs: Any) -> Any:
        if active_call() is None or not isinstance(data, (TracedImage, masks.LabelMap, masks.MaskOutput)):
            return make(cls, data, *args, dtype=dtype, **kwargs)
        if args or any(v is not None for v in kwargs.values()):
            stop_trace("makes a tv_tensors.Mask with device= or requires_grad= (followed: tv_tensors.Mask(mask[, "
                       "dtype=...]))")
        return masks.tv_mask(data, dtype)

    __new__.__wrapped__ = original  # type: ignore[attr-defined]
    return staticmethod(__new__)


def np_dtype(value: Any) -> Any:
    import numpy as np

    return np.dtype(value)


def targets() -> List[Tuple[Any, str, Any, Any]]:
    """(owner, name, original, wrap) of each opener this module patches, for the modules
    already imported (a dataset that uses cv2 or torchvision.io has imported them)."""
    import builtins

    out: List[Tuple[Any, str, Any, Any]] = [
        (builtins, "open", vars(builtins)["open"], _opening_file),
        (io, "open", vars(io)["open"], _opening_file),
        (io, "BytesIO", vars(io)["BytesIO"], lambda original: _TracingBytesIO),
    ]
    import numpy

    out += [(numpy, "array", vars(numpy)["array"], lambda f: _to_array(f, "array")),
            (numpy, "asarray", vars(numpy)["asarray"], lambda f: _to_array(f, "asarray"))]
    out += [(torch, name, vars(torch)[name], lambda f, name=name: _to_tensor(f, name))
            for name in ("from_numpy", "as_tensor", "tensor")]
    tv_tensors = sys.modules.get("torchvision.tv_tensors")
    if tv_tensors is not None and "__new__" in vars(getattr(tv_tensors, "Mask", object)):
        out.append((tv_tensors.Mask, "__new__", vars(tv_tensors.Mask)["__new__"], _tv_mask))
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and hasattr(cv2, "imread") and hasattr(cv2, "cvtColor"):
        out += [(cv2, "imread", cv2.imread, _imread), (cv2, "cvtColor", cv2.cvtColor, _cvt_color)]
    for name in ("torchvision.io", "torchvision.io.image"):
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, wrap in (("read_image", _read_image), ("read_file", _read_file),
                           ("decode_image", lambda f: _decoding(f, "decode_image")),
                           ("decode_jpeg", lambda f: _decoding(f, "decode_jpeg"))):
            if attr in vars(module):
                out.append((module, attr, vars(module)[attr], wrap))
    return out


def user_globals(dataset: Any, patched: List[Tuple[Any, str, Any]]) -> List[Tuple[dict, str, Any]]:
    """Swaps, in the globals of the dataset's class modules (its class and bases, outside
    torch/torchvision/fastload), each name bound to an original patched in `patched`
    ((owner, name, original) with the wrapper now on owner) for that wrapper. Returns
    (globals, name, original) to put back."""
    wrappers = {id(original): getattr(owner, name) for owner, name, original in patched}
    done: List[Tuple[dict, str, Any]] = []
    seen = set()
    for cls in type(dataset).__mro__:
        module = sys.modules.get(cls.__module__)
        if module is None or id(module) in seen or cls.__module__.startswith(("torch", "fastload", "builtins")):
            continue
        seen.add(id(module))
        namespace = vars(module)
        for key, value in list(namespace.items()):
            wrapper = wrappers.get(id(value))
            if wrapper is not None and key not in ("__builtins__",):
                namespace[key] = wrapper
                done.append((namespace, key, value))
    return done
