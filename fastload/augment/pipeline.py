"""Applies transform specs to one decoded image in plain PyTorch (fastload.reference),
with exactly the random parameters the C++ engine draws: the generic path's twin of the
native pipeline."""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import torch

from fastload import _ext
from fastload.augment.plan import Plan, build_plan


@functools.lru_cache(maxsize=64)
def _cached_plan(ops: tuple, channels: int, seed: int) -> Plan:
    return build_plan(ops, channels=channels, seed=seed)


def region(plan: Plan, height: int, width: int, epoch: int, index: int):
    """(box, clamp, flip) of one sample in full-resolution pixels, from the C++ engine's
    own geometry code (csrc/engine/plan.cpp), so both paths agree to the bit."""
    return _ext.require_ops().plan_region(plan.config(), height, width, epoch, index)


def apply_plan_reference(plan: Plan, image: torch.Tensor, *, epoch: int, index: int) -> torch.Tensor:
    """Runs a plan on uint8 [H, W, C] with fastload.reference; returns [C, h, w]."""
    from fastload import reference

    height, width = image.shape[0], image.shape[1]
    box, clamp, flip = region(plan, height, width, epoch, index)
    top, left = max(0, math.floor(clamp[0])), max(0, math.floor(clamp[1]))
    bottom, right = min(height, math.ceil(clamp[0] + clamp[2])), min(width, math.ceil(clamp[1] + clamp[3]))
    view = image[top:bottom, left:right]
    relative = [box[0] - top, box[1] - left, box[2], box[3]]
    return reference.crop_resize_flip_normalize(
        view, relative, list(plan.out_size), flip, plan.value_scale, list(plan.mean), list(plan.std), plan.dtype, False
    )


def apply_ops_reference(ops: Sequence[Any], image: torch.Tensor, *, seed: int, epoch: int, index: int) -> torch.Tensor:
    """Applies specs to uint8 [H, W, C]; returns [C, h, w] like the native loader's slot."""
    plan = _cached_plan(tuple(ops), int(image.shape[2]), seed)
    return apply_plan_reference(plan, image, epoch=epoch, index=index)
