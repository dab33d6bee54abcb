"""Transform specs: what a native pipeline does to each image, torchvision's semantics.

Specs hold parameters only, never pixels. A list of them is reduced to one fused plan
(plan.py) that the C++ engine runs per sample: decode the crop window, resize
(antialiased; Pillow's bilinear, bicubic or nearest), flip, normalise and cast in one pass.

Example:
    >>> from fastload import transforms as T
    >>> pipeline = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
    ...             T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    >>> RandomResizedCrop(224, interpolation=3).interpolation  # PIL's BICUBIC constant
    'bicubic'
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import torch

from fastload import _ext
from fastload.augment.arguments import (INTERPOLATIONS, PIL_INTERPOLATIONS,  # noqa: F401  (specs' names too)
                                        interpolation_name, uint8_fill)
from fastload.augment.autoaugment import SPECS as _AUTOAUGMENT_SPECS
from fastload.augment.color import SPECS as _COLOR_SPECS

Size = Union[int, Sequence[int]]


def _pair(size: Size, name: str) -> Tuple[int, int]:
    if isinstance(size, int):
        size = (size, size)
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        size = (size[0], size[0])
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"fastload.transforms.{name}: expected a positive int or (height, width), got {size}")
    return size


def native_interpolations() -> Tuple[str, ...]:
    """The interpolations the engine has a filter for, by torchvision's names:
    fastload._C.Interpolation's members, lower-case, that torchvision names (the plain
    bilinear filter is torchvision's bilinear with antialias=False; needs fastload._C)."""
    names = (name.lower() for name in _ext.require_ops().Interpolation.__members__)
    return tuple(name for name in names if name in INTERPOLATIONS)


def has_native_filter(interpolation: str) -> bool:
    """Whether the engine has this filter; True when fastload._C is not built (the loader
    then gives that reason instead)."""
    return not _ext.has_ops() or interpolation in native_interpolations()


def resampling_filter(op) -> str:
    """The engine's filter (a fastload._C.Interpolation member, lower-case) of a
    RandomResizedCrop or Resize: its interpolation, or "bilinear_no_antialias" for
    bilinear with antialias=False (nearest never antialiases; bicubic without it keeps
    its name and the plan refuses it)."""
    if not op.antialias and op.interpolation == "bilinear":
        return "bilinear_no_antialias"
    return op.interpolation


@dataclass(frozen=True)
class RandomResizedCrop:
    """Crop a random area and aspect ratio, resize to `size` (torchvision semantics:
    10 attempts, then a central fallback crop). Antialiased, Pillow's filters.

    Args:
        size: output (height, width), or an int for a square.
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height), sampled log-uniformly.
        interpolation: "bilinear", "bicubic" or "nearest" (Pillow's BILINEAR, BICUBIC,
            NEAREST), a torchvision InterpolationMode or a Pillow constant; stored as
            the name. torchvision's other modes are accepted but do not fuse.
        antialias: False resizes bilinear without antialiasing (torch's
            interpolate(antialias=False), OpenCV's INTER_LINEAR: what albumentations
            does); nearest ignores it, bicubic has no native filter without it.
    """

    size: Size
    scale: Tuple[float, float] = (0.08, 1.0)
    ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    interpolation: str = "bilinear"
    antialias: bool = True

    def __post_init__(self):
        object.__setattr__(self, "size", _pair(self.size, "RandomResizedCrop"))
        object.__setattr__(self, "interpolation", interpolation_name(self.interpolation, "RandomResizedCrop"))
        object.__setattr__(self, "scale", tuple(float(s) for s in self.scale))
        object.__setattr__(self, "ratio", tuple(float(r) for r in self.ratio))
        if self.scale[0] > self.scale[1] or self.ratio[0] > self.ratio[1] or self.ratio[0] <= 0:
            raise ValueError(
                f"fastload.transforms.RandomResizedCrop: expected scale and ratio as (min, max), got "
                f"scale={self.scale}, ratio={self.ratio}"
            )


@dataclass(frozen=True)
class Resize:
    """Resize: an int resizes the shorter side to it (aspect kept, `max_size` caps the
    longer side), (height, width) resizes to exactly that. Antialiased, Pillow's filters:
    `interpolation` and `antialias` as in RandomResizedCrop.

    Natively batchable only when the output size is fixed: (height, width), or followed
    by a CenterCrop.

    Raises:
        ValueError: where torchvision's resize would refuse every image: max_size not
            strictly greater than the shorter-side size, or max_size with (height, width).
    """

    size: Size
    max_size: Optional[int] = None
    interpolation: str = "bilinear"
    antialias: bool = True

    def __post_init__(self):
        object.__setattr__(self, "interpolation", interpolation_name(self.interpolation, "Resize"))
        size = self.size
        if isinstance(size, (list, tuple)) and len(size) == 1:
            size = int(size[0])
        if isinstance(size, (list, tuple)):
            size = _pair(size, "Resize")
        elif not isinstance(size, int) or size <= 0:
            raise ValueError(f"fastload.transforms.Resize: expected a positive int or (height, width), got {self.size!r}")
        object.__setattr__(self, "size", size)
        # torchvision checks these when resizing (so on the first image); a native plan
        # is fixed for the loader's lifetime, so refuse them here, in torchvision's words.
        if self.max_size is not None:
            if not isinstance(size, int):
                raise ValueError(
                    "fastload.transforms.Resize: max_size should only be passed if size specifies the length of the "
                    f"smaller edge, i.e. size should be an int, got size={self.size!r}, max_size={self.max_size!r}"
                )
            if self.max_size <= size:
                raise ValueError(
                    f"fastload.transforms.Resize: max_size = {self.max_size} must be strictly greater than the "
                    f"requested size for the smaller edge size = {[size]}"
                )


@dataclass(frozen=True)
class CenterCrop:
    """Crop the centre to `size`, padding with zeros where the image is smaller
    (torchvision semantics)."""

    size: Size

    def __post_init__(self):
        object.__setattr__(self, "size", _pair(self.size, "CenterCrop"))


_PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


@dataclass(frozen=True)
class RandomCrop:
    """Pad, then crop `size` at a random place (torchvision.transforms.RandomCrop).

    Args:
        size: output (height, width), or an int for a square.
        padding: None, an int (every side), (left/right, top/bottom) or (left, top,
            right, bottom); stored as the 4-tuple (left, top, right, bottom).
        pad_if_needed: pad both sides of a dimension by what the image lacks.
        fill: the constant padding value (a number or one per channel), applied in uint8
            as torchvision's pad of a PIL image (truncated to an int, saturated to 0..255).
        padding_mode: "constant", "edge", "reflect" or "symmetric" (numpy.pad's modes,
            as torchvision's pad of a PIL image: a reflection wider than the image repeats).

    Raises:
        TypeError, ValueError: as torchvision's F.pad for bad padding, fill or mode (it
            raises them on the first image; a native plan is fixed, so here).
    """

    size: Size
    padding: Optional[Union[int, Sequence[int]]] = None
    pad_if_needed: bool = False
    fill: Union[float, Sequence[float]] = 0
    padding_mode: str = "constant"

    def __post_init__(self):
        object.__setattr__(self, "size", _pair(self.size, "RandomCrop"))
        padding = self.padding
        if padding is not None:
            if not isinstance(padding, (numbers.Number, tuple, list)):
                raise TypeError("Got inappropriate padding arg")
            if isinstance(padding, (tuple, list)) and len(padding) not in (1, 2, 4):
                raise ValueError(
                    f"Padding must be an int or a 1, 2, or 4 element tuple, not a {len(padding)} element tuple"
                )
            if isinstance(padding, numbers.Number):
                padding = (int(padding),) * 4
            elif len(padding) == 1:
                padding = (int(padding[0]),) * 4
            elif len(padding) == 2:
                padding = (int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1]))
            else:
                padding = tuple(int(p) for p in padding)
            if min(padding) < 0:
                raise ValueError(f"fastload.transforms.RandomCrop: expected non-negative padding, got {padding}")
            object.__setattr__(self, "padding", padding)
        if not isinstance(self.fill, (numbers.Number, tuple, list)):
            raise TypeError("Got inappropriate fill arg")
        if self.padding_mode not in _PADDING_MODES:
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")

    @property
    def pads(self) -> bool:
        """Whether any image can be padded."""
        return self.pad_if_needed or (self.padding is not None and any(self.padding))

    def uint8_fill(self, channels: int) -> Tuple[int, ...]:
        """The constant fill as the uint8 values torchvision's pad of a PIL image of
        `channels` channels writes: one per channel (uint8_fill).

        Raises:
            ValueError: a fill sequence of neither 1 nor `channels` values (torchvision's
                message).
        """
        return uint8_fill(self.fill, channels)


@dataclass(frozen=True)
class GaussianBlur:
    """Gaussian blur of the uint8 image (torchvision.transforms.GaussianBlur on a PIL
    image): a kernel of `kernel_size` (kx, ky) with one sigma for both axes, drawn
    uniformly in `sigma` (min, max) per sample, reflect padding, rounded back to uint8.

    Args:
        kernel_size: odd positive (kx, ky), or an int for a square kernel.
        sigma: a positive float (fixed) or (min, max) with 0 < min <= max; stored as
            (min, max).
        p: the probability that the blur runs at all, torchvision's
            ``RandomApply([GaussianBlur(...)], p)``; 1 for a plain GaussianBlur. As
            RandomApply, p >= 1 always runs and p <= 0 never does.

    Raises:
        ValueError: as torchvision's GaussianBlur for an even or non-positive kernel
            size or a bad sigma.

    Example:
        >>> GaussianBlur(5, sigma=1.5)
        GaussianBlur(kernel_size=(5, 5), sigma=(1.5, 1.5), p=1.0)
        >>> GaussianBlur(23, sigma=(0.1, 2.0), p=0.5).p  # RandomApply([GaussianBlur(23)], p=0.5)
        0.5
    """

    kernel_size: Size
    sigma: Union[float, Sequence[float]] = (0.1, 2.0)
    p: float = 1.0

    def __post_init__(self):
        size = self.kernel_size
        if isinstance(size, numbers.Number):
            size = (int(size), int(size))
        elif isinstance(size, (tuple, list)) and len(size) == 1:
            size = (int(size[0]), int(size[0]))
        if not isinstance(size, (tuple, list)) or len(size) != 2:
            raise ValueError("Kernel size should be a tuple/list of two integers")
        size = tuple(int(k) for k in size)
        if any(k <= 0 or k % 2 == 0 for k in size):
            raise ValueError("Kernel size value should be an odd and positive number.")
        object.__setattr__(self, "kernel_size", size)
        sigma = self.sigma
        if isinstance(sigma, numbers.Number):
            if sigma <= 0:
                raise ValueError("If sigma is a single number, it must be positive.")
            sigma = (float(sigma), float(sigma))
        elif isinstance(sigma, (tuple, list)) and len(sigma) == 2:
            if not 0.0 < sigma[0] <= sigma[1]:
                raise ValueError("sigma values should be positive and of the form (min, max).")
            sigma = (float(sigma[0]), float(sigma[1]))
        else:
            raise ValueError("sigma should be a single number or a list/tuple with length 2.")
        object.__setattr__(self, "sigma", sigma)
        if not isinstance(self.p, numbers.Real) or math.isnan(self.p):
            raise TypeError(f"p should be a real number, got {self.p!r}")
        object.__setattr__(self, "p", min(max(float(self.p), 0.0), 1.0))


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirror the image horizontally with probability p."""

    p: float = 0.5

    def __post_init__(self):
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"fastload.transforms.RandomHorizontalFlip: expected 0 <= p <= 1, got {self.p}")


@dataclass(frozen=True)
class RandomVerticalFlip:
    """Mirror the image vertically (top-bottom) with probability p."""

    p: float = 0.5

    def __post_init__(self):
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"fastload.transforms.RandomVerticalFlip: expected 0 <= p <= 1, got {self.p}")


@dataclass(frozen=True)
class Normalize:
    """(x - mean) / std per channel, on values in [0, 1] (the image is converted to
    float32 in [0, 1] first when no ToDtype came before, as ToTensor would)."""

    mean: Sequence[float]
    std: Sequence[float]

    def __post_init__(self):
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if any(s == 0 or not math.isfinite(s) for s in self.std):
            raise ValueError(f"fastload.transforms.Normalize: expected non-zero finite std, got {self.std}")


@dataclass(frozen=True)
class ToDtype:
    """Output dtype: uint8, float32, float16 or bfloat16. scale=True maps uint8 [0, 255]
    to [0, 1] for floating dtypes (torchvision v2 ToDtype semantics)."""

    dtype: torch.dtype
    scale: bool = False

    def __post_init__(self):
        if self.dtype not in (torch.uint8, torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(
                f"fastload.transforms.ToDtype: expected uint8, float32, float16 or bfloat16, got {self.dtype}"
            )


SPECS = (RandomResizedCrop, Resize, CenterCrop, RandomCrop, RandomHorizontalFlip, RandomVerticalFlip, Normalize,
         ToDtype, GaussianBlur)

# The colour specs (augment/color.py) and the automatic augmentations (autoaugment.py) are
# specs too: a native dataset takes them.
SPECS = SPECS + _COLOR_SPECS + _AUTOAUGMENT_SPECS
