"""The restart-segment index a prepared JPEG carries in its own header.

A prepared JPEG (ops.transcode_jpeg) has restart markers that cut each MCU row into
column tiles (or, where the row has no useful divisor, a restart every MCU row); its
segment index (int64 [K + 1, 2]: offset, MCU row; see csrc/decode/transcode.h) says
where each restart segment starts. The index travels inside the file, as an APP15
marker segment

    FF EF <length> "FLSEG" 00 <version 2> <interval u16> <MCUs per row u16>
          (u32 BE offset, u16 BE MCU row, u16 BE tile column) * (K + 1)

placed after the JFIF APP0 (offsets counted in the file as stored, the marker included;
the interval and MCUs per row are the header's DRI and SOF's, the tile column of
segment k is its place in its MCU row, 0 for whole rows and the end entry). Version 1
(whole rows only: (u32 offset, u32 MCU row) pairs after the version byte) is still read.
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
VERSION = 2
# An APPn segment holds at most 65533 bytes after its length field.
MAX_ROWS = (0xFFFF - 2 - len(IDENT) - 1 - 4) // 8


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


def _layout(data: bytes):
    """(restart interval in MCUs, MCUs per row) from a baseline JPEG's DRI and SOF."""
    interval = mcus_per_row = None
    for at, marker, length in _markers(data):
        body = data[at + 4:at + 2 + length]
        if marker == 0xDD and len(body) == 2:
            interval = (body[0] << 8) | body[1]
        elif marker in (0xC0, 0xC1) and len(body) >= 6:
            width, components = (body[3] << 8) | body[4], body[5]
            max_h = max((body[7 + 3 * c] >> 4 for c in range(components) if 7 + 3 * c < len(body)), default=1)
            mcu_width = 8 if components == 1 else 8 * max_h
            mcus_per_row = -(-width // mcu_width)
    if not interval or not mcus_per_row:
        raise ValueError("fastload.prepare: expected a prepared JPEG (a frame header and a restart interval)")
    return interval, mcus_per_row


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
    interval, mcus_per_row = _layout(jpeg)
    if len(segments) > MAX_ROWS:
        raise ValueError(f"fastload.prepare: expected at most {MAX_ROWS} segment rows in one index marker, "
                         f"got {len(segments)}. Use a longer restart interval.")
    # After SOI and a JFIF APP0 (which JFIF wants first); before everything else.
    at = 2
    first = next(iter(_markers(jpeg)), None)
    if first is not None and first[0] == 2 and first[1] == 0xE0:
        at = 2 + 2 + first[2]
    length = 2 + len(IDENT) + 1 + 4 + 8 * len(segments)
    offsets = segments[:, 0] + 2 + length
    if int(offsets.max()) >= 1 << 32:
        raise ValueError("fastload.prepare: expected a prepared JPEG under 4 GiB")
    # Tile column: the segment's place in its MCU row (rows of tiles follow the scan order).
    tiles = mcus_per_row // interval if interval < mcus_per_row else 1
    columns = np.arange(len(segments), dtype=np.int64) % tiles
    columns[-1] = 0
    entries = np.zeros(len(segments), dtype=[("offset", ">u4"), ("row", ">u2"), ("column", ">u2")])
    entries["offset"], entries["row"], entries["column"] = offsets, segments[:, 1], columns
    body = struct.pack(">BB H", 0xFF, MARKER, length) + IDENT + bytes([VERSION]) + \
        struct.pack(">HH", interval, mcus_per_row) + entries.tobytes()
    return jpeg[:at] + body + jpeg[at:]


def read_segments(data: bytes) -> Optional[np.ndarray]:
    """The embedded segment index of a prepared JPEG (int64 [K + 1, 2]), or None.

    The same reading as the engine's read_embedded_segments (csrc/decode/transcode.h),
    which also checks the layout against the header; versions 1 and 2.

    Example:
        >>> import io, PIL.Image, torch, fastload.ops as ops
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (40, 33), "teal").save(buf, "JPEG")
        >>> jpeg, seg = ops.transcode_jpeg(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
        >>> prepared = embed_segments(jpeg.numpy().tobytes(), seg.numpy())
        >>> read_segments(prepared).shape, read_segments(buf.getvalue())
        ((4, 2), None)
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (256, 33), "teal").save(buf, "JPEG")
        >>> jpeg, seg = ops.transcode_jpeg(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8), -1)
        >>> read_segments(embed_segments(jpeg.numpy().tobytes(), seg.numpy()))[:5, 1].tolist()  # 4 tiles a row
        [0, 0, 0, 0, 1]
    """
    for at, marker, length in _markers(data):
        if _is_ours(data, at, marker, length):
            body = data[at + 4 + len(IDENT):at + 2 + length]
            if body[:1] == bytes([VERSION]) and len(body) >= 5 and (len(body) - 5) % 8 == 0:
                entries = np.frombuffer(body[5:], dtype=[("offset", ">u4"), ("row", ">u2"), ("column", ">u2")])
                return np.stack([entries["offset"].astype(np.int64), entries["row"].astype(np.int64)], axis=1)
            if body[:1] == b"\x01" and (len(body) - 1) % 8 == 0:
                return np.frombuffer(body[1:], dtype=">u4").astype(np.int64).reshape(-1, 2)
            raise ValueError(f"fastload.prepare: expected a segment index marker of version {VERSION} (or 1), got "
                             f"{len(body)} bytes (version {body[0] if body else None}). Prepare the dataset again.")
    return None
