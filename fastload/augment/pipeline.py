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
    if not (list(plan.jitter) or plan.grayscale_p > 0 or plan.erase_p > 0):
        return reference.crop_resize_flip_normalize(
            view, relative[0].tolist(), list(plan.out_size), flip, plan.value_scale, list(plan.mean),
            list(plan.std), plan.dtype, False, flip_v=flip_v, interpolation=interpolation_of(plan)
        )
    return _apply_color_reference(plan, view, relative[0].tolist(), flip, flip_v, interpolation_of(plan), epoch,
                                  index)


def _apply_color_reference(plan: Plan, view: torch.Tensor, box, flip, flip_v, interpolation: str, epoch: int,
                           index: int) -> torch.Tensor:
    """The colour plans' twin, in torchvision's order: the resize rounded to uint8 (the
    PIL image), ColorJitter and grayscale on it (color.py's PIL twins), the value map,
    then RandomErasing on the result; parameters from the engine's samplers."""
    from fastload import ops as fl_ops
    from fastload import reference
    from fastload.augment import color
    from fastload.augment.plan import jitter_nan_ranges

    channels = plan.channels
    quantized = bool(list(plan.jitter)) or plan.grayscale_p > 0
    if quantized:
        # Pillow's resize: horizontal pass first, rounded to uint8, then the vertical one.
        top, left, height, width = (float(v) for v in box)
        rows = reference.axis_weights(top, height, view.shape[0], plan.out_height, interpolation)
        cols = reference.axis_weights(left, width, view.shape[1], plan.out_width, interpolation)
        source = view.permute(2, 0, 1).to(torch.float64)
        horizontal = torch.floor((source @ cols.T).clamp(0, 255) + 0.5)
        values = (rows @ horizontal).clamp(0, 255)
        if flip:
            values = values.flip(-1)
        if flip_v:
            values = values.flip(-2)
        pixels = torch.floor(values + 0.5).to(torch.uint8).permute(1, 2, 0)  # HWC
        indices = torch.tensor([index], dtype=torch.int64)
        if list(plan.jitter):
            order, factors = fl_ops.color_jitter_params(indices, plan.seed, epoch,
                                                        jitter_nan_ranges(plan.jitter))
            pixels = color.color_jitter(pixels, order[0].tolist(), factors[0].tolist())
        if plan.grayscale_p > 0 and bool(fl_ops.random_grayscale_params(indices, plan.seed, epoch,
                                                                      plan.grayscale_p)[0]):
            pixels = color.pil_grayscale(pixels, channels)
        values = pixels.permute(2, 0, 1).to(torch.float64)
    else:
        identity = [0.0] * channels, [1.0] * channels
        values = reference.crop_resize_flip_normalize(view, box, list(plan.out_size), flip, 1.0, *identity,
                                                      torch.float32, False, flip_v=flip_v,
                                                      interpolation=interpolation).double()
    mean = torch.tensor(list(plan.mean), dtype=torch.float64).view(-1, 1, 1)
    std = torch.tensor(list(plan.std), dtype=torch.float64).view(-1, 1, 1)
    values = (values * float(torch.tensor(plan.value_scale, dtype=torch.float32)) - mean) / std
    if plan.erase_p > 0:
        box = fl_ops.random_erasing_params(torch.tensor([index]), plan.seed, epoch, plan.out_height,
                                           plan.out_width, plan.erase_p, [plan.erase_scale_min, plan.erase_scale_max],
                                           [plan.erase_ratio_min, plan.erase_ratio_max])[0].tolist()
        if plan.erase_random == 2:  # one normal per channel: those of elements 0 .. C-1
            fill = color.erase_normals(plan.seed, epoch, index, channels).tolist()
        else:
            fill = [] if plan.erase_random else list(plan.erase_value)
        values = color.erase(values.permute(1, 2, 0), box, fill, plan.seed, epoch, index).permute(2, 0, 1)
    return reference._cast(values, plan.dtype)


def apply_ops_reference(ops: Sequence[Any], image: torch.Tensor, *, seed: int, epoch: int, index: int) -> torch.Tensor:
    """Applies specs to uint8 [H, W, C]; returns [C, h, w] like the native loader's slot."""
    plan = _cached_plan(tuple(ops), int(image.shape[2]), seed)
    return apply_plan_reference(plan, image, epoch=epoch, index=index)
