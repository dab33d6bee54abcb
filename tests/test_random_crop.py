"""RandomCrop (padding, pad_if_needed, fill, padding_mode) on the native path, against
torchvision run with the engine's drawn offsets, and its sampler against torchvision's
distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
from fastload import _ext
from fastload.augment import specs
from fastload.augment.plan import build_plan, fuse
from fastload.errors import UnsupportedPipeline

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)
# Chi-square critical value at significance 1e-3 with 8 degrees of freedom (9 offsets).
CHI2_CRIT_8 = 26.124


@pytest.fixture(scope="module")
def root(make_image_folder):
    return make_image_folder(classes=2, per_class=5, size=(32, 32))  # 24..40 pixels a side


def torchvision_crop(path, plan, padding, epoch, index, fill=0, padding_mode="constant"):
    """torchvision's RandomCrop at the engine's drawn offset: uint8 [C, h, w]."""
    image = Image.open(path).convert("RGB")
    (top, left, height, width), _, flip = _ext.require_ops().region_of(plan, image.height, image.width, epoch, index)
    left_pad, top_pad, right_pad, bottom_pad = padding
    padded = F.pad(image, [left_pad, top_pad, right_pad, bottom_pad], fill=fill, padding_mode=padding_mode)
    if plan.pad_if_needed:  # torchvision pads both sides by what is missing
        extra_w, extra_h = max(0, int(width) - padded.width), max(0, int(height) - padded.height)
        padded = F.pad(padded, [extra_w, extra_h], fill=fill, padding_mode=padding_mode)
        left_pad, top_pad = left_pad + extra_w, top_pad + extra_h
    crop = F.crop(padded, int(top) + top_pad, int(left) + left_pad, int(height), int(width))
    if flip:
        crop = F.hflip(crop)
    return torch.from_numpy(np.asarray(crop).copy()).permute(2, 0, 1)


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_cifar_random_crop_with_padding_and_flip_runs_natively_as_torchvision(root, api):
    TV = T if api == "v1" else v2
    transform = TV.Compose([TV.RandomCrop(32, padding=4), TV.RandomHorizontalFlip(), TV.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    images = torch.cat([b for b, _ in loader])
    assert loader.path.startswith("native"), loader.path
    plan = build_plan([specs.RandomCrop(32, padding=4), specs.RandomHorizontalFlip()],
                      seed=loader.state_dict()["native_seed"])
    want = torch.stack([torchvision_crop(path, plan, (4, 4, 4, 4), 0, i) for i, (path, _) in enumerate(dataset.samples)])
    # No resample: the pixels are the decoded ones (the same libjpeg-turbo decode), padding 0.
    diff = (images.to(torch.int32) - want.to(torch.int32)).abs()
    assert (diff <= 1).double().mean() >= 0.999 and (images == 0).any()


def test_cifar_pipeline_normalised_equals_the_twin(root):
    from fastload.augment.pipeline import apply_plan_reference

    transform = T.Compose([T.RandomCrop(32, padding=(2, 5), pad_if_needed=True), T.RandomHorizontalFlip(),
                           T.ToTensor(), T.Normalize(MEAN, STD)])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    images = torch.cat([b for b, _ in loader])
    assert loader.path.startswith("native"), loader.path
    plan = build_plan([specs.RandomCrop(32, padding=(2, 5), pad_if_needed=True), specs.RandomHorizontalFlip(),
                       specs.ToDtype(torch.float32, scale=True), specs.Normalize(MEAN, STD)],
                      seed=loader.state_dict()["native_seed"])
    for i, (path, _) in enumerate(dataset.samples):
        with open(path, "rb") as f:
            pixels = fastload.ops.decode_jpeg(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
        torch.testing.assert_close(images[i], apply_plan_reference(plan, pixels, epoch=0, index=i), rtol=1e-5,
                                   atol=1e-5)


def test_random_crop_offsets_are_uniform_like_torchvisions():
    """10^5 draws of the offset in a 40x40 padded image (32x32 + 4 each side): each of
    the 9 rows and columns as likely (chi-square), as torch.randint(0, 9) in get_params."""
    plan = build_plan([specs.RandomCrop(32, padding=4)], seed=7)
    n = 100_000
    boxes, _, _ = _ext.require_ops().regions_of(plan, torch.tensor([[32, 32]]).expand(n, 2), torch.arange(n), 0)
    for offsets in (boxes[:, 0] + 4, boxes[:, 1] + 4):
        counts = torch.bincount(offsets.to(torch.int64), minlength=9).double()
        assert counts.numel() == 9
        chi2 = ((counts - n / 9) ** 2 / (n / 9)).sum().item()
        assert chi2 < CHI2_CRIT_8, chi2
    # torchvision's own sampler over the same padded size, the same test.
    torch.manual_seed(0)
    tops = torch.tensor([T.RandomCrop.get_params(torch.empty(1, 40, 40), (32, 32))[0] for _ in range(20_000)])
    counts = torch.bincount(tops, minlength=9).double()
    assert ((counts - 20_000 / 9) ** 2 / (20_000 / 9)).sum().item() < CHI2_CRIT_8


def test_random_crop_larger_than_the_padded_image_fails_with_torchvisions_message():
    plan = build_plan([specs.RandomCrop(32, padding=2)])
    with pytest.raises(ValueError, match=r"Required crop size \(32, 32\) is larger than input image size \(24, 40\)"):
        _ext.require_ops().region_of(plan, 20, 36, 0, 0)
    plan = build_plan([specs.RandomCrop(32, padding=2, pad_if_needed=True)])
    box, _, _ = _ext.require_ops().region_of(plan, 20, 36, 0, 0)
    # 2 + (32 - 24) rows padded on top and at the bottom: the crop starts 10 .. 2 rows above.
    assert box[2:] == (32, 32) and -10 <= box[0] <= -2


def loader_crops(root, transform):
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    images = torch.cat([b for b, _ in loader])
    assert loader.path.startswith("native"), loader.path
    return dataset, loader, images


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("padding, fill, padding_mode", [
    (4, (10, 200, 30), "constant"),
    ((5, 4), 128.9, "constant"),  # torchvision's PIL pad: int(fill)
    (4, 0, "edge"),
    ((4, 5, 6, 3), 0, "reflect"),
    (4, 77, "symmetric"),  # the fill is only for constant padding
])
def test_random_crop_fill_and_padding_modes_run_natively_as_torchvision(root, api, padding, fill, padding_mode):
    TV = T if api == "v1" else v2
    transform = TV.Compose([TV.RandomCrop(32, padding=padding, fill=fill, padding_mode=padding_mode),
                            TV.RandomHorizontalFlip(), TV.PILToTensor()])
    dataset, loader, images = loader_crops(root, transform)
    crop = specs.RandomCrop(32, padding=padding, fill=fill, padding_mode=padding_mode)
    plan = build_plan([crop, specs.RandomHorizontalFlip()], seed=loader.state_dict()["native_seed"])
    want = torch.stack([torchvision_crop(path, plan, crop.padding, 0, i, fill, padding_mode)
                        for i, (path, _) in enumerate(dataset.samples)])
    # No resample: the decoded pixels (the same libjpeg-turbo decode) and their padding.
    diff = (images.to(torch.int32) - want.to(torch.int32)).abs()
    assert (diff <= 1).double().mean() >= 0.999, diff.max()
    zero_padded = torch.stack([torchvision_crop(path, plan, crop.padding, 0, i)
                               for i, (path, _) in enumerate(dataset.samples)])
    assert (want != zero_padded).any()  # the samples do reach into the padding


@pytest.mark.parametrize("padding_mode", ["reflect", "symmetric", "edge"])
def test_random_crop_padding_wider_than_the_image_repeats_like_numpy_pad(tmp_path, padding_mode):
    """torchvision pads a PIL image with numpy.pad: a reflection wider than the image
    repeats (no error, unlike torch's pad of a tensor)."""
    import jpeg_samples as js

    js.write_image_folder(tmp_path, classes=1, per_class=4, size=(4, 5))  # 3..6 pixels a side
    transform = T.Compose([T.RandomCrop(12, padding=6, padding_mode=padding_mode), T.PILToTensor()])
    dataset, loader, images = loader_crops(str(tmp_path), transform)
    plan = build_plan([specs.RandomCrop(12, padding=6, padding_mode=padding_mode)],
                      seed=loader.state_dict()["native_seed"])
    want = torch.stack([torchvision_crop(path, plan, (6, 6, 6, 6), 0, i, padding_mode=padding_mode)
                        for i, (path, _) in enumerate(dataset.samples)])
    assert (images.to(torch.int32) - want.to(torch.int32)).abs().max() <= 1


def test_random_crop_edge_padding_if_needed_runs_natively_as_torchvision(root):
    transform = T.Compose([T.RandomCrop(40, padding=(1, 2), pad_if_needed=True, padding_mode="edge"),
                           T.RandomHorizontalFlip(), T.PILToTensor()])
    dataset, loader, images = loader_crops(root, transform)
    crop = specs.RandomCrop(40, padding=(1, 2), pad_if_needed=True, padding_mode="edge")
    plan = build_plan([crop, specs.RandomHorizontalFlip()], seed=loader.state_dict()["native_seed"])
    want = torch.stack([torchvision_crop(path, plan, crop.padding, 0, i, padding_mode="edge")
                        for i, (path, _) in enumerate(dataset.samples)])
    assert ((images.to(torch.int32) - want.to(torch.int32)).abs() <= 1).double().mean() >= 0.999


def test_random_crop_fill_goes_through_the_colour_ops_and_normalize(root):
    """The padding is part of the image the colour ops see (torchvision pads first)."""
    transform = T.Compose([T.RandomCrop(32, padding=4, fill=(250, 20, 90)), T.Grayscale(3), T.ToTensor(),
                           T.Normalize(MEAN, STD)])
    dataset, loader, images = loader_crops(root, transform)
    crop = specs.RandomCrop(32, padding=4, fill=(250, 20, 90))
    plan = build_plan([crop], seed=loader.state_dict()["native_seed"])
    mean, std = torch.tensor(MEAN)[:, None, None], torch.tensor(STD)[:, None, None]
    for i, (path, _) in enumerate(dataset.samples):
        crop_pixels = torchvision_crop(path, plan, crop.padding, 0, i, fill=(250, 20, 90))
        grey = F.rgb_to_grayscale(Image.fromarray(crop_pixels.permute(1, 2, 0).numpy()), num_output_channels=3)
        want = (F.to_tensor(grey) - mean) / std
        assert ((images[i] - want).abs() <= 1.01 / 255 / min(STD)).double().mean() >= 0.999


def test_random_crop_zero_fill_keeps_the_kernels_padding():
    assert "pad_fill" not in fuse([specs.RandomCrop(32, padding=4, fill=0)]).fields
    assert "pad_fill" not in fuse([specs.RandomCrop(32, padding=4, fill=(0, 0, 0))]).fields
    assert fuse([specs.RandomCrop(32, padding=4, fill=(300, -4, 7.9))]).fields["pad_fill"] == [255.0, 0.0, 7.0]
    assert fuse([specs.RandomCrop(32, padding=4, padding_mode="reflect")]).fields["padding_mode"] == 2


def crops_over_epochs(root, make_crop, padding, fill=0, padding_mode="constant", epochs=3):
    """The loader's crops of `root` over several epochs beside torchvision's at the same
    offsets: (native uint8 [N, C, h, w], torchvision's, how many crops lie wholly outside
    their image)."""
    transform = T.Compose([make_crop(T), T.RandomHorizontalFlip(), T.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith("native"), loader.path
    crop = make_crop(specs)
    plan = build_plan([crop, specs.RandomHorizontalFlip()], seed=loader.state_dict()["native_seed"])
    got, want, outside = [], [], 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        got += [b for b, _ in loader]
        for i, (path, _) in enumerate(dataset.samples):
            want.append(torchvision_crop(path, plan, crop.padding or (0, 0, 0, 0), epoch, i, fill, padding_mode))
            with Image.open(path) as image:
                (top, left, height, width), _, _ = _ext.require_ops().region_of(plan, image.height, image.width,
                                                                                epoch, i)
                outside += top + height <= 0 or left + width <= 0 or top >= image.height or left >= image.width
    return torch.cat(got), torch.stack(want), outside


@pytest.mark.parametrize("padding_mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("size, padding, fill", [
    (4, 50, (10, 200, 30)),  # most crops wholly in the padding
    (1, (0, 5), 7),          # 1x1 crops, padding left and right only
    (32, 100, 0),            # crops larger than the image, partly or wholly in the padding
    ((5, 40), (30, 2), 90),  # a thin crop, padding wider than the image on one axis
])
def test_crops_in_the_padding_equal_torchvision(root, padding_mode, size, padding, fill):
    """Crops that fall partly or wholly outside the image read the fill (constant) or
    numpy.pad's edge / mirrored pixels, as torchvision's RandomCrop of a PIL image."""
    def make_crop(module):
        return module.RandomCrop(size, padding=padding, fill=fill, padding_mode=padding_mode)

    images, want, outside = crops_over_epochs(root, make_crop, padding, fill, padding_mode)
    # No resample: the decoded pixels (the same libjpeg-turbo decode) and their padding.
    diff = (images.to(torch.int32) - want.to(torch.int32)).abs()
    assert (diff <= 1).double().mean() >= 0.999, diff.max()
    if size != (5, 40):
        assert outside > 0  # the case that failed before is covered


@pytest.mark.parametrize("padding_mode", ["reflect", "symmetric", "edge"])
@pytest.mark.parametrize("size, padding, pad_if_needed", [(32, (17, 2), False), (48, 0, True), (32, 60, False)])
def test_crops_mirrored_from_far_into_a_large_image_equal_torchvision(tmp_path, padding_mode, size, padding,
                                                                       pad_if_needed):
    """Mirrored padding wider than half the crop (or pad_if_needed) reads pixels far from the
    crop: the engine decodes every pixel a padded position maps onto."""
    import jpeg_samples as js

    js.write_image_folder(tmp_path, classes=1, per_class=4, size=(40, 120))  # 30..50 x 90..150
    def make_crop(module):
        return module.RandomCrop(size, padding=padding, padding_mode=padding_mode, pad_if_needed=pad_if_needed)

    images, want, _ = crops_over_epochs(str(tmp_path), make_crop, padding, padding_mode=padding_mode)
    diff = (images.to(torch.int32) - want.to(torch.int32)).abs()
    assert (diff <= 1).double().mean() >= 0.999, diff.max()


@pytest.mark.parametrize("padding_mode", ["reflect", "symmetric"])
def test_mirrored_padding_and_pad_if_needed_together_do_not_fuse_and_equal_torchvision(root, padding_mode):
    """torchvision pads twice (padding, then what the crop misses), the second time
    mirroring the padded image: not the engine's one mirror about the image's edges."""
    crop = specs.RandomCrop(48, padding=4, padding_mode=padding_mode, pad_if_needed=True)
    with pytest.raises(UnsupportedPipeline, match="mirrors an already padded image"):
        fuse([crop])
    fuse([specs.RandomCrop(48, padding=4, padding_mode="edge", pad_if_needed=True)])  # edges of edges: fuses
    torch.manual_seed(0)
    transform = T.Compose([T.RandomCrop(48, padding=4, padding_mode=padding_mode, pad_if_needed=True),
                           T.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert not loader.path.startswith("native") and "mirrors an already padded image" in loader.path, loader.path
    assert next(iter(loader))[0].shape == (4, 3, 48, 48)


def test_random_crop_then_resize_does_not_fuse_and_says_why(root):
    with pytest.raises(UnsupportedPipeline, match="resamples the padded crop"):
        fuse([specs.RandomCrop(32, padding=4), specs.Resize((24, 24))])
    dataset = ImageFolder(root, transform=T.Compose([T.RandomCrop(32, padding=4, padding_mode="reflect"),
                                                     T.Resize((24, 24)), T.PILToTensor()]))
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert not loader.path.startswith("native") and "resamples the padded crop" in loader.path, loader.path


@pytest.mark.parametrize("make, error", [
    (lambda m: m.RandomCrop(8, padding=(1, 2, 3)), ValueError),
    (lambda m: m.RandomCrop(8, padding="a"), TypeError),
    (lambda m: m.RandomCrop(8, padding=2, padding_mode="wrap"), ValueError),
])
def test_invalid_random_crop_arguments_get_torchvisions_errors(make, error):
    image = Image.new("RGB", (16, 16))
    with pytest.raises(error) as theirs:
        make(T)(image)
    with pytest.raises(error) as ours:
        make(specs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("fill", [(1, 2), (1, 2, 3, 4)])
def test_random_crop_fill_of_the_wrong_length_gets_torchvisions_error(fill):
    image = Image.new("RGB", (16, 16))
    with pytest.raises(ValueError) as theirs:
        T.RandomCrop(8, padding=2, fill=fill)(image)
    with pytest.raises(ValueError) as ours:
        fuse([specs.RandomCrop(8, padding=2, fill=fill)], channels=3)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("padding_mode, fill, blur_p", [("constant", (9, 200, 40), 1.0), ("edge", 0, 1.0),
                                                        ("reflect", 0, 0.5), ("symmetric", 0, 1.0)])
def test_padding_modes_and_blur_equal_the_twin(root, padding_mode, fill, blur_p):
    """The native batches against the plain-PyTorch twin (fastload.augment.pipeline), which
    pads with numpy.pad as torchvision's pad of a PIL image does, then blurs (blur_p < 1:
    RandomApply's draw decides per sample)."""
    from fastload.augment.pipeline import apply_plan_reference

    transforms = [specs.RandomCrop(32, padding=4, fill=fill, padding_mode=padding_mode), specs.RandomHorizontalFlip(),
                  specs.GaussianBlur(3, (0.5, 1.5), p=blur_p)]
    dataset = fastload.ImageFolder(root, transforms=transforms)
    loader = fastload.DataLoader(dataset, batch_size=4, seed=3)
    assert loader.path.startswith("native"), loader.path
    images = torch.cat([b for b, _ in loader])
    plan = build_plan(transforms, seed=loader.state_dict()["native_seed"])
    for i in range(len(dataset)):
        pixels = fastload.ops.decode_jpeg(torch.frombuffer(bytearray(dataset.index.read(i)), dtype=torch.uint8))
        want = apply_plan_reference(plan, pixels, epoch=0, index=i)
        assert (images[i].int() - want.int()).abs().max() <= 1, i
