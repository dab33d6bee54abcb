"""The tracer's other image openers: OpenCV, torchvision.io and bytes read from a file.

`fastload/compat/trace.py` follows `PIL.Image.open`; this module adds the other ways a
dataset's `__getitem__` commonly gets its image, each returning a lazy stand-in that
records the path and the layout the user's code holds, and reads no pixels:

| the user's call | stand-in | layout it stands for |
| --- | --- | --- |
| `cv2.imread(path)` (`IMREAD_COLOR`, the default) | `TracedArray` mode "BGR" | uint8 [H, W, 3] ndarray |
| `cv2.imread(path, cv2.IMREAD_COLOR_RGB)`, `cv2.cvtColor(a, cv2.COLOR_BGR2RGB)`, `np.array(Image.open(path).convert("RGB"))` (or `np.asarray`) | `TracedArray` mode "RGB" | the same, RGB |
| `torchvision.io.read_image(path[, mode])`, `decode_image(path or read_file(path)[, mode])`, `decode_jpeg(read_file(path)[, mode])` | `TracedTensor` | uint8 [C, H, W] tensor |
| `torchvision.io.read_file(path)` | `TracedFileTensor` | uint8 [N] tensor of the file's bytes |
| `open(path, "rb")` of an image file (PIL's registered extensions) | `TracedFile` | the file |
| its `.read()` (whole, from the start), `pathlib.Path.read_bytes()` | `TracedBytes` | the file's bytes |
| `io.BytesIO(traced bytes)` | `TracedBytesIO`, which `Image.open` follows | a file in memory |

What each stand-in answers without reading pixels: `.shape`, `.ndim`, `.dtype` of the
array and tensor (the shape from the file's header: fastload's JPEG header op, PIL's for
other formats); `len()` of the bytes' tensor is refused (it would need the file's size
read per sample: not followed). Everything else (pixels read, slicing, arithmetic,
`np.asarray`) ends the trace with the user's file:line, as for PIL images.

Checks that keep the native path the same as the user's code, each refused with its
reason where it fails:

- the engine makes RGB: a BGR array (cv2.imread without `cvtColor(BGR2RGB)`) given to a
  transform is refused (its channels would be swapped), as is `IMREAD_GRAYSCALE`,
  `IMREAD_UNCHANGED` and any other flag; `ImageReadMode.UNCHANGED` (torchvision.io's
  default) reads the file's header and is followed where the file has 3 channels;
- `cv2.imread` turns the image by its EXIF orientation (unless `IMREAD_IGNORE_ORIENTATION`)
  and so does torchvision.io with `apply_exif_orientation=True`; the engine decodes as
  stored (as PIL's Image.open): the orientation of a JPEG or PNG is read from its header
  (fastload/decode/header.py, as PIL.ImageOps.exif_transpose applies it) and a turned
  image is refused;
- an OpenCV array goes to albumentations, a torchvision.io tensor to torchvision's v2
  transforms (or v1 transforms that take tensors), a PIL image to torchvision/timm:
  another pairing (e.g. a PIL image to albumentations, which takes arrays) is refused,
  as the user's code would raise or convert differently.

Functions bound by name in the dataset's own module (`from torchvision.io import
read_image`, `from cv2 import imread`) are followed too: `user_globals(dataset)` swaps
them in that module (and the modules of the dataset's base classes) while it is traced.

Example:
    >>> import os, tempfile, cv2, torch
    >>> import albumentations as A
    >>> from albumentations.pytorch import ToTensorV2
    >>> from PIL import Image
    >>> from fastload.compat.datasets import analyse
    >>> path = os.path.join(tempfile.mkdtemp(), "a.jpg"); Image.new("RGB", (8, 8)).save(path)
    >>> class Photos(torch.utils.data.Dataset):
    ...     def __init__(self, transform): self.transform = transform
    ...     def __len__(self): return 1
    ...     def __getitem__(self, i):
    ...         image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    ...         return self.transform(image=image)["image"], 7
    >>> analysis = analyse(Photos(A.Compose([A.CenterCrop(4, 4), ToTensorV2()])))
    >>> analysis.chain, [type(s).__name__ for s in analysis.pipeline.native]
    ('traced Photos.__getitem__', ['CenterCrop'])
"""

from __future__ import annotations

import io
import os
import sys
import weakref
from typing import Any, Iterator, List, Optional, Tuple

import PIL.Image
import torch

from fastload.compat import trace as _trace
from fastload.decode.header import HEAD_BYTES, file_header



# ---- the file's header, read only where a layout depends on it -----------------------------


def _read_prefix(path: str, size: int = HEAD_BYTES) -> bytes:
    with io.FileIO(path, "r") as f:  # (io.FileIO: never the traced open)
        return f.read(size)


def header(path: str) -> Tuple[int, int, int]:
    """(height, width, channels) of the image file at `path`, from its header: fastload's
    JPEG header op, else PIL's (which reads the header only). OSError, RuntimeError when
    the file cannot be read."""
    data = _read_prefix(path)
    if data[:2] == b"\xff\xd8":
        from fastload import _ext, ops

        if _ext.has_ops():
            try:
                height, width, channels = ops.jpeg_header(torch.frombuffer(bytearray(data), dtype=torch.uint8))[:3]
            except RuntimeError:  # the header goes past the prefix: read the whole file
                with io.FileIO(path, "r") as f:
                    whole = f.read()
                height, width, channels = ops.jpeg_header(torch.frombuffer(bytearray(whole), dtype=torch.uint8))[:3]
            return int(height), int(width), int(channels)
    with _original(PIL.Image, "open")(path) as image:
        return image.height, image.width, len(image.getbands())


def _check_orientation(path: str, who: str, fix: str) -> None:
    # JPEG and PNG headers (other formats would be decoded). An unreadable file is left
    # to the engine, which reports it under the loader's on_error, as for Image.open(path).
    found = file_header(path, others=False)
    orientation = 1 if found is None else found.orientation
    if orientation != 1:
        _trace.stop_trace(f"{who} turns {os.path.basename(path)!r} by its EXIF orientation ({orientation}); the native "
                     f"path decodes images as stored (as PIL's Image.open): {fix}")


def _header_or_stop(path: str, what: str) -> Tuple[int, int, int]:
    try:
        return header(path)
    except (OSError, RuntimeError, ValueError) as error:
        _trace.stop_trace(f"reads {what}, which needs the header of {path!r}, and it cannot be read ({error})")
        raise  # (not reached)


# ---- the stand-ins ------------------------------------------------------------------------


class Lazy:
    """A stand-in for what an opener returned: (call, path, mode) and nothing read.
    Attributes not in `_ANSWERED` end the trace with the user's file:line."""

    __slots__ = ("_fastload_trace", "__weakref__")
    _WHAT = "the image"
    _ANSWERED: frozenset = frozenset()

    def __init__(self, call: Any, path: str, mode: Optional[str]):
        object.__setattr__(self, "_fastload_trace", (call, path, mode))
        made = getattr(_trace.thread_state, "lazies", None)
        if made is None or made[0] != id(call):
            made = _trace.thread_state.lazies = (id(call), [])
        made[1].append(weakref.ref(self))

    def __getattribute__(self, name: str) -> Any:
        if name == "_fastload_trace" or name in type(self)._ANSWERED or name in ("__class__", "__repr__"):
            return object.__getattribute__(self, name)
        if _trace.active_call() is None:
            raise TypeError(f"fastload: {object.__getattribute__(self, '__repr__')()} stands for "
                            f"{type(self)._WHAT} of a traced __getitem__ call; it was kept past the trace (a "
                            "cache?). Set FASTLOAD_TRACE=0 for this dataset")
        if name in ("__array__", "__array_interface__", "__array_struct__", "__array_priority__", "tobytes",
                    "numpy", "tolist", "__dlpack__", "__buffer__"):
            _trace.stop_trace(f"reads the pixels of {type(self)._WHAT} before a transform fastload maps")
        if name.startswith("__") and name.endswith("__") and name not in ("__getitem__", "__len__", "__iter__"):
            return object.__getattribute__(self, name)
        _trace.stop_trace(f"uses {type(self)._WHAT}'s .{name} before a transform fastload maps (followed: "
                     f"{type(self)._FOLLOWED})")

    _FOLLOWED = ""

    def __getitem__(self, key: Any) -> Any:
        _trace.stop_trace(f"indexes {type(self)._WHAT} ([...]) before a transform fastload maps")

    def __len__(self) -> int:
        _trace.stop_trace(f"takes len() of {type(self)._WHAT} before a transform fastload maps")
        return 0

    def __iter__(self) -> Iterator[Any]:
        _trace.stop_trace(f"iterates over {type(self)._WHAT} before a transform fastload maps")
        return iter(())

    def _arith(self, *args: Any) -> Any:
        _trace.stop_trace(f"computes with {type(self)._WHAT} before a transform fastload maps")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _arith
    __floordiv__ = __lt__ = __gt__ = __le__ = __ge__ = __neg__ = __abs__ = __bool__ = _arith
    __float__ = __int__ = _arith

    def __repr__(self) -> str:
        _, path, mode = object.__getattribute__(self, "_fastload_trace")
        return f"{type(self).__name__}({path!r}, mode={mode!r})"


class TracedArray(Lazy):
    """What `cv2.imread(path)` returns while a dataset is traced: a uint8 [H, W, 3] array
    of the file, "BGR" (OpenCV's order) until `cv2.cvtColor(a, cv2.COLOR_BGR2RGB)`."""

    __slots__ = ()
    _WHAT = "the array of cv2.imread"
    _FOLLOWED = "cv2.imread(path), cv2.cvtColor(a, cv2.COLOR_BGR2RGB), .shape, .ndim, .dtype; then albumentations"
    _ANSWERED = frozenset({"shape", "ndim", "dtype"})

    @property
    def shape(self) -> Tuple[int, int, int]:
        height, width, _ = _header_or_stop(_trace.source_of(self)[1], "the array's .shape")
        return (height, width, 3)

    @property
    def ndim(self) -> int:
        return 3

    @property
    def dtype(self) -> Any:
        import numpy as np

        return np.dtype(np.uint8)


class PixelArray(TracedArray):
    """What `np.array(image)` / `np.asarray(image)` of a traced PIL image converted to RGB
    returns while a dataset is traced: its uint8 [H, W, 3] RGB pixels, for albumentations.
    Any use but `.shape`, `.ndim`, `.dtype` reads the pixels."""

    __slots__ = ()
    _WHAT = "the image's pixels (np.array(image))"

    def __getattribute__(self, name: str) -> Any:
        if name == "_fastload_trace" or name in TracedArray._ANSWERED or name in ("__class__", "__repr__") or (
                name.startswith("__") and name.endswith("__") and _trace.active_call() is not None):
            return object.__getattribute__(self, name)
        if _trace.active_call() is None:
            return Lazy.__getattribute__(self, name)
        _trace.stop_trace("reads the image's pixels before a transform fastload maps")

    def _pixels(self, *args: Any) -> Any:
        _trace.stop_trace("reads the image's pixels before a transform fastload maps")

    __getitem__ = __len__ = __iter__ = _arith = _pixels
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _pixels
    __floordiv__ = __lt__ = __gt__ = __le__ = __ge__ = __neg__ = __abs__ = __bool__ = __float__ = __int__ = _pixels


class TracedTensor(Lazy):
    """What torchvision.io's read_image / decode_image / decode_jpeg return while a
    dataset is traced: a uint8 [C, H, W] tensor of the file; mode "RGB" (3 channels) or
    the channels the file has ("L": 1, "RGBA": 4...) with ImageReadMode.UNCHANGED."""

    __slots__ = ()
    _WHAT = "the tensor of torchvision.io"
    _FOLLOWED = "read_image(path), decode_image(...), decode_jpeg(read_file(path)), .shape, .ndim, .dtype; then " \
                "torchvision's transforms"
    _ANSWERED = frozenset({"shape", "ndim", "dtype", "size", "dim"})

    @property
    def shape(self) -> torch.Size:
        mode = _trace.source_of(self)[2]
        height, width, _ = _header_or_stop(_trace.source_of(self)[1], "the tensor's .shape")
        return torch.Size((_CHANNELS.get(mode, 3), height, width))

    def size(self, dim: Optional[int] = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 3

    @property
    def ndim(self) -> int:
        return 3

    @property
    def dtype(self) -> torch.dtype:
        return torch.uint8


class TracedFileTensor(Lazy):
    """What `torchvision.io.read_file(path)` returns while a dataset is traced: the
    file's bytes as a uint8 [N] tensor, for decode_jpeg / decode_image."""

    __slots__ = ()
    _WHAT = "the bytes of torchvision.io.read_file"
    _FOLLOWED = "decode_jpeg(read_file(path)), decode_image(read_file(path))"
    _ANSWERED = frozenset({"dtype", "ndim"})

    @property
    def dtype(self) -> torch.dtype:
        return torch.uint8

    @property
    def ndim(self) -> int:
        return 1


class TracedBytes(Lazy):
    """What `.read()` of an image file opened with `open(path, "rb")` returns while a
    dataset is traced: the file's bytes, for `io.BytesIO(...)` then `Image.open`."""

    __slots__ = ()
    _WHAT = "the bytes read from an image file"
    _FOLLOWED = "open(path, 'rb').read(), Path(path).read_bytes(); then Image.open(io.BytesIO(data))"


class TracedBytesIO(Lazy):
    """What `io.BytesIO(traced bytes)` returns while a dataset is traced; `Image.open`
    follows it to the file's path."""

    __slots__ = ()
    _WHAT = "the BytesIO of an image file's bytes"
    _FOLLOWED = "Image.open(io.BytesIO(data))"
    _ANSWERED = frozenset({"seek", "tell", "close", "__enter__", "__exit__"})

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset, whence) != (0, 0):
            _trace.stop_trace("seeks the BytesIO of an image file's bytes before Image.open (followed: "
                         "Image.open(io.BytesIO(data)))")
        return 0

    def tell(self) -> int:
        return 0

    def close(self) -> None:
        return None

    def __enter__(self) -> "TracedBytesIO":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_CHANNELS = {"RGB": 3, "BGR": 3, "L": 1, "LA": 2, "RGBA": 4}


class TracedFile:
    """What `open(path, "rb")` returns for an image file while a dataset is traced: the
    file unopened. `.read()` of all of it from the start gives TracedBytes; any other use
    opens the real file and goes to it (a sidecar read, `read(n)`, `seek`...)."""

    def __init__(self, path: str, args: Tuple[Any, ...], kwargs: dict):
        self._path, self._args, self._kwargs = path, args, kwargs
        self._real: Any = None
        self._read = False

    @property
    def name(self) -> str:
        return self._path

    @property
    def mode(self) -> str:
        return "rb"

    @property
    def closed(self) -> bool:
        return self._real.closed if self._real is not None else False

    def _file(self) -> Any:
        if self._real is None:
            self._real = _original_open()(self._path, *self._args, **self._kwargs)
        return self._real

    def read(self, size: int = -1) -> Any:
        call = _trace.active_call()
        if self._real is None and not self._read and (size is None or size < 0) and call is not None:
            self._read = True
            call.opened.append(self._path)  # (the image opened: Image.open of its BytesIO is not counted again)
            return TracedBytes(call, self._path, None)
        return self._file().read(size)

    def tell(self) -> int:
        return self._file().tell() if self._real is not None or not self._read else 0

    def untouched(self) -> bool:
        """Neither read nor opened: Image.open(f) may follow the path."""
        return self._real is None and not self._read

    def close(self) -> None:
        if self._real is not None:
            self._real.close()

    def __enter__(self) -> "TracedFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._file())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._file(), name)

    def __repr__(self) -> str:
        return f"TracedFile({self._path!r})"


def made_in(call: Any) -> List[Any]:
    """Weak references to the stand-ins made in `call` (the latest call on this thread)."""
    made = getattr(_trace.thread_state, "lazies", None)
    return list(made[1]) if made is not None and made[0] == id(call) else []


LAZY = (TracedArray, TracedTensor)  # what a transform may be given, besides a PIL TracedImage


# ---- the patches ---------------------------------------------------------------------------


def _original(owner: Any, name: str) -> Any:
    value = getattr(owner, name)
    return getattr(value, "__wrapped__", value)


def _original_open() -> Any:
    import builtins

    return _original(builtins, "open")


def _image_extensions() -> frozenset:
    return frozenset(ext.lower() for ext in PIL.Image.registered_extensions())


def _opening_file(original: Any) -> Any:
    """builtins.open / io.open: an image file (by PIL's registered extensions) opened
    "rb" on a traced call returns a TracedFile; anything else the real file."""
    extensions = _image_extensions()

    def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - the builtin's name
        call = _trace.active_call()
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
            call, path, _ = _trace.source_of(initial_bytes)
            if _trace.active_call() is call:
                return TracedBytesIO(call, path, None)
            _trace.stop_trace("makes a BytesIO of bytes read in an earlier __getitem__ call")
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
        _, _, channels = _header_or_stop(path, f"{who} with ImageReadMode.UNCHANGED (the file's channels)")
        return {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}.get(channels, f"{channels} channels")
    _trace.stop_trace(f"calls {who} with mode=ImageReadMode.{name} (followed: RGB, or UNCHANGED on 3-channel files; the "
                 "native path makes RGB)")
    raise AssertionError  # (not reached)


def _io_checks(call: Any, path: Optional[str], what: str, who: str, exif: bool, device: Any = "cpu",
               counted: bool = False) -> str:
    if not counted:  # (read_file counted its file already)
        call.opened.append(path)
    if path is None:
        _trace.stop_trace(f"calls {who} on {what} (fastload reads image files by path: read_image(path), "
                     "decode_image(path or read_file(path)), decode_jpeg(read_file(path)))")
    if torch.device(device).type != "cpu":
        _trace.stop_trace(f"calls {who} with device={device!r} (followed: the CPU decode; fastload's DataLoader(..., "
                     "device='cuda') moves batches)")
    if exif:
        _check_orientation(path, f"{who}(apply_exif_orientation=True)", "pass apply_exif_orientation=False")
    return path


def _io_path(value: Any) -> Tuple[Optional[str], str]:
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value), ""
    if isinstance(value, TracedFileTensor):
        return _trace.source_of(value)[1], ""
    return None, f"a {type(value).__name__} (bytes whose file fastload does not know)"


def _read_image(original: Any) -> Any:
    def read_image(path: Any, mode: Any = None, apply_exif_orientation: bool = False) -> Any:
        call = _trace.active_call()
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
        call = _trace.active_call()
        if call is None or not isinstance(input, (str, os.PathLike, TracedFileTensor)):
            if call is not None and isinstance(input, (list, tuple)):
                _trace.stop_trace(f"calls {who} on a list (one image per sample is followed)")
            return original(input, *(() if mode is None else (mode,)), *args, **kwargs)
        if who == "decode_jpeg" and not isinstance(input, TracedFileTensor):
            return original(input, *(() if mode is None else (mode,)), *args, **kwargs)  # (torchvision refuses it)
        if args:
            _trace.stop_trace(f"calls {who} with positional arguments after mode (followed: keywords)")
        unknown = set(kwargs) - {"apply_exif_orientation", "device"}
        if unknown:
            _trace.stop_trace(f"calls {who} with {', '.join(sorted(unknown))} (not followed)")
        path, what = _io_path(input)
        path = _io_checks(call, path, what, who, bool(kwargs.get("apply_exif_orientation", False)),
                          kwargs.get("device", "cpu"), counted=isinstance(input, TracedFileTensor))
        return TracedTensor(call, path, _io_mode(mode if mode is not None else "UNCHANGED", path, who))

    decode.__wrapped__ = original  # type: ignore[attr-defined]
    return decode


def _read_file(original: Any) -> Any:
    def read_file(path: Any) -> Any:
        call = _trace.active_call()
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
        call = _trace.active_call()
        if call is None or args or kwargs or not isinstance(filename, (str, os.PathLike)):
            return original(filename, flags, *args, **kwargs)
        path = os.fspath(filename)
        call.opened.append(path)
        colour = flags & ~ignore
        if colour == cv2.IMREAD_COLOR:
            mode = "BGR"
        elif rgb_flag is not None and colour == rgb_flag:
            mode = "RGB"
        else:
            _trace.stop_trace(f"calls cv2.imread with flags={flags} (followed: cv2.IMREAD_COLOR, the default, or "
                         "IMREAD_COLOR_RGB; the native path makes 3-channel RGB)")
        if not flags & ignore:
            _check_orientation(path, "cv2.imread", "pass cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION")
        return TracedArray(call, path, mode)

    imread.__wrapped__ = original  # type: ignore[attr-defined]
    return imread


def _cvt_color(original: Any) -> Any:
    import cv2

    swaps = {cv2.COLOR_BGR2RGB, cv2.COLOR_RGB2BGR}

    def cvtColor(src: Any, code: int, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - OpenCV's name
        call = _trace.active_call()
        if call is None or not isinstance(src, TracedArray):
            return original(src, code, *args, **kwargs)
        owner, path, mode = _trace.source_of(src)
        if owner is not call:
            _trace.stop_trace("converts an array opened in an earlier __getitem__ call (a cache of images? the tracer "
                         "follows images opened in the call)")
        if code not in swaps or args or kwargs:
            _trace.stop_trace(f"calls cv2.cvtColor with code {code} (followed: cv2.COLOR_BGR2RGB; the native path makes "
                         "RGB)")
        return TracedArray(call, path, "RGB" if mode == "BGR" else "BGR")

    cvtColor.__wrapped__ = original  # type: ignore[attr-defined]
    return cvtColor


def _to_array(original: Any, who: str) -> Any:
    """numpy.array / numpy.asarray: a traced PIL image converted to RGB becomes the HWC
    uint8 array it stands for (`np.array(Image.open(path).convert("RGB"))`, then
    albumentations); anything else goes to numpy."""
    def to_array(obj: Any, *args: Any, **kwargs: Any) -> Any:
        call = _trace.active_call()
        if call is None or not isinstance(obj, _trace.TracedImage):
            return original(obj, *args, **kwargs)
        owner, path, mode = _trace.source_of(obj)
        if owner is not call:
            _trace.stop_trace(f"calls np.{who} on an image opened in an earlier __getitem__ call (a cache of images? the "
                         "tracer follows images opened in the call)")
        dtype = kwargs.pop("dtype", args[0] if args else None)
        if args[1:] or set(kwargs) - {"copy"} or (dtype is not None and np_dtype(dtype) != np_dtype("uint8")):
            _trace.stop_trace(f"calls np.{who} on the image with other arguments than copy= (followed: "
                         f"np.{who}(image), dtype uint8)")
        if mode != "RGB":
            _trace.stop_trace(f"calls np.{who} on the image without .convert('RGB') (an L, P or CMYK file would give "
                         "another array; the native path decodes to RGB)")
        return PixelArray(call, path, "RGB")

    to_array.__wrapped__ = original  # type: ignore[attr-defined]
    return to_array


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
