"""Random parameters: torchvision's distributions, a pure function of (seed, epoch, index).

Drawn through _C.regions_of, the engine's own per-sample geometry (csrc/augment/geometry.cpp
on csrc/augment/params.h): for a RandomResizedCrop plan the region's box is the crop."""

import math

import numpy as np
import pytest
import torch

from fastload import _ext
from fastload.augment import specs
from fastload.augment.plan import build_plan

torchvision = pytest.importorskip("torchvision")

DRAWS = 100_000
# Two-sample Kolmogorov-Smirnov critical value at alpha = 1e-4 for n = m = DRAWS:
# c(alpha) * sqrt(2 / n) with c(1e-4) = 2.15. Same distributions give D ~ 0.004.
KS_CRITICAL = 2.15 * math.sqrt(2.0 / DRAWS)


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    values = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), values, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), values, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


def regions(sizes, indices, seed, epoch, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip_p=0.5):
    """(boxes int64 [N, 4], flips bool [N]) the engine draws for these images and samples."""
    plan = build_plan([specs.RandomResizedCrop(8, scale=scale, ratio=ratio), specs.RandomHorizontalFlip(flip_p)],
                      seed=seed)
    boxes, _, flips = _ext.require_ops().regions_of(plan, sizes, indices, epoch)
    return boxes.long(), flips


def crop_params(sizes, indices, seed, epoch, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    return regions(sizes, indices, seed, epoch, scale, ratio)[0]


def flip_params(indices, seed, epoch, p):
    return regions(torch.tensor([[4, 4]]).expand(len(indices), 2), indices, seed, epoch, flip_p=p)[1]


def fastload_boxes(height, width, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=0, epoch=0):
    sizes = torch.tensor([[height, width]]).expand(DRAWS, 2).contiguous()
    return crop_params(sizes, torch.arange(DRAWS), seed, epoch, scale, ratio).numpy()


def torchvision_boxes(height, width, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    image = torch.empty(1, height, width)
    return np.array([RandomResizedCrop.get_params(image, list(scale), list(ratio)) for _ in range(DRAWS)])


@pytest.mark.parametrize("height,width", [(375, 500), (600, 200)])
def test_random_resized_crop_matches_torchvision_distribution(height, width):
    ours, theirs = fastload_boxes(height, width), torchvision_boxes(height, width)
    for name, f in {
        "area": lambda b: b[:, 2] * b[:, 3] / (height * width),
        "log aspect": lambda b: np.log(b[:, 3] / b[:, 2]),
        "top": lambda b: b[:, 0] / height,
        "left": lambda b: b[:, 1] / width,
    }.items():
        d = ks_statistic(f(ours), f(theirs))
        assert d < KS_CRITICAL, f"{name}: KS statistic {d:.4f} >= {KS_CRITICAL:.4f}"
    # Every box lies inside the image.
    assert (ours[:, 0] >= 0).all() and (ours[:, 0] + ours[:, 2] <= height).all()
    assert (ours[:, 1] >= 0).all() and (ours[:, 1] + ours[:, 3] <= width).all()


@pytest.mark.parametrize("height,width", [(10, 1000), (1000, 10), (1, 1), (1, 7)])
def test_fallback_matches_torchvision_exactly(height, width):
    """Extreme aspect ratios hit torchvision's deterministic central-crop fallback."""
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    sizes = torch.tensor([[height, width]] * 200)
    ours = crop_params(sizes, torch.arange(200), 0, 0, (0.9, 1.0), (0.99, 1.01))
    theirs = {tuple(RandomResizedCrop.get_params(torch.empty(1, height, width), [0.9, 1.0], [0.99, 1.01])) for _ in range(200)}
    assert len(theirs) == 1  # deterministic: every attempt fails, or only one box fits
    assert {tuple(b) for b in ours.tolist()} == theirs


def test_pure_function_of_seed_epoch_index():
    sizes = torch.tensor([[375, 500]] * 64)
    idx = torch.arange(64)
    a = crop_params(sizes, idx, 7, 3)
    # Same triple, any order or batch: same box.
    perm = torch.randperm(64)
    assert torch.equal(crop_params(sizes, idx[perm], 7, 3), a[perm])
    assert torch.equal(crop_params(sizes[:5], idx[:5], 7, 3), a[:5])
    # Another epoch or seed: other boxes.
    assert not torch.equal(crop_params(sizes, idx, 7, 4), a)
    assert not torch.equal(crop_params(sizes, idx, 8, 3), a)


def test_flip_rate_and_determinism():
    idx = torch.arange(DRAWS)
    flips = flip_params(idx, 0, 0, 0.5)
    # Binomial(1e5, 0.5): 6 standard deviations = 949.
    assert abs(int(flips.sum()) - DRAWS // 2) < 6 * math.sqrt(DRAWS * 0.25)
    assert torch.equal(flips, flip_params(idx, 0, 0, 0.5))
    assert not flip_params(idx[:100], 0, 0, 0.0).any()
    assert flip_params(idx[:100], 0, 0, 1.0).all()
    # Crop and flip draws are independent streams: flip does not predict the crop.
    boxes = fastload_boxes(375, 500)
    areas = boxes[:, 2] * boxes[:, 3]
    assert abs(areas[flips.numpy()].mean() / areas[~flips.numpy()].mean() - 1) < 0.02


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"regions_of: expected sizes \[N, 2\] and samples \[N\]"):
        crop_params(torch.zeros(3, 3, dtype=torch.long), torch.arange(3), 0, 0)
    with pytest.raises(ValueError, match="expected finite 0 <= scale_min <= scale_max"):
        plan = build_plan([specs.RandomResizedCrop(8)])
        plan.scale_min, plan.scale_max = 1.0, 0.5
        _ext.require_ops().regions_of(plan, torch.ones(1, 2, dtype=torch.long), torch.arange(1), 0)
    with pytest.raises(ValueError, match=r"expected image sizes in \[1, 2\^31\), got 0x0"):
        crop_params(torch.zeros(1, 2, dtype=torch.long), torch.arange(1), 0, 0)
