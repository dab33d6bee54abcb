"""Pipelines whose output keeps each image's own size: torchvision's detection references
(flips, PILToTensor / ToImage, ToDtype, Normalize, colour ops, no crop) and a shorter-side
Resize (`Resize(800, max_size=1333)`), whose output size follows each image's aspect.

Such a pipeline has no batch shape, so the engine's batch call (one [B, C, H, W] output)
does not take it; each image runs the engine's kernels alone instead: decode in C++, then
`crop_resize_flip_normalize_batch` on that one image at its own output size (flips,
colour, dtype, normalise fused, as in a batch), both releasing the GIL. The plan is the
pipeline's fused plan with a 1x1 CenterCrop stand-in after the geometry: its draws (flip,
colour) are the engine's, keyed by (seed, epoch, index) alone, and `own_size` gives each
image's output size from `_contract.resized_layout` (torchvision's integers).
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import torch

from fastload import _contract as contract
from fastload.augment import autoaugment, color, specs
from fastload.augment.plan import Fusion, fuse
from fastload.errors import UnsupportedPipeline

# Geometry with one output size for all: those run as engine batches.
_FIXED = (specs.RandomResizedCrop, specs.CenterCrop, specs.RandomCrop)


class OwnSizeFusion(Fusion):
    """A Fusion whose output is each image's own size (own_size_fusion's)."""

    __slots__ = ()


def own_size_fusion(ops: Sequence[Any], **options: Any) -> OwnSizeFusion:
    """The fusion of `ops` (specs) whose output is each image's own size (no geometry, or
    one shorter-side Resize), with a 1x1 CenterCrop stand-in for the plan's out_size.
    Takes fuse()'s options.

    Raises:
        UnsupportedPipeline: a fixed output size (that is a batch), several resizes, or an
            op whose draws need one output size (RandomErasing, GaussianBlur, the
            auto-augment policies).

    Example:
        >>> from fastload.augment import specs
        >>> own_size_fusion([specs.Resize(8, max_size=12), specs.RandomHorizontalFlip()]).description
        'Resize -> RandomHorizontalFlip (each image its own size)'
    """
    ops = list(ops)
    geometry = [k for k, op in enumerate(ops) if isinstance(op, (specs.Resize,) + _FIXED)]
    fixed = [ops[k] for k in geometry if isinstance(ops[k], _FIXED) or not isinstance(ops[k].size, int)]
    if fixed:
        raise UnsupportedPipeline(f"{fixed[0]} gives one output size: the pipeline runs as engine batches")
    if len(geometry) > 1:
        raise UnsupportedPipeline("two resizes do not fuse into one (each image its own size)")
    for op in ops:
        if isinstance(op, (specs.GaussianBlur, color.RandomErasing) + autoaugment.SPECS):
            raise UnsupportedPipeline(f"{op} on images of their own sizes has no native equivalent (the engine "
                                      "draws it for one output size); add a crop or Resize((height, width))")
    position = geometry[0] + 1 if geometry else 0
    fusion = fuse(ops[:position] + [specs.CenterCrop(1)] + ops[position:], **options)
    names = " -> ".join(type(op).__name__ for op in ops) or "no transform"
    return OwnSizeFusion(fusion.fields, f"{names} (each image its own size)", fusion.dtype)


def own_size(plan: Any, height: int, width: int) -> Tuple[int, int]:
    """(height, width) of the output of an image of this size under an own-size plan:
    torchvision's shorter-side resize with max_size, or the image's own size.

    Raises:
        ValueError: the engine's, for a resize to fewer than 1x1 pixels (a thin image
            capped by max_size).
    """
    out_height, out_width, _, _ = contract.resized_layout(plan, int(height), int(width))
    return int(out_height), int(out_width)


def apply_own_size(plan: Any, image: torch.Tensor, epoch: int, index: int, *, out: Any = None,
                   full_size: Any = None, scale_denom: int = 1) -> torch.Tensor:
    """Runs an own-size plan on one decoded uint8 [H, W, C] image with the engine's kernel
    and draws; returns [C, h, w] of the plan's dtype (`out`: a [1, C, h, w] tensor to
    write, e.g. from a batch's buffer). An image decoded at 1/scale_denom (a JPEG's DCT
    scaling) gives its `full_size` (height, width): the geometry and draws are the full
    image's, the kernel reads the scaled pixels.

    Example:
        >>> import torch
        >>> from fastload.augment import specs
        >>> from fastload.augment.plan import make_plan
        >>> plan = make_plan(own_size_fusion([specs.Resize(4, max_size=6)]))
        >>> apply_own_size(plan, torch.zeros(10, 20, 3, dtype=torch.uint8), 0, 0).shape
        torch.Size([3, 3, 6])
    """
    from fastload._ops import crop_resize_flip_normalize_batch

    rows, cols, channels = (int(v) for v in image.shape)
    height, width = (rows, cols) if full_size is None else (int(v) for v in full_size)
    out_height, out_width = own_size(plan, height, width)
    if out is None:
        out = torch.empty((1, channels, out_height, out_width), dtype=plan.dtype)
    _, _, flip, flip_v = contract.region_of(plan, height, width, int(epoch), int(index))
    samples = torch.tensor([int(index)], dtype=torch.int64)
    records = contract.color_passes(plan, samples, int(epoch)) if plan.has_color() else None
    image = image.contiguous()
    crop_resize_flip_normalize_batch(
        image.reshape(-1), torch.tensor([[0, rows, cols, cols * channels]], dtype=torch.int64),
        torch.tensor([[0.0, 0.0, height / scale_denom, width / scale_denom]]),
        torch.tensor([[bool(flip), bool(flip_v)]]),
        plan.value_scale, torch.tensor(list(plan.mean), dtype=torch.float32),
        torch.tensor(list(plan.std), dtype=torch.float32), out, interpolation=contract.interpolation_of(plan),
        color=records)
    return out[0]
