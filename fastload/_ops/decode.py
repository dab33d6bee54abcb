"""The decode stage's operators: JPEG headers, JPEG (libjpeg-turbo, nvJPEG) and PNG (libpng) decodes, prepared JPEGs.

Shapes and dtypes are in each docstring; fastload._ops (the package) gathers these names.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from fastload import _ext
from fastload._ops.native import max_pixels_or_default, native


def jpeg_header(data: torch.Tensor) -> List[int]:
    """Reads a JPEG header without decoding.

    Args:
        data: uint8 1-D contiguous CPU tensor with the file's bytes.

    Returns:
        [height, width, components, jpeg_color_space, progressive]: components 1 (gray),
        3 (YCbCr / RGB) or 4 (CMYK / YCCK); jpeg_color_space is libjpeg's J_COLOR_SPACE
        (1 gray, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK); progressive 0 or 1.

    Raises:
        RuntimeError: not a JPEG, or a corrupt or truncated header.

    Example:
        >>> import io, PIL.Image, torch
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (5, 3)).save(buf, "JPEG")
        >>> jpeg_header(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
        [3, 5, 3, 3, 0]
    """
    return native().jpeg_header(data).tolist()


def decode_jpeg(
    data: torch.Tensor,
    window: Optional[Sequence[int]] = None,
    scale_denom: int = 1,
    channels: int = 3,
    max_pixels: Optional[int] = None,
) -> torch.Tensor:
    """Decodes a JPEG, or only a window of it, optionally DCT-scaled, with libjpeg-turbo.

    Only the rows and iMCU columns the window needs are decoded; rows below it are never
    read. A full decode is bit-identical to PIL's ``Image.open(f).convert("RGB")``, a
    window to the same window of the full decode, a scaled decode to PIL's ``draft()``.
    EXIF orientation is ignored (like PIL without ``exif_transpose``).

    Args:
        data: uint8 1-D contiguous CPU tensor with the file's bytes.
        window: [top, left, height, width] in full-resolution pixels, inside the image;
            None = the whole image.
        scale_denom: decode at 1/scale_denom resolution: 1, 2, 4 or 8.
        channels: 3 (RGB; gray is replicated, CMYK/YCCK converted like PIL's
            convert("RGB")) or 1 (luma: the Y plane, PIL's draft("L"); for CMYK,
            convert("L") of the RGB).
        max_pixels: refuse images with more pixels, checked from the header before
            decoding (decompression bombs); <= 0: no limit; None: the default,
            DEFAULT_MAX_PIXELS (Pillow's Image.MAX_IMAGE_PIXELS).

    Returns:
        uint8 tensor [H, W, channels], contiguous: the window at that scale, rows
        floor(top / d) .. ceil((top + height) / d) of the ceil(image_height / d) scaled
        rows, columns likewise.

    Raises:
        RuntimeError: empty, corrupt, truncated (where the window needs it) or non-JPEG
            data, or more than max_pixels pixels. The message starts
            "fastload.decode_jpeg:" and quotes libjpeg's.
        ValueError: window outside the image, scale_denom or channels not allowed.

    Example:
        >>> import io, PIL.Image, torch
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (64, 48), "red").save(buf, "JPEG")
        >>> data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        >>> decode_jpeg(data).shape, decode_jpeg(data, [8, 4, 20, 30], scale_denom=2).shape
        (torch.Size([48, 64, 3]), torch.Size([10, 15, 3]))
    """
    return native().decode_jpeg(data, list(window or []), scale_denom, channels, max_pixels_or_default(max_pixels))


def decode_png(
    data: torch.Tensor,
    window: Optional[Sequence[int]] = None,
    mode: str = "RGB",
    max_pixels: Optional[int] = None,
) -> torch.Tensor:
    """Decodes a PNG with libpng, to exactly what PIL gives for it (PNG is lossless).

    Every colour type and bit depth: palette, gray (1, 2, 4, 8, 16 bits), gray+alpha,
    RGB, RGBA, 16-bit, Adam7-interlaced; tRNS and alpha are dropped as PIL's convert does.
    A non-interlaced file is read only down to the window's last row. EXIF orientation
    is ignored (like PIL without ``exif_transpose``).

    Args:
        data: uint8 1-D contiguous CPU tensor with the file's bytes.
        window: [top, left, height, width] inside the image; None = the whole image.
        mode: "RGB": ``Image.open(f).convert("RGB")`` (16-bit colour to its high byte,
            16-bit gray clipped to 255, palette indices past the palette's end black, as
            Pillow does); "L": ``convert("L")``; "mask": ``np.array(Image.open(f))`` of
            a label map, i.e. a file PIL opens as mode "1" (0 / 1), "L" (gray values) or
            "P" (palette indices, not colours); other files are refused.
        max_pixels: refuse images with more pixels, checked from the header before
            decoding (decompression bombs); <= 0: no limit; None: the default,
            DEFAULT_MAX_PIXELS (Pillow's Image.MAX_IMAGE_PIXELS).

    Returns:
        uint8 tensor, contiguous: [H, W, 3] ("RGB"), [H, W, 1] ("L") or [H, W] ("mask").

    Raises:
        RuntimeError: empty, corrupt or truncated (where the window needs it) data, a
            bad CRC, not a PNG, more than max_pixels pixels, a "mask" of a colour, alpha
            or 16-bit file, or fastload._C built without libpng. The message starts
            "fastload.decode_png:" and quotes libpng's.
        ValueError: a window outside the image, or another mode.

    Example:
        >>> import io, numpy as np, PIL.Image, torch
        >>> buf = io.BytesIO(); PIL.Image.fromarray(np.full((3, 5), 7, np.uint8)).save(buf, "PNG")
        >>> data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        >>> decode_png(data).shape, decode_png(data, mode="mask")[0].tolist()
        (torch.Size([3, 5, 3]), [7, 7, 7, 7, 7])
    """
    return native().decode_png(data, list(window or []), mode, max_pixels_or_default(max_pixels))


def decode_jpeg_cuda(
    datas: Sequence[torch.Tensor], channels: int = 3, device="cuda", max_pixels: Optional[int] = None
) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Decodes whole JPEGs with nvJPEG (one batched call; the hardware decoder where the
    GPU has one).

    Samples nvJPEG cannot take (CMYK/YCCK, Adobe RGB, what the hardware decoder
    rejects, or the whole batch when nvJPEG fails on it) are decoded by the CPU decoder
    (exactly like decode_jpeg) and uploaded; ``cpu_fallback`` says which, so callers
    can count them. nvJPEG's IDCT and upsampling differ slightly from libjpeg's: GPU
    pixels are close to, not equal to, decode_jpeg's.

    Args:
        datas: N uint8 1-D contiguous CPU tensors, one file's bytes each.
        channels: 3 (RGB) or 1 (luma).
        device: the CUDA device for the outputs (its current stream is used).
        max_pixels: refuse images with more pixels, checked from the header before
            any decoding, as decode_jpeg does (<= 0: no limit; None: the default).
            Progressive files with
            more than 500 scans are refused too.

    Returns:
        (images, cpu_fallback): N uint8 [H, W, channels] tensors on `device`, and a bool
        [N] CPU tensor, True where the CPU decoder made that image.

    Raises:
        NotBuiltError: built without CUDA or nvJPEG (the message says how to fix it).
        RuntimeError: a sample that neither nvJPEG nor libjpeg can decode, or over the
            limits (the message names the sample index), or an nvJPEG / CUDA failure.

    Example:
        >>> images, cpu_fallback = decode_jpeg_cuda([data], device="cuda")  # doctest: +SKIP
        >>> images[0].shape, int(cpu_fallback.sum())  # doctest: +SKIP
        (torch.Size([48, 64, 3]), 0)
    """
    _ext.require_cuda_ops()
    if not _ext.has_nvjpeg():
        raise _ext.NotBuiltError(
            "fastload._C was built without nvJPEG: `pip install nvidia-nvjpeg` (or set "
            "FASTLOAD_NVJPEG_PREFIX) and rebuild with `make build`."
        )
    datas = list(datas)
    if not datas:  # the dispatcher needs a tensor argument to pick the kernel
        return [], torch.zeros(0, dtype=torch.bool)
    images, cpu_fallback = native().decode_jpeg_cuda(datas, channels, torch.device(device), max_pixels_or_default(max_pixels))
    return list(images), cpu_fallback


# ---- prepared JPEGs ----------------------------------------------------------------


def transcode_jpeg(data: torch.Tensor, restart_rows: int = 1, *,
                   max_pixels: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Losslessly transcodes a JPEG into a prepared one whose rows decode apart.

    In the DCT domain (no pixel changes): baseline, optimised Huffman tables, restart
    markers that cut the image into segments decodable apart, APPn/COM markers kept (EXIF,
    ICC).

    Args:
        data: uint8 1-D contiguous CPU tensor with the file's bytes.
        restart_rows: 1..8: a segment every `restart_rows` MCU rows; -1: each MCU row cut
            into column tiles of the transcoder's choice (~64 px; whole rows where no
            width fits, csrc/decode/transcode.h); -k: tiles of k MCUs (k divides the MCUs
            per row).
        max_pixels: refuse images with more pixels (<= 0: no limit; None: the default).

    Returns:
        (jpeg uint8 [M], segments int64 [K + 1, 2]): row k < K is (byte offset of restart
        segment k's entropy data, its first MCU row; with tiles, each tile of a row repeats
        the row); row K is (len(jpeg), MCU rows).
        decode_jpeg(jpeg) equals decode_jpeg(data) bit for bit.

    Raises:
        RuntimeError: corrupt, over-limit, or progressive data whose scans leave
            coefficient bits unsent (a baseline copy could not reproduce it).

    Example:
        >>> import io, PIL.Image, torch
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (40, 33), "teal").save(buf, "JPEG")
        >>> data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        >>> jpeg, segments = transcode_jpeg(data)
        >>> torch.equal(decode_jpeg(jpeg), decode_jpeg(data)), segments.shape
        (True, torch.Size([4, 2]))
    """
    return tuple(native().transcode_jpeg(data, restart_rows, max_pixels_or_default(max_pixels)))


def decode_jpeg_rows(jpeg: torch.Tensor, segments: torch.Tensor, window: Optional[Sequence[int]] = None,
                     scale_denom: int = 1, channels: int = 3, *,
                     max_pixels: Optional[int] = None) -> torch.Tensor:
    """decode_jpeg(original, window, scale_denom, channels) of a prepared JPEG (from
    transcode_jpeg), entropy-decoding only the restart segments the window's rows need.

    Args:
        jpeg, segments: what transcode_jpeg returned.
        window, scale_denom, channels, max_pixels: as for decode_jpeg.

    Returns:
        uint8 [h, w, channels], equal to decode_jpeg's result on the original file.

    Raises:
        RuntimeError: `segments` does not describe `jpeg`, or corrupt data in a segment read.
        ValueError: window outside the image, scale_denom or channels not allowed.

    Example:
        >>> import io, PIL.Image, torch
        >>> buf = io.BytesIO(); PIL.Image.new("RGB", (40, 33), "teal").save(buf, "JPEG")
        >>> data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        >>> jpeg, segments = transcode_jpeg(data)
        >>> torch.equal(decode_jpeg_rows(jpeg, segments, [17, 3, 9, 20]), decode_jpeg(data, [17, 3, 9, 20]))
        True
    """
    return native().decode_jpeg_rows(jpeg, segments, list(window or []), scale_denom, channels, max_pixels_or_default(max_pixels))
