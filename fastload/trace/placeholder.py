"""The image the engine makes in a slot whose sample its own `__getitem__` makes instead.

The engine fills every slot of a batch; a traced sample that falls back (lazy.py)
is made in Python and copied over its slot afterwards. Pointing that slot at the
dataset's own first image would decode a real photograph for nothing; this 8x8 JPEG
costs next to nothing to decode and resize. It is written once per user and machine
into the temporary directory (under a name that says what it is; written to a
temporary name and renamed, so concurrent loaders never see half of it).

Example:
    >>> from PIL import Image
    >>> Image.open(placeholder_jpeg()).size
    (8, 8)
"""

from __future__ import annotations

import io
import os
import tempfile

import numpy as np
from PIL import Image

_SIDE = 8
_path = ""
_mask_path = ""


def placeholder_jpeg() -> str:
    """The path of the placeholder JPEG (made on first use)."""
    global _path
    if _path and os.path.exists(_path):
        return _path
    buffer = io.BytesIO()
    Image.new("RGB", (_SIDE, _SIDE), (128, 128, 128)).save(buffer, format="JPEG", quality=90)
    _path = _written(buffer.getvalue(), "jpg")
    return _path


def placeholder_mask() -> str:
    """The path of the placeholder mask (an 8x8 uint8 .npy of zeros, the placeholder
    JPEG's size, which every build of the engine reads: the mask slot of a traced sample
    that falls back; made on first use)."""
    global _mask_path
    if _mask_path and os.path.exists(_mask_path):
        return _mask_path
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((_SIDE, _SIDE), dtype=np.uint8))
    _mask_path = _written(buffer.getvalue(), "npy")
    return _mask_path


def _written(data: bytes, extension: str) -> str:
    """The path of a file of `data` in the temporary directory, written once per user and machine."""
    path = os.path.join(tempfile.gettempdir(), f"fastload-placeholder-{os.getuid()}-{len(data)}.{extension}")
    if not (os.path.exists(path) and os.path.getsize(path) == len(data)):
        fd, partial = tempfile.mkstemp(prefix=".fastload-placeholder-", dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    return path
