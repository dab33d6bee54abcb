"""Fake (meta) kernels: the shape and dtype of every fastload op, for torch.compile and
meta tensors. Data-dependent shapes (decoded image sizes) use unbacked symbols."""

from __future__ import annotations

import torch


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


# Decode: output sizes depend on the bytes, so they are unbacked symbols. The defaults
# repeat the schema's (the dispatcher leaves defaulted arguments out).
@torch.library.register_fake("fastload::decode_jpeg")
def _decode_jpeg(data, window=(), scale_denom=1, channels=3, max_pixels=178956970):
    ctx = torch.library.get_ctx()
    return data.new_empty((ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels), dtype=torch.uint8)


@torch.library.register_fake("fastload::decode_jpeg_cuda")
def _decode_jpeg_cuda(datas, channels=3, device="cuda", max_pixels=178956970):
    ctx = torch.library.get_ctx()
    images = [
        torch.empty((ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels), dtype=torch.uint8, device=device)
        for _ in datas
    ]
    return images, torch.empty((len(datas),), dtype=torch.bool)


# fastload::jpeg_header has no fake kernel: it returns Python ints read from the bytes
# (metadata for host-side planning), which no fake kernel can know; it is not meant to be
# traced.


@torch.library.register_fake("fastload::transcode_jpeg")
def _transcode_jpeg(data, restart_rows=1, max_pixels=178956970):
    ctx = torch.library.get_ctx()
    return (data.new_empty((ctx.new_dynamic_size(),), dtype=torch.uint8),
            data.new_empty((ctx.new_dynamic_size(), 2), dtype=torch.int64))


@torch.library.register_fake("fastload::decode_jpeg_rows")
def _decode_jpeg_rows(jpeg, segments, window=(), scale_denom=1, channels=3, max_pixels=178956970):
    ctx = torch.library.get_ctx()
    return jpeg.new_empty((ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels), dtype=torch.uint8)


def _same_image(image, *args):
    return torch.empty_like(image, memory_format=torch.contiguous_format)


for _name in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "color_jitter", "erase"):
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
