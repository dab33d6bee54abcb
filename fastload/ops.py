"""Typed wrappers of the native operators (torch.ops.fastload.*).

This module is the only caller of torch.ops.fastload; the ops' shapes and dtypes are in
the docstrings, and their fake kernels in fastload/_meta.py. Each op has a plain-PyTorch
twin in fastload/reference.py.

The transform specs (RandomResizedCrop, ...) that fastload datasets take as `ops=[...]`
are re-exported here too, so `from fastload import ops` gives both.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from fastload import _ext

# Pillow's Image.MAX_IMAGE_PIXELS: the default decompression-bomb limit.
DEFAULT_MAX_PIXELS = 178956970


def _ops():
    _ext.require_ops()
    return torch.ops.fastload


def jpeg_header(data: torch.Tensor) -> List[int]:
    """Reads a JPEG header without decoding.

    Args:
        data: uint8 1-D CPU tensor with the file's bytes.

    Returns:
        [height, width, components, jpeg_color_space, progressive].

    Example:
        >>> import io, PIL.Image, torch
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (5, 3)).save(buf, "JPEG")
        >>> jpeg_header(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))[:3]
        [3, 5, 3]
    """
    return list(_ops().jpeg_header(data))


def decode_jpeg(
    data: torch.Tensor,
    window: Optional[Sequence[int]] = None,
    scale_denom: int = 1,
    channels: int = 3,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> torch.Tensor:
    """Decodes a JPEG (or a window of it, DCT-scaled) with libjpeg-turbo.

    Args:
        data: uint8 1-D CPU tensor with the file's bytes.
        window: [top, left, height, width] in full-resolution pixels; None = whole image.
        scale_denom: decode at 1/scale_denom resolution: 1, 2, 4 or 8.
        channels: 3 (RGB, gray and CMYK converted like PIL's convert("RGB")) or 1.
        max_pixels: refuse images with more pixels (decompression bombs); <= 0: no limit.

    Returns:
        uint8 tensor [H, W, channels]: the window at that scale (edges rounded outwards).

    Raises:
        RuntimeError: corrupt, truncated or non-JPEG data, or over max_pixels.
    """
    return _ops().decode_jpeg(data, list(window or []), scale_denom, channels, max_pixels)


def decode_jpeg_cuda(datas: Sequence[torch.Tensor], channels: int = 3, device="cuda") -> List[torch.Tensor]:
    """Decodes JPEGs with nvJPEG (batched); returns uint8 [H, W, channels] CUDA tensors."""
    _ext.require_cuda_ops()
    if not _ext.has_nvjpeg():
        raise _ext.NotBuiltError(
            "fastload._C was built without nvJPEG: `pip install nvidia-nvjpeg` (or set "
            "FASTLOAD_NVJPEG_PREFIX) and rebuild with `make build`."
        )
    return list(_ops().decode_jpeg_cuda(list(datas), channels, torch.device(device)))


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
) -> torch.Tensor:
    """Fused crop -> antialiased bilinear resize -> flip -> normalise -> cast, one image.

    Args:
        image: uint8 [H, W, C] (C = 1 or 3), packed pixels, any row stride.
        box: [top, left, height, width] floats in image pixels; taps clamp to the image,
            output pixels whose centre falls outside the image are 0 (padding).
        size: [out_height, out_width].
        flip: mirror the output horizontally.
        scale, mean, std: value = (v * scale - mean[c]) / std[c] with v in [0, 255].
        dtype: uint8 (rounded, saturated), float32, float16 or bfloat16.
        channels_last: channels-last memory for the [C, H, W] result.

    Returns:
        [C, out_height, out_width] tensor of `dtype`.
    """
    return _ops().crop_resize_flip_normalize(
        image, [float(v) for v in box], list(size), flip, scale, list(mean), list(std), dtype, channels_last
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
) -> torch.Tensor:
    """Batched, in-place crop_resize_flip_normalize (CPU or CUDA, by the inputs' device).

    Args:
        images: packed uint8 1-D tensor holding N HWC images.
        shapes: int64 [N, 4]: (offset, height, width, row_stride) of each image in `images`.
        boxes: float32 [N, 4]: (top, left, height, width).
        flips: bool [N].
        mean, std: float32 [C].
        out: [N, C, H, W] of uint8/float32/float16/bfloat16, any strides (channels_last ok).

    Returns:
        out.
    """
    _ops().crop_resize_flip_normalize_batch(images, shapes, boxes, flips, scale, mean, std, out)
    return out


def random_resized_crop_params(
    sizes: torch.Tensor,
    indices: torch.Tensor,
    seed: int,
    epoch: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
) -> torch.Tensor:
    """RandomResizedCrop boxes as a pure function of (seed, epoch, index).

    Args:
        sizes: int64 [N, 2] image (height, width).
        indices: int64 [N] sample indices.

    Returns:
        int64 [N, 4]: (top, left, height, width), torchvision's sampler semantics.
    """
    return _ops().random_resized_crop_params(sizes, indices, seed, epoch, list(scale), list(ratio))


def random_flip_params(indices: torch.Tensor, seed: int, epoch: int, p: float = 0.5) -> torch.Tensor:
    """Horizontal-flip draws, bool [N], pure function of (seed, epoch, index)."""
    return _ops().random_flip_params(indices, seed, epoch, p)


# The transform specs that native datasets take as ops=[...].
from fastload.augment.specs import (  # noqa: E402
    CenterCrop,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
)
