"""timm's transforms (timm.data.transforms) mapped onto fastload specs, or the reason not.

`timm.data.create_transform(...)` returns a torchvision Compose (opened like any other),
holding torchvision transforms (its color_jitter is torchvision's ColorJitter) and some
of timm's own classes. timm need not be
installed: its classes are recognised by module (timm.*) and class name, and read through
the attributes timm's own __call__ reads:

| timm class | what it does | fastload |
| --- | --- | --- |
| RandomResizedCropAndInterpolation | torchvision's RandomResizedCrop draw (10 tries, central fallback), resized_crop | RandomResizedCrop(size, scale, ratio); interpolation as torchvision's, 'random' refused |
| MaybeToTensor | ToTensor unless already a tensor | ToDtype(float32, scale=True) |
| MaybePILToTensor | PILToTensor unless already a tensor | nothing (uint8 CHW is the native output) |
| ToNumpy | uint8 CHW numpy array | nothing: default_collate makes the same uint8 batch |
| ToTensor(dtype) | pil_to_tensor(...).to(dtype), no rescaling | ToDtype(dtype, scale=False) |
| RandomErasing (timm.data.random_erasing) | probability, area (min_area, max_area), log-uniform aspect (min_aspect, max_aspect), one rectangle (torchvision's sampler); mode const / pixel / rand: zeros / a normal per element / a normal per channel | RandomErasing(p, scale, ratio, value 0 or "random", per_channel for rand); min_count, max_count > 1 or num_splits > 0 refused |
| ResizeKeepRatio, CenterCropOrPad, RandomCropOrPad, RandomPad, TrimBorder, ... | | refused: no native equivalent |

Example:
    >>> class ToNumpy:  # a stand-in with timm's module and name
    ...     __module__ = "timm.data.transforms"
    >>> leaf_specs(ToNumpy()), leaf_specs(object()) is None
    ([], True)
"""

from __future__ import annotations

import math
from typing import Any, List, Optional

import torch

from fastload.augment import specs
from fastload.compat.mapping import NotConvertible, check_output_dtype, interpolation_mode


def is_timm(transform: Any) -> bool:
    return type(transform).__module__.startswith("timm.")


def leaf_specs(transform: Any) -> Optional[List[Any]]:
    """fastload specs for one of timm's transforms; None when it is not timm's;
    NotConvertible when it is timm's without a native equivalent."""
    if not is_timm(transform):
        return None
    name = type(transform).__name__
    if name == "RandomResizedCropAndInterpolation":
        if isinstance(transform.interpolation, (tuple, list)):
            raise NotConvertible("picks a random interpolation per image (interpolation='random'; native: one mode)",
                                 fix="pass interpolation='bilinear'")
        return [specs.RandomResizedCrop(tuple(transform.size), tuple(transform.scale), tuple(transform.ratio),
                                        interpolation=interpolation_mode(transform))]
    if name == "MaybeToTensor":
        return [specs.ToDtype(torch.float32, scale=True)]
    if name in ("MaybePILToTensor", "ToNumpy"):
        return []
    if name == "ToTensor":  # timm's: no rescaling of values
        check_output_dtype(transform.dtype)
        return [specs.ToDtype(transform.dtype, scale=False)]
    if name == "RandomErasing":
        return _random_erasing(transform)
    raise NotConvertible(f"timm's {name} has no native equivalent",
                         fix="drop it or use torchvision's Resize/CenterCrop; kept, it and every transform after "
                             "it run in Python on each sample")


def _random_erasing(transform: Any) -> List[Any]:
    """timm.data.random_erasing.RandomErasing: with one rectangle (min_count = max_count
    = 1) and no splits, torchvision's sampler on (min_area, max_area) and
    exp(log_aspect_ratio), drawn with probability `probability`."""
    from fastload.augment import color

    if getattr(transform, "min_count", 1) != 1 or getattr(transform, "max_count", 1) != 1:
        raise NotConvertible("erases a random number of rectangles (native: one, min_count = max_count = 1)",
                             fix="pass max_count=1 (re_count=1)")
    if getattr(transform, "num_splits", 0) > 1:
        raise NotConvertible("keeps the first batch split clean (num_splits > 1; native: every sample alike)",
                             fix="pass num_splits=0 (re_split=False)")
    mode = transform.mode
    if mode not in ("const", "rand", "pixel"):
        raise NotConvertible(f"has mode={mode!r} (native: 'const', 'rand', 'pixel')")
    low, high = (float(v) for v in transform.log_aspect_ratio)
    ratio = (math.exp(low), math.exp(high))
    value = 0.0 if mode == "const" else "random"
    return [color.RandomErasing(float(transform.probability), (float(transform.min_area), float(transform.max_area)),
                                ratio, value, per_channel=mode == "rand")]
