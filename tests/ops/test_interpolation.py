"""Bicubic, nearest and non-antialiased bilinear resampling, and the vertical flip, of the
crop_resize_flip_normalize ops (csrc/augment/crop_resize_flip_normalize.h, shared by the CPU
and CUDA kernels).

References: PIL's resize(BICUBIC / NEAREST, box=...) and torch's interpolate(bilinear,
antialias=False) (OpenCV's INTER_LINEAR), the semantics the ops follow, and
fastload/reference.py's twins (float64 weight matrices on the kernel's float32 geometry).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fastload import _ext, ops, reference

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

DTYPES = [torch.uint8, torch.float32, torch.float16, torch.bfloat16]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# vs PIL (uint8 outputs): PIL rounds its horizontal pass to uint8 and weights to 22-bit
# fixed point, the kernel keeps both float: one level apart at most (measured: about 10%
# of the values one level off, none more; see test_bicubic_matches_pil_within_one_level).
PIL_UINT8_MAX_DIFF = 1
PIL_UINT8_MIN_EQUAL_WITHIN_ONE = 0.999
# vs PIL for float32 outputs: the float result against PIL's rounded one: the rounding
# (0.5) plus PIL's rounded intermediate times the vertical weights' absolute sum (< 1.2).
PIL_FLOAT_ATOL = 1.2
# Kernel vs reference: the reference shares the kernel's float32 geometry (centres, tap
# ranges, padding, weights in float32), sums in float64; the kernel sums float32.
FLOAT32_RANGE_TOL = 1e-4
HALF_RTOL, BFLOAT16_RTOL = 2.0**-10, 2.0**-7
# uint8: a value within float noise of k + 0.5 may round either way.
UINT8_MAX_OFF_FRACTION = 0.01


def noisy_image(height, width, channels=3, seed=0, noise=40):
    """uint8 [H, W, C]: smooth gradients plus noise, so interpolation errors show and
    bicubic's negative lobes overshoot [0, 255] (the clipping matters)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height)[:, None, None]
    x = torch.linspace(0, 1, width)[None, :, None]
    c = torch.arange(channels)[None, None, :]
    smooth = 127 + 120 * torch.sin(6 * x + 4 * y + c)
    jitter = torch.randint(-noise, noise + 1, (height, width, channels), generator=gen)
    return (smooth + jitter).clamp(0, 255).to(torch.uint8)


def pil_box(box):
    """The box as PIL's resize sees it: it takes (left, top, right, bottom) as C floats and
    subtracts them in float, so the size is float32(right) - float32(left)."""
    top, left, height, width = (np.float32(v) for v in box)
    bottom, right = np.float32(float(top) + float(height)), np.float32(float(left) + float(width))
    return [float(top), float(left), float(bottom - top), float(right - left)]


def pil_resize(image, box, size, resample):
    """PIL's resize of a uint8 HWC tensor over box [top, left, height, width] -> CHW."""
    top, left, height, width = box
    array = image.numpy()
    pil = Image.fromarray(array[:, :, 0] if image.shape[2] == 1 else array)
    resized = np.array(pil.resize((size[1], size[0]), resample, box=(left, top, left + width, top + height)))
    return torch.from_numpy(resized.reshape(size[0], size[1], image.shape[2])).permute(2, 0, 1)


def assert_matches_reference(out, want, dtype):
    assert out.dtype == want.dtype == dtype and out.shape == want.shape
    if dtype == torch.uint8:
        diff = (out.int() - want.int()).abs()
        assert diff.max().item() <= 1
        assert (diff > 0).sum().item() <= max(1, UINT8_MAX_OFF_FRACTION * diff.numel())
    elif dtype == torch.float32:
        span = max(1.0, want.abs().max().item())
        torch.testing.assert_close(out, want, rtol=0, atol=FLOAT32_RANGE_TOL * span)
    else:
        rtol = HALF_RTOL if dtype == torch.float16 else BFLOAT16_RTOL
        torch.testing.assert_close(out.float(), want.float(), rtol=rtol, atol=1e-6)


# (name, image height, width, box [top, left, height, width], out size): up- and
# downscaling, odd sizes, crops touching every edge.
PIL_CASES = [
    ("downscale", 300, 280, [10, 20, 280, 250], [224, 224]),
    ("downscale_3x", 240, 200, [0, 0, 240, 200], [80, 67]),
    ("upscale", 20, 30, [0, 0, 20, 30], [57, 71]),
    ("fractional_box", 64, 80, [3.3, 5.7, 40.2, 50.9], [31, 45]),
    ("touches_top_left", 50, 60, [0, 0, 30, 35], [21, 26]),
    ("touches_bottom_right", 50, 60, [20, 25, 30, 35], [43, 47]),
    ("whole_image_odd", 17, 9, [0, 0, 17, 9], [33, 5]),
    ("one_by_one_in", 1, 1, [0, 0, 1, 1], [5, 7]),
    ("one_by_one_out", 9, 13, [0, 0, 9, 13], [1, 1]),
    ("one_row", 1, 37, [0, 0, 1, 37], [1, 16]),
    ("one_column", 37, 1, [0, 0, 37, 1], [23, 1]),
    ("eval_256_to_224", 256, 256, [16, 16, 224, 224], [224, 224]),
]


def pil_stats(resample, interpolation, channels, dtype=torch.uint8):
    """(values within one level, max difference, values) over PIL_CASES."""
    within, worst, total = 0, 0.0, 0
    for _, height, width, box, size in PIL_CASES:
        image = noisy_image(height, width, channels, seed=height + width)
        out = ops.crop_resize_flip_normalize(image, pil_box(box), size, scale=1.0, mean=[0.0] * channels,
                                             std=[1.0] * channels, dtype=dtype, interpolation=interpolation)
        diff = (out.double() - pil_resize(image, box, size, resample).double()).abs()
        within += (diff <= 1).sum().item()
        worst = max(worst, diff.max().item())
        total += diff.numel()
    return within / total, worst, total


@pytest.mark.parametrize("channels", [3, 1], ids=["rgb", "gray"])
def test_bicubic_matches_pil_within_one_level(channels):
    """PIL's BICUBIC (a = -0.5, antialiased, each pass clipped to [0, 255]) over up- and
    downscaling, odd sizes and crops at every edge. Measured on these noisy images:
    every uint8 value within one level of PIL, about 10% one level off (PIL's rounded
    intermediate); without the clip between the passes, up to 8 levels off."""
    fraction, worst, _ = pil_stats(Image.BICUBIC, "bicubic", channels)
    assert worst <= PIL_UINT8_MAX_DIFF
    assert fraction >= PIL_UINT8_MIN_EQUAL_WITHIN_ONE


@pytest.mark.parametrize("channels", [3, 1], ids=["rgb", "gray"])
def test_bicubic_float32_output_stays_within_pil_rounding(channels):
    fraction, worst, _ = pil_stats(Image.BICUBIC, "bicubic", channels, dtype=torch.float32)
    assert worst <= PIL_FLOAT_ATOL
    assert fraction >= PIL_UINT8_MIN_EQUAL_WITHIN_ONE


def test_bicubic_clips_the_horizontal_pass_like_pil():
    """A black/white column pattern rings past [0, 255] horizontally; PIL clips that
    before the vertical pass, so alternating rows of it do not cancel out."""
    image = torch.zeros(12, 12, 1, dtype=torch.uint8)
    image[:, ::3] = 255
    image[::2] = 255 - image[::2]
    box, size = [0, 0, 12, 12], [17, 29]
    out = ops.crop_resize_flip_normalize(image, box, size, scale=1.0, mean=[0.0], std=[1.0], dtype=torch.uint8,
                                         interpolation="bicubic")
    want = pil_resize(image, box, size, Image.BICUBIC)
    assert (out.int() - want.int()).abs().max().item() <= PIL_UINT8_MAX_DIFF


@pytest.mark.parametrize("channels", [3, 1], ids=["rgb", "gray"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
def test_nearest_equals_pil(channels, dtype):
    """PIL's NEAREST picks pixel int(x_i), x_i accumulated in float64 from box start +
    step / 2: bit for bit, including 256 -> 224, where every 7th centre lies on a pixel
    edge and only that accumulation says which way it goes."""
    for name, height, width, box, size in PIL_CASES:
        image = noisy_image(height, width, channels, seed=height * width)
        out = ops.crop_resize_flip_normalize(image, pil_box(box), size, scale=1.0, mean=[0.0] * channels,
                                             std=[1.0] * channels, dtype=dtype, interpolation="nearest")
        want = pil_resize(image, box, size, Image.NEAREST).to(dtype)
        assert torch.equal(out, want), name


@pytest.mark.parametrize("interpolation", ["bicubic", "nearest", "bilinear_no_antialias"])
def test_padding_rule_holds_for_every_interpolation(interpolation):
    """Centres outside the image read 0 (torchvision's CenterCrop padding); the rest is
    the resample of the image. (PIL refuses boxes that start outside the image.)"""
    image = noisy_image(10, 12, 3)
    box, size = [-4.0, -6.0, 18, 24], [9, 12]
    out = ops.crop_resize_flip_normalize(image, box, size, scale=1.0, dtype=torch.uint8, interpolation=interpolation)
    assert out[:, :2].eq(0).all() and out[:, :, :3].eq(0).all()
    assert out[:, 2:, 3:].ne(0).any()


CASES = [
    ("downscale", 300, 300, [10, 20, 280, 270], [224, 224]),
    ("upscale", 20, 30, [0, 0, 20, 30], [57, 71]),
    ("strong_downscale", 400, 500, [0, 0, 400, 500], [13, 17]),  # > 16 taps per axis
    ("fractional_box", 64, 80, [3.3, 5.7, 40.2, 50.9], [31, 45]),
    ("box_beyond_image", 40, 50, [-10.5, -7.25, 60, 70], [37, 41]),  # padding rows/columns
    ("one_by_one_in", 1, 1, [0, 0, 1, 1], [5, 7]),
    ("one_by_one_out", 9, 13, [0, 0, 9, 13], [1, 1]),
    ("odd_sizes", 17, 9, [1.5, 0.5, 15, 8], [15, 29]),
]


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("flip_v", [False, True])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interpolation", ["bicubic", "nearest", "bilinear_no_antialias"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reference_twin_matches_the_kernel(case, interpolation, dtype, channels_last, flip_v, channels):
    _, height, width, box, size = case
    image = noisy_image(height, width, channels, seed=height + 7 * width)
    scale, mean, std = (1.0, [0.0] * channels, [1.0] * channels) if dtype == torch.uint8 else \
        (1 / 255, list(MEAN[:channels]), list(STD[:channels]))
    args = (image, box, size, True, scale, mean, std, dtype, channels_last)
    out = ops.crop_resize_flip_normalize(*args, flip_v=flip_v, interpolation=interpolation)
    want = reference.crop_resize_flip_normalize(*args, flip_v=flip_v, interpolation=interpolation)
    assert_matches_reference(out, want, dtype)


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest", "bilinear_no_antialias"])
@pytest.mark.parametrize("channels", [3, 1])
def test_vertical_flip_is_torch_flip_of_the_rows(interpolation, channels):
    """The vertical flip mirrors the row tap table: bit for bit torch.flip of the
    unflipped output, alone and with the horizontal flip."""
    image = noisy_image(71, 93, channels)
    args = ([2.5, 3.5, 60, 81], [33, 47])
    for dtype in (torch.float32, torch.uint8):
        plain = ops.crop_resize_flip_normalize(image, *args, False, 1 / 255, [0.5] * channels, [0.25] * channels,
                                               dtype, interpolation=interpolation)
        both = ops.crop_resize_flip_normalize(image, *args, True, 1 / 255, [0.5] * channels, [0.25] * channels,
                                              dtype, True, flip_v=True, interpolation=interpolation)
        down = ops.crop_resize_flip_normalize(image, *args, False, 1 / 255, [0.5] * channels, [0.25] * channels,
                                              dtype, flip_v=True, interpolation=interpolation)
        assert torch.equal(down, torch.flip(plain, [1]))
        assert torch.equal(both, torch.flip(plain, [1, 2]))


def test_vertical_flip_of_a_strong_downscale_walks_the_row_ring_backwards():
    """> 16 row taps and a capped ring: the flipped rows are read bottom-up, and the ring
    of converted rows must still hold the right ones."""
    image = noisy_image(1500, 300, 3, seed=3)
    for interpolation in ("bilinear", "bicubic"):
        plain = ops.crop_resize_flip_normalize(image, [0, 0, 1500, 300], [7, 5], interpolation=interpolation)
        down = ops.crop_resize_flip_normalize(image, [0, 0, 1500, 300], [7, 5], flip_v=True,
                                              interpolation=interpolation)
        assert torch.equal(down, torch.flip(plain, [1]))


# ---- bilinear without antialiasing: torch's interpolate(antialias=False), OpenCV's INTER_LINEAR --

# (image height, width, box [top, left, height, width] on whole pixels, out size): what
# torch's interpolate resizes is the crop itself, so its taps clamp to the crop; here
# the crop is the whole image or, for crops inside it, compared on the cropped tensor.
PLAIN_CASES = [
    ("shrink_2x", 64, 80, [0, 0, 64, 80], [32, 40]),
    ("shrink_3.3x", 200, 170, [0, 0, 200, 170], [61, 52]),
    ("shrink_odd", 37, 53, [0, 0, 37, 53], [11, 29]),
    ("enlarge", 20, 30, [0, 0, 20, 30], [57, 71]),
    ("mixed", 45, 31, [0, 0, 45, 31], [17, 62]),
    ("to_one_pixel", 9, 13, [0, 0, 9, 13], [1, 1]),
    ("from_one_pixel", 1, 1, [0, 0, 1, 1], [5, 7]),
]


def torch_plain_bilinear(image, size):
    """torch's interpolate(bilinear, antialias=False, align_corners=False) of a uint8 HWC
    image as float64 CHW values in [0, 255]."""
    chw = image.permute(2, 0, 1)[None].double()
    return torch.nn.functional.interpolate(chw, size=size, mode="bilinear", antialias=False,
                                           align_corners=False)[0]


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("case", PLAIN_CASES, ids=[c[0] for c in PLAIN_CASES])
def test_bilinear_without_antialias_is_torchs_interpolate(case, channels):
    _, height, width, box, size = case
    image = noisy_image(height, width, channels, seed=height * width)
    out = ops.crop_resize_flip_normalize(image, box, size, scale=1.0, mean=[0.0] * channels, std=[1.0] * channels,
                                         interpolation="bilinear_no_antialias")
    torch.testing.assert_close(out.double(), torch_plain_bilinear(image, size), rtol=0, atol=2e-3)
    if size[0] < height and size[1] < width:  # shrinking: the antialiased filter is another one
        antialiased = ops.crop_resize_flip_normalize(image, box, size, scale=1.0, mean=[0.0] * channels,
                                                     std=[1.0] * channels)
        assert (antialiased - out).abs().max() > 1.0


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bilinear_without_antialias_of_a_crop_over_dtypes_and_layouts(dtype, channels_last):
    """A crop inside the image reads pixels outside the box where its taps reach (as
    Pillow's box does); torch's interpolate of the cropped tensor clamps at the crop. They
    agree on every output pixel whose taps stay inside the crop: all but the border rows
    and columns here."""
    image = noisy_image(90, 110, 3, seed=5)
    box, size = [10, 20, 60, 70], [29, 31]
    out = ops.crop_resize_flip_normalize(image, box, size, False, 1 / 255, list(MEAN), list(STD), dtype,
                                         channels_last, interpolation="bilinear_no_antialias")
    assert out.stride() == ((1, size[1] * 3, 3) if channels_last else (size[0] * size[1], size[1], 1))
    crop = image[10:70, 20:90]
    want = (torch_plain_bilinear(crop, size) / 255 - torch.tensor(MEAN, dtype=torch.float64)[:, None, None]) \
        / torch.tensor(STD, dtype=torch.float64)[:, None, None]
    if dtype == torch.uint8:
        want = torch_plain_bilinear(crop, size)
        out = ops.crop_resize_flip_normalize(image, box, size, False, 1.0, [0.0] * 3, [1.0] * 3, dtype,
                                             channels_last, interpolation="bilinear_no_antialias")
    inner = (slice(None), slice(1, -1), slice(1, -1))
    tolerance = {torch.uint8: 0.5 + 1e-3, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}[dtype]
    torch.testing.assert_close(out.double()[inner], want[inner], rtol=0, atol=tolerance)


def test_bilinear_without_antialias_is_opencvs_inter_linear_within_one_level():
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is optional (make setup installs it)")
    for height, width, size in [(64, 80, (32, 40)), (200, 170, (61, 52)), (20, 30, (57, 71)), (45, 31, (17, 62))]:
        image = noisy_image(height, width, 3, seed=height)
        out = ops.crop_resize_flip_normalize(image, [0, 0, height, width], list(size), scale=1.0,
                                             mean=[0.0] * 3, std=[1.0] * 3, dtype=torch.uint8,
                                             interpolation="bilinear_no_antialias")
        theirs = cv2.resize(image.numpy(), (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
        diff = (out.permute(1, 2, 0).int() - torch.from_numpy(theirs).int()).abs()
        # OpenCV weighs in 11-bit fixed point, the kernel in float: rounding apart only.
        assert diff.max() <= 1, (height, width, size, diff.max())


def test_bilinear_is_the_default_and_unchanged_by_the_new_arguments():
    image = noisy_image(40, 50, 3)
    default = ops.crop_resize_flip_normalize(image, [1.5, 2.5, 30, 41], [15, 29])
    named = ops.crop_resize_flip_normalize(image, [1.5, 2.5, 30, 41], [15, 29], flip_v=False,
                                           interpolation="bilinear")
    raw = torch.ops.fastload.crop_resize_flip_normalize(image, [1.5, 2.5, 30, 41], [15, 29], False, 1 / 255,
                                                        [0.0] * 3, [1.0] * 3, torch.float32, False)
    assert torch.equal(default, named) and torch.equal(default, raw)


# ---- the batch op ---------------------------------------------------------------------------


def batch_inputs(channels=3, n=5):
    images = [noisy_image(20 + 7 * i, 30 + 5 * i, channels, seed=i) for i in range(n)]
    packed = torch.cat([im.flatten() for im in images])
    offsets = np.cumsum([0] + [im.numel() for im in images])[:-1]
    shapes = torch.tensor([[int(o), im.shape[0], im.shape[1], im.shape[1] * channels]
                           for o, im in zip(offsets, images)])
    boxes = torch.tensor([[1.5 * i, 0.5 * i, 15.0 + i, 20.0 + 2 * i] for i in range(n)], dtype=torch.float32)
    flips = torch.tensor([[i % 2 == 1, i % 3 == 0] for i in range(n)])
    return images, packed, shapes, boxes, flips


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest", "bilinear_no_antialias"])
def test_batch_with_both_flips_equals_the_single_image_op(interpolation):
    images, packed, shapes, boxes, flips = batch_inputs()
    size = [11, 13]
    out = torch.full((len(images), 3, *size), float("nan"))
    ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1 / 255, torch.tensor(MEAN),
                                         torch.tensor(STD), out, interpolation=interpolation)
    twin = torch.empty_like(out)
    reference.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1 / 255, torch.tensor(MEAN),
                                               torch.tensor(STD), twin, interpolation=interpolation)
    for i, image in enumerate(images):
        single = ops.crop_resize_flip_normalize(image, boxes[i].tolist(), size, bool(flips[i, 0]), 1 / 255,
                                                list(MEAN), list(STD), flip_v=bool(flips[i, 1]),
                                                interpolation=interpolation)
        assert torch.equal(out[i], single), i
        assert_matches_reference(out[i], twin[i], torch.float32)
    # [N] flips: left-right only, as before.
    only = torch.empty_like(out)
    ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips[:, 0].contiguous(), 1 / 255,
                                         torch.tensor(MEAN), torch.tensor(STD), only, interpolation=interpolation)
    for i, image in enumerate(images):
        single = ops.crop_resize_flip_normalize(image, boxes[i].tolist(), size, bool(flips[i, 0]), 1 / 255,
                                                list(MEAN), list(STD), interpolation=interpolation)
        assert torch.equal(only[i], single), i


def test_unknown_interpolations_and_flip_shapes_are_refused_with_the_fix():
    images, packed, shapes, boxes, flips = batch_inputs(n=2)
    out = torch.empty(2, 3, 4, 4)
    with pytest.raises(ValueError, match=r"fastload\.crop_resize_flip_normalize: expected interpolation "
                                         r"'bilinear', 'bicubic', 'nearest' or 'bilinear_no_antialias', "
                                         r"got 'lanczos'"):
        ops.crop_resize_flip_normalize(images[0], [0, 0, 4, 4], [2, 2], interpolation="lanczos")
    with pytest.raises(ValueError, match=r"expected interpolation 0 \(bilinear\), 1 \(bicubic\), 2 \(nearest\) "
                                         r"or 3 \(bilinear without antialiasing\), got 7\. "
                                         r"Pass int\(fastload\._C\.Interpolation"):
        torch.ops.fastload.crop_resize_flip_normalize(images[0], [0, 0, 4, 4], [2, 2], False, 1.0, [0.0] * 3,
                                                      [1.0] * 3, torch.float32, False, False, 7)
    with pytest.raises(ValueError, match=r"expected flips bool \[2\] \(left-right\) or \[2, 2\] \(left-right, "
                                         r"top-bottom\), got Bool \[2, 3\]"):
        ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, torch.zeros(2, 3, dtype=torch.bool), 1.0,
                                             torch.zeros(3), torch.ones(3), out)


def test_interpolation_takes_the_plan_enum_too():
    image = noisy_image(20, 20, 3)
    by_name = ops.crop_resize_flip_normalize(image, [0, 0, 20, 20], [7, 9], interpolation="bicubic")
    by_enum = ops.crop_resize_flip_normalize(image, [0, 0, 20, 20], [7, 9],
                                             interpolation=_ext.require_ops().Interpolation.BICUBIC)
    assert torch.equal(by_name, by_enum)


# ---- opcheck --------------------------------------------------------------------------------


@pytest.mark.parametrize("interpolation", [1, 2, 3])
def test_opcheck_single_with_flip_v_and_interpolation(interpolation):
    image = noisy_image(21, 17, 3)
    for dtype in (torch.float32, torch.uint8):
        torch.library.opcheck(
            torch.ops.fastload.crop_resize_flip_normalize.default,
            (image, [1.5, 2.0, 15.0, 12.0], [9, 7], True, 1 / 255, list(MEAN), list(STD), dtype, True, True,
             interpolation),
        )


@pytest.mark.parametrize("interpolation", [1, 2, 3])
def test_opcheck_batch_with_two_flip_columns_and_interpolation(interpolation):
    _, packed, shapes, boxes, flips = batch_inputs(n=4)
    out = torch.empty(4, 3, 11, 13, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(
        torch.ops.fastload.crop_resize_flip_normalize_batch.default,
        (packed, shapes, boxes, flips, 1 / 255, torch.tensor(MEAN), torch.tensor(STD), out, interpolation),
    )
