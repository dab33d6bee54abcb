"""A map-style dataset of the user's own class, learnt by running its own `__getitem__`.

fastload does not guess what arbitrary `__getitem__` code returns: it calls it, for each
index, under a tracer, and keeps what it can see through:

- `PIL.Image.open(path)` (a str or os.PathLike path) or `PIL.Image.open(f)` (a file
  opened with `open(path, "rb")`, not yet read) returns a `TracedImage` that records the
  path and reads nothing. `.convert("RGB")`, `.load()`, `.copy()`, `.close()`, `.filename`,
  `.mode` after `.convert("RGB")` and `with` keep it traced;
- `cv2.imread` + `cv2.cvtColor(BGR2RGB)`, `np.array(image)` of an image converted to RGB,
  torchvision.io's `read_image` / `decode_image` / `decode_jpeg(read_file(path))`, and
  `open(path, "rb").read()` into
  `Image.open(io.BytesIO(data))` are followed too (fastload/compat/openers.py: lazy arrays,
  tensors and bytes, each with its own checks and refusals);
- a torchvision (v1, v2) or timm transform, or an nn.Sequential, called with the traced
  image alone, or an albumentations transform called with `image=` the traced array
  alone (compat/albumentations.py), returns a `TracedOutput` standing for "the
  transform's output for this sample" (albumentations': `{"image": output}`) and records
  the transform object (the transform is not run);
- the sample returned is kept as it is, the output replaced by a slot the engine's
  batch fills. Labels (an int, a tensor, a dict entry, ...) and other fields are whatever
  `__getitem__` returned, collated per batch with torch's default_collate.

The result is the same `Analysis` a torchvision ImageFolder gets (a SampleIndex of paths
+ one transform pipeline), so the engine, resume, DDP and stats run it unchanged; the
chain reads "traced <Class>.__getitem__". A sample `(output, int label)` (or a 0-d int64
tensor label) keeps its labels in the index; any other structure (a dict, extra fields,
other label types) is rebuilt per batch from the recorded values (LazyTrace.__call__ in
fastload/compat/trace_lazy.py, or the user's collate_fn around them: collate.py):
the dataset must then be the loader's own dataset, not inside a Subset or ConcatDataset.

What the tracer does not see through sends the dataset to the generic path, the reason
naming the user's file:line:

- the image used any other way before a transform fastload maps: pixels read
  (`np.asarray`, `.getpixel`), `.size` / `.width` / `.mode` before `.convert("RGB")` (they
  need the file's header), `.crop`, `.resize`, `.rotate`, ...; `.convert` to a mode other
  than "RGB" (the native pipeline makes 3 channels); a transform given an image not
  converted to RGB (an L, P or CMYK file would reach it in another mode);
- `Image.open` of bytes not read from a file in the call (a BytesIO of bytes kept in
  memory, an archive member): fastload reads files by path;
- a second transform applied to a transform's output, a transform's output used
  (`.float()`, `[0]`, ...), two images per sample, an image that does not reach the
  sample, the image returned without a transform;
- random numbers drawn outside the transforms (Python's `random`, numpy's global
  generator, torch's CPU generator, compared before and after; the caller's states are
  restored either way);
- an exception; index 0 traced twice returning different samples; another transform
  object than index 0's;
- a dataset that keeps what its call made (a cache): an image kept and used again, or
  the transform's output kept (the probes' effects on the dataset undone, so the generic
  path does not find the stand-in; fastload/compat/rollback.py). An image kept where no
  rollback reaches it (a module-level cache) turns into the real image (PIL.Image.open(path),
  converted as traced) on first use.

A dataset whose `__getitem__` opens no image with PIL (a TensorDataset, ...) keeps the
compat layer's reason unchanged. FASTLOAD_TRACE=0 in the environment turns the tracer off.

Not every index is traced when the loader is built: index 0 (twice) and 16 indexes spread
over the dataset are probed (a fixed cost, whatever the length; what the calls changed on
the dataset undone), and decide native or generic; a trace holds for one epoch, each
served index traced just before the engine is handed its batch, and a later index whose
trace disagrees runs through its own __getitem__ per sample (fastload/compat/
trace_lazy.py; inside a Subset or ConcatDataset as lazily, through trace_views.py).
A trace is an `__getitem__` call without decoding (no file is opened by path, a
file opened with `open(path, "rb")` is opened and closed): about 15 us per sample on a
quiet machine against ~1 ms for a decode (benchmarks/trace_lazy.py, benchmarks/RESULTS.md).

Example:
    >>> import os, tempfile, torch
    >>> from PIL import Image
    >>> from torchvision import transforms as T
    >>> from fastload.compat.datasets import analyse
    >>> path = os.path.join(tempfile.mkdtemp(), "a.jpg"); Image.new("RGB", (8, 8)).save(path)
    >>> class Photos(torch.utils.data.Dataset):
    ...     def __init__(self, transform): self.transform = transform
    ...     def __len__(self): return 1
    ...     def __getitem__(self, i): return self.transform(Image.open(path).convert("RGB")), 7
    >>> photos = Photos(T.Compose([T.CenterCrop(4), T.ToTensor()]))
    >>> analysis = analyse(photos)
    >>> analysis.trace.prepare([0])  # (what the loader does as each epoch reaches the index)
    >>> analysis.chain, analysis.index.labels.tolist(), [type(s).__name__ for s in analysis.pipeline.native]
    ('traced Photos.__getitem__', [7], ['CenterCrop', 'ToDtype'])
    >>> class Peeks(Photos):
    ...     def __getitem__(self, i): return self.transform(Image.open(path).convert("RGB").crop((0, 0, 4, 4))), 7
    >>> analyse(Peeks(T.ToTensor())).reasons[0]
    "Peeks.__getitem__ (traced, index 0): uses the image's .crop before a transform ... at <doctest ...>:2"
"""

from __future__ import annotations

import io
import os
import random
import sys
import sysconfig
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import PIL.Image
import torch

from fastload.augment.split import MAX_DEPTH
from fastload.compat.datasets import Analysis, Conversion
from fastload.source.index import SampleIndex

# The environment variable that turns the tracer off ("0").
TRACE_ENV = "FASTLOAD_TRACE"
# Class modules whose transforms are intercepted where a traced image enters them (what
# fastload.compat.torchvision and fastload.compat.timm map).
_TRANSFORM_MODULES = ("torchvision.transforms", "timm.data")
# albumentations' transforms take the image as a keyword: transform(image=array)["image"].
_ALBUMENTATIONS = "albumentations"
REFUSAL_FIX = ("keep the per-sample work inside the transform (torchvision's transforms are mapped), or "
        "use fastload.FileList(paths, labels, transforms=...)")


def enabled() -> bool:
    """False when FASTLOAD_TRACE=0 in the environment, or inside `disabled()` on this
    thread (the tracer is off)."""
    return os.environ.get(TRACE_ENV, "1") != "0" and not getattr(_off, "depth", 0)


_off = threading.local()


@contextmanager
def disabled() -> Iterator[None]:
    """The tracer off on this thread (what `fastload.DataLoader(..., trace=False)` does).

    Example:
        >>> with disabled():
        ...     enabled()
        False
    """
    _off.depth = getattr(_off, "depth", 0) + 1
    try:
        yield
    finally:
        _off.depth -= 1


# ---- where: the user's file:line -------------------------------------------------------

_LIBRARY_DIRS: Optional[Tuple[str, ...]] = None


def _library_dirs() -> Tuple[str, ...]:
    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # fastload itself
        for name in ("torch", "torchvision", "PIL", "numpy", "timm"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__file__", None):
                dirs.append(os.path.dirname(os.path.abspath(module.__file__)))
        _LIBRARY_DIRS = tuple(d + os.sep for d in dirs)
    return _LIBRARY_DIRS


_STDLIB = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["stdlib"],
                                                      sysconfig.get_paths()["platstdlib"]})
_KINDS: dict = {}
_BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench") + os.sep
_CORE, _PACKAGE, _USER = 0, 1, 2


def _kind(filename: str) -> int:
    """_CORE for fastload, torch, torchvision, PIL, numpy, timm and the standard library;
    _PACKAGE for other installed packages; _USER for the rest (the user's code)."""
    kind = _KINDS.get(filename)
    if kind is None:
        path = os.path.abspath(filename)
        packaged = "-packages" + os.sep in path
        if path.startswith(_BENCH_DIR):  # fastload-bench's datasets stand for the user's own code
            kind = _USER
        elif filename.startswith(("<frozen", "<__array_function__")) or path.startswith(_library_dirs()) or \
                (path.startswith(_STDLIB) and not packaged):
            kind = _CORE
        else:
            kind = _PACKAGE if packaged else _USER
        _KINDS[filename] = kind
    return kind


def _where_frame(frame: Any) -> str:
    """file:line of the innermost frame of the user's code at or outside `frame`, within
    the traced call (else of another package's code, else `frame`'s)."""
    innermost, package = frame, None
    while frame is not None and frame.f_code is not trace_call.__code__:
        kind = _kind(frame.f_code.co_filename)
        if kind == _USER:
            break
        if kind == _PACKAGE and package is None:
            package = frame
        frame = frame.f_back
    else:
        frame = package or innermost
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


def where_in_traceback(tb: Any) -> str:
    """file:line of the innermost frame of the user's code in a traceback (else of
    another package's code, else the innermost)."""
    found: dict = {}
    last = None
    while tb is not None:
        last = tb
        found[_kind(tb.tb_frame.f_code.co_filename)] = tb
        tb = tb.tb_next
    tb = found.get(_USER) or found.get(_PACKAGE) or last
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"


def where_defined(dataset: Any) -> str:
    """file:line where the dataset's __getitem__ is defined."""
    code = getattr(getattr(type(dataset), "__getitem__", None), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else type(dataset).__qualname__


# ---- one traced __getitem__ call ----------------------------------------------------------


class StopTrace(BaseException):
    """Ends a traced call the tracer cannot see through (BaseException: a dataset's own
    `except Exception` does not swallow it). The reason is on the call."""


@dataclass
class _Problem:
    why: str
    where: str


class TracedCall:
    """The record of one `__getitem__` call under the tracer."""

    __slots__ = ("opened", "outputs", "problem")

    def __init__(self) -> None:
        self.opened: List[Optional[str]] = []  # each Image.open: its path (None: not a path)
        self.outputs: List["TracedOutput"] = []  # each intercepted transform call
        self.problem: Optional[_Problem] = None

    def enter(self, transform: Any, image: Any) -> "TracedOutput":
        """`transform(image)` for a transform fastload maps."""
        name = type(transform).__name__
        if isinstance(image, TracedOutput):
            stop_trace(f"applies {name} to the output of {type(image.transform).__name__} (one transform call per "
                  "image is followed: put the transforms in one Compose)")
        call, _, mode = source_of(image)
        if call is not self:
            stop_trace("uses an image opened in an earlier __getitem__ call (a cache of images? the tracer follows "
                  "images opened in the call)")
        _check_entry(transform, image, mode)
        if any(out.image is image for out in self.outputs):
            stop_trace("passes one image to two transform calls (two views per sample are not followed)")
        out = TracedOutput(self, transform, image)
        self.outputs.append(out)
        return out


def _takes_pil_only(transform: Any) -> str:
    """The name of a transform in `transform` that does not take tensors as PIL images
    (ToTensor, PILToTensor, ToPILImage, timm's), else "". The last answer is kept per
    thread: every index of a dataset passes the same transform."""
    last = getattr(thread_state, "pil_only", None)
    if last is not None and last[0] is transform:
        return last[1]
    from fastload.compat.torchvision import flatten

    found = next((type(leaf).__name__ for leaf in flatten(transform)[0]
                  if type(leaf).__name__ in ("ToTensor", "PILToTensor", "ToPILImage")
                  or type(leaf).__module__.startswith("timm.")), "")
    thread_state.pil_only = (transform, found)
    return found


def _check_entry(transform: Any, image: Any, mode: Optional[str]) -> None:
    """Ends the call where the image reaches `transform` in a layout the native path does
    not give it as the user's code would: another mode than RGB, or a kind of image the
    transform's library does not take as the engine's output stands for it."""
    from fastload.compat import albumentations, openers

    name = type(transform).__name__
    albu = albumentations.is_albumentations(transform)
    if isinstance(image, openers.TracedArray):
        if not albu:
            stop_trace(f"passes a numpy array (cv2.imread's, np.array(image)) to {name} (followed: numpy arrays into "
                  "albumentations' transforms, PIL images and torchvision.io tensors into torchvision's)")
        if mode == "BGR":
            stop_trace(f"passes the BGR array of cv2.imread to {name} without cv2.cvtColor(image, cv2.COLOR_BGR2RGB) "
                  "(its channels would reach the transform swapped; the native path decodes to RGB)")
        return
    if albu:
        kind = "a PIL image" if isinstance(image, TracedImage) else "a tensor"
        stop_trace(f"passes {kind} to albumentations' {name} (it takes numpy arrays: followed, cv2.imread + "
              "cv2.cvtColor(image, cv2.COLOR_BGR2RGB))")
    if isinstance(image, openers.TracedTensor):
        if mode != "RGB":
            stop_trace(f"passes a {mode} tensor (ImageReadMode.UNCHANGED on a file of that many channels) to {name} "
                  "(the native path makes RGB: pass mode=ImageReadMode.RGB)")
        pil_only = _takes_pil_only(transform)
        if pil_only:
            stop_trace(f"passes a tensor of torchvision.io to {name}, whose {pil_only} takes PIL images (followed: "
                  "torchvision's v2 transforms on tensors, e.g. v2.ToDtype(torch.float32, scale=True) in place of "
                  "ToTensor)")
        return
    if mode != "RGB":
        stop_trace(f"passes the image to {name} without .convert('RGB') (an L, P or CMYK file would reach it in "
              "another mode; the native path decodes to RGB)")


thread_state = threading.local()


def active_call() -> Optional[TracedCall]:
    return getattr(thread_state, "call", None)


def stop_trace(why: str) -> Any:
    """Ends the active traced call: the tracer cannot see through what the code does."""
    call = active_call()
    if call is not None and call.problem is None:
        call.problem = _Problem(why, _where_frame(sys._getframe(1)))
    raise StopTrace(why)


# Attributes of a traced image that its trace follows.
_FOLLOWED = frozenset({"convert", "load", "copy", "close", "filename", "mode", "__class__", "__dict__"})
# Attributes that read pixels, and that read the file's header.
_PIXELS = frozenset({"__array_interface__", "__array__", "__array_struct__", "tobytes", "getdata", "getpixel",
                     "im", "_im", "histogram", "getextrema", "getchannel", "split", "point", "getbbox"})
_HEADER = frozenset({"size", "width", "height", "_size", "info", "format", "getexif", "_mode"})


def traced_image_state(image: "TracedImage") -> Tuple[TracedCall, str, Optional[str]]:
    """(call, path, mode) of a traced image, without making it a real one."""
    return object.__getattribute__(image, "__dict__")["_fastload_trace"]


def source_of(image: Any) -> Tuple[TracedCall, str, Optional[str]]:
    """(call, path, mode) of any traced image (PIL's, OpenCV's, torchvision.io's)."""
    return object.__getattribute__(image, "__dict__")["_fastload_trace"] if isinstance(image, TracedImage) \
        else object.__getattribute__(image, "_fastload_trace")


class TracedImage(PIL.Image.Image):
    """What `PIL.Image.open` returns while a dataset is traced: the source path and the
    mode it was converted to (None: as the file is, which the tracer does not read).

    Outside a trace (a dataset that kept it, e.g. in a cache) it turns into the real
    image on first use: PIL.Image.open(path), converted as traced."""

    def __init__(self, call: TracedCall, path: str, mode: Optional[str]):  # (no PIL state: nothing is read)
        object.__getattribute__(self, "__dict__")["_fastload_trace"] = (call, path, mode)

    def __getattribute__(self, name: str) -> Any:
        if active_call() is None:
            _materialise(self)
            return getattr(self, name)
        if name in _FOLLOWED or name == "_fastload_trace" or (
                name.startswith("__") and name.endswith("__") and name not in _PIXELS):
            return object.__getattribute__(self, name)
        if name in _PIXELS:
            stop_trace("reads the image's pixels before a transform fastload maps")
        if name in _HEADER:
            stop_trace(f"reads the image's .{name.lstrip('_')} (it needs the file's header, which the tracer does not "
                  "read)")
        stop_trace(f"uses the image's .{name} before a transform fastload maps (followed: Image.open, "
              ".convert('RGB'), .load(), .copy(), with; then a torchvision transform)")

    def convert(self, mode: Optional[str] = None, *args: Any, **kwargs: Any) -> Any:
        call, path, _ = traced_image_state(self)
        if mode != "RGB" or args or kwargs:
            extra = ", ..." if args or kwargs else ""
            stop_trace(f"converts the image with .convert({mode!r}{extra}) (the native pipeline makes RGB; only "
                  ".convert('RGB') is followed)")
        return TracedImage(call, path, "RGB")

    def load(self) -> None:  # type: ignore[override]
        return None

    def copy(self) -> "TracedImage":
        return TracedImage(*traced_image_state(self))

    def close(self) -> None:
        return None

    def __enter__(self) -> "TracedImage":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @property
    def filename(self) -> str:  # type: ignore[override]
        return traced_image_state(self)[1]

    @property
    def mode(self) -> str:  # type: ignore[override]
        mode = traced_image_state(self)[2]
        if mode is None:
            stop_trace("reads the image's .mode before .convert('RGB') (it needs the file's header, which the tracer "
                  "does not read)")
        return mode  # type: ignore[return-value]

    def __repr__(self) -> str:
        _, path, mode = traced_image_state(self)
        return f"TracedImage({path!r}, mode={mode!r})"


def _materialise(image: TracedImage) -> None:
    """Turns a traced image kept past its trace into the real one, in place."""
    _, path, mode = traced_image_state(image)
    real = PIL.Image.open(path)  # (patched or not: no traced call on this thread)
    real = real.convert(mode) if mode else real
    real.load()  # decoded now: the real image's file is closed
    state = object.__getattribute__(image, "__dict__")
    state.clear()
    state.update(vars(real))
    object.__setattr__(image, "__class__", type(real))


class TracedOutput:
    """What an intercepted transform call returns while tracing: the transform's output
    for this sample, which the engine makes."""

    __slots__ = ("call", "transform", "image", "__weakref__")

    def __init__(self, call: TracedCall, transform: Any, image: TracedImage):
        self.call, self.transform, self.image = call, transform, image

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        transform = object.__getattribute__(self, "transform")
        stop_trace(f"uses the output of {type(transform).__name__} (.{name}) (followed: the output returned as it is, "
              "inside a tuple, list or dict)")

    def __repr__(self) -> str:
        return f"TracedOutput({type(self.transform).__name__}, {source_of(self.image)[1]!r})"


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
        if call is not None and len(args) == 1 and not kwargs and isinstance(args[0], _traced_kinds()) \
                and _is_transform(self):
            return call.enter(self, args[0])
        return original(self, *args, **kwargs)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _traced_kinds() -> Tuple[type, ...]:
    from fastload.compat.openers import LAZY

    return (TracedImage, TracedOutput) + LAZY


def _intercepting_albumentations(original: Any) -> Any:
    """An albumentations __call__: `transform(image=traced)` returns {"image": output}."""
    def __call__(self: Any, *args: Any, force_apply: bool = False, **data: Any) -> Any:
        call = active_call()
        if call is not None and not args and isinstance(data.get("image"), _traced_kinds()):
            others = sorted(k for k in data if k != "image")
            if others:
                stop_trace(f"passes {', '.join(others)} with the image to {type(self).__name__} (followed: image= "
                      "alone; the native path makes the image only)")
            return {"image": call.enter(self, data["image"])}
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
    from fastload.compat.openers import TracedBytesIO

    return isinstance(fp, TracedBytesIO)


def _path_of(fp: Any) -> Tuple[Optional[str], str]:
    """(the file's path, "") when `fp` is a path or a file opened from one and not yet
    read; else (None, what it is)."""
    from fastload.compat.openers import TracedBytesIO, TracedFile

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
            with _user_globals(dataset):
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
            from fastload.compat import openers

            targets += openers.targets()
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


# ---- the global generators ----------------------------------------------------------------


def global_rng_state() -> Tuple[Any, Any, torch.Tensor]:
    return random.getstate(), np.random.get_state(), torch.default_generator.get_state()


def global_rng_moved(before: Tuple[Any, Any, torch.Tensor]) -> List[str]:
    """The global generators drawn from since `before`."""
    py, npy, tch = before
    moved = []
    if random.getstate() != py:
        moved.append("random")
    now = np.random.get_state()
    if now[2:] != npy[2:] or not np.array_equal(now[1], npy[1]):
        moved.append("numpy.random")
    if not torch.equal(torch.default_generator.get_state(), tch):
        moved.append("torch")
    return moved


def global_rng_restore(state: Tuple[Any, Any, torch.Tensor]) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.default_generator.set_state(state[2])


# ---- tracing a dataset -------------------------------------------------------------------


class Slot:
    """Where the engine's batch goes in a sample template."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<image>"


SLOT = Slot()


class TracedSample(NamedTuple):
    """One traced index: the image's path, the transform, the sample with the output
    replaced by SLOT, and where SLOT sits (keys/positions)."""

    path: str
    transform: Any
    template: Any
    slot_at: Tuple[Any, ...]


_NOTHING = object()


class TraceRefused(Exception):
    def __init__(self, why: str, where: str):
        super().__init__(why)
        self.why, self.where = why, where


# Leaves that hold no traced object (checked first: most of a sample is labels).
PLAIN_LEAVES = (int, float, str, bool, type(None), torch.Tensor, np.ndarray, np.int64)


def _lazy(value: Any) -> bool:
    from fastload.compat.openers import Lazy

    return isinstance(value, Lazy)


def templated(value: Any, out: Any, found: List[Tuple[Any, ...]], at: Tuple[Any, ...], depth: int = 0) -> Any:
    """`value` with `out` replaced by SLOT (its place appended to `found`), copying the
    tuples, lists, dicts and namedtuples around it; TraceRefused for a traced image returned."""
    if value is out:
        found.append(at)
        return SLOT
    kind = type(value)
    if kind in PLAIN_LEAVES:
        return value
    if kind is TracedImage or _lazy(value):
        raise TraceRefused("returns the image itself, not a transform's output (a transform fastload maps must "
                       "make the sample's image)", "")
    if kind is TracedOutput:
        raise TraceRefused("returns a transform output of another call", "")
    if depth >= MAX_DEPTH:
        return value
    if kind is tuple or kind is list:
        return kind([templated(v, out, found, at + (k,), depth + 1) for k, v in enumerate(value)])
    if isinstance(value, tuple) and hasattr(kind, "_fields"):  # a namedtuple
        return kind(*[templated(v, out, found, at + (k,), depth + 1) for k, v in enumerate(value)])
    if kind is dict:
        return {k: templated(v, out, found, at + (k,), depth + 1) for k, v in value.items()}
    return value


def trace_call(dataset: Any, i: int) -> Tuple[TracedCall, Any]:
    call = TracedCall()
    thread_state.call = call
    sample = None
    try:
        sample = dataset[i]
    except StopTrace:
        pass
    except Exception as error:  # noqa: BLE001 - any exception of the user's code is a reason
        if call.problem is None:
            call.problem = _Problem(f"raised {type(error).__name__}: {error}", where_in_traceback(error.__traceback__))
    finally:
        thread_state.call = None
    return call, sample


def sample_of_call(dataset: Any, call: TracedCall, sample: Any) -> TracedSample:
    """The traced index, or TraceRefused."""
    if call.problem is not None:
        raise TraceRefused(call.problem.why, call.problem.where)
    if len(call.opened) != 1:
        raise TraceRefused(f"opens {len(call.opened)} images per sample (one is followed)", "")
    if not call.outputs:
        templated(sample, _NOTHING, [], ())  # type: ignore[arg-type]  # a raw image returned: that reason
        raise TraceRefused("opens an image that reaches no transform fastload maps", "")
    if len(call.outputs) > 1:
        raise TraceRefused(f"calls transforms {len(call.outputs)} times per sample (one call is followed)", "")
    out = call.outputs[0]
    if type(sample) is tuple and len(sample) == 2 and sample[0] is out and type(sample[1]) in PLAIN_LEAVES:
        return TracedSample(source_of(out.image)[1], out.transform, (SLOT, sample[1]), (0,))  # the common case, quickly
    found: List[Tuple[Any, ...]] = []
    template = templated(sample, out, found, ())
    if len(found) != 1:
        raise TraceRefused(f"returns the output of {type(out.transform).__name__} {len(found)} times (followed: "
                       "once, inside a tuple, list or dict)" if found else
                       f"does not return the output of {type(out.transform).__name__} as it is (followed: inside "
                       "a tuple, list or dict)", "")
    return TracedSample(source_of(out.image)[1], out.transform, template, found[0])


def same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object that cannot be compared: not the same
        return False


def is_int_label(value: Any) -> bool:
    """An int class index that default_collate batches into int64 like the index's labels."""
    if type(value) is int or type(value) is np.int64:
        return True
    return isinstance(value, torch.Tensor) and value.dtype == torch.int64 and value.dim() == 0 and \
        value.layout == torch.strided and value.device.type == "cpu" and not value.requires_grad


def is_simple_template(t: Any) -> bool:
    """A template (SLOT, int label): batches are [images, labels int64 [B]] as the index gives."""
    return type(t) in (tuple, list) and len(t) == 2 and t[0] is SLOT and is_int_label(t[1])


@dataclass
class TracedAnalysis(Analysis):
    """An Analysis from a trace; `rebuild` (the LazyTrace, fastload/compat/trace_lazy.py)
    makes each batch in the dataset's own structure."""

    rebuild: Any = None
    trace: Any = None  # the LazyTrace (fastload.compat.trace_lazy): what was traced, what fell back

    def conversion(self) -> "TracedConversion":
        base = super().conversion()
        return TracedConversion(**{f.name: getattr(base, f.name) for f in fields(base)}, rebuild=self.rebuild)


@dataclass(frozen=True)
class TracedConversion(Conversion):
    """A Conversion from a trace; `rebuild(images, rows)` makes a batch of the dataset's
    own structure where the index's labels are its dataset indexes (None: they are the
    class labels, batches are [images, labels])."""

    rebuild: Any = None


def _map_style(dataset: Any) -> bool:
    if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(type(dataset), "__getitem__"):
        return False
    try:
        len(dataset)
    except Exception:  # noqa: BLE001 - no usable __len__: nothing to trace
        return False
    return True


def sample_unless_kept(dataset: Any, traced: List[Any], undo: Callable[[], None]) -> TracedSample:
    """sample_of_call(dataset, call, value) of traced = [call, value] (emptied: nothing of the
    tracer's holds the call's objects afterwards), unless the dataset kept the transform's
    output or what the call opened after it returned (a cache, where the generic path
    would find the stand-in): then the dataset is refused, and `undo()` (the probes'
    rollback.Snapshot restored) takes the stand-ins out of its state."""
    call, value = traced
    traced.clear()
    refusal = None
    try:
        sample = sample_of_call(dataset, call, value)
    except TraceRefused as error:
        refusal = error.with_traceback(None)  # (its frames would keep the outputs alive)
    kept = [weakref.ref(out) for out in call.outputs]
    lazies = _lazies_made_in(call)
    call.outputs.clear()
    del call, value
    for refs, what in ((kept, "the transform's output"), (lazies, "what it opened")):
        alive = [ref() for ref in refs if ref() is not None]
        if alive:
            if what != "the transform's output":
                what += f" ({type(alive[0]).__name__})"
            del alive
            undo()
            removed = all(ref() is None for ref in refs)
            raise TraceRefused(f"keeps {what} after __getitem__ returns (a cache? the tracer's stand-in "
                           + ("was taken out of it)" if removed else "is held outside the dataset, where it could not "
                              "be taken out: set FASTLOAD_TRACE=0)"), where_defined(dataset))
    if refusal is not None:
        raise refusal
    return sample


def _lazies_made_in(call: TracedCall) -> List[Any]:
    from fastload.compat.openers import made_in

    return made_in(call)


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
                last[0] = _where_frame(frame)
        return tracer

    global_rng_restore(before)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        trace_call(dataset, index)
    finally:
        sys.settrace(previous)
    return found[0] or where_defined(dataset)


def trace_dataset(dataset: Any, refused: Analysis, *, wrapped: bool) -> Analysis:
    """The analysis of a dataset the compat layer does not recognise (`refused`, with its
    reasons), learnt from its own `__getitem__`: a TracedAnalysis when the trace sees
    through it; else `refused` with the trace's reason and the user's file:line (for a
    DatasetFolder, added to its reasons; for another class, in place of them); `refused`
    itself when the tracer is off or index 0 opens no image with PIL.

    Up front, index 0 (twice) and a few indexes spread over the dataset are traced
    (fastload.compat.trace_lazy); the rest as the loader reaches them, also inside a
    Subset or ConcatDataset (`wrapped`: the wrapper takes its indexes through a LazyView,
    fastload.compat.trace_views)."""
    from fastload.compat.trace_lazy import probe

    if not enabled() or not _map_style(dataset):
        return refused
    name = type(dataset).__name__
    if getattr(type(dataset), "__getitems__", None) is not None:  # torch fetches batches through it instead
        return refused
    result = probe(dataset)
    if result is None:
        return refused
    if isinstance(result, TraceRefused):
        reason = f"{name}.__getitem__ (traced, index {result.index}): {result.why} at {result.where}"  # type: ignore
        folder = sys.modules.get("torchvision.datasets.folder")
        if folder is not None and isinstance(dataset, folder.DatasetFolder):
            return refused.refuse(reason, REFUSAL_FIX)
        out = Analysis(refused.chain, transform=refused.transform, pipeline=refused.pipeline,
                       wrappers=list(refused.wrappers))
        return out.refuse(reason, REFUSAL_FIX)
    return _analysis(dataset, result, wrapped)


@contextmanager
def _user_globals(dataset: Any) -> Iterator[None]:
    """The openers bound by name in the dataset's modules (`from torchvision.io import
    read_image`) swapped for the tracing ones while it is traced (inside tracing_patches)."""
    from fastload.compat import openers

    with _PATCH_LOCK:
        done = openers.user_globals(dataset, list(_patches))
    try:
        yield
    finally:
        for namespace, key, original in done:
            namespace[key] = original


def pipeline_of(transform: Any) -> Any:
    """(Pipeline, wrappers opened) of a transform a traced call intercepted: torchvision's,
    timm's or albumentations' (the cut into the native prefix and the Python tail, read
    from the transform's parameters as they are now)."""
    from fastload.compat import albumentations
    from fastload.compat.torchvision import flatten, split_transform

    if albumentations.is_albumentations(transform):
        return albumentations.split_transform(transform, to_run=True)
    return split_transform(transform, to_run=True), flatten(transform)[1]


def _analysis(dataset: Any, traced: Any, wrapped: bool) -> Analysis:
    """The TracedAnalysis of a dataset whose probes traced (traced: a LazyTrace)."""
    name = type(dataset).__name__
    out = TracedAnalysis(f"traced {name}.__getitem__")
    out.transform = traced.first.transform
    out.pipeline, out.wrappers = pipeline_of(out.transform)
    out.trace = traced
    if not wrapped or traced.simple:
        # (inside a Subset or ConcatDataset, the wrapper takes this index's rows lazily:
        # fastload.compat.trace_views)
        out.index, out.rebuild = traced.index, traced
        return out
    return out.refuse(f"{name}.__getitem__ (traced) returns {shape_text(traced.first.template)}: samples other than "
                      "(image, int label) are rebuilt only for the loader's own dataset, not inside a Subset or "
                      "ConcatDataset", "pass the dataset itself, or return (image, int label)")


def shape_text(template: Any) -> str:
    if isinstance(template, dict):
        return "{" + ", ".join(f"{k!r}: {shape_text(v)}" for k, v in template.items()) + "}"
    if isinstance(template, (tuple, list)):
        inner = ", ".join(shape_text(v) for v in template)
        return f"({inner})" if isinstance(template, tuple) else f"[{inner}]"
    return "image" if template is SLOT else type(template).__name__
