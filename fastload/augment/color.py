"""Colour transform specs: ColorJitter, Grayscale, RandomGrayscale, RandomErasing.

Specs hold parameters only, with torchvision's argument checks (the same exception
types and messages as torchvision.transforms 0.29), and each samples its random
parameters as a pure function of (seed, epoch, index) through the native ops
(csrc/augment/color_params.h). Each op also has a plain-PyTorch twin here (``pil_*`` on
uint8 HWC images: torchvision's PIL path; ``tensor_*`` on float HWC images in [0, 1]:
its tensor path), which the tests hold against torchvision and the native ops.

Example:
    >>> from fastload.augment.color import ColorJitter, RandomErasing
    >>> ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4).hue is None
    True
    >>> ColorJitter(brightness=0.4).brightness
    (0.6, 1.4)
    >>> RandomErasing(p=0.25, value="random").value
    'random'
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import numpy as np
import torch

Range = Optional[Tuple[float, float]]
_OPS = ("brightness", "contrast", "saturation", "hue")


def _native(name: str):
    """The one place these specs reach the native ops (their wrappers in fastload._ops)."""
    from fastload import _ops as ops

    return getattr(ops, name)


def _check_jitter_input(value, name, center=1.0, bound=(0, float("inf")), clip_first_on_zero=True) -> Range:
    # torchvision.transforms.ColorJitter._check_input, its messages verbatim.
    if isinstance(value, numbers.Number):
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be non negative.")
        value = [center - float(value), center + float(value)]
        if clip_first_on_zero:
            value[0] = max(value[0], 0.0)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        value = [float(value[0]), float(value[1])]
    else:
        raise TypeError(f"{name} should be a single number or a list/tuple with length 2.")
    if not bound[0] <= value[0] <= value[1] <= bound[1]:
        raise ValueError(f"{name} values should be between {bound}, but got {value}.")
    if value[0] == value[1] == center:
        return None
    return tuple(value)


@dataclass(frozen=True)
class ColorJitter:
    """Random brightness, contrast, saturation and hue, in a random order (torchvision).

    Each argument is a number x (the factor is drawn from [max(0, 1 - x), 1 + x]; hue
    from [-x, x]) or a (min, max) pair; after construction each field holds the range
    as a tuple, or None where the op is off. Per sample: a uniformly random order of the
    four ops, then each enabled factor uniform in its range.

    p: the probability that the jitter runs at all, torchvision's
    ``RandomApply([ColorJitter(...)], p)`` (SimCLR, MoCo and BYOL recipes); 1 for a plain
    ColorJitter. As RandomApply, p >= 1 always runs and p <= 0 never does.

    Raises:
        ValueError, TypeError: as torchvision.transforms.ColorJitter, same messages.
    """

    brightness: Union[float, Tuple[float, float], None] = 0
    contrast: Union[float, Tuple[float, float], None] = 0
    saturation: Union[float, Tuple[float, float], None] = 0
    hue: Union[float, Tuple[float, float], None] = 0
    p: float = 1.0

    def __post_init__(self):
        for name in ("brightness", "contrast", "saturation"):
            object.__setattr__(self, name, self._normalised(getattr(self, name), name))
        object.__setattr__(
            self, "hue", self._normalised(self.hue, "hue", center=0, bound=(-0.5, 0.5), clip_first_on_zero=False)
        )
        if not isinstance(self.p, numbers.Real) or math.isnan(self.p):
            raise TypeError(f"p should be a real number, got {self.p!r}")
        object.__setattr__(self, "p", min(max(float(self.p), 0.0), 1.0))

    @staticmethod
    def _normalised(value, name, **kwargs) -> Range:
        # A range already checked (a tuple from a previous construction, or None) stays.
        if value is None:
            return None
        return _check_jitter_input(value, name, **kwargs)

    def ranges(self) -> list:
        """The 8 floats of the native ops: (min, max) per op, NaN pairs where off."""
        out = []
        for name in _OPS:
            value = getattr(self, name)
            out += [math.nan, math.nan] if value is None else [float(value[0]), float(value[1])]
        return out

    def params(self, indices: torch.Tensor, seed: int, epoch: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Per sample: order int64 [N, 4] (op ids: 0 brightness, 1 contrast, 2 saturation,
        3 hue, in application order) and factors float32 [N, 4] (by op id, NaN where off,
        all NaN where p skips the sample)."""
        return _native("color_jitter_params")(indices, seed, epoch, self.ranges(), self.p)


@dataclass(frozen=True)
class Grayscale:
    """Convert to grey (PIL's convert("L"): ITU-R 601-2 luma), with 1 or 3 channels out.

    Raises:
        ValueError: num_output_channels not 1 or 3 (torchvision raises it on the first
            image; a native plan is fixed, so it is refused here, in its words).
    """

    num_output_channels: int = 1

    def __post_init__(self):
        if self.num_output_channels not in (1, 3):
            raise ValueError("num_output_channels should be either 1 or 3")


@dataclass(frozen=True)
class RandomGrayscale:
    """Convert to grey with probability p, keeping the number of channels (torchvision:
    p is not checked; p >= 1 always converts, p <= 0 never)."""

    p: float = 0.1

    def params(self, indices: torch.Tensor, seed: int, epoch: int) -> torch.Tensor:
        """bool [N]: which samples turn grey."""
        return _native("random_grayscale_params")(indices, seed, epoch, float(self.p))


@dataclass(frozen=True)
class RandomErasing:
    """Erase a random rectangle of the normalised float image with probability p
    (torchvision's sampler: 10 attempts, else nothing erased).

    Args:
        p: probability of erasing.
        scale: range of the erased area as a fraction of the image's.
        ratio: range of the rectangle's aspect ratio (height / width), log-uniform.
        value: a number, one per channel, or "random" (a standard normal per element).
        inplace: accepted for torchvision compatibility (a native pipeline writes each
            sample once, so it changes nothing).
        per_channel: with value="random", one normal per channel instead of one per
            element (timm's RandomErasing mode="rand").

    Raises:
        TypeError, ValueError: as torchvision.transforms.RandomErasing, same messages
            (and its warning for a (max, min) range). A decreasing range, which
            torchvision refuses on the first image (torch's uniform_), is refused here
            with that RuntimeError.
    """

    p: float = 0.5
    scale: Tuple[float, float] = (0.02, 0.33)
    ratio: Tuple[float, float] = (0.3, 3.3)
    value: Union[float, str, Tuple[float, ...]] = 0
    inplace: bool = False
    per_channel: bool = False

    def __post_init__(self):
        value, scale, ratio, p = self.value, self.scale, self.ratio, self.p
        # torchvision.transforms.RandomErasing.__init__, in its order and words.
        if not isinstance(value, (numbers.Number, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(scale, Sequence):
            raise TypeError("Scale should be a sequence")
        if not isinstance(ratio, Sequence):
            raise TypeError("Ratio should be a sequence")
        if (scale[0] > scale[1]) or (ratio[0] > ratio[1]):
            warnings.warn("Scale and ratio should be of kind (min, max)")
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        if p < 0 or p > 1:
            raise ValueError("Random erasing probability should be between 0 and 1")
        for low, high in ((scale[0], scale[1]), (math.log(ratio[0]), math.log(ratio[1]))):
            if low > high:  # torch.empty(1).uniform_(low, high) in get_params
                raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={low} > to={high}")
        object.__setattr__(self, "scale", (float(scale[0]), float(scale[1])))
        object.__setattr__(self, "ratio", (float(ratio[0]), float(ratio[1])))
        if isinstance(value, (tuple, list)):
            object.__setattr__(self, "value", tuple(float(v) for v in value))

    def fill(self, channels: int) -> list:
        """The native ops' value list: [] for "random", else one value or one per channel.

        Raises:
            ValueError: a per-channel value that does not match `channels` (torchvision's
                message, raised there on the first image).
        """
        if self.value == "random":
            return []
        values = [float(self.value)] if isinstance(self.value, numbers.Number) else list(self.value)
        if len(values) not in (1, channels):
            raise ValueError(
                "If value is a sequence, it should have either a single value or "
                f"{channels} (number of input channels)"
            )
        return values

    def params(self, indices: torch.Tensor, seed: int, epoch: int, height: int, width: int) -> torch.Tensor:
        """int64 [N, 4] boxes (top, left, height, width) on a height x width image; all
        zero where nothing is erased."""
        return _native("random_erasing_params")(
            indices, seed, epoch, height, width, float(self.p), list(self.scale), list(self.ratio)
        )


SPECS = (ColorJitter, Grayscale, RandomGrayscale, RandomErasing)


# ---- plain-PyTorch twins: torchvision's PIL path on uint8 HWC images -------------------


def _pil_blend(degenerate: torch.Tensor, image: torch.Tensor, factor: float) -> torch.Tensor:
    # Pillow's ImagingBlend in float32, each product and sum rounded (separate ops).
    alpha = torch.tensor(factor, dtype=torch.float32)
    diff = (image.to(torch.int32) - degenerate.to(torch.int32)).to(torch.float32)
    t = degenerate.to(torch.float32) + alpha * diff
    return torch.nan_to_num(t, nan=0.0).clamp(0, 255).to(torch.uint8)  # truncates


def pil_luma(image: torch.Tensor) -> torch.Tensor:
    """PIL's convert("L") of a uint8 [H, W, 1 or 3] image: uint8 [H, W, 1]."""
    if image.shape[-1] == 1:
        return image.clone()
    rgb = image.to(torch.int64)
    luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    return luma.to(torch.uint8).unsqueeze(-1)


def pil_brightness(image: torch.Tensor, factor: float) -> torch.Tensor:
    """ImageEnhance.Brightness on uint8 [H, W, C]."""
    return _pil_blend(torch.zeros_like(image), image, factor)


def pil_contrast(image: torch.Tensor, factor: float) -> torch.Tensor:
    """ImageEnhance.Contrast on uint8 [H, W, C]: blend with the rounded mean of "L"."""
    luma = pil_luma(image)
    mean = int(luma.to(torch.float64).sum().item() / max(luma.numel(), 1) + 0.5)
    return _pil_blend(torch.full_like(image, mean), image, factor)


def pil_saturation(image: torch.Tensor, factor: float) -> torch.Tensor:
    """ImageEnhance.Color on uint8 [H, W, C] (identity on one channel)."""
    if image.shape[-1] == 1:
        return image.clone()
    return _pil_blend(pil_luma(image).expand_as(image), image, factor)


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    low = torch.floor(x)
    return torch.where(x - low >= 0.5, low + 1, low)


def pil_hue(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's PIL adjust_hue on uint8 [H, W, C]: Pillow's uint8 HSV, the hue
    shifted by int(factor * 255) modulo 256 (identity on one channel)."""
    if image.shape[-1] == 1:
        return image.clone()
    f32, f64 = torch.float32, torch.float64
    rgb = image.to(torch.int32)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    maxc, minc = rgb.amax(-1), rgb.amin(-1)
    equal = maxc == minc
    cr = (maxc - minc).to(f32)
    cr_safe = torch.where(equal, torch.ones_like(cr), cr)
    s = cr / torch.where(maxc == 0, torch.ones_like(cr), maxc.to(f32))
    rc, gc, bc = ((maxc - c).to(f32) / cr_safe for c in (r, g, b))
    h = torch.where(
        r == maxc, bc - gc,
        torch.where(g == maxc, (2.0 + rc.to(f64) - bc.to(f64)).to(f32), (4.0 + gc.to(f64) - rc.to(f64)).to(f32)),
    )
    h = torch.fmod(h.to(f64) / 6.0 + 1.0, 1.0).to(f32)
    hue = torch.where(equal, 0, (h.to(f64) * 255.0).trunc().clamp(0, 255).to(torch.int32))
    sat = torch.where(equal, 0, (s.to(f64) * 255.0).trunc().clamp(0, 255).to(torch.int32))
    value = maxc
    shift = int(np.int32(factor * 255).astype(np.uint8))
    hue = (hue + shift) % 256
    # Pillow's hsv2rgb.
    h6 = hue.to(f64) * 6.0 / 255.0
    i = torch.floor(h6)
    f = (h6 - i).to(f32)
    fs = (sat.to(f64) / 255.0).to(f32)
    v = value.to(f64)
    p = _round_half_away(v * (1.0 - fs.to(f64))).clamp(0, 255).to(torch.int32)
    q = _round_half_away(v * (1.0 - (fs * f).to(f64))).clamp(0, 255).to(torch.int32)
    t = _round_half_away(v * (1.0 - fs.to(f64) * (1.0 - f.to(f64)))).clamp(0, 255).to(torch.int32)
    sector = i.to(torch.int64) % 6
    choices = torch.stack([value, p, q, t], dim=-1)  # 0 v, 1 p, 2 q, 3 t
    table = torch.tensor([[0, 3, 1], [2, 0, 1], [1, 0, 3], [1, 2, 0], [3, 1, 0], [0, 1, 2]])
    out = torch.gather(choices, -1, table[sector])
    out = torch.where((sat == 0).unsqueeze(-1), value.unsqueeze(-1).expand_as(out), out)
    return out.to(torch.uint8)


def pil_grayscale(image: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
    """Grayscale on uint8 [H, W, C]: convert("L"), copied to each output channel."""
    return pil_luma(image).expand(*image.shape[:-1], num_output_channels).clone()


# ---- plain-PyTorch twins: torchvision's tensor path on float HWC images in [0, 1] -------


def tensor_grey(image: torch.Tensor) -> torch.Tensor:
    """v2's grey of a float [H, W, 1 or 3] image: [H, W, 1]."""
    if image.shape[-1] == 1:
        return image.clone()
    return (image[..., 0] * 0.2989 + image[..., 1] * 0.587 + image[..., 2] * 0.114).unsqueeze(-1)


def _tensor_blend(image, other, ratio):
    return (image * ratio + other * (1.0 - ratio)).clamp(0, 1)


def tensor_brightness(image: torch.Tensor, factor: float) -> torch.Tensor:
    return (image * factor).clamp(0, 1)


def tensor_contrast(image: torch.Tensor, factor: float) -> torch.Tensor:
    return _tensor_blend(image, tensor_grey(image).mean(), factor)


def tensor_saturation(image: torch.Tensor, factor: float) -> torch.Tensor:
    if image.shape[-1] == 1:
        return image.clone()
    return _tensor_blend(image, tensor_grey(image), factor)


def tensor_hue(image: torch.Tensor, factor: float) -> torch.Tensor:
    if image.shape[-1] == 1:
        return image.clone()
    r, g, b = image.unbind(-1)
    maxc, minc = image.amax(-1), image.amin(-1)
    equal = maxc == minc
    ones = torch.ones_like(maxc)
    s = (maxc - minc) / torch.where(equal, ones, maxc)
    divisor = torch.where(equal, ones, maxc - minc)
    rc, gc, bc = ((maxc - c) / divisor for c in (r, g, b))
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, rc + 2.0 - bc, gc + 4.0 - rc))
    h = torch.fmod(h * (1.0 / 6.0) + 1.0, 1.0)
    h = torch.remainder(h + factor, 1.0)
    h6 = h * 6
    i = torch.floor(h6)
    f = h6 - i
    sector = i.to(torch.int64) % 6
    p = ((1.0 - s) * maxc).clamp(0, 1)
    q = ((1.0 - s * f) * maxc).clamp(0, 1)
    t = ((s * f + (1.0 - s)) * maxc).clamp(0, 1)
    choices = torch.stack([maxc, p, q, t], dim=-1)
    table = torch.tensor([[0, 3, 1], [2, 0, 1], [1, 0, 3], [1, 2, 0], [3, 1, 0], [0, 1, 2]])
    return torch.gather(choices, -1, table[sector])


def tensor_grayscale(image: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
    return tensor_grey(image).expand(*image.shape[:-1], num_output_channels).clone()


_PIL_OPS = (pil_brightness, pil_contrast, pil_saturation, pil_hue)
_TENSOR_OPS = (tensor_brightness, tensor_contrast, tensor_saturation, tensor_hue)


def color_jitter(image: torch.Tensor, order, factors) -> torch.Tensor:
    """Twin of ColorJitter with drawn parameters on an HWC image: uint8 -> PIL path,
    float -> tensor path. order: 4 op ids; factors[op]: NaN (or None) where off."""
    ops = _PIL_OPS if image.dtype == torch.uint8 else _TENSOR_OPS
    for op in (int(k) for k in order):
        factor = factors[op]
        factor = None if factor is None else float(factor)
        if factor is not None and not math.isnan(factor):
            image = ops[op](image, factor)
    return image


# ---- RandomErasing's random values: the native counter generator in numpy ---------------

_M64 = (1 << 64) - 1


def _splitmix64(x):
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def erase_normals(seed: int, epoch: int, index: int, count: int) -> np.ndarray:
    """The first `count` standard normals of a sample's "random" erase patch, in
    torchvision's [C, h, w] element order (float32), as the native op draws them."""
    u64 = lambda v: np.uint64(v & _M64)  # noqa: E731  (Python ints wrap like C++'s casts)
    key = _splitmix64(_splitmix64(_splitmix64(u64(seed)) ^ u64(epoch)) ^ u64(index)) ^ np.uint64(6)
    k = np.arange(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        draws = [_splitmix64(key + np.uint64(0x632BE59BD9B4E019) * (2 * k + np.uint64(j))) for j in (1, 2)]
    u1, u2 = ((d >> np.uint64(11)).astype(np.float64) * 2.0**-53 for d in draws)
    return (np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32)


def erase(image: torch.Tensor, box, fill, seed: int = 0, epoch: int = 0, index: int = 0) -> torch.Tensor:
    """Twin of the erase op on a float [H, W, C] image: box (top, left, height,
    width); fill [] = the sample's random normals, else one value or one per channel."""
    out = image.clone()
    top, left, height, width = (int(v) for v in box)
    channels = image.shape[-1]
    if height == 0 or width == 0:
        return out
    if len(fill) == 0:
        values = torch.from_numpy(erase_normals(seed, epoch, index, channels * height * width))
        patch = values.view(channels, height, width).permute(1, 2, 0)
    else:
        patch = torch.tensor(fill, dtype=image.dtype).expand(height, width, channels)
    out[top : top + height, left : left + width] = patch
    return out
