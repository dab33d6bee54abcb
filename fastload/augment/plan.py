"""Reduces a list of transform specs to one fused plan for the C++ engine.

A plan is: one geometry (RandomResizedCrop, or Resize and/or CenterCrop with a fixed
output size), an optional flip, and one affine value map (scale, mean, std) with an
output dtype. Lists that do not reduce to that raise UnsupportedPipeline with the
reason; the loader then says so in `loader.path` and takes the generic path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from fastload.augment import specs
from fastload.errors import UnsupportedPipeline  # noqa: F401  (raised here; re-exported)
from fastload.ops import DEFAULT_MAX_PIXELS

# Mirrors csrc/engine/plan.h Geometry.
RANDOM_RESIZED_CROP = 0
RESIZE_CENTER_CROP = 1


@dataclass
class Plan:
    """A fused pipeline. `config()` is what csrc/engine/plan.h reads."""

    geometry: int
    out_size: Tuple[int, int]
    scale: Tuple[float, float] = (0.08, 1.0)
    ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    resize_short: int = -1
    resize_size: Tuple[int, int] = (-1, -1)
    max_size: int = -1
    flip_p: float = 0.0
    value_scale: float = 1.0
    mean: Tuple[float, ...] = (0.0, 0.0, 0.0)
    std: Tuple[float, ...] = (1.0, 1.0, 1.0)
    dtype: torch.dtype = torch.uint8
    channels: int = 3
    exact: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0
    description: str = field(default="", compare=False)

    def config(self) -> Dict[str, Any]:
        return {
            "geometry": self.geometry,
            "out_height": self.out_size[0],
            "out_width": self.out_size[1],
            "scale_min": self.scale[0],
            "scale_max": self.scale[1],
            "ratio_min": self.ratio[0],
            "ratio_max": self.ratio[1],
            "resize_short": self.resize_short,
            "resize_height": self.resize_size[0],
            "resize_width": self.resize_size[1],
            "max_size": self.max_size,
            "flip_p": self.flip_p,
            "value_scale": self.value_scale,
            "mean": [float(m) for m in self.mean],
            "std": [float(s) for s in self.std],
            "channels": self.channels,
            "exact": self.exact,
            "max_pixels": self.max_pixels,
            "seed": self.seed,
        }


def build_plan(
    ops: Sequence[Any],
    *,
    channels: int = 3,
    dtype: Optional[torch.dtype] = None,
    exact: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    seed: int = 0,
) -> Plan:
    """Fuses `ops` (fastload.ops specs, applied in order) into a Plan.

    Args:
        ops: specs from fastload.augment.specs.
        channels: 3 (RGB) or 1 (grayscale).
        dtype: overrides the output dtype (e.g. torch.bfloat16 for AMP), values unchanged.
        exact: never decode at a reduced DCT scale (bit-faithful to a full decode).

    Raises:
        UnsupportedPipeline: with the reason, when the list does not fuse.
    """
    geometry = []  # the geometric specs, in order
    flip_p = 0.0
    value_scale, mean, std = 1.0, (0.0,) * channels, (1.0,) * channels
    out_dtype = torch.uint8
    value_started = False  # a value op ran: later padding would pad normalised zeros
    for op in ops:
        if isinstance(op, (specs.RandomResizedCrop, specs.Resize, specs.CenterCrop)):
            if value_started and isinstance(op, specs.CenterCrop):
                raise UnsupportedPipeline(f"{op} after a dtype/normalise op pads in normalised space")
            geometry.append(op)
        elif isinstance(op, specs.RandomHorizontalFlip):
            if flip_p > 0 and op.p > 0:
                raise UnsupportedPipeline("two random flips do not fuse into one")
            flip_p = op.p
        elif isinstance(op, specs.ToDtype):
            value_started = True
            if op.dtype.is_floating_point and op.scale and not out_dtype.is_floating_point:
                value_scale = 1.0 / 255.0
            elif op.dtype == torch.uint8 and out_dtype.is_floating_point:
                raise UnsupportedPipeline("converting back to uint8 after a float conversion")
            out_dtype = op.dtype
        elif isinstance(op, specs.Normalize):
            value_started = True
            if len(op.mean) not in (1, channels) or len(op.std) not in (1, channels):
                raise UnsupportedPipeline(f"{op} does not match {channels} channels")
            if not out_dtype.is_floating_point:  # like ToTensor before Normalize
                value_scale, out_dtype = 1.0 / 255.0, torch.float32
            if mean != (0.0,) * channels or std != (1.0,) * channels:
                raise UnsupportedPipeline("two Normalize ops do not fuse into one")
            mean = tuple(op.mean) * (channels // len(op.mean))
            std = tuple(op.std) * (channels // len(op.std))
        else:
            raise UnsupportedPipeline(f"{op!r} has no native equivalent")

    plan = Plan(geometry=RESIZE_CENTER_CROP, out_size=(0, 0), flip_p=flip_p, value_scale=value_scale,
                mean=mean, std=std, dtype=dtype or out_dtype, channels=channels, exact=exact,
                max_pixels=max_pixels, seed=seed)
    kinds = [type(op) for op in geometry]
    if kinds == [specs.RandomResizedCrop]:
        (crop,) = geometry
        plan.geometry, plan.out_size, plan.scale, plan.ratio = RANDOM_RESIZED_CROP, crop.size, crop.scale, crop.ratio
    elif kinds in ([specs.Resize, specs.CenterCrop], [specs.CenterCrop], [specs.Resize]):
        resize = geometry[0] if kinds[0] is specs.Resize else None
        crop = geometry[-1] if kinds[-1] is specs.CenterCrop else None
        if resize is not None:
            if isinstance(resize.size, int):
                plan.resize_short = resize.size
                plan.max_size = resize.max_size or -1
            else:
                plan.resize_size = resize.size
        if crop is not None:
            plan.out_size = crop.size
        elif isinstance(resize.size, int):
            raise UnsupportedPipeline(
                f"{resize} alone gives a different size per image; add a CenterCrop or give (height, width)"
            )
        else:
            plan.out_size = resize.size
    elif not kinds:
        raise UnsupportedPipeline("no crop or resize: images of different sizes cannot be batched")
    else:
        names = " -> ".join(k.__name__ for k in kinds)
        raise UnsupportedPipeline(f"geometry {names} does not fuse into one crop-resize")
    plan.description = " -> ".join(type(op).__name__ for op in ops)
    return plan
