"""Applies transform specs to one decoded image in plain PyTorch (fastload.reference),
with exactly the random parameters and views the C++ engine uses: the generic path's
twin of the native pipeline."""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence, Tuple

import numpy as np
import torch

from fastload import _ext
from fastload.augment.plan import Plan, build_plan
from fastload._contract import interpolation_of, region_of


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
    relative_box = relative[0].tolist()
    if plan.padding_mode != core.PaddingMode.CONSTANT or len(plan.pad_fill):
        view, relative_box = _padded_window(plan, image, box)
    if not plan.has_color():
        return reference.crop_resize_flip_normalize(
            view, relative[0].tolist(), list(plan.out_size), flip, plan.value_scale, list(plan.mean),
            list(plan.std), plan.dtype, False, flip_v=flip_v, interpolation=interpolation_of(plan)
        )
    return _apply_color_reference(plan, view, relative_box, flip, flip_v, interpolation_of(plan), epoch, index)


def _padded_window(plan: Plan, image: torch.Tensor, box) -> Tuple[torch.Tensor, list]:
    """A padding RandomCrop's window of `image` padded as torchvision pads a PIL image
    (numpy.pad's modes; the fill per channel), and the box in it: (window, [0, 0, h, w])."""
    top, left, height, width = (int(round(v)) for v in box)
    pixels = image.numpy()
    pads = ((max(0, -top), max(0, top + height - pixels.shape[0])),
            (max(0, -left), max(0, left + width - pixels.shape[1])), (0, 0))
    mode = _ext.require_ops().PaddingMode(plan.padding_mode)  # (numpy.pad's names, but constant)
    if mode.name == "CONSTANT":
        fill = list(plan.pad_fill) or [0.0]
        padded = np.empty((pixels.shape[0] + sum(pads[0]), pixels.shape[1] + sum(pads[1]), pixels.shape[2]),
                          np.uint8)
        padded[:] = np.array(fill if len(fill) == pixels.shape[2] else fill[:1] * pixels.shape[2], np.uint8)
        padded[pads[0][0]:pads[0][0] + pixels.shape[0], pads[1][0]:pads[1][0] + pixels.shape[1]] = pixels
    else:
        padded = np.pad(pixels, pads, mode=mode.name.lower())
    top, left = top + pads[0][0], left + pads[1][0]
    window = torch.from_numpy(np.ascontiguousarray(padded[top:top + height, left:left + width]))
    return window, [0.0, 0.0, float(height), float(width)]


_PIL_PRECISION = 22


def _pil_axis(start: float, size: float, in_size: int, out_size: int, interpolation: str) -> np.ndarray:
    """Pillow's 8-bit resample coefficients of one axis (Resample.c precompute_coeffs and
    normalize_coeffs_8bpp) as an int64 [out_size, in_size] matrix; a centre outside the
    image gives a zero row (padding)."""
    scale = size / out_size
    filterscale = 1.0 if interpolation == "bilinear_no_antialias" else max(scale, 1.0)
    support = (2.0 if interpolation == "bicubic" else 1.0) * filterscale
    matrix = np.zeros((out_size, in_size), dtype=np.int64)
    for i in range(out_size):
        centre = start + (i + 0.5) * scale
        if not 0.0 <= centre < in_size:
            continue
        xmin = max(int(centre - support + 0.5), 0)
        xmax = min(int(centre + support + 0.5), in_size) - xmin
        x = (np.arange(xmax) + xmin - centre + 0.5) / filterscale
        ax = np.abs(x)
        if interpolation == "bicubic":
            a = -0.5
            w = np.where(ax < 1, ((a + 2) * ax - (a + 3)) * ax * ax + 1,
                         np.where(ax < 2, (((ax - 5) * ax + 8) * ax - 4) * a, 0.0))
        else:
            w = np.where(ax < 1, 1 - ax, 0.0)
        total = w.sum()
        w = w / total if total != 0 else w
        fixed = np.where(w < 0, -0.5 + w * (1 << _PIL_PRECISION), 0.5 + w * (1 << _PIL_PRECISION))
        matrix[i, xmin:xmin + xmax] = np.trunc(fixed).astype(np.int64)
    return matrix


def _pil_resample(view: torch.Tensor, box, out_height: int, out_width: int, interpolation: str, flip: bool,
                  flip_v: bool) -> torch.Tensor:
    """Pillow's uint8 resize of `box` of uint8 HWC `view` (fixed point, two passes into
    uint8 in Pillow 13's order), flipped: uint8 [out_height, out_width, C]."""
    top, left, height, width = (float(v) for v in box)
    rows = _pil_axis(top, height, view.shape[0], out_height, interpolation)
    cols = _pil_axis(left, width, view.shape[1], out_width, interpolation)
    half = 1 << (_PIL_PRECISION - 1)
    source = view.numpy().astype(np.int64)  # [H, W, C]

    def horizontal_pass(image):
        out = np.einsum("ow,hwc->hoc", cols, image)
        out = np.where(cols.any(axis=1)[None, :, None], out + half, 0)
        return np.clip(out >> _PIL_PRECISION, 0, 255)

    def vertical_pass(image):
        out = np.einsum("oh,hwc->owc", rows, image) + half
        return np.where(rows.any(axis=1)[:, None, None], np.clip(out >> _PIL_PRECISION, 0, 255), 0)

    # Pillow 13 resamples vertically first where the height shrinks by more than twice as
    # many pixels as the width (the box is the image torchvision's crop gives Pillow).
    if height > out_height and height - out_height > 2 * (width - out_width):
        vertical = horizontal_pass(vertical_pass(source))
    else:
        vertical = vertical_pass(horizontal_pass(source))
    vertical = np.where(cols.any(axis=1)[None, :, None], vertical, 0)
    out = torch.from_numpy(vertical.astype(np.uint8))
    if flip:
        out = out.flip(1)
    if flip_v:
        out = out.flip(0)
    return out


def _apply_color_reference(plan: Plan, view: torch.Tensor, box, flip, flip_v, interpolation: str, epoch: int,
                           index: int) -> torch.Tensor:
    """The colour plans' twin, in torchvision's order: the resize rounded to uint8 (the
    PIL image), ColorJitter and grayscale on it (color.py's PIL twins), the blur, the
    TrivialAugmentWide / RandAugment / AutoAugment ops (torchvision's on a PIL image) or AugMix
    (torchvision's tensor-path ops and mix), the value map,
    then RandomErasing on the result; parameters from the engine's samplers."""
    from fastload import _ops as fl_ops
    from fastload import reference
    from fastload.augment import autoaugment, color
    from fastload.augment.plan import jitter_nan_ranges

    channels = plan.channels
    if plan.quantizes():
        if interpolation == "nearest":  # Pillow's nearest is the float path's, exactly
            pixels = reference.crop_resize_flip_normalize(
                view, box, list(plan.out_size), flip, 1.0, [0.0] * channels, [1.0] * channels, torch.uint8, False,
                flip_v=flip_v, interpolation=interpolation).permute(1, 2, 0)
        else:
            pixels = _pil_resample(view, box, plan.out_height, plan.out_width, interpolation, flip, flip_v)
        indices = torch.tensor([index], dtype=torch.int64)
        if list(plan.jitter):
            order, factors = fl_ops.color_jitter_params(indices, plan.seed, epoch,
                                                        jitter_nan_ranges(plan.jitter), plan.jitter_p)
            pixels = color.color_jitter(pixels, order[0].tolist(), factors[0].tolist())
        if plan.grayscale_p > 0 and bool(fl_ops.random_grayscale_params(indices, plan.seed, epoch,
                                                                      plan.grayscale_p)[0]):
            pixels = color.pil_grayscale(pixels, channels)
        sigma = math.nan
        if plan.blur_kernel_x > 0:
            sigma = float(fl_ops.gaussian_blur_params(indices, plan.seed, epoch, plan.blur_sigma_min,
                                                      plan.blur_sigma_max, plan.blur_p)[0])
        if not math.isnan(sigma):  # NaN: no blur, or RandomApply skips it for this sample
            pixels = fl_ops.gaussian_blur(pixels.contiguous(), [plan.blur_kernel_x, plan.blur_kernel_y], sigma)
        if len(plan.augment_ops):  # torchvision's own ops on the PIL image, with the engine's draws
            ops, magnitudes = fl_ops.auto_augment_params(indices, plan.seed, epoch, list(plan.augment_ops),
                                                         list(plan.augment_magnitudes), plan.augment_num_ops,
                                                         plan.augment_magnitude_bin, list(plan.augment_policy_ops),
                                                         list(plan.augment_policy_probs),
                                                         list(plan.augment_policy_bins))
            pixels = autoaugment.apply_reference(pixels.contiguous(), ops[0].tolist(), magnitudes[0].tolist(),
                                                 list(plan.augment_fill),
                                                 "bilinear" if plan.augment_bilinear else "nearest")
        if len(plan.augmix_ops):  # torchvision's tensor-path ops and mix, with the engine's draws
            weights, _, ops, magnitudes = fl_ops.augmix_params(
                indices, plan.seed, epoch, list(plan.augmix_ops), list(plan.augmix_magnitudes), plan.augmix_severity,
                plan.augmix_width, plan.augmix_depth, plan.augmix_alpha)
            pixels = autoaugment.augmix_reference(pixels.contiguous(), weights[0].tolist(), ops[0].tolist(),
                                                  magnitudes[0].tolist(),
                                                  "bilinear" if plan.augmix_bilinear else "nearest")
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
    return reference.cast_values(values, plan.dtype)


def apply_ops_reference(ops: Sequence[Any], image: torch.Tensor, *, seed: int, epoch: int, index: int) -> torch.Tensor:
    """Applies specs to uint8 [H, W, C]; returns [C, h, w] like the native loader's slot."""
    plan = _cached_plan(tuple(ops), int(image.shape[2]), seed)
    return apply_plan_reference(plan, image, epoch=epoch, index=index)
