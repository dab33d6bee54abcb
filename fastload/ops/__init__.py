"""fastload.ops: the native operators and the transform specs, by their public names.

The operators' typed wrappers (decode_jpeg, crop_resize_flip_normalize, ...) are defined
in fastload._ops, the binding layer every stage imports them from; the transform specs
(RandomResizedCrop, ...) that fastload datasets take as `transforms=[...]` (or `ops=`)
are defined in fastload.augment, their public home being fastload.transforms. This module
sits above both and only gathers their names, so that nothing below it imports it.

Example:
    >>> import fastload
    >>> from fastload import ops
    >>> ops.CenterCrop(8), ops.decode_jpeg is fastload._ops.decode_jpeg
    (CenterCrop(size=(8, 8)), True)
"""

from fastload._ops import (  # noqa: F401
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    augmix_params,
    augmix_step,
    auto_augment,
    auto_augment_params,
    color_jitter,
    color_jitter_params,
    crop_resize_flip_normalize,
    crop_resize_flip_normalize_batch,
    decode_jpeg,
    decode_jpeg_cuda,
    decode_jpeg_rows,
    decode_png,
    erase,
    gaussian_blur,
    gaussian_blur_params,
    interpolation_code,
    jpeg_header,
    random_erasing_params,
    random_grayscale_params,
    rgb_to_grayscale,
    transcode_jpeg,
)
from fastload.augment.autoaugment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide  # noqa: F401
from fastload.augment.color import ColorJitter, Grayscale, RandomErasing, RandomGrayscale  # noqa: F401
from fastload.augment.specs import (  # noqa: F401
    CenterCrop,
    GaussianBlur,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    ToDtype,
)


def __getattr__(name: str):
    if name == "DEFAULT_MAX_PIXELS":  # read from fastload._C when asked for (needs it built)
        from fastload import _ops

        return _ops.DEFAULT_MAX_PIXELS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
