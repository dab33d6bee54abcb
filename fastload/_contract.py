"""The Python side of the engine's contract (fastload._C), each call in one place.

Every name here stands for one piece of the C++ API: per-sample status codes, the plan
the engine reads, the geometry Python asks for (regions), and the clamp-region arithmetic
that turns a region into a strided view of decoded pixels. The rest of fastload.native
goes through these functions only, so a change of the binding changes this file alone.

Example:
    >>> import torch
    >>> from fastload._contract import OK, sampling_views
    >>> OK == 0, OK.name
    (True, 'OK')
    >>> views, relative = sampling_views(torch.tensor([[1.5, 2.0, 4.0, 3.0]]),
    ...                                  torch.tensor([[1.0, 1.5, 5.0, 4.0]]),
    ...                                  torch.tensor([[5, 8]]))
    >>> views.tolist(), relative.tolist()
    ([[1, 1, 4, 5]], [[0.5, 1.0, 4.0, 3.0]])
"""

from __future__ import annotations

from typing import Any, Tuple

import torch

from fastload import _ext


def _core():
    return _ext.require_ops()


def __getattr__(name: str) -> Any:
    # The engine's per-sample status codes, each a member of fastload._C.Status (an
    # IntEnum of the values its wait() writes): OK, DECODE_ERROR, NOT_JPEG, ...
    if name.isupper() and name in _core().Status.__members__:
        return _core().Status[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def region_of(plan: Any, height: int, width: int, epoch: int, index: int) -> Tuple[Any, Any, bool, bool]:
    """(box, clamp, flip, flip_v) of sample `index` at `epoch` in a height x width image
    (flip mirrors left-right, flip_v top-bottom); raises ValueError (the engine's message)
    when the geometry has no pixels to sample."""
    return _core().region_of(plan, height, width, epoch, index, vertical=True)


def regions_of(plan: Any, sizes: torch.Tensor, samples: torch.Tensor, epoch: int
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(boxes float32 [N, 4], clamps float32 [N, 4], flips bool [N, 2]: left-right,
    top-bottom, as crop_resize_flip_normalize_batch takes them) for images of `sizes`
    int64 [N, 2] (height, width); raises ValueError like region_of."""
    return _core().regions_of(plan, sizes, samples, epoch, vertical=True)


def color_passes(plan: Any, samples: torch.Tensor, epoch: int) -> torch.Tensor:
    """uint8 [N, K]: the colour records (ColorJitter, grayscale, erasing) of `samples`
    int64 [N] at `epoch`, as the engine draws them: crop_resize_flip_normalize_batch's
    `color`."""
    return _core().color_passes(plan, samples, epoch)


def dct_scale_denom(crop_height: int, crop_width: int, out_height: int, out_width: int) -> int:
    """The DCT scale denominator (1, 2, 4 or 8) the engine decodes a JPEG region of this
    many full-resolution pixels at for this output size (each scaled side still at least
    the output's)."""
    return int(_core().dct_scale_denom(crop_height, crop_width, out_height, out_width))


def interpolation_of(plan: Any) -> str:
    """The plan's resampling filter as the ops name it: "bilinear", "bicubic", "nearest"."""
    return plan.interpolation.name.lower()


def sampling_views(boxes: torch.Tensor, clamps: torch.Tensor, sizes: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The part of each image its taps may read, and its box relative to that part: the
    engine's own arithmetic (csrc/augment/geometry.h sampling_view).

    Args:
        boxes: float32 [N, 4] (top, left, height, width): what is sampled.
        clamps: float32 [N, 4], same layout: where taps clamp.
        sizes: int64 [N, 2]: (height, width) of each image.

    Returns:
        views: int64 [N, 4] (top, left, height, width): the clamp region on whole pixels,
            inside the image and at least 1x1.
        relative_boxes: float32 [N, 4]: `boxes` with the view's top-left as the origin.
    """
    return _core().sampling_views(boxes, clamps, sizes)


def view_seed(seed: int, view: int) -> int:
    """The seed of image view `view` of a pipeline seeded `seed` (view 0: `seed`): every
    view's draws are a pure function of (seed, epoch, index, view)."""
    return _core().view_seed(seed, view)


def resized_layout(plan: Any, height: int, width: int) -> Tuple[int, int, int, int]:
    """(resized height, resized width, crop top, crop left) of a Resize + CenterCrop plan
    on a height x width image, torchvision's integers (a negative start: CenterCrop pads)."""
    return _core().resized_layout(plan, height, width)


def mask_spec(follows: int, fill: int, sampling: str) -> Any:
    """The engine's MaskSpec of a mask following image view `follows` with RandomCrop's
    `fill` and nearest `sampling` ("pil", "tensor" or "cv2")."""
    core = _core()
    return core.MaskSpec(follows, fill, getattr(core.MaskSampling, sampling.upper()))
