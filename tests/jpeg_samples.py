"""Test JPEGs made in memory with PIL, and PIL reference decodes. Shared by every test
that needs JPEG bytes (decode, augment, engine, loader).

Content is photo-like (smooth gradients, hard-edged shapes, fine periodic texture), not
noise: noise makes JPEGs large and hides chroma/edge bugs. Everything is deterministic
(seeded) and fast (the whole standard set takes about 50 ms to build, cached).

    >>> import jpeg_samples as js   # tests/ is on sys.path (tests/ops/*: see test_decode_jpeg.py)
    >>> data = js.encode(js.photo(48, 64), quality=90, subsampling="4:2:0")
    >>> js.pil_decode(data).shape
    (48, 64, 3)
    >>> [s.name for s in js.standard_samples()][:2]
    ['rgb420_1x1', 'rgb420_1x37']
    >>> js.write_image_folder(tmp_path, classes=2, per_class=3)   # root/class_0/img_0.jpg ...

Main entry points:
    photo(h, w, seed)                  uint8 [h, w, 3] photo-like pixels
    encode(pixels, ...)                JPEG bytes (subsampling, progressive, restart
                                       markers, EXIF orientation, mode L / RGB / CMYK)
    standard_samples(), sample(name)   the named corpus: every size / subsampling / kind
    as_tensor(data)                    uint8 1-D CPU tensor, the ops' input
    pil_decode(data, mode)             PIL's decode: Image.open(...).convert(mode)
    pil_draft(data, scale_denom, mode) PIL's DCT-scaled decode (draft), or None
    make_ycck(data), make_adobe_rgb(data)  re-labelled files for the other colour spaces
    encode_sampled(pixels, sampling, ...)  any sampling factors (LUMA_SAMPLINGS: every luma
                                       pair libjpeg reads), 1 to 4 components,
                                       baseline or progressive, restart markers
    progressive_with_scans(n)          a valid progressive file with exactly n scans
    ARITHMETIC_JPEGS                   arithmetic-coded files (SOF9, SOF10)
    write_image_folder(root, ...)      an ImageFolder tree of JPEG files on disk
"""

from __future__ import annotations

import base64
import functools
import io
import math
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from PIL import Image

__all__ = [
    "JpegSample",
    "SUBSAMPLINGS",
    "photo",
    "photo_cmyk",
    "encode",
    "make_ycck",
    "make_adobe_rgb",
    "standard_samples",
    "sample",
    "as_tensor",
    "pil_decode",
    "pil_draft",
    "write_image_folder",
    "LUMA_SAMPLINGS",
    "encode_sampled",
    "progressive_with_scans",
    "ARITHMETIC_JPEGS",
]

# PIL's `subsampling=` values, by name.
SUBSAMPLINGS: Dict[str, int] = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}

# libjpeg's J_COLOR_SPACE values, as jpeg_header reports them.
JCS_GRAYSCALE, JCS_RGB, JCS_YCBCR, JCS_CMYK, JCS_YCCK = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class JpegSample:
    """One test JPEG and what its header says.

    Attributes:
        name: unique, e.g. "rgb420_97x131", "gray_17x23", "cmyk_31x47", "progressive_...".
        data: the file's bytes.
        height, width: image size.
        components: 1 (gray), 3 (YCbCr or RGB) or 4 (CMYK or YCCK).
        color_space: libjpeg's J_COLOR_SPACE of the file (JCS_* constants above).
        progressive: progressive (multi-scan) file.
    """

    name: str
    data: bytes
    height: int
    width: int
    components: int
    color_space: int
    progressive: bool = False


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Photo-like RGB pixels: gradients + hard edges + texture.

    Returns:
        uint8 array [height, width, 3].
    """
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    h, w = max(height, 2), max(width, 2)
    img = np.empty((height, width, 3), np.float32)
    for c in range(3):  # a different smooth gradient per channel: real chroma
        a, b = rng.uniform(-1.5, 1.5, 2)
        img[..., c] = 128 + 90 * np.sin(2 * math.pi * (a * x / w + b * y / h) + rng.uniform(0, 2 * math.pi))
    for _ in range(4):  # flat-coloured shapes: sharp luma and chroma edges
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        r = rng.uniform(0.15, 0.4) * min(h, w) + 1
        if rng.random() < 0.5:
            mask = (y - cy) ** 2 + (x - cx) ** 2 < r * r
        else:
            mask = (np.abs(y - cy) < r) & (np.abs(x - cx) < 0.7 * r)
        img[mask] = 0.3 * img[mask] + 0.7 * rng.uniform(0, 255, 3)
    fy, fx = rng.uniform(0.2, 0.9, 2)  # fine texture (fabric, foliage)
    img += (14 * np.sin(fx * x + 0.5 * y) * np.cos(fy * y))[..., None]
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def photo_cmyk(height: int, width: int, seed: int = 0) -> np.ndarray:
    """CMYK ink values [height, width, 4] uint8 with real black (K) variation."""
    rgb = photo(height, width, seed).astype(np.int32)
    k = photo(height, width, seed + 1000)[..., 1].astype(np.int32) // 2  # 0..127
    cmy = 255 - rgb
    return np.concatenate([cmy, k[..., None]], axis=2).clip(0, 255).astype(np.uint8)


def encode(
    pixels: Union[np.ndarray, Image.Image],
    *,
    quality: int = 90,
    subsampling: Union[str, int] = "4:2:0",
    progressive: bool = False,
    restart_blocks: int = 0,
    exif_orientation: Optional[int] = None,
    mode: Optional[str] = None,
) -> bytes:
    """Encodes pixels to JPEG bytes with PIL (libjpeg-turbo).

    Args:
        pixels: uint8 [H, W, 3] (RGB), [H, W] (gray), [H, W, 4] (CMYK ink) or a PIL image.
        quality: 1..100.
        subsampling: "4:4:4", "4:2:2", "4:2:0" (or PIL's 0, 1, 2); ignored for gray.
        progressive: write a progressive (multi-scan) file.
        restart_blocks: restart interval in MCUs (DRI + RSTn markers); 0: none.
        exif_orientation: store an EXIF Orientation tag (1..8); pixels are not rotated.
        mode: PIL mode to convert to first ("L", "RGB", "CMYK").

    Returns:
        The JPEG file's bytes.
    """
    if isinstance(pixels, np.ndarray):
        channels = 1 if pixels.ndim == 2 else pixels.shape[2]
        image_mode = {1: "L", 3: "RGB", 4: "CMYK"}[channels]
        image = Image.fromarray(np.ascontiguousarray(pixels), image_mode)
    else:
        image = pixels
    if mode is not None and image.mode != mode:
        image = image.convert(mode)
    options = dict(quality=quality, progressive=progressive)
    if image.mode != "L":
        options["subsampling"] = SUBSAMPLINGS.get(subsampling, subsampling)
    if restart_blocks:
        options["restart_marker_blocks"] = restart_blocks
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        options["exif"] = exif.tobytes()
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


def make_ycck(cmyk_jpeg: bytes) -> bytes:
    """Re-labels a CMYK JPEG as YCCK (Adobe APP14 transform 2).

    PIL cannot write YCCK; with the flag changed, libjpeg (and PIL) decode the same
    coefficients through the YCCK -> CMYK path, which is what the test needs.
    """
    at = cmyk_jpeg.find(b"Adobe")
    assert at > 0, "not a PIL CMYK JPEG (no Adobe APP14 segment)"
    data = bytearray(cmyk_jpeg)
    data[at + 11] = 2  # "Adobe", version(2), flags0(2), flags1(2), transform(1)
    return bytes(data)


def make_adobe_rgb(ycbcr_jpeg: bytes) -> bytes:
    """Re-labels a 3-component JPEG as RGB: the JFIF APP0 becomes an Adobe APP14 with
    transform 0, so decoders skip the YCbCr -> RGB conversion."""
    assert ycbcr_jpeg[2:4] == b"\xff\xe0", "expected a JFIF APP0 right after SOI"
    app0_len = int.from_bytes(ycbcr_jpeg[4:6], "big")
    app14 = b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x00"
    return ycbcr_jpeg[:2] + app14 + ycbcr_jpeg[4 + app0_len:]


# Sizes that stress edges: 1x1, single rows and columns, odd sizes that are not multiples
# of the 8/16-pixel MCU, exact MCU multiples, and a few bigger ones for windows.
_SIZES = [(1, 1), (1, 37), (29, 1), (2, 3), (8, 8), (17, 23), (16, 32), (31, 47), (97, 131), (120, 161)]


@functools.lru_cache(maxsize=None)
def _standard() -> tuple:
    out: List[JpegSample] = []

    def add(name, data, h, w, comps, cs, progressive=False):
        out.append(JpegSample(name, data, h, w, comps, cs, progressive))

    for sub in ("4:2:0", "4:2:2", "4:4:4"):
        tag = sub.replace(":", "")
        for i, (h, w) in enumerate(_SIZES):
            add(f"rgb{tag}_{h}x{w}", encode(photo(h, w, seed=i), subsampling=sub), h, w, 3, JCS_YCBCR)
    for i, (h, w) in enumerate([(1, 1), (17, 23), (64, 80), (97, 131)]):
        add(f"gray_{h}x{w}", encode(photo(h, w, seed=50 + i)[..., 1]), h, w, 1, JCS_GRAYSCALE)
    for i, (h, w) in enumerate([(1, 1), (31, 47), (97, 131)]):
        cmyk = encode(photo_cmyk(h, w, seed=60 + i), subsampling="4:4:4")
        add(f"cmyk_{h}x{w}", cmyk, h, w, 4, JCS_CMYK)
        add(f"ycck_{h}x{w}", make_ycck(cmyk), h, w, 4, JCS_YCCK)
    for sub in ("4:2:0", "4:4:4"):
        tag = sub.replace(":", "")
        for i, (h, w) in enumerate([(17, 23), (97, 131)]):
            data = encode(photo(h, w, seed=70 + i), subsampling=sub, progressive=True)
            add(f"progressive{tag}_{h}x{w}", data, h, w, 3, JCS_YCBCR, True)
    for i, (h, w, blocks) in enumerate([(31, 47, 1), (97, 131, 3), (120, 161, 7)]):
        data = encode(photo(h, w, seed=80 + i), subsampling="4:2:0", restart_blocks=blocks)
        add(f"restart{blocks}_{h}x{w}", data, h, w, 3, JCS_YCBCR)
    add("gray_progressive_40x56", encode(photo(40, 56, seed=90)[..., 0], progressive=True), 40, 56, 1,
        JCS_GRAYSCALE, True)
    add("adobe_rgb_33x45", make_adobe_rgb(encode(photo(33, 45, seed=91), subsampling="4:4:4")), 33, 45, 3, JCS_RGB)
    add("exif_rotate90_40x64", encode(photo(40, 64, seed=92), exif_orientation=6), 40, 64, 3, JCS_YCBCR)
    add("q100_444_57x75", encode(photo(57, 75, seed=93), quality=100, subsampling="4:4:4"), 57, 75, 3, JCS_YCBCR)
    add("q20_420_57x75", encode(photo(57, 75, seed=94), quality=20), 57, 75, 3, JCS_YCBCR)
    return tuple(out)


def standard_samples(kinds: Optional[Sequence[str]] = None) -> List[JpegSample]:
    """The standard corpus: every size x subsampling, gray, CMYK, YCCK, progressive,
    restart markers, Adobe RGB, EXIF, extreme qualities.

    Args:
        kinds: keep samples whose name starts with one of these prefixes ("rgb420",
            "gray", "cmyk", ...); None: all.
    """
    samples = list(_standard())
    if kinds is not None:
        samples = [s for s in samples if s.name.startswith(tuple(kinds))]
    return samples


def sample(name: str) -> JpegSample:
    """The standard sample with that name."""
    for s in _standard():
        if s.name == name:
            return s
    raise KeyError(f"no standard JPEG sample named {name!r}; see standard_samples()")


def noise_jpeg(rng: np.random.Generator, height: int, width: int) -> bytes:
    """An RGB JPEG of uniform noise (PIL, quality 90): small files whose pixels differ
    everywhere, for tests about where bytes go rather than what they decode to."""
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def as_tensor(data: bytes):
    """JPEG bytes as the ops take them: a uint8 1-D CPU tensor (a copy)."""
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def pil_decode(data: bytes, mode: str = "RGB") -> np.ndarray:
    """PIL's decode: Image.open(...).convert(mode) (no EXIF transpose).

    mode "L" on a YCbCr or gray file is the luma plane (PIL's draft("L"), libjpeg's
    JCS_GRAYSCALE output); on a CMYK file it is convert("L") of the RGB conversion.

    Returns:
        uint8 [H, W, 3] for "RGB", [H, W] for "L".
    """
    image = Image.open(io.BytesIO(data))
    if mode == "L" and image.mode in ("RGB", "YCbCr", "L"):
        image.draft("L", image.size)
    return np.asarray(image.convert(mode))


def pil_draft(data: bytes, scale_denom: int, mode: str = "RGB") -> Optional[np.ndarray]:
    """PIL's DCT-scaled decode at exactly 1/scale_denom (libjpeg's scale_denom, ISLOW,
    fancy upsampling), or None where PIL's draft() cannot pick that scale (images
    smaller than scale_denom pixels).

    Returns:
        uint8 [ceil(H/d), ceil(W/d), 3] for "RGB", [.., ..] for "L", or None.
    """
    image = Image.open(io.BytesIO(data))
    w, h = image.size
    if w < scale_denom or h < scale_denom:
        return None
    if image.mode in ("RGB", "YCbCr", "L"):
        draft_mode = mode if mode in ("RGB", "L") else None
    else:
        draft_mode = None  # CMYK: scaled in its own mode, converted below
    # PIL picks scale = largest s in (1, 2, 4, 8) <= min(w // req_w, h // req_h):
    # requesting (w // d, h // d) gives exactly d.
    image.draft(draft_mode, (w // scale_denom, h // scale_denom))
    expected = (-(-w // scale_denom), -(-h // scale_denom))
    if image.size != expected:
        return None
    return np.asarray(image.convert(mode))


def write_image_folder(
    root: Union[str, os.PathLike],
    classes: int = 2,
    per_class: int = 3,
    size: Sequence[int] = (48, 64),
    seed: int = 0,
    **encode_options,
) -> List[str]:
    """Writes a torchvision ImageFolder tree: root/class_<c>/img_<i>.jpg.

    Sizes vary a little per image (size +- 25 %), so batches hold different shapes.

    Returns:
        The file paths, sorted like ImageFolder sorts them.
    """
    rng = np.random.default_rng(seed)
    paths = []
    for c in range(classes):
        folder = os.path.join(os.fspath(root), f"class_{c}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            h = max(1, int(size[0] * rng.uniform(0.75, 1.25)))
            w = max(1, int(size[1] * rng.uniform(0.75, 1.25)))
            path = os.path.join(folder, f"img_{i}.jpg")
            with open(path, "wb") as f:
                f.write(encode(photo(h, w, seed=seed * 1000 + c * 100 + i), **encode_options))
            paths.append(path)
    return sorted(paths)


# ---- a small baseline / progressive JPEG writer for any sampling factors ----------------
#
# PIL (libjpeg's cjpeg defaults) only writes 4:4:4, 4:2:2 and 4:2:0. libjpeg reads any
# sampling factors from 1 to 4 with at most 10 blocks per MCU (4x2 or 2x4 luma, 3x1,
# 1x4, subsampled CMYK, 2-component files...), and its crop and DCT-scaling paths
# differ for each, so the tests write such files themselves. The writer is plain
# sequential Huffman JPEG (or progressive with spectral selection only); exactness of
# the codec does not matter here (tests compare our decodes with each other or with
# PIL's decode of the same file), only that libjpeg reads the file without a warning.

# Every luma (h, v) sampling pair libjpeg accepts with 1x1 chroma (h * v + 2 <= 10 blocks
# per MCU, each factor 1..4).
LUMA_SAMPLINGS = [(h, v) for h in range(1, 5) for v in range(1, 5) if h * v + 2 <= 10]


def _zigzag() -> np.ndarray:
    order = sorted(((y, x) for y in range(8) for x in range(8)),
                   key=lambda p: (p[0] + p[1], p[0] if (p[0] + p[1]) % 2 else p[1]))
    return np.array([y * 8 + x for y, x in order])


_ZIGZAG = _zigzag()
_DCT = np.array([[(math.sqrt(0.125) if u == 0 else 0.5) * math.cos((2 * x + 1) * u * math.pi / 16)
                  for x in range(8)] for u in range(8)])
# Huffman tables: every DC size category (0..11) at 4 bits and every AC run/size symbol
# (EOB, ZRL, runs 0..15 x sizes 1..10) at 8 bits; valid canonical codes, no all-ones code.
_DC_SYMBOLS = list(range(12))
_AC_SYMBOLS = [0x00, 0xF0] + [(r << 4) | s for r in range(16) for s in range(1, 11)]


def _huffman_segment(table_class: int, table_id: int, symbols: List[int], length: int) -> bytes:
    counts = [0] * 16
    counts[length - 1] = len(symbols)
    body = bytes([(table_class << 4) | table_id]) + bytes(counts) + bytes(symbols)
    return b"\xff\xc4" + (len(body) + 2).to_bytes(2, "big") + body


def _codes(symbols: List[int], length: int) -> Dict[int, tuple]:
    return {s: (i, length) for i, s in enumerate(symbols)}


_DC_CODES, _AC_CODES = _codes(_DC_SYMBOLS, 4), _codes(_AC_SYMBOLS, 8)


class _BitWriter:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.bits = 0

    def put(self, value: int, bits: int):
        self.acc = (self.acc << bits) | (value & ((1 << bits) - 1))
        self.bits += bits
        while self.bits >= 8:
            self.bits -= 8
            byte = (self.acc >> self.bits) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)  # byte stuffing
        self.acc &= (1 << self.bits) - 1

    def flush(self):
        if self.bits:
            self.put((1 << (8 - self.bits)) - 1, 8 - self.bits)  # pad with 1 bits


def _magnitude(v: int) -> tuple:
    size = int(abs(v)).bit_length()
    return size, (v if v >= 0 else v + (1 << size) - 1)


def _put_value(w: _BitWriter, code: tuple, v: int):
    size, bits = _magnitude(v)
    w.put(*code)
    if size:
        w.put(bits, size)


def _put_ac(w: _BitWriter, zz: np.ndarray, start: int, end: int):
    run = 0
    for k in range(start, end + 1):
        v = int(zz[k])
        if v == 0:
            run += 1
            continue
        while run > 15:
            w.put(*_AC_CODES[0xF0])
            run -= 16
        size, bits = _magnitude(v)
        w.put(*_AC_CODES[(run << 4) | size])
        w.put(bits, size)
        run = 0
    if run:
        w.put(*_AC_CODES[0x00])  # EOB


def encode_sampled(
    pixels: np.ndarray,
    sampling: Sequence[Sequence[int]] = ((2, 2), (1, 1), (1, 1)),
    *,
    quality: int = 90,
    restart_interval: int = 0,
    progressive: bool = False,
    color_transform: Optional[int] = None,
) -> bytes:
    """Writes a JPEG with any sampling factors (libjpeg accepts 1..4 each, at most 10
    blocks per MCU; every component's factors must divide the largest ones).

    Args:
        pixels: uint8 [H, W] (one component), [H, W, 3] RGB (stored as YCbCr unless
            color_transform=0), or [H, W, C] stored as is (C = 2 or 4: CMYK ink values).
        sampling: (h, v) per component.
        quality: 1..100 (a flat quantisation table, coarser with lower quality).
        restart_interval: DRI in MCUs (RSTn markers); 0: none.
        progressive: SOF2 with a DC scan and one AC scan per component (spectral
            selection only), else baseline SOF0.
        color_transform: write an Adobe APP14 segment with this transform (0: none,
            1: YCbCr, 2: YCCK); None: JFIF for 1 and 3 components, Adobe 0 for 4.

    Returns:
        The JPEG file's bytes.
    """
    planes = pixels[..., None] if pixels.ndim == 2 else pixels
    height, width, ncomp = planes.shape
    assert len(sampling) == ncomp, "one (h, v) per component"
    data = planes.astype(np.float64)
    if ncomp == 3 and color_transform in (None, 1):
        r, g, b = data[..., 0], data[..., 1], data[..., 2]
        data = np.stack([0.299 * r + 0.587 * g + 0.114 * b,
                         128 - 0.168736 * r - 0.331264 * g + 0.5 * b,
                         128 + 0.5 * r - 0.418688 * g - 0.081312 * b], axis=2)
    if ncomp == 4 and color_transform is None:
        color_transform = 0
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    mcus_x, mcus_y = -(-width // (8 * hmax)), -(-height // (8 * vmax))
    step = max(1, (100 - quality) // 4)
    qtable = np.array([min(255, 1 + step * (1 + (k // 8 + k % 8) // 2)) for k in range(64)])  # zigzag order

    # Each component: downsampled by box averaging, padded to whole MCUs by replication,
    # then quantised DCT blocks [rows, cols, 64] in zigzag order.
    blocks, block_dims = [], []
    for c, (h, v) in enumerate(sampling):
        fy, fx = vmax // v, hmax // h
        comp_h, comp_w = -(-height * v // vmax), -(-width * h // hmax)
        padded = np.pad(data[..., c], ((0, comp_h * fy - height), (0, comp_w * fx - width)), mode="edge")
        plane = padded.reshape(comp_h, fy, comp_w, fx).mean(axis=(1, 3))
        rows, cols = mcus_y * v * 8, mcus_x * h * 8
        plane = np.pad(plane, ((0, rows - comp_h), (0, cols - comp_w)), mode="edge") - 128
        tiles = plane.reshape(rows // 8, 8, cols // 8, 8).transpose(0, 2, 1, 3)
        coef = np.einsum("ux,abxy,vy->abuv", _DCT, tiles, _DCT).reshape(rows // 8, cols // 8, 64)
        blocks.append(np.clip(np.rint(coef[..., _ZIGZAG] / qtable), -1023, 1023).astype(np.int64))
        block_dims.append((-(-comp_h // 8), -(-comp_w // 8)))  # blocks of a non-interleaved scan

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    out = bytearray(b"\xff\xd8")
    if color_transform is None:
        out += segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    else:
        out += segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00" + bytes([color_transform]))
    out += segment(0xDB, b"\x00" + bytes(int(q) for q in qtable))
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([ncomp])
    for c, (h, v) in enumerate(sampling):
        sof += bytes([c + 1, (h << 4) | v, 0])
    out += segment(0xC2 if progressive else 0xC0, sof)
    out += _huffman_segment(0, 0, _DC_SYMBOLS, 4) + _huffman_segment(1, 0, _AC_SYMBOLS, 8)
    if restart_interval:
        out += segment(0xDD, restart_interval.to_bytes(2, "big"))

    def scan(components: List[int], start: int, end: int):
        out.extend(segment(0xDA, bytes([len(components)]) + b"".join(bytes([c + 1, 0x00]) for c in components)
                           + bytes([start, end, 0])))
        w = _BitWriter()
        pred = [0] * ncomp
        if len(components) > 1:  # interleaved: MCU by MCU
            units = [[(c, my * sampling[c][1] + by, mx * sampling[c][0] + bx)
                      for c in components for by in range(sampling[c][1]) for bx in range(sampling[c][0])]
                     for my in range(mcus_y) for mx in range(mcus_x)]
        else:  # one component: its own blocks in raster order, one block per MCU
            c = components[0]
            units = [[(c, by, bx)] for by in range(block_dims[c][0]) for bx in range(block_dims[c][1])]
        for i, unit in enumerate(units):
            if restart_interval and i and i % restart_interval == 0:
                w.flush()
                out.extend(w.out)
                out.extend(bytes([0xFF, 0xD0 + (i // restart_interval - 1) % 8]))
                w.out.clear()
                pred = [0] * ncomp
            for c, by, bx in unit:
                zz = blocks[c][by, bx]
                if start == 0:
                    _put_value(w, _DC_CODES[_magnitude(int(zz[0]) - pred[c])[0]], int(zz[0]) - pred[c])
                    pred[c] = int(zz[0])
                if end > 0:
                    _put_ac(w, zz, max(start, 1), end)
        w.flush()
        out.extend(w.out)

    if progressive:
        scan(list(range(ncomp)), 0, 0)
        for c in range(ncomp):
            scan([c], 1, 63)
    else:
        scan(list(range(ncomp)), 0, 63)
    out += b"\xff\xd9"
    return bytes(out)


def progressive_with_scans(scans: int) -> bytes:
    """A valid 8x8 gray progressive JPEG with exactly `scans` scans (2..694): a DC scan,
    then for each AC coefficient a first scan at Al=10 and refinements down to Al=0 (a
    flat image: every scan is one byte of data). The shape of a scan-count bomb: each
    scan is legal, and libjpeg re-reads the whole coefficient buffer for each.
    """
    assert 1 <= scans <= 1 + 63 * 11

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    out = bytearray(b"\xff\xd8")
    out += segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    out += segment(0xDB, b"\x00" + bytes([1] * 64))
    out += segment(0xC2, bytes([8, 0, 8, 0, 8, 1, 1, 0x11, 0]))
    out += _huffman_segment(0, 0, _DC_SYMBOLS, 4) + _huffman_segment(1, 0, _AC_SYMBOLS, 8)
    out += segment(0xDA, bytes([1, 1, 0x00, 0, 0, 0x00])) + b"\x0f"  # DC diff 0 (4 bits), padding
    bands = [(k, ah, al) for k in range(1, 64) for ah, al in [(0, 10)] + [(a + 1, a) for a in range(9, -1, -1)]]
    for k, ah, al in bands[: scans - 1]:
        out += segment(0xDA, bytes([1, 1, 0x00, k, k, (ah << 4) | al])) + b"\x00"  # EOB0 (8 bits)
    out += b"\xff\xd9"
    return bytes(out)


# Arithmetic-coded JPEGs (SOF9 / SOF10), which neither PIL nor encode_sampled writes:
# made once with libjpeg-turbo 2.1.5 (arith_code = TRUE), a 24x40 sine / stripe pattern.
#   baseline_420_restart2: SOF9, 4:2:0, restart interval 2 MCUs, 40 wide x 24 high.
#   progressive_Y4x2: SOF10, jpeg_simple_progression, 4x2 luma / 1x1 chroma, 24 x 40 high.
ARITHMETIC_JPEGS: Dict[str, bytes] = {
    "baseline_420_restart2": base64.b64decode(
        "/9j/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/2wBD"
        "AQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjL/yQARCAAYACgD"
        "ASIAAhEBAxEB/8wACgAQEAUBEBEF/90ABAAC/9oADAMBAAIRAxEAPwD/AHLJKMd8v5jsJaZ7MVsrjquUQWIlaPjelmkl9XF+Mpm/"
        "TpfYF0pcHpV0Ux8RMIAcO7gVF9Z90rVaM3o8iUeaMXwyvY4G327R7gPdt2iDTHH+Ef5JzDIqarlAiTr9qfErAEL7vehaXeShci+v"
        "gJc+RgncexQRBJdPA2qbG61PqRYOKqQk0dydS3T5pN9DeARgCbXGrSbv/v6J31e11P/Q/cDkhakwmNX9RE8+TUx9jIrMtQ3iws3Y"
        "BP8AWEeQshdofbLmclu8Jv6pnmlIR9QQvtMbsHiCLWEBi11nO82p9ibpeA+Z/UjFdI49t0lA1h+sEuS9PnXFbEYQyqECZscdGXGH"
        "cfEf6yv+teKnF1SnHv/R0WaBR9WNLfD/AP3xVQAOdE50PPP4mnpprPWx8noF2UCc/XtIxOEK1cF65H/ak6UchEJLOu5aIclEWRfe"
        "sjt53Q+9dCO9T/5mq7O+Sk/JuQ4CkLreCpcO3FEgnNGA/9k="),
    "progressive_Y4x2": base64.b64decode(
        "/9j/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/2wBD"
        "AQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjL/ygARCAAoABgD"
        "AUIAAhEBAxEB/8wABgAQARD/2gAMAwEAAhADEAAAAf7mP/EWAgQP9mt6P1fYq/3Qo6t1MG4yEv/MAAQQBf/aAAgBAQABBQIUMsw+"
        "L6a+gXhpgtCVCUH0SDPkkxYJ4GjbL0A8/8wABBEF/9oACAEDAQE/ASSKAzXQdUiMUkjkiRy+L//MAAQRBf/aAAgBAgEBPwE1e4kY"
        "MvAegBCXA53Yg343j+vcsLcVGqNbjY+q8P/MAAQQBf/aAAgBAQAGPwJn3b8ukUGDiCzGQP/MAAQQBf/aAAgBAQABPyE4IRWaTOgI"
        "Wrgqn2RI1ORk7ulCawgDnybw3QVquPpim+lUpNhx/9oADAMBAAIAAwAAABAcEaBc/8wABBEF/9oACAEDAQE/EOPZWsD1fiYg/8wA"
        "BBEF/9oACAECAQE/ENdX7rt5wPclWlsYzeLksEgVZkpmkPx3TPtQ/8wABBAF/9oACAEBAAE/EKaKsp3eOQm9GJPBdwSyZzWvHpdb"
        "fW/8L13X5M5pR3qMOzXLwohdjzYJ1w44LlpVjykxb3C+EXHiXtPEHhiUU+dwbas0p8lSiqJy/9k="),
}
