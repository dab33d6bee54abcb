"""The restart-segment index a prepared JPEG carries in its own header.

A prepared JPEG (ops.transcode_jpeg) has a restart marker every MCU row; its segment
index (int64 [K + 1, 2], see csrc/decode/transcode.h) says where each restart segment
starts. The index travels inside the file, as an APP15 marker segment

    FF EF <length> "FLSEG" 00 <version 1> (u32 BE offset, u32 BE MCU row) * (K + 1)

placed after the JFIF APP0 (offsets counted in the file as stored, the marker included).
Every JPEG decoder skips APPn segments, so the file stays a plain JPEG: a shard member, a
WebDataset sample or a copy on disk keeps working everywhere, and the C++ engine, which
looks for the marker in every JPEG it decodes (read_embedded_segments), decodes only the
segments covering a crop window.
"""

from __future__ import annotations

import struct
from typing import Optional

import numpy as np

MARKER = 0xEF  # APP15
IDENT = b"FLSEG\0"
VERSION = 1
# An APPn segment holds at most 65533 bytes after its length field.
MAX_ROWS = (0xFFFF - 2 - len(IDENT) - 1) // 8


def _markers(data: bytes):
    """(position, marker, segment length) of each header marker up to SOS."""
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker = data[i + 1]
        if marker == 0xDA or marker in (0xD8, 0xD9, 0x00, 0xFF) or 0xD0 <= marker <= 0xD7:
            return
        length = (data[i + 2] << 8) | data[i + 3]
        if length < 2 or i + 2 + length > len(data):
            return
        yield i, marker, length
        i += 2 + length


def _is_ours(data: bytes, at: int, marker: int, length: int) -> bool:
    return marker == MARKER and length >= 2 + len(IDENT) and data[at + 4:at + 4 + len(IDENT)] == IDENT


def strip_segments(data: bytes) -> bytes:
    """`data` without any embedded segment index (an already prepared file, re-prepared)."""
    spans = [(at, at + 2 + length) for at, marker, length in _markers(data) if _is_ours(data, at, marker, length)]
    for start, end in reversed(spans):
        data = data[:start] + data[end:]
    return data


def embed_segments(jpeg: bytes, segments: np.ndarray) -> bytes:
    """The prepared JPEG with its segment index embedded (offsets moved past the marker).

    Args:
        jpeg: a prepared JPEG (transcode_jpeg's first result), without an embedded index.
        segments: int64 [K + 1, 2], transcode_jpeg's second result for it.

    Raises:
        ValueError: more than MAX_ROWS rows (prepare with a longer restart interval).
    """
    segments = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    if len(segments) > MAX_ROWS:
        raise ValueError(f"fastload.prepare: expected at most {MAX_ROWS} segment rows in one index marker, "
                         f"got {len(segments)}. Use a longer restart interval.")
    # After SOI and a JFIF APP0 (which JFIF wants first); before everything else.
    at = 2
    first = next(iter(_markers(jpeg)), None)
    if first is not None and first[0] == 2 and first[1] == 0xE0:
        at = 2 + 2 + first[2]
    length = 2 + len(IDENT) + 1 + 8 * len(segments)
    shifted = segments.copy()
    shifted[:, 0] += 2 + length
    if int(shifted[:, 0].max()) >= 1 << 32:
        raise ValueError("fastload.prepare: expected a prepared JPEG under 4 GiB")
    body = struct.pack(">BB H", 0xFF, MARKER, length) + IDENT + bytes([VERSION]) + \
        shifted.astype(">u4").tobytes()
    return jpeg[:at] + body + jpeg[at:]


def read_segments(data: bytes) -> Optional[np.ndarray]:
    """The embedded segment index of a prepared JPEG (int64 [K + 1, 2]), or None.

    The same reading as the engine's read_embedded_segments (csrc/decode/transcode.h).

    Example:
        >>> import io, PIL.Image, torch, fastload.ops as ops
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (40, 33), "teal").save(buf, "JPEG")
        >>> jpeg, seg = ops.transcode_jpeg(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
        >>> prepared = embed_segments(jpeg.numpy().tobytes(), seg.numpy())
        >>> read_segments(prepared).shape, read_segments(buf.getvalue())
        ((4, 2), None)
    """
    for at, marker, length in _markers(data):
        if _is_ours(data, at, marker, length):
            body = data[at + 4 + len(IDENT):at + 2 + length]
            if not body or body[0] != VERSION or (len(body) - 1) % 8:
                raise ValueError(f"fastload.prepare: expected a segment index marker of version {VERSION}, got "
                                 f"{len(body)} bytes (version {body[0] if body else None}). Prepare the dataset again.")
            return np.frombuffer(body[1:], dtype=">u4").astype(np.int64).reshape(-1, 2)
    return None
