"""Typed wrappers of the native operators (torch.ops.fastload.*), in the binding layer.

This package is the only caller of torch.ops.fastload; the ops' shapes and dtypes are in
the docstrings. One module per stage: `decode.py` (JPEG headers, JPEG and PNG decodes,
nvJPEG, prepared JPEGs), `augment.py` (the fused crop / resize / flip / normalise, the
colour ops, the blur, the automatic augmentations and every random draw), both on
`native.py` (torch.ops.fastload, loaded on first use). This `__init__` gathers their
names: every stage imports the wrappers from `fastload._ops`.

Every op has a fake kernel (fastload/_meta.py) and an opcheck case
(tests/ops/test_opcheck.py). Plain-PyTorch twins: fastload/reference.py (decode,
crop_resize_flip_normalize), fastload/augment/color.py (the colour ops),
fastload/augment/autoaugment.py (TrivialAugmentWide / RandAugment on PIL images, AugMix);
the blur is checked against torchvision's GaussianBlur directly (tests/ops/test_blur.py).
Users read them, with the transform specs, as fastload.ops (fastload/ops/__init__.py).
"""

from __future__ import annotations

from fastload import _ext
from fastload._ops.augment import (adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, augmix_params,
                                   augmix_step, auto_augment, auto_augment_params, color_jitter, color_jitter_params,
                                   crop_resize_flip_normalize, crop_resize_flip_normalize_batch, erase,
                                   gaussian_blur, gaussian_blur_params, interpolation_code, random_erasing_params,
                                   random_grayscale_params, rgb_to_grayscale)
from fastload._ops.decode import (decode_jpeg, decode_jpeg_cuda, decode_jpeg_rows, decode_png, jpeg_header,
                                  transcode_jpeg)

__all__ = ["adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation", "augmix_params", "augmix_step",
           "auto_augment", "auto_augment_params", "color_jitter", "color_jitter_params", "crop_resize_flip_normalize",
           "crop_resize_flip_normalize_batch", "decode_jpeg", "decode_jpeg_cuda", "decode_jpeg_rows", "decode_png",
           "erase", "gaussian_blur", "gaussian_blur_params", "interpolation_code", "jpeg_header",
           "random_erasing_params", "random_grayscale_params", "rgb_to_grayscale", "transcode_jpeg"]


def __getattr__(name: str):
    # DEFAULT_MAX_PIXELS: the decoders' decompression-bomb limit (Pillow's
    # Image.MAX_IMAGE_PIXELS), the ops' schema default, from its one C++ definition.
    if name == "DEFAULT_MAX_PIXELS":
        return _ext.require_ops().DEFAULT_MAX_PIXELS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
