"""fastload::transcode_jpeg and fastload::decode_jpeg_rows (csrc/decode/transcode.cpp,
csrc/decode/decode_segments.cpp): the prepared-JPEG format and its partial decode.

References: decode_jpeg of the original file (itself tested against PIL in
test_decode_jpeg.py). Equality is exact everywhere: the transcode copies the DCT
coefficients, and a band of restart segments must decode to the same pixels as the
whole file.
"""

from __future__ import annotations

import io
import os
import random
import sys

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jpeg_samples as js  # noqa: E402

from fastload import _ext  # noqa: E402

_ext.require_ops()
fl = torch.ops.fastload


def transcode(data: bytes, restart_rows: int = 1):
    jpeg, segments = fl.transcode_jpeg(js.as_tensor(data), restart_rows)
    return jpeg, segments


def decode(data, window=(), scale=1, channels=3) -> np.ndarray:
    tensor = data if isinstance(data, torch.Tensor) else js.as_tensor(data)
    return fl.decode_jpeg(tensor, list(window), scale, channels).numpy()


def rows(jpeg, segments, window=(), scale=1, channels=3) -> np.ndarray:
    return fl.decode_jpeg_rows(jpeg, segments, list(window), scale, channels).numpy()


def mcu_height(data: bytes) -> int:
    """Pixel rows per MCU row of a baseline file's single scan (from its SOF)."""
    i = 2
    while True:
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1):
            n = data[i + 9]
            vs = [data[i + 11 + 3 * c] & 15 for c in range(n)]
            return 8 if n == 1 else 8 * max(vs)
        i += 2 + length


# Every chroma layout the decoder distinguishes: PIL's three, 4:4:0 and 4:1:1 (and the
# other luma factors) from the in-test writer, gray, CMYK, YCCK, Adobe RGB, progressive
# and restart-marked input, EXIF, odd sizes down to 1x1 and extreme aspect ratios.
def _corpus():
    out = {s.name: s.data for s in js.standard_samples()}
    small = js.photo(37, 45, seed=3)
    for h, v in js.LUMA_SAMPLINGS:
        out[f"sampled_{h}x{v}"] = js.encode_sampled(small, [(h, v), (1, 1), (1, 1)])
    out["sampled_440"] = js.encode_sampled(js.photo(53, 29, seed=4), [(1, 2), (1, 1), (1, 1)])
    out["sampled_411"] = js.encode_sampled(js.photo(29, 53, seed=4), [(4, 1), (1, 1), (1, 1)])
    out["sampled_cb_cr_differ"] = js.encode_sampled(small, [(2, 2), (1, 2), (2, 1)])
    out["sampled_gray_2x2"] = js.encode_sampled(small[..., 0], [(2, 2)])
    out["sampled_cmyk_2x2"] = js.encode_sampled(js.photo_cmyk(35, 41, seed=5), [(2, 2), (1, 1), (1, 1), (2, 2)])
    out["sampled_progressive_2x2"] = js.encode_sampled(small, [(2, 2), (1, 1), (1, 1)], progressive=True)
    out["rgb420_2000x3"] = js.encode(js.photo(2000, 3, seed=6))
    out["rgb420_3x2000"] = js.encode(js.photo(3, 2000, seed=7))
    out["rgb420_17x9"] = js.encode(js.photo(17, 9, seed=8))
    out["progressive420_restart_200x150"] = js.encode(js.photo(200, 150, seed=9), progressive=True, restart_blocks=5)
    return out


CORPUS = _corpus()
NAMES = sorted(CORPUS)


@pytest.mark.parametrize("name", NAMES)
def test_transcode_is_lossless(name):
    data = CORPUS[name]
    jpeg, _ = transcode(data)
    for channels in (3, 1):
        np.testing.assert_array_equal(decode(jpeg, channels=channels), decode(data, channels=channels))


@pytest.mark.parametrize("name", ["progressive420_97x131", "rgb420_97x131", "cmyk_97x131", "gray_97x131"])
@pytest.mark.parametrize("scale", [2, 4, 8])
def test_transcode_is_lossless_at_every_dct_scale(name, scale):
    data = CORPUS[name]
    jpeg, _ = transcode(data)
    np.testing.assert_array_equal(decode(jpeg, scale=scale), decode(data, scale=scale))


@pytest.mark.parametrize("restart_rows", [1, 2, 4, 8])
@pytest.mark.parametrize("name", ["rgb420_120x161", "rgb444_97x131", "gray_97x131", "progressive420_97x131",
                                  "restart7_120x161", "rgb420_1x1", "rgb420_2000x3"])
def test_segments_index_each_restart_segment(name, restart_rows):
    data = CORPUS[name]
    jpeg, segments = transcode(data, restart_rows)
    b = bytes(jpeg.numpy())
    assert segments.dtype == torch.int64 and segments.dim() == 2 and segments.shape[1] == 2
    header = fl.jpeg_header(jpeg)
    assert header[4] == 0, "the prepared file is baseline"
    mcu_rows = -(-header[0] // mcu_height(b))
    k = -(-mcu_rows // restart_rows)
    assert segments.shape[0] == k + 1
    offsets, first_rows = segments[:, 0].tolist(), segments[:, 1].tolist()
    assert first_rows == [restart_rows * i for i in range(k)] + [mcu_rows]
    sos = b.rfind(b"\xff\xda", 0, offsets[0])  # the header ends with the SOS segment
    assert sos > 0 and sos + 2 + int.from_bytes(b[sos + 2:sos + 4], "big") == offsets[0]
    for i in range(1, k):
        assert b[offsets[i] - 2:offsets[i]] == bytes([0xFF, 0xD0 + (i - 1) % 8])
    assert offsets[-1] == len(b) and b[-2:] == b"\xff\xd9"
    # No marker other than stuffing inside a segment's data.
    for i in range(k):
        data_i = b[offsets[i]:offsets[i + 1] - 2]
        positions = [j for j in range(len(data_i) - 1) if data_i[j] == 0xFF]
        assert all(data_i[j + 1] == 0 for j in positions)


def test_transcode_makes_progressive_and_arithmetic_input_baseline():
    for data in [CORPUS["progressive444_97x131"], js.ARITHMETIC_JPEGS["baseline_420_restart2"],
                 js.ARITHMETIC_JPEGS["progressive_Y4x2"]]:
        jpeg, _ = transcode(data)
        b = bytes(jpeg.numpy())
        assert b.count(b"\xff\xda") == 1 and b"\xff\xc0" in b
        np.testing.assert_array_equal(decode(jpeg), decode(data))


def test_transcode_keeps_exif_and_icc_and_the_colour_markers():
    icc = b"\x00\x00\x02\x0cfake icc profile bytes" * 4
    buffer = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(js.photo(40, 64, seed=1)).save(buffer, "JPEG", exif=exif.tobytes(), icc_profile=icc)
    jpeg, _ = transcode(buffer.getvalue())
    image = Image.open(io.BytesIO(bytes(jpeg.numpy())))
    assert image.getexif()[0x0112] == 6
    assert image.info["icc_profile"] == icc
    assert bytes(jpeg.numpy()).count(b"JFIF\x00") == 1
    cmyk, _ = transcode(CORPUS["cmyk_31x47"])
    assert bytes(cmyk.numpy()).count(b"Adobe") == 1
    assert fl.jpeg_header(cmyk)[3] == js.JCS_CMYK
    ycck, _ = transcode(CORPUS["ycck_31x47"])
    assert fl.jpeg_header(ycck)[3] == js.JCS_YCCK
    rgb, _ = transcode(CORPUS["adobe_rgb_33x45"])
    assert fl.jpeg_header(rgb)[3] == js.JCS_RGB


def test_transcode_optimises_huffman_tables():
    data = CORPUS["rgb420_120x161"]
    jpeg, _ = transcode(data, restart_rows=8)
    assert jpeg.numel() < len(data)


def _edge_windows(h: int, w: int, rng: random.Random):
    """Windows touching every edge and corner, single rows and columns, and random ones."""
    out = {(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, w - 1, h, 1), (h - 1, 0, 1, w),
           (0, 0, max(1, h // 3), w), (h - max(1, h // 3), 0, max(1, h // 3), w)}
    for _ in range(12):
        top, left = rng.randrange(h), rng.randrange(w)
        out.add((top, left, rng.randint(1, h - top), rng.randint(1, w - left)))
    for _ in range(4):  # thin horizontal bands at MCU-row boundaries (where bands begin and end)
        top = min(h - 1, rng.randrange(0, h, 8) if h > 8 else 0)
        out.add((top, 0, min(h - top, rng.randint(1, 3)), w))
    return sorted(out)


WINDOW_NAMES = [n for n in NAMES if not n.startswith("rgb420_1x") and not n.startswith("rgb444_1x")
                and not n.startswith("rgb422_1x")] + ["rgb420_1x37"]


@pytest.mark.parametrize("restart_rows", [1, 2])
@pytest.mark.parametrize("name", WINDOW_NAMES)
def test_rows_decode_equals_decode_jpeg_window_of_the_original(name, restart_rows):
    data = CORPUS[name]
    jpeg, segments = transcode(data, restart_rows)
    h, w = fl.jpeg_header(jpeg)[:2]
    rng = random.Random(name)
    for window in _edge_windows(h, w, rng):
        for scale in (1, 2, 4, 8):
            for channels in (3, 1):
                got = rows(jpeg, segments, window, scale, channels)
                want = decode(data, window, scale, channels)
                np.testing.assert_array_equal(got, want, err_msg=f"{name} window={window} 1/{scale} c={channels}")


@pytest.mark.parametrize("scale", [1, 2, 4])
@pytest.mark.parametrize("name", ["rgb420_120x161", "sampled_440", "sampled_1x4", "sampled_2x4",
                                  "progressive420_97x131"])
def test_rows_decode_of_every_thin_band_matches(name, scale):
    # Windows of 1 to scale + 1 rows at every position (every band boundary, every row
    # inside an MCU row): where chroma is upsampled vertically, a band without its
    # context rows differs at the window's first or last row.
    data = CORPUS[name]
    jpeg, segments = transcode(data, 1)
    h, w = fl.jpeg_header(jpeg)[:2]
    for height in (1, scale + 1):
        for top in range(0, h - height + 1):
            window = (top, 0, height, w)
            np.testing.assert_array_equal(rows(jpeg, segments, window, scale), decode(data, window, scale),
                                          err_msg=f"window={window}")


def test_rows_decode_reads_only_the_segments_it_needs():
    data = js.encode(js.photo(160, 96, seed=11))  # 4:2:0: 10 MCU rows
    jpeg, segments = transcode(data, 1)
    offsets = segments[:, 0].tolist()
    broken = jpeg.clone()
    # Garbage in the last segment (rows 144..159): the top rows never see it.
    broken[offsets[9]:offsets[10] - 2] = 0xFF
    np.testing.assert_array_equal(rows(broken, segments, (0, 0, 16, 96)), decode(data, (0, 0, 16, 96)))
    with pytest.raises(RuntimeError, match="fastload.decode_jpeg_rows: expected a decodable JPEG"):
        rows(broken, segments, (144, 0, 16, 96))


def test_rows_decode_of_a_one_segment_file_is_the_whole_decode():
    data = CORPUS["rgb420_1x1"]
    jpeg, segments = transcode(data)
    assert segments.shape[0] == 2
    np.testing.assert_array_equal(rows(jpeg, segments), decode(data))
    np.testing.assert_array_equal(rows(jpeg, segments, (0, 0, 1, 1), 8), decode(data, (0, 0, 1, 1), 8))


# ---- refused inputs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared():
    data = js.encode(js.photo(97, 131, seed=12))
    jpeg, segments = transcode(data, 1)
    return jpeg, segments


def test_transcode_refuses_bad_arguments_and_data():
    with pytest.raises(ValueError, match="expected restart_rows in 1..8, got 0"):
        fl.transcode_jpeg(js.as_tensor(CORPUS["rgb420_17x23"]), 0)
    with pytest.raises(RuntimeError, match="expected a JPEG, got 0 bytes"):
        fl.transcode_jpeg(torch.empty(0, dtype=torch.uint8), 1)
    with pytest.raises(RuntimeError, match="contiguous 1-D uint8"):
        fl.transcode_jpeg(torch.zeros(4, dtype=torch.int32), 1)
    with pytest.raises(RuntimeError, match="Premature end of JPEG file"):
        fl.transcode_jpeg(js.as_tensor(CORPUS["rgb420_97x131"][:-300]), 1)
    with pytest.raises(RuntimeError, match=r"expected at most 100 pixels, got a 97x131 image"):
        fl.transcode_jpeg(js.as_tensor(CORPUS["rgb420_97x131"]), 1, 100)


def test_transcode_refuses_progressive_files_that_stop_before_the_last_bit():
    with pytest.raises(RuntimeError, match="scans send every coefficient bit"):
        fl.transcode_jpeg(js.as_tensor(js.progressive_with_scans(40)), 1)


def test_rows_decode_refuses_segments_that_do_not_match(prepared):
    jpeg, segments = prepared
    k = segments.shape[0] - 1
    cases = {
        "2 segments for a file of 7 MCU rows": segments[[0, 1, k]],
        "rows \\(at least 2": segments[:1],
        "first offset of .* outside": segments + torch.tensor([[10 ** 9, 0]]),
        "a scan header that does not end where the index says": segments + torch.tensor([[1, 0]]),
        "MCU row 5 in row 1": segments + torch.tensor([[0, 0]] + [[0, 4]] + [[0, 0]] * (k - 1)),
        "offsets must increase": segments.clone().index_put_((torch.tensor([2]), torch.tensor([0])),
                                                             segments[1, 0] - 5),
        "no RST1 marker before offset": segments + torch.tensor([[0, 0], [0, 0], [1, 0]] + [[0, 0]] * (k - 2)),
        "no EOI marker": segments + torch.tensor([[0, 0]] * k + [[-1, 0]]),
        "outside|must increase and lie in": segments + torch.tensor([[0, 0]] * k + [[5, 0]]),
    }
    for message, bad in cases.items():
        with pytest.raises(RuntimeError, match=message):
            rows(jpeg, bad.contiguous(), (0, 0, 8, 8))
    with pytest.raises(RuntimeError, match=r"int64 \[K \+ 1, 2\]"):
        rows(jpeg, segments.int(), (0, 0, 8, 8))
    with pytest.raises(RuntimeError, match=r"int64 \[K \+ 1, 2\]"):
        rows(jpeg, segments.flatten(), (0, 0, 8, 8))


def test_rows_decode_refuses_truncated_or_unprepared_files(prepared):
    jpeg, segments = prepared
    with pytest.raises(RuntimeError, match="must increase and lie in the"):
        rows(jpeg[:-50].clone(), segments, (0, 0, 8, 8))
    with pytest.raises(RuntimeError, match="outside the 20-byte file"):
        rows(jpeg[:20].clone(), segments, (0, 0, 8, 8))
    original = js.encode(js.photo(97, 131, seed=12))  # no DRI: not a prepared file
    sos = original.find(b"\xff\xda")
    fake = torch.tensor([[sos + 14, 0], [len(original), 7]])
    with pytest.raises(RuntimeError, match="no restart interval"):
        rows(js.as_tensor(original), fake, (0, 0, 8, 8))
    progressive = CORPUS["progressive420_97x131"]
    with pytest.raises(RuntimeError, match="progressive, lossless or arithmetic-coded frame"):
        rows(js.as_tensor(progressive), torch.tensor([[progressive.find(b"\xff\xda") + 12, 0], [len(progressive), 7]]))
    with pytest.raises(RuntimeError, match="expected a JPEG"):
        rows(torch.zeros(100, dtype=torch.uint8), segments, (0, 0, 8, 8))


def test_rows_decode_refuses_corrupt_segment_data(prepared):
    jpeg, segments = prepared
    broken = jpeg.clone()
    start, end = segments[3, 0].item(), segments[4, 0].item() - 2
    broken[start:end] = torch.arange(end - start, dtype=torch.uint8) * 37
    with pytest.raises(RuntimeError, match="fastload.decode_jpeg_rows: expected a decodable JPEG"):
        rows(broken, segments, (48, 0, 16, 131))


def test_rows_decode_refuses_bad_windows_and_arguments(prepared):
    jpeg, segments = prepared
    with pytest.raises(ValueError, match="inside the 97x131 image"):
        rows(jpeg, segments, (90, 0, 8, 8))
    with pytest.raises(ValueError, match="scale_denom 1, 2, 4 or 8, got 3"):
        rows(jpeg, segments, (0, 0, 8, 8), 3)
    with pytest.raises(ValueError, match="channels 1 \\(luma\\) or 3"):
        rows(jpeg, segments, (0, 0, 8, 8), 1, 4)
    with pytest.raises(RuntimeError, match="expected at most 100 pixels"):
        fl.decode_jpeg_rows(jpeg, segments, [0, 0, 8, 8], 1, 3, 100)
