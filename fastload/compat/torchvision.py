"""torchvision (and timm) transforms -> fastload's native specs, or the reason not.

`fastload.DataLoader(torchvision.datasets.ImageFolder(root, transform=...))` runs on the
C++ engine when every transform has a native equivalent (v1 and v2: RandomResizedCrop,
Resize, CenterCrop, RandomCrop (fill, padding modes), RandomHorizontalFlip,
RandomVerticalFlip, ToTensor, PILToTensor, ToImage, ToDtype, ConvertImageDtype, Normalize,
ToPureTensor, ColorJitter and GaussianBlur (each also alone inside RandomApply), Grayscale(3),
RandomGrayscale, TrivialAugmentWide, RandAugment and AutoAugment (NEAREST, BILINEAR), AugMix (v1), RandomErasing;
timm's equivalents, see compat/timm.py). The output keeps torchvision's dtype, shape and
value range; the random draws are fastload's own (torchvision's distributions, a
different generator).

Wrappers are seen through: transforms inside a Compose (v1, v2), an nn.Sequential or a
preset object whose `__call__` is exactly `return self.transforms(img)` (compat/presets.py);
datasets inside a Subset (random_split) or a ConcatDataset (fastload/adapters/walk.py).

A transform list with a non-native element is cut into its native prefix and Python tail
(fastload.augment.split); every element without a native equivalent is named at once.

Example:
    >>> import torchvision.transforms as T
    >>> pipeline = split_transform(T.Compose([T.RandomResizedCrop(8), T.Grayscale(), T.ToTensor()]))
    >>> pipeline.native
    (RandomResizedCrop(size=(8, 8), scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333), interpolation='bilinear', antialias=True),)
    >>> pipeline.blockers
    ("Grayscale(num_output_channels=1): makes one channel of the loader's three (native: num_output_channels=3)",)
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Tuple

import torch

from fastload.augment import autoaugment, color, specs
from fastload.augment.split import Pipeline, open_wrappers, split_pipeline
from fastload.compat import presets, timm
from fastload.compat.mapping import (NotConvertible, check_output_dtype,  # noqa: F401  (torchvision's names too)
                                     interpolation_mode, is_torchvision)


def _size(size: Any) -> Any:
    if isinstance(size, (list, tuple)) and len(size) == 1:
        return int(size[0])
    return size


def leaf_specs(transform: Any) -> List[Any]:
    """fastload specs for one transform that wraps no others (see flatten), else
    NotConvertible with the reason (no transform name in it) and `fix`."""
    hooked = presets.hooked(transform)
    if hooked:
        raise NotConvertible(hooked, fix="remove the hook, or run the hooked work in the training loop")
    if is_torchvision(transform, "RandomResizedCrop"):
        return [specs.RandomResizedCrop(tuple(transform.size), tuple(transform.scale), tuple(transform.ratio),
                                        interpolation=interpolation_mode(transform))]
    if is_torchvision(transform, "Resize"):
        return [specs.Resize(_size(transform.size), getattr(transform, "max_size", None),
                             interpolation=interpolation_mode(transform))]
    if is_torchvision(transform, "CenterCrop"):
        return [specs.CenterCrop(tuple(transform.size))]
    if is_torchvision(transform, "RandomCrop"):
        padding = transform.padding
        if type(transform).__module__.startswith("torchvision.transforms.v2") and padding is not None:
            left, right, top, bottom = padding  # v2 keeps [left, right, top, bottom]
            padding = (left, top, right, bottom)
        fill = transform.fill
        if isinstance(fill, dict):  # v2: per tv_tensor type; a mask's entry is the mask's (fastload.trace.masks)
            fill = {k: v for k, v in fill.items() if getattr(k, "__name__", k) not in ("Mask", "BoundingBoxes")}
            fill = next(iter(fill.values()), 0) if len(set(map(repr, fill.values()))) <= 1 else fill
        if isinstance(fill, dict):
            raise NotConvertible(f"fills per tv_tensor type ({fill!r})", fix="pass one fill")
        return [specs.RandomCrop(tuple(transform.size), padding, bool(transform.pad_if_needed),
                                 0 if fill is None else fill, transform.padding_mode)]
    if is_torchvision(transform, "GaussianBlur"):
        return _gaussian_blur(transform)
    if is_torchvision(transform, "TrivialAugmentWide", "RandAugment", "AutoAugment"):
        return [_auto_augment(transform)]
    if is_torchvision(transform, "AugMix"):
        v2 = type(transform).__module__.startswith("torchvision.transforms.v2")
        fill = transform.fill
        if v2 and isinstance(fill, dict):  # v2: per tv_tensor type
            fill = next(iter(fill.values()), None) if len(set(map(repr, fill.values()))) == 1 else fill
            if isinstance(fill, dict):
                raise NotConvertible(f"fills per tv_tensor type ({fill!r})", fix="pass one fill")
        return [autoaugment.AugMix(int(transform.severity), int(transform.mixture_width), int(transform.chain_depth),
                                   float(transform.alpha), bool(transform.all_ops), transform.interpolation,
                                   fill, v2=v2)]
    if is_torchvision(transform, "RandomHorizontalFlip"):
        return [specs.RandomHorizontalFlip(float(transform.p))]
    if is_torchvision(transform, "RandomVerticalFlip"):
        return [specs.RandomVerticalFlip(float(transform.p))]
    if is_torchvision(transform, "ToTensor"):
        return [specs.ToDtype(torch.float32, scale=True)]
    if is_torchvision(transform, "PILToTensor", "ToImage", "ToPureTensor"):
        return []  # uint8 CHW tensors are what the native pipeline produces
    if is_torchvision(transform, "ConvertImageDtype"):
        check_output_dtype(transform.dtype)
        return [specs.ToDtype(transform.dtype, scale=True)]
    if is_torchvision(transform, "ToDtype"):
        dtype = transform.dtype
        if isinstance(dtype, dict):  # per tv_tensor type: the image's entry (a mask's: fastload.trace.masks)
            dtype = _image_dtype(dtype)
            if dtype is None:
                return []
        check_output_dtype(dtype)
        return [specs.ToDtype(dtype, scale=bool(transform.scale))]
    if is_torchvision(transform, "Normalize"):
        return [specs.Normalize(transform.mean, transform.std)]
    color_specs = _color_specs(transform)
    if color_specs is not None:
        return color_specs
    timm_specs = timm.leaf_specs(transform)
    if timm_specs is not None:
        return timm_specs
    raise NotConvertible(presets.why_not_native(transform), fix=presets.fix_for(transform))


def _image_dtype(dtypes: dict) -> Any:
    """The dtype a v2 ToDtype's dict gives the image (a tv_tensors.Image or a plain tensor:
    their entries, else "others"; None: left as it is), else NotConvertible."""
    image = {repr(v): v for k, v in dtypes.items() if getattr(k, "__name__", k) in ("Image", "Tensor")}
    if len(image) > 1:
        raise NotConvertible(f"converts a tv_tensors.Image and a plain tensor to different dtypes ({dtypes!r})",
                             fix="give the image one dtype")
    if image:
        return next(iter(image.values()))
    if "others" not in dtypes:
        raise NotConvertible(f"gives the image no dtype ({dtypes!r}: torchvision raises)", fix='add "others": None')
    return dtypes["others"]


def _range(value: Any) -> Any:
    return None if value is None else (float(value[0]), float(value[1]))


def _gaussian_blur(transform: Any) -> Any:
    return [specs.GaussianBlur(tuple(transform.kernel_size), tuple(float(s) for s in transform.sigma))]


def _auto_augment(transform: Any) -> Any:
    """The spec of a v1 or v2 TrivialAugmentWide / RandAugment / AutoAugment (v2: its own magnitude tables)."""
    interpolation = transform.interpolation
    name = getattr(interpolation, "value", interpolation)
    name = specs.PIL_INTERPOLATIONS.get(name, name) if isinstance(name, int) else name
    if name not in ("nearest", "bilinear"):
        raise NotConvertible(f"uses {interpolation} for its affine ops (native: InterpolationMode.NEAREST, "
                             f"the default, and BILINEAR)", fix="pass interpolation=InterpolationMode.BILINEAR")
    fill = transform.fill
    if isinstance(fill, dict):  # v2: per tv_tensor type
        values = list(fill.values())
        if len(set(map(repr, values))) > 1:
            raise NotConvertible(f"fills per tv_tensor type ({fill!r})", fix="pass one fill")
        fill = values[0] if values else None
    v2 = type(transform).__module__.startswith("torchvision.transforms.v2")
    if is_torchvision(transform, "TrivialAugmentWide"):
        return autoaugment.TrivialAugmentWide(int(transform.num_magnitude_bins), name, fill, v2)
    if is_torchvision(transform, "AutoAugment"):
        return autoaugment.AutoAugment(transform.policy, name, fill, v2)
    return autoaugment.RandAugment(int(transform.num_ops), int(transform.magnitude), int(transform.num_magnitude_bins),
                                   name, fill, v2)


def _color_specs(transform: Any) -> Any:
    """The colour specs of a v1 or v2 ColorJitter, RandomApply([ColorJitter or GaussianBlur]), Grayscale,
    RandomGrayscale or RandomErasing (their checked attributes: ranges or None, p, value),
    else None."""
    if is_torchvision(transform, "ColorJitter"):
        return [color.ColorJitter(*(_range(getattr(transform, name))
                                    for name in ("brightness", "contrast", "saturation", "hue")))]
    if is_torchvision(transform, "RandomApply"):
        inner = list(transform.transforms)
        if len(inner) != 1 or not is_torchvision(inner[0], "ColorJitter", "GaussianBlur"):
            names = ", ".join(type(t).__name__ for t in inner) or "nothing"
            raise NotConvertible(f"is native around a single ColorJitter or GaussianBlur only (this one applies "
                                 f"{names})",
                                 fix="apply the other transforms outside RandomApply, or keep it in the Python tail")
        (spec,) = _color_specs(inner[0]) if is_torchvision(inner[0], "ColorJitter") else _gaussian_blur(inner[0])
        return [dataclasses.replace(spec, p=float(transform.p))]
    if is_torchvision(transform, "Grayscale"):
        if int(transform.num_output_channels) != 3:
            raise NotConvertible("makes one channel of the loader's three (native: num_output_channels=3)",
                                 fix="pass num_output_channels=3, or take one channel of the batch")
        return [color.Grayscale(3)]
    if is_torchvision(transform, "RandomGrayscale"):
        return [color.RandomGrayscale(float(transform.p))]
    if is_torchvision(transform, "RandomErasing"):
        value = transform.value
        # v1 keeps "random", v2 None for it; v2 keeps numbers as a list of floats.
        value = "random" if value is None or value == "random" else value
        if isinstance(value, (list, tuple)) and len(value) == 1:
            value = float(value[0])
        return [color.RandomErasing(float(transform.p), tuple(transform.scale), tuple(transform.ratio), value)]
    return None


def flatten(transform: Any) -> Tuple[List[Any], List[str]]:
    """(the transforms `transform` applies, in order, wrappers opened; the wrappers'
    names, outermost first). A wrapper is opened only where calling it provably means
    calling its parts in order (compat/presets.py)."""
    if transform is None:
        return [], []
    return open_wrappers(transform, presets.parts)


def split_transform(transform: Any, *, to_run: bool = False) -> Pipeline:
    """`transform` (None, a torchvision transform, a Compose, a preset, ...) cut into its
    native prefix (fastload specs) and its Python tail, with every blocker named.
    to_run: cut also where the prefix stops fusing into one engine pass (what a loader
    runs; without it the cut is at the first transform without an equivalent)."""
    leaves, _ = flatten(transform)
    return split_pipeline(leaves, readable_leaf_specs, (ValueError,), fuses=why_not_fused if to_run else None)


def why_not_fused(native: List[Any]) -> str:
    from fastload.augment.plan import fuse
    from fastload.errors import UnsupportedPipeline

    try:
        fuse(list(native))
    except (UnsupportedPipeline, ValueError) as error:
        return str(error)
    return ""


def readable_leaf_specs(transform: Any) -> List[Any]:
    # A transform whose attributes are not what its class name promises (a look-alike,
    # a different library version) is a blocker with the reason, never a crash.
    try:
        return leaf_specs(transform)
    except (AttributeError, TypeError, KeyError) as error:
        raise NotConvertible(f"its attributes are not the expected ones ({type(error).__name__}: {error})") from None


def convert_transform(transform: Any) -> List[Any]:
    """fastload.transforms specs equivalent to one torchvision transform (wrappers such as
    Compose are opened), or NotConvertible naming every transform without an equivalent."""
    pipeline = split_transform(transform)
    if pipeline.tail:
        raise NotConvertible("; ".join(pipeline.blockers))
    return list(pipeline.native)
