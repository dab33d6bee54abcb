"""Argument values that several families of transform specs read alike.

The geometric specs (specs.py) and the automatic augmentations (autoaugment.py) take
torchvision's interpolation arguments and constant fills; each is read here, once, so
that neither spec module needs the other's helpers (specs.py gathers every spec family,
so it sits above autoaugment.py).

Example:
    >>> interpolation_name(3, "Resize")  # Pillow's BICUBIC constant
    'bicubic'
    >>> uint8_fill((300, -1, 7.9), 3), uint8_fill(None, 2)
    ((255, 0, 7), (0, 0))
"""

from __future__ import annotations

import enum
from typing import Tuple

# torchvision's InterpolationMode values, and Pillow's integer constants for them (what
# torchvision's _interpolation_modes_from_int maps).
INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
PIL_INTERPOLATIONS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def interpolation_name(value, name: str) -> str:
    """The interpolation name ("bilinear", ...) of a name, a torchvision InterpolationMode
    or a Pillow integer constant. Every torchvision mode is accepted; the plan refuses the
    ones without a native filter (native_interpolations()), so the reason reaches loader.path."""
    if isinstance(value, enum.Enum):  # torchvision's InterpolationMode is a str Enum
        value = value.value
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"fastload.transforms.{name}: Argument interpolation should be a InterpolationMode or a "
                        f"corresponding Pillow integer constant, got {value!r}")
    if isinstance(value, int):
        if value not in PIL_INTERPOLATIONS:
            raise ValueError(f"fastload.transforms.{name}: expected a Pillow resampling constant "
                             f"{sorted(PIL_INTERPOLATIONS)}, got {value}")
        return PIL_INTERPOLATIONS[value]
    if value.lower() not in INTERPOLATIONS:
        raise ValueError(f"fastload.transforms.{name}: expected interpolation in {INTERPOLATIONS}, got {value!r}")
    return value.lower()


def uint8_fill(fill, channels: int) -> Tuple[int, ...]:
    """A fill (None, a number or a sequence) as Pillow writes it into a uint8 image of
    `channels` channels (torchvision's _parse_fill, then int()): one value per channel,
    clamped to [0, 255]. ValueError (torchvision's message) for a sequence of neither 1 nor
    `channels` values."""
    fill = 0 if fill is None else fill
    fill = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,) * channels
    if len(fill) == 1:
        fill = fill * channels
    elif len(fill) != channels:
        raise ValueError(f"The number of elements in 'fill' does not match the number of channels of the image "
                         f"({len(fill)} != {channels})")
    return tuple(min(max(int(f), 0), 255) for f in fill)
