"""Image headers read without decoding (fastload/decode/header.py) say what PIL says:
the size and mode of `Image.open`, and the orientation `ImageOps.exif_transpose` applies
(`Image.getexif()[0x0112]`), for EXIF orientations 1-8, files without EXIF or without
the tag, the tag as another integer type, XMP's orientation, and PNG's eXIf chunk."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image, ImageOps

from fastload.decode.header import Header, file_header, image_header, tiff_orientation

# PIL's transposes of a W x H image, by orientation: which swap width and height.
SWAPPED = {5, 6, 7, 8}


def _pil(data: bytes) -> Header:
    """What PIL says: Image.open's mode and size, and the orientation exif_transpose
    applies, found from what it does to a 3 x 2 image with distinct pixels."""
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        turned = ImageOps.exif_transpose(image)
        value = image.getexif().get(0x0112, 1)
        orientation = value if value in range(2, 9) else 1
        if orientation == 1:
            assert turned.size == image.size and turned.tobytes() == image.tobytes()
        else:
            assert turned.size == (image.size[::-1] if orientation in SWAPPED else image.size)
        return Header(image.mode, image.height, image.width, orientation)


def _ours(data: bytes) -> Header:
    return image_header(lambda offset, n: data[offset:offset + n], len(data))


def _image(mode: str = "RGB") -> Image.Image:
    image = Image.new(mode, (3, 2))
    image.putdata([(i * 40) % 256 if mode == "L" else ((i * 40) % 256, 0, 0) for i in range(6)])
    return image


def _save(fmt: str, exif: bytes = b"", mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    _image(mode).save(buffer, fmt, **({"exif": exif} if exif else {}))
    return buffer.getvalue()


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _tiff(kind: int, value: int, order: str = "<") -> bytes:
    """A TIFF block with one IFD0 entry: Orientation of TIFF type `kind`."""
    fmt = {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i", 2: "B", 7: "B"}[kind]
    field = struct.pack(order + fmt, value).ljust(4, b"\x00")
    magic = b"II*\x00" if order == "<" else b"MM\x00*"
    return magic + struct.pack(order + "IHHHI", 8, 1, 0x0112, kind, 1) + field + struct.pack(order + "I", 0)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations_1_to_8_are_what_exif_transpose_applies(fmt, orientation):
    data = _save(fmt, _exif(orientation))
    assert _ours(data) == _pil(data) == Header("RGB", 2, 3, orientation)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_no_exif_is_orientation_1(fmt):
    data = _save(fmt)
    assert _ours(data) == _pil(data)
    assert _ours(data).orientation == 1


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_without_an_orientation_tag_is_orientation_1(fmt):
    exif = Image.Exif()
    exif[0x010F] = "maker"  # Make, no Orientation
    data = _save(fmt, exif.tobytes())
    assert _ours(data) == _pil(data) == Header("RGB", 2, 3, 1)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("kind", [1, 3, 4, 6, 8, 9])
def test_each_integer_type_of_the_tag_is_read_as_pil_reads_it(kind, order):
    data = _save("JPEG", b"Exif\x00\x00" + _tiff(kind, 6, order))
    expected = 1 if kind == 1 else 6  # PIL reads a BYTE value as bytes: exif_transpose leaves it
    assert _ours(data) == _pil(data) == Header("RGB", 2, 3, expected)


@pytest.mark.parametrize("value", [0, 9, 200])
def test_values_exif_transpose_has_no_transpose_for_are_1(value):
    data = _save("JPEG", b"Exif\x00\x00" + _tiff(3, value))
    assert _ours(data) == _pil(data) == Header("RGB", 2, 3, 1)


def test_xmp_orientation_counts_where_exif_has_none():
    data = _save("JPEG")
    xmp = b'http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    data = data[:2] + b"\xff\xe1" + struct.pack(">H", len(xmp) + 2) + xmp + data[2:]
    assert _ours(data) == _pil(data) == Header("RGB", 2, 3, 6)


def test_grayscale_and_a_prefixed_png_exif_chunk():
    data = _save("JPEG", _exif(3), mode="L")
    assert _ours(data) == _pil(data) == Header("L", 2, 3, 3)
    png = _save("PNG", b"Exif\x00\x00" + _exif(8))  # eXIf holding JPEG's prefix too
    assert _ours(png) == _pil(png) == Header("RGB", 2, 3, 8)


def test_tiff_blocks_without_the_tag_say_none():
    assert tiff_orientation(b"") is None
    assert tiff_orientation(_tiff(3, 6)[:20]) is None  # cut inside the entry
    assert tiff_orientation(_tiff(3, 6)) == 6


def test_files_and_broken_files(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(_save("JPEG", _exif(5)))
    assert file_header(str(path)) == Header("RGB", 2, 3, 5)
    path.write_bytes(b"\xff\xd8\xff\xe0")  # cut in the first marker
    assert file_header(str(path)) is None
    assert file_header(str(tmp_path / "missing.jpg")) is None
    webp = tmp_path / "a.webp"
    webp.write_bytes(_save("WEBP", _exif(6)))
    assert file_header(str(webp)) == _pil(webp.read_bytes())
    assert file_header(str(webp), others=False) is None
