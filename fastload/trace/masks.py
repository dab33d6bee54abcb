"""A segmentation mask: a second file of the sample, followed into one joint transform call with the image.

The tracer follows one image per sample (call.py); a segmentation dataset opens a second
file, the mask (a single-channel label map), and passes both to one transform call that
moves them alike. This module gives the mask its stand-ins and reads what the joint call
does to it; the engine then makes it as a `fastload.augment.views.Mask` following the
image's geometry (the mask's file table: masked.py).

| the user's code | stand-in | what it stands for |
| --- | --- | --- |
| `np.array(Image.open(m))`, `cv2.imread(m, cv2.IMREAD_GRAYSCALE)` | `LabelMap` "array" | uint8 [H, W] ndarray |
| `torch.from_numpy(a)`, `torch.as_tensor(a[, dtype])` of it | `LabelMap` "tensor" | uint8 (int64) [H, W] tensor |
| `tv_tensors.Mask(Image.open(m))` / `tv_tensors.Mask(t)` | `LabelMap` "tv_mask" | tv_tensors.Mask [1, H, W] / [H, W] |
| `image, mask = v2_transform(image, tv_mask)`, `v2_transform({"image": image, "mask": tv_mask, ...})` | `MaskOutput` | the transformed mask |
| `out = albumentations_compose(image=image, mask=array)`, `out["mask"]` | `MaskOutput` | the transformed mask |
| `.long()`, `.to(torch.int64)`, `.squeeze(0)`, `.unsqueeze(0)`, `np.array(m)`, `torch.as_tensor(m, dtype=torch.int64)` | `MaskOutput` | the same mask, another dtype or layout |

A mask file must be what the engine decodes as a label map as the user's reader does:
an 8-bit L or P PNG (`np.array` / `pil_to_tensor` of a P image are its palette indexes)
or a grayscale JPEG; `cv2.imread(m, IMREAD_GRAYSCALE)` only on L files (OpenCV reads a
palette PNG's colours as grey levels, not its indexes). What the joint call does to the
mask is read from its transforms: torchvision v2's geometric transforms (RandomResizedCrop,
Resize, CenterCrop, RandomCrop with its `fill` for tv_tensors.Mask, flips) resize it with
torch's nearest rule ("tensor"), albumentations' with OpenCV's INTER_NEAREST ("cv2", or
"pil" for INTER_NEAREST_EXACT); a v2 ToDtype's dict gives it its own dtype
(`{tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64, "others": None}`);
colour ops, ToImage, ToDtype of one dtype, Normalize and ToTensorV2 leave it as it is.
Anything else ends the trace with the user's file:line:
a transform that moves the mask another way (rotations, affine, elastic), a mask made in
the call rather than read from its file (thresholded, np.load-ed, computed), a PIL mask
given to v2 transforms (they treat it as an image), a plain tensor beside a PIL image
(v2 passes it through untouched), a dtype the engine does not make (it makes uint8 and
int64).

Example:
    >>> import os, tempfile, numpy as np, torch
    >>> from PIL import Image
    >>> from torchvision import tv_tensors
    >>> from torchvision.transforms import v2
    >>> from fastload.trace import record, sample_of_call, tracing_patches
    >>> root = tempfile.mkdtemp()
    >>> Image.new("RGB", (8, 8)).save(os.path.join(root, "a.jpg"))
    >>> Image.new("L", (8, 8)).save(os.path.join(root, "a.png"))
    >>> class Pairs(torch.utils.data.Dataset):
    ...     def __init__(self, transforms): self.transforms = transforms
    ...     def __len__(self): return 1
    ...     def __getitem__(self, i):
    ...         image = Image.open(os.path.join(root, "a.jpg")).convert("RGB")
    ...         mask = tv_tensors.Mask(Image.open(os.path.join(root, "a.png")))
    ...         image, mask = self.transforms(image, mask)
    ...         return image, mask.squeeze(0).long()
    >>> pairs = Pairs(v2.Compose([v2.RandomCrop(4, fill={tv_tensors.Mask: 255, "others": 0}), v2.ToImage()]))
    >>> with tracing_patches(pairs):
    ...     traced = sample_of_call(pairs, *record(pairs, 0))
    >>> traced.template, traced.masks[0][1]
    ((<image>, <mask>), Mask(follows=0, fill=255, dtype=torch.int64, sampling='tensor', channel_dim=False))
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np
import torch

from fastload.augment.views import MASK_DTYPES, Mask
from fastload.trace.call import TracedImage, TracedOutput, enter
from fastload.trace.openers import Lazy, check_orientation
from fastload.trace.state import TracedCall, active_call, source_of, stop_trace

# v2 transforms whose geometry the mask follows on the engine, and those that leave a
# tv_tensors.Mask as it is (colour ops, conversions of images only).
_V2_MOVES = frozenset({"RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
                       "RandomVerticalFlip"})
_V2_KEEPS = frozenset({"ToImage", "ToDtype", "Normalize", "ColorJitter", "ToPureTensor", "ConvertImageDtype",
                       "Grayscale", "RandomGrayscale", "GaussianBlur", "PILToTensor"})
# albumentations' (2.x) transforms whose geometry the mask follows, and those that keep it.
_ALBU_MOVES = frozenset({"RandomResizedCrop", "Resize", "SmallestMaxSize", "CenterCrop", "RandomCrop",
                         "HorizontalFlip", "VerticalFlip"})
_ALBU_KEEPS = frozenset({"Normalize", "ColorJitter", "ToTensorV2"})
# albumentations' mask_interpolation -> the engine's nearest rule (cv2.INTER_NEAREST_EXACT is Pillow's).
_ALBU_SAMPLINGS = {0: "cv2", 6: "pil"}
_FOLLOWED_READS = ("np.array(Image.open(path)), cv2.imread(path, cv2.IMREAD_GRAYSCALE), tv_tensors.Mask(Image.open("
                   "path))")


class Layout(NamedTuple):
    """What the user's code holds of a mask: "array" (numpy), "tensor" or "tv_mask" (a
    tv_tensors.Mask), its dtype (torch's), and whether it is [1, H, W]."""

    kind: str
    dtype: torch.dtype
    channel_dim: bool


_UINT8_ARRAY = Layout("array", torch.uint8, False)


class LabelMap(Lazy):
    """A mask file's label map before the joint transform call (mode: its Layout)."""

    __slots__ = ()
    _WHAT = "the mask"
    _FOLLOWED = f"{_FOLLOWED_READS}, torch.from_numpy / torch.as_tensor of it; then one transform call with the image"
    _ANSWERED = frozenset({"dtype", "ndim"})

    @property
    def dtype(self) -> Any:
        layout = source_of(self)[2]
        return np.dtype(str(layout.dtype).replace("torch.", "")) if layout.kind == "array" else layout.dtype

    @property
    def ndim(self) -> int:
        return 3 if source_of(self)[2].channel_dim else 2


class MaskOutput(Lazy):
    """The mask a joint transform call makes (mode: (Layout, fill, sampling)), followed
    through a change of dtype or of its channel dim."""

    __slots__ = ()
    _WHAT = "the transformed mask"
    _FOLLOWED = ".long(), .to(dtype), .squeeze(0), .unsqueeze(0), np.array(m), torch.as_tensor(m, dtype=...), the " \
                "mask returned inside a tuple, list or dict"
    _ANSWERED = frozenset({"long", "byte", "to", "type", "squeeze", "unsqueeze", "contiguous", "clone", "detach",
                           "numpy", "astype", "dtype", "ndim", "record", "_again"})

    def _again(self, kind: Optional[str] = None, dtype: Any = None, channel_dim: Optional[bool] = None) -> "MaskOutput":
        call, path, (layout, fill, sampling) = source_of(self)
        if dtype is not None:
            dtype = _torch_dtype(dtype)
        layout = Layout(kind or layout.kind, dtype or layout.dtype,
                        layout.channel_dim if channel_dim is None else channel_dim)
        out = MaskOutput(call, path, (layout, fill, sampling))
        call.masks.append(out)
        return out

    @property
    def dtype(self) -> Any:
        layout = source_of(self)[2][0]
        return np.dtype(str(layout.dtype).replace("torch.", "")) if layout.kind == "array" else layout.dtype

    @property
    def ndim(self) -> int:
        return 3 if source_of(self)[2][0].channel_dim else 2

    def long(self) -> "MaskOutput":
        return self._again(dtype=torch.int64)

    def byte(self) -> "MaskOutput":
        return self._again(dtype=torch.uint8)

    def to(self, *args: Any, **kwargs: Any) -> "MaskOutput":
        dtype = kwargs.pop("dtype", None)
        for arg in args:
            if isinstance(arg, torch.dtype):
                dtype = arg
            elif not (isinstance(arg, (str, torch.device)) and torch.device(arg).type == "cpu"):
                stop_trace(f"calls .to({arg!r}) on the transformed mask (followed: .to(dtype), .to('cpu'))")
        if set(kwargs) - {"device", "copy", "non_blocking"}:
            stop_trace(f"calls .to() on the transformed mask with {', '.join(sorted(kwargs))} (followed: dtype)")
        return self._again(dtype=dtype)

    def type(self, dtype: Any = None) -> "MaskOutput":  # noqa: A003 - torch's name
        if dtype is None:
            stop_trace("reads the transformed mask's .type() (followed: .type(torch.int64))")
        if isinstance(dtype, type) and dtype is torch.LongTensor:
            dtype = torch.int64
        return self._again(dtype=dtype)

    def squeeze(self, dim: Any = None) -> "MaskOutput":
        if dim not in (None, 0):
            stop_trace(f"calls .squeeze({dim}) on the transformed mask (followed: .squeeze(0))")
        return self._again(channel_dim=False)

    def unsqueeze(self, dim: int) -> "MaskOutput":
        if dim != 0 or source_of(self)[2][0].channel_dim:
            stop_trace(f"calls .unsqueeze({dim}) on the transformed mask (followed: [H, W] to [1, H, W], "
                       ".unsqueeze(0))")
        return self._again(channel_dim=True)

    def contiguous(self, *args: Any, **kwargs: Any) -> "MaskOutput":
        return self._again()

    clone = detach = contiguous

    def numpy(self) -> "MaskOutput":
        return self._again(kind="array")

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> "MaskOutput":
        return self._again(dtype=dtype)

    def record(self) -> Tuple[str, Mask]:
        """(the mask file's path, the engine's Mask of it) for a mask returned as it is now."""
        _, path, (layout, fill, sampling) = source_of(self)
        return path, Mask(follows=0, fill=fill, dtype=layout.dtype, sampling=sampling, channel_dim=layout.channel_dim)


def _torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a torch or numpy dtype, if the engine makes masks of it."""
    if not isinstance(dtype, torch.dtype):
        try:
            dtype = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int64): torch.int64}.get(np.dtype(dtype), dtype)
        except TypeError:
            pass
    if dtype not in MASK_DTYPES:
        stop_trace(f"makes the mask {dtype} (the engine makes masks uint8 or int64: use .long() or "
                   "torch.as_tensor(np.array(mask), dtype=torch.int64))")
    return dtype


# ---- the mask file read ------------------------------------------------------------------


def label_file(path: str, modes: Tuple[str, ...]) -> bool:
    """Whether the file at `path` is a label map the engine decodes as the user's reader
    reads it: a PNG of one of `modes`, or a grayscale JPEG. A file that cannot be read
    (missing, corrupt) is left to the engine, which reports it under the loader's
    on_error as the user's reader would raise; a file of another format is not one."""
    from fastload.decode.header import file_header

    found = file_header(path, others=False)
    if found is None:
        return file_header(path, others=True) is None
    return found.mode in modes


def _checked_file(path: str, who: str, modes: Tuple[str, ...]) -> None:
    if not label_file(path, modes):
        stop_trace(f"reads the mask {os.path.basename(path)!r} with {who}, and it is not a single-channel label map "
                   f"the engine decodes as a mask ({' or '.join(modes)} PNG, grayscale JPEG)")


def array_of_image(call: TracedCall, image: TracedImage, who: str) -> Optional[LabelMap]:
    """`np.array(Image.open(m))` (not converted): the file's label map, or None when the
    file is not a label map (an image read without .convert('RGB'): the caller says so)."""
    owner, path, _ = source_of(image)
    if owner is not call:
        stop_trace(f"calls np.{who} on a mask opened in an earlier __getitem__ call (a cache? the tracer follows "
                   "files opened in the call)")
    return LabelMap(call, path, _UINT8_ARRAY) if label_file(path, ("L", "P")) else None


def grayscale_read(call: TracedCall, path: str, ignore_orientation: bool) -> Optional[LabelMap]:
    """`cv2.imread(m, IMREAD_GRAYSCALE or IMREAD_UNCHANGED)` of an L file: its label map;
    None for any other file (OpenCV reads a palette PNG's colours as grey levels, not its
    indexes, and turns colour files grey: the caller says so)."""
    if not label_file(path, ("L",)):
        return None
    if not ignore_orientation:
        check_orientation(path, "cv2.imread", "pass cv2.IMREAD_GRAYSCALE | cv2.IMREAD_IGNORE_ORIENTATION")
    return LabelMap(call, path, _UINT8_ARRAY)


def tensor_of(value: Any, dtype: Any, who: str) -> Any:
    """torch.from_numpy / as_tensor / tensor of a label map or a transformed mask."""
    return _as_kind(value, dtype, "tensor")


def array_of(value: Any, dtype: Any, who: str) -> Any:
    """np.array / np.asarray of a label map or a transformed mask."""
    return _as_kind(value, dtype, "array")


def _as_kind(value: Any, dtype: Any, kind: str) -> Any:
    call, path, mode = source_of(value)
    if isinstance(value, MaskOutput):
        return value._again(kind=kind, dtype=dtype)
    layout = mode._replace(kind=kind, dtype=_torch_dtype(dtype) if dtype is not None else mode.dtype)
    return LabelMap(call, path, layout)


def tv_mask(data: Any, dtype: Any) -> LabelMap:
    """`tv_tensors.Mask(data)` of a traced mask: a PIL image ([1, H, W] uint8) or a label map."""
    call = active_call()
    if isinstance(data, TracedImage):
        owner, path, mode = source_of(data)
        if mode is not None:
            stop_trace(f"makes a tv_tensors.Mask of an image converted to {mode} (followed: the mask file as it is, "
                       "tv_tensors.Mask(Image.open(path)))")
        _checked_file(path, "tv_tensors.Mask(Image.open(path))", ("L", "P"))
        layout = Layout("tv_mask", torch.uint8, True)
    elif isinstance(data, LabelMap):
        owner, path, mode = source_of(data)
        layout = mode._replace(kind="tv_mask")
    else:
        stop_trace(f"makes a tv_tensors.Mask of a {type(data).__name__} (a transformed mask?)")
    if owner is not call:
        stop_trace("makes a tv_tensors.Mask of a mask opened in an earlier __getitem__ call (a cache?)")
    if dtype is not None:
        layout = layout._replace(dtype=_torch_dtype(dtype))
    return LabelMap(call, path, layout)


# ---- the joint call ------------------------------------------------------------------------


def enter_v2(call: TracedCall, transform: Any, image: Any, mask: Any) -> Tuple[TracedOutput, MaskOutput]:
    """`transform(image, mask)` of torchvision's v2 transforms: (image output, mask output)."""
    name = type(transform).__name__
    if not type(transform).__module__.startswith("torchvision.transforms.v2"):
        stop_trace(f"passes the image and a second input to {name} (followed: torchvision's v2 transforms with a "
                   "tv_tensors.Mask, albumentations' image= and mask=)")
    layout = _mask_input(call, mask, name, "tv_mask")
    if layout.kind != "tv_mask":
        stop_trace(f"passes the mask to {name} as a plain {layout.kind} (v2 passes it through untouched beside the "
                   "image: wrap it, tv_tensors.Mask(mask))")
    fill, sampling, dtype = v2_mask_geometry(transform)
    if dtype is not None:
        layout = layout._replace(dtype=dtype)
    out = enter(call, transform, image)
    made = MaskOutput(call, source_of(mask)[1], (layout, fill, sampling))
    call.masks.append(made)
    return out, made


def holds_mask(value: Any) -> bool:
    """A dict, tuple or list that holds a mask's label map (one v2 call given the sample)."""
    items = value.values() if type(value) is dict else value
    return any(isinstance(v, LabelMap) for v in items)


def enter_v2_sample(call: TracedCall, transform: Any, value: Any) -> Any:
    """`transform({"image": image, "mask": mask, ...})` (or a tuple, list) of torchvision's
    v2 transforms: the same structure, the image and the mask replaced by their outputs,
    the other entries as v2 passes them (unchanged)."""
    from fastload.trace.openers import LAZY

    items = list(value.items()) if type(value) is dict else list(enumerate(value))
    images = [k for k, v in items if isinstance(v, (TracedImage,) + LAZY)]
    masks = [k for k, v in items if isinstance(v, LabelMap)]
    others = [v for k, v in items if k not in images and k not in masks]
    if len(images) != 1 or len(masks) != 1 or not all(isinstance(v, (int, float, str, bool, type(None)))
                                                       for v in others):
        stop_trace(f"passes {type(value).__name__} of {len(images)} images, {len(masks)} masks and other values to "
                   f"{type(transform).__name__} (followed: one image and one mask, beside plain labels)")
    image, mask = enter_v2(call, transform, value[images[0]], value[masks[0]])
    if type(value) is dict:
        return {**value, images[0]: image, masks[0]: mask}
    out = list(value)
    out[images[0]], out[masks[0]] = image, mask
    return type(value)(out)


def enter_albumentations(call: TracedCall, transform: Any, image: Any, mask: Any) -> dict:
    """`transform(image=image, mask=mask)` of albumentations: {"image": ..., "mask": ...}."""
    name = type(transform).__name__
    layout = _mask_input(call, mask, name, "array")
    if layout.kind != "array":
        stop_trace(f"passes mask= to {name} as a {layout.kind} (albumentations takes numpy arrays)")
    fill, sampling, to_tensor = albumentations_mask_geometry(transform)
    out = enter(call, transform, image)
    made = MaskOutput(call, source_of(mask)[1], (layout._replace(kind="tensor" if to_tensor else "array"), fill,
                                                 sampling))
    call.masks.append(made)
    return {"image": out, "mask": made}


def _mask_input(call: TracedCall, mask: Any, name: str, wanted: str) -> Layout:
    if isinstance(mask, TracedImage):
        stop_trace(f"passes the mask to {name} as a PIL image (torchvision's v2 transforms treat a PIL image as an "
                   "image: bilinear resize, colour ops, ToImage; wrap it, tv_tensors.Mask(Image.open(path)))")
    if not isinstance(mask, LabelMap):
        what = "a transformed mask" if isinstance(mask, MaskOutput) else type(mask).__name__
        stop_trace(f"passes {what} as the mask to {name} (followed: a mask file read in the call, "
                   f"{_FOLLOWED_READS}; a mask computed or loaded otherwise is not one the engine reads)")
    owner, _, layout = source_of(mask)
    if owner is not call:
        stop_trace(f"passes a mask opened in an earlier __getitem__ call to {name} (a cache?)")
    if call.masks:
        stop_trace(f"passes a mask to {name} after another joint transform call (one per sample is followed)")
    return layout


def _leaves_or_stop(transform: Any, flatten: Any, name: str) -> list:
    leaves, _ = flatten(transform)
    if not leaves:
        stop_trace(f"passes the mask to {name}, whose transforms fastload cannot open")
    return leaves


def v2_mask_geometry(transform: Any) -> Tuple[int, str, Any]:
    """(RandomCrop's fill for the mask, "tensor", the dtype a ToDtype dict gives it or None)
    of a v2 transform, or the trace ends naming a transform that moves the mask another way."""
    from fastload.compat.torchvision import flatten

    fill, dtype = 0, None
    for leaf in _leaves_or_stop(transform, flatten, type(transform).__name__):
        name = type(leaf).__name__
        if name not in _V2_MOVES | _V2_KEEPS:
            stop_trace(f"passes the mask to {name} (its mask has no native twin: followed with a mask "
                       f"{', '.join(sorted(_V2_MOVES))}; leaving it as it is {', '.join(sorted(_V2_KEEPS))})")
        if name == "ToDtype" and isinstance(leaf.dtype, dict):
            dtype = _v2_mask_dtype(leaf.dtype) or dtype
        if name == "RandomCrop":
            fill = _v2_fill(leaf.fill)
    return fill, "tensor", dtype


def _v2_mask_dtype(dtypes: dict) -> Any:
    """The dtype a v2 ToDtype's dict gives a tv_tensors.Mask (None: left as it is)."""
    from torchvision import tv_tensors

    if tv_tensors.Mask not in dtypes and "others" not in dtypes:
        stop_trace(f"passes the mask to ToDtype({dtypes!r}), which gives it no dtype (torchvision raises)")
    dtype = dtypes.get(tv_tensors.Mask, dtypes.get("others"))
    return None if dtype is None else _torch_dtype(dtype)


def _v2_fill(fill: Any) -> int:
    from torchvision import tv_tensors

    if isinstance(fill, dict):
        fill = fill.get(tv_tensors.Mask, fill.get("others"))
    if fill is None:
        return 0
    if isinstance(fill, (list, tuple)):
        if len(set(fill)) != 1:
            stop_trace(f"pads the mask with the fill {fill!r} (followed: one label)")
        fill = fill[0]
    if float(fill) != int(fill) or not 0 <= int(fill) <= 255:
        stop_trace(f"pads the mask with the fill {fill!r} (followed: a uint8 label)")
    return int(fill)


def albumentations_mask_geometry(transform: Any) -> Tuple[int, str, bool]:
    """(fill, nearest rule, ends in ToTensorV2) of an albumentations Compose's mask."""
    from fastload.compat.albumentations import flatten

    samplings, to_tensor = set(), False
    for leaf in _leaves_or_stop(transform, flatten, type(transform).__name__):
        name = type(leaf).__name__
        if name not in _ALBU_MOVES | _ALBU_KEEPS:
            stop_trace(f"passes mask= through {name} (its mask has no native twin: followed with a mask "
                       f"{', '.join(sorted(_ALBU_MOVES))}; leaving it as it is {', '.join(sorted(_ALBU_KEEPS))})")
        to_tensor = name == "ToTensorV2"
        if name == "ToTensorV2" and getattr(leaf, "transpose_mask", False):
            stop_trace("passes mask= through ToTensorV2(transpose_mask=True) (followed: [H, W] label maps)")
        if name in ("RandomResizedCrop", "Resize", "SmallestMaxSize"):
            interpolation = int(getattr(leaf, "mask_interpolation", 0))
            if interpolation not in _ALBU_SAMPLINGS:
                stop_trace(f"resizes the mask with mask_interpolation={interpolation} in {name} (followed: "
                           "cv2.INTER_NEAREST, cv2.INTER_NEAREST_EXACT)")
            samplings.add(_ALBU_SAMPLINGS[interpolation])
    if len(samplings) > 1:
        stop_trace("resizes the mask with two mask_interpolation values (followed: one)")
    return 0, samplings.pop() if samplings else "cv2", to_tensor
