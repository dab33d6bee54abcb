"""torchvision.transforms.v2.AugMix runs natively (fastload.augment.autoaugment.AugMix with
v2=True): its space, its ops on the uint8 tensor and its forward replayed with its own
draws, against the native ops and mix; a v2 recipe with AugMix takes the native path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from affine_ties import AFFINE_OPS, inadmissible, native_ties  # (tests/affine_ties.py)
from fastload import _ext
from fastload.augment import autoaugment
from fastload.augment.autoaugment import OPS
from test_autoaugment import hwc, native_augmix, pil_image  # (tests/ops/test_autoaugment.py)
from test_autoaugment_fused import OUT

torchvision = pytest.importorskip("torchvision")
from torchvision.transforms import v2  # noqa: E402

fl_ops = pytest.importorskip("fastload.ops")
needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built")
pytestmark = [needs_ops, pytest.mark.timeout(300)]


def v2_space(height, width, all_ops=True):
    """v2's augmentation space: [(op name, magnitudes as its forward uses them, signed)]."""
    augmix = v2.AugMix(all_ops=all_ops)
    space = augmix._AUGMENTATION_SPACE if all_ops else augmix._PARTIAL_AUGMENTATION_SPACE
    out = []
    for name, (magnitudes_fn, signed) in space.items():
        values = magnitudes_fn(autoaugment.AUGMIX_BINS, height, width)
        values = [] if values is None else [float(v) for v in values]
        if name == "Solarize":  # F.solarize(image, threshold=bound * magnitude), bound 255 for uint8
            values = [255 * v for v in values]  # (torch compares the uint8 image with it in float32)
        out.append((name, values, signed))
    return out


def test_the_v2_space_is_v2s():
    for all_ops in (True, False):
        ops, magnitudes = autoaugment.AugMix(all_ops=all_ops, v2=True).space(61, 40)
        space = v2_space(61, 40, all_ops)
        assert [OPS[op] for op in ops] == [name for name, _, _ in space]
        bins = autoaugment.AUGMIX_BINS
        for k, (name, values, _) in enumerate(space):
            if name == "Solarize":  # the threshold as torch compares it with a uint8 image: in float32
                values = [float(np.float32(v)) for v in values]
            assert magnitudes[k * bins:(k + 1) * bins] == (values or [0.0] * bins), name


def apply_v2(tensor, name, magnitude, interpolation):
    """v2.AugMix's own op on a uint8 CHW tensor, as its forward calls it (the thresholds of
    Solarize already times 255, as in v2_space)."""
    augmix = v2.AugMix(interpolation=interpolation)
    if name == "Solarize":
        return v2.functional.solarize(tensor, threshold=magnitude)
    return augmix._apply_image_or_video_transform(tensor, name, magnitude, interpolation=augmix.interpolation,
                                                  fill=augmix._fill)


# v2's tensor kernels round differently from v1's (which the native ops follow bit for
# bit) in these ops: up to one uint8 level on some pixels (measured: Color 0.2 %, Sharpness
# 1.5 % of pixels, AutoContrast on 1- and 2-pixel-high images); every other op is exact.
ROUNDED_DIFFERENTLY = ("Color", "Sharpness", "AutoContrast")


@pytest.mark.parametrize("interpolation", [v2.InterpolationMode.BILINEAR, v2.InterpolationMode.NEAREST])
@pytest.mark.parametrize("height, width, channels", [(37, 53, 3), (48, 48, 1), (2, 5, 3), (1, 1, 1)])
def test_every_v2_augmix_op_equals_the_native_op(interpolation, height, width, channels):
    """Each op of v2's space at each bin and sign, v2's own kernel at v2's own magnitude
    against the native op at the spec's magnitude for that bin. The affine ops up to the
    rounding ties torch itself resolves differently from one CPU to another
    (tests/affine_ties.py)."""
    pixels = hwc(pil_image(height, width, channels, seed=height * width))
    tensor = pixels.permute(2, 0, 1).contiguous()
    nearest = interpolation == v2.InterpolationMode.NEAREST
    spec_ops, spec_magnitudes = autoaugment.AugMix(v2=True).space(height, width)
    bins = autoaugment.AUGMIX_BINS
    mismatches = []
    for k, (name, magnitudes, signed) in enumerate(v2_space(height, width)):
        for b, magnitude in enumerate(magnitudes or [0.0]):
            for sign in (1.0, -1.0) if signed else (1.0,):
                m = float(magnitude) * sign
                want = apply_v2(tensor, name, m, interpolation)
                got = fl_ops.augmix_step(pixels, spec_ops[k], spec_magnitudes[k * bins + b] * sign,
                                         not nearest).permute(2, 0, 1)
                levels = int((got.int() - want.int()).abs().max())
                if name in AFFINE_OPS:
                    bad = inadmissible(got, want, lambda x: apply_v2(x, name, m, interpolation), tensor, nearest)
                    if bad:
                        mismatches.append((name, m, bad, levels))
                elif levels > (1 if name in ROUNDED_DIFFERENTLY else 0):
                    mismatches.append((name, m, int((got != want).sum()), levels))
    assert not mismatches, mismatches[:10]


def test_v2_forward_replayed_with_its_draws_is_the_native_mix():
    """v2.AugMix.forward's own draws (replayed in its order: two Dirichlets, then per chain
    a depth, per op randint(len(space), ()), a bin randint(severity, ()), a sign
    rand(()) <= 0.5) through the native ops at the spec's magnitudes and the native mix:
    its output bit for bit where no chain draws an op v2 rounds differently, within one
    level where one does. v2's affine steps give the native op's result once it is
    checked to be theirs up to the rounding ties torch itself resolves differently from
    one CPU to another (tests/affine_ties.py): a tie resolved the other way early in a
    chain would otherwise move every later op's input."""
    spec_ops, spec_magnitudes = autoaugment.AugMix(v2=True).space(30, 34)
    space = v2_space(30, 34)
    exact = 0
    for seed in range(24):
        image = pil_image(30, 34, 3, seed=9 + seed)
        torch.manual_seed(seed)
        with native_ties(v2.AugMix, "_apply_image_or_video_transform", method=True):
            want = hwc(v2.AugMix()(image))
        torch.manual_seed(seed)
        m = torch._sample_dirichlet(torch.tensor([1.0, 1.0]).expand(1, -1))
        w = torch._sample_dirichlet(torch.tensor([1.0] * 3).expand(1, -1)) * m[:, 1].reshape(1, -1)
        ops, magnitudes, names = [], [], set()
        for _ in range(3):
            depth = int(torch.randint(low=1, high=4, size=(1,)).item())
            chain_ops, chain_magnitudes = [], []
            for _ in range(depth):
                k = int(torch.randint(len(space), ()))
                name, table, signed = space[k]
                magnitude = 0.0
                if table:
                    magnitude = spec_magnitudes[k * autoaugment.AUGMIX_BINS + int(torch.randint(3, ()))]
                    if signed and torch.rand(()) <= 0.5:
                        magnitude *= -1
                chain_ops.append(spec_ops[k])
                chain_magnitudes.append(magnitude)
                names.add(name)
            ops.append(chain_ops)
            magnitudes.append(chain_magnitudes)
        weights = [float(m[0, 0])] + [float(v) for v in w[0]]
        levels = (native_augmix(hwc(image), weights, ops, magnitudes).int() - want.int()).abs().max()
        if names.isdisjoint(ROUNDED_DIFFERENTLY):
            assert levels == 0, f"seed {seed}: {sorted(names)}"
            exact += 1
        else:
            assert levels <= 1, f"seed {seed}: {sorted(names)}"
    assert exact >= 3  # (the seeds cover both cases)


def test_the_v2_spec_draws_signs_bins_and_ops_as_v2():
    """The engine's draws for the v2 spec: ops uniform over v2's 13 (9 without all_ops),
    bins in [0, severity), both signs about half the time on signed ops."""
    spec = autoaugment.AugMix(severity=4, v2=True)
    _, depths, ops, magnitudes = spec.params(torch.arange(4000), 2, 3, 40, 40)
    used = ops[ops >= 0].numpy()
    space_ops, table = spec.space(40, 40)
    counts = np.bincount(used, minlength=15)[space_ops]
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()
    table = np.array(table).reshape(len(space_ops), autoaugment.AUGMIX_BINS)
    solarize = space_ops.index(OPS.index("Solarize"))
    drawn = magnitudes[ops == OPS.index("Solarize")].numpy()
    assert set(drawn.tolist()) <= set(table[solarize, :4].tolist()) and drawn.max() > 200  # 255 * fractions
    rotate = magnitudes[ops == OPS.index("Rotate")].numpy()
    rotate = rotate[rotate != 0]  # (bin 0 is 0 degrees)
    assert 0.4 < (rotate < 0).mean() < 0.6


def test_a_v2_recipe_with_augmix_runs_natively(tmp_path):
    import jpeg_samples as js
    import fastload
    from torchvision.datasets import ImageFolder

    js.write_image_folder(tmp_path, classes=2, per_class=4, size=(60, 70))
    transform = v2.Compose([v2.RandomResizedCrop(OUT), v2.RandomHorizontalFlip(), v2.AugMix(), v2.PILToTensor(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize((0.5,) * 3, (0.25,) * 3)])
    loader = fastload.DataLoader(ImageFolder(str(tmp_path), transform=transform), batch_size=4)
    assert loader.path.startswith("native: torchvision ImageFolder [RandomResizedCrop -> RandomHorizontalFlip -> "
                                  "AugMix"), loader.path
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, OUT, OUT) and images.dtype == torch.float32
