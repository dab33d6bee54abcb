"""One image, encoded for a prepared shard: the per-image modes.

- lossless: a JPEG is transcoded in the DCT domain (same pixels, optimised Huffman
  tables, restart markers cutting each MCU row into column tiles, or every MCU row where
  the row has no useful divisor) and its segment index embedded
  (segments.py); anything else is stored as it is, after checking that it decodes.
- resize (max_side, quality): decoded, downscaled so that its longer side is at most
  max_side (antialiased, never upscaled), re-encoded as a JPEG of that quality and then
  prepared as above; or, for a raw_fraction of the images, stored as raw uint8 pixels
  (binary PPM: a short header and the pixels, decoded by a copy).

Errors: EncodeError says why an image could not be prepared (corrupt, truncated, not an
image); the caller applies on_error.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import asdict, dataclass
from typing import Optional

from fastload import _ext
from fastload.prepare import segments as seg

MODES = ("lossless", "resize")
# Column tiles chosen by the transcoder (ops.transcode_jpeg's -1: tiles of ~64 pixels,
# whole MCU rows where the row has no divisor that wide): crop windows skip the columns
# beside them as well as the rows above; benchmarks/restart_interval.py measured the
# choice (benchmarks/RESULTS.md, "Prepared shards").
RESTART_ROWS = -1
# Member extensions of formats stored as they are (what TarShards reads as images).
EXT_OF_FORMAT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "PPM": "ppm", "BMP": "bmp", "TIFF": "tiff",
                 "GIF": "gif"}
# The golden ratio's fractional part: sample i is raw when frac(i * phi + seed * phi) <
# raw_fraction, an even, deterministic spread with exactly that share over any range.
_PHI = (math.sqrt(5) - 1) / 2


class EncodeError(ValueError):
    """An image that cannot be prepared; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class EncodeSettings:
    """How every image is encoded (recorded in the manifest)."""

    mode: str = "lossless"
    max_side: Optional[int] = None
    quality: Optional[int] = None
    raw_fraction: float = 0.0
    restart_rows: int = RESTART_ROWS
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Encoded:
    """One prepared image: member extension, bytes, and what was done ("prepared": a JPEG
    with an embedded segment index; "as_is": the original bytes; "raw": PPM pixels)."""

    ext: str
    data: bytes
    kind: str


def is_raw(sample: int, settings: EncodeSettings) -> bool:
    """Whether sample `sample` is stored as raw pixels (resize mode with raw_fraction)."""
    if settings.mode != "resize" or settings.raw_fraction <= 0:
        return False
    return ((sample + settings.seed) * _PHI) % 1.0 < settings.raw_fraction


def encode(data: bytes, name: str, sample: int, settings: EncodeSettings) -> Encoded:
    """The prepared form of one image's bytes (`name` only for its format when not a JPEG).

    Raises:
        EncodeError: the image is corrupt, truncated or not an image.
    """
    if settings.mode == "lossless":
        if _looks_jpeg(data):
            return _prepare_jpeg(data, settings.restart_rows, keep_on_refusal=True)
        return Encoded(_check_image(data, name), data, "as_is")
    image = _open(data, name)
    image = _resized(image, settings.max_side)
    if is_raw(sample, settings):
        out = io.BytesIO()
        image.save(out, format="PPM")
        return Encoded("ppm", out.getvalue(), "raw")
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=settings.quality)
    return _prepare_jpeg(out.getvalue(), settings.restart_rows, keep_on_refusal=False)


def _looks_jpeg(data: bytes) -> bool:
    return data[:3] == b"\xff\xd8\xff"


def _prepare_jpeg(data: bytes, restart_rows: int, keep_on_refusal: bool) -> Encoded:
    import torch

    from fastload import _ops as ops

    data = seg.strip_segments(data)
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        jpeg, segments = ops.transcode_jpeg(tensor, restart_rows)
        if segments.shape[0] > seg.MAX_ROWS:  # a very large image: whole rows, fewer, longer segments
            rows = min(_ext.require_ops().MAX_RESTART_ROWS, math.ceil(int(segments[-1, 1]) / (seg.MAX_ROWS - 1)))
            jpeg, segments = ops.transcode_jpeg(tensor, rows)
    except RuntimeError as refusal:
        _reraise_unless_decoder(refusal)
        # A file transcode_jpeg refuses but fastload decodes (e.g. a progressive file that
        # leaves coefficient bits unsent) is kept as it is: same pixels, no segments.
        try:
            ops.decode_jpeg(tensor)
        except (RuntimeError, ValueError) as error:
            _reraise_unless_decoder(error)
            raise EncodeError(_reason(error)) from None
        if not keep_on_refusal:
            raise EncodeError(_reason(refusal)) from None
        return Encoded("jpg", data, "as_is")
    return Encoded("jpg", seg.embed_segments(jpeg.numpy().tobytes(), segments.numpy()), "prepared")


def _reraise_unless_decoder(error: BaseException) -> None:
    # The ops' own refusals ("fastload.transcode_jpeg: ...") are about the image; anything
    # else (an extension without the op, an internal error) must not pass for a bad file.
    if not str(error).startswith(("fastload.transcode_jpeg:", "fastload.decode_jpeg:")):
        raise error


# How the ops end a refusal of a bad file. prepare's message gives the advice itself, once,
# with the option that skips such files, so the reason leaves it out.
_OP_ADVICE = ". Fix or remove the file."


def _reason(error: BaseException) -> str:
    text = str(error).split("\n")[0]
    return text[:-len(_OP_ADVICE)] if text.endswith(_OP_ADVICE) else text


def _open(data: bytes, name: str):
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as error:  # PIL raises many types for bad data
        raise EncodeError(f"expected an image PIL can decode, got {len(data)} bytes it cannot read "
                          f"({type(error).__name__}: {error})") from None
    return image


def _check_image(data: bytes, name: str) -> str:
    """The member extension of a non-JPEG image stored as is, after a full decode."""
    image = _open(data, name)
    ext = EXT_OF_FORMAT.get(image.format or "")
    if ext is None:
        suffix = os.path.splitext(name)[1].lower().lstrip(".")
        raise EncodeError(f"expected a JPEG, PNG, WebP, PPM, BMP, TIFF or GIF image, got {image.format} "
                          f"({suffix or 'no extension'})")
    return ext


def _resized(image, max_side: Optional[int]):
    from PIL import Image

    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    if max_side is None:
        return image
    width, height = image.size
    longer = max(width, height)
    if longer <= max_side:
        return image
    scale = max_side / longer
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    # Pillow's filters widen with the scale when shrinking: antialiased, as FFCV's INTER_AREA.
    return image.resize(size, Image.Resampling.LANCZOS)

