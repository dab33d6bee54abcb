"""Mutated JPEGs through fastload::decode_jpeg / jpeg_header: each either decodes to the
size its header announces or raises RuntimeError with a fastload message; the process
never crashes, hangs or leaks (a crash fails the whole run).

Seeded and deterministic: a failure names its case, and `make_case(seed, i)` rebuilds it.
The bases cover every chroma sampling libjpeg reads (4x2, 2x4, 3x1, 1x4...), baseline,
progressive and arithmetic coding, restart markers, gray, 2-component, CMYK/YCCK; the
mutations include SOF sizes up to 65535.

FASTLOAD_FUZZ_CASES sets the number of mutated cases (default 3000: a few seconds on one
core); FASTLOAD_FUZZ_SEED the seed. Runs standalone too (for sanitizer builds):
    FASTLOAD_FUZZ_CASES=100000 python tests/fuzz/test_decode_fuzz.py
"""

from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jpeg_samples as js  # noqa: E402

from fastload import ops  # noqa: E402

CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "3000"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20240229"))
# Mutated headers can announce huge images; a small limit keeps the run fast (the
# decoder would otherwise allocate the whole image before finding the data missing).
FUZZ_MAX_PIXELS = 1 << 20


def _bases():
    photo = js.photo(48, 64, seed=5)
    small = js.photo(19, 27, seed=8)
    cmyk = js.photo_cmyk(21, 29, seed=9)
    bases = [
        js.encode(photo, subsampling="4:2:0"),
        js.encode(photo, subsampling="4:4:4", restart_blocks=2),
        js.encode(photo, subsampling="4:2:2", progressive=True),
        js.encode(photo[..., 1]),
        js.encode(js.photo_cmyk(24, 40, seed=6), subsampling="4:4:4"),
        js.encode(js.photo(33, 17, seed=7), quality=100, progressive=True, subsampling="4:4:4"),
        js.make_ycck(js.encode(js.photo_cmyk(16, 24, seed=10), subsampling="4:4:4")),
        *js.ARITHMETIC_JPEGS.values(),
        js.progressive_with_scans(40),
    ]
    # Every luma sampling (1x1 chroma), alternately progressive and with restart markers.
    for i, sampling in enumerate(js.LUMA_SAMPLINGS):
        bases.append(js.encode_sampled(small, [sampling, (1, 1), (1, 1)], progressive=i % 2 == 1,
                                       restart_interval=(i % 3)))
    bases += [
        js.encode_sampled(small, [(4, 1), (2, 1), (2, 1)]),  # subsampled, not 1x1, chroma
        js.encode_sampled(small, [(2, 2), (1, 2), (2, 1)]),  # Cb and Cr sampled differently
        js.encode_sampled(small[..., 0], [(2, 2)]),  # gray with 2x2 factors
        js.encode_sampled(small[..., 0], [(1, 4)], progressive=True),
        js.encode_sampled(cmyk, [(2, 2), (1, 1), (1, 1), (2, 2)]),  # Adobe CMYK
        js.encode_sampled(cmyk, [(1, 2), (1, 1), (1, 1), (1, 2)], color_transform=2, restart_interval=1),  # YCCK
        js.encode_sampled(small, [(1, 1)] * 3, color_transform=0, progressive=True),  # Adobe RGB
    ]
    return bases


BASES = _bases()
# Files refused by design (no colour conversion for 2 components; more blocks per MCU than
# libjpeg's 10): mutated too.
UNDECODABLE_BASES = [
    js.encode_sampled(js.photo(19, 27, seed=8)[..., :2], [(2, 1), (1, 1)]),  # 2 components
    js.encode_sampled(js.photo(19, 27, seed=8), [(4, 2), (2, 1), (2, 1)]),  # 12 blocks per MCU (10 at most)
]
BASES += UNDECODABLE_BASES


def _sof(data: bytes) -> int:
    """Position of the frame header (SOF0..SOF15 except DHT / JPG / DAC), or -1."""
    for i in _markers(data):
        if 0xC0 <= data[i + 1] <= 0xCF and data[i + 1] not in (0xC4, 0xC8, 0xCC):
            return i
    return -1


def _markers(data: bytes):
    """Positions of marker bytes (FF xx, xx not 00 / FF / RSTn) in the file."""
    return [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] not in (0x00, 0xFF)
            and not 0xD0 <= data[i + 1] <= 0xD7]


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    if len(b) < 4:  # a stacked mutation cut it to almost nothing
        return bytes(b)
    kind = rng.randrange(9)
    if kind == 0:  # bit flips anywhere after SOI
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            b[rng.randrange(2, len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation
        del b[rng.randrange(2, len(b)) :]
    elif kind == 2:  # insertion of random bytes (or a marker prefix)
        at = rng.randrange(2, len(b))
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) if rng.random() < 0.7 else b"\xff"
    elif kind == 3:  # deletion
        at = rng.randrange(2, len(b))
        del b[at : at + rng.randint(1, 16)]
    elif kind == 4:  # marker damage: type byte or segment length
        at = rng.choice(_markers(data) or [0])
        if rng.random() < 0.5:
            b[at + 1] = rng.randrange(256)
        elif at + 3 < len(b):
            b[at + 2 : at + 4] = rng.choice([b"\x00\x00", b"\x00\x01", b"\xff\xff", bytes([rng.randrange(256)] * 2)])
    elif kind == 5:  # overwrite a run (zeros, 0xFF, random)
        at = rng.randrange(2, len(b))
        n = rng.randint(1, 64)
        fill = rng.choice([b"\x00", b"\xff", None])
        b[at : at + n] = fill * n if fill else bytes(rng.randrange(256) for _ in range(n))
    elif kind == 6:  # splice another file's bytes in (mixed tables and scans)
        other = rng.choice(BASES)
        at, src = rng.randrange(2, len(b)), rng.randrange(2, len(other))
        b[at : at + rng.randint(8, 256)] = other[src : src + rng.randint(8, 256)]
    elif kind == 7:  # the frame's height / width: 0, 1, off by a few, up to 65535
        at = _sof(data)
        if at >= 0 and at + 9 <= len(b):
            field = at + rng.choice([5, 7])
            old = int.from_bytes(b[field : field + 2], "big")
            new = rng.choice([0, 1, 65535, 65535 - rng.randrange(16), rng.randrange(65536),
                              max(0, old + rng.randint(-9, 9)), old * 2])
            b[field : field + 2] = min(new, 65535).to_bytes(2, "big")
    else:  # a component's sampling factors (0..15 each: libjpeg accepts 1..4) or id
        at = _sof(data)
        if at >= 0 and at + 10 <= len(b):
            ncomp = b[at + 9]
            c = at + 10 + 3 * rng.randrange(max(1, ncomp))
            if c + 2 < len(b):
                if rng.random() < 0.8:
                    b[c + 1] = rng.choice([rng.randint(1, 4) << 4 | rng.randint(1, 4), rng.randrange(256)])
                else:
                    b[c] = rng.randrange(256)
    if rng.random() < 0.15:  # stack a second mutation
        return mutate(bytes(b), rng)
    return bytes(b)


def make_case(seed: int, i: int):
    rng = random.Random(seed * 1_000_003 + i)
    data = mutate(rng.choice(BASES), rng)
    return data, rng


def run_case(data: bytes, rng: random.Random) -> str:
    t = js.as_tensor(data)
    try:
        height, width = ops.jpeg_header(t)[:2]
    except RuntimeError as error:
        assert str(error).startswith("fastload.jpeg_header: expected a"), str(error)
        height = width = None
    scale = rng.choice([1, 1, 2, 4, 8])
    channels = rng.choice([3, 3, 1])
    max_pixels = FUZZ_MAX_PIXELS if rng.random() < 0.9 else ops.DEFAULT_MAX_PIXELS // 64
    window = None
    if height and width and rng.random() < 0.5:
        top, left = rng.randrange(height), rng.randrange(width)
        window = [top, left, rng.randint(1, height - top), rng.randint(1, width - left)]
    try:
        out = ops.decode_jpeg(t, window, scale_denom=scale, channels=channels, max_pixels=max_pixels)
    except RuntimeError as error:
        message = str(error)
        assert message.startswith("fastload.decode_jpeg: expected a"), message
        return "error"
    # It decoded: then the header parsed, and the size is the announced one.
    assert height is not None
    top, left, h, w = window or [0, 0, height, width]
    expected = (-(-(top + h) // scale) - top // scale, -(-(left + w) // scale) - left // scale, channels)
    assert tuple(out.shape) == expected, (tuple(out.shape), expected)
    return "decoded"


def test_mutated_jpegs_decode_or_raise():
    outcomes = {"decoded": 0, "error": 0}
    for i in range(CASES):
        data, rng = make_case(SEED, i)
        try:
            outcomes[run_case(data, rng)] += 1
        except AssertionError as failure:
            raise AssertionError(f"case {i} (make_case({SEED}, {i})): {failure}") from failure
    # Both outcomes must occur, else the mutations are not exercising anything.
    assert outcomes["error"] > CASES // 10 and outcomes["decoded"] > CASES // 10, outcomes


def test_unmutated_bases_decode():
    for i, data in enumerate(BASES):
        expected = "error" if data in UNDECODABLE_BASES else "decoded"
        assert run_case(data, random.Random(0)) == expected, f"base {i}"


@pytest.mark.parametrize("base", range(len(BASES)))
def test_every_truncation_point_raises(base):
    # Every cut of the file, header and scan data alike, is an error (never grey pixels).
    data = BASES[base]
    for cut in range(0, len(data) - 1, 7):
        with pytest.raises(RuntimeError, match=r"^fastload\.decode_jpeg: expected a"):
            ops.decode_jpeg(js.as_tensor(data[:cut]))


if __name__ == "__main__":  # standalone: the sanitizer runner, long runs
    import time

    start = time.perf_counter()
    test_unmutated_bases_decode()
    test_mutated_jpegs_decode_or_raise()
    print(f"{CASES} mutated JPEGs (seed {SEED}) decoded or raised cleanly in {time.perf_counter() - start:.1f} s")
