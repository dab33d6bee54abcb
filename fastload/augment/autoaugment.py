"""TrivialAugmentWide, RandAugment and AutoAugment specs: torchvision's augmentation
spaces (and AutoAugment's policies) on the uint8 (PIL) image, run in the engine's fused
pass (csrc/augment/autoaugment.h); AugMix, on its tensor-path ops.

A spec holds torchvision's arguments and knows its augmentation space: the op ids in
torchvision's order and each op's magnitudes, computed with torch exactly as
torchvision computes them (the v1 and v2 tables differ in Solarize: a threshold in v1, a
fraction of 255 in v2). The engine draws each sample's ops from (seed, epoch, index)
with torchvision's distributions and applies them with Pillow's arithmetic, so an op
with a given magnitude gives torchvision's pixels bit for bit.

`apply_reference` is the plain torchvision twin (its functional ops on a PIL image),
which the tests and the generic twin of a plan use.

Example:
    >>> from fastload.augment.autoaugment import TrivialAugmentWide, OPS
    >>> ops, magnitudes = TrivialAugmentWide().space(224, 224)
    >>> [OPS[op] for op in ops][:3], len(magnitudes) == len(ops) * 31
    (['Identity', 'ShearX', 'ShearY'], True)
    >>> RandAugment(num_ops=2, magnitude=9).magnitude_bin
    9
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload import _ext
from fastload.augment.arguments import interpolation_name, uint8_fill


def op_names() -> Tuple[str, ...]:
    """torchvision's op names by the engine's op ids (csrc/augment/autoaugment.h
    AugmentOp, bound as fastload._C.AUGMENT_OPS): op_names()[id] is op id's name."""
    return _ext.require_ops().AUGMENT_OPS


def __getattr__(name: str):
    if name == "OPS":  # op_names(), as a module constant
        return op_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fill(fill, name: str) -> Optional[Tuple[float, ...]]:
    if fill is None:
        return None
    if isinstance(fill, numbers.Number):
        return (float(fill),)
    if isinstance(fill, (list, tuple)) and all(isinstance(f, numbers.Number) for f in fill):
        return tuple(float(f) for f in fill)
    raise TypeError(f"fastload.transforms.{name}: fill should be None, a number or a sequence of numbers, "
                    f"got {fill!r}")


def _linspace(start: float, end: float, bins: int) -> List[float]:
    return torch.linspace(start, end, bins).tolist()


def _posterize_bits(bins: int, top: int, steps: int, v2: bool) -> List[float]:
    if v2:
        return [float(b) for b in (top - (torch.arange(bins) / ((bins - 1) / steps))).round().int().tolist()]
    return [float(b) for b in (top - (torch.arange(bins) / ((bins - 1) / steps)).round().int()).tolist()]


def _space(wide: bool, bins: int, height: int, width: int, v2: bool) -> List[Tuple[str, List[float]]]:
    """torchvision's augmentation space: (op, magnitudes) in its order (no magnitudes: [])."""
    top = 0.99 if wide else 0.9
    space = [("Identity", []),
             ("ShearX", _linspace(0.0, 0.99 if wide else 0.3, bins)),
             ("ShearY", _linspace(0.0, 0.99 if wide else 0.3, bins)),
             ("TranslateX", _linspace(0.0, 32.0 if wide else 150.0 / 331.0 * width, bins)),
             ("TranslateY", _linspace(0.0, 32.0 if wide else 150.0 / 331.0 * height, bins)),
             ("Rotate", _linspace(0.0, 135.0 if wide else 30.0, bins))]
    space += [(name, _linspace(0.0, top, bins)) for name in ("Brightness", "Color", "Contrast", "Sharpness")]
    space.append(("Posterize", _posterize_bits(bins, 8, 6 if wide else 4, v2)))
    if v2:
        space.append(("Solarize", [255.0 * m for m in _linspace(1.0, 0.0, bins)]))
    else:
        space.append(("Solarize", _linspace(255.0, 0.0, bins)))
    space += [("AutoContrast", []), ("Equalize", [])]
    return space


def _check_common(spec, name: str) -> None:
    bins = spec.num_magnitude_bins
    if isinstance(bins, bool) or not isinstance(bins, numbers.Integral):
        raise TypeError(f"fastload.transforms.{name}: num_magnitude_bins should be an int, got {bins!r}")
    object.__setattr__(spec, "interpolation", interpolation_name(spec.interpolation, name))
    object.__setattr__(spec, "fill", _fill(spec.fill, name))


class _AutoAugment:
    """What TrivialAugmentWide and RandAugment share: the space and the draws."""

    wide = False

    @property
    def ops_per_sample(self) -> int:
        return 1

    @property
    def magnitude_bin(self) -> int:
        return -1

    def space(self, height: int, width: int) -> Tuple[List[int], List[float]]:
        """(op ids, magnitudes [ops x bins]) on height x width images: the plan's fields
        (zeros for ops without magnitudes)."""
        bins = self.num_magnitude_bins
        ops, magnitudes = [], []
        for op, values in _space(self.wide, bins, height, width, self.v2):
            ops.append(op_names().index(op))
            magnitudes += values if values else [0.0] * bins
        return ops, magnitudes

    def uint8_fill(self, channels: int) -> List[float]:
        """The affine ops' fill as Pillow takes it: int() per channel ([] for None)."""
        return [] if self.fill is None else [float(f) for f in uint8_fill(self.fill, channels)]

    def params(self, indices: torch.Tensor, seed: int, epoch: int, height: int,
               width: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The engine's draws for samples `indices`: (op ids int64 [N, k], signed
        magnitudes float64 [N, k]), k ops per sample."""
        from fastload import _ops as native

        space_ops, magnitudes = self.space(height, width)
        return native.auto_augment_params(indices, seed, epoch, space_ops, magnitudes, self.ops_per_sample,
                                          self.magnitude_bin)


@dataclass(frozen=True)
class TrivialAugmentWide(_AutoAugment):
    """torchvision's TrivialAugmentWide on the uint8 image (after the crop and flip, as
    on the PIL image an ImageFolder pipeline holds): per sample one op of its 14, one of
    `num_magnitude_bins` magnitudes, a random sign for signed ops.

    Args:
        num_magnitude_bins: the number of magnitudes per op (>= 2 runs natively).
        interpolation: of the affine ops; the engine has Pillow's NEAREST (the default)
            and BILINEAR (torchvision's reference recipes pass BILINEAR).
        fill: the affine ops' fill, None (0), a number or one per channel.
        v2: torchvision.transforms.v2's tables (Solarize as a fraction of 255).

    Example:
        >>> TrivialAugmentWide().num_magnitude_bins, TrivialAugmentWide(fill=128).fill
        (31, (128.0,))
    """

    num_magnitude_bins: int = 31
    interpolation: object = "nearest"
    fill: object = None
    v2: bool = False

    wide = True

    def __post_init__(self):
        _check_common(self, "TrivialAugmentWide")


@dataclass(frozen=True)
class RandAugment(_AutoAugment):
    """torchvision's RandAugment on the uint8 image: per sample `num_ops` ops of its 14
    (uniform, with repeats) at the fixed bin `magnitude` of `num_magnitude_bins`, each
    with a random sign where signed.

    Args:
        num_ops, magnitude, num_magnitude_bins: torchvision's (2, 9, 31 by default).
        interpolation, fill, v2: as TrivialAugmentWide.

    Example:
        >>> RandAugment().ops_per_sample, RandAugment(magnitude=5).magnitude_bin
        (2, 5)
    """

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31
    interpolation: object = "nearest"
    fill: object = None
    v2: bool = False

    def __post_init__(self):
        _check_common(self, "RandAugment")
        for name in ("num_ops", "magnitude"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"fastload.transforms.RandAugment: {name} should be an int, got {value!r}")

    @property
    def ops_per_sample(self) -> int:
        return int(self.num_ops)

    @property
    def magnitude_bin(self) -> int:
        return int(self.magnitude)


# AutoAugment"s sub-policies (torchvision"s AutoAugment._get_policies, the same in v1 and
# v2): two (op, probability, magnitude bin or None) each; tests/ops/test_autoaugment.py
# checks them against torchvision"s.
POLICIES = {
    "imagenet": (
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ),
    "cifar10": (
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ),
    "svhn": (
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ),
}

# AutoAugment's augmentation space: its 14 ops in torchvision's order (_augmentation_space),
# 10 bins each.
AUTOAUGMENT_BINS = 10
_AUTOAUGMENT_OPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
                    "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert")


@dataclass(frozen=True)
class AutoAugment(_AutoAugment):
    """torchvision's AutoAugment on the uint8 image (after the crop and flip, as on the
    PIL image an ImageFolder pipeline holds): per sample one of the policy's 25
    sub-policies, uniformly; each of its two ops runs with its probability, at its
    magnitude bin of torchvision's 10-bin space, negated with probability 1/2 where signed.
    The engine draws these from (seed, epoch, index) as torchvision's get_params does
    (a sub-policy, two uniforms, two signs); v2 draws the same quantities lazily, with the
    same distribution.

    Args:
        policy: "imagenet" (the default), "cifar10" or "svhn", or torchvision's
            AutoAugmentPolicy.
        interpolation: of the affine ops, Pillow's NEAREST (the default) or BILINEAR.
        fill: the affine ops' fill, None (0), a number or one per channel.
        v2: torchvision.transforms.v2's tables (Solarize as a fraction of 255).

    Raises:
        ValueError: as torchvision for a policy it does not know.

    Example:
        >>> spec = AutoAugment("svhn")
        >>> spec.policy, len(spec.policy_fields()[0]), spec.ops_per_sample
        ('svhn', 50, 2)
        >>> [op_names()[op] for op in spec.space(32, 32)[0]][-3:]
        ['AutoContrast', 'Equalize', 'Invert']
    """

    policy: object = "imagenet"
    interpolation: object = "nearest"
    fill: object = None
    v2: bool = False

    num_magnitude_bins = AUTOAUGMENT_BINS  # fixed: torchvision's _augmentation_space(10, ...)

    def __post_init__(self):
        name = getattr(self.policy, "value", self.policy)  # torchvision's AutoAugmentPolicy enum
        if not isinstance(name, str) or name.lower() not in POLICIES:
            raise ValueError(f"The provided policy {self.policy} is not recognized.")
        object.__setattr__(self, "policy", name.lower())
        _check_common(self, "AutoAugment")

    @property
    def ops_per_sample(self) -> int:
        return int(_ext.require_ops().AUTOAUGMENT_POLICY_STEPS)

    def space(self, height: int, width: int) -> Tuple[List[int], List[float]]:
        """(op ids, magnitudes [14 x 10]) on height x width images: torchvision's
        _augmentation_space(10, (height, width)) in its order (zeros for ops without)."""
        tables = dict(_space(False, AUTOAUGMENT_BINS, height, width, self.v2))
        tables["Invert"] = []
        ops, magnitudes = [], []
        for op in _AUTOAUGMENT_OPS:
            ops.append(op_names().index(op))
            magnitudes += tables[op] or [0.0] * AUTOAUGMENT_BINS
        return ops, magnitudes

    def policy_fields(self) -> Tuple[List[int], List[float], List[int]]:
        """The plan's sub-policy table, [25 x 2] each: (op indices into space()'s ops,
        probabilities, magnitude bins, -1 for None)."""
        ops, probs, bins = [], [], []
        for sub_policy in POLICIES[self.policy]:
            for op, p, bin_ in sub_policy:
                ops.append(_AUTOAUGMENT_OPS.index(op))
                probs.append(float(p))
                bins.append(-1 if bin_ is None else int(bin_))
        return ops, probs, bins

    def params(self, indices: torch.Tensor, seed: int, epoch: int, height: int,
               width: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The engine's draws for samples `indices`: (op ids int64 [N, 2], signed
        magnitudes float64 [N, 2]) by the sub-policy's slots, op -1 where not applied."""
        from fastload import _ops as native

        space_ops, magnitudes = self.space(height, width)
        return native.auto_augment_params(indices, seed, epoch, space_ops, magnitudes, 1, -1,
                                          *self.policy_fields())


# torchvision's AugMix._PARAMETER_MAX: its tables have this many bins.
AUGMIX_BINS = 10


@dataclass(frozen=True)
class AugMix:
    """torchvision's AugMix on the uint8 image. torchvision converts the PIL image to a
    uint8 tensor inside AugMix, so its ops are the tensor path's (grid_sample for the
    affine ops, float32 blends), run natively as torch computes them. Per sample:
    weights m ~ Dirichlet(alpha, alpha) and w ~ Dirichlet(alpha, ...) * m[1];
    `mixture_width` chains of `chain_depth` ops (-1: 1 to 3, drawn), each op uniform over
    the space at a bin uniform in [0, severity), a random sign where signed; the result
    m[0] * image + sum w_i * chain_i, truncated to uint8.

    Args:
        severity, mixture_width, chain_depth, alpha, all_ops, interpolation: torchvision's
            (3, 3, -1, 1.0, True, BILINEAR by default); native: interpolation NEAREST or
            BILINEAR, at most 4 chains of at most 4 ops.
        fill: the affine ops' fill; natively None only (zeros, grid_sample's padding).
        v2: the space of torchvision.transforms.v2.AugMix: its Solarize thresholds are
            fractions of 255 (255 * linspace(1, 0), not linspace(255, 0)), compared in
            float32 as torch compares them; its op order and tables,
            Dirichlet weights, depths, bins and signs (probability 1/2) are v1's. Its ops
            are v2's tensor kernels, which round differently from v1's in Color,
            Sharpness and AutoContrast: up to one uint8 level on a few pixels per op (the
            native ops are v1's arithmetic; tests/ops/test_augmix_v2.py measures it).

    Raises:
        ValueError: as torchvision for a severity outside [1, 10].

    Example:
        >>> AugMix().space(32, 32)[0][:2], len(AugMix(all_ops=False).space(32, 32)[0])
        ([1, 2], 9)
    """

    severity: int = 3
    mixture_width: int = 3
    chain_depth: int = -1
    alpha: float = 1.0
    all_ops: bool = True
    interpolation: object = "bilinear"
    fill: object = None
    v2: bool = False

    def __post_init__(self):
        if not 1 <= self.severity <= AUGMIX_BINS:
            raise ValueError(f"The severity must be between [1, {AUGMIX_BINS}]. Got {self.severity} instead.")
        for name in ("severity", "mixture_width", "chain_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"fastload.transforms.AugMix: {name} should be an int, got {value!r}")
        object.__setattr__(self, "interpolation", interpolation_name(self.interpolation, "AugMix"))
        object.__setattr__(self, "fill", _fill(self.fill, "AugMix"))
        object.__setattr__(self, "alpha", float(self.alpha))

    def space(self, height: int, width: int) -> Tuple[List[int], List[float]]:
        """(op ids, magnitudes [ops x 10]) on height x width images, torchvision's order."""
        bins = AUGMIX_BINS
        space = [("ShearX", _linspace(0.0, 0.3, bins)), ("ShearY", _linspace(0.0, 0.3, bins)),
                 ("TranslateX", _linspace(0.0, width / 3.0, bins)), ("TranslateY", _linspace(0.0, height / 3.0, bins)),
                 ("Rotate", _linspace(0.0, 30.0, bins)), ("Posterize", _posterize_bits(bins, 4, 4, self.v2)),
                 ("Solarize", _v2_solarize(bins) if self.v2 else _linspace(255.0, 0.0, bins)),
                 ("AutoContrast", []), ("Equalize", [])]
        if self.all_ops:
            space += [(name, _linspace(0.0, 0.9, bins)) for name in ("Brightness", "Color", "Contrast", "Sharpness")]
        ops, magnitudes = [], []
        for op, values in space:
            ops.append(op_names().index(op))
            magnitudes += values if values else [0.0] * bins
        return ops, magnitudes

    def params(self, indices: torch.Tensor, seed: int, epoch: int, height: int, width: int):
        """The engine's draws for samples `indices`: (weights float32 [N, 1 + width]: the
        image's, then each chain's; depths int64 [N, width]; op ids int64 [N, width, 4]
        (-1 past the depth); signed magnitudes float64 [N, width, 4])."""
        from fastload import _ops as native

        space_ops, magnitudes = self.space(height, width)
        return native.augmix_params(indices, seed, epoch, space_ops, magnitudes, self.severity, self.mixture_width,
                                    self.chain_depth, self.alpha)


def _v2_solarize(bins: int) -> List[float]:
    """v2 AugMix's Solarize thresholds as the native op takes them: v2 passes 255 * m (m:
    its float32 linspace(1, 0), times 255 in Python floats, e.g. 170.0000051 for 2/3),
    and torch compares the uint8 image with that threshold in float32 (where it is 170.0:
    a pixel at 170 is inverted). The native op compares in float64: it gets the float32
    value torch compares with."""
    return [float(np.float32(255 * m)) for m in _linspace(1.0, 0.0, bins)]


SPECS = (TrivialAugmentWide, RandAugment, AutoAugment, AugMix)


def augmix_reference(pixels: torch.Tensor, weights: Sequence[float], ops: Sequence[Sequence[int]],
                     magnitudes: Sequence[Sequence[float]], interpolation: str = "bilinear") -> torch.Tensor:
    """torchvision's AugMix mix with given draws, on a uint8 HWC image: its tensor-path
    ops (transforms.autoaugment._apply_op on the uint8 tensor) per chain, then
    weights[0] * image + sum weights[1 + i] * chain_i in float32, truncated, as its forward."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op

    batch = pixels.permute(2, 0, 1).unsqueeze(0).contiguous()
    weights = torch.tensor([float(w) for w in weights], dtype=torch.float32)
    mix = weights[0].view(1, 1, 1, 1) * batch
    for i, (chain_ops, chain_magnitudes) in enumerate(zip(ops, magnitudes)):
        aug = batch
        for op, magnitude in zip(chain_ops, chain_magnitudes):
            if int(op) >= 0:
                aug = _apply_op(aug, op_names()[int(op)], float(magnitude), InterpolationMode(interpolation),
                               None)
        mix.add_(weights[1 + i].view(1, 1, 1, 1) * aug)
    return mix.to(torch.uint8)[0].permute(1, 2, 0).contiguous()


def apply_reference(pixels: torch.Tensor, ops: Sequence[int], magnitudes: Sequence[float],
                    fill: Sequence[float] = (), interpolation: str = "nearest") -> torch.Tensor:
    """torchvision's ops (transforms.functional on a PIL image, as _apply_op calls them)
    on a uint8 HWC image [H, W, 1 or 3] (op -1: none, an AutoAugment op not applied); fill: the affine ops' fill ([] = 0);
    interpolation: theirs ("nearest" or "bilinear")."""
    import torchvision.transforms.functional as F
    from PIL import Image
    from torchvision.transforms import InterpolationMode

    array = pixels.numpy()
    image = Image.fromarray(array[..., 0], "L") if array.shape[2] == 1 else Image.fromarray(array, "RGB")
    fill_arg = [int(f) for f in fill] or None
    nearest = InterpolationMode(interpolation)
    for op, magnitude in zip(ops, magnitudes):
        if int(op) < 0:  # an AutoAugment op not applied
            continue
        name = op_names()[int(op)]
        if name in ("ShearX", "ShearY"):
            shear = math.degrees(math.atan(magnitude))
            image = F.affine(image, angle=0.0, translate=[0, 0], scale=1.0,
                             shear=[shear, 0.0] if name == "ShearX" else [0.0, shear], interpolation=nearest,
                             fill=fill_arg, center=[0, 0])
        elif name in ("TranslateX", "TranslateY"):
            shift = [int(magnitude), 0] if name == "TranslateX" else [0, int(magnitude)]
            image = F.affine(image, angle=0.0, translate=shift, scale=1.0, shear=[0.0, 0.0], interpolation=nearest,
                             fill=fill_arg)
        elif name == "Rotate":
            image = F.rotate(image, magnitude, interpolation=nearest, fill=fill_arg)
        elif name in ("Brightness", "Color", "Contrast", "Sharpness"):
            adjust = {"Brightness": F.adjust_brightness, "Color": F.adjust_saturation,
                      "Contrast": F.adjust_contrast, "Sharpness": F.adjust_sharpness}[name]
            image = adjust(image, 1.0 + magnitude)
        elif name == "Posterize":
            image = F.posterize(image, int(magnitude))
        elif name == "Solarize":
            image = F.solarize(image, magnitude)
        elif name == "AutoContrast":
            image = F.autocontrast(image)
        elif name == "Equalize":
            image = F.equalize(image)
        elif name == "Invert":
            image = F.invert(image)
    out = np.array(image)
    return torch.from_numpy(out if out.ndim == 3 else out[..., None])
