"""Typed wrappers of the native operators (torch.ops.fastload.*), in the binding layer.

This module is the only caller of torch.ops.fastload; the ops' shapes and dtypes are in
the docstrings. Every op has a fake kernel (fastload/_meta.py) and an opcheck case
(tests/ops/test_opcheck.py). Plain-PyTorch twins: fastload/reference.py (decode,
crop_resize_flip_normalize), fastload/augment/color.py (the colour ops),
fastload/augment/autoaugment.py (TrivialAugmentWide / RandAugment on PIL images, AugMix);
the blur is checked against torchvision's GaussianBlur directly (tests/ops/test_blur.py).
Every stage imports the wrappers from here; users read them, with the transform specs, as
fastload.ops (fastload/ops/__init__.py).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from fastload import _ext



def __getattr__(name: str):
    # DEFAULT_MAX_PIXELS: the decoders' decompression-bomb limit (Pillow's
    # Image.MAX_IMAGE_PIXELS), the ops' schema default, from its one C++ definition.
    if name == "DEFAULT_MAX_PIXELS":
        return _ext.require_ops().DEFAULT_MAX_PIXELS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _ops():
    _ext.require_ops()
    return torch.ops.fastload


def _max_pixels(max_pixels: Optional[int]) -> int:
    return _ext.require_ops().DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels


def interpolation_code(interpolation, op: str = "crop_resize_flip_normalize") -> int:
    """The ops' int code of "bilinear" | "bicubic" | "nearest" (or a
    fastload._C.Interpolation value): the value of fastload._C.Interpolation. Raises
    ValueError naming the valid names."""
    name = getattr(interpolation, "name", interpolation)  # _C.Interpolation.BICUBIC -> "BICUBIC"
    codes = _ext.require_ops().Interpolation.__members__
    if isinstance(name, str) and name.upper() in codes:
        return int(codes[name.upper()])
    names = [repr(n.lower()) for n in codes]
    raise ValueError(f"fastload.{op}: expected interpolation {', '.join(names[:-1])} or {names[-1]}, got "
                     f"{interpolation!r}.")


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
    return _ops().jpeg_header(data).tolist()


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
    return _ops().decode_jpeg(data, list(window or []), scale_denom, channels, _max_pixels(max_pixels))


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
    return _ops().decode_png(data, list(window or []), mode, _max_pixels(max_pixels))


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
    images, cpu_fallback = _ops().decode_jpeg_cuda(datas, channels, torch.device(device), _max_pixels(max_pixels))
    return list(images), cpu_fallback


def crop_resize_flip_normalize(
    image: torch.Tensor,
    box: Sequence[float],
    size: Sequence[int],
    flip: bool = False,
    scale: float = 1.0 / 255.0,
    mean: Sequence[float] = (0.0, 0.0, 0.0),
    std: Sequence[float] = (1.0, 1.0, 1.0),
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    *,
    flip_v: bool = False,
    interpolation: str = "bilinear",
) -> torch.Tensor:
    """Fused crop -> antialiased resize -> flips -> normalise -> cast, one image.

    The resample is Pillow's ``resize(size, filter, box=...)`` over a float box: BILINEAR
    with antialias (torch's ``interpolate(mode="bilinear", antialias=True)``), BICUBIC
    (antialiased, clipped to [0, 255]) or NEAREST; or BILINEAR_NO_ANTIALIAS, plain
    bilinear interpolation (torch's ``antialias=False``, OpenCV's ``INTER_LINEAR``, which
    albumentations resizes with). Output pixel (y, x) is centred at
    ``top + (y + 0.5) * height / out_height`` (same for x); taps clamp to the image, not
    the box (like PIL's ``resize(box=...)``). Semantics and design:
    csrc/augment/README.md; plain-PyTorch twin: ``fastload.reference``.

    Args:
        image: uint8 [H, W, C] (C = 1 or 3), packed pixels, any row stride (a crop view
            of a bigger image is fine), CPU or CUDA.
        box: [top, left, height, width] floats in image pixels (height, width > 0);
            output pixels whose centre falls outside the image are 0 (padding), then
            normalised.
        size: [out_height, out_width].
        flip: mirror the output horizontally.
        scale, mean, std: value = (v * scale - mean[c]) / std[c] with v the resampled
            value in [0, 255] (not rounded); mean, std: C values each.
        dtype: uint8 (round half away from zero, saturate), float32, float16 or bfloat16
            (round to nearest even).
        channels_last: HWC memory (strides (1, W*C, C)) for the [C, H, W] result.
        flip_v: mirror the output vertically.
        interpolation: "bilinear", "bicubic", "nearest" (Pillow's filters) or
            "bilinear_no_antialias" (plain bilinear).

    Returns:
        [C, out_height, out_width] tensor of `dtype`, on the image's device.

    Raises:
        ValueError: "fastload.crop_resize_flip_normalize: expected ..., got ...": wrong
            dtype, channels or strides, an empty or non-finite box, mean/std lengths, an
            unknown interpolation.

    Example:
        >>> import torch
        >>> image = torch.arange(48, dtype=torch.uint8).reshape(4, 4, 3)
        >>> crop_resize_flip_normalize(image, [0, 0, 4, 4], [2, 2], scale=1.0)[0]
        tensor([[10.7143, 15.4286],
                [29.5714, 34.2857]])
        >>> # Centred on pixel (1, 1), symmetric taps: that pixel's RGB.
        >>> crop_resize_flip_normalize(image, [0.5, 0.5, 2, 2], [1, 1], flip=True, scale=1.0,
        ...                            dtype=torch.uint8).flatten().tolist()
        [15, 16, 17]
        >>> # NEAREST picks pixel (int)(top + (y + 0.5) * 4 / 2): rows 1 and 3.
        >>> crop_resize_flip_normalize(image, [0, 0, 4, 4], [2, 2], scale=1.0, dtype=torch.uint8,
        ...                            flip_v=True, interpolation="nearest")[0].tolist()
        [[39, 45], [15, 21]]
    """
    return _ops().crop_resize_flip_normalize(
        image, [float(v) for v in box], list(size), flip, scale, list(mean), list(std), dtype, channels_last,
        bool(flip_v), interpolation_code(interpolation)
    )


def crop_resize_flip_normalize_batch(
    images: torch.Tensor,
    shapes: torch.Tensor,
    boxes: torch.Tensor,
    flips: torch.Tensor,
    scale: float,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    *,
    interpolation: str = "bilinear",
    color: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Batched, in-place crop_resize_flip_normalize (CPU or CUDA, by the inputs' device).

    CPU: every sample is validated before anything is written, then the samples run on
    torch's intra-op threads. CUDA: one kernel launch for the whole batch on the current
    stream, no sync; the contents of `shapes` and `boxes` are checked in the kernel (a
    device-side assert, like torch's index checks).

    Args:
        images: packed uint8 1-D contiguous tensor holding N HWC images.
        shapes: int64 [N, 4]: (offset, height, width, row_stride) of each image in
            `images` (offset and row_stride in bytes; row_stride >= width * C).
        boxes: float32 [N, 4]: (top, left, height, width) in each image's pixels.
        flips: bool [N] (left-right), or [N, 2] (left-right, top-bottom).
        scale: value = (v * scale - mean[c]) / std[c], v in [0, 255].
        mean, std: float32 [C].
        out: [N, C, H, W] of uint8/float32/float16/bfloat16, any strides (channels_last,
            a slice of a bigger batch...); C (1 or 3) is the images' channel count.
        interpolation: as in crop_resize_flip_normalize, for every sample.
        color: uint8 [N, K] colour records on out's device, one per sample
            (`fastload._C.color_passes(plan, samples, epoch)`: the plan's ColorJitter,
            grayscale and erasing as the engine draws them), or None. With them, the
            resampled value is rounded to uint8, jittered and greyed (torchvision's PIL
            stage), mapped, then erased (after the value map, as torchvision's
            RandomErasing on the normalised tensor).

    Returns:
        out, with out[i] == crop_resize_flip_normalize(image_i, boxes[i], [H, W],
        flips[i, 0], scale, mean, std, out.dtype, flip_v=flips[i, 1],
        interpolation=interpolation) (flips[i] and False for [N] flips).

    Example:
        >>> import torch
        >>> a = torch.full((4, 6, 3), 10, dtype=torch.uint8)
        >>> b = torch.full((3, 5, 3), 200, dtype=torch.uint8)
        >>> images = torch.cat([a.flatten(), b.flatten()])
        >>> shapes = torch.tensor([[0, 4, 6, 18], [72, 3, 5, 15]])
        >>> boxes = torch.tensor([[0.0, 0.0, 4.0, 6.0], [0.5, 0.5, 2.0, 4.0]])
        >>> out = torch.empty(2, 3, 2, 2)
        >>> _ = crop_resize_flip_normalize_batch(images, shapes, boxes, torch.tensor([False, True]),
        ...                                      1.0, torch.zeros(3), torch.ones(3), out)
        >>> [round(v, 4) for v in out[:, 0, 0, 0].tolist()]
        [10.0, 200.0]
    """
    _ops().crop_resize_flip_normalize_batch(images, shapes, boxes, flips, scale, mean, std, out,
                                            interpolation_code(interpolation, "crop_resize_flip_normalize_batch"),
                                            color)
    return out


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
    return tuple(_ops().transcode_jpeg(data, restart_rows, _max_pixels(max_pixels)))


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
    return _ops().decode_jpeg_rows(jpeg, segments, list(window or []), scale_denom, channels, _max_pixels(max_pixels))


# ---- colour -------------------------------------------------------------------------
# image: HWC [H, W, 1 or 3]: uint8 follows torchvision's PIL path (ImageEnhance blends,
# uint8 after each step), float32 in [0, 1] its tensor path. See fastload/augment/color.py.


def adjust_brightness(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_brightness on an HWC image; returns a new HWC image."""
    return _ops().adjust_brightness(image, factor)


def adjust_contrast(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_contrast (blend with the mean grey level) on an HWC image."""
    return _ops().adjust_contrast(image, factor)


def adjust_saturation(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_saturation (blend with the grey image) on an HWC image."""
    return _ops().adjust_saturation(image, factor)


def adjust_hue(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's adjust_hue (factor in [-0.5, 0.5]) on an HWC RGB image."""
    return _ops().adjust_hue(image, factor)


def color_jitter(image: torch.Tensor, order: Sequence[int], factors: Sequence[float]) -> torch.Tensor:
    """ColorJitter with drawn parameters: `order` the 4 op ids (0 brightness, 1 contrast,
    2 saturation, 3 hue) in application order, `factors[op]` (NaN: the op is off).

    Example:
        >>> import math, torch
        >>> image = torch.full((2, 3, 3), 100, dtype=torch.uint8)
        >>> color_jitter(image, [0, 1, 2, 3], [1.5, math.nan, math.nan, math.nan])[0, 0].tolist()
        [150, 150, 150]
    """
    return _ops().color_jitter(image, list(order), [float(f) for f in factors])


def rgb_to_grayscale(image: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
    """torchvision's Grayscale (PIL's convert("L") on uint8): [H, W, num_output_channels]."""
    return _ops().rgb_to_grayscale(image, num_output_channels)


def erase(image: torch.Tensor, box: Sequence[int], value: Sequence[float], seed: int, epoch: int,
          index: int) -> torch.Tensor:
    """RandomErasing's erase on a float32 HWC image: box (top, left, height, width) set to
    `value` (one per channel, or one for all; [] = standard normals drawn from (seed,
    epoch, index))."""
    return _ops().erase(image, list(box), [float(v) for v in value], seed, epoch, index)


def gaussian_blur(image: torch.Tensor, kernel_size: Sequence[int], sigma: float) -> torch.Tensor:
    """torchvision's GaussianBlur of a PIL image (float32 kernel, reflect padding, rounded
    to uint8), on a uint8 HWC image [H, W, 1 or 3]; the engine's uint8-stage blur.

    Example:
        >>> import torch
        >>> flat = torch.full((5, 5, 1), 9, dtype=torch.uint8)
        >>> torch.equal(gaussian_blur(flat, [3, 3], 1.0), flat)
        True
    """
    return _ops().gaussian_blur(image, [int(k) for k in kernel_size], float(sigma))


def gaussian_blur_params(indices: torch.Tensor, seed: int, epoch: int, sigma_min: float,
                         sigma_max: float, p: float = 1.0) -> torch.Tensor:
    """The sigma GaussianBlur draws for each sample (uniform in [sigma_min, sigma_max], as
    torchvision's get_params), as the engine draws it: float32 [N]. p < 1 is
    RandomApply([GaussianBlur], p): NaN for the samples it leaves unblurred.

    Example:
        >>> import torch
        >>> from fastload import _ops as ops
        >>> sigmas = ops.gaussian_blur_params(torch.arange(1000), 0, 0, 0.1, 2.0, p=0.5)
        >>> bool(((sigmas >= 0.1) & (sigmas <= 2.0) | sigmas.isnan()).all()), 400 < int(sigmas.isnan().sum()) < 600
        (True, True)
    """
    return _ops().gaussian_blur_params(indices, seed, epoch, float(sigma_min), float(sigma_max), float(p))


def auto_augment(image: torch.Tensor, ops: Sequence[int], magnitudes: Sequence[float],
                 fill: Sequence[int] = (), bilinear: bool = False) -> torch.Tensor:
    """TrivialAugmentWide / RandAugment ops with given magnitudes, in order, on a uint8 HWC
    image [H, W, 1 or 3]: torchvision's _apply_op on a PIL image, bit for bit (op ids:
    fastload.augment.autoaugment.OPS; fill: the affine ops' fill, [] = 0; bilinear:
    their interpolation BILINEAR, else NEAREST).

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import OPS
        >>> image = torch.arange(12, dtype=torch.uint8).view(2, 2, 3)
        >>> auto_augment(image, [OPS.index("Invert")], [0.0])[0, 0].tolist()
        [255, 254, 253]
    """
    return _ops().auto_augment(image, [int(op) for op in ops], [float(m) for m in magnitudes],
                               [int(f) for f in fill], bool(bilinear))


def auto_augment_params(indices: torch.Tensor, seed: int, epoch: int, space_ops: Sequence[int],
                        magnitudes: Sequence[float], num_ops: int = 1, magnitude_bin: int = -1,
                        policy_ops: Sequence[int] = (), policy_probs: Sequence[float] = (),
                        policy_bins: Sequence[int] = ()) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ops TrivialAugmentWide (magnitude_bin -1: a bin drawn per op) or RandAugment
    (num_ops ops at bin magnitude_bin) draw per sample, as the engine draws them: (op ids
    int64 [N, num_ops], signed magnitudes float64 [N, num_ops]). space_ops and magnitudes
    [ops x bins]: the augmentation space (a spec's space()). With policy_ops, policy_probs
    and policy_bins (AutoAugment's sub-policies, [policies x 2] each: indices into
    space_ops, probabilities, bins or -1 for None; AutoAugment.policy_fields()) the draws
    are AutoAugment's: [N, 2] by the sub-policy's slots, op -1 (magnitude 0) where that op
    was not applied; num_ops and magnitude_bin are then unused.

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import AutoAugment, RandAugment
        >>> ops, magnitudes = RandAugment().params(torch.arange(4), 0, 0, 224, 224)
        >>> ops.shape, magnitudes.dtype
        (torch.Size([4, 2]), torch.float64)
        >>> AutoAugment("cifar10").params(torch.arange(4), 0, 0, 32, 32)[0].shape
        torch.Size([4, 2])
    """
    return tuple(_ops().auto_augment_params(indices, seed, epoch, [int(op) for op in space_ops],
                                            [float(m) for m in magnitudes], int(num_ops), int(magnitude_bin),
                                            [int(op) for op in policy_ops], [float(p) for p in policy_probs],
                                            [int(b) for b in policy_bins]))


def augmix_step(image: torch.Tensor, op: int, magnitude: float, bilinear: bool = True) -> torch.Tensor:
    """One AugMix op (torchvision's tensor path: what AugMix runs on its uint8 tensor) with
    its magnitude on a uint8 HWC image [H, W, 1 or 3]; bilinear: the affine ops'
    grid_sample mode (else nearest).

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import OPS
        >>> image = torch.full((4, 4, 3), 100, dtype=torch.uint8)
        >>> augmix_step(image, OPS.index("Brightness"), 0.5)[0, 0].tolist()
        [150, 150, 150]
    """
    return _ops().augmix_step(image, int(op), float(magnitude), bool(bilinear))


def augmix_params(indices: torch.Tensor, seed: int, epoch: int, space_ops: Sequence[int],
                  magnitudes: Sequence[float], severity: int = 3, width: int = 3, chain_depth: int = -1,
                  alpha: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """AugMix's draws per sample, as the engine draws them: (weights float32 [N, 1 + width],
    depths int64 [N, width], op ids int64 [N, width, 4] (-1 past the depth), signed
    magnitudes float64 [N, width, 4]). See fastload.augment.autoaugment.AugMix.params.

    Example:
        >>> import torch
        >>> from fastload.augment.autoaugment import AugMix
        >>> weights, depths, ops, magnitudes = AugMix().params(torch.arange(3), 0, 0, 32, 32)
        >>> weights.shape, bool(torch.allclose(weights.sum(1), torch.ones(3)))
        (torch.Size([3, 4]), True)
    """
    return tuple(_ops().augmix_params(indices, seed, epoch, [int(op) for op in space_ops],
                                      [float(m) for m in magnitudes], int(severity), int(width), int(chain_depth),
                                      float(alpha)))


def color_jitter_params(indices: torch.Tensor, seed: int, epoch: int, ranges: Sequence[float],
                        p: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per sample (order int64 [N, 4], factors float32 [N, 4]) of ColorJitter, a pure
    function of (seed, epoch, index); ranges: (min, max) per op, a NaN pair where off.
    p: the probability that the jitter runs at all (RandomApply([ColorJitter], p)); a
    sample it skips has every factor NaN."""
    return tuple(_ops().color_jitter_params(indices, seed, epoch, [float(r) for r in ranges], float(p)))


def random_grayscale_params(indices: torch.Tensor, seed: int, epoch: int, p: float) -> torch.Tensor:
    """bool [N]: which samples RandomGrayscale(p) turns grey, from (seed, epoch, index)."""
    return _ops().random_grayscale_params(indices, seed, epoch, p)


def random_erasing_params(indices: torch.Tensor, seed: int, epoch: int, height: int, width: int, p: float,
                          scale: Sequence[float], ratio: Sequence[float]) -> torch.Tensor:
    """int64 [N, 4] RandomErasing boxes (top, left, height, width) on height x width
    images, torchvision's sampler from (seed, epoch, index); all zero: nothing erased."""
    return _ops().random_erasing_params(indices, seed, epoch, height, width, p, list(scale), list(ratio))

