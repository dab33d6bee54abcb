"""Random parameters: torchvision's distributions, a pure function of (seed, epoch, index)."""

import math

import numpy as np
import pytest
import torch

from fastload import ops

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


def fastload_boxes(height, width, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=0, epoch=0):
    sizes = torch.tensor([[height, width]]).expand(DRAWS, 2).contiguous()
    return ops.random_resized_crop_params(sizes, torch.arange(DRAWS), seed, epoch, scale, ratio).numpy()


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
    ours = ops.random_resized_crop_params(sizes, torch.arange(200), 0, 0, (0.9, 1.0), (0.99, 1.01))
    theirs = {tuple(RandomResizedCrop.get_params(torch.empty(1, height, width), [0.9, 1.0], [0.99, 1.01])) for _ in range(200)}
    assert len(theirs) == 1  # deterministic: every attempt fails, or only one box fits
    assert {tuple(b) for b in ours.tolist()} == theirs


def test_pure_function_of_seed_epoch_index():
    sizes = torch.tensor([[375, 500]] * 64)
    idx = torch.arange(64)
    a = ops.random_resized_crop_params(sizes, idx, 7, 3)
    # Same triple, any order or batch: same box.
    perm = torch.randperm(64)
    assert torch.equal(ops.random_resized_crop_params(sizes, idx[perm], 7, 3), a[perm])
    assert torch.equal(ops.random_resized_crop_params(sizes[:5], idx[:5], 7, 3), a[:5])
    # Another epoch or seed: other boxes.
    assert not torch.equal(ops.random_resized_crop_params(sizes, idx, 7, 4), a)
    assert not torch.equal(ops.random_resized_crop_params(sizes, idx, 8, 3), a)


def test_flip_rate_and_determinism():
    idx = torch.arange(DRAWS)
    flips = ops.random_flip_params(idx, 0, 0, 0.5)
    # Binomial(1e5, 0.5): 6 standard deviations = 949.
    assert abs(int(flips.sum()) - DRAWS // 2) < 6 * math.sqrt(DRAWS * 0.25)
    assert torch.equal(flips, ops.random_flip_params(idx, 0, 0, 0.5))
    assert not ops.random_flip_params(idx[:100], 0, 0, 0.0).any()
    assert ops.random_flip_params(idx[:100], 0, 0, 1.0).all()
    # Crop and flip draws are independent streams: flip does not predict the crop.
    boxes = fastload_boxes(375, 500)
    areas = boxes[:, 2] * boxes[:, 3]
    assert abs(areas[flips.numpy()].mean() / areas[~flips.numpy()].mean() - 1) < 0.02


def test_bad_arguments():
    with pytest.raises(ValueError, match="random_resized_crop_params: expected sizes of shape"):
        ops.random_resized_crop_params(torch.zeros(3, 3, dtype=torch.long), torch.arange(3), 0, 0)
    with pytest.raises(ValueError, match="expected scale and ratio"):
        ops.random_resized_crop_params(torch.ones(1, 2, dtype=torch.long), torch.arange(1), 0, 0, (1.0, 0.5))
    with pytest.raises(ValueError, match="positive image sizes"):
        ops.random_resized_crop_params(torch.zeros(1, 2, dtype=torch.long), torch.arange(1), 0, 0)


def test_opcheck():
    """Schemas, fake kernels (torch.compile) and dispatcher registration of both ops."""
    from fastload import _ext

    _ext.require_ops()
    sizes = torch.tensor([[375, 500], [20, 30]])
    indices = torch.tensor([3, 7])
    torch.library.opcheck(torch.ops.fastload.random_resized_crop_params.default,
                          (sizes, indices, 1, 2, [0.08, 1.0], [0.75, 4 / 3]))
    torch.library.opcheck(torch.ops.fastload.random_flip_params.default, (indices, 1, 2, 0.5))
