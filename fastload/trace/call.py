"""A traced image and what a transform makes of it: `TracedImage`, `TracedOutput`, `enter`."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import PIL.Image

from fastload.trace.openers import TracedArray, TracedTensor
from fastload.trace.state import TracedCall, active_call, source_of, stop_trace, thread_state


def enter(call: TracedCall, transform: Any, image: Any) -> "TracedOutput":
    """`transform(image)` for a transform fastload maps, recorded on `call`."""
    name = type(transform).__name__
    if isinstance(image, TracedOutput):
        stop_trace(f"applies {name} to the output of {type(image.transform).__name__} (one transform call per "
              "image is followed: put the transforms in one Compose)")
    owner, _, mode = source_of(image)
    if owner is not call:
        stop_trace("uses an image opened in an earlier __getitem__ call (a cache of images? the tracer follows "
              "images opened in the call)")
    _check_entry(transform, image, mode)
    # One image through several calls (SimCLR's two views, DINO's crops): each call's
    # output is an image view of its own (fastload.trace.sample).
    out = TracedOutput(call, transform, image)
    call.outputs.append(out)
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
    from fastload.compat import albumentations
    name = type(transform).__name__
    albu = albumentations.is_albumentations(transform)
    if isinstance(image, TracedArray):
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
    if isinstance(image, TracedTensor):
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


# Attributes of a traced image that its trace follows.
_FOLLOWED = frozenset({"convert", "load", "copy", "close", "filename", "mode", "__class__", "__dict__"})
# Attributes that read pixels, and that read the file's header.
_PIXELS = frozenset({"__array_interface__", "__array__", "__array_struct__", "tobytes", "getdata", "getpixel",
                     "im", "_im", "histogram", "getextrema", "getchannel", "split", "point", "getbbox"})
_HEADER = frozenset({"size", "width", "height", "_size", "info", "format", "getexif", "_mode"})


def traced_image_state(image: "TracedImage") -> Tuple[TracedCall, str, Optional[str]]:
    """(call, path, mode) of a traced image, without making it a real one."""
    return object.__getattribute__(image, "__dict__")["_fastload_trace"]


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
