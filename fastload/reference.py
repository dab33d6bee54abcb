"""Plain-PyTorch (and PIL) twins of the native ops, same signatures as fastload._ops.

What they are for: the ground truth of the kernel tests and benchmarks, and the pixel path
of the generic loader, which must give what the native path gives. Written to be
obviously right, not fast: the resample builds a dense weight matrix per axis and applies
it with two matrix products in float64.

Example:
    >>> import torch
    >>> from fastload import reference
    >>> image = torch.arange(12, dtype=torch.uint8).reshape(2, 2, 3)
    >>> reference.crop_resize_flip_normalize(image, [0, 0, 2, 2], [1, 1], scale=1.0)
    tensor([[[4.5000]],
    <BLANKLINE>
            [[5.5000]],
    <BLANKLINE>
            [[6.5000]]])
"""

from __future__ import annotations

import io
from typing import List, Optional, Sequence, Tuple

import torch

from fastload import _ext

__all__ = [
    "axis_weights",
    "crop_resize_flip_normalize",
    "crop_resize_flip_normalize_batch",
    "decode_jpeg",
    "decode_jpeg_cuda",
]

_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)


# ---- augment ------------------------------------------------------------------------------


def _cubic(x: torch.Tensor) -> torch.Tensor:
    """Pillow's bicubic filter (a = -0.5), in the dtype of x."""
    a = -0.5
    x = x.abs()
    inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    outer = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return torch.where(x < 1.0, inner, torch.where(x < 2.0, outer, torch.zeros((), dtype=x.dtype)))


def _nearest_weights(start: float, size: float, in_size: int, out_size: int) -> torch.Tensor:
    """Pillow's NEAREST resize of one axis: x_0 = start + step / 2, x_{i+1} = x_i + step
    (step = size / out_size, float64, accumulated as Pillow does); row i picks pixel
    int(x_i), or is all zero where x_i lies outside [0, in_size)."""
    start = float(torch.tensor(start, dtype=torch.float32))  # the kernel's float box
    step = float(torch.tensor(size, dtype=torch.float32)) / out_size
    weights = torch.zeros(out_size, in_size, dtype=torch.float64)
    x = start + step * 0.5
    for i in range(out_size):
        if 0.0 <= x < in_size:
            weights[i, int(x)] = 1.0
        x += step
    return weights


def axis_weights(start: float, size: float, in_size: int, out_size: int,
                 interpolation: str = "bilinear") -> torch.Tensor:
    """The resample of one axis as a float64 matrix [out_size, in_size].

    Pillow's resample of `interpolation` ("bilinear" | "bicubic" | "nearest") with
    antialias over the box [start, start + size) (bilinear == torch interpolate(mode=
    "bilinear", antialias=True, align_corners=False)), or "bilinear_no_antialias" (torch's
    antialias=False, OpenCV's INTER_LINEAR: filterscale 1): output i is centred at start +
    (i + 0.5) * size / out_size; filterscale = max(scale, 1); support = filterscale
    (bilinear) or 2 * filterscale (bicubic); taps from int(centre - support + 0.5) to
    int(centre + support + 0.5), clamped to the image [0, in_size); the filter (triangle,
    or cubic with a = -0.5) at (j + 0.5 - centre) / filterscale, normalised to sum 1. A
    row whose centre is outside [0, in_size) is all zero (padding). Nearest: see
    _nearest_weights.

    The arithmetic follows csrc/augment/crop_resize_flip_normalize.h step for step in
    float32 (the kernel's precision), so the padding decisions and tap ranges match the
    kernel exactly; only the weights' rounding differs.
    """
    if interpolation == "nearest":
        return _nearest_weights(start, size, in_size, out_size)
    if interpolation not in ("bilinear", "bicubic", "bilinear_no_antialias"):
        raise ValueError(f"fastload.reference.axis_weights: expected interpolation 'bilinear', 'bicubic', "
                         f"'nearest' or 'bilinear_no_antialias', got {interpolation!r}.")
    f32 = torch.float32
    scale = torch.tensor(size, dtype=f32) / out_size
    antialias = interpolation != "bilinear_no_antialias"
    filter_scale = torch.clamp(scale, min=1.0) if antialias else torch.ones((), dtype=f32)
    support = filter_scale * (2.0 if interpolation == "bicubic" else 1.0)
    inv_filter_scale = 1.0 / filter_scale
    i = torch.arange(out_size, dtype=torch.float64)
    # start + (i + 0.5) * scale is exact in float64; one rounding to float32, as fmaf.
    centre = (torch.tensor(start, dtype=f32).double() + (i + 0.5) * scale.double()).to(f32)
    # Compared and clamped in float64: float32(in_size) rounds (up, too) above 2^24.
    inside = (centre.double() >= 0) & (centre.double() < in_size)
    # Pillow's (int) truncates toward zero; clamping to the image first is the same.
    low = (centre - support + 0.5).double().clamp(min=0).trunc()
    high = (centre + support + 0.5).double().clamp(max=float(in_size)).trunc()
    j = torch.arange(in_size, dtype=f32)
    x = (j[None, :] + 0.5 - centre[:, None]) * inv_filter_scale
    weights = _cubic(x) if interpolation == "bicubic" else (1.0 - x.abs()).clamp(min=0)
    index = torch.arange(in_size, dtype=torch.float64)
    taps = (index[None, :] >= low[:, None]) & (index[None, :] < high[:, None]) & inside[:, None]
    weights = torch.where(taps, weights, torch.zeros((), dtype=f32)).double()
    total = weights.sum(dim=1, keepdim=True)
    safe = torch.where(total != 0, total, torch.ones((), dtype=torch.float64))
    return torch.where(total != 0, weights / safe, torch.zeros((), dtype=torch.float64))


def cast_values(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 -> dtype: uint8 rounds half away from zero and saturates; floats round to
    nearest even (torch's .to)."""
    if dtype == torch.uint8:
        rounded = torch.where(values >= 0, torch.floor(values + 0.5), torch.ceil(values - 0.5))
        return rounded.clamp(0, 255).to(torch.uint8)
    return values.to(torch.float32).to(dtype) if dtype != torch.float32 else values.to(torch.float32)


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
    """Twin of fastload.ops.crop_resize_flip_normalize.

    Args:
        image: uint8 [H, W, C] (C = 1 or 3), any strides.
        box: [top, left, height, width] floats in image pixels.
        size: [out_height, out_width].
        flip: mirror the output horizontally.
        scale, mean, std: value = (v * scale - mean[c]) / std[c], v in [0, 255].
        dtype: uint8, float32, float16 or bfloat16.
        channels_last: HWC memory for the [C, H, W] result.
        flip_v: mirror the output vertically.
        interpolation: "bilinear", "bicubic", "nearest" or "bilinear_no_antialias"
            (axis_weights). Bicubic clips
            like Pillow: the horizontal pass to [0, 255], then the vertical one.

    Returns:
        [C, out_height, out_width] of `dtype`, on the image's device.
    """
    if image.dtype != torch.uint8 or image.dim() != 3 or image.shape[2] not in (1, 3):
        raise ValueError(
            f"fastload.crop_resize_flip_normalize: expected a uint8 [H, W, C] image with C in (1, 3), "
            f"got {image.dtype} of shape {tuple(image.shape)}."
        )
    if dtype not in _DTYPES:
        raise ValueError(f"fastload.crop_resize_flip_normalize: expected dtype in {_DTYPES}, got {dtype}.")
    height, width, channels = image.shape
    top, left, box_height, box_width = (float(v) for v in box)
    out_height, out_width = int(size[0]), int(size[1])
    name = getattr(interpolation, "name", interpolation)
    name = name.lower() if isinstance(name, str) else name
    rows = axis_weights(top, box_height, height, out_height, name)  # [OH, H]
    cols = axis_weights(left, box_width, width, out_width, name)  # [OW, W]
    pixels = image.detach().cpu().permute(2, 0, 1).to(torch.float64)  # [C, H, W]
    if name == "bicubic":  # negative lobes: Pillow clips each pass
        values = (rows @ (pixels @ cols.T).clamp(0, 255)).clamp(0, 255)
    else:
        values = rows @ pixels @ cols.T  # [C, OH, OW], v in [0, 255]
    if flip:
        values = values.flip(-1)
    if flip_v:
        values = values.flip(-2)
    mean_t = torch.tensor([float(m) for m in mean], dtype=torch.float64).view(-1, 1, 1)
    std_t = torch.tensor([float(s) for s in std], dtype=torch.float64).view(-1, 1, 1)
    if mean_t.numel() != channels or std_t.numel() != channels:
        raise ValueError(
            f"fastload.crop_resize_flip_normalize: expected mean and std with {channels} values, "
            f"got {mean_t.numel()} and {std_t.numel()}."
        )
    out = cast_values((values * float(scale) - mean_t) / std_t, dtype)
    if channels_last:
        out = out.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    return out.to(image.device)


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
) -> torch.Tensor:
    """Twin of fastload.ops.crop_resize_flip_normalize_batch: writes out[i] for each
    sample i of the packed images (shapes[i] = offset, height, width, row_stride);
    flips bool [N] (left-right) or [N, 2] (left-right, top-bottom)."""
    channels = out.shape[1]
    packed = images.detach().cpu()
    flips = flips.cpu()
    flips = flips[:, None] if flips.dim() == 1 else flips
    for i, (offset, height, width, row_stride) in enumerate(shapes.tolist()):
        image = packed.as_strided((height, width, channels), (row_stride, channels, 1), offset)
        out[i].copy_(
            crop_resize_flip_normalize(
                image, boxes[i].tolist(), list(out.shape[2:]), bool(flips[i, 0]), scale,
                mean.tolist(), std.tolist(), out.dtype,
                flip_v=flips.shape[1] == 2 and bool(flips[i, 1]), interpolation=interpolation,
            )
        )
    return out


# ---- decode (PIL) ---------------------------------------------------------------------------

def _open(data: torch.Tensor):
    from PIL import Image

    image = Image.open(io.BytesIO(data.numpy().tobytes()))
    if image.format != "JPEG":
        raise RuntimeError(f"fastload.decode_jpeg: expected a JPEG, got {image.format} data.")
    return image


def decode_jpeg(
    data: torch.Tensor,
    window: Optional[Sequence[int]] = None,
    scale_denom: int = 1,
    channels: int = 3,
    max_pixels: Optional[int] = None,
) -> torch.Tensor:
    """Twin of fastload.ops.decode_jpeg with PIL: draft() for the DCT scale, convert() to
    RGB or L, then the window rows floor(top / d) .. ceil((top + height) / d)."""
    import numpy as np

    if channels not in (1, 3) or scale_denom not in (1, 2, 4, 8):
        raise ValueError(f"fastload.decode_jpeg: expected channels 1 or 3 and scale_denom 1/2/4/8, "
                         f"got {channels} and {scale_denom}.")
    image = _open(data)
    full_height, full_width = image.height, image.width
    if max_pixels is None:
        max_pixels = _ext.require_ops().DEFAULT_MAX_PIXELS
    if max_pixels > 0 and full_height * full_width > max_pixels:
        raise RuntimeError(f"fastload.decode_jpeg: expected at most {max_pixels} pixels, got "
                           f"{full_width}x{full_height}.")
    mode = "RGB" if channels == 3 else "L"
    if scale_denom > 1:
        image.draft(mode if image.mode != "CMYK" else None,
                    (-(-full_width // scale_denom), -(-full_height // scale_denom)))
    if channels == 1 and image.mode == "CMYK":
        image = image.convert("RGB")
    pixels = torch.from_numpy(np.array(image.convert(mode))).reshape(image.height, image.width, channels)
    if window:
        top, left, height, width = (int(v) for v in window)
        d = scale_denom
        pixels = pixels[top // d: -(-(top + height) // d), left // d: -(-(left + width) // d)]
    return pixels.contiguous()


def decode_jpeg_cuda(
    datas: Sequence[torch.Tensor], channels: int = 3, device="cuda", max_pixels: Optional[int] = None
) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Twin of fastload.ops.decode_jpeg_cuda: decode_jpeg on the CPU (the same limits),
    then moved to `device`; every sample is reported as CPU-decoded (cpu_fallback all True)."""
    images = [decode_jpeg(data, channels=channels, max_pixels=max_pixels).to(device) for data in datas]
    return images, torch.ones(len(images), dtype=torch.bool)
