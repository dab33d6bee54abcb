"""PIL decoding: the fallback for formats the C++ decoders do not take (WebP, BMP, GIF,
...; PNG in a build without libpng), and the generic path's decoder. Counted in the
loader's stats as pil_fallback."""

from __future__ import annotations

import io
from typing import Optional

import numpy as np
import torch

from fastload.errors import DecodeError


def decode_to_tensor(data: bytes, *, index: Optional[int] = None, source: Optional[str] = None,
                     channels: int = 3, max_pixels: Optional[int] = None) -> torch.Tensor:
    """Decodes any PIL-readable image to uint8 [H, W, channels] (RGB or L).

    Raises:
        DecodeError: naming the sample and source, for unreadable or oversized images.
    """
    from PIL import Image

    if not data:
        raise DecodeError("expected an image, got 0 bytes", index, source)
    try:
        with Image.open(io.BytesIO(data)) as image:
            if max_pixels is not None and max_pixels > 0 and image.width * image.height > max_pixels:
                raise DecodeError(
                    f"image of {image.width}x{image.height} pixels is over the limit of {max_pixels} "
                    "(decompression-bomb guard; raise max_pixels to allow it)", index, source)
            array = np.asarray(image.convert("RGB" if channels == 3 else "L"))
    except DecodeError:
        raise
    except Exception as error:  # noqa: BLE001 - PIL raises many types for bad data
        raise DecodeError(f"{type(error).__name__}: {error}", index, source) from error
    tensor = torch.from_numpy(array.copy())
    return tensor if tensor.dim() == 3 else tensor.unsqueeze(-1)


def decode_mask_array(data: bytes, *, index: Optional[int] = None, source: Optional[str] = None) -> np.ndarray:
    """A mask file's label map as uint8 [H, W]: a .npy array (uint8 [H, W] or [H, W, 1]),
    or an 8-bit L or P image through PIL (`np.array(Image.open(path))`: a P image's palette
    indexes are its labels). The slow twin of the engine's mask decode.

    Raises:
        DecodeError: naming the sample and the mask file, for anything else.

    Example:
        >>> buffer = io.BytesIO(); np.save(buffer, np.eye(3, dtype=np.uint8))
        >>> decode_mask_array(buffer.getvalue()).tolist()
        [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    """
    from PIL import Image

    try:
        if data[:6] == b"\x93NUMPY":
            array = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            with Image.open(io.BytesIO(data)) as image:
                if image.mode not in ("L", "P"):
                    raise DecodeError(f"expected a mask image of mode L or P, got mode {image.mode}", index, source)
                array = np.array(image)
    except DecodeError:
        raise
    except Exception as error:  # noqa: BLE001 - numpy and PIL raise many types for bad data
        raise DecodeError(f"mask: {type(error).__name__}: {error}", index, source) from error
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.dtype != np.uint8 or array.ndim != 2:
        raise DecodeError(f"expected a mask of uint8 [H, W], got {array.dtype} {list(array.shape)}", index, source)
    return np.ascontiguousarray(array)
