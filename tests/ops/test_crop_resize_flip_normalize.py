"""fastload::crop_resize_flip_normalize and its batch op on the CPU
(csrc/augment/crop_resize_flip_normalize_cpu.cpp), and through them the shared per-pixel
header (crop_resize_flip_normalize.h) that the CUDA kernel runs too.

References: fastload/reference.py (float64 weight matrices, the same float32 geometry),
torch's interpolate(antialias=True) on the crop, and PIL's resize(BILINEAR, box=...).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from fastload import _ext, ops, reference

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

DTYPES = [torch.uint8, torch.float32, torch.float16, torch.bfloat16]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# Tolerances, kernel vs fastload.reference (which shares the kernel's float32 geometry:
# same centres, tap ranges and padding decisions; only the arithmetic differs).
# float32: the kernel accumulates a few dozen float32 products, the reference float64:
# ~1e-6 of the value range. 1e-4 of the range is the margin; one wrong tap or weight
# moves values by > 1e-2 of the range.
FLOAT32_RANGE_TOL = 1e-4
# float16 / bfloat16: both sides round to the format last; float32 noise can push a
# value across a rounding boundary, so one unit in the last place (relative 2^-10 and
# 2^-7) apart at most.
HALF_RTOL, BFLOAT16_RTOL = 2.0**-10, 2.0**-7
# uint8: values that land within float32 noise of k + 0.5 may round either way: off by
# at most 1, and rarely (one value may always be: a 48-value output at another -O level
# or FMA contraction can have one such tie).
UINT8_MAX_DIFF, UINT8_MAX_OFF_FRACTION = 1, 0.01
# vs torch interpolate (float32 weights and accumulation) on [0, 255] values.
TORCH_ATOL = 1e-3
# vs PIL mode "F": PIL computes centres in float64, the kernel in float32 (spec): a centre
# off by ulp(300) / 2 ~ 1.5e-5 px times a slope of at most 255 per px.
PIL_FLOAT_ATOL = 0.02
# vs PIL RGB (uint8): PIL rounds its horizontal pass to uint8 and uses 22-bit fixed-point
# weights: at most 1 level apart.
PIL_UINT8_MAX_DIFF = 1


def make_image(height, width, channels=3, seed=0):
    """uint8 [H, W, C] with smooth gradients plus noise (interpolation errors show)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height)[:, None, None]
    x = torch.linspace(0, 1, width)[None, :, None]
    c = torch.arange(channels)[None, None, :]
    smooth = 127 + 100 * torch.sin(6 * x + 4 * y + c)
    noise = torch.randint(-40, 41, (height, width, channels), generator=gen)
    return (smooth + noise).clamp(0, 255).to(torch.uint8)


def normalisation(dtype, channels):
    """(scale, mean, std) typical for the dtype: ToTensor + Normalize for floats, plain
    values for uint8."""
    if dtype == torch.uint8:
        return 1.0, [0.0] * channels, [1.0] * channels
    return 1 / 255, list(MEAN[:channels]), list(STD[:channels])


def assert_matches(out, want, dtype):
    """Kernel output vs a float64-accurate reference, within the named tolerances."""
    assert out.dtype == want.dtype == dtype and out.shape == want.shape
    if dtype == torch.uint8:
        diff = (out.int() - want.int()).abs()
        assert diff.max().item() <= UINT8_MAX_DIFF
        assert (diff > 0).sum().item() <= max(1, UINT8_MAX_OFF_FRACTION * diff.numel())
    elif dtype == torch.float32:
        span = max(1.0, want.abs().max().item())
        torch.testing.assert_close(out, want, rtol=0, atol=FLOAT32_RANGE_TOL * span)
    else:
        rtol = HALF_RTOL if dtype == torch.float16 else BFLOAT16_RTOL
        torch.testing.assert_close(out.float(), want.float(), rtol=rtol, atol=1e-6)


def run_op(image, box, size, flip=False, dtype=torch.float32, channels_last=False, norm=None):
    scale, mean, std = norm or normalisation(dtype, image.shape[2])
    out = ops.crop_resize_flip_normalize(image, box, size, flip, scale, mean, std, dtype, channels_last)
    want = reference.crop_resize_flip_normalize(image, box, size, flip, scale, mean, std, dtype, channels_last)
    return out, want


# (name, image height, width, box [top, left, height, width], out size)
CASES = [
    ("downscale", 300, 300, [10, 20, 280, 270], [224, 224]),
    ("upscale", 20, 30, [0, 0, 20, 30], [57, 71]),
    ("strong_downscale", 400, 500, [0, 0, 400, 500], [13, 17]),  # > 16 taps per axis
    ("fractional_box", 64, 80, [3.3, 5.7, 40.2, 50.9], [31, 45]),
    ("box_beyond_image", 40, 50, [-10.5, -7.25, 60, 70], [37, 41]),  # padding rows/columns
    ("box_outside_image", 40, 50, [100, 100, 10, 10], [5, 5]),  # all padding
    ("one_by_one_in", 1, 1, [0, 0, 1, 1], [5, 7]),
    ("one_by_one_out", 9, 13, [0, 0, 9, 13], [1, 1]),
    ("one_row", 1, 37, [0, 0, 1, 37], [1, 16]),
    ("one_column", 37, 1, [0, 0, 37, 1], [16, 1]),
    ("odd_sizes", 33, 47, [1.5, 2.5, 30, 41], [15, 29]),
    ("identity", 16, 16, [0, 0, 16, 16], [16, 16]),
]


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_reference(case, dtype, channels_last, flip, channels):
    _, height, width, box, size = case
    image = make_image(height, width, channels, seed=height * width)
    out, want = run_op(image, box, size, flip, dtype, channels_last)
    assert_matches(out, want, dtype)
    if channels_last:
        assert out.stride() == (1, size[1] * channels, channels)
    else:
        assert out.is_contiguous()


@pytest.mark.parametrize("channels", [3, 1])
def test_strong_downscale_of_a_big_image(channels):
    """~500 taps per axis: the vertical pass sums in chunks and the ring of converted rows
    is capped (rows re-converted across output rows)."""
    image = make_image(1500, 1400, channels, seed=5)
    for box, size in (([0, 0, 1500, 1400], [3, 4]), ([-100.5, 20.25, 1400, 1300], [7, 5])):
        out, want = run_op(image, box, size, True, torch.float32)
        assert_matches(out, want, torch.float32)


def test_identity_is_exact():
    """Box == image, out == image size: every weight is 1 or 0, so values are exact."""
    image = make_image(23, 31)
    out = ops.crop_resize_flip_normalize(image, [0, 0, 23, 31], [23, 31], scale=1.0)
    assert torch.equal(out, image.permute(2, 0, 1).float())


@pytest.mark.parametrize("size", [[224, 224], [17, 33], [50, 50], [1, 1], [120, 61]])
def test_matches_torch_interpolate_on_the_crop(size):
    """A crop view (row stride of the bigger image) with box = the whole view is torch's
    interpolate(antialias=True) of the crop (taps clamp to the view = the crop)."""
    big = make_image(200, 260)
    crop = big[13:163, 21:241]  # a view: row stride 260 * 3
    assert crop.stride(0) == 260 * 3
    want = F.interpolate(crop.permute(2, 0, 1)[None].float(), size=size, mode="bilinear", antialias=True)[0]
    out = ops.crop_resize_flip_normalize(crop, [0, 0, 150, 220], size, scale=1.0)
    torch.testing.assert_close(out, want, rtol=0, atol=TORCH_ATOL)
    # torch's uint8 path (fixed-point weights) is within one level of ours. (torch
    # 2.14's uint8 AVX kernel trips an internal assert on 1x1 outputs.)
    if size == [1, 1]:
        return
    want_u8 = F.interpolate(crop.permute(2, 0, 1)[None].contiguous(), size=size, mode="bilinear", antialias=True)[0]
    out_u8 = ops.crop_resize_flip_normalize(crop, [0, 0, 150, 220], size, scale=1.0, dtype=torch.uint8)
    assert (out_u8.int() - want_u8.int()).abs().max().item() <= 1


@pytest.mark.parametrize(
    "box, size",
    [([10, 20, 280, 270], [224, 200]), ([10.3, 20.7, 100.2, 150.9], [64, 80]), ([5.5, 3.25, 20, 30], [41, 23]),
     ([0, 0, 300, 300], [37, 300])],
)
def test_matches_pil_with_box(box, size):
    """PIL's resize(BILINEAR, box=...) is the reference semantics: float boxes, taps
    clamped to the image, not the box."""
    image = make_image(300, 300)
    top, left, height, width = box
    out = ops.crop_resize_flip_normalize(image, box, size, scale=1.0)
    planes = []
    for c in range(3):
        plane = Image.fromarray(image[:, :, c].numpy().astype(np.float32), mode="F")
        resized = plane.resize((size[1], size[0]), Image.BILINEAR, box=(left, top, left + width, top + height))
        planes.append(torch.from_numpy(np.array(resized)))
    torch.testing.assert_close(out, torch.stack(planes), rtol=0, atol=PIL_FLOAT_ATOL)

    rgb = Image.fromarray(image.numpy()).resize((size[1], size[0]), Image.BILINEAR,
                                                box=(left, top, left + width, top + height))
    out_u8 = ops.crop_resize_flip_normalize(image, box, size, scale=1.0, dtype=torch.uint8)
    want_u8 = torch.from_numpy(np.array(rgb)).permute(2, 0, 1)
    assert (out_u8.int() - want_u8.int()).abs().max().item() <= PIL_UINT8_MAX_DIFF


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flip_and_layout_change_only_the_store(dtype):
    """Flip mirrors the column tables and channels_last only changes the strides: the
    values are bit-identical to the plain NCHW result."""
    image = make_image(71, 93)
    args = ([2.5, 3.5, 60, 81], [33, 47])
    scale, mean, std = normalisation(dtype, 3)
    plain = ops.crop_resize_flip_normalize(image, *args, False, scale, mean, std, dtype, False)
    flipped = ops.crop_resize_flip_normalize(image, *args, True, scale, mean, std, dtype, False)
    last = ops.crop_resize_flip_normalize(image, *args, True, scale, mean, std, dtype, True)
    assert torch.equal(flipped, plain.flip(-1))
    assert torch.equal(last, flipped)


def test_row_stride_view_equals_its_copy():
    big = make_image(90, 120)
    view = big[10:70, 15:95]
    assert not view.is_contiguous()
    for box in ([0, 0, 60, 80], [-3.5, 4.25, 50, 90]):
        a = ops.crop_resize_flip_normalize(view, box, [29, 37], True)
        b = ops.crop_resize_flip_normalize(view.contiguous(), box, [29, 37], True)
        assert torch.equal(a, b)


# ---- the shared header's pure functions, through the op ------------------------------------


def test_padding_rule_centre_inside_image():
    """centre_inside: [0, in_size) on each axis; outside it v = 0, so the value is
    -mean / std. A centre exactly at 0 is inside, exactly at in_size outside."""
    image = torch.full((4, 6, 1), 200, dtype=torch.uint8)
    # Rows: box top -2, height 4, 4 rows -> centres -1.5, -0.5, 0.5, 1.5.
    out = ops.crop_resize_flip_normalize(image, [-2, 0, 4, 6], [4, 6], scale=1.0, mean=[10], std=[2])
    assert torch.equal(out[0, :2], torch.full((2, 6), -5.0))
    assert torch.equal(out[0, 2:], torch.full((2, 6), 95.0))
    # Columns: centre exactly 0 -> pixel 0; centre exactly 6 (= width) -> padding.
    at_zero = ops.crop_resize_flip_normalize(image, [0, -0.5, 4, 1], [4, 1], scale=1.0, mean=[0], std=[1])
    at_width = ops.crop_resize_flip_normalize(image, [0, 5.5, 4, 1], [4, 1], scale=1.0, mean=[0], std=[1])
    assert torch.equal(at_zero, torch.full((1, 4, 1), 200.0))
    assert torch.equal(at_width, torch.zeros(1, 4, 1))


def test_taps_clamp_to_the_image_not_the_box():
    """A 2x downscale of the box [2, 4) of a row 0..7: taps reach outside the box, into
    the image, with Pillow's triangle weights."""
    row = torch.tensor([0, 10, 20, 30, 40, 50, 60, 70], dtype=torch.uint8).view(1, 8, 1)
    out = ops.crop_resize_flip_normalize(row, [0, 2, 1, 4], [1, 2], scale=1.0, mean=[0], std=[1])
    # Output 0: centre 3, support 2 -> taps 1..4 with weights .25 .75 .75 .25 (/ 2).
    assert out[0, 0, 0].item() == pytest.approx((0.25 * 10 + 0.75 * 20 + 0.75 * 30 + 0.25 * 40) / 2)
    assert out[0, 0, 1].item() == pytest.approx((0.25 * 30 + 0.75 * 40 + 0.75 * 50 + 0.25 * 60) / 2)
    # At the image edge the taps are cut and the rest renormalised.
    edge = ops.crop_resize_flip_normalize(row, [0, 0, 1, 4], [1, 2], scale=1.0, mean=[0], std=[1])
    assert edge[0, 0, 0].item() == pytest.approx((0.75 * 0 + 0.75 * 10 + 0.25 * 20) / 1.75)


@pytest.mark.parametrize(
    "value, mean, want",
    [
        (0, -0.5, 1),  # 0.5 rounds away from zero
        (0, -(0.5 - 2.0**-25), 0),  # 0.49999997 rounds down (v + 0.5f would give 1)
        (0, -1.5, 2),
        (0, 0.5, 0),  # -0.5 -> -1 -> saturates to 0
        (254, -0.5, 255),
        (200, -100.0, 255),  # saturates
        (100, 250.0, 0),
        (7, -0.25, 7),
        (7, -0.75, 8),
    ],
)
def test_uint8_rounds_half_away_from_zero_and_saturates(value, mean, want):
    image = torch.full((3, 4, 1), value, dtype=torch.uint8)
    out = ops.crop_resize_flip_normalize(image, [0, 0, 3, 4], [2, 5], scale=1.0, mean=[mean], std=[1.0],
                                         dtype=torch.uint8)
    assert torch.equal(out, torch.full((1, 2, 5), want, dtype=torch.uint8))


@pytest.mark.parametrize("scale", [1 / 255, 1.0, 1e-7, 300.0], ids=["unit", "raw", "subnormal_f16", "overflow_f16"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.uint8], ids=str)
def test_casts_are_torch_casts_of_the_float32_result(dtype, scale):
    """to_half_bits / to_bfloat16_bits / to_uint8(_bounded) applied to the kernel's own
    float32 values give exactly torch's casts (round to nearest even; for uint8 round
    half away from zero + saturate), over normal, subnormal and overflowing values."""
    image = make_image(45, 60, seed=3)
    args = dict(box=[1.25, 2.5, 40, 51], size=[23, 31], flip=True, scale=scale, mean=[0.1, -0.2, 0.3],
                std=[0.5, 2.0, -1.0])
    as_float = ops.crop_resize_flip_normalize(image, dtype=torch.float32, **args)
    out = ops.crop_resize_flip_normalize(image, dtype=dtype, **args)
    if dtype == torch.uint8:
        x = as_float.double()
        want = torch.where(x >= 0, torch.floor(x + 0.5), torch.ceil(x - 0.5)).clamp(0, 255).to(torch.uint8)
    else:
        want = as_float.to(dtype)
    assert torch.equal(out.view(torch.int16) if dtype != torch.uint8 else out,
                       want.view(torch.int16) if dtype != torch.uint8 else want)


def test_uint8_with_huge_values_saturates():
    """|value| >= 2^31 takes the exact float-clamp path (the fast one needs an int)."""
    image = make_image(8, 8, seed=1)
    out = ops.crop_resize_flip_normalize(image, [0, 0, 8, 8], [4, 4], scale=1e12, mean=[-1e12, 1e15, 0],
                                         std=[1, 1, 1], dtype=torch.uint8)
    assert torch.equal(out[0], torch.full((4, 4), 255, dtype=torch.uint8))
    assert torch.equal(out[1], torch.zeros(4, 4, dtype=torch.uint8))


# ---- the batch op ---------------------------------------------------------------------------


def pack(images, pad_bytes=5):
    """Packs HWC uint8 images into one buffer with padded rows; returns (packed, shapes)."""
    chunks, shapes, offset = [], [], 3  # an offset != 0 for the first image too
    chunks.append(torch.zeros(offset, dtype=torch.uint8))
    for image in images:
        height, width, channels = image.shape
        row_stride = width * channels + pad_bytes
        rows = torch.full((height, row_stride), 99, dtype=torch.uint8)
        rows[:, : width * channels] = image.reshape(height, -1)
        chunks.append(rows.flatten())
        shapes.append([offset, height, width, row_stride])
        offset += height * row_stride
    return torch.cat(chunks), torch.tensor(shapes, dtype=torch.int64).reshape(-1, 4)


def batch_inputs(channels=3, n=5):
    sizes = [(40, 50), (1, 1), (77, 31), (13, 90), (64, 64), (20, 21)][:n]
    images = [make_image(h, w, channels, seed=i) for i, (h, w) in enumerate(sizes)]
    packed, shapes = pack(images)
    boxes = torch.tensor([[2.5, 3.25, 30, 40], [0, 0, 1, 1], [-5, -2.5, 90, 40], [0, 10, 13, 70],
                          [60, 60, 10, 10], [0.5, 0.5, 19, 20]][:n], dtype=torch.float32).reshape(-1, 4)
    flips = torch.tensor([True, False, True, False, True, False][:n], dtype=torch.bool)
    return images, packed, shapes, boxes, flips


def make_out(n, channels, size, dtype, layout, poison):
    """out [N, C, H, W] in a layout: contiguous, channels_last, or a strided window of a
    bigger tensor; filled with `poison`. Returns (out, the tensor that holds it)."""
    shape = (n, channels, *size)
    if layout == "strided":
        holder = torch.full((n * 2, channels, size[0] + 3, size[1] + 5), poison, dtype=dtype)
        return holder[::2, :, 1 : 1 + size[0], 2 : 2 + size[1]], holder
    out = torch.full(shape, poison, dtype=dtype)
    if layout == "channels_last":
        out = out.contiguous(memory_format=torch.channels_last)
    return out, out


def poisons(dtype):
    # Two poisons: an element the kernel skips keeps one of them and fails one run.
    return [0, 255] if dtype == torch.uint8 else [float("nan"), -7.0]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("channels", [3, 1])
def test_batch_matches_single_and_reference_and_writes_every_element(channels, dtype, layout):
    images, packed, shapes, boxes, flips = batch_inputs(channels)
    size = [19, 23]
    scale, mean, std = normalisation(dtype, channels)
    singles = [ops.crop_resize_flip_normalize(im, boxes[i].tolist(), size, bool(flips[i]), scale, mean, std, dtype)
               for i, im in enumerate(images)]
    for poison in poisons(dtype):
        out, holder = make_out(len(images), channels, size, dtype, layout, poison)
        before = holder.clone()
        result = ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, scale, torch.tensor(mean),
                                                      torch.tensor(std), out)
        assert result is out
        for i, single in enumerate(singles):
            assert torch.equal(out[i], single), f"sample {i}"  # also: no poison left
            want = reference.crop_resize_flip_normalize(images[i], boxes[i].tolist(), size, bool(flips[i]), scale,
                                                        mean, std, dtype)
            assert_matches(out[i], want, dtype)
        if layout == "strided":  # nothing outside the window was touched
            mask = torch.ones_like(holder, dtype=torch.bool)
            mask[::2, :, 1 : 1 + size[0], 2 : 2 + size[1]] = False
            assert torch.equal(holder[mask].view(torch.uint8) if dtype != torch.uint8 else holder[mask],
                               before[mask].view(torch.uint8) if dtype != torch.uint8 else before[mask])


def test_batch_of_zero_and_one():
    images, packed, shapes, boxes, flips = batch_inputs(3, n=1)
    mean, std = torch.zeros(3), torch.ones(3)
    empty = torch.empty(0, 3, 8, 8)
    ops.crop_resize_flip_normalize_batch(packed[:0], shapes[:0], boxes[:0], flips[:0], 1.0, mean, std, empty)
    one = torch.full((1, 3, 8, 8), float("nan"))
    ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1.0, mean, std, one)
    assert torch.equal(one[0], ops.crop_resize_flip_normalize(images[0], boxes[0].tolist(), [8, 8], True, 1.0))


def test_batch_threads_give_identical_results():
    images, packed, shapes, boxes, flips = batch_inputs(3, n=6)
    outs = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            out = torch.empty(6, 3, 30, 30)
            ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1 / 255, torch.tensor(MEAN),
                                                 torch.tensor(STD), out)
            outs.append(out)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1])


def test_baseline_x86_path_matches_avx2_path():
    """FASTLOAD_NO_AVX2=1 runs the baseline (SSE2) build of the loops; both agree with
    the reference, and with each other up to FMA rounding. Each run reports the path it
    took: on a CPU without AVX2 both would be the baseline, a comparison of nothing."""
    script = (
        "import torch, sys; from fastload import _ext, ops\n"
        "torch.manual_seed(0); im = torch.randint(0, 256, (97, 131, 3), dtype=torch.uint8)\n"
        "outs = [ops.crop_resize_flip_normalize(im[:, :, :c].contiguous(), [3.5, -2.25, 90, 140], [45, 61], True,"
        " 1/255, [0.4] * c, [0.2] * c, d, cl) for c in (1, 3) for d in (torch.float32, torch.uint8, torch.float16,"
        " torch.bfloat16) for cl in (False, True)]\n"
        "torch.save((_ext.build_info()['augment_cpu_path'], outs), sys.argv[1])\n"
    )
    results, paths = [], []
    for avx2 in (True, False):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"crfn_{os.getpid()}_{int(avx2)}.pt")
        env = dict(os.environ)
        env.pop("FASTLOAD_NO_AVX2", None)
        if not avx2:
            env["FASTLOAD_NO_AVX2"] = "1"
        subprocess.run([sys.executable, "-c", script, path], check=True, env=env, timeout=120)
        kernel_path, outs = torch.load(path)
        os.remove(path)
        paths.append(kernel_path)
        results.append(outs)
    assert paths[1] == "baseline"  # FASTLOAD_NO_AVX2=1 is obeyed
    if paths[0] != "avx2":
        pytest.skip(f"this CPU has no AVX2 + FMA: both runs took the {paths[0]!r} path, nothing to compare")
    for fast, base in zip(*results):
        assert_matches(fast, base, base.dtype)


def test_build_info_names_the_cpu_path_this_process_runs():
    info = _ext.build_info()
    assert info["augment_cpu_path"] in ("avx2", "baseline")
    if os.environ.get("FASTLOAD_NO_AVX2"):
        assert info["augment_cpu_path"] == "baseline"


# ---- hostile geometry ---------------------------------------------------------------------

BIG = 2**63 - 1


@pytest.mark.parametrize(
    "shape",
    [
        (0, 2, 4, BIG),  # (height - 1) * row_stride + width * C wraps past 2^63
        (0, 3, 4, 2**62),  # (height - 1) * row_stride is exactly 2^63
        (0, 2**31 - 1, 4, 2**33),  # a product far beyond the buffer that wraps
        (BIG, 1, 1, 3),  # offset + width * C wraps
        (BIG - 2, 1, 1, 3),  # offset + width * C is exactly 2^63
        (2**62, 2, 1, 2**62),  # offset + (height - 1) * row_stride wraps
        (-(2**63), 1, 1, 3),  # most negative offset
        (0, 1, 2**31 - 1, 2**33),  # width * C past the kernels' int row
        (0, 1, 4, -(2**62)),  # negative row stride
        (0, 2**31, 1, 3),  # height past the int range
    ],
)
@pytest.mark.parametrize("channels", [1, 3])
def test_batch_shapes_near_2_to_the_63_are_refused_not_read(shape, channels):
    """The bounds check is computed without wrap-around: a stride or offset whose product
    or sum passes 2^63 must not wrap to a small number and pass."""
    packed = torch.zeros(64, dtype=torch.uint8)
    shapes = torch.tensor([list(shape)], dtype=torch.int64)
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    out = torch.full((1, channels, 2, 2), -1.0)
    with pytest.raises(ValueError, match=r"crop_resize_flip_normalize_batch: expected shapes\[0\] = "):
        ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, torch.tensor([False]), 1.0,
                                             torch.zeros(channels), torch.ones(channels), out)
    assert torch.equal(out, torch.full((1, channels, 2, 2), -1.0))


def test_batch_shape_that_exactly_fills_the_buffer_is_accepted():
    """The checked bound is exact: the last byte of the buffer is inside."""
    image = make_image(3, 4)
    packed = torch.cat([torch.zeros(7, dtype=torch.uint8), image.flatten()])
    shapes = torch.tensor([[7, 3, 4, 12]])
    out = torch.empty(1, 3, 3, 4)
    ops.crop_resize_flip_normalize_batch(packed, shapes, torch.tensor([[0.0, 0.0, 3.0, 4.0]]), torch.tensor([False]),
                                         1.0, torch.zeros(3), torch.ones(3), out)
    assert torch.equal(out[0], image.permute(2, 0, 1).float())
    with pytest.raises(ValueError, match="inside images"):
        ops.crop_resize_flip_normalize_batch(packed, shapes + torch.tensor([[1, 0, 0, 0]]),
                                             torch.tensor([[0.0, 0.0, 3.0, 4.0]]), torch.tensor([False]), 1.0,
                                             torch.zeros(3), torch.ones(3), out)


@pytest.mark.parametrize("box, size", [
    ([-5e29, -5e29, 1e30, 1e30], [1, 1]),  # centre 0, a support past every int: the mean
    ([-1e30, -1e30, 2e30, 2e30], [3, 2]),
    ([1e30, 1e30, 1.0, 1.0], [3, 2]),  # every centre far outside: padding
    ([0.0, 0.0, 1e-30, 1e-30], [3, 2]),  # a vanishing box on the first pixel
    ([3.0, 3.0, 3.4e38, 3.4e38], [3, 2]),  # near FLT_MAX
    ([-3.4e38, -3.4e38, 3.4e38, 3.4e38], [1, 1]),
])
def test_huge_and_tiny_boxes_stay_inside_the_image(box, size):
    """Tap bounds far outside the int range are clamped on integers, never converted."""
    image = make_image(6, 7)
    out = ops.crop_resize_flip_normalize(image, box, size, scale=1.0)
    want = reference.crop_resize_flip_normalize(image, box, size, scale=1.0)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want.float(), rtol=0, atol=1e-3)


def test_taps_of_an_image_wider_than_2_to_the_24_stay_inside_it():
    """Above 2^24 px float(width) rounds up: a tap clamp in float let the last output
    column read the pixel just past the image. Here that pixel is 255 and the image 0."""
    width = 2**24 + 3
    for box, size in (([0.0, width - 120.0, 1.0, 120.0], [1, 4]), ([0.0, width - 5.0, 1.0, 5.0], [1, 5])):
        row = torch.zeros(1, width + 1, 3, dtype=torch.uint8)
        row[0, width] = 255  # just past the image (the view's row stride covers it)
        out = ops.crop_resize_flip_normalize(row[:, :width], box, size, scale=1.0)
        assert torch.equal(out, torch.zeros_like(out)), out
        del row
        column = torch.zeros(width + 1, 1, 3, dtype=torch.uint8)  # the same along the rows
        column[width] = 255
        out = ops.crop_resize_flip_normalize(column[:width], [box[1], 0.0, box[3], 1.0], size[::-1], scale=1.0)
        assert torch.equal(out, torch.zeros_like(out)), out
        del column


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image=torch.zeros(4, 4, 3, dtype=torch.float32)), "expected a uint8 \\[H, W, C\\] image"),
        (dict(image=torch.zeros(4, 4, 2, dtype=torch.uint8)), "expected 1 or 3 channels, got 2"),
        (dict(image=torch.zeros(3, 4, 4, dtype=torch.uint8).permute(1, 2, 0)[:, :, :3]), "expected packed pixels"),
        (dict(box=[0, 0, 0, 4]), "height > 0 and width > 0, got \\[0, 0, 0, 4\\]"),
        (dict(box=[0, float("nan"), 4, 4]), "expected a box"),
        (dict(box=[0, 0, 1e39, 4]), "expected a box"),  # finite as a double, inf as the kernel's float32
        (dict(box=[0, 0, 1e-46, 4]), "expected a box"),  # positive as a double, 0 as a float32
        (dict(box=[0, 0, 4]), "expected box = \\[top, left, height, width\\], got 3 values"),
        (dict(size=[4, -1]), "expected size = \\[out_height, out_width\\] >= 0"),
        (dict(mean=[0.0, 0.0]), "one value per channel \\(3\\)"),
        (dict(std=[1.0, 0.0, 1.0]), "non-zero finite std"),
        (dict(dtype=torch.int32), "expected dtype uint8, float32, float16 or bfloat16"),
    ],
)
def test_errors_name_the_op_and_the_fix(kwargs, message):
    args = dict(image=torch.zeros(4, 4, 3, dtype=torch.uint8), box=[0, 0, 4, 4], size=[2, 2])
    args.update(kwargs)
    with pytest.raises(ValueError, match="^fastload\\.crop_resize_flip_normalize: .*" + message):
        ops.crop_resize_flip_normalize(**args)


FIX_HINTS = [  # (arguments, the fix the message must end with)
    (dict(image=torch.zeros(4, 4, 3, dtype=torch.float32)), "Decode to uint8 HWC (fastload.ops.decode_jpeg and "
                                                            "decode_jpeg_cuda do)."),
    (dict(image=torch.zeros(4, 4, 2, dtype=torch.uint8)), "Convert the image to gray or RGB first."),
    (dict(image=torch.zeros(3, 4, 4, dtype=torch.uint8).permute(1, 2, 0)[:, :, :3]), "Call .contiguous() on the image."),
    (dict(box=[0, 0, 1e39, 4]), "Pass the crop in image pixels."),
    (dict(std=[1.0, 0.0, 1.0]), "Use std=1 for no scaling."),
]


@pytest.mark.parametrize("kwargs, fix", FIX_HINTS)
def test_errors_of_the_single_image_op_end_with_the_fix(kwargs, fix):
    import re

    args = dict(image=torch.zeros(4, 4, 3, dtype=torch.uint8), box=[0, 0, 4, 4], size=[2, 2])
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(fix) + "$"):
        ops.crop_resize_flip_normalize(**args)


def test_the_cuda_ops_run_the_cpu_ops_checks():
    """The CUDA ops (which cannot run here) check their arguments with the very functions
    the CPU ops use, so their messages keep the same fixes; neither backend writes
    checks of its own for the single-image op."""
    csrc = os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "augment")

    def read(name):
        with open(os.path.join(csrc, name)) as f:
            return f.read()

    for source in (read("crop_resize_flip_normalize_cuda.cu"), read("crop_resize_flip_normalize_cpu.cpp")):
        assert "check_arguments(image, box, size, scale, mean, std, dtype, mean_f, std_f);" in source
        assert "check_batch_arguments(images, shapes_in, boxes_in, flips_in, scale, mean_in, std_in, out);" in source
        assert "kOp" not in source  # the single-image op's messages are not written here
    shared = read("crop_resize_flip_normalize.cpp")
    assert "cuda" not in "".join(line for line in shared.splitlines() if line.startswith("#include")).lower()
    flat = shared.replace('"\n', "").replace(' "', "")  # joins C++'s adjacent string literals
    for _, fix in FIX_HINTS:
        assert fix.split(" (")[0] in flat, fix


def test_batch_errors_leave_out_untouched():
    images, packed, shapes, boxes, flips = batch_inputs(3, n=3)
    mean, std = torch.zeros(3), torch.ones(3)
    out = torch.full((3, 3, 5, 5), -1.0)
    bad = shapes.clone()
    bad[2, 0] = packed.numel()  # the third image starts at the end of the buffer
    with pytest.raises(ValueError, match=r"crop_resize_flip_normalize_batch: expected shapes\[2\] = "):
        ops.crop_resize_flip_normalize_batch(packed, bad, boxes, flips, 1.0, mean, std, out)
    assert torch.equal(out, torch.full((3, 3, 5, 5), -1.0))  # validated before any write
    bad_boxes = boxes.clone()
    bad_boxes[1, 3] = -1
    with pytest.raises(ValueError, match="for sample 1"):
        ops.crop_resize_flip_normalize_batch(packed, shapes, bad_boxes, flips, 1.0, mean, std, out)
    with pytest.raises(ValueError, match="expected shapes int64 \\[3, 4\\]"):
        ops.crop_resize_flip_normalize_batch(packed, shapes[:2], boxes, flips, 1.0, mean, std, out)
    with pytest.raises(ValueError, match="expected mean and std float32 \\[3\\]"):
        ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1.0, mean[:1], std, out)
    with pytest.raises(ValueError, match="expected out of dtype"):
        ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1.0, mean, std, out.double())
    assert torch.equal(out, torch.full((3, 3, 5, 5), -1.0))


# ---- opcheck --------------------------------------------------------------------------------


@pytest.mark.parametrize("channels_last", [False, True])
def test_opcheck_single(channels_last):
    image = make_image(21, 17)
    for dtype in (torch.float32, torch.uint8):
        torch.library.opcheck(
            torch.ops.fastload.crop_resize_flip_normalize.default,
            (image, [1.5, 2.0, 15.0, 12.0], [9, 7], True, 1 / 255, list(MEAN), list(STD), dtype, channels_last),
        )


def test_opcheck_batch():
    _, packed, shapes, boxes, flips = batch_inputs(3, n=4)
    out = torch.empty(4, 3, 11, 13, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(
        torch.ops.fastload.crop_resize_flip_normalize_batch.default,
        (packed, shapes, boxes, flips, 1 / 255, torch.tensor(MEAN), torch.tensor(STD), out),
    )
