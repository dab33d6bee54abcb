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
    write_image_folder(root, ...)      an ImageFolder tree of JPEG files on disk
"""

from __future__ import annotations

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
