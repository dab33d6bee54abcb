"""Fake (meta) kernels: the shape and dtype of every fastload op, for torch.compile and
meta tensors. Data-dependent shapes (decoded image sizes) use unbacked symbols.

fastload._ext imports this module once fastload._C has loaded; imported alone, it loads
fastload._C itself first (a fake kernel registers only over an operator that exists), so
it raises ImportError where the extension is not built.

Example:
    >>> import torch
    >>> import fastload._meta
    >>> out = torch.ops.fastload.jpeg_header(torch.empty(100, dtype=torch.uint8, device="meta"))
    >>> out.shape, out.dtype
    (torch.Size([5]), torch.int64)
"""

from __future__ import annotations

import torch

from fastload import _C  # registers the operators the fake kernels below are for


@torch.library.register_fake("fastload::crop_resize_flip_normalize")
def _crop_resize_flip_normalize(image, box, size, flip, scale, mean, std, dtype, channels_last, flip_v=False,
                                interpolation=0):
    torch._check(image.dim() == 3, lambda: "image must be [H, W, C]")
    channels, height, width = image.shape[2], size[0], size[1]
    if channels_last:  # HWC memory for the 3-D [C, H, W] result, as the kernel makes it
        return image.new_empty_strided((channels, height, width), (1, width * channels, channels), dtype=dtype)
    return image.new_empty((channels, height, width), dtype=dtype)


@torch.library.register_fake("fastload::crop_resize_flip_normalize_batch")
def _crop_resize_flip_normalize_batch(images, shapes, boxes, flips, scale, mean, std, out, interpolation=0,
                                      color=None):
    return None


# Decode: output sizes depend on the bytes, so they are unbacked symbols. The dispatcher
# leaves defaulted arguments out, so the arguments a fake kernel reads (channels) repeat
# the schema's default; max_pixels does not change a shape and is not read.
@torch.library.register_fake("fastload::decode_jpeg")
def _decode_jpeg(data, window=(), scale_denom=1, channels=3, max_pixels=None):
    ctx = torch.library.get_ctx()
    return data.new_empty((ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels), dtype=torch.uint8)


@torch.library.register_fake("fastload::decode_png")
def _decode_png(data, window=(), mode="RGB", max_pixels=None):
    ctx = torch.library.get_ctx()
    size = (ctx.new_dynamic_size(), ctx.new_dynamic_size())
    if mode == "mask":  # a label map: [H, W]
        return data.new_empty(size, dtype=torch.uint8)
    return data.new_empty((*size, 3 if mode == "RGB" else 1), dtype=torch.uint8)


@torch.library.register_fake("fastload::decode_jpeg_cuda")
def _decode_jpeg_cuda(datas, channels=3, device="cuda", max_pixels=None):
    ctx = torch.library.get_ctx()
    images = [
        torch.empty((ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels), dtype=torch.uint8, device=device)
        for _ in datas
    ]
    return images, torch.empty((len(datas),), dtype=torch.bool)


@torch.library.register_fake("fastload::jpeg_header")
def _jpeg_header(data):
    return data.new_empty((5,), dtype=torch.int64)


@torch.library.register_fake("fastload::transcode_jpeg")
def _transcode_jpeg(data, restart_rows=1, max_pixels=None):
    ctx = torch.library.get_ctx()
    return (data.new_empty((ctx.new_dynamic_size(),), dtype=torch.uint8),
            data.new_empty((ctx.new_dynamic_size(), 2), dtype=torch.int64))


@torch.library.register_fake("fastload::decode_jpeg_rows")
def _decode_jpeg_rows(jpeg, segments, window=(), scale_denom=1, channels=3, max_pixels=None):
    ctx = torch.library.get_ctx()
    return jpeg.new_empty((ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels), dtype=torch.uint8)


def _same_image(image, *args):
    return torch.empty_like(image, memory_format=torch.contiguous_format)


for _name in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "color_jitter", "erase",
              "gaussian_blur", "auto_augment", "augmix_step"):
    torch.library.register_fake(f"fastload::{_name}")(_same_image)


@torch.library.register_fake("fastload::rgb_to_grayscale")
def _rgb_to_grayscale(image, num_output_channels):
    return image.new_empty((image.shape[0], image.shape[1], num_output_channels))


@torch.library.register_fake("fastload::color_jitter_params")
def _color_jitter_params(indices, seed, epoch, ranges, p=1.0):
    n = indices.shape[0]
    return indices.new_empty((n, 4), dtype=torch.int64), indices.new_empty((n, 4), dtype=torch.float32)


@torch.library.register_fake("fastload::random_grayscale_params")
def _random_grayscale_params(indices, seed, epoch, p):
    return indices.new_empty((indices.shape[0],), dtype=torch.bool)


@torch.library.register_fake("fastload::random_erasing_params")
def _random_erasing_params(indices, seed, epoch, height, width, p, scale, ratio):
    return indices.new_empty((indices.shape[0], 4), dtype=torch.int64)


@torch.library.register_fake("fastload::gaussian_blur_params")
def _gaussian_blur_params(indices, seed, epoch, sigma_min, sigma_max, p=1.0):
    return indices.new_empty((indices.shape[0],), dtype=torch.float32)


@torch.library.register_fake("fastload::auto_augment_params")
def _auto_augment_params(indices, seed, epoch, space_ops, magnitudes, num_ops=1, magnitude_bin=-1, policy_ops=(),
                         policy_probs=(), policy_bins=()):
    n = indices.shape[0]
    if len(policy_ops) or len(policy_probs) or len(policy_bins):  # AutoAugment: one row per sub-policy slot
        num_ops = _C.AUTOAUGMENT_POLICY_STEPS
    return indices.new_empty((n, num_ops), dtype=torch.int64), indices.new_empty((n, num_ops), dtype=torch.float64)


@torch.library.register_fake("fastload::augmix_params")
def _augmix_params(indices, seed, epoch, space_ops, magnitudes, severity=3, width=3, chain_depth=-1, alpha=1.0):
    n, depth = indices.shape[0], _C.AUGMIX_MAX_DEPTH
    return (indices.new_empty((n, width + 1), dtype=torch.float32), indices.new_empty((n, width), dtype=torch.int64),
            indices.new_empty((n, width, depth), dtype=torch.int64),
            indices.new_empty((n, width, depth), dtype=torch.float64))
