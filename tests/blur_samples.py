"""Blur test helpers shared by tests/ops/test_blur.py and tests/test_gaussian_blur.py:
sample images, the blur op and its sigma sampler, and the one-level comparison."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from fastload import _ext

# Blurred uint8 values may sit one level from torchvision's (float32 sums in another
# order): at most one level apart on >= 99.9% of the values.
UINT8_LEVELS, UINT8_SHARE = 1, 0.999


def gaussian_blur(image: torch.Tensor, kernel_size, sigma: float) -> torch.Tensor:
    """fastload::gaussian_blur of a uint8 HWC tensor."""
    _ext.require_ops()
    return torch.ops.fastload.gaussian_blur(image, list(kernel_size), float(sigma))


def blur_sigmas(indices: torch.Tensor, seed: int, epoch: int, sigma) -> torch.Tensor:
    _ext.require_ops()
    return torch.ops.fastload.gaussian_blur_params(indices, seed, epoch, float(sigma[0]), float(sigma[1]))


def pil_image(height: int, width: int, channels: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    # Smooth content plus noise: the blur's sums then fall everywhere between levels.
    y, x = np.mgrid[0:height, 0:width]
    base = 128 + 60 * np.sin(x / 3.0 + seed) * np.cos(y / 4.0)
    pixels = base[..., None] + rng.normal(0, 40, (height, width, channels))
    pixels = np.clip(pixels, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, "L" if channels == 1 else "RGB")


def hwc(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image)
    return torch.from_numpy(array.copy() if array.ndim == 3 else array[..., None].copy())


def assert_within_one_level(got: torch.Tensor, want: torch.Tensor):
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = (got.to(torch.int32) - want.to(torch.int32)).abs()
    share = (diff <= UINT8_LEVELS).double().mean().item()
    assert share >= UINT8_SHARE, f"{share:.5f} of the values within {UINT8_LEVELS} level (max diff {diff.max()})"
