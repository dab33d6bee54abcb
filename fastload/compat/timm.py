"""timm's transforms (timm.data.transforms) mapped onto fastload specs, or the reason not.

`timm.data.create_transform(...)` returns a torchvision Compose (opened like any other),
holding torchvision transforms and some of timm's own classes. timm need not be
installed: its classes are recognised by module (timm.*) and class name, and read through
the attributes timm's own __call__ reads:

| timm class | what it does | fastload |
| --- | --- | --- |
| RandomResizedCropAndInterpolation | torchvision's RandomResizedCrop draw (10 tries, central fallback), resized_crop | RandomResizedCrop(size, scale, ratio); interpolation as torchvision's, 'random' refused |
| MaybeToTensor | ToTensor unless already a tensor | ToDtype(float32, scale=True) |
| MaybePILToTensor | PILToTensor unless already a tensor | nothing (uint8 CHW is the native output) |
| ToNumpy | uint8 CHW numpy array | nothing: default_collate makes the same uint8 batch |
| ToTensor(dtype) | pil_to_tensor(...).to(dtype), no rescaling | ToDtype(dtype, scale=False) |
| ResizeKeepRatio, CenterCropOrPad, RandomCropOrPad, RandomPad, TrimBorder, ... | | refused: no native equivalent |

Example:
    >>> class ToNumpy:  # a stand-in with timm's module and name
    ...     __module__ = "timm.data.transforms"
    >>> leaf_specs(ToNumpy()), leaf_specs(object()) is None
    ([], True)
"""

from __future__ import annotations

from typing import Any, List, Optional

import torch

from fastload.augment import specs


def is_timm(transform: Any) -> bool:
    return type(transform).__module__.startswith("timm.")


def leaf_specs(transform: Any) -> Optional[List[Any]]:
    """fastload specs for one of timm's transforms; None when it is not timm's;
    NotConvertible when it is timm's without a native equivalent."""
    from fastload.compat.torchvision import NotConvertible, _out_dtype, interpolation_mode

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
        _out_dtype(transform.dtype)
        return [specs.ToDtype(transform.dtype, scale=False)]
    raise NotConvertible(f"timm's {name} has no native equivalent",
                         fix="drop it or use torchvision's Resize/CenterCrop; kept, it and every transform after "
                             "it run in Python on each sample")
