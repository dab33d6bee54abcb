"""GaussianBlur (v1 and v2) on the native path: the fused pass's uint8 stage against
torchvision on PIL images, RandomApply([GaussianBlur], p), and what does not fuse. The op
and its sigma sampler on their own: tests/ops/test_blur.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
from blur_samples import assert_within_one_level, blur_sigmas, gaussian_blur, hwc, pil_image
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

DRAWS = 100_000
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# ---- the fused pass -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(make_image_folder):
    return make_image_folder(classes=2, per_class=4, size=(30, 36))


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
