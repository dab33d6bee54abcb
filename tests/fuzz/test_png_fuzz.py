"""Hostile PNGs through fastload::decode_png and the batch engine: each either decodes
to the size its IHDR announces (and, where PIL reads the file too, to PIL's pixels) or is
refused with a fastload message; the process never crashes, hangs or leaks (a crash
fails the whole run; scripts/sanitize.sh runs this file under ASan + UBSan).

Mutations: bit flips (most caught by CRCs), payload flips with the CRC made right again
(so they reach the IHDR checks, the palette, inflate and the row filters), truncation,
chunks dropped, repeated and reordered (IDAT before PLTE, IEND first, two IHDRs), chunk
lengths broken, IHDR fields rewritten (sizes up to 2^31 - 1, depths, colour types),
palettes shortened (indices past their end) or of bad lengths, the zlib stream replaced.
Fixed cases: a zlib bomb after the image data, a compressed-text bomb, a size past the
pixel limit with no data.

Seeded and deterministic: a failure names its case. FASTLOAD_FUZZ_CASES sets the number
of mutated cases (default 2000), FASTLOAD_FUZZ_SEED the seed.
"""

from __future__ import annotations

import io
import os
import random
import struct
import sys
import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import png_samples as ps  # noqa: E402

from fastload import _ext, ops  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_png(), reason="fastload._C is not built with libpng")

CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "2000"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20240229"))
# Mutated IHDRs announce huge images: a small limit keeps the run fast and bounded.
FUZZ_MAX_PIXELS = 1 << 20


def _bases():
    rng = np.random.default_rng(3)
    photo = ps.photo(23, 31, seed=5)
    palette_text = ps.encode(rng.integers(0, 40, (19, 26), dtype=np.uint8), ps.PALETTE,
                             palette=rng.integers(0, 256, (32, 3)), trns=b"\x00\x80",
                             before_idat=[(b"tEXt", b"Comment\x00fuzz"), (b"zTXt", b"k\x00\x00" + zlib.compress(b"z" * 50))])
    pil_saved = io.BytesIO()
    Image.fromarray(photo).save(pil_saved, "PNG", optimize=True)
    return [
        ps.encode(photo, ps.RGB, idat_parts=3),
        ps.encode(np.concatenate([photo, photo[..., :1]], -1).astype(np.uint16) * 200, ps.RGBA, 16),
        ps.encode(rng.integers(0, 4, (21, 17), dtype=np.uint8), ps.PALETTE, 2, palette=rng.integers(0, 256, (3, 3)),
                  interlace=True),
        ps.encode(rng.integers(0, 2, (13, 40), dtype=np.uint8), ps.GRAY, 1),
        ps.encode(rng.integers(0, 1000, (9, 14), dtype=np.uint16), ps.GRAY, 16, interlace=True),
        ps.encode(np.concatenate([photo[..., :1]] * 2, -1), ps.GRAY_ALPHA, interlace=True),
        palette_text,
        pil_saved.getvalue(),
    ]


BASES = _bases()


def _fix_crcs(chunks):
    return ps.join_chunks(chunks)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A damaged copy of a PNG (see the module's docstring)."""
    chunks = ps.split_chunks(data)
    kind = rng.randrange(10)
    if kind == 0:  # raw bit flips: CRCs catch most
        b = bytearray(data)
        for _ in range(rng.choice([1, 2, 8])):
            b[rng.randrange(8, len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 1:  # a payload flipped and its CRC recomputed: the damage reaches the decoder
        i = rng.randrange(len(chunks))
        payload = bytearray(chunks[i][1])
        for _ in range(rng.choice([1, 3, 16])):
            if payload:
                payload[rng.randrange(len(payload))] ^= 1 << rng.randrange(8)
        chunks[i] = (chunks[i][0], bytes(payload))
        return _fix_crcs(chunks)
    if kind == 2:  # truncated anywhere
        return data[:rng.randrange(0, len(data))]
    if kind == 3:  # chunks dropped, repeated or moved
        i, j = rng.randrange(len(chunks)), rng.randrange(len(chunks))
        op = rng.randrange(3)
        if op == 0:
            del chunks[i]
        elif op == 1:
            chunks.insert(j, chunks[i])
        else:
            chunks.insert(j, chunks.pop(i))
        return _fix_crcs(chunks)
    if kind == 4:  # a chunk's length field broken (the CRC then misses too)
        b = bytearray(data)
        starts, pos = [], 8
        for _, payload in chunks:
            starts.append(pos)
            pos += 12 + len(payload)
        at = rng.choice(starts)
        b[at:at + 4] = struct.pack(">I", rng.choice([0, 1, 13, 0x7FFFFFFF, 0xFFFFFFFF, rng.randrange(1 << 20)]))
        return bytes(b)
    if kind == 5:  # IHDR fields rewritten, CRC right: huge, zero, mismatched sizes, depths, types
        width, height, depth, color, comp, filt, lace = struct.unpack(">IIBBBBB", chunks[0][1])
        field = rng.randrange(5)
        if field == 0:
            width = rng.choice([0, 1, width + 1, width * 7, 1 << 20, 0x7FFFFFFF, 0x80000000])
        elif field == 1:
            height = rng.choice([0, 1, height - 1, height * 5, 1 << 20, 0x7FFFFFFF])
        elif field == 2:
            depth = rng.choice([0, 1, 2, 3, 4, 8, 16, 32])
        elif field == 3:
            color = rng.choice([0, 1, 2, 3, 4, 5, 6, 7])
        else:
            comp, filt, lace = rng.choice([(0, 0, 1), (0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 2)])
        chunks[0] = (b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, comp, filt, lace))
        return _fix_crcs(chunks)
    if kind == 6:  # a palette shortened (indices past its end), emptied, of a bad length or too long
        entries = rng.choice([0, 1, 2, 255, 256, 257])
        payload = bytes(rng.randrange(256) for _ in range(3 * entries + rng.choice([0, 0, 1, 2])))
        chunks = [(k, payload if k == b"PLTE" else p) for k, p in chunks]
        if not any(k == b"PLTE" for k, _ in chunks):
            chunks.insert(1, (b"PLTE", payload))
        return _fix_crcs(chunks)
    if kind == 7:  # the zlib stream replaced by noise, or cut and re-wrapped
        idat = b"".join(p for k, p in chunks if k == b"IDAT")
        if rng.random() < 0.5:
            stream = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        else:
            raw = zlib.decompress(idat)
            raw = raw[:rng.randrange(len(raw) + 1)] + bytes(rng.randrange(256) for _ in range(rng.randint(0, 9)))
            stream = zlib.compress(raw)
        kept = [(k, p) for k, p in chunks if k != b"IDAT"]
        return _fix_crcs(kept[:-1] + [(b"IDAT", stream)] + kept[-1:])
    if kind == 8:  # row filter bytes set to any value (5..255 are invalid)
        idat = b"".join(p for k, p in chunks if k == b"IDAT")
        raw = bytearray(zlib.decompress(idat))
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.choice([0, 4, 5, 255, rng.randrange(256)])
        kept = [(k, p) for k, p in chunks if k != b"IDAT"]
        return _fix_crcs(kept[:-1] + [(b"IDAT", zlib.compress(bytes(raw)))] + kept[-1:])
    # bytes inserted between chunks (garbage where a chunk header should be)
    b = bytearray(data)
    at = rng.randrange(8, len(b))
    b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 12)))
    return bytes(b)


def _ihdr_size(data: bytes):
    try:
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    except struct.error:
        return None


def _pil(data: bytes, mode: str):
    """PIL's result, or None where PIL refuses the file."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode == "mask":
                with Image.open(io.BytesIO(data)) as image:
                    return np.array(image).astype(np.uint8) if image.mode in ("1", "L", "P") else None
            return ps.pil_decode(data, mode)
    except Exception:  # noqa: BLE001 - PIL raises many types for bad data
        return None


def check_case(data: bytes, mode: str, label: str) -> bool:
    """Decodes one case; returns True when it decoded."""
    try:
        image = ops.decode_png(ps.as_tensor(data), mode=mode, max_pixels=FUZZ_MAX_PIXELS)
    except RuntimeError as error:
        assert str(error).startswith("fastload.decode_png: "), (label, str(error))
        return False
    height, width = _ihdr_size(data)
    channels = {"RGB": (3,), "L": (1,), "mask": ()}[mode]
    assert tuple(image.shape) == (height, width, *channels) and image.dtype == torch.uint8, (label, image.shape)
    want = _pil(data, mode)
    if want is not None and want.shape == tuple(image.shape):
        # Both read it: the same pixels (PIL reads the damaged files libpng accepts alike).
        assert np.array_equal(image.numpy(), want), label
    return True


def test_mutated_pngs_decode_or_are_refused(fuzz_trace):
    rng = random.Random(SEED)
    decoded = 0
    for case in range(CASES):
        base = rng.randrange(len(BASES))
        data = mutate(BASES[base], rng)
        mode = rng.choice(["RGB", "L", "mask"])
        label = f"case {case} (seed {SEED}, base {base}, mode {mode})"
        fuzz_trace(label)
        decoded += check_case(data, mode, label)
    # The mutations must not all be caught by the CRCs before any decoding.
    assert CASES < 100 or decoded > CASES // 20, decoded


def test_bases_decode_as_pil_does():
    for i, data in enumerate(BASES):
        for mode in ("RGB", "L", "mask"):
            if mode != "mask" or _pil(data, "mask") is not None:
                assert check_case(data, mode, f"base {i}"), (i, mode)


def test_a_zlib_bomb_after_the_image_data_is_bounded():
    """64 MiB of zeros after the rows, in the same zlib stream (64 KiB compressed): the
    image decodes, and libpng does not keep the extra data."""
    pixels = ps.photo(8, 8, seed=1)
    plain = ps.encode(pixels, ps.RGB, filters=(0,))
    raw = zlib.decompress(b"".join(p for k, p in ps.split_chunks(plain) if k == b"IDAT"))
    stream = zlib.compress(raw + bytes(64 << 20), 9)
    assert len(stream) < 100_000
    bomb = ps.join_chunks([(b"IHDR", ps.split_chunks(plain)[0][1]), (b"IDAT", stream), (b"IEND", b"")])
    assert np.array_equal(ops.decode_png(ps.as_tensor(bomb)).numpy(), pixels)
    assert np.array_equal(ops.decode_png(ps.as_tensor(bomb), window=[0, 0, 3, 8]).numpy(), pixels[:3])


def test_compressed_text_and_icc_bombs_are_never_inflated():
    """Skipped unparsed (their CRCs checked): the decode never sees what they hold."""
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in about 64 KiB
    data = ps.encode(ps.photo(5, 6, seed=2), ps.RGB,
                     before_idat=[(b"zTXt", b"k\x00\x00" + bomb), (b"iCCP", b"icc\x00\x00" + bomb)],
                     after_idat=[(b"iTXt", b"k\x00\x01\x00\x00\x00" + bomb)])
    assert np.array_equal(ops.decode_png(ps.as_tensor(data)).numpy(), ps.photo(5, 6, seed=2))
    broken = data.replace(b"icc\x00\x00" + bomb[:20], b"icc\x00\x00" + bytes(20), 1)  # its CRC now wrong
    with pytest.raises(RuntimeError, match=r"\(libpng: iCCP: CRC error\)"):
        ops.decode_png(ps.as_tensor(broken))


def _announcing(width, height, depth=16, color=6, interlace=1):
    """A PNG whose IHDR announces width x height (8 bytes a pixel, interlaced: the decoder's
    largest buffer) followed by 100 rows' worth of nothing."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace)
    return ps.SIGNATURE + ps.chunk(b"IHDR", ihdr) + ps.chunk(b"IDAT", zlib.compress(b"\x00" * 100)) + ps.chunk(b"IEND", b"")


@pytest.mark.parametrize("width, height", [(0x7FFFFFFF, 0x7FFFFFFF), (1 << 16, 1 << 16), (1, 0x7FFFFFFF), (20000, 9000)])
def test_huge_declared_sizes_are_refused_before_any_allocation(width, height):
    with pytest.raises(RuntimeError, match=rf"expected at most {ops.DEFAULT_MAX_PIXELS} pixels, got a {height}x{width}"):
        ops.decode_png(ps.as_tensor(_announcing(width, height)))


@pytest.mark.parametrize("width, height", [(0x7FFFFFFF, 1), (3000, 2000)])
def test_large_declared_sizes_without_a_limit_end_in_an_error_not_a_crash(width, height):
    # libpng's own limit (1e6 pixels a side), or the data missing after the header.
    with pytest.raises(RuntimeError, match=r"^fastload\.decode_png: expected a decodable PNG, got corrupt"):
        ops.decode_png(ps.as_tensor(_announcing(width, height)), max_pixels=0)


def test_mutated_pngs_in_the_engine_become_statuses(tmp_path, fuzz_trace):
    """Through the batch engine as the loader drives it: each sample OK or DECODE_ERROR
    (with a message), never a crash; good files next to bad ones unaffected."""
    from fastload.augment.plan import build_plan
    from fastload.native import DECODE_ERROR, OK
    from fastload.source.index import SampleIndex

    rng = random.Random(SEED + 1)
    paths, kinds = [], []
    for i in range(max(8, CASES // 20)):
        good = rng.random() < 0.3
        data = BASES[rng.randrange(len(BASES))] if good else mutate(BASES[rng.randrange(len(BASES))], rng)
        path = tmp_path / f"{i}.png"
        path.write_bytes(data)
        paths.append(str(path))
        kinds.append(good)
    index = SampleIndex.from_files(paths, [0] * len(paths))
    plan = build_plan([ops.RandomResizedCrop(12), ops.RandomHorizontalFlip()])
    plan.max_pixels = FUZZ_MAX_PIXELS
    engine = _ext.require_ops().BatchEngine(2)
    engine.set_index(torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                     torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes))
    engine.set_plan(plan)
    try:
        for start in range(0, len(paths), 16):
            samples = torch.arange(start, min(start + 16, len(paths)))
            fuzz_trace(f"engine batch at {start} (seed {SEED + 1})")
            out = torch.empty(len(samples), 3, 12, 12, dtype=torch.float32)
            status, messages = engine.wait(engine.submit(samples, out, 0))
            for slot, sample in enumerate(samples.tolist()):
                assert int(status[slot]) in (OK, DECODE_ERROR), (sample, int(status[slot]), messages[slot])
                if kinds[sample]:
                    assert int(status[slot]) == OK, (sample, messages[slot])
                if int(status[slot]) == DECODE_ERROR:
                    assert messages[slot], sample
    finally:
        engine.close()
