"""albumentations' transforms on the native engine (fastload/compat/albumentations.py),
checked against albumentations itself: the "OpenCV + albumentations" dataset runs
natively with torch's batches; deterministic ops are pixel-close (the resize is OpenCV's
INTER_LINEAR, not antialiased, to its fixed-point rounding); random ops match
albumentations' distribution; what does not map is a Python tail or a named blocker."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload import _ext
from fastload.augment import color, specs
from fastload.compat import albumentations as compat
from fastload.adapters import analyse
from jpeg_samples import encode, photo, write_image_folder

A = pytest.importorskip("albumentations", reason="albumentations is optional (make setup installs it)")
cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is optional (make setup installs it)")
from albumentations.pytorch import ToTensorV2  # noqa: E402

needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built")
pytestmark = pytest.mark.timeout(300)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class OpenCVDataset(Dataset):
    """The OpenCV + albumentations shape: imread, BGR -> RGB, transform(image=...), (image, label)."""

    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, idx):
        path, label = self.files[idx]
        image = cv2.imread(path)
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        image = self.transform(image=image)["image"]
        return image, label


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Photo-like JPEGs of varied sizes, (path, label) per file."""
    root = tmp_path_factory.mktemp("albu")
    paths = write_image_folder(root, classes=3, per_class=4)
    return [(path, int(os.path.basename(os.path.dirname(path)).split("_")[1])) for path in paths]


@pytest.fixture(scope="module")
def even(tmp_path_factory):
    """Files of one size (40 x 50): every crop margin here is even."""
    root = tmp_path_factory.mktemp("albu_even")
    out = []
    for k in range(6):
        path = str(root / f"{k}.jpg")
        with open(path, "wb") as f:
            f.write(encode(photo(40, 50, seed=k), quality=95))
        out.append((path, k % 2))
    return out


def psnr(ours, theirs):
    """PSNR in dB of two uint8 batches (255 peak)."""
    mse = float(((ours.double() - theirs.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def batches(dataset, batch_size, seed=None, **kwargs):
    """(loader.path, fastload's batches, torch's batches); seed: both shuffle with it."""
    extra = lambda: {} if seed is None else dict(shuffle=True, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    native = fastload.DataLoader(dataset, batch_size=batch_size, **kwargs, **extra())
    return native.path, list(native), list(TorchLoader(dataset, batch_size=batch_size, **kwargs, **extra()))


# ---- the dataset shape --------------------------------------------------------------------


@needs_ops
def test_the_opencv_albumentations_dataset_runs_natively_with_torchs_batches(folder):
    transform = A.Compose([A.RandomResizedCrop(size=(32, 32)), A.HorizontalFlip(), A.Normalize(), ToTensorV2()])
    path, ours, theirs = batches(OpenCVDataset(folder, transform), 5, seed=4)
    assert path.startswith("native: traced OpenCVDataset.__getitem__ [RandomResizedCrop -> RandomHorizontalFlip -> "
                           "ToDtype -> Normalize]"), path
    assert len(ours) == len(theirs) == 3
    for (images, labels), (want_images, want_labels) in zip(ours, theirs):
        assert type(images) is type(want_images) and (images.dtype, images.shape) == (want_images.dtype,
                                                                                      want_images.shape)
        assert labels.dtype == want_labels.dtype and torch.equal(labels, want_labels)
        # Normalize's range: ((0 or 1) - mean) / std.
        assert images.min() >= -2.2 and images.max() <= 2.7


class PILDataset(OpenCVDataset):
    """The PIL + albumentations shape: np.array(Image.open(path).convert("RGB"))."""

    def __getitem__(self, idx):
        from PIL import Image

        path, label = self.files[idx]
        image = np.array(Image.open(path).convert("RGB"))
        return self.transform(image=image)["image"], label


@needs_ops
def test_the_pil_numpy_albumentations_dataset_runs_natively(even):
    transform = A.Compose([A.CenterCrop(24, 30), A.Normalize(), ToTensorV2()])
    path, ours, theirs = batches(PILDataset(even, transform), 6)
    assert path.startswith("native: traced PILDataset.__getitem__ [CenterCrop -> ToDtype -> Normalize]"), path
    assert torch.allclose(ours[0][0], theirs[0][0], atol=1e-5) and torch.equal(ours[0][1], theirs[0][1])


@needs_ops
def test_a_compose_without_totensorv2_gives_hwc_arrays_through_a_python_step(even):
    transform = A.Compose([A.CenterCrop(32, 32)])
    path, ours, theirs = batches(OpenCVDataset(even, transform), 3)
    assert path.startswith("hybrid: native [CenterCrop] + python [ToHWCArray]"), path
    assert "does not end in ToTensorV2" in path
    for (images, labels), (want, want_labels) in zip(ours, theirs):
        assert images.shape == want.shape == (3, 32, 32, 3) and images.dtype == want.dtype == torch.uint8
        assert torch.equal(images, want) and torch.equal(labels, want_labels)


@needs_ops
def test_an_unmapped_transform_runs_as_albumentations_calls_it(even):
    transform = A.Compose([A.CenterCrop(32, 32), A.InvertImg(p=1.0), A.Normalize(), ToTensorV2()])
    path, ours, theirs = batches(OpenCVDataset(even, transform), 3)
    assert path.startswith("hybrid: native [CenterCrop] + python [InvertImg -> Normalize -> ToTensorV2]"), path
    for (images, _), (want, _) in zip(ours, theirs):
        assert images.dtype == want.dtype == torch.float32 and torch.allclose(images, want, atol=1e-5)


# ---- each op against albumentations ------------------------------------------------------


@needs_ops
def test_crops_flips_normalize_and_totensorv2_are_albumentations_values(even):
    transform = A.Compose([A.CenterCrop(24, 30), A.HorizontalFlip(p=1.0), A.VerticalFlip(p=1.0), A.Normalize(),
                           ToTensorV2()])
    path, ours, theirs = batches(OpenCVDataset(even, transform), 6)
    assert path.startswith("native: traced OpenCVDataset.__getitem__ [CenterCrop -> RandomHorizontalFlip -> "
                           "RandomVerticalFlip -> ToDtype -> Normalize]"), path
    # The same decode (libjpeg-turbo on both sides) and float32 rounding of (x / 255 - mean) / std.
    assert torch.allclose(ours[0][0], theirs[0][0], atol=1e-5), (ours[0][0] - theirs[0][0]).abs().max()


@needs_ops
def test_random_crop_takes_albumentations_crops(even):
    transform = A.Compose([A.RandomCrop(16, 16), ToTensorV2()])
    dataset = OpenCVDataset(even * 20, transform)
    ours = torch.cat([b[0] for b in fastload.DataLoader(dataset, batch_size=40)])
    decoded = [torch.from_numpy(cv2.cvtColor(cv2.imread(p), cv2.COLOR_BGR2RGB)).permute(2, 0, 1) for p, _ in even]
    for k, crop in enumerate(ours):  # each crop is a window of its source image
        source = decoded[k % len(even)]
        windows = source.unfold(1, 16, 1).unfold(2, 16, 1)  # [3, 25, 35, 16, 16]
        assert (windows == crop[:, None, None]).all(0).all(-1).all(-1).any(), k


# Output sizes of the 40 x 50 images: enlarging 1.6x, shrinking 1.6x, 2x and ~3x. Both sides
# interpolate bilinearly without antialiasing; OpenCV weighs in 11-bit fixed point, the engine
# in float: one level apart on a few values (measured: 57 dB, or equal). An antialiased
# resize in its place gives 28-33 dB when shrinking.
RESIZE_SIZES = [(64, 80), (25, 31), (20, 25), (13, 17)]


@needs_ops
@pytest.mark.parametrize("size", RESIZE_SIZES, ids=[f"{s[0]}x{s[1]}" for s in RESIZE_SIZES])
def test_resize_is_opencvs_inter_linear_to_rounding(size, even):
    transform = A.Compose([A.Resize(*size), ToTensorV2()])
    path, ours, theirs = batches(OpenCVDataset(even, transform), 6)
    assert path.startswith("native: traced OpenCVDataset.__getitem__ [Resize]"), path
    assert ours[0][0].shape == theirs[0][0].shape == (6, 3, *size)
    assert (ours[0][0].int() - theirs[0][0].int()).abs().max() <= 1
    assert psnr(ours[0][0], theirs[0][0]) >= 50.0, psnr(ours[0][0], theirs[0][0])


@needs_ops
def test_smallest_max_size_then_center_crop(even):
    # 40 x 50 -> 60 x 75 (enlarged: no antialiasing on either side), then the centre.
    transform = A.Compose([A.SmallestMaxSize(max_size=60), A.CenterCrop(56, 55), ToTensorV2()])
    path, ours, theirs = batches(OpenCVDataset(even, transform), 6)
    assert path.startswith("native: traced OpenCVDataset.__getitem__ [Resize -> CenterCrop]"), path
    assert ours[0][0].shape == theirs[0][0].shape == (6, 3, 56, 55)
    assert psnr(ours[0][0], theirs[0][0]) >= 44.0, psnr(ours[0][0], theirs[0][0])
    # An odd margin (75 - 56 = 19): torchvision's offset round(9.5) = 10, albumentations' 19 // 2 = 9.
    odd = A.Compose([A.SmallestMaxSize(max_size=60), A.CenterCrop(56, 56), ToTensorV2()])
    _, ours, theirs = batches(OpenCVDataset(even, odd), 6)
    assert psnr(ours[0][0], theirs[0][0]) < 40.0
    assert psnr(ours[0][0][..., :-1], theirs[0][0][..., 1:]) >= 44.0  # one pixel apart


@needs_ops
@pytest.mark.parametrize("name, factor", [("brightness", 1.3), ("contrast", 0.6), ("saturation", 1.7)])
def test_color_jitter_ops_are_within_rounding_of_albumentations(name, factor, even):
    ranges = {k: (1.0, 1.0) for k in ("brightness", "contrast", "saturation")}
    ranges[name] = (factor, factor)
    transform = A.Compose([A.CenterCrop(32, 32), A.ColorJitter(**ranges, hue=(0.0, 0.0), p=1.0), ToTensorV2()])
    path, ours, theirs = batches(OpenCVDataset(even, transform), 6)
    assert path.startswith("native: traced OpenCVDataset.__getitem__ [CenterCrop -> ColorJitter]"), path
    diff = (ours[0][0].int() - theirs[0][0].int()).abs()
    # albumentations truncates (brightness's multiply, contrast's LUT) where PIL rounds: one level;
    # contrast's mean is PIL's rounded int, albumentations' float: one more.
    assert diff.max() <= 2 and diff.float().mean() < 0.6, (diff.max(), diff.float().mean())


@needs_ops
def test_random_resized_crop_and_flip_follow_albumentations_distribution(even):
    """One image, many draws: the mean output image and the flip rate agree."""
    one = [even[0]] * 400
    # Both sides seeded: the figures below are fixed, not a draw that fails now and then.
    transform = A.Compose([A.RandomResizedCrop(size=(12, 12), scale=(0.2, 1.0)), A.HorizontalFlip(), ToTensorV2()],
                          seed=0)
    ours = torch.cat([b[0] for b in fastload.DataLoader(OpenCVDataset(one, transform), batch_size=100,
                                                        seed=0)]).double()
    theirs = torch.cat([b[0] for b in TorchLoader(OpenCVDataset(one, transform), batch_size=100)]).double()
    # Mean images over 400 draws: per-pixel standard error ~ 40 / sqrt(400) = 2 levels.
    assert (ours.mean(0) - theirs.mean(0)).abs().mean() < 4.0
    # The left-right asymmetry of the mean image: flips at p=0.5 make it symmetric on both sides.
    asymmetry = lambda x: float((x.mean(0) - x.mean(0).flip(-1)).abs().mean())  # noqa: E731
    assert abs(asymmetry(ours) - asymmetry(theirs)) < 3.0
    no_flip = A.Compose([A.RandomResizedCrop(size=(12, 12), scale=(0.2, 1.0)), ToTensorV2()])
    unflipped = torch.cat([b[0] for b in fastload.DataLoader(OpenCVDataset(one, no_flip), batch_size=100,
                                                             seed=0)]).double()
    assert asymmetry(unflipped) > asymmetry(ours) + 3.0  # the test sees a missing flip


# ---- the mapping -----------------------------------------------------------------------------


def test_the_mapped_specs_take_albumentations_parameters():
    pipeline, wrappers = compat.split_transform(A.Compose([
        A.RandomResizedCrop(size=(24, 32), scale=(0.3, 0.9), ratio=(0.5, 2.0)), A.HorizontalFlip(p=0.3),
        A.ColorJitter(brightness=0.4, contrast=(0.5, 1.5), saturation=0.2, hue=0.0, p=0.8),
        A.Normalize(mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4)), ToTensorV2()]))
    assert wrappers == ["Compose"] and pipeline.tail == () and pipeline.blockers == ()
    crop, flip, jitter, to_float, normalize = pipeline.native
    assert crop == specs.RandomResizedCrop((24, 32), (0.3, 0.9), (0.5, 2.0), "bilinear", antialias=False)
    assert flip == specs.RandomHorizontalFlip(0.3)
    assert jitter == color.ColorJitter((0.6, 1.4), (0.5, 1.5), (0.8, 1.2), None, p=0.8)
    assert to_float == specs.ToDtype(torch.float32, scale=True)
    assert normalize == specs.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))
    (resize,) = compat.leaf_specs(A.SmallestMaxSize(max_size=256))
    assert resize == specs.Resize(256, antialias=False)


def test_albumentations_1x_height_and_width_are_read():
    class RandomResizedCrop:  # albumentations 1.x keeps height and width, no size
        __module__ = "albumentations.augmentations.crops.transforms"
        height, width, scale, ratio, interpolation, p = 20, 30, (0.08, 1.0), (0.75, 4 / 3), 1, 1.0

    assert compat.leaf_specs(RandomResizedCrop()) == [specs.RandomResizedCrop((20, 30), antialias=False)]


BLOCKED = [
    (A.Resize(8, 8, interpolation=cv2.INTER_CUBIC), "resizes with cv2.INTER_CUBIC"),
    (A.RandomResizedCrop(size=(8, 8), area_for_downscale="image"), "switches to INTER_AREA when shrinking"),
    (A.LongestMaxSize(max_size=8), "albumentations' LongestMaxSize has no native equivalent"),
    (A.RandomCrop(8, 8, pad_if_needed=True), "pads with pad_if_needed=True"),
    (A.ColorJitter(hue=0.1), "shifts hue in [-0.1, 0.1] through OpenCV's HSV"),
    (A.Normalize(max_pixel_value=1.0), "has max_pixel_value=1.0"),
    (A.Normalize(normalization="image"), "normalizes per image"),
    (A.Resize(8, 8, p=0.5), "applies with probability p=0.5"),
    (A.SmallestMaxSize(max_size=[8, 16]), "draws the size from [8, 16] per image"),
]


@pytest.mark.parametrize("transform, why", BLOCKED, ids=[type(t).__name__ + str(k) for k, (t, _) in
                                                         enumerate(BLOCKED)])
def test_what_does_not_map_is_a_named_blocker(transform, why):
    pipeline, _ = compat.split_transform(A.Compose([A.CenterCrop(8, 8), transform, ToTensorV2()]))
    assert [type(s).__name__ for s in pipeline.native] == ["CenterCrop"]
    assert why in pipeline.blockers[0], pipeline.blockers
    assert [type(t).__name__ for t in pipeline.tail] == [type(transform).__name__, "ToTensorV2"]


def test_totensorv2_before_other_transforms_is_not_native():
    pipeline, _ = compat.split_transform(A.Compose([A.CenterCrop(8, 8), ToTensorV2(), A.Normalize()]))
    assert "is followed by other albumentations transforms" in pipeline.blockers[0]


def test_a_compose_with_a_probability_or_targets_is_not_opened(folder):
    assert compat.compose_parts(A.Compose([A.CenterCrop(8, 8)], p=0.5)) is None
    assert compat.compose_parts(A.Compose([A.CenterCrop(8, 8)], additional_targets={"image2": "image"})) is None
    analysis = analyse(OpenCVDataset(folder, A.Compose([A.RandomResizedCrop(size=(8, 8)), ToTensorV2()], p=0.5)))
    assert analysis.pipeline.native == () and "Compose" in analysis.pipeline.blockers[0]
