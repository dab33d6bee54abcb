"""ColorJitter, Grayscale, RandomGrayscale and RandomErasing: the native ops
(csrc/augment/color*.h) and the twins in fastload/augment/color.py against torchvision.

uint8 images: torchvision's PIL path (functional ops on PIL images, with the factors the
native sampler drew). float images: its tensor path (v2 functional). The sampler: its
distributions against torchvision's own samplers (two-sample KS, chi-square), and a pure
function of (seed, epoch, index). The fused pass's colour stage, run through the batch op
with colour records: Pillow's resize and ImageEnhance bit for bit, and the same values in
the AVX2 and baseline builds.

The specs' argument checks: tests/test_color_specs.py; the fused pass in the loader:
tests/test_color_fused.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from fastload import _ext
from fastload import ops as fl_ops
from fastload.augment import color, specs
from fastload.augment.plan import build_plan

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
import torchvision.transforms.v2.functional as F2  # noqa: E402

needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")
ops = torch.ops.fastload

SIZES = [(1, 1), (1, 23), (23, 1), (17, 9), (48, 64)]
BLEND_FACTORS = [0.0, 0.25, 0.999, 1.0, 1.5, 7.3, 1e30]
HUE_FACTORS = [-0.5, -0.31, -0.001, 0.0, 0.1337, 0.25, 0.5]
# Float (tensor path) results agree with torchvision to float32 rounding of a few ops:
# the contrast mean is summed in double here, in float32 pairwise by torch.
FLOAT_RTOL, FLOAT_ATOL = 1e-5, 1e-6
# Two-sample KS critical value at significance 1e-3: c(a) * sqrt((n + m) / (n m)),
# c(a) = sqrt(-ln(a / 2) / 2). Chi-square critical values at 1e-3 by degrees of freedom.
KS_C = math.sqrt(-math.log(1e-3 / 2) / 2)
CHI2_CRIT_1E3 = {23: 49.728}
Z_1E3 = 3.2905  # two-sided normal quantile at 1e-3
DRAWS = 100_000


def random_image(rng, height, width, channels):
    return torch.from_numpy(rng.integers(0, 256, (height, width, channels), dtype=np.uint8))


def to_pil(image: torch.Tensor) -> Image.Image:
    array = image.numpy()
    return Image.fromarray(array[..., 0], "L") if array.shape[-1] == 1 else Image.fromarray(array, "RGB")


def from_pil(pil: Image.Image) -> torch.Tensor:
    array = np.asarray(pil)
    return torch.from_numpy(array.copy()).reshape(pil.height, pil.width, -1)


def assert_same_pixels(got: torch.Tensor, want: torch.Tensor):
    # Bit-exact, not "within 1 level": the native ops reproduce Pillow's arithmetic, and
    # an off-by-one rounding mistake would hide inside a 1-level tolerance.
    assert got.shape == want.shape and got.dtype == want.dtype == torch.uint8
    bad = (got.to(torch.int16) - want.to(torch.int16)).abs()
    assert int((bad > 0).sum()) == 0, f"{int((bad > 0).sum())} of {bad.numel()} values differ, max {int(bad.max())}"


def float_image(rng, height, width, channels):
    return torch.from_numpy(rng.random((height, width, channels), dtype=np.float32))


def chw(image):
    return image.permute(2, 0, 1).contiguous()


# ---- per-pixel math against torchvision's PIL path --------------------------------------

PIL_OPS = {
    "brightness": (F.adjust_brightness, "adjust_brightness", color.pil_brightness),
    "contrast": (F.adjust_contrast, "adjust_contrast", color.pil_contrast),
    "saturation": (F.adjust_saturation, "adjust_saturation", color.pil_saturation),
}


@needs_ops
@pytest.mark.parametrize("name", sorted(PIL_OPS))
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
def test_blend_ops_on_uint8_equal_torchvision_pil(name, size, channels):
    want_fn, native, twin = PIL_OPS[name]
    native = getattr(ops, native)
    rng = np.random.default_rng(zlib.crc32(repr((name, size, channels)).encode()))  # stable across runs
    image = random_image(rng, *size, channels)
    for factor in BLEND_FACTORS + [float(np.float32(rng.uniform(0, 2)))]:
        want = from_pil(want_fn(to_pil(image), factor))
        assert_same_pixels(native(image, factor), want)
        assert_same_pixels(twin(image, factor), want)


@needs_ops
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
def test_hue_on_uint8_equals_torchvision_pil(size, channels):
    rng = np.random.default_rng(size[0] * 100 + size[1] + channels)
    image = random_image(rng, *size, channels)
    for factor in HUE_FACTORS + [float(np.float32(rng.uniform(-0.5, 0.5)))]:
        want = from_pil(F.adjust_hue(to_pil(image), factor))
        assert_same_pixels(ops.adjust_hue(image, factor), want)
        assert_same_pixels(color.pil_hue(image, factor), want)


@needs_ops
def test_hue_on_every_rgb_colour_class_equals_torchvision_pil():
    # Greys, pure primaries, each max channel and ties: every branch of the HSV code.
    rng = np.random.default_rng(7)
    levels = np.array([0, 1, 2, 127, 128, 254, 255], dtype=np.uint8)
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(1, -1, 3)
    image = torch.from_numpy(np.concatenate([grid, rng.integers(0, 256, (1, 4000, 3), dtype=np.uint8)], 1))
    for factor in HUE_FACTORS:
        assert_same_pixels(ops.adjust_hue(image, factor), from_pil(F.adjust_hue(to_pil(image), factor)))


@needs_ops
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("num_output_channels", [1, 3])
def test_grayscale_on_uint8_equals_torchvision_pil(size, channels, num_output_channels):
    rng = np.random.default_rng(size[0] + 31 * size[1])
    image = random_image(rng, *size, channels)
    want = from_pil(F.rgb_to_grayscale(to_pil(image), num_output_channels))
    assert_same_pixels(ops.rgb_to_grayscale(image, num_output_channels), want)
    assert_same_pixels(color.pil_grayscale(image, num_output_channels), want)


@needs_ops
def test_ops_read_a_row_strided_view_like_a_packed_image():
    rng = np.random.default_rng(3)
    full = random_image(rng, 17, 12, 3)
    view = full[:, 2:11]  # row stride 36, width 9
    packed = view.contiguous()
    assert_same_pixels(ops.adjust_saturation(view, 1.7), ops.adjust_saturation(packed, 1.7))
    assert_same_pixels(ops.adjust_hue(view, 0.2), ops.adjust_hue(packed, 0.2))


# ---- ColorJitter: drawn order and factors -----------------------------------------------


def torchvision_jitter_pil(pil, order, factors):
    fns = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
    for op in order:
        if not math.isnan(factors[op]):
            pil = fns[op](pil, factors[op])
    return pil


@needs_ops
@pytest.mark.parametrize("channels", [1, 3])
def test_color_jitter_with_sampled_params_equals_torchvision_pil(channels):
    spec = color.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
    order, factors = spec.params(torch.arange(40), seed=11, epoch=2)
    rng = np.random.default_rng(channels)
    for i in range(40):
        image = random_image(rng, 17 + i % 5, 9 + i % 7, channels)
        o, f = order[i].tolist(), factors[i].tolist()
        want = from_pil(torchvision_jitter_pil(to_pil(image), o, f))
        assert_same_pixels(ops.color_jitter(image, o, f), want)
        assert_same_pixels(color.color_jitter(image, o, f), want)


@needs_ops
def test_color_jitter_takes_the_contrast_mean_after_the_ops_before_it():
    # brightness then contrast: the grey level is the brightened image's mean.
    rng = np.random.default_rng(5)
    image = random_image(rng, 20, 30, 3)
    nan = math.nan
    for order in ([0, 1, 2, 3], [1, 0, 2, 3], [2, 3, 1, 0], [3, 2, 0, 1]):
        factors = [0.3, 1.9, 1.6, 0.21]
        want = from_pil(torchvision_jitter_pil(to_pil(image), order, factors))
        assert_same_pixels(ops.color_jitter(image, order, factors), want)
    # A disabled hue is skipped, not run with 0 (the HSV round trip is lossy).
    assert_same_pixels(ops.color_jitter(image, [3, 0, 1, 2], [nan, nan, nan, nan]), image)


# ---- tensor path (float) -----------------------------------------------------------------

FLOAT_OPS = {
    "brightness": (F2.adjust_brightness, "adjust_brightness", color.tensor_brightness, BLEND_FACTORS[:-1]),
    "contrast": (F2.adjust_contrast, "adjust_contrast", color.tensor_contrast, BLEND_FACTORS[:-1]),
    "saturation": (F2.adjust_saturation, "adjust_saturation", color.tensor_saturation, BLEND_FACTORS[:-1]),
    "hue": (F2.adjust_hue, "adjust_hue", color.tensor_hue, HUE_FACTORS),
}


@needs_ops
@pytest.mark.parametrize("name", sorted(FLOAT_OPS))
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
def test_ops_on_float_equal_torchvision_tensor_path(name, size, channels):
    want_fn, native, twin, factors = FLOAT_OPS[name]
    native = getattr(ops, native)
    rng = np.random.default_rng(size[0] * 7 + size[1] + channels)
    image = float_image(rng, *size, channels)
    for factor in factors:
        want = want_fn(chw(image), factor).permute(1, 2, 0)
        torch.testing.assert_close(native(image, factor), want, rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
        torch.testing.assert_close(twin(image, factor), want, rtol=FLOAT_RTOL, atol=FLOAT_ATOL)


@needs_ops
@pytest.mark.parametrize("num_output_channels", [1, 3])
def test_grayscale_on_float_equals_torchvision_tensor_path(num_output_channels):
    image = float_image(np.random.default_rng(2), 17, 9, 3)
    want = F2.rgb_to_grayscale(chw(image), num_output_channels).permute(1, 2, 0)
    torch.testing.assert_close(ops.rgb_to_grayscale(image, num_output_channels), want, rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
    torch.testing.assert_close(color.tensor_grayscale(image, num_output_channels), want, rtol=FLOAT_RTOL,
                               atol=FLOAT_ATOL)


# ---- RandomErasing -----------------------------------------------------------------------


@needs_ops
@pytest.mark.parametrize("fill", [[0.0], [-1.5], [0.1, -0.2, 0.3]])
def test_erase_with_a_value_equals_torchvision_erase(fill):
    image = float_image(np.random.default_rng(4), 17, 9, 3) * 4 - 2  # normalised-like
    box = [3, 2, 7, 5]
    want = F.erase(chw(image), *box, torch.tensor(fill)[:, None, None]).permute(1, 2, 0)
    assert torch.equal(ops.erase(image, box, fill, 0, 0, 0), want)
    assert torch.equal(color.erase(image, box, fill), want)


@needs_ops
def test_erase_random_values_are_the_samples_normals_in_torchvision_layout():
    image = torch.zeros(30, 40, 3)
    box = [5, 6, 11, 13]
    got = ops.erase(image, box, [], 3, 1, 77)
    twin = color.erase(image, box, [], 3, 1, 77)
    assert torch.equal(got, twin)
    patch = got[5:16, 6:19]
    assert torch.count_nonzero(got) == torch.count_nonzero(patch) == patch.numel()
    # [C, h, w] element order, as torchvision's value tensor.
    normals = torch.from_numpy(color.erase_normals(3, 1, 77, 3 * 11 * 13)).view(3, 11, 13)
    assert torch.equal(chw(patch), normals)


@needs_ops
def test_erase_random_values_are_standard_normal():
    ours = ops.erase(torch.zeros(1, DRAWS, 1), [0, 0, 1, DRAWS], [], 1, 0, 5).flatten().numpy()
    torch.manual_seed(0)
    theirs = torch.empty(DRAWS).normal_().numpy()
    assert ks_statistic(ours, theirs) < ks_critical(DRAWS, DRAWS)


@needs_ops
def test_erase_refuses_a_box_outside_the_image():
    with pytest.raises(ValueError, match="inside the 4x4 image"):
        ops.erase(torch.zeros(4, 4, 3), [2, 0, 3, 1], [0.0], 0, 0, 0)


# ---- parameter distributions against torchvision's samplers ------------------------------


def ks_statistic(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (exact for ties: both ECDFs at every value)."""
    a, b = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    values = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, values, side="right") / a.size
    cdf_b = np.searchsorted(b, values, side="right") / b.size
    return float(np.abs(cdf_a - cdf_b).max())


def ks_critical(n, m) -> float:
    return KS_C * math.sqrt((n + m) / (n * m))


def chi2_homogeneity(counts_a, counts_b) -> float:
    a, b = np.asarray(counts_a, np.float64), np.asarray(counts_b, np.float64)
    keep = (a + b) > 0  # cells neither sample has carry no information
    a, b = a[keep], b[keep]
    total = a + b
    expected_a, expected_b = total * a.sum() / total.sum(), total * b.sum() / total.sum()
    return float(((a - expected_a) ** 2 / expected_a + (b - expected_b) ** 2 / expected_b).sum())


def two_proportion_z(k1, n1, k2, n2) -> float:
    pooled = (k1 + k2) / (n1 + n2)
    return abs(k1 / n1 - k2 / n2) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))


@pytest.fixture(scope="module")
def jitter_draws():
    spec = color.ColorJitter(brightness=0.4, contrast=(0.2, 1.7), saturation=0.4, hue=0.3)
    order, factors = spec.params(torch.arange(DRAWS), seed=123, epoch=0)
    torch.manual_seed(0)
    theirs_order, theirs_factors = [], []
    args = (spec.brightness, spec.contrast, spec.saturation, spec.hue)
    for _ in range(DRAWS):
        fn_idx, *values = T.ColorJitter.get_params(*args)
        theirs_order.append(fn_idx.tolist())
        theirs_factors.append(values)
    return order.numpy(), factors.numpy(), np.array(theirs_order), np.array(theirs_factors, np.float64), spec


@needs_ops
@pytest.mark.parametrize("op", range(4))
def test_jitter_factors_follow_torchvision_distribution(jitter_draws, op):
    _, factors, _, theirs, spec = jitter_draws
    low, high = getattr(spec, color._OPS[op])
    assert factors[:, op].min() >= low and factors[:, op].max() <= high
    assert ks_statistic(factors[:, op], theirs[:, op]) < ks_critical(DRAWS, DRAWS)


@needs_ops
def test_jitter_order_is_a_uniform_permutation_like_randperm(jitter_draws):
    order, _, theirs, _, _ = jitter_draws
    assert (np.sort(order, 1) == np.arange(4)).all()
    codes = lambda o: ((o[:, 0] * 4 + o[:, 1]) * 4 + o[:, 2]) * 4 + o[:, 3]  # noqa: E731
    ours_counts = np.bincount(codes(order), minlength=256)
    theirs_counts = np.bincount(codes(theirs), minlength=256)
    assert np.count_nonzero(ours_counts) == np.count_nonzero(theirs_counts) == 24
    assert chi2_homogeneity(ours_counts, theirs_counts) < CHI2_CRIT_1E3[23]
    expected = np.full(24, DRAWS / 24)
    assert float(((ours_counts[ours_counts > 0] - expected) ** 2 / expected).sum()) < CHI2_CRIT_1E3[23]


@needs_ops
def test_jitter_disabled_ops_draw_nan_factors():
    order, factors = color.ColorJitter(brightness=0.5).params(torch.arange(50), 0, 0)
    assert not torch.isnan(factors[:, 0]).any() and torch.isnan(factors[:, 1:]).all()
    assert (order.sort(1).values == torch.arange(4)).all()


@needs_ops
def test_random_grayscale_probability_matches_torchvision():
    p = 0.1
    ours = int(color.RandomGrayscale(p).params(torch.arange(DRAWS), 9, 0).sum())
    torch.manual_seed(0)
    theirs = int((torch.rand(DRAWS) < p).sum())  # RandomGrayscale: torch.rand(1) < p per call
    assert two_proportion_z(ours, DRAWS, theirs, DRAWS) < Z_1E3
    assert abs(ours - DRAWS * p) < Z_1E3 * math.sqrt(DRAWS * p * (1 - p))


@pytest.mark.parametrize("p", [0.8, 0.3])
def test_random_apply_of_color_jitter_skips_a_sample_with_torchvisions_probability(p):
    """RandomApply([ColorJitter], p): torch.rand(1) < p per call decides; a skipped sample
    has every factor NaN, and the others keep exactly the draws of a plain ColorJitter."""
    spec = color.ColorJitter(0.4, 0.4, 0.4, 0.1)
    order, factors = spec.params(torch.arange(DRAWS), 9, 2)
    applied_order, applied_factors = color.ColorJitter(0.4, 0.4, 0.4, 0.1, p=p).params(torch.arange(DRAWS), 9, 2)
    skipped = torch.isnan(applied_factors).all(1)
    ours = int((~skipped).sum())
    torch.manual_seed(0)
    theirs = int((torch.rand(DRAWS) < p).sum())
    assert two_proportion_z(ours, DRAWS, theirs, DRAWS) < Z_1E3
    assert abs(ours - DRAWS * p) < Z_1E3 * math.sqrt(DRAWS * p * (1 - p))
    assert torch.equal(applied_order, order)
    assert torch.equal(applied_factors[~skipped], factors[~skipped])


def test_random_apply_probability_bounds_and_checks():
    indices = torch.arange(100)
    assert not torch.isnan(color.ColorJitter(0.4, p=1.5).params(indices, 0, 0)[1][:, 0]).any()
    assert torch.isnan(color.ColorJitter(0.4, p=-1).params(indices, 0, 0)[1]).all()
    with pytest.raises(TypeError, match="p should be a real number"):
        color.ColorJitter(0.4, p="0.5")
    with pytest.raises(ValueError, match="expected p in"):
        ops.color_jitter_params(indices, 0, 0, [0.6, 1.4] * 4, 1.5)


ERASE_DRAWS = 40_000  # torchvision's get_params costs ~60 us a call here: 40k keep it near 3 s


# torchvision's defaults, and a ratio range far from symmetric around 1 (where a swap of
# height and width would show).
@pytest.fixture(scope="module", params=[dict(p=0.6), dict(p=0.6, scale=(0.05, 0.2), ratio=(1.0, 4.0))],
                ids=["defaults", "tall"])
def erasing_draws(request):
    height, width = 32, 24
    spec = color.RandomErasing(**request.param)
    ours = spec.params(torch.arange(DRAWS), seed=5, epoch=1, height=height, width=width).numpy()
    torch.manual_seed(0)
    image = torch.zeros(3, height, width)
    theirs = []
    for _ in range(ERASE_DRAWS):
        if torch.rand(1) < spec.p:  # RandomErasing.forward
            i, j, h, w, v = T.RandomErasing.get_params(image, scale=spec.scale, ratio=spec.ratio, value=[0.0])
            theirs.append((i, j, h, w) if v is not image else (0, 0, 0, 0))
        else:
            theirs.append((0, 0, 0, 0))
    return ours, np.array(theirs), height, width


@needs_ops
def test_erasing_probability_matches_torchvision(erasing_draws):
    ours, theirs, _, _ = erasing_draws
    k_ours, k_theirs = int((ours[:, 2] > 0).sum()), int((theirs[:, 2] > 0).sum())
    assert two_proportion_z(k_ours, len(ours), k_theirs, len(theirs)) < Z_1E3


@needs_ops
@pytest.mark.parametrize("column, name", [(0, "top"), (1, "left"), (2, "height"), (3, "width")])
def test_erasing_boxes_follow_torchvision_distribution(erasing_draws, column, name):
    ours, theirs, height, width = erasing_draws
    ours, theirs = ours[ours[:, 2] > 0], theirs[theirs[:, 2] > 0]
    assert (ours[:, 0] + ours[:, 2] <= height).all() and (ours[:, 1] + ours[:, 3] <= width).all()
    assert (ours[:, 2] < height).all() and (ours[:, 3] < width).all()
    assert ks_statistic(ours[:, column], theirs[:, column]) < ks_critical(len(ours), len(theirs)), name


@needs_ops
def test_erasing_gives_up_after_ten_misses_like_torchvision():
    # Every drawn side is >= the image's: torchvision returns the image unchanged.
    spec = color.RandomErasing(p=1.0, scale=(0.9, 1.0), ratio=(5.0, 6.0))
    boxes = spec.params(torch.arange(200), 0, 0, height=10, width=10)
    assert torch.count_nonzero(boxes) == 0


@needs_ops
def test_draws_are_a_pure_function_of_seed_epoch_and_index():
    spec = color.ColorJitter(0.4, 0.4, 0.4, 0.1)
    erasing = color.RandomErasing(p=1.0)
    indices = torch.tensor([5, 0, 9, 5, 123456789])
    first = spec.params(indices, 1, 2)
    again = spec.params(indices.flip(0), 1, 2)
    assert torch.equal(first[0], again[0].flip(0)) and torch.equal(first[1], again[1].flip(0))
    assert torch.equal(first[1][0], first[1][3])  # the same index twice
    assert not torch.equal(first[1][0], first[1][1])  # another index
    assert not torch.equal(first[1], spec.params(indices, 1, 3)[1])  # another epoch
    assert not torch.equal(first[1], spec.params(indices, 2, 2)[1])  # another seed
    boxes = erasing.params(indices, 1, 2, 64, 64)
    assert torch.equal(boxes, erasing.params(indices, 1, 2, 64, 64)) and torch.equal(boxes[0], boxes[3])
    assert not torch.equal(boxes[0], boxes[1])
    grey = color.RandomGrayscale(0.5).params(torch.arange(64), 1, 2)
    assert torch.equal(grey, color.RandomGrayscale(0.5).params(torch.arange(64), 1, 2))
    assert not torch.equal(grey, color.RandomGrayscale(0.5).params(torch.arange(64, 128), 1, 2))
    normals = color.erase_normals(1, 2, 5, 10)
    assert np.array_equal(normals, color.erase_normals(1, 2, 5, 10))
    assert not np.array_equal(normals, color.erase_normals(1, 2, 6, 10))


# ---- the fused pass's colour stage, through the batch op -------------------------------


PILLOW_13 = int(Image.__version__.split(".")[0]) >= 13

# (width, height) -> (width, height) pairs Pillow 13 resamples vertically first (the
# height shrinks by more than twice as many pixels as the width: 30x73 -> 48x48, a
# RandomResizedCrop box of the fixture's images), and horizontally first (the rest,
# the boundary cases included: 22x28 -> 16x16 shrinks the height by exactly twice).
# Output widths of every remainder mod 4 and below 6: the vectorised horizontal pass
# works on four pixels at a time and writes 16 bytes where the row has room.
VERTICAL_FIRST = [((30, 73), (48, 48)), ((19, 25), (16, 16)), ((4, 19), (16, 16)), ((13, 25), (12, 20)),
                  ((40, 90), (70, 20)), ((9, 40), (5, 13)), ((7, 30), (1, 2))]
HORIZONTAL_FIRST = [((73, 30), (48, 48)), ((22, 28), (16, 16)), ((60, 70), (48, 48)), ((4, 10), (20, 12)),
                    ((90, 40), (20, 70)), ((33, 21), (7, 9)), ((50, 50), (3, 3)), ((17, 17), (6, 6)),
                    ((5, 3), (1, 1))]


def fused_pil_stage(image: np.ndarray, out_size, interpolation: str) -> np.ndarray:
    """The fused pass's PIL stage on a whole image (HWC uint8) with a neutral jitter: the
    uint8 image that Pillow's resize would give, HWC."""
    core = _ext.require_ops()
    h, w, c = image.shape
    plan = build_plan([specs.RandomResizedCrop(8), color.ColorJitter(brightness=(1.0, 1.0))], seed=0)
    out = torch.empty(1, c, out_size[1], out_size[0], dtype=torch.uint8)
    fl_ops.crop_resize_flip_normalize_batch(torch.from_numpy(image).flatten(), torch.tensor([[0, h, w, w * c]]),
                                            torch.tensor([[0, 0, h, w]], dtype=torch.float32), torch.tensor([False]),
                                            1.0, torch.zeros(c), torch.ones(c), out, interpolation=interpolation,
                                            color=core.color_passes(plan, torch.tensor([0]), 0))
    return out[0].permute(1, 2, 0).numpy()


@needs_ops
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("sizes", VERTICAL_FIRST + HORIZONTAL_FIRST, ids=str)
def test_pil_stage_resample_equals_pillow_in_its_pass_order(sizes, interpolation):
    """With colour ops the fused pass resamples as Pillow's resize, bit for bit, in the
    pass order Pillow picks for the size (noise, so either order's rounding shows)."""
    (w, h), out_size = sizes
    if sizes in VERTICAL_FIRST and not PILLOW_13:
        pytest.skip("Pillow before 13 always resamples horizontally first")
    image = np.random.default_rng(w * 1000 + h).integers(0, 256, (h, w, 3), dtype=np.uint8)
    resample = Image.BICUBIC if interpolation == "bicubic" else Image.BILINEAR
    want = np.asarray(Image.fromarray(image).resize(out_size, resample))
    got = fused_pil_stage(image, out_size, interpolation)
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} values differ"


# Factors a blend rounds differently at if its product fused into the add, or if the
# float were computed in another precision: ties, the ends of the ranges, extrapolation.
BLEND_FACTORS = [0.0, 0.6, 0.6000001, 0.75, 1.0, 1.0000001, 1.25, 1.4, 1.3999999, 2.0, 7.5] + \
    [float(f) for f in np.random.default_rng(3).uniform(0.0, 3.0, 40).astype(np.float32)]
_ENHANCE = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast, "saturation": F.adjust_saturation}


def fused_jitter_op(image: np.ndarray, op: str, factor: float) -> np.ndarray:
    """The fused pass with the one jitter op at `factor` on a whole uint8 HWC image, same
    size (Pillow's resample is then the identity): uint8 HWC."""
    core = _ext.require_ops()
    h, w, c = image.shape
    plan = build_plan([specs.RandomResizedCrop(8), color.ColorJitter(**{op: (factor, factor)})], seed=0)
    out = torch.empty(1, c, h, w, dtype=torch.uint8)
    fl_ops.crop_resize_flip_normalize_batch(torch.from_numpy(image).flatten(), torch.tensor([[0, h, w, w * c]]),
                                            torch.tensor([[0, 0, h, w]], dtype=torch.float32), torch.tensor([False]),
                                            1.0, torch.zeros(c), torch.ones(c), out,
                                            color=core.color_passes(plan, torch.tensor([0]), 0))
    return out[0].permute(1, 2, 0).numpy()


@needs_ops
@pytest.mark.parametrize("op", sorted(_ENHANCE))
def test_fused_blends_equal_pillow_on_every_value(op):
    """Brightness, contrast and saturation in the fused pass (the AVX2 build: 16 values or
    8 pixels a step, then the row's tail) equal Pillow's ImageEnhance bit for bit: every
    uint8 value against every grey level (saturation: random pixels; contrast: images of
    many means), over factors chosen to catch a different rounding."""
    rng = np.random.default_rng(7)
    for factor in BLEND_FACTORS:
        image = rng.integers(0, 256, (61, 67, 3), dtype=np.uint8)  # odd rows: vector steps and tails
        image.reshape(-1)[:256] = np.arange(256)  # every value
        if op == "contrast":  # a mean anywhere in 0..255
            image = (image.astype(np.int32) * rng.uniform(0, 1) + rng.integers(0, 128)).clip(0, 255).astype(np.uint8)
        got = fused_jitter_op(image, op, factor)
        want = np.asarray(_ENHANCE[op](Image.fromarray(image), factor))
        assert np.array_equal(got, want), f"{op} {factor!r}: {int((got != want).sum())} values differ"


@needs_ops
def test_fused_hue_equals_pillow_on_every_colour_class():
    """Hue in the fused pass (the AVX2 build: 8 pixels a step through Pillow's HSV in float
    and double lanes, then the row's tail) equals torchvision's PIL adjust_hue bit for bit:
    greys, primaries, each channel the maximum, ties, random colours, shifts of both signs.
    (All 2^24 colours were compared once, at eight shifts.)"""
    rng = np.random.default_rng(11)
    levels = np.array([0, 1, 2, 63, 127, 128, 129, 191, 254, 255], dtype=np.uint8)
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(-1, 3)
    pixels = np.concatenate([grid, rng.integers(0, 256, (61 * 67 - len(grid), 3), dtype=np.uint8)])
    image = pixels.reshape(61, 67, 3)
    for factor in [-0.5, -0.377, -0.1, -0.004, 0.0039, 0.05, 0.1, 0.25, 0.5]:  # 0: ColorJitter skips hue
        got = fused_jitter_op(image, "hue", factor)
        want = np.asarray(F.adjust_hue(Image.fromarray(image), factor))
        assert np.array_equal(got, want), f"hue {factor!r}: {int((got != want).any(-1).sum())} pixels differ"


_ISA_SCRIPT = """
import sys, numpy as np, torch
from fastload import _ext, ops
from fastload.augment import color, specs
from fastload.augment.plan import build_plan
core = _ext.require_ops()
rng = np.random.default_rng(5)
outs = []
for t in range(80):
    c = 3 if t % 4 else 1
    h, w = (int(v) for v in rng.integers(1, 70, 2))
    oh, ow = (int(v) for v in rng.integers(1, 70, 2))
    image = torch.from_numpy(rng.integers(0, 256, (h, w, c), dtype=np.uint8))
    factor = lambda top, p: float(rng.uniform(0, top)) if rng.random() < p else 0
    pipeline = [specs.RandomResizedCrop((oh, ow)), specs.RandomHorizontalFlip(),
                color.ColorJitter(factor(0.9, 0.7), factor(0.9, 0.7), factor(0.9, 0.7), factor(0.5, 0.6))]
    if rng.random() < 0.3:
        pipeline.append(color.RandomGrayscale(0.5))
    if rng.random() < 0.3:
        pipeline.append(color.RandomErasing(p=0.5))
    records = core.color_passes(build_plan(pipeline, seed=t), torch.tensor([t]), 0)
    dtype = (torch.uint8, torch.float32)[t % 2]
    out = torch.empty(1, c, oh, ow, dtype=dtype)
    ops.crop_resize_flip_normalize_batch(image.flatten(), torch.tensor([[0, h, w, w * c]]),
                                         torch.tensor([[0, 0, h, w]], dtype=torch.float32), torch.tensor([t % 3 > 0]),
                                         1.0 if dtype == torch.uint8 else 1 / 255, torch.zeros(c), torch.ones(c), out,
                                         interpolation=("bilinear", "bicubic")[t % 5 == 0], color=records)
    outs.append(out)
torch.save((_ext.build_info()["augment_cpu_path"], outs), sys.argv[1])
"""


@needs_ops
def test_colour_path_is_the_same_in_the_avx2_and_baseline_builds(tmp_path):
    """Every colour step has a vector loop in the AVX2 build and the scalar code in the
    baseline one (FASTLOAD_NO_AVX2=1): over random plans (all four jitter ops in random
    order, grayscale, erasing), sizes from 1 pixel, grey and RGB, uint8 and float32, flips,
    both give the same values, bit for bit."""
    results = []
    for avx2 in (True, False):
        env = {k: v for k, v in os.environ.items() if k != "FASTLOAD_NO_AVX2"}
        if not avx2:
            env["FASTLOAD_NO_AVX2"] = "1"
        path = tmp_path / f"outs_{int(avx2)}.pt"
        subprocess.run([sys.executable, "-c", _ISA_SCRIPT, str(path)], check=True, env=env, timeout=300)
        results.append(torch.load(path))
    (fast_path, fast), (base_path, base) = results
    assert base_path == "baseline"
    if fast_path != "avx2":
        pytest.skip(f"this CPU has no AVX2 + FMA: both runs took the {fast_path!r} path")
    differ = [i for i, (a, b) in enumerate(zip(fast, base)) if not torch.equal(a, b)]
    assert not differ, f"cases {differ} differ between the AVX2 and baseline builds"
