"""fastload::decode_png against PIL, which is the reference (PNG is lossless, so every
comparison is exact): convert("RGB"), convert("L") and np.array() of label maps, over
every colour type and bit depth, Adam7, tRNS, short palettes, odd sizes, 1x1, files PIL
writes itself, windows, extra chunks, and the errors of bad input."""

from __future__ import annotations

import io
import os
import struct
import sys
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import png_samples as ps  # noqa: E402

from fastload import _ext, ops  # noqa: E402

pytestmark = [pytest.mark.skipif(not _ext.has_png(), reason="fastload._C is not built with libpng"),
              # PIL warns about palette transparency on every convert of such a file.
              pytest.mark.filterwarnings("ignore:Palette images with Transparency")]

SAMPLES = {s.name: s for s in ps.standard_samples()}


def decode(data: bytes, mode: str = "RGB", **kwargs) -> np.ndarray:
    return ops.decode_png(ps.as_tensor(data), mode=mode, **kwargs).numpy()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_kind_decodes_to_pils_rgb_and_l(name):
    data = SAMPLES[name].data
    for mode in ("RGB", "L"):
        got, want = decode(data, mode), ps.pil_decode(data, mode)
        assert got.shape == want.shape and got.dtype == np.uint8, (mode, got.shape, want.shape)
        assert np.array_equal(got, want), (mode, np.argwhere(got != want)[:5])


@pytest.mark.parametrize("name", sorted(n for n, s in SAMPLES.items() if s.mask))
def test_label_maps_decode_to_pils_array_indices_not_colours(name):
    got, want = decode(SAMPLES[name].data, "mask"), ps.pil_mask(SAMPLES[name].data)
    assert got.shape == want.shape and np.array_equal(got, want)


def test_mask_of_a_palette_file_gives_indices_past_the_palette_end_as_they_are():
    indices = np.array([[0, 1, 2, 3, 200, 255]], dtype=np.uint8)
    data = ps.encode(indices, ps.PALETTE, palette=np.array([[10, 20, 30], [40, 50, 60]]))
    assert decode(data, "mask").tolist() == indices.tolist() == ps.pil_mask(data).tolist()
    # As an image, PIL's black for the indices past the palette's two entries.
    assert decode(data).reshape(-1, 3).tolist() == [[10, 20, 30], [40, 50, 60]] + [[0, 0, 0]] * 4
    assert np.array_equal(decode(data), ps.pil_decode(data))


@pytest.mark.parametrize("name", sorted(n for n, s in SAMPLES.items() if not s.mask and n.endswith("_5x3")))
def test_mask_of_a_colour_alpha_or_16_bit_file_is_refused_naming_what_it_is(name):
    with Image.open(io.BytesIO(SAMPLES[name].data)) as image:
        pil_mode = image.mode
    with pytest.raises(RuntimeError, match=rf"^fastload\.decode_png: expected a label-map PNG for a mask .*, got a "
                                           rf"\d+-bit .* PNG \(PIL mode {pil_mode}\)"):
        decode(SAMPLES[name].data, "mask")


def _pil_corpus():
    """Files PIL writes (its zlib settings, filters and palettes), every mode it saves."""
    photo = ps.photo(37, 53, seed=3)
    rgb = Image.fromarray(photo)
    alpha = Image.fromarray(ps.photo(37, 53, seed=4)[..., 0])
    images = {
        "RGB": rgb, "RGBA": Image.merge("RGBA", (*rgb.split(), alpha)), "L": rgb.convert("L"),
        "LA": Image.merge("LA", (rgb.convert("L"), alpha)), "P": rgb.quantize(50), "1": rgb.convert("1"),
        "I;16": Image.fromarray((photo[..., 0].astype(np.uint16) * 300)).convert("I;16"),
        "P_adaptive": rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=7),
    }
    corpus = {}
    for name, image in images.items():
        for options in ({}, {"optimize": True}, {"compress_level": 0}, {"compress_level": 9}):
            buffer = io.BytesIO()
            image.save(buffer, "PNG", **options)
            corpus[f"{name}_{'_'.join(f'{k}{v}' for k, v in options.items()) or 'default'}"] = buffer.getvalue()
    buffer = io.BytesIO()
    images["P"].save(buffer, "PNG", transparency=3)
    corpus["P_transparency"] = buffer.getvalue()
    return corpus


PIL_CORPUS = _pil_corpus()


@pytest.mark.parametrize("name", sorted(PIL_CORPUS))
def test_files_pil_writes_decode_as_pil_reads_them(name):
    data = PIL_CORPUS[name]
    for mode in ("RGB", "L"):
        assert np.array_equal(decode(data, mode), ps.pil_decode(data, mode)), mode
    with Image.open(io.BytesIO(data)) as image:
        if image.mode in ("1", "L", "P"):
            assert np.array_equal(decode(data, "mask"), ps.pil_mask(data))


@pytest.mark.parametrize("name", ["rgb8_17x33", "rgb8_17x33_adam7", "pal2_64x9_adam7", "gray16_64x9", "ga8_17x33"])
def test_windows_are_exact_slices_of_the_whole_image(name):
    data = SAMPLES[name].data
    full = decode(data)
    height, width = full.shape[:2]
    rng = np.random.default_rng(7)
    windows = [[0, 0, height, width], [height - 1, width - 1, 1, 1], [0, 0, 1, width], [1, 0, 1, 1],
               [height // 2, 0, height - height // 2, width]]
    for _ in range(12):
        top, left = int(rng.integers(0, height)), int(rng.integers(0, width))
        windows.append([top, left, int(rng.integers(1, height - top + 1)), int(rng.integers(1, width - left + 1))])
    for top, left, h, w in windows:
        for mode, reference in (("RGB", full), ("L", decode(data, "L"))):
            got = decode(data, mode, window=[top, left, h, w])
            assert np.array_equal(got, reference[top:top + h, left:left + w]), (mode, top, left, h, w)


def test_a_window_needs_only_the_rows_down_to_its_last():
    """Rows below a non-interlaced window are never read: a file cut after them still
    gives the window's pixels (and refuses the rows it lost)."""
    # Stored (zlib level 0): a row's bytes lie where they are; libpng reads 8 KiB at a time.
    pixels = ps.photo(400, 20, seed=9)
    data = ps.encode(pixels, ps.RGB, filters=(0,), level=0)
    cut = data[:len(data) * 3 // 4]
    assert np.array_equal(decode(cut, window=[0, 0, 10, 20]), pixels[:10])
    with pytest.raises(RuntimeError, match=r"^fastload\.decode_png: expected a decodable PNG, got corrupt, truncated "
                                           r"or unsupported data \(libpng: unexpected end of file \(truncated\?\)\)"):
        decode(cut)


def test_extra_chunks_split_idat_and_chunks_after_the_image_change_nothing():
    pixels = ps.photo(9, 11, seed=2)
    plain = ps.encode(pixels, ps.RGB)
    text = zlib.compress(b"x" * 100000)  # a compressed text chunk is skipped, never inflated
    busy = ps.encode(pixels, ps.RGB, idat_parts=7,
                     before_idat=[(b"tEXt", b"k\x00v"), (b"zTXt", b"k\x00\x00" + text), (b"gAMA", b"\x00\x00\xb1\x8f"),
                                  (b"iCCP", b"p\x00\x00" + zlib.compress(b"junk")), (b"prVt", b"private")],
                     after_idat=[(b"tEXt", b"after\x00image"), (b"zzZz", b"")])
    assert np.array_equal(decode(busy), pixels) and np.array_equal(decode(plain), pixels)
    assert np.array_equal(decode(busy), ps.pil_decode(busy))


def _ihdr(width, height, depth=8, color=2, interlace=0):
    return struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace)


def _with_chunk(data: bytes, kind: bytes, payload: bytes) -> bytes:
    chunks = ps.split_chunks(data)
    return ps.join_chunks([(k, payload if k == kind else p) for k, p in chunks])


GOOD = ps.encode(ps.photo(6, 7, seed=1), ps.RGB)


@pytest.mark.parametrize("data, message", [
    (b"", r"expected a PNG, got 0 bytes \(empty file\)"),
    (bytes.fromhex("ffd8ffe000104a46"), r"expected a PNG \(starting with 89 50 4E 47 0D 0A 1A 0A\), got 8 bytes starting "
                                        r"with FF D8 FF E0 \(a JPEG file\)"),
    (GOOD[:20], r"expected a PNG header \(IHDR\) in the first 29 bytes, got only 20 bytes \(truncated file\)"),
    (ps.SIGNATURE + ps.chunk(b"IDAT", b"") * 3, r"expected the IHDR chunk \(13 bytes\) right after the PNG signature, "
                                                  r"got a chunk of 0 bytes typed 4 bytes starting with 49 44 41 54"),
    (_with_chunk(GOOD, b"IHDR", _ihdr(7, 6, depth=4)), r"expected a PNG colour type .* got colour type 2 at 4 bits"),
    (_with_chunk(GOOD, b"IHDR", _ihdr(0, 6)), r"expected a PNG size of 1 to 2\^31 - 1 pixels a side, got 6x0"),
    (_with_chunk(GOOD, b"IHDR", _ihdr(7, 6, interlace=2)), r"expected PNG compression method 0, filter method 0 and "
                                                             r"interlace 0 or 1, got 0, 0 and 2"),
    (GOOD[:-30], r"expected a decodable PNG, got corrupt, truncated or unsupported data \(libpng: "),
    # The file ends with IDAT's zlib checksum (Adler-32), IDAT's CRC, then IEND (12 bytes).
    (GOOD[:-17] + bytes([GOOD[-17] ^ 1]) + GOOD[-16:], r"\(libpng: IDAT: incorrect data check\)"),
    (GOOD[:-14] + bytes([GOOD[-14] ^ 1]) + GOOD[-13:], r"\(libpng: IDAT: CRC error\)"),
    (ps.encode(ps.photo(6, 7, seed=1), ps.RGB, before_idat=[(b"tEXt", b"k\x00v")]).replace(b"k\x00v", b"k\x00w"),
     r"\(libpng: tEXt: CRC error\)"),
    (ps.encode(ps.photo(6, 7, seed=1)[..., 0], ps.PALETTE), r"\(libpng: IDAT: Missing PLTE before IDAT\)"),
    (ps.join_chunks([(k, p) for k, p in ps.split_chunks(GOOD) if k != b"IDAT"]), r"\(libpng: .*\)"),
    # An unknown critical chunk (PIL skips it): the file says it cannot be read without it.
    (ps.encode(ps.photo(6, 7, seed=1), ps.RGB, before_idat=[(b"ABCD", b"xyz")]),
     r"\(libpng: ABCD: unhandled critical chunk\)"),
])
def test_bad_files_are_refused_saying_what_was_expected(data, message):
    with pytest.raises(RuntimeError, match=rf"^fastload\.decode_png: (.* )?{message}.*Fix or remove the file\.$"):
        decode(data)


def test_the_pixel_limit_is_checked_from_the_header_before_decoding():
    huge = ps.SIGNATURE + ps.chunk(b"IHDR", _ihdr(20000, 20000)) + ps.chunk(b"IEND", b"")  # no image data at all
    with pytest.raises(RuntimeError, match=r"expected at most 178956970 pixels, got a 20000x20000 image \(400000000 "
                                           r"pixels; a decompression bomb\?\)\. If the file is trusted, raise "
                                           r"max_pixels"):
        decode(huge)
    assert ops.DEFAULT_MAX_PIXELS == 178956970
    with pytest.raises(RuntimeError, match=r"expected at most 41 pixels, got a 6x7 image"):
        decode(GOOD, max_pixels=41)
    assert decode(GOOD, max_pixels=42).shape == (6, 7, 3) and decode(GOOD, max_pixels=0).shape == (6, 7, 3)


def test_bad_arguments_are_value_errors():
    data = ps.as_tensor(GOOD)
    with pytest.raises(ValueError, match=r"^fastload\.decode_png: expected mode \"RGB\", \"L\" or \"mask\", got \"P\""):
        ops.decode_png(data, mode="P")
    with pytest.raises(ValueError, match=r"expected a window \[top, left, height, width\] inside the 6x7 image"):
        ops.decode_png(data, window=[0, 0, 7, 7])
    with pytest.raises(RuntimeError, match=r"expected uint8 bytes, got dtype Int"):
        ops.decode_png(data.int())


def test_op_output_is_contiguous_and_owned():
    image = ops.decode_png(ps.as_tensor(SAMPLES["rgb8_17x33"].data), window=[2, 3, 5, 9])
    assert image.is_contiguous() and image.shape == (5, 9, 3) and image.dtype == torch.uint8
    mask = ops.decode_png(ps.as_tensor(SAMPLES["pal4_17x33"].data), mode="mask")
    assert mask.is_contiguous() and mask.shape == (17, 33)


def test_opcheck_in_every_mode():
    """(tests/ops/test_opcheck.py has the RGB case; the fake kernel's shape depends on the mode.)"""
    for mode in ("RGB", "L", "mask"):
        torch.library.opcheck(torch.ops.fastload.decode_png.default,
                              (ps.as_tensor(SAMPLES["pal8_17x33"].data), [1, 2, 5, 6], mode))
