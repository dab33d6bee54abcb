"""What every mapping of another library's transforms onto fastload's specs shares.

torchvision's mapping (compat/torchvision.py) opens wrappers through compat/presets.py and
hands timm's classes to compat/timm.py; those two need the same few pieces torchvision's
own leaves use. They live here, below all three, so that imports go one way:
`NotConvertible` (the reason a transform has no native equivalent, and its fix),
`is_torchvision` (a class recognised by module and name, torchvision need not be
imported), and the checks of a resize's interpolation and of an output dtype.

Example:
    >>> import torch
    >>> class Resize:  # a stand-in with torchvision's module and name
    ...     __module__ = "torchvision.transforms.transforms"
    ...     interpolation = 2  # Pillow's BILINEAR constant
    >>> is_torchvision(Resize(), "Resize", "CenterCrop"), interpolation_mode(Resize())
    (True, 'bilinear')
    >>> check_output_dtype(torch.int32)
    Traceback (most recent call last):
    ...
    fastload.compat.mapping.NotConvertible: outputs torch.int32 (native: uint8, float32, float16, bfloat16)
"""

from __future__ import annotations

from typing import Any

import torch

from fastload.augment import specs


class NotConvertible(ValueError):
    """The dataset or a transform has no native equivalent; the message says which.

    Attributes:
        fix: what the user can change so that it converts ("" when nothing obvious).
    """

    def __init__(self, message: str, fix: str = ""):
        super().__init__(message)
        self.fix = fix


_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)
_DTYPE_FIX = "convert to torch.float32, float16, bfloat16 or uint8 (other dtypes: convert the batch afterwards)"


def is_torchvision(obj: Any, *names: str) -> bool:
    module = type(obj).__module__
    return module.startswith("torchvision.") and type(obj).__name__ in names


def interpolation_mode(transform: Any) -> str:
    """The resize interpolation of `transform` ("bilinear", ...) if the engine has it, else
    NotConvertible. antialias=False does not map: torchvision ignores it on PIL images
    (Pillow always antialiases) and honours it on tensors, and which of the two the
    transform is given is not known here."""
    interpolation = getattr(transform, "interpolation", "bilinear")
    # v1 and v2 keep InterpolationMode enums (value "bilinear"); PIL constants are ints.
    name = getattr(interpolation, "value", interpolation)
    name = specs.PIL_INTERPOLATIONS.get(name, name) if isinstance(name, int) else name
    if not specs.has_native_filter(name):
        shown = interpolation if hasattr(interpolation, "value") else name  # InterpolationMode.BICUBIC
        raise NotConvertible(f"uses {shown} interpolation (native: {', '.join(specs.native_interpolations())} only)",
                             fix="pass interpolation=InterpolationMode.BILINEAR")
    if getattr(transform, "antialias", True) is False:
        raise NotConvertible("has antialias=False (native: antialiased only)", fix="pass antialias=True")
    return name


def check_output_dtype(dtype: Any) -> None:
    if dtype not in _DTYPES:
        raise NotConvertible(f"outputs {dtype} (native: uint8, float32, float16, bfloat16)", fix=_DTYPE_FIX)
