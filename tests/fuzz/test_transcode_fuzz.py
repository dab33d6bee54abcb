"""Mutated prepared JPEGs, mutated segment indexes and mutated originals through
fastload::decode_jpeg_rows and fastload::transcode_jpeg: each call either returns what
the (mutated) file holds or raises a fastload error; the process never crashes, hangs or
reads out of bounds (the sanitizer run, scripts/sanitize.sh, checks the last).

Seeded and deterministic: a failure names its case. FASTLOAD_FUZZ_CASES sets the
number of cases per test (default 300: a few seconds on one core); FASTLOAD_FUZZ_SEED
the seed.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import jpeg_samples as js  # noqa: E402

from fastload import _ext  # noqa: E402

_ext.require_ops()
fl = torch.ops.fastload

CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "300"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20240311"))
# Mutated headers can announce large images: a small limit keeps every case fast.
FUZZ_MAX_PIXELS = 1 << 20


def _originals():
    photo = js.photo(61, 75, seed=21)
    return [
        js.encode(photo, subsampling="4:2:0"),
        js.encode(photo, subsampling="4:4:4", restart_blocks=3),
        js.encode(photo, subsampling="4:2:2", progressive=True),
        js.encode(photo[..., 1]),
        js.encode(js.photo_cmyk(30, 44, seed=22), subsampling="4:4:4"),
        js.encode_sampled(photo[:37, :45], [(1, 2), (1, 1), (1, 1)]),
        js.encode_sampled(photo[:37, :45], [(4, 1), (1, 1), (1, 1)], progressive=True),
        js.ARITHMETIC_JPEGS["baseline_420_restart2"],
    ]


ORIGINALS = _originals()
# Column tiles as the transcoder chooses them (whole rows where the row has no divisor),
# and tiles of 2 MCUs in a 4:2:0 file of 8 MCUs a row.
WIDE = js.encode(js.photo(45, 128, seed=23), subsampling="4:2:0")
PREPARED = [(fl.transcode_jpeg(js.as_tensor(d), r)) for d in ORIGINALS for r in (1, 2)] + \
    [fl.transcode_jpeg(js.as_tensor(d), -1) for d in ORIGINALS[1:5]] + [fl.transcode_jpeg(js.as_tensor(WIDE), -2)]
ACCEPTED = (RuntimeError,)


def _window(rng: random.Random, h: int, w: int):
    top, left = rng.randrange(h), rng.randrange(w)
    return [top, left, rng.randint(1, h - top), rng.randint(1, w - left)]


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(len(b))
        if kind == 0:
            b[at] = rng.randrange(256)
        elif kind == 1:
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 2:
            b[at:at + 2] = bytes([0xFF, rng.choice([0x00, 0xD0 + rng.randrange(8), 0xD9, 0xC4, 0xDA, 0xFF])])
        elif kind == 3:
            del b[at:at + rng.randint(1, 64)]
        else:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        if not b:
            b = bytearray(b"\xff")
    if rng.random() < 0.2:
        b = b[:rng.randrange(1, len(b) + 1)]
    return bytes(b)


def _mutate_segments(segments: torch.Tensor, size: int, rng: random.Random) -> torch.Tensor:
    s = segments.clone()
    k = s.shape[0]
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        i, j = rng.randrange(k), rng.randrange(2)
        if kind == 0:
            s[i, j] += rng.choice([-2, -1, 1, 2, 8])
        elif kind == 1:
            s[i, j] = rng.choice([-(2 ** 63), -1, 0, size - 1, size, size + 1, 2 ** 31, 2 ** 63 - 1])
        elif kind == 2 and k > 2:
            s = s[torch.randperm(k, generator=torch.Generator().manual_seed(rng.randrange(2 ** 31)))]
        elif kind == 3 and k > 2:
            s = torch.cat([s[:i], s[i + 1:]])
            k -= 1
        elif kind == 4:
            s = torch.cat([s[:i + 1], s[i:]])
            k += 1
        else:
            s[i, j] = rng.randrange(-5, size + 5)
    return s.contiguous()


def _decode_rows(jpeg, segments, window, scale, channels):
    try:
        out = fl.decode_jpeg_rows(jpeg, segments, window, scale, channels, FUZZ_MAX_PIXELS)
    except ACCEPTED as e:
        assert str(e).startswith("fastload.decode_jpeg_rows: "), str(e)
        return None
    except ValueError as e:  # a mutated header can make the window miss the image
        assert "inside the" in str(e), str(e)
        return None
    assert out.dim() == 3 and out.shape[2] == channels and 0 < out.shape[0] <= -(-window[2] // scale) + 1
    return out


def test_mutated_prepared_files_decode_or_raise(fuzz_trace):
    rng = random.Random(SEED)
    outcomes = {"decoded": 0, "error": 0}
    for case in range(CASES):
        jpeg, segments = PREPARED[case % len(PREPARED)]
        h, w = fl.jpeg_header(jpeg)[:2]
        data = _mutate_bytes(bytes(jpeg.numpy()), rng)
        window, scale, channels = _window(rng, h, w), rng.choice([1, 2, 4, 8]), rng.choice([1, 3])
        fuzz_trace(f"bytes case {case} (seed {SEED}) window={window} scale={scale}")
        out = _decode_rows(js.as_tensor(data), segments, window, scale, channels)
        outcomes["decoded" if out is not None else "error"] += 1
    assert outcomes["error"] > 0, outcomes


def test_mutated_segments_decode_exactly_or_raise(fuzz_trace):
    rng = random.Random(SEED + 1)
    outcomes = {"decoded": 0, "error": 0}
    for case in range(CASES):
        jpeg, segments = PREPARED[case % len(PREPARED)]
        h, w = fl.jpeg_header(jpeg)[:2]
        bad = _mutate_segments(segments, jpeg.numel(), rng)
        window, scale, channels = _window(rng, h, w), rng.choice([1, 2, 4, 8]), rng.choice([1, 3])
        fuzz_trace(f"segments case {case} (seed {SEED}) {bad.tolist()} window={window}")
        out = _decode_rows(jpeg, bad, window, scale, channels)
        if out is None:
            outcomes["error"] += 1
            continue
        # An index that still passes the checks is the true one: the pixels are exact.
        assert torch.equal(bad, segments), bad.tolist()
        want = fl.decode_jpeg(jpeg, window, scale, channels)
        assert torch.equal(out, want)
        outcomes["decoded"] += 1
    assert outcomes["error"] > CASES // 2, outcomes


def test_mutated_originals_transcode_or_raise(fuzz_trace):
    rng = random.Random(SEED + 2)
    outcomes = {"transcoded": 0, "error": 0}
    for case in range(CASES):
        data = _mutate_bytes(ORIGINALS[case % len(ORIGINALS)], rng)
        fuzz_trace(f"original case {case} (seed {SEED})")
        try:
            jpeg, segments = fl.transcode_jpeg(js.as_tensor(data), rng.choice([1, 2, 4, -1]), FUZZ_MAX_PIXELS)
        except ACCEPTED as e:
            assert str(e).startswith("fastload.transcode_jpeg: "), str(e)
            outcomes["error"] += 1
            continue
        outcomes["transcoded"] += 1
        # Whatever was transcoded is a well-formed prepared file.
        h, w = fl.jpeg_header(jpeg)[:2]
        window = _window(rng, h, w)
        np.testing.assert_array_equal(fl.decode_jpeg_rows(jpeg, segments, window).numpy(),
                                      fl.decode_jpeg(jpeg, window).numpy())
    assert outcomes["error"] > 0 and outcomes["transcoded"] > 0, outcomes


@pytest.mark.parametrize("index", range(4))
def test_every_truncation_of_a_prepared_file_raises(index):
    jpeg, segments = PREPARED[2 * index]
    data = bytes(jpeg.numpy())
    h, w = fl.jpeg_header(jpeg)[:2]
    for end in range(0, len(data) - 1, max(1, len(data) // 200)):
        with pytest.raises(RuntimeError, match="fastload.decode_jpeg_rows: "):
            fl.decode_jpeg_rows(js.as_tensor(data[:end]), segments, [0, 0, h, w])


def test_mutated_embedded_segment_index_decodes_exactly_or_raises(fuzz_trace, tmp_path):
    # The index inside the file (APP15 FLSEG, read by the engine for every JPEG) is
    # hostile input too: each field mutated, the engine either decodes the original's
    # pixels (an index that passes every check is the true one) or raises a DecodeError.
    import fastload
    from fastload import transforms as T
    from fastload.prepare import segments as seg

    rng = random.Random(SEED + 3)
    jpeg, segments = fl.transcode_jpeg(js.as_tensor(WIDE), -1)
    good = seg.embed_segments(bytes(jpeg.numpy()), segments.numpy())
    start = good.index(seg.IDENT) - 4
    end = start + 2 + ((good[start + 2] << 8) | good[start + 3])

    def load(data: bytes):
        path = tmp_path / "x.jpg"
        path.write_bytes(data)
        dataset = fastload.FileList([str(path)], transforms=[T.RandomResizedCrop(24, scale=(0.05, 0.5))], seed=3)
        return next(iter(fastload.DataLoader(dataset, batch_size=1)))[0]

    want = load(good)
    outcomes = {"decoded": 0, "error": 0}
    for case in range(max(10, CASES // 10)):
        b = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(start + 2, end)  # the length field, the version, the layout, the entries
            b[at] = rng.choice([0, 1, 2, 0xFF, rng.randrange(256), b[at] ^ (1 << rng.randrange(8))])
        fuzz_trace(f"embedded index case {case} (seed {SEED})")
        try:
            out = load(bytes(b))
        except fastload.DecodeError:
            outcomes["error"] += 1
            continue
        assert torch.equal(out, want)
        outcomes["decoded"] += 1
    assert outcomes["error"] > 0, outcomes
