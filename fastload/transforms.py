"""Transforms: what fastload's native datasets do to every image, torchvision's semantics.

Native datasets (fastload.ImageFolder, fastload.FileList, fastload.TarShards) take a list
of these as `transforms=[...]`. They hold parameters only, never pixels: the list is fused
into one plan that the C++ engine runs per sample (decode the crop window, resize
antialiased bilinear, flip, normalise and cast in one pass). Random parameters (crop box,
flip) are a pure function of (seed, epoch, sample index).

| transform | torchvision equivalent |
| --- | --- |
| `RandomResizedCrop(size, scale, ratio, interpolation, antialias)` | `RandomResizedCrop` (bilinear, bicubic or nearest; antialiased, or bilinear with antialias=False) |
| `Resize(size, max_size, interpolation, antialias)` | `Resize` (as RandomResizedCrop) |
| `CenterCrop(size)` | `CenterCrop` |
| `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)` | `RandomCrop` (constant, edge, reflect, symmetric; not before a resize) |
| `RandomHorizontalFlip(p)` | `RandomHorizontalFlip` |
| `Normalize(mean, std)` | `Normalize` (on values scaled to [0, 1]) |
| `ToDtype(dtype, scale)` | `v2.ToDtype` / `ToTensor` (float32, scale=True) |
| `ColorJitter(brightness, contrast, saturation, hue)` | `ColorJitter` (PIL semantics, after the crop/resize, before ToDtype) |
| `ColorJitter(..., p=0.8)` | `RandomApply([ColorJitter(...)], p=0.8)` |
| `Grayscale(3)`, `RandomGrayscale(p)` | `Grayscale(num_output_channels=3)`, `RandomGrayscale` (after ColorJitter) |
| `GaussianBlur(kernel_size, sigma)` | `GaussianBlur` (on the uint8 image, after the colour ops) |
| `GaussianBlur(..., p=0.5)` | `RandomApply([GaussianBlur(...)], p=0.5)` |
| `TrivialAugmentWide(num_magnitude_bins, interpolation, fill)` | `TrivialAugmentWide` (PIL semantics, last of the uint8 stage; NEAREST) |
| `RandAugment(num_ops, magnitude, num_magnitude_bins, interpolation, fill)` | `RandAugment` (as TrivialAugmentWide) |
| `AutoAugment(policy, interpolation, fill)` | `AutoAugment` (IMAGENET, CIFAR10, SVHN; as TrivialAugmentWide) |
| `AugMix(severity, mixture_width, chain_depth, alpha, all_ops, interpolation)` | `AugMix` (its tensor-path ops, as the uint8 stage's last op) |
| `RandomErasing(p, scale, ratio, value)` | `RandomErasing` (last: on the normalised output) |

A dataset without a ToDtype outputs uint8 [C, H, W]; torchvision transforms with a native
equivalent may be passed too, and are converted to these.

Example:
    >>> import torch
    >>> import fastload
    >>> from fastload import transforms as T
    >>> train = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
    ...          T.ToDtype(torch.float32, scale=True),
    ...          T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    >>> train[0].size
    (224, 224)
    >>> ds = fastload.ImageFolder("data/train", transforms=train)  # doctest: +SKIP
"""

from __future__ import annotations

from fastload.augment.autoaugment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from fastload.augment.color import ColorJitter, Grayscale, RandomErasing, RandomGrayscale
from fastload.augment.specs import (CenterCrop, GaussianBlur, Normalize, RandomCrop, RandomHorizontalFlip,
                                    RandomResizedCrop, RandomVerticalFlip, Resize, ToDtype)

__all__ = ["RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip", "RandomVerticalFlip",
           "Normalize", "ToDtype", "ColorJitter", "Grayscale", "RandomGrayscale", "GaussianBlur", "TrivialAugmentWide",
           "RandAugment", "AutoAugment", "AugMix", "RandomErasing"]
