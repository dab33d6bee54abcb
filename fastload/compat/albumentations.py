"""albumentations' transforms mapped onto fastload specs, in albumentations' semantics.

A dataset of the user's own class that calls `self.transform(image=array)["image"]` on
an OpenCV array (`cv2.imread` + `cv2.cvtColor(BGR2RGB)`, fastload/trace/openers.py) is
traced like any other (fastload/trace/); its `A.Compose` is opened here (only
`Compose` itself, applied always: p=1, no bbox/keypoint processors, no additional
targets) and cut into the native prefix and a Python tail. albumentations need not be
installed: its classes are recognised by module (albumentations.*) and name.

| albumentations | fastload | how close (tests/adapters/test_albumentations.py) |
| --- | --- | --- |
| RandomResizedCrop(size (2.x) or height/width (1.x), scale, ratio, INTER_LINEAR) | RandomResizedCrop(size, scale, ratio, "bilinear", antialias=False) | the same draw (10 tries, round(), central fallback); the resize: see below |
| Resize(height, width, INTER_LINEAR) | Resize((height, width), antialias=False) | see below |
| SmallestMaxSize(max_size: one int, INTER_LINEAR) | Resize(max_size, antialias=False) | the longer side is int(size * long / short) (torchvision's), albumentations rounds it: one pixel apart on some sizes |
| CenterCrop(height, width), RandomCrop(height, width) (pad_if_needed=False) | CenterCrop, RandomCrop | identical, except CenterCrop's offset where the margin is odd (torchvision rounds half to even, albumentations floors: one pixel) and images smaller than the crop (albumentations raises, the engine pads with zeros) |
| HorizontalFlip(p), VerticalFlip(p) | RandomHorizontalFlip(p), RandomVerticalFlip(p) | identical |
| Normalize(mean, std, max_pixel_value=255, normalization="standard", p=1) | ToDtype(float32, scale=True), Normalize(mean, std) | float32 rounding |
| ToTensorV2() (last) | nothing: the engine makes CHW tensors | identical |
| ColorJitter(brightness, contrast, saturation, hue=0, p) | ColorJitter(..., p) (torchvision's ops on the uint8 image) | albumentations truncates where PIL rounds, and contrast blends with a float mean where PIL rounds it: within two levels |

The resize: albumentations resizes with OpenCV's INTER_LINEAR, which does not antialias
when it shrinks (torch's `interpolate(..., antialias=False)`, in 11-bit fixed point). The
mapped resizes take `antialias=False`: the engine's plain bilinear filter
(`BILINEAR_NO_ANTIALIAS`: Pillow's taps at filterscale 1, and no DCT-scaled decode, whose
block averaging would antialias), the same interpolation in float. Measured
(`benchmarks/albumentations_resize.py`: Resize of six photo-like 500x375 JPEGs, engine vs
albumentations): 57 dB PSNR enlarging 1.6x and shrinking 1.25x to 3x, one level apart at
most. Other interpolations (INTER_NEAREST's top-left sampling, INTER_CUBIC's a=-0.75,
INTER_AREA, area_for_downscale) have no native filter: they start the Python tail.

What does not map (hue jitter, LongestMaxSize, padding crops, any other transform, a
probability below 1 on a transform that is not random by nature) starts the Python tail:
each tail transform is called as albumentations calls it (`t(image=hwc_array)["image"]`)
on the engine's output as albumentations holds it at that point (uint8 HWC, or float32
HWC after Normalize). A Compose that does not end in ToTensorV2 returns HWC numpy arrays:
the tail then ends in the conversion of the engine's CHW output to one.

Example:
    >>> import albumentations as A
    >>> from albumentations.pytorch import ToTensorV2
    >>> pipeline, wrappers = split_transform(A.Compose([A.RandomResizedCrop(size=(8, 8)), A.HorizontalFlip(),
    ...                                                 A.Normalize(), ToTensorV2()]))
    >>> [type(s).__name__ for s in pipeline.native], pipeline.tail, wrappers
    (['RandomResizedCrop', 'RandomHorizontalFlip', 'ToDtype', 'Normalize'], (), ['Compose'])
"""

from __future__ import annotations

import functools
from typing import Any, List, Tuple

import numpy as np
import torch

from fastload.augment import color, specs
from fastload.augment.split import Pipeline, open_wrappers, split_pipeline

# OpenCV's interpolation constants (cv2 need not be imported to read them).
_INTER_LINEAR = 1
_INTER_NAMES = {0: "INTER_NEAREST", 1: "INTER_LINEAR", 2: "INTER_CUBIC", 3: "INTER_AREA", 4: "INTER_LANCZOS4",
                5: "INTER_LINEAR_EXACT", 6: "INTER_NEAREST_EXACT"}


def is_albumentations(transform: Any) -> bool:
    return type(transform).__module__.startswith("albumentations.")


def _named(transform: Any, *names: str) -> bool:
    return is_albumentations(transform) and type(transform).__name__ in names


def _not_convertible(message: str, fix: str = "") -> Exception:
    from fastload.compat.torchvision import NotConvertible

    return NotConvertible(message, fix=fix)


def compose_parts(transform: Any) -> Any:
    """The transforms of an albumentations Compose that provably just applies them in
    order (p=1, no processors, no additional targets), else None."""
    if not _named(transform, "Compose"):
        return None
    if float(getattr(transform, "p", 1.0)) < 1.0 or getattr(transform, "processors", None) or \
            getattr(transform, "_additional_targets", None) or getattr(transform, "additional_targets", None):
        return None
    return list(transform.transforms)


def flatten(transform: Any) -> Tuple[List[Any], List[str]]:
    """(the transforms applied in order, Compose opened; the wrappers opened)."""
    return open_wrappers(transform, compose_parts)


def _interpolation(transform: Any) -> str:
    interpolation = int(getattr(transform, "interpolation", _INTER_LINEAR))
    if interpolation != _INTER_LINEAR:
        name = _INTER_NAMES.get(interpolation, str(interpolation))
        raise _not_convertible(f"resizes with cv2.{name} (native: INTER_LINEAR, as a bilinear filter)",
                               fix="pass interpolation=cv2.INTER_LINEAR")
    if getattr(transform, "area_for_downscale", None) is not None:
        raise _not_convertible("switches to INTER_AREA when shrinking (area_for_downscale; native: one filter)",
                               fix="pass area_for_downscale=None")
    return "bilinear"


def _always(transform: Any) -> None:
    p = float(getattr(transform, "p", 1.0))
    if p < 1.0:
        raise _not_convertible(f"applies with probability p={p} (native: always)", fix="pass p=1")


def _size(transform: Any) -> Tuple[int, int]:
    size = getattr(transform, "size", None)  # albumentations 2.x: size=(height, width)
    if size is not None:
        return int(size[0]), int(size[1])
    return int(transform.height), int(transform.width)  # 1.x


def _range(value: Any) -> Any:
    return None if value is None else (float(value[0]), float(value[1]))


def leaf_specs(transform: Any, *, last: bool = True) -> List[Any]:
    """fastload specs for one albumentations transform (not a Compose), or NotConvertible
    with the reason. last: the transform is the pipeline's last (where ToTensorV2 maps)."""
    name = type(transform).__name__
    if not is_albumentations(transform):
        raise _not_convertible(f"is not an albumentations transform ({type(transform).__module__}.{name}; one "
                               "Compose holds one library's transforms)")
    if name == "RandomResizedCrop":
        _always(transform)
        return [specs.RandomResizedCrop(_size(transform), tuple(transform.scale), tuple(transform.ratio),
                                        interpolation=_interpolation(transform), antialias=False)]
    if name == "Resize":
        _always(transform)
        return [specs.Resize((int(transform.height), int(transform.width)), interpolation=_interpolation(transform),
                             antialias=False)]
    if name == "SmallestMaxSize":
        _always(transform)
        max_size = getattr(transform, "max_size", None)
        if getattr(transform, "max_size_hw", None) is not None or max_size is None:
            raise _not_convertible("resizes by max_size_hw (native: the shorter side to one size)",
                                   fix="pass max_size=<int>")
        if isinstance(max_size, (list, tuple)):
            if len(max_size) != 1:
                raise _not_convertible(f"draws the size from {list(max_size)} per image (native: one size)",
                                       fix="pass one max_size")
            max_size = max_size[0]
        return [specs.Resize(int(max_size), interpolation=_interpolation(transform), antialias=False)]
    if name in ("CenterCrop", "RandomCrop"):
        _always(transform)
        if getattr(transform, "pad_if_needed", False):
            raise _not_convertible("pads with pad_if_needed=True (albumentations' pad_position and border_mode; "
                                   "native: torchvision's padding)", fix="pass pad_if_needed=False")
        size = (int(transform.height), int(transform.width))
        return [specs.CenterCrop(size) if name == "CenterCrop" else specs.RandomCrop(size)]
    if name == "HorizontalFlip":
        return [specs.RandomHorizontalFlip(float(transform.p))]
    if name == "VerticalFlip":
        return [specs.RandomVerticalFlip(float(transform.p))]
    if name == "Normalize":
        _always(transform)
        if getattr(transform, "normalization", "standard") != "standard":
            raise _not_convertible(f"normalizes per image (normalization={transform.normalization!r}; native: "
                                   "'standard', fixed mean and std)", fix="pass normalization='standard'")
        if transform.mean is None or transform.std is None:
            raise _not_convertible("has mean or std None (native: fixed mean and std)")
        if float(transform.max_pixel_value or 0) != 255.0:
            raise _not_convertible(f"has max_pixel_value={transform.max_pixel_value} (native: 255, uint8 images)",
                                   fix="pass max_pixel_value=255")
        mean = np.atleast_1d(np.asarray(transform.mean, dtype=np.float64)).tolist()
        std = np.atleast_1d(np.asarray(transform.std, dtype=np.float64)).tolist()
        return [specs.ToDtype(torch.float32, scale=True), specs.Normalize(mean, std)]
    if name == "ToTensorV2":
        _always(transform)
        if not last:
            raise _not_convertible("is followed by other albumentations transforms (native: ToTensorV2 last)")
        return []
    if name == "ColorJitter":
        hue = _range(transform.hue)
        if hue is not None and hue != (0.0, 0.0):
            raise _not_convertible(f"shifts hue in {list(hue)} through OpenCV's HSV (180 hue steps; native: "
                                   "torchvision's hue; hue=0 keeps the jitter native)",
                                   fix="pass hue=0 to keep the jitter native")
        ranges = [_range(getattr(transform, k)) for k in ("brightness", "contrast", "saturation")]
        # A range of exactly 1 (albumentations' "off") is the op off.
        ranges = [None if r is None or r == (1.0, 1.0) else r for r in ranges]
        return [color.ColorJitter(*ranges, hue=None, p=float(transform.p))]
    raise _not_convertible(f"albumentations' {name} has no native equivalent",
                           fix="drop it, or keep it: it and every transform after it run in Python on each sample")


def split_transform(transform: Any, *, to_run: bool = False) -> Tuple[Pipeline, List[str]]:
    """(the Compose cut into native prefix and Python tail, the wrappers opened). The tail
    holds callables that run each albumentations transform as albumentations calls it;
    a Compose not ending in ToTensorV2 gets a last step making the HWC numpy array."""
    from fastload.compat.torchvision import NotConvertible, why_not_fused

    leaves, wrappers = flatten(transform)
    last = leaves[-1] if leaves else None

    def to_specs(leaf: Any) -> List[Any]:
        try:
            return leaf_specs(leaf, last=leaf is last)
        except (AttributeError, TypeError, KeyError) as error:
            raise NotConvertible(f"its attributes are not the expected ones ({type(error).__name__}: {error})") \
                from None

    pipeline = split_pipeline(leaves, to_specs, (ValueError,), fuses=why_not_fused if to_run else None)
    tail = [step(t) for t in pipeline.tail]
    blockers = list(pipeline.blockers)
    if not _named(last, "ToTensorV2"):
        tail.append(ToHWCArray())
        blockers.append(f"{type(transform).__name__}: does not end in ToTensorV2 (its output, an HWC numpy array, is made per "
                        "sample in Python from the engine's CHW tensor; add ToTensorV2() to stay native)")
    return Pipeline(pipeline.native, tuple(tail), tuple(blockers)), wrappers


def _hwc(value: Any) -> Any:
    """What albumentations holds where the engine's output enters the tail: an HWC numpy
    array (uint8, or float32 after Normalize)."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return np.array(value)
    if isinstance(value, torch.Tensor):
        return np.ascontiguousarray(value.permute(1, 2, 0).numpy())
    return value


class AlbumentationsStep:
    """One albumentations transform of a Python tail, called as albumentations calls it:
    `transform(image=hwc_array)["image"]` (its class name is the transform's)."""

    def __init__(self, transform: Any):
        self.transform = transform

    def __call__(self, value: Any) -> Any:
        return self.transform(image=_hwc(value))["image"]

    def __repr__(self) -> str:
        return repr(self.transform)

    def __reduce__(self) -> Any:  # (its class is made per name: pickled through step())
        return step, (self.transform,)


@functools.lru_cache(maxsize=None)
def _step_class(name: str) -> type:
    return type(name, (AlbumentationsStep,), {"__module__": __name__, "__qualname__": name})


def step(transform: Any) -> AlbumentationsStep:
    """A tail step for `transform`, named as its class (loader.path shows the names)."""
    return _step_class(type(transform).__name__)(transform)


class ToHWCArray:
    """The last tail step of a Compose without ToTensorV2: the HWC numpy array
    albumentations returns."""

    def __call__(self, value: Any) -> Any:
        return _hwc(value)

    def __repr__(self) -> str:
        return "ToHWCArray()"
