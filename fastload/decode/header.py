"""Image headers read without decoding pixels: mode, size and the EXIF orientation.

What PIL says of an image, read from its JPEG markers or PNG chunks only: `mode`,
`height`, `width` as `PIL.Image.open` gives them, and `orientation`, the one
`PIL.ImageOps.exif_transpose` applies (1-8; 1 when the image is to be left as stored).
The bytes come through `read(offset, n)`, so they may lie in a file, a tar member or an
Arrow table; other formats are opened with PIL (which decodes them), or left out.

The orientation follows PIL (`Image.getexif()[0x0112]`, then exif_transpose's table):

- JPEG: the Exif APP1 segments (PIL joins them; IFD0 is in the first), PNG: the last
  eXIf chunk (anywhere: datasets and exif_transpose load the image first);
- the Orientation tag of IFD0 as SHORT, LONG, SBYTE, SSHORT or SLONG (PIL reads these
  as ints), its first value; a value exif_transpose has no transpose for (0, 9, ...) is
  1, as is a tag of another type (BYTE: PIL reads bytes; no writer makes one);
- no EXIF, a cut or unreadable TIFF block, no Orientation tag: the XMP packet's
  `tiff:Orientation` (one digit, as PIL's pattern), else 1. (PNG's ImageMagick
  "Raw profile type exif" text chunk is not read.)

Example:
    >>> import io
    >>> from PIL import Image
    >>> exif = Image.Exif(); exif[0x0112] = 6
    >>> buffer = io.BytesIO(); Image.new("RGB", (40, 24)).save(buffer, "JPEG", exif=exif)
    >>> data = buffer.getvalue()
    >>> image_header(lambda offset, n: data[offset:offset + n], len(data))
    Header(mode='RGB', height=24, width=40, orientation=6)
    >>> buffer = io.BytesIO(); Image.new("L", (5, 7)).save(buffer, "PNG")
    >>> data = buffer.getvalue()
    >>> image_header(lambda offset, n: data[offset:offset + n], len(data))
    Header(mode='L', height=7, width=5, orientation=1)
"""

from __future__ import annotations

import io
import os
import re
import struct
import zlib
from typing import Callable, NamedTuple, Optional

# Bytes read first from the start of an image to find its header (SOF / IHDR / EXIF);
# what lies past them is read where the markers point (a JPEG's header is ~1 KB without
# an EXIF thumbnail: 4 KB covers most files in one read).
HEAD_BYTES = 4096
# What a PNG file starts with (its signature), the one check of it.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The orientations PIL.ImageOps.exif_transpose turns an image by (1: as stored). A dict
# lookup, as exif_transpose's, so any value PIL would match (6, 6.0) is matched alike.
_ORIENTATIONS = {k: k for k in range(1, 9)}
# TIFF field types PIL reads (TiffTags.TYPES), with the byte size of one value.
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4,
               16: 8, 17: 8, 18: 8}
# Those PIL reads as ints, as struct formats (a byte order goes before); BYTE is not
# among them: PIL gives its value as bytes, which exif_transpose does not match.
_INTEGER_TYPES = {3: "H", 4: "I", 6: "b", 8: "h", 9: "i"}
_ORIENTATION_TAG = 0x0112
_EXIF_PREFIX = b"Exif\x00\x00"
_XMP_PREFIX = b"http://ns.adobe.com/xap/1.0/\x00"  # an APP1 segment holding the XMP packet
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')  # PIL's own pattern

Read = Callable[[int, int], bytes]


class Header(NamedTuple):
    """An image's header. mode: PIL's ("RGB", "L", "CMYK", "P", ...); orientation: the
    EXIF orientation exif_transpose applies, 1-8 (1: as stored)."""

    mode: str
    height: int
    width: int
    orientation: int


def tiff_orientation(tiff: bytes) -> Optional[int]:
    """The Orientation tag of IFD0 of an EXIF TIFF block (what follows b"Exif\\0\\0"), as
    exif_transpose applies it (1-8); None when the block has no such tag (not TIFF, cut
    before the tag, no tag): PIL then looks at the XMP packet.

    Example:
        >>> tiff_orientation(b"II*\\x00\\x08\\x00\\x00\\x00\\x01\\x00\\x12\\x01\\x03\\x00\\x01\\x00\\x00\\x00\\x08\\x00\\x00\\x00")
        8
        >>> tiff_orientation(b"not a TIFF block") is None
        True
    """
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return None
    order = "<" if tiff[:2] == b"II" else ">"
    ifd = struct.unpack_from(order + "I", tiff, 4)[0]
    if ifd + 2 > len(tiff):
        return None
    for k in range(struct.unpack_from(order + "H", tiff, ifd)[0]):
        at = ifd + 2 + 12 * k
        if at + 12 > len(tiff):
            return None  # (PIL keeps the entries read before the cut)
        tag, kind, count = struct.unpack_from(order + "HHI", tiff, at)
        if tag != _ORIENTATION_TAG or kind not in _TYPE_SIZES:
            continue  # (PIL skips fields of unknown types)
        if kind not in _INTEGER_TYPES or count == 0:
            return 1
        size = _TYPE_SIZES[kind]
        where = at + 8 if count * size <= 4 else struct.unpack_from(order + "I", tiff, at + 8)[0]
        if where + count * size > len(tiff):
            return None  # (PIL drops a field whose values lie past the block)
        value = struct.unpack_from(order + _INTEGER_TYPES[kind], tiff, where)[0]
        return _ORIENTATIONS.get(value, 1)
    return None


def _orientation(exif: Optional[bytes], xmp: Optional[bytes]) -> int:
    """PIL's getexif()[0x0112] through exif_transpose's table: the EXIF tag, else XMP's.
    `exif`: the TIFF block past JPEG's prefix, or a PNG's eXIf chunk."""
    if exif is not None and exif.startswith(_EXIF_PREFIX):  # one more prefix: PIL reads past it
        exif = exif[6:]
    found = tiff_orientation(exif) if exif else None
    if found is None and xmp:
        match = _XMP_ORIENTATION.search(xmp)
        found = int(match[2]) if match else None
    return _ORIENTATIONS.get(found, 1)


def jpeg_header(read: Read, head: bytes = b"") -> Optional[Header]:
    """The header of a JPEG from its markers (up to the start of scan, as PIL reads
    them), None when they are broken. read(offset, n): the image's bytes; `head`, its
    first bytes when already read (the markers in it are walked without a call each)."""
    pos, have = 2, len(head)
    frame, exif, xmp = None, None, None
    while True:
        if pos + 4 <= have:
            first, marker, high, low = head[pos], head[pos + 1], head[pos + 2], head[pos + 3]
        else:
            four = read(pos, 4)
            if len(four) < 4:
                return None
            first, marker, high, low = four[0], four[1], four[2], four[3]
        if first != 0xFF:
            return None
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image: the header is over
            if frame is None:
                return None
            return Header(*frame, _orientation(exif, xmp))
        length = (high << 8) | low
        end = pos + 2 + length
        if marker == 0xE1:
            segment = bytes(head[pos + 4:end] if end <= have else read(pos + 4, length - 2))
            if segment.startswith(_EXIF_PREFIX):
                exif = segment[6:] if exif is None else exif + segment[6:]
            elif segment.startswith(_XMP_PREFIX):
                xmp = segment[len(_XMP_PREFIX):]
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and frame is None:
            sof = head[pos + 4:pos + 10] if pos + 10 <= have else read(pos + 4, 6)
            if len(sof) < 6:
                return None
            components = sof[5]
            mode = {1: "L", 3: "RGB", 4: "CMYK"}.get(components, f"{components} components")
            frame = (mode, (sof[1] << 8) | sof[2], (sof[3] << 8) | sof[4])
        pos = end


def _xmp_of_itxt(chunk: bytes) -> Optional[bytes]:
    """The XMP packet of a PNG iTXt chunk keyed XML:com.adobe.xmp, else None."""
    keyword, _, rest = chunk.partition(b"\x00")
    if keyword != b"XML:com.adobe.xmp" or len(rest) < 2:
        return None
    compressed, rest = rest[0], rest[2:]
    text = rest.split(b"\x00", 2)[-1]  # past the language tag and the translated keyword
    try:
        return zlib.decompress(text) if compressed else text
    except zlib.error:
        return None


def png_header(read: Read, size: int) -> Optional[Header]:
    """The header of a PNG from its IHDR and, for the orientation, its eXIf and XMP
    chunks (every chunk's 8-byte head is read, to IEND), None when IHDR is broken."""
    ihdr = read(8, 25)
    if len(ihdr) < 25 or ihdr[4:8] != b"IHDR":
        return None
    width, height = struct.unpack(">II", ihdr[8:16])
    mode = {0: "L", 2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}.get(ihdr[17], "?")
    exif, xmp, pos = None, None, 8
    while pos + 8 <= size:
        chunk = read(pos, 8)
        if len(chunk) < 8:
            break
        length, kind = struct.unpack(">I", chunk[:4])[0], chunk[4:8]
        if kind == b"eXIf":
            exif = bytes(read(pos + 8, length))
        elif kind == b"iTXt":
            xmp = _xmp_of_itxt(bytes(read(pos + 8, length))) or xmp
        elif kind == b"IEND":
            break
        pos += 12 + length
    return Header(mode, height, width, _orientation(exif, xmp))


def pil_header(data: bytes) -> Optional[Header]:
    """The header of an image of another format, as PIL gives it (it decodes the image:
    some formats keep their EXIF past the pixels); None when PIL cannot read it."""
    import PIL.Image

    try:
        with PIL.Image.open(io.BytesIO(data)) as image:
            image.load()
            orientation = _ORIENTATIONS.get(image.getexif().get(_ORIENTATION_TAG), 1)
            return Header(image.mode, image.height, image.width, orientation)
    except Exception:  # noqa: BLE001 - unreadable: whoever decodes it names the error
        return None


def image_header(read: Read, size: int, head: bytes = b"", others: bool = True) -> Optional[Header]:
    """The header of one image of `size` bytes, None when it cannot be read (a broken
    image: the decode that follows names it). `head`: its first bytes when already read;
    others=False: None for formats other than JPEG and PNG (PIL would decode them)."""
    magic = head[:8] if len(head) >= 8 else bytes(read(0, 8))
    try:
        if magic[:2] == b"\xff\xd8":
            return jpeg_header(read, head)
        if magic == PNG_SIGNATURE:
            return png_header(read, size)
    except (struct.error, IndexError, ValueError):
        return None
    return pil_header(bytes(read(0, size))) if others and size > 0 else None


def file_header(path: str, others: bool = True) -> Optional[Header]:
    """The header of the image file at `path`: its first HEAD_BYTES, then small preads
    where the markers lead (an EXIF segment, a SOF past them), never the whole file for a
    JPEG or PNG; None when the file cannot be opened or read as an image.

    Example:
        >>> import os, tempfile
        >>> from PIL import Image
        >>> path = os.path.join(tempfile.mkdtemp(), "a.jpg"); Image.new("RGB", (6, 4)).save(path)
        >>> file_header(path)
        Header(mode='RGB', height=4, width=6, orientation=1)
        >>> file_header(path + ".missing") is None
        True
    """
    try:
        fd = os.open(path, os.O_RDONLY)  # (os.open: never an open a tracer follows)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEAD_BYTES, 0)

        def read(offset: int, n: int) -> bytes:
            if offset + n <= len(head):
                return head[offset:offset + n]
            return os.pread(fd, max(0, n), offset)

        return image_header(read, size, head, others)
    except OSError:
        return None
    finally:
        os.close(fd)
