"""TrivialAugmentWide, RandAugment and AugMix (v1 and v2): the ops and their samplers.

The op fastload::auto_augment against torchvision's own ops on PIL images for every op,
bin and sign of both augmentation spaces; fastload::augmix_step against torchvision's
tensor path; the spaces against torchvision's tables; the per-sample draws against
torchvision's distributions; the AugMix mix against AugMix.forward; the batch op on
hostile colour records. The fused pass and the loader: tests/test_autoaugment_fused.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from affine_ties import AFFINE_OPS, inadmissible  # (tests/affine_ties.py)
from fastload import _ext
from fastload import ops as fl_ops
from fastload.augment import autoaugment, specs
from fastload.augment.autoaugment import OPS, RandAugment, TrivialAugmentWide
from fastload.augment.plan import build_plan

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import autoaugment as tv_autoaugment  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

DRAWS = 100_000


def pil_image(height: int, width: int, channels: int, seed: int = 0) -> Image.Image:
    """A gradient with noise and a dark and a bright patch: every op changes it, the
    histograms have gaps and ends to find, edges to shear."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = 40 + 150 * x / max(width - 1, 1) + 30 * np.sin(y / 3.0)
    pixels = base[..., None] + rng.normal(0, 25, (height, width, channels))
    pixels[: height // 4, : width // 4] = 3
    pixels[-(height // 5):, -(width // 5):] = 250
    pixels = np.clip(pixels, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, "L" if channels == 1 else "RGB")


def hwc(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image)
    return torch.from_numpy(array.copy() if array.ndim == 3 else array[..., None].copy())


def torchvision_space(kind: str, bins: int, height: int, width: int):
    """torchvision v1's augmentation space: [(op name, magnitudes (a list, [] for none), signed)]."""
    if kind == "ta":
        space = tv_autoaugment.TrivialAugmentWide()._augmentation_space(bins)
    else:
        space = tv_autoaugment.RandAugment()._augmentation_space(bins, (height, width))
    return [(name, magnitudes.tolist() if magnitudes.ndim else [], signed)
            for name, (magnitudes, signed) in space.items()]


# ---- the op: every op, bin and sign against torchvision ----------------------------------


@pytest.mark.parametrize("interpolation", [T.InterpolationMode.NEAREST, T.InterpolationMode.BILINEAR])
@pytest.mark.parametrize("kind", ["ta", "ra"])
@pytest.mark.parametrize("height, width, channels, fill", [
    (37, 53, 3, None),
    (24, 24, 3, [7, 100, 200]),  # square: Rotate's 90 and 270 degrees are transposes
    (29, 18, 1, [9]),            # "L"
    (2, 5, 3, None),             # under SMOOTH's 3x3: Sharpness changes nothing
    (1, 1, 1, [255]),
])
def test_every_op_bin_and_sign_equals_torchvision_on_a_pil_image(kind, interpolation, height, width, channels, fill):
    image = pil_image(height, width, channels, seed=height + width)
    pixels = hwc(image)
    bilinear = interpolation == T.InterpolationMode.BILINEAR
    mismatches = []
    for name, magnitudes, signed in torchvision_space(kind, 31, height, width):
        for magnitude in magnitudes or [0.0]:
            for sign in (1.0, -1.0) if signed else (1.0,):
                m = float(magnitude) * sign
                want = hwc(tv_autoaugment._apply_op(image, name, m, interpolation, fill))
                got = fl_ops.auto_augment(pixels, [OPS.index(name)], [m], fill or [], bilinear)
                if not torch.equal(got, want):
                    mismatches.append((name, m, int((got != want).sum())))
    assert not mismatches, mismatches[:10]


def test_the_v2_ops_equal_torchvision_v2_on_a_pil_image():
    image = pil_image(31, 44, 3, seed=5)
    pixels = hwc(image)
    augment = v2.TrivialAugmentWide()
    fill = augment._fill
    ops, magnitudes = TrivialAugmentWide(v2=True).space(31, 44)
    mismatches = []
    for k, op in enumerate(ops):
        for b in (0, 7, 19, 30):
            m = magnitudes[k * 31 + b]
            for sign in (1.0, -1.0) if autoaugment.OPS[op] in ("ShearX", "Rotate", "Sharpness") else (1.0,):
                name = OPS[op]
                # v2 passes Solarize a fraction of 255; the spec's table holds the threshold.
                given = m / 255.0 if name == "Solarize" else m * sign
                want = hwc(augment._apply_image_or_video_transform(image, name, given, T.InterpolationMode.NEAREST,
                                                                   fill))
                got = fl_ops.auto_augment(pixels, [op], [m * sign])
                if not torch.equal(got, want):
                    mismatches.append((name, m * sign))
    assert not mismatches, mismatches


def test_several_ops_run_in_order():
    image = pil_image(33, 27, 3, seed=2)
    names = ["Rotate", "Equalize", "ShearY", "Contrast", "Posterize"]
    magnitudes = [21.0, 0.0, -0.2, 0.6, 5.0]
    want = image
    for name, m in zip(names, magnitudes):
        want = tv_autoaugment._apply_op(want, name, m, T.InterpolationMode.NEAREST, None)
    got = fl_ops.auto_augment(hwc(image), [OPS.index(n) for n in names], magnitudes)
    assert torch.equal(got, hwc(want))
    assert torch.equal(autoaugment.apply_reference(hwc(image), [OPS.index(n) for n in names], magnitudes), hwc(want))


@pytest.mark.parametrize("call, match", [
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 3), [0], [0.0]), "expected a uint8 HWC image"),
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 2, dtype=torch.uint8), [0], [0.0]), "expected a uint8 HWC image"),
    (lambda: fl_ops.auto_augment(torch.zeros(0, 4, 3, dtype=torch.uint8), [0], [0.0]), "non-empty"),
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 3, dtype=torch.uint8), [15], [0.0]), r"op ids in \[0, 15\)"),
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 3, dtype=torch.uint8), [0, 1], [0.0]), "one magnitude per op"),
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 3, dtype=torch.uint8), [10], [0.0]), "bits must be between"),
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 3, dtype=torch.uint8), [5], [float("nan")]), "finite"),
    (lambda: fl_ops.auto_augment(torch.zeros(4, 4, 3, dtype=torch.uint8), [5], [1.0], [1, 2]), "fill"),
])
def test_bad_op_arguments_raise_with_the_reason(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---- the spaces and the draws --------------------------------------------------------------


@pytest.mark.parametrize("bins", [2, 3, 10, 31, 57])
@pytest.mark.parametrize("height, width", [(224, 224), (37, 91)])
def test_the_spaces_are_torchvisions_tables(bins, height, width):
    for kind, spec in (("ta", TrivialAugmentWide(bins)), ("ra", RandAugment(num_magnitude_bins=bins))):
        ops, magnitudes = spec.space(height, width)
        space = torchvision_space(kind, bins, height, width)
        assert [OPS[op] for op in ops] == [name for name, _, _ in space]
        for k, (_, values, signed) in enumerate(space):
            assert magnitudes[k * bins:(k + 1) * bins] == ([float(v) for v in values] or [0.0] * bins)
            assert autoaugment_signed(ops[k]) == signed
    for spec, augment in ((TrivialAugmentWide(bins, v2=True), v2.TrivialAugmentWide(num_magnitude_bins=bins)),
                          (RandAugment(num_magnitude_bins=bins, v2=True), v2.RandAugment(num_magnitude_bins=bins))):
        ops, magnitudes = spec.space(height, width)
        assert [OPS[op] for op in ops] == list(augment._AUGMENTATION_SPACE)
        for k, (name, (table, _)) in enumerate(augment._AUGMENTATION_SPACE.items()):
            values = table(bins, height, width)
            values = [] if values is None else [float(v) for v in values.tolist()]
            if name == "Solarize":  # v2's threshold: 255 * the fraction
                values = [255.0 * v for v in values]
            assert magnitudes[k * bins:(k + 1) * bins] == (values or [0.0] * bins)


def autoaugment_signed(op: int) -> bool:
    return OPS[op] in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
                       "Sharpness")


def chi_square_uniform(counts: np.ndarray) -> bool:
    """Pearson's statistic of counts against a uniform law, below its alpha = 1e-4 bound
    (the Wilson-Hilferty approximation of the chi-square quantile)."""
    expected = counts.sum() / len(counts)
    statistic = ((counts - expected) ** 2 / expected).sum()
    dof = len(counts) - 1
    bound = dof * (1 - 2 / (9 * dof) + 3.719 * (2 / (9 * dof)) ** 0.5) ** 3
    return statistic < bound


def test_trivial_augment_wide_draws_follow_torchvisions_sampler():
    spec = TrivialAugmentWide()
    ops, magnitudes = spec.params(torch.arange(DRAWS), 4, 2, 224, 224)
    assert ops.shape == magnitudes.shape == (DRAWS, 1)
    ops, magnitudes = ops[:, 0].numpy(), magnitudes[:, 0].numpy()
    space_ops, table = spec.space(224, 224)
    table = np.array(table).reshape(len(space_ops), 31)
    assert chi_square_uniform(np.bincount(ops, minlength=15)[space_ops])  # one op of the 14, uniformly
    for k, op in enumerate(space_ops):
        drawn = magnitudes[ops == op]
        if not autoaugment.OPS[op] in ("Identity", "AutoContrast", "Equalize"):
            # every bin uniformly: the index of |magnitude| in the op's table (first match)
            bins = np.array([int(np.flatnonzero(table[k] == abs(m))[0]) for m in drawn[:2000]])
            if len(set(table[k])) == 31:
                assert chi_square_uniform(np.bincount(bins, minlength=31))
        else:
            assert (drawn == 0).all()
        negative = np.signbit(drawn).mean()  # -0.0 included: bin 0 gets its sign too
        if autoaugment_signed(op):
            assert abs(negative - 0.5) < 4 * (0.25 / len(drawn)) ** 0.5  # the sign, p = 1/2
        else:
            assert negative == 0


def test_rand_augment_draws_num_ops_ops_at_its_magnitude():
    spec = RandAugment(num_ops=3, magnitude=7)
    ops, magnitudes = spec.params(torch.arange(DRAWS // 4), 1, 0, 64, 48)
    assert ops.shape == (DRAWS // 4, 3)
    space_ops, table = spec.space(64, 48)
    table = np.array(table).reshape(len(space_ops), 31)
    for column in range(3):  # each op of the 14 uniformly, independently of the others
        assert chi_square_uniform(np.bincount(ops[:, column].numpy(), minlength=15)[space_ops])
    at_bin = {op: table[k, 7] for k, op in enumerate(space_ops)}
    assert all(abs(m) == at_bin[op] for op, m in zip(ops.flatten().tolist(), magnitudes.flatten().tolist()))
    same = (ops[:, 0] == ops[:, 1]).double().mean().item()  # repeats, as torchvision allows
    assert abs(same - 1 / 14) < 0.01


def test_draws_are_a_pure_function_of_seed_epoch_and_index():
    spec = TrivialAugmentWide()
    a = spec.params(torch.tensor([5, 9, 5]), 3, 1, 32, 32)
    b = spec.params(torch.tensor([9, 5]), 3, 1, 32, 32)
    assert torch.equal(a[0][0], a[0][2]) and torch.equal(a[0][1], b[0][0]) and torch.equal(a[1][1], b[1][0])
    other_epoch = spec.params(torch.arange(200), 3, 2, 32, 32)[0]
    assert not torch.equal(spec.params(torch.arange(200), 3, 1, 32, 32)[0], other_epoch)


# ---- AugMix: torchvision's tensor-path ops, its draws and its mix ------------------------------


def augmix_space(height: int, width: int, all_ops: bool = True):
    space = tv_autoaugment.AugMix(all_ops=all_ops)._augmentation_space(autoaugment.AUGMIX_BINS, (height, width))
    return [(name, magnitudes.tolist() if magnitudes.ndim else [], signed)
            for name, (magnitudes, signed) in space.items()]


@pytest.mark.parametrize("interpolation", [T.InterpolationMode.BILINEAR, T.InterpolationMode.NEAREST])
@pytest.mark.parametrize("height, width, channels", [(37, 53, 3), (48, 48, 1), (2, 5, 3), (3, 3, 3), (1, 1, 1)])
def test_every_augmix_op_equals_torchvisions_tensor_path(interpolation, height, width, channels):
    """Bit for bit, but for the affine ops' rounding ties, which torch itself resolves
    differently from one CPU to another (tests/affine_ties.py)."""
    pixels = hwc(pil_image(height, width, channels, seed=height * width))
    tensor = pixels.permute(2, 0, 1).contiguous()
    nearest = interpolation == T.InterpolationMode.NEAREST
    mismatches = []
    for name, magnitudes, signed in augmix_space(height, width):
        for magnitude in magnitudes or [0.0]:
            for sign in (1.0, -1.0) if signed else (1.0,):
                m = float(magnitude) * sign
                want = tv_autoaugment._apply_op(tensor, name, m, interpolation, None)
                got = fl_ops.augmix_step(pixels, OPS.index(name), m, not nearest).permute(2, 0, 1)
                if name in AFFINE_OPS:
                    bad = inadmissible(got, want, lambda x: tv_autoaugment._apply_op(x, name, m, interpolation, None),
                                       tensor, nearest)
                else:
                    bad = int((got != want).any(0).sum())
                if bad:
                    mismatches.append((name, m, bad))
    assert not mismatches, mismatches[:10]


def test_the_augmix_space_is_torchvisions():
    for all_ops in (True, False):
        ops, magnitudes = autoaugment.AugMix(all_ops=all_ops).space(61, 40)
        space = augmix_space(61, 40, all_ops)
        assert [OPS[op] for op in ops] == [name for name, _, _ in space]
        bins = autoaugment.AUGMIX_BINS
        for k, (_, values, signed) in enumerate(space):
            assert magnitudes[k * bins:(k + 1) * bins] == ([float(v) for v in values] or [0.0] * bins)
            assert autoaugment_signed(ops[k]) == signed


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)).max())


@pytest.mark.parametrize("alpha", [1.0, 0.3, 2.5])
def test_augmix_weights_follow_torchs_dirichlet(alpha):
    spec = autoaugment.AugMix(alpha=alpha)
    weights, _, _, _ = spec.params(torch.arange(DRAWS // 2), 7, 0, 32, 32)
    torch.manual_seed(0)
    m = torch._sample_dirichlet(torch.tensor([alpha, alpha]).expand(DRAWS // 2, -1))
    theirs = torch._sample_dirichlet(torch.tensor([alpha] * 3).expand(DRAWS // 2, -1)) * m[:, 1:2]
    critical = 2.15 * (2.0 / (DRAWS // 2)) ** 0.5  # two-sample KS at alpha = 1e-4
    assert ks_statistic(weights[:, 0].numpy(), m[:, 0].numpy()) < critical
    for k in range(3):
        assert ks_statistic(weights[:, 1 + k].numpy(), theirs[:, k].numpy()) < critical
    assert torch.allclose(weights.sum(1), torch.ones(DRAWS // 2), atol=1e-5)


def test_augmix_chains_draw_torchvisions_depths_ops_and_bins():
    spec = autoaugment.AugMix(severity=4)
    _, depths, ops, magnitudes = spec.params(torch.arange(DRAWS // 4), 2, 3, 40, 40)
    assert chi_square_uniform(np.bincount(depths.flatten().numpy(), minlength=4)[1:])  # 1, 2 or 3 ops
    used = ops[ops >= 0].numpy()
    space_ops, table = spec.space(40, 40)
    assert chi_square_uniform(np.bincount(used, minlength=15)[space_ops])
    table = np.array(table).reshape(len(space_ops), autoaugment.AUGMIX_BINS)
    for k, op in enumerate(space_ops):
        drawn = np.abs(magnitudes[ops == op].numpy())
        if autoaugment.OPS[op] not in ("AutoContrast", "Equalize"):
            assert set(drawn.tolist()) <= set(table[k, :4].tolist())  # bins [0, severity)
    fixed = autoaugment.AugMix(chain_depth=2, mixture_width=2).params(torch.arange(50), 0, 0, 40, 40)[1]
    assert (fixed == 2).all() and fixed.shape == (50, 2)


def test_the_augmix_twin_is_torchvisions_forward():
    """augmix_reference with torchvision's own draws (replayed) equals AugMix.forward."""
    image = pil_image(30, 34, 3, seed=9)
    augmix = tv_autoaugment.AugMix()
    torch.manual_seed(4)
    want = hwc(augmix(image))
    # Replay: the same generator state, the draws in forward's order.
    torch.manual_seed(4)
    m = torch._sample_dirichlet(torch.tensor([1.0, 1.0]).expand(1, -1))
    w = torch._sample_dirichlet(torch.tensor([1.0] * 3).expand(1, -1)) * m[:, 1].view(1, -1)
    space = list(augmix._augmentation_space(10, (30, 34)).items())
    ops, magnitudes = [], []
    for _ in range(3):
        depth = int(torch.randint(low=1, high=4, size=(1,)).item())
        chain_ops, chain_magnitudes = [], []
        for _ in range(depth):
            name, (table, signed) = space[int(torch.randint(len(space), (1,)).item())]
            magnitude = float(table[torch.randint(3, (1,), dtype=torch.long)].item()) if table.ndim > 0 else 0.0
            if signed and torch.randint(2, (1,)):
                magnitude *= -1.0
            chain_ops.append(OPS.index(name))
            chain_magnitudes.append(magnitude)
        ops.append(chain_ops)
        magnitudes.append(chain_magnitudes)
    weights = [float(m[0, 0])] + [float(v) for v in w[0]]
    assert torch.equal(autoaugment.augmix_reference(hwc(image), weights, ops, magnitudes), want)
    # And the engine's mix of the same draws: the native chains and mix.
    assert torch.equal(native_augmix(hwc(image), weights, ops, magnitudes), want)


def native_augmix(pixels, weights, ops, magnitudes):
    """The mix of native op results, as augmix_uint8 forms it (float32, truncated)."""
    mix = torch.tensor(weights[0], dtype=torch.float32) * pixels
    for k, (chain_ops, chain_magnitudes) in enumerate(zip(ops, magnitudes)):
        chain = pixels
        for op, m in zip(chain_ops, chain_magnitudes):
            chain = fl_ops.augmix_step(chain, op, m)
        mix = mix + torch.tensor(weights[1 + k], dtype=torch.float32) * chain
    return mix.to(torch.uint8)


def test_equalize_takes_pillow_13s_step():
    """(count - count of the last value) // 255: 2040 // 255 = 8, where // 256 would be 7."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 201, (41, 50, 3), dtype=np.uint8)
    pixels.reshape(-1, 3)[:10] = 255  # the last value: 10 pixels, 2040 others
    image = Image.fromarray(pixels)
    assert torch.equal(fl_ops.auto_augment(hwc(image), [OPS.index("Equalize")], [0.0]), hwc(F.equalize(image)))
    tensor = torch.from_numpy(pixels).permute(2, 0, 1).contiguous()
    assert torch.equal(fl_ops.augmix_step(hwc(image), OPS.index("Equalize"), 0.0),
                       F.equalize(tensor).permute(1, 2, 0))


@pytest.mark.parametrize("augment", [TrivialAugmentWide(), RandAugment(num_ops=4), autoaugment.AugMix()],
                         ids=["ta", "ra", "augmix"])
def test_the_batch_op_refuses_or_runs_hostile_records_never_reads_out_of_bounds(augment):
    """Random bytes over the drawn records (op ids, magnitudes as NaN, inf or huge doubles,
    weights, depths): the batch op runs them or raises ValueError (the sanitizer build
    runs this test too)."""
    core = _ext.require_ops()
    plan = build_plan([specs.RandomResizedCrop(16), augment, specs.ToDtype(torch.float32, scale=True)], seed=1)
    image = hwc(pil_image(20, 24, 3, seed=1)).flatten()
    shapes = torch.tensor([[0, 20, 24, 72]])
    boxes, flips = torch.tensor([[0.0, 0.0, 20.0, 24.0]]), torch.tensor([False])
    mean, std = torch.zeros(3), torch.ones(3)
    good = core.color_passes(plan, torch.tensor([3]), 0)
    out = torch.empty(1, 3, 16, 16)
    fl_ops.crop_resize_flip_normalize_batch(image, shapes, boxes, flips, 1 / 255, mean, std, out, color=good)
    rng = np.random.default_rng(0)
    hostile = [np.float64(v).tobytes() for v in (np.nan, np.inf, -1e300, 1e5, 3.5, -0.0)] + \
              [np.float32(v).tobytes() for v in (np.nan, 2.0, -1.0)] + [np.int32(v).tobytes() for v in (-1, 15, 99)]
    refused = 0
    for _ in range(300):
        record = good.clone()
        raw = record.numpy()
        for _ in range(rng.integers(1, 4)):
            chunk = hostile[rng.integers(len(hostile))]
            at = int(rng.integers(0, raw.shape[1] - len(chunk) + 1))
            raw[0, at:at + len(chunk)] = np.frombuffer(chunk, np.uint8)
        try:
            fl_ops.crop_resize_flip_normalize_batch(image, shapes, boxes, flips, 1 / 255, mean, std, out, color=record)
        except ValueError as error:
            assert "colour record" in str(error)
            refused += 1
    assert 0 < refused < 300
