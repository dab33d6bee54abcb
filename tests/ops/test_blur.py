"""The op fastload::gaussian_blur against torchvision's GaussianBlur (v1 and v2) on PIL
images, and its sigma sampler fastload::gaussian_blur_params against torchvision's
get_params. The blur in the fused pass and the loader: tests/test_gaussian_blur.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blur_samples import assert_within_one_level, blur_sigmas, gaussian_blur, hwc, pil_image
from fastload import _ext

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

DRAWS = 100_000
# Two-sample Kolmogorov-Smirnov critical value at alpha = 1e-4 (as tests/ops/test_params.py).
KS_CRITICAL = 2.15 * (2.0 / DRAWS) ** 0.5


# ---- the op --------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("height, width, channels, kernel_size, sigma", [
    (37, 45, 3, (5, 5), 1.3),
    (29, 31, 3, (3, 9), 2.7),
    (40, 23, 1, (7, 3), 0.6),   # grayscale ("L")
    (2, 2, 3, (3, 3), 1.0),     # a padding of 1 on a 2-pixel side: the most reflect allows
    (1, 1, 3, (1, 1), 5.0),     # a 1-pixel image with a 1-pixel kernel: unchanged
    (1, 9, 1, (17, 1), 3.0),    # a kernel much wider than its sigma
])
def test_gaussian_blur_op_matches_torchvision_on_pil_images(api, height, width, channels, kernel_size, sigma):
    image = pil_image(height, width, channels, seed=height * 7 + width)
    blur = F.gaussian_blur if api == "v1" else v2.functional.gaussian_blur
    want = hwc(blur(image, list(kernel_size), [sigma, sigma]))
    assert_within_one_level(gaussian_blur(hwc(image), kernel_size, sigma), want)


def test_gaussian_blur_op_is_within_one_level_on_many_images():
    """Over varied images and sigmas, at most one level from torchvision (float32 sums in
    another order), and almost always equal."""
    got, want = [], []
    for seed in range(12):
        image = pil_image(33 + seed, 41 - seed, 3, seed=seed)
        sigma = 0.2 + 0.3 * seed
        want.append(hwc(F.gaussian_blur(image, [5, 7], [sigma, sigma])).flatten())
        got.append(gaussian_blur(hwc(image), (5, 7), sigma).flatten())
    got, want = torch.cat(got).to(torch.int32), torch.cat(want).to(torch.int32)
    assert (got - want).abs().max() <= 1
    assert (got == want).double().mean() >= 0.99


@pytest.mark.parametrize("height, width, kernel_size", [(1, 1, (3, 3)), (2, 2, (5, 5)), (8, 1, (3, 1)), (1, 8, (1, 3))])
def test_gaussian_blur_kernel_reaching_past_the_image_raises_like_torchvision(height, width, kernel_size):
    image = pil_image(height, width, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        F.gaussian_blur(image, list(kernel_size), [1.0, 1.0])
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        gaussian_blur(hwc(image), kernel_size, 1.0)


# ---- the sampler ----------------------------------------------------------------------------


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    values = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), values, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), values, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


@pytest.mark.parametrize("sigma", [(0.1, 2.0), (1.5, 1.5)])
def test_gaussian_blur_sigma_draws_follow_torchvisions_get_params(sigma):
    ours = blur_sigmas(torch.arange(DRAWS), 3, 0, sigma).numpy()
    torch.manual_seed(0)
    theirs = np.array([T.GaussianBlur.get_params(*sigma) for _ in range(DRAWS)], dtype=np.float32)
    assert ours.min() >= sigma[0] - 1e-6 and ours.max() <= sigma[1] + 1e-6
    assert ks_statistic(ours, theirs) < KS_CRITICAL
    # A pure function of (seed, epoch, index): other epochs draw afresh.
    assert torch.equal(blur_sigmas(torch.arange(5), 3, 0, sigma), torch.from_numpy(ours[:5]))
    if sigma[0] < sigma[1]:
        assert not torch.equal(blur_sigmas(torch.arange(5), 3, 1, sigma), torch.from_numpy(ours[:5]))
