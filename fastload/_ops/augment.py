"""The augment stage's operators: the fused crop / resize / flip / normalise (one image, a
batch), the colour ops, the blur, TrivialAugmentWide / RandAugment / AutoAugment, AugMix,
and the engine's random draws of each (from (seed, epoch, index)).

Shapes and dtypes are in each docstring; fastload._ops (the package) gathers these names.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from fastload import _ext
from fastload._ops.native import native


def interpolation_code(interpolation, op: str = "crop_resize_flip_normalize") -> int:
    """The ops' int code of "bilinear" | "bicubic" | "nearest" (or a
    fastload._C.Interpolation value): the value of fastload._C.Interpolation. Raises
    ValueError naming the valid names."""
    name = getattr(interpolation, "name", interpolation)  # _C.Interpolation.BICUBIC -> "BICUBIC"
    codes = _ext.require_ops().Interpolation.__members__
    if isinstance(name, str) and name.upper() in codes:
        return int(codes[name.upper()])
    names = [repr(n.lower()) for n in codes]
    raise ValueError(f"fastload.{op}: expected interpolation {', '.join(names[:-1])} or {names[-1]}, got "
                     f"{interpolation!r}.")


def crop_resize_flip_normalize(
    image: torch.Tensor,
    box: Sequence[float],
    size: Sequence[int],
    flip: bool = False,
    scale: float = 1.0 / 255.0,
    mean: Sequence[float] = (0.0, 0.0, 0.0),
    std: Sequence[float] = (1.0, 1.0, 1.0),
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    *,
    flip_v: bool = False,
    interpolation: str = "bilinear",
) -> torch.Tensor:
    """Fused crop -> antialiased resize -> flips -> normalise -> cast, one image.

    The resample is Pillow's ``resize(size, filter, box=...)`` over a float box: BILINEAR
    with antialias (torch's ``interpolate(mode="bilinear", antialias=True)``), BICUBIC
    (antialiased, clipped to [0, 255]) or NEAREST; or BILINEAR_NO_ANTIALIAS, plain
    bilinear interpolation (torch's ``antialias=False``, OpenCV's ``INTER_LINEAR``, which
    albumentations resizes with). Output pixel (y, x) is centred at
    ``top + (y + 0.5) * height / out_height`` (same for x); taps clamp to the image, not
    the box (like PIL's ``resize(box=...)``). Semantics and design:
    csrc/augment/README.md; plain-PyTorch twin: ``fastload.reference``.

    Args:
        image: uint8 [H, W, C] (C = 1 or 3), packed pixels, any row stride (a crop view
            of a bigger image is fine), CPU or CUDA.
        box: [top, left, height, width] floats in image pixels (height, width > 0);
            output pixels whose centre falls outside the image are 0 (padding), then
            normalised.
        size: [out_height, out_width].
        flip: mirror the output horizontally.
        scale, mean, std: value = (v * scale - mean[c]) / std[c] with v the resampled
            value in [0, 255] (not rounded); mean, std: C values each.
        dtype: uint8 (round half away from zero, saturate), float32, float16 or bfloat16
            (round to nearest even).
        channels_last: HWC memory (strides (1, W*C, C)) for the [C, H, W] result.
        flip_v: mirror the output vertically.
        interpolation: "bilinear", "bicubic", "nearest" (Pillow's filters) or
            "bilinear_no_antialias" (plain bilinear).

    Returns:
        [C, out_height, out_width] tensor of `dtype`, on the image's device.

    Raises:
        ValueError: "fastload.crop_resize_flip_normalize: expected ..., got ...": wrong
            dtype, channels or strides, an empty or non-finite box, mean/std lengths, an
            unknown interpolation.

    Example:
        >>> import torch
        >>> image = torch.arange(48, dtype=torch.uint8).reshape(4, 4, 3)
        >>> crop_resize_flip_normalize(image, [0, 0, 4, 4], [2, 2], scale=1.0)[0]
        tensor([[10.7143, 15.4286],
                [29.5714, 34.2857]])
        >>> # Centred on pixel (1, 1), symmetric taps: that pixel's RGB.
        >>> crop_resize_flip_normalize(image, [0.5, 0.5, 2, 2], [1, 1], flip=True, scale=1.0,
        ...                            dtype=torch.uint8).flatten().tolist()
        [15, 16, 17]
        >>> # NEAREST picks pixel (int)(top + (y + 0.5) * 4 / 2): rows 1 and 3.
        >>> crop_resize_flip_normalize(image, [0, 0, 4, 4], [2, 2], scale=1.0, dtype=torch.uint8,
        ...                            flip_v=True, interpolation="nearest")[0].tolist()
        [[39, 45], [15, 21]]
    """
    return native().crop_resize_flip_normalize(
        image, [float(v) for v in box], list(size), flip, scale, list(mean), list(std), dtype, channels_last,
        bool(flip_v), interpolation_code(interpolation)
    )


def crop_resize_flip_normalize_batch(
    images: torch.Tensor,
    shapes: torch.Tensor,
    boxes: torch.Tensor,
    flips: torch.Tensor,
    scale: float,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    *,
    interpolation: str = "bilinear",
    color: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Batched, in-place crop_resize_flip_normalize (CPU or CUDA, by the inputs' device).

    CPU: every sample is validated before anything is written, then the samples run on
    torch's intra-op threads. CUDA: one kernel launch for the whole batch on the current
    stream, no sync; the contents of `shapes` and `boxes` are checked in the kernel (a
    device-side assert, like torch's index checks).

    Args:
        images: packed uint8 1-D contiguous tensor holding N HWC images.
        shapes: int64 [N, 4]: (offset, height, width, row_stride) of each image in
            `images` (offset and row_stride in bytes; row_stride >= width * C).
        boxes: float32 [N, 4]: (top, left, height, width) in each image's pixels.
        flips: bool [N] (left-right), or [N, 2] (left-right, top-bottom).
        scale: value = (v * scale - mean[c]) / std[c], v in [0, 255].
        mean, std: float32 [C].
        out: [N, C, H, W] of uint8/float32/float16/bfloat16, any strides (channels_last,
            a slice of a bigger batch...); C (1 or 3) is the images' channel count.
        interpolation: as in crop_resize_flip_normalize, for every sample.
        color: uint8 [N, K] colour records on out's device, one per sample
            (`fastload._C.color_passes(plan, samples, epoch)`: the plan's ColorJitter,
            grayscale and erasing as the engine draws them), or None. With them, the
            resampled value is rounded to uint8, jittered and greyed (torchvision's PIL
            stage), mapped, then erased (after the value map, as torchvision's
            RandomErasing on the normalised tensor).

    Returns:
        out, with out[i] == crop_resize_flip_normalize(image_i, boxes[i], [H, W],
        flips[i, 0], scale, mean, std, out.dtype, flip_v=flips[i, 1],
        interpolation=interpolation) (flips[i] and False for [N] flips).

    Example:
        >>> import torch
        >>> a = torch.full((4, 6, 3), 10, dtype=torch.uint8)
        >>> b = torch.full((3, 5, 3), 200, dtype=torch.uint8)
        >>> images = torch.cat([a.flatten(), b.flatten()])
        >>> shapes = torch.tensor([[0, 4, 6, 18], [72, 3, 5, 15]])
        >>> boxes = torch.tensor([[0.0, 0.0, 4.0, 6.0], [0.5, 0.5, 2.0, 4.0]])
        >>> out = torch.empty(2, 3, 2, 2)
        >>> _ = crop_resize_flip_normalize_batch(images, shapes, boxes, torch.tensor([False, True]),
        ...                                      1.0, torch.zeros(3), torch.ones(3), out)
        >>> [round(v, 4) for v in out[:, 0, 0, 0].tolist()]
        [10.0, 200.0]
    """
    native().crop_resize_flip_normalize_batch(images, shapes, boxes, flips, scale, mean, std, out,
                                            interpolation_code(interpolation, "crop_resize_flip_normalize_batch"),
                                            color)
    return out


# ---- colour -------------------------------------------------------------------------
# image: HWC [H, W, 1 or 3]: uint8 follows torchvision's PIL path (ImageEnhance blends,
# uint8 after each step), float32 in [0, 1] its tensor path. See fastload/augment/color.py.


def adjust_brightness(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_brightness on an HWC image; returns a new HWC image."""
    return native().adjust_brightness(image, factor)


def adjust_contrast(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_contrast (blend with the mean grey level) on an HWC image."""
    return native().adjust_contrast(image, factor)


def adjust_saturation(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_saturation (blend with the grey image) on an HWC image."""
    return native().adjust_saturation(image, factor)


def adjust_hue(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_hue (factor in [-0.5, 0.5]) on an HWC RGB image."""
    return native().adjust_hue(image, factor)


def color_jitter(image: torch.Tensor, order: Sequence[int], factors: Sequence[float]) -> torch.Tensor:
    """ColorJitter with drawn parameters: `order` the 4 op ids (0 brightness, 1 contrast,
    2 saturation, 3 hue) in application order, `factors[op]` (NaN: the op is off).

    Example:
        >>> import math, torch
        >>> image = torch.full((2, 3, 3), 100, dtype=torch.uint8)
        >>> color_jitter(image, [0, 1, 2, 3], [1.5, math.nan, math.nan, math.nan])[0, 0].tolist()
        [150, 150, 150]
    """
    return native().color_jitter(image, list(order), [float(f) for f in factors])


def rgb_to_grayscale(image: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
    """torchvision's Grayscale (PIL's convert("L") on uint8): [H, W, num_output_channels]."""
    return native().rgb_to_grayscale(image, num_output_channels)


def erase(image: torch.Tensor, box: Sequence[int], value: Sequence[float], seed: int, epoch: int,
          index: int) -> torch.Tensor:
    """RandomErasing's erase on a float32 HWC image: box (top, left, height, width) set to
    `value` (one per channel, or one for all; [] = standard normals drawn from (seed,
    epoch, index))."""
    return native().erase(image, list(box), [float(v) for v in value], seed, epoch, index)


def gaussian_blur(image: torch.Tensor, kernel_size: Sequence[int], sigma: float) -> torch.Tensor:
    """torchvision's GaussianBlur of a PIL image (float32 kernel, reflect padding, rounded
    to uint8), on a uint8 HWC image [H, W, 1 or 3]; the engine's uint8-stage blur.

    Example:
        >>> import torch
        >>> flat = torch.full((5, 5, 1), 9, dtype=torch.uint8)
        >>> torch.equal(gaussian_blur(flat, [3, 3], 1.0), flat)
        True
    """
    return native().gaussian_blur(image, [int(k) for k in kernel_size], float(sigma))


def gaussian_blur_params(indices: torch.Tensor, seed: int, epoch: int, sigma_min: float,
                         sigma_max: float, p: float = 1.0) -> torch.Tensor:
    """The sigma GaussianBlur draws for each sample (uniform in [sigma_min, sigma_max], as
    torchvision's get_params), as the engine draws it: float32 [N]. p < 1 is
    RandomApply([GaussianBlur], p): NaN for the samples it leaves unblurred.

    Example:
        >>> import torch
        >>> from fastload import _ops as ops
        >>> sigmas = ops.gaussian_blur_params(torch.arange(1000), 0, 0, 0.1, 2.0, p=0.5)
        >>> bool(((sigmas >= 0.1) & (sigmas <= 2.0) | sigmas.isnan()).all()), 400 < int(sigmas.isnan().sum()) < 600
        (True, True)
    """
    return native().gaussian_blur_params(indices, seed, epoch, float(sigma_min), float(sigma_max), float(p))


def auto_augment(image: torch.Tensor, ops: Sequence[int], magnitudes: Sequence[float],
                 fill: Sequence[int] = (), bilinear: bool = False) -> torch.Tensor:
    """TrivialAugmentWide / RandAugment ops with given magnitudes, in order, on a uint8 HWC
    image [H, W, 1 or 3]: torchvision's _apply_op on a PIL image, bit for bit (op ids:
    fastload.augment.autoaugment.OPS; fill: the affine ops' fill, [] = 0; bilinear:
    their interpolation BILINEAR, else NEAREST).

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import OPS
        >>> image = torch.arange(12, dtype=torch.uint8).view(2, 2, 3)
        >>> auto_augment(image, [OPS.index("Invert")], [0.0])[0, 0].tolist()
        [255, 254, 253]
    """
    return native().auto_augment(image, [int(op) for op in ops], [float(m) for m in magnitudes],
                               [int(f) for f in fill], bool(bilinear))


def auto_augment_params(indices: torch.Tensor, seed: int, epoch: int, space_ops: Sequence[int],
                        magnitudes: Sequence[float], num_ops: int = 1, magnitude_bin: int = -1,
                        policy_ops: Sequence[int] = (), policy_probs: Sequence[float] = (),
                        policy_bins: Sequence[int] = ()) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ops TrivialAugmentWide (magnitude_bin -1: a bin drawn per op) or RandAugment
    (num_ops ops at bin magnitude_bin) draw per sample, as the engine draws them: (op ids
    int64 [N, num_ops], signed magnitudes float64 [N, num_ops]). space_ops and magnitudes
    [ops x bins]: the augmentation space (a spec's space()). With policy_ops, policy_probs
    and policy_bins (AutoAugment's sub-policies, [policies x 2] each: indices into
    space_ops, probabilities, bins or -1 for None; AutoAugment.policy_fields()) the draws
    are AutoAugment's: [N, 2] by the sub-policy's slots, op -1 (magnitude 0) where that op
    was not applied; num_ops and magnitude_bin are then unused.

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import AutoAugment, RandAugment
        >>> ops, magnitudes = RandAugment().params(torch.arange(4), 0, 0, 224, 224)
        >>> ops.shape, magnitudes.dtype
        (torch.Size([4, 2]), torch.float64)
        >>> AutoAugment("cifar10").params(torch.arange(4), 0, 0, 32, 32)[0].shape
        torch.Size([4, 2])
    """
    return tuple(native().auto_augment_params(indices, seed, epoch, [int(op) for op in space_ops],
                                            [float(m) for m in magnitudes], int(num_ops), int(magnitude_bin),
                                            [int(op) for op in policy_ops], [float(p) for p in policy_probs],
                                            [int(b) for b in policy_bins]))


def augmix_step(image: torch.Tensor, op: int, magnitude: float, bilinear: bool = True) -> torch.Tensor:
    """One AugMix op (torchvision's tensor path: what AugMix runs on its uint8 tensor) with
    its magnitude on a uint8 HWC image [H, W, 1 or 3]; bilinear: the affine ops'
    grid_sample mode (else nearest).

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import OPS
        >>> image = torch.full((4, 4, 3), 100, dtype=torch.uint8)
        >>> augmix_step(image, OPS.index("Brightness"), 0.5)[0, 0].tolist()
        [150, 150, 150]
    """
    return native().augmix_step(image, int(op), float(magnitude), bool(bilinear))


def augmix_params(indices: torch.Tensor, seed: int, epoch: int, space_ops: Sequence[int],
                  magnitudes: Sequence[float], severity: int = 3, width: int = 3, chain_depth: int = -1,
                  alpha: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """AugMix's draws per sample, as the engine draws them: (weights float32 [N, 1 + width],
    depths int64 [N, width], op ids int64 [N, width, 4] (-1 past the depth), signed
    magnitudes float64 [N, width, 4]). See fastload.augment.autoaugment.AugMix.params.

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import AugMix
        >>> weights, depths, ops, magnitudes = AugMix().params(torch.arange(3), 0, 0, 32, 32)
        >>> weights.shape, bool(torch.allclose(weights.sum(1), torch.ones(3)))
        (torch.Size([3, 4]), True)
    """
    return tuple(native().augmix_params(indices, seed, epoch, [int(op) for op in space_ops],
                                      [float(m) for m in magnitudes], int(severity), int(width), int(chain_depth),
                                      float(alpha)))


def color_jitter_params(indices: torch.Tensor, seed: int, epoch: int, ranges: Sequence[float],
                        p: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per sample (order int64 [N, 4], factors float32 [N, 4]) of ColorJitter, a pure
    function of (seed, epoch, index); ranges: (min, max) per op, a NaN pair where off.
    p: the probability that the jitter runs at all (RandomApply([ColorJitter], p)); a
    sample it skips has every factor NaN."""
    return tuple(native().color_jitter_params(indices, seed, epoch, [float(r) for r in ranges], float(p)))


def random_grayscale_params(indices: torch.Tensor, seed: int, epoch: int, p: float) -> torch.Tensor:
    """bool [N]: which samples RandomGrayscale(p) turns grey, from (seed, epoch, index)."""
    return native().random_grayscale_params(indices, seed, epoch, p)


def random_erasing_params(indices: torch.Tensor, seed: int, epoch: int, height: int, width: int, p: float,
                          scale: Sequence[float], ratio: Sequence[float]) -> torch.Tensor:
    """int64 [N, 4] RandomErasing boxes (top, left, height, width) on height x width
    images, torchvision's sampler from (seed, epoch, index); all zero: nothing erased."""
    return native().random_erasing_params(indices, seed, epoch, height, width, p, list(scale), list(ratio))
