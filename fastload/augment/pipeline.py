"""Applies transform specs to one decoded image in plain PyTorch (fastload.reference),
with exactly the random parameters and views the C++ engine uses: the generic path's
twin of the native pipeline."""

from __future__ import annotations

import functools
from typing import Any, Sequence

import torch

from fastload import _ext
from fastload.augment.plan import Plan, build_plan
from fastload.native.contract import interpolation_of, region_of


@functools.lru_cache(maxsize=64)
def _cached_plan(ops: tuple, channels: int, seed: int) -> Plan:
    return build_plan(ops, channels=channels, seed=seed)


def apply_plan_reference(plan: Plan, image: torch.Tensor, *, epoch: int, index: int) -> torch.Tensor:
    """Runs a plan on uint8 [H, W, C] with fastload.reference; returns [C, h, w]."""
    from fastload import reference

    core = _ext.require_ops()
    height, width = image.shape[0], image.shape[1]
    # The engine's own geometry code (csrc/augment/geometry.cpp region_of), so both paths
    # agree to the bit.
    box, clamp, flip, flip_v = region_of(plan, height, width, epoch, index)
    # The view the engine's kernel would read, and the box relative to it: the engine's
    # own arithmetic (csrc/augment/geometry.cpp sampling_view).
    views, relative = core.sampling_views(torch.tensor([box]), torch.tensor([clamp]),
                                          torch.tensor([[height, width]]))
    top, left, view_height, view_width = views[0].tolist()
    view = image[top:top + view_height, left:left + view_width]
    return reference.crop_resize_flip_normalize(
        view, relative[0].tolist(), list(plan.out_size), flip, plan.value_scale, list(plan.mean), list(plan.std),
        plan.dtype, False, flip_v=flip_v, interpolation=interpolation_of(plan)
    )


def apply_ops_reference(ops: Sequence[Any], image: torch.Tensor, *, seed: int, epoch: int, index: int) -> torch.Tensor:
    """Applies specs to uint8 [H, W, C]; returns [C, h, w] like the native loader's slot."""
    plan = _cached_plan(tuple(ops), int(image.shape[2]), seed)
    return apply_plan_reference(plan, image, epoch=epoch, index=index)
