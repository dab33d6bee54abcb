"""GaussianBlur (v1 and v2) on the native path: the op fastload::gaussian_blur and the
fused pass's uint8 stage against torchvision on PIL images, the sigma sampler against
torchvision's get_params, and what does not fuse."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
from fastload import _ext
from fastload.augment import color, specs
from fastload.augment.plan import build_plan, fuse
from fastload.errors import UnsupportedPipeline

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

UINT8_LEVELS, UINT8_SHARE = 1, 0.999
DRAWS = 100_000
# Two-sample Kolmogorov-Smirnov critical value at alpha = 1e-4 (as tests/test_params.py).
KS_CRITICAL = 2.15 * (2.0 / DRAWS) ** 0.5
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def gaussian_blur(image: torch.Tensor, kernel_size, sigma: float) -> torch.Tensor:
    """fastload::gaussian_blur of a uint8 HWC tensor."""
    _ext.require_ops()
    return torch.ops.fastload.gaussian_blur(image, list(kernel_size), float(sigma))


def blur_sigmas(indices: torch.Tensor, seed: int, epoch: int, sigma) -> torch.Tensor:
    _ext.require_ops()
    return torch.ops.fastload.gaussian_blur_params(indices, seed, epoch, float(sigma[0]), float(sigma[1]))


def pil_image(height: int, width: int, channels: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    # Smooth content plus noise: the blur's sums then fall everywhere between levels.
    y, x = np.mgrid[0:height, 0:width]
    base = 128 + 60 * np.sin(x / 3.0 + seed) * np.cos(y / 4.0)
    pixels = base[..., None] + rng.normal(0, 40, (height, width, channels))
    pixels = np.clip(pixels, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, "L" if channels == 1 else "RGB")


def hwc(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image)
    return torch.from_numpy(array.copy() if array.ndim == 3 else array[..., None].copy())


def assert_within_one_level(got: torch.Tensor, want: torch.Tensor):
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = (got.to(torch.int32) - want.to(torch.int32)).abs()
    share = (diff <= UINT8_LEVELS).double().mean().item()
    assert share >= UINT8_SHARE, f"{share:.5f} of the values within {UINT8_LEVELS} level (max diff {diff.max()})"


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


# ---- the fused pass -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    import jpeg_samples as js

    folder = tmp_path_factory.mktemp("gaussian_blur")
    js.write_image_folder(folder, classes=2, per_class=4, size=(30, 36))
    return str(folder)


def engine_sigmas(loader, plan, count):
    return blur_sigmas(torch.arange(count), loader.state_dict()["native_seed"], 0,
                       (plan.blur_sigma_min, plan.blur_sigma_max))


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_gaussian_blur_after_resize_and_grayscale_runs_natively_as_torchvision(root, api):
    TV = T if api == "v1" else v2
    transform = TV.Compose([TV.Resize((20, 26)), TV.ColorJitter(brightness=(1.3, 1.3)), TV.Grayscale(3),
                            TV.GaussianBlur((5, 3), sigma=(0.3, 2.5)), TV.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    images = torch.cat([b for b, _ in loader])
    assert loader.path.startswith("native"), loader.path
    plan = build_plan([specs.Resize((20, 26)), color.ColorJitter(brightness=(1.3, 1.3)), color.Grayscale(3),
                       specs.GaussianBlur((5, 3), (0.3, 2.5))], seed=loader.state_dict()["native_seed"])
    sigmas = engine_sigmas(loader, plan, len(dataset))
    want = []
    for (path, _), sigma in zip(dataset.samples, sigmas.tolist()):
        image = F.resize(Image.open(path).convert("RGB"), [20, 26], antialias=True)
        image = F.rgb_to_grayscale(F.adjust_brightness(image, 1.3), num_output_channels=3)
        want.append(torch.from_numpy(np.asarray(F.gaussian_blur(image, [5, 3], [sigma, sigma])).copy()).permute(2, 0, 1))
    assert_within_one_level(images, torch.stack(want))
    # The blur is there: without it the samples differ by far more.
    unblurred = torch.stack([
        torch.from_numpy(np.asarray(F.rgb_to_grayscale(F.adjust_brightness(
            F.resize(Image.open(p).convert("RGB"), [20, 26], antialias=True), 1.3), 3)).copy()).permute(2, 0, 1)
        for p, _ in dataset.samples])
    assert (images.int() - unblurred.int()).abs().max() > 2


def test_gaussian_blur_then_normalize_on_a_grayscale_plan_equals_the_op(root):
    """channels=1 (an "L" decode): the fused pass's blur is the op's, then the value map."""
    from fastload import ops

    plan = build_plan([specs.CenterCrop(16), specs.GaussianBlur(3, (0.5, 1.5)), specs.ToDtype(torch.float32, True),
                       specs.Normalize([0.5], [0.25])], channels=1, seed=11)
    core = _ext.require_ops()
    image = hwc(pil_image(21, 19, 1, seed=4))
    samples = torch.arange(3)
    boxes, clamps, flips = core.regions_of(plan, torch.tensor([[21, 19]] * 3), samples, 0)
    views, relative = core.sampling_views(boxes, clamps, torch.tensor([[21, 19]] * 3))
    windows = [image[t:t + h, l:l + w].contiguous() for t, l, h, w in views.tolist()]
    offsets = np.cumsum([0] + [w.numel() for w in windows])[:-1]
    shapes = torch.tensor([[o, w.shape[0], w.shape[1], w.shape[1]] for o, w in zip(offsets, windows)])
    out = torch.empty(3, 1, 16, 16)
    ops.crop_resize_flip_normalize_batch(torch.cat([w.flatten() for w in windows]), shapes, relative, flips,
                                         plan.value_scale, torch.tensor(list(plan.mean)), torch.tensor(list(plan.std)),
                                         out, color=core.color_passes(plan, samples, 0))
    cropped = image[2:18, 2:18].contiguous()  # torchvision's CenterCrop(16) of 21x19: round(2.5), round(1.5)
    for i, sigma in enumerate(blur_sigmas(samples, 11, 0, (0.5, 1.5)).tolist()):
        want = (gaussian_blur(cropped, (3, 3), sigma).permute(2, 0, 1).float() / 255 - 0.5) / 0.25
        torch.testing.assert_close(out[i], want, rtol=0, atol=1e-5)


def test_gaussian_blur_fuses_after_the_geometry_and_colour_ops():
    fusion = fuse([specs.RandomResizedCrop(32), specs.RandomHorizontalFlip(), color.RandomGrayscale(0.2),
                   specs.GaussianBlur(9, (0.1, 2.0)), specs.ToDtype(torch.float32, True), specs.Normalize(MEAN, STD),
                   color.RandomErasing(0.5)])
    assert fusion.fields["blur_kernel_x"] == fusion.fields["blur_kernel_y"] == 9
    assert (fusion.fields["blur_sigma_min"], fusion.fields["blur_sigma_max"]) == (0.1, 2.0)
    assert "blur_kernel_x" not in fuse([specs.RandomResizedCrop(32)]).fields


@pytest.mark.parametrize("ops, reason", [
    ([specs.GaussianBlur(3), specs.RandomResizedCrop(32)], "before the crop/resize"),
    ([specs.RandomResizedCrop(32), specs.ToDtype(torch.float32, True), specs.GaussianBlur(3)], "float tensor"),
    ([specs.RandomResizedCrop(32), specs.GaussianBlur(3), color.ColorJitter(0.4)], "after GaussianBlur"),
    ([specs.RandomResizedCrop(32), specs.GaussianBlur(3), specs.GaussianBlur(5)], "two GaussianBlur"),
    ([specs.CenterCrop(4), specs.GaussianBlur(9)], "reaches past the image"),
    ([specs.RandomResizedCrop(32, interpolation="nearest"), specs.GaussianBlur(3)], "nearest"),
])
def test_gaussian_blur_that_does_not_fuse_says_why(ops, reason):
    with pytest.raises(UnsupportedPipeline, match=reason):
        fuse(ops)


def test_gaussian_blur_kernel_past_the_output_stays_on_torchvisions_path(root):
    """torchvision refuses the kernel on every sample: the loader runs torchvision, which raises."""
    dataset = ImageFolder(root, transform=T.Compose([T.CenterCrop(4), T.GaussianBlur(9), T.PILToTensor()]))
    loader = fastload.DataLoader(dataset, batch_size=2)
    assert not loader.path.startswith("native"), loader.path
    assert "reaches past the image" in loader.path


@pytest.mark.parametrize("make", [
    lambda m: m.GaussianBlur(4),
    lambda m: m.GaussianBlur((3, 0)),
    lambda m: m.GaussianBlur(3, sigma=0),
    lambda m: m.GaussianBlur(3, sigma=(2.0, 1.0)),
    lambda m: m.GaussianBlur(3, sigma=(1.0, 2.0, 3.0)),
])
def test_invalid_gaussian_blur_arguments_get_torchvisions_errors(make):
    with pytest.raises(ValueError) as theirs:
        make(T)
    with pytest.raises(ValueError) as ours:
        make(specs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("fields, match", [
    (dict(out_height=16, out_width=16, blur_kernel_x=4, blur_kernel_y=3), "Kernel size value should be an odd"),
    (dict(out_height=16, out_width=2, blur_kernel_x=5, blur_kernel_y=3), "Padding size should be less"),
    (dict(blur_kernel_x=3, blur_kernel_y=3, blur_sigma_min=0.0), "sigma values should be positive"),
    (dict(blur_kernel_x=3, blur_kernel_y=3, interpolation=None), "NEAREST"),
])
def test_plan_validate_refuses_a_blur_it_cannot_run(fields, match):
    from fastload.augment.plan import Plan

    if fields.get("interpolation", 0) is None:
        fields["interpolation"] = _ext.require_ops().Interpolation.NEAREST
    with pytest.raises(ValueError, match=match):
        Plan(**fields).validate()


# ---- RandomApply([GaussianBlur], p) ------------------------------------------------------


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_random_apply_of_gaussian_blur_skips_a_sample_with_torchvisions_probability(p):
    """torch.rand(1) < p per sample decides (its own stream): a skipped sample's sigma is
    NaN, the others keep exactly the sigmas of a plain GaussianBlur."""
    indices = torch.arange(DRAWS)
    plain = torch.ops.fastload.gaussian_blur_params(indices, 3, 1, 0.1, 2.0)
    applied = torch.ops.fastload.gaussian_blur_params(indices, 3, 1, 0.1, 2.0, p)
    kept = ~applied.isnan()
    ours = int(kept.sum())
    # RandomApply's count is binomial(DRAWS, p): within 4 standard deviations (alpha ~ 6e-5).
    assert abs(ours - DRAWS * p) < 4 * (DRAWS * p * (1 - p)) ** 0.5
    assert torch.equal(applied[kept], plain[kept])
    assert torch.equal(torch.ops.fastload.gaussian_blur_params(indices, 3, 1, 0.1, 2.0, 1.0), plain)
    assert torch.ops.fastload.gaussian_blur_params(indices[:100], 3, 1, 0.1, 2.0, 0.0).isnan().all()
    with pytest.raises(ValueError, match=r"expected p in \[0, 1\]"):
        torch.ops.fastload.gaussian_blur_params(indices[:2], 3, 1, 0.1, 2.0, 1.5)


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_random_apply_of_gaussian_blur_runs_natively_as_torchvision(root, api):
    TV = T if api == "v1" else v2
    transform = TV.Compose([TV.Resize((20, 26)), TV.RandomApply([TV.GaussianBlur(5, sigma=(0.5, 2.5))], p=0.5),
                            TV.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4, seed=3)
    images = torch.cat([b for b, _ in loader])
    assert loader.path.startswith("native"), loader.path
    sigmas = torch.ops.fastload.gaussian_blur_params(torch.arange(len(dataset)), loader.state_dict()["native_seed"],
                                                     0, 0.5, 2.5, 0.5)
    assert 0 < int(sigmas.isnan().sum()) < len(dataset)  # both kinds of sample in the batch
    want = []
    for (path, _), sigma in zip(dataset.samples, sigmas.tolist()):
        image = F.resize(Image.open(path).convert("RGB"), [20, 26], antialias=True)
        if not np.isnan(sigma):
            image = F.gaussian_blur(image, [5, 5], [sigma, sigma])
        want.append(torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1))
    assert_within_one_level(images, torch.stack(want))


def test_random_apply_of_gaussian_blur_fuses_with_its_p():
    fusion = fuse([specs.RandomResizedCrop(32), specs.GaussianBlur(9, (0.1, 2.0), p=0.5)])
    assert fusion.fields["blur_p"] == 0.5
    assert specs.GaussianBlur(3, p=1.5).p == 1.0 and specs.GaussianBlur(3, p=-1).p == 0.0  # RandomApply's clamp
    with pytest.raises(TypeError, match="p should be a real number"):
        specs.GaussianBlur(3, p="0.5")
