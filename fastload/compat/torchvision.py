"""torchvision dataset + transforms -> fastload's native pipeline, or the reason not.

`fastload.DataLoader(torchvision.datasets.ImageFolder(root, transform=...))` runs on the
C++ engine when the dataset is a plain ImageFolder (default PIL loader, no
target_transform) and every transform has a native equivalent (v1 and v2:
RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor, PILToTensor,
ToImage, ToDtype, ConvertImageDtype, Normalize, ToPureTensor, Compose). The output keeps
torchvision's dtype, shape and value range; the random draws are fastload's own
(torchvision's distributions, a different generator).
"""

from __future__ import annotations

import sys
from typing import Any, List, Tuple

import torch

from fastload.augment import specs
from fastload.source.index import SampleIndex


class NotConvertible(ValueError):
    """The dataset or a transform has no native equivalent; the message says which."""


def _is_torchvision(obj: Any, *names: str) -> bool:
    module = type(obj).__module__
    return module.startswith("torchvision.") and type(obj).__name__ in names


def _bilinear_antialias(transform: Any) -> None:
    interpolation = getattr(transform, "interpolation", "bilinear")
    # v1 and v2 keep their own InterpolationMode enums; 2 is PIL.Image.BILINEAR.
    if getattr(interpolation, "value", interpolation) not in ("bilinear", 2):
        raise NotConvertible(f"{transform} uses {interpolation} interpolation (native: bilinear only)")
    if getattr(transform, "antialias", True) is False:
        raise NotConvertible(f"{transform} has antialias=False (native: antialiased only)")


def _size(size: Any) -> Any:
    if isinstance(size, (list, tuple)) and len(size) == 1:
        return int(size[0])
    return size


def convert_transform(transform: Any) -> List[Any]:
    """fastload.transforms specs equivalent to one torchvision transform (a Compose is
    flattened)."""
    if transform is None:
        return []
    if _is_torchvision(transform, "Compose"):
        return [spec for t in transform.transforms for spec in convert_transform(t)]
    if _is_torchvision(transform, "RandomResizedCrop"):
        _bilinear_antialias(transform)
        return [specs.RandomResizedCrop(tuple(transform.size), tuple(transform.scale), tuple(transform.ratio))]
    if _is_torchvision(transform, "Resize"):
        _bilinear_antialias(transform)
        return [specs.Resize(_size(transform.size), getattr(transform, "max_size", None))]
    if _is_torchvision(transform, "CenterCrop"):
        return [specs.CenterCrop(tuple(transform.size))]
    if _is_torchvision(transform, "RandomHorizontalFlip"):
        return [specs.RandomHorizontalFlip(float(transform.p))]
    if _is_torchvision(transform, "ToTensor"):
        return [specs.ToDtype(torch.float32, scale=True)]
    if _is_torchvision(transform, "PILToTensor", "ToImage", "ToPureTensor"):
        return []  # uint8 CHW tensors are what the native pipeline produces
    if _is_torchvision(transform, "ConvertImageDtype"):
        if transform.dtype not in (torch.uint8, torch.float32, torch.float16, torch.bfloat16):
            raise NotConvertible(f"{transform} outputs {transform.dtype} (native: uint8, float32, float16, bfloat16)")
        return [specs.ToDtype(transform.dtype, scale=True)]
    if _is_torchvision(transform, "ToDtype"):
        if isinstance(transform.dtype, dict):
            raise NotConvertible(f"{transform} converts per tv_tensor type (a dict of dtypes)")
        if transform.dtype not in (torch.uint8, torch.float32, torch.float16, torch.bfloat16):
            raise NotConvertible(f"{transform} outputs {transform.dtype} (native: uint8, float32, float16, bfloat16)")
        return [specs.ToDtype(transform.dtype, scale=bool(transform.scale))]
    if _is_torchvision(transform, "Normalize"):
        return [specs.Normalize(transform.mean, transform.std)]
    raise NotConvertible(f"transform {transform!r} has no native equivalent")


def convert_dataset(dataset: Any) -> Tuple[SampleIndex, List[Any]]:
    """(sample index, fastload.transforms specs) for a torchvision ImageFolder, or
    NotConvertible."""
    if "torchvision" not in sys.modules:
        raise NotConvertible(f"{type(dataset).__name__} is not a torchvision dataset")
    from torchvision.datasets import DatasetFolder, ImageFolder
    from torchvision.datasets.folder import default_loader, pil_loader

    if not isinstance(dataset, ImageFolder):
        raise NotConvertible(f"{type(dataset).__name__} is not a torchvision ImageFolder")
    if type(dataset).__getitem__ is not DatasetFolder.__getitem__:
        raise NotConvertible(f"{type(dataset).__name__} overrides __getitem__")
    if dataset.loader not in (default_loader, pil_loader):
        raise NotConvertible("the ImageFolder has a custom loader")
    if dataset.target_transform is not None:
        raise NotConvertible("the ImageFolder has a target_transform")
    # torchvision's `dataset.transforms` is one callable: a StandardTransform wrapping
    # transform and target_transform, or the user's joint (image, target) transforms.
    # (fastload's own datasets use `.transforms` for their list of specs.)
    if getattr(dataset, "transforms", None) is not None and type(dataset.transforms).__name__ != "StandardTransform":
        raise NotConvertible("the ImageFolder has joint transforms")
    transforms = convert_transform(dataset.transform)
    paths = [path for path, _ in dataset.samples]
    labels = [label for _, label in dataset.samples]
    return SampleIndex.from_files(paths, labels), transforms
