"""The tracer's other image openers: OpenCV, torchvision.io and bytes read from a file.

`fastload/trace/` follows `PIL.Image.open`; this module adds the other ways a
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
    >>> from fastload.adapters import analyse
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
import weakref
from typing import Any, Iterator, List, Optional, Tuple

import PIL.Image
import torch

from fastload.decode.header import HEAD_BYTES, file_header
from fastload.trace.state import active_call, source_of, stop_trace, thread_state


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
    with unpatched(PIL.Image, "open")(path) as image:
        return image.height, image.width, len(image.getbands())


def check_orientation(path: str, who: str, fix: str) -> None:
    # JPEG and PNG headers (other formats would be decoded). An unreadable file is left
    # to the engine, which reports it under the loader's on_error, as for Image.open(path).
    found = file_header(path, others=False)
    orientation = 1 if found is None else found.orientation
    if orientation != 1:
        stop_trace(f"{who} turns {os.path.basename(path)!r} by its EXIF orientation ({orientation}); the native "
                     f"path decodes images as stored (as PIL's Image.open): {fix}")


def header_or_stop(path: str, what: str) -> Tuple[int, int, int]:
    try:
        return header(path)
    except (OSError, RuntimeError, ValueError) as error:
        stop_trace(f"reads {what}, which needs the header of {path!r}, and it cannot be read ({error})")
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
        made = getattr(thread_state, "lazies", None)
        if made is None or made[0] != id(call):
            made = thread_state.lazies = (id(call), [])
        made[1].append(weakref.ref(self))

    def __getattribute__(self, name: str) -> Any:
        if name == "_fastload_trace" or name in type(self)._ANSWERED or name in ("__class__", "__repr__"):
            return object.__getattribute__(self, name)
        if active_call() is None:
            raise TypeError(f"fastload: {object.__getattribute__(self, '__repr__')()} stands for "
                            f"{type(self)._WHAT} of a traced __getitem__ call; it was kept past the trace (a "
                            "cache?). Set FASTLOAD_TRACE=0 for this dataset")
        if name in ("__array__", "__array_interface__", "__array_struct__", "__array_priority__", "tobytes",
                    "numpy", "tolist", "__dlpack__", "__buffer__"):
            stop_trace(f"reads the pixels of {type(self)._WHAT} before a transform fastload maps")
        if name.startswith("__") and name.endswith("__") and name not in ("__getitem__", "__len__", "__iter__"):
            return object.__getattribute__(self, name)
        stop_trace(f"uses {type(self)._WHAT}'s .{name} before a transform fastload maps (followed: "
                     f"{type(self)._FOLLOWED})")

    _FOLLOWED = ""

    def __getitem__(self, key: Any) -> Any:
        stop_trace(f"indexes {type(self)._WHAT} ([...]) before a transform fastload maps")

    def __len__(self) -> int:
        stop_trace(f"takes len() of {type(self)._WHAT} before a transform fastload maps")
        return 0

    def __iter__(self) -> Iterator[Any]:
        stop_trace(f"iterates over {type(self)._WHAT} before a transform fastload maps")
        return iter(())

    def _arith(self, *args: Any) -> Any:
        stop_trace(f"computes with {type(self)._WHAT} before a transform fastload maps")

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
        height, width, _ = header_or_stop(source_of(self)[1], "the array's .shape")
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
                name.startswith("__") and name.endswith("__") and active_call() is not None):
            return object.__getattribute__(self, name)
        if active_call() is None:
            return Lazy.__getattribute__(self, name)
        stop_trace("reads the image's pixels before a transform fastload maps")

    def _pixels(self, *args: Any) -> Any:
        stop_trace("reads the image's pixels before a transform fastload maps")

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
        mode = source_of(self)[2]
        height, width, _ = header_or_stop(source_of(self)[1], "the tensor's .shape")
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
            stop_trace("seeks the BytesIO of an image file's bytes before Image.open (followed: "
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
            self._real = unpatched_open()(self._path, *self._args, **self._kwargs)
        return self._real

    def read(self, size: int = -1) -> Any:
        call = active_call()
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
    made = getattr(thread_state, "lazies", None)
    return list(made[1]) if made is not None and made[0] == id(call) else []


LAZY = (TracedArray, TracedTensor)  # what a transform may be given, besides a PIL TracedImage


def unpatched(owner: Any, name: str) -> Any:
    value = getattr(owner, name)
    return getattr(value, "__wrapped__", value)


def unpatched_open() -> Any:
    import builtins

    return unpatched(builtins, "open")
