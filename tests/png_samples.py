"""Test PNGs written byte by byte (every colour type, bit depth, Adam7 interlacing, tRNS,
palettes shorter than their indices, any chunk order, bad CRCs), and PIL's reference
decodes. Shared by the PNG decoder's tests, its fuzzers and the engine's PNG tests.

PIL cannot write interlaced, 2-bit or out-of-range-palette files, so the encoder here is
independent of PIL: what PIL reads back from it is the reference.

    >>> import png_samples as ps   # tests/ is on sys.path
    >>> data = ps.encode(ps.photo(5, 7), color_type=ps.RGB)
    >>> ps.pil_decode(data).shape
    (5, 7, 3)
    >>> [s.name for s in ps.standard_samples()][:2]
    ['gray1_1x1', 'gray1_5x3']

Main entry points:
    photo(h, w, seed)                  uint8 [h, w, 3] smooth content with edges
    encode(samples, color_type, ...)   PNG bytes: bit depth, palette, tRNS, interlace,
                                       extra chunks, chunk order, the IDAT split
    chunk(kind, payload, crc)          one chunk (crc=None: the right one)
    split_chunks(data)                 [(kind, payload)] of a PNG
    standard_samples()                 the named corpus: every kind, odd sizes, 1x1
    pil_decode(data, mode)             Image.open(...).convert(mode) as uint8 [H, W, C]
    pil_mask(data)                     np.array(Image.open(...)) for modes 1, L and P
    as_tensor(data)                    uint8 1-D CPU tensor, the ops' input
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

__all__ = ["GRAY", "RGB", "PALETTE", "GRAY_ALPHA", "RGBA", "SIGNATURE", "PngSample", "photo", "encode", "chunk",
           "split_chunks", "join_chunks", "standard_samples", "pil_decode", "pil_mask", "as_tensor"]

# PNG colour types (IHDR byte 9).
GRAY, RGB, PALETTE, GRAY_ALPHA, RGBA = 0, 2, 3, 4, 6
CHANNELS = {GRAY: 1, RGB: 3, PALETTE: 1, GRAY_ALPHA: 2, RGBA: 4}
SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Adam7: (first row, first column, row step, column step) of each pass.
ADAM7 = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """uint8 [height, width, 3]: gradients, a disc and noise (seeded)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = np.stack([x * 255 / max(width - 1, 1), y * 255 / max(height - 1, 1),
                     (x + y) * 127 / max(height + width - 2, 1)], axis=-1)
    disc = ((y - height / 2) ** 2 + (x - width / 3) ** 2) < (min(height, width) / 3) ** 2
    base[disc] = 255 - base[disc]
    noisy = base + rng.normal(0, 12, base.shape)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def chunk(kind: bytes, payload: bytes, crc: Optional[int] = None) -> bytes:
    """One chunk: length, type, payload, CRC (crc=None: the correct CRC-32)."""
    if crc is None:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def split_chunks(data: bytes) -> List[Tuple[bytes, bytes]]:
    """[(type, payload)] of a well-formed PNG (the signature skipped)."""
    chunks, pos = [], len(SIGNATURE)
    while pos + 8 <= len(data):
        length = struct.unpack(">I", data[pos:pos + 4])[0]
        chunks.append((data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return chunks


def join_chunks(chunks: Sequence[Tuple[bytes, bytes]]) -> bytes:
    """A PNG of these chunks, in this order, with correct CRCs."""
    return SIGNATURE + b"".join(chunk(kind, payload) for kind, payload in chunks)


def _pack_row(row: np.ndarray, bit_depth: int) -> bytes:
    """One scanline's samples (flat, one value per sample) at bit_depth, unfiltered."""
    if bit_depth == 16:
        return row.astype(">u2").tobytes()
    if bit_depth == 8:
        return row.astype(np.uint8).tobytes()
    per_byte = 8 // bit_depth
    values = np.zeros(-(-len(row) // per_byte) * per_byte, dtype=np.uint8)
    values[:len(row)] = row
    values = values.reshape(-1, per_byte)
    packed = np.zeros(len(values), dtype=np.uint8)
    for i in range(per_byte):  # the first sample in the most significant bits
        packed |= values[:, i] << (8 - bit_depth * (i + 1))
    return packed.tobytes()


def _filter_rows(rows: List[bytes], bpp: int, filters: Sequence[int]) -> bytes:
    """Filters each scanline with filters[i % len(filters)] (0 none .. 4 Paeth)."""
    out, prior = [], None
    for i, row in enumerate(rows):
        kind = filters[i % len(filters)]
        cur = np.frombuffer(row, dtype=np.uint8).astype(np.int32)
        up = np.zeros_like(cur) if prior is None else prior
        left = np.concatenate([np.zeros(bpp, np.int32), cur[:-bpp]]) if len(cur) > bpp else np.zeros_like(cur)
        upleft = np.concatenate([np.zeros(bpp, np.int32), up[:-bpp]]) if len(cur) > bpp else np.zeros_like(cur)
        if kind == 0:
            filtered = cur
        elif kind == 1:
            filtered = cur - left
        elif kind == 2:
            filtered = cur - up
        elif kind == 3:
            filtered = cur - (left + up) // 2
        else:
            p = left + up - upleft
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - upleft)
            predictor = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
            filtered = cur - predictor
        out.append(bytes([kind]) + (filtered & 0xFF).astype(np.uint8).tobytes())
        prior = cur
    return b"".join(out)


def encode(samples: np.ndarray, color_type: int, bit_depth: int = 8, *, palette: Optional[np.ndarray] = None,
           trns: Optional[bytes] = None, interlace: bool = False, filters: Sequence[int] = (0, 1, 2, 3, 4),
           before_idat: Sequence[Tuple[bytes, bytes]] = (), after_idat: Sequence[Tuple[bytes, bytes]] = (),
           idat_parts: int = 1, level: int = 6) -> bytes:
    """PNG bytes of `samples` ([H, W] or [H, W, C], the file's own sample values).

    Args:
        samples: values as stored (indices for PALETTE; < 2**bit_depth).
        color_type: GRAY, RGB, PALETTE, GRAY_ALPHA or RGBA.
        bit_depth: 1, 2, 4, 8 or 16, as the colour type allows.
        palette: uint8 [N, 3] for PALETTE (N may be below the largest index).
        trns: the tRNS chunk's payload, if any.
        interlace: Adam7.
        filters: the scanline filter types, cycled over the rows.
        before_idat, after_idat: extra (type, payload) chunks.
        idat_parts: the compressed stream split over this many IDAT chunks.
        level: zlib level.
    """
    samples = np.asarray(samples)
    if samples.ndim == 2:
        samples = samples[..., None]
    height, width, channels = samples.shape
    assert channels == CHANNELS[color_type], (channels, color_type)
    bpp = max(1, channels * bit_depth // 8)
    rows: List[bytes] = []
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    raw = b""
    for y0, x0, dy, dx in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue  # an empty pass has no scanlines, not even a filter byte
        rows = [_pack_row(sub[r].reshape(-1), bit_depth) for r in range(sub.shape[0])]
        raw += _filter_rows(rows, bpp, filters)
    stream = zlib.compress(raw, level)
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    chunks = [(b"IHDR", ihdr), *before_idat]
    if palette is not None:
        chunks.append((b"PLTE", np.asarray(palette, dtype=np.uint8).tobytes()))
    if trns is not None:
        chunks.append((b"tRNS", trns))
    step = -(-len(stream) // idat_parts)
    chunks += [(b"IDAT", stream[i:i + step]) for i in range(0, len(stream), step)] or [(b"IDAT", b"")]
    chunks += [*after_idat, (b"IEND", b"")]
    return join_chunks(chunks)


@dataclass(frozen=True)
class PngSample:
    """A named test PNG: `mask` says whether np.array(Image.open(...)) is a label map
    (modes 1, L, P) that the mask output must reproduce."""

    name: str
    data: bytes
    mask: bool


def _samples_for(color_type: int, bit_depth: int, height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    top = (1 << bit_depth) - 1
    channels = CHANNELS[color_type]
    if bit_depth == 8 and color_type != PALETTE:  # photo-like, so filters see real content
        rgb = photo(height, width, seed)
        alpha = rng.integers(0, 256, (height, width, 1), dtype=np.uint8)
        return {GRAY: rgb[..., :1], RGB: rgb, GRAY_ALPHA: np.concatenate([rgb[..., :1], alpha], -1),
                RGBA: np.concatenate([rgb, alpha], -1)}[color_type]
    values = rng.integers(0, top + 1, (height, width, channels))
    if bit_depth == 16:  # both bytes matter: PIL keeps the high one, or clips gray to 255
        values[..., 0].flat[:4] = [0, 255, 256, 65535][:values[..., 0].size]
    return values.astype(np.uint16 if bit_depth == 16 else np.uint8)


# The (colour type, bit depths) PNG allows.
DEPTHS = {GRAY: (1, 2, 4, 8, 16), RGB: (8, 16), PALETTE: (1, 2, 4, 8), GRAY_ALPHA: (8, 16), RGBA: (8, 16)}
NAMES = {GRAY: "gray", RGB: "rgb", PALETTE: "pal", GRAY_ALPHA: "ga", RGBA: "rgba"}
SIZES = [(1, 1), (5, 3), (17, 33), (64, 9)]


@functools.lru_cache(maxsize=None)
def standard_samples() -> Tuple[PngSample, ...]:
    """Every colour type and bit depth at odd sizes and 1x1, plain and interlaced, with
    tRNS where the type takes one, palettes shorter than their indices."""
    out = []
    seed = 0
    for color_type, depths in DEPTHS.items():
        for bit_depth in depths:
            for height, width in SIZES:
                for interlace in (False, True):
                    if interlace and (height, width) == (1, 1):
                        continue
                    seed += 1
                    values = _samples_for(color_type, bit_depth, height, width, seed)
                    palette = trns = None
                    if color_type == PALETTE:
                        # 3/4 of the entries: the other indices lie past the palette's end.
                        entries = max(1, (3 << bit_depth) // 4)
                        palette = np.random.default_rng(seed).integers(0, 256, (entries, 3))
                        trns = bytes(range(0, 2 * min(entries, 8), 2))
                    elif color_type == GRAY:
                        trns = struct.pack(">H", int(values.flat[0]))
                    elif color_type == RGB:
                        trns = struct.pack(">HHH", *(int(v) for v in values[0, 0]))
                    name = f"{NAMES[color_type]}{bit_depth}_{height}x{width}" + ("_adam7" if interlace else "")
                    data = encode(values, color_type, bit_depth, palette=palette, trns=trns, interlace=interlace)
                    out.append(PngSample(name, data, color_type in (GRAY, PALETTE) and bit_depth <= 8))
    return tuple(out)


def as_tensor(data: bytes):
    """The bytes as a uint8 1-D CPU tensor (the decode ops' input)."""
    import torch

    if not data:  # frombuffer refuses an empty buffer
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def pil_decode(data: bytes, mode: str = "RGB") -> np.ndarray:
    """PIL's Image.open(...).convert(mode) as uint8 [H, W, C] (C = 1 for "L")."""
    with Image.open(io.BytesIO(data)) as image:
        array = np.asarray(image.convert(mode))
    return array if array.ndim == 3 else array[..., None]


def pil_mask(data: bytes) -> np.ndarray:
    """np.array(Image.open(...)) of a mode 1, L or P file, as uint8 [H, W] (mode 1's
    booleans as 0 and 1)."""
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode in ("1", "L", "P"), image.mode
        return np.array(image).astype(np.uint8)
