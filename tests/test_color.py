"""ColorJitter, Grayscale, RandomGrayscale and RandomErasing: the native ops
(csrc/augment/color*.h) and the twins in fastload/augment/color.py against torchvision.

uint8 images: torchvision's PIL path (functional ops on PIL images, with the factors the
native sampler drew). float images: its tensor path (v2 functional). The sampler: its
distributions against torchvision's own samplers (two-sample KS, chi-square), and a pure
function of (seed, epoch, index).
"""

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from fastload import _ext
from fastload.augment import color

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


# ---- spec validation: torchvision's exception types and messages --------------------------

BAD_ARGUMENTS = [
    ("ColorJitter", dict(brightness=-0.1)),
    ("ColorJitter", dict(contrast=-1)),
    ("ColorJitter", dict(saturation=(1.5, 0.5))),
    ("ColorJitter", dict(brightness=(-0.5, 1.0))),
    ("ColorJitter", dict(hue=0.6)),
    ("ColorJitter", dict(hue=-0.1)),
    ("ColorJitter", dict(hue=(-0.6, 0.2))),
    ("ColorJitter", dict(hue=(0.3, 0.1))),
    ("ColorJitter", dict(brightness=(0.1, 0.2, 0.3))),
    ("ColorJitter", dict(contrast="strong")),
    ("RandomErasing", dict(value="noise")),
    ("RandomErasing", dict(value=object())),
    ("RandomErasing", dict(scale=0.5)),
    ("RandomErasing", dict(ratio=None)),
    ("RandomErasing", dict(scale=(-0.1, 0.3))),
    ("RandomErasing", dict(scale=(0.1, 1.3))),
    ("RandomErasing", dict(p=1.5)),
    ("RandomErasing", dict(p=-0.01)),
]


@pytest.mark.parametrize("name, kwargs", BAD_ARGUMENTS)
def test_specs_refuse_bad_arguments_in_torchvisions_words(name, kwargs):
    with pytest.raises(Exception) as want:
        getattr(T, name)(**kwargs)
    with pytest.raises(type(want.value)) as got:
        getattr(color, name)(**kwargs)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def test_grayscale_refuses_a_channel_count_as_torchvision_does_on_its_first_image():
    with pytest.raises(ValueError) as want:
        T.Grayscale(num_output_channels=2)(Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError) as got:
        color.Grayscale(num_output_channels=2)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("kwargs", [dict(scale=(0.3, 0.1)), dict(ratio=(3.0, 0.5))])
def test_erasing_decreasing_range_warns_and_fails_as_torchvision_does_on_its_first_image(kwargs):
    with pytest.warns(UserWarning, match=r"Scale and ratio should be of kind \(min, max\)"):
        transform = T.RandomErasing(p=1.0, **kwargs)
    with pytest.raises(RuntimeError) as want:
        transform(torch.zeros(3, 8, 8))
    with pytest.warns(UserWarning, match=r"Scale and ratio should be of kind \(min, max\)"):
        with pytest.raises(RuntimeError) as got:
            color.RandomErasing(p=1.0, **kwargs)
    # torch's message formats the floats its own way (float32 log ratio): same words.
    assert str(got.value).split(",")[0] == str(want.value).split(",")[0]


def test_erasing_refuses_a_per_channel_value_of_the_wrong_length_like_torchvision():
    with pytest.raises(ValueError) as want:
        T.RandomErasing(p=1.0, value=(1.0, 2.0))(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError) as got:
        color.RandomErasing(p=1.0, value=(1.0, 2.0)).fill(3)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(brightness=0.4, contrast=0.4, saturation=0.4), dict(brightness=(0.5, 1.5), hue=0.5),
     dict(brightness=2.0, hue=(-0.2, 0.0)), dict(contrast=(1, 1), hue=(0, 0)), dict(saturation=[0.0, 0.0])],
)
def test_jitter_spec_holds_torchvisions_ranges(kwargs):
    want, got = T.ColorJitter(**kwargs), color.ColorJitter(**kwargs)
    for name in color._OPS:
        assert getattr(got, name) == getattr(want, name), name
    assert color.ColorJitter(**{n: getattr(got, n) for n in color._OPS}) == got  # ranges round-trip


def test_erasing_spec_accepts_what_torchvision_accepts():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kwargs in (dict(), dict(p=0.25, value="random"), dict(value=(0.1, 0.2, 0.3)), dict(scale=[0.1, 0.1])):
            T.RandomErasing(**kwargs)
            assert color.RandomErasing(**kwargs).p == kwargs.get("p", 0.5)
