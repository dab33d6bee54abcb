"""torch.ops.fastload, loaded on first use: what every wrapper of fastload._ops calls.

Example:
    >>> from fastload import _ext
    >>> max_pixels_or_default(0), max_pixels_or_default(None) == _ext.require_ops().DEFAULT_MAX_PIXELS
    (0, True)
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from fastload import _ext


def native() -> Any:
    """torch.ops.fastload, once fastload._C is loaded (NotBuiltError, saying how to build
    it, where it is not)."""
    _ext.require_ops()
    return torch.ops.fastload


def max_pixels_or_default(max_pixels: Optional[int]) -> int:
    """A decoder's max_pixels argument: None is DEFAULT_MAX_PIXELS, from its one C++ definition."""
    return _ext.require_ops().DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels
