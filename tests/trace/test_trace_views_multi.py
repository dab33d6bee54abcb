"""A traced dataset whose one image reaches several transform calls (SimCLR's and
SupContrast's TwoCropTransform, a `(t(img), t(img))` pair, DINO's 2 global + 4 local
crops): the engine makes every view from one decode, the batch comes out in the
dataset's own structure, as torch's DataLoader over the same object gives it."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload.trace import probe_indexes
from jpeg_samples import write_image_folder
from trace_helpers import EVAL_ATOL, MEAN, STD, needs_ops

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

pytestmark = [needs_ops, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("views")
    write_image_folder(root, classes=3, per_class=4)
    return sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))


def centre(size, crop):
    return T.Compose([T.Resize(size), T.CenterCrop(crop), T.ToTensor(), T.Normalize(MEAN, STD)])


class TwoCropTransform:
    """SupContrast's: two crops of the same image."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, x):
        return [self.transform(x), self.transform(x)]


class DataAugmentationDINO:
    """DINO's shape: two global crops with transforms of their own, then local crops of one transform."""

    def __init__(self, global1, global2, local, local_crops=4):
        self.global1, self.global2, self.local, self.local_crops = global1, global2, local, local_crops

    def __call__(self, image):
        crops = [self.global1(image), self.global2(image)]
        for _ in range(self.local_crops):
            crops.append(self.local(image))
        return crops


class Folder(Dataset):
    """(transform(image), label) over `n` indexes cycling over the files."""

    def __init__(self, files, transform, n=None):
        self.files, self.transform, self.n = files, transform, n or len(files)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return self.transform(image), i % 3


class Pairs(Folder):
    """SimCLR's pair without a label: (t(img), t(img))."""

    def __getitem__(self, i):
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return self.transform(image), self.transform(image)


def loaders(dataset, workers, batch_size=4):
    ours = fastload.DataLoader(dataset, batch_size=batch_size, num_workers=workers, seed=3)
    theirs = TorchLoader(dataset, batch_size=batch_size, num_workers=workers)
    return ours, theirs


def structure(batch):
    """Types, shapes and dtypes of a batch, nested as it is."""
    if isinstance(batch, torch.Tensor):
        return ("tensor", tuple(batch.shape), batch.dtype)
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [structure(b) for b in batch])
    return type(batch).__name__


def assert_close(ours, theirs, path="batch"):
    if isinstance(theirs, torch.Tensor):
        if theirs.dtype.is_floating_point:
            torch.testing.assert_close(ours, theirs, atol=EVAL_ATOL, rtol=0, msg=path)
        else:
            assert torch.equal(ours, theirs), path
        return
    assert len(ours) == len(theirs), path
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert_close(a, b, f"{path}[{k}]")


def check_like_torch(dataset, workers, views_in_path):
    ours, theirs = loaders(dataset, workers)
    assert ours.path.startswith("native: traced"), ours.path
    assert views_in_path in ours.path, ours.path
    got, want = list(ours), list(theirs)
    assert [structure(b) for b in got] == [structure(b) for b in want]
    for k, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, f"batch {k}")
    return got


@pytest.mark.parametrize("workers", [0, 2])
def test_two_crop_transform_gives_torchs_batches(files, workers):
    dataset = Folder(files, TwoCropTransform(centre(40, 32)))
    got = check_like_torch(dataset, workers, "view 1 32x32")
    views, labels = got[0]
    assert isinstance(views, list) and len(views) == 2 and labels.dtype == torch.int64


@pytest.mark.parametrize("workers", [0, 2])
def test_an_image_folder_with_a_views_transform_gives_torchs_batches(files, workers):
    """SupContrast's and DINO's scripts: `ImageFolder(root, transform=TwoCropTransform(...))`."""
    from torchvision.datasets import ImageFolder

    root = os.path.dirname(os.path.dirname(files[0]))
    dino = DataAugmentationDINO(centre(48, 40), centre(44, 40), centre(20, 16))
    check_like_torch(ImageFolder(root, transform=TwoCropTransform(centre(40, 32))), workers, "view 1 32x32")
    got = check_like_torch(ImageFolder(root, transform=dino), workers, "views 2-5 16x16")
    assert [tuple(c.shape[1:]) for c in got[0][0]] == [(3, 40, 40)] * 2 + [(3, 16, 16)] * 4


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pair_of_views_without_a_label_gives_torchs_batches(files, workers):
    check_like_torch(Pairs(files, centre(36, 24)), workers, "view 1 24x24")


@pytest.mark.parametrize("workers", [0, 2])
def test_dino_multi_crop_gives_torchs_batches(files, workers):
    dino = DataAugmentationDINO(centre(48, 40), T.Compose([T.Resize(44), T.CenterCrop(40), T.ToTensor()]),
                                centre(20, 16))
    got = check_like_torch(Folder(files, dino), workers, "views 2-5 16x16")
    crops, _ = got[0]
    assert [tuple(c.shape[1:]) for c in crops] == [(3, 40, 40)] * 2 + [(3, 16, 16)] * 4


def random_views():
    return T.Compose([T.RandomResizedCrop(24, scale=(0.2, 1.0)), T.RandomHorizontalFlip(), T.ToTensor()])


@pytest.mark.parametrize("workers", [0, 2])
def test_random_views_draw_apart(files, workers):
    """The same random transform called twice: each view draws its own crop."""
    dino = DataAugmentationDINO(random_views(), random_views(), T.Compose([T.RandomResizedCrop(12), T.ToTensor()]))
    ours = fastload.DataLoader(Folder(files, dino, n=24), batch_size=8, num_workers=workers, seed=5)
    assert ours.path.startswith("native: traced"), ours.path
    for crops, _ in ours:
        assert [c.dtype for c in crops] == [torch.float32] * 6
        for i in range(len(crops[0])):
            assert not torch.equal(crops[0][i], crops[1][i])
            assert not torch.equal(crops[2][i], crops[3][i])  # the one local transform, called four times


def test_flips_of_two_views_follow_torch_and_are_independent(files):
    """RandomHorizontalFlip(p=0.5) after a centre crop, two views per sample: each view is
    torch's centre crop or its mirror; each flips half the time, independently of the other."""
    flip = T.Compose([T.Resize(40), T.CenterCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    plain = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
    n = 600
    dataset = Folder(files, TwoCropTransform(flip), n=n)
    loader = fastload.DataLoader(dataset, batch_size=100, num_workers=2, seed=11)
    assert loader.path.startswith("native: traced"), loader.path
    expected = [plain(Image.open(f).convert("RGB")) for f in files]
    flips, seen = [[], []], 0
    for views, _ in loader:
        for i in range(len(views[0])):
            want = expected[(seen + i) % len(files)]
            for v in range(2):
                straight = (views[v][i] - want).abs().max().item()
                mirrored = (views[v][i] - want.flip(-1)).abs().max().item()
                assert min(straight, mirrored) <= 2.5 / 255, (seen + i, v)
                flips[v].append(mirrored < straight)
        seen += len(views[0])
    first, second = np.array(flips[0], dtype=float), np.array(flips[1], dtype=float)
    for rate in (first.mean(), second.mean()):
        assert abs(rate - 0.5) < 4 * 0.5 / np.sqrt(n)
    assert abs((first * second).mean() - 0.25) < 4 * np.sqrt(0.25 * 0.75 / n)  # independent draws
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.2


def test_crop_draws_of_each_view_follow_torchvision_statistics(files):
    """The traced views' plans (as the loader fuses them): RandomResizedCrop's area
    fraction per view has torchvision's mean and spread; the views draw independently."""
    from fastload._contract import region_of
    from fastload.adapters import analyse
    from fastload.augment.plan import build_plan
    from fastload.augment.views import build_view_plans

    views = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
    outputs = analyse(Folder(files, TwoCropTransform(views))).outputs
    assert outputs is not None and len(outputs.views) == 2
    plans = build_view_plans(outputs, build_plan(list(outputs.views[0]), seed=7))
    h, w, n = 300, 400, 3000
    areas = [np.array([(lambda b: b[2] * b[3] / (h * w))(region_of(plans.seeded(v), h, w, 0, i)[0])
                       for i in range(n)]) for v in range(2)]
    torch.manual_seed(0)
    theirs = np.array([(lambda t: t[2] * t[3] / (h * w))(T.RandomResizedCrop.get_params(
        torch.empty(3, h, w), (0.08, 1.0), (3 / 4, 4 / 3))) for _ in range(n)])
    for ours in areas:
        assert abs(ours.mean() - theirs.mean()) < 4 * theirs.std() / np.sqrt(n / 2)
        assert abs(ours.std() / theirs.std() - 1) < 0.1
    assert abs(np.corrcoef(areas[0], areas[1])[0, 1]) < 0.1


class Disagrees(Folder):
    """Index 6 (not one of the probes of 40 indexes) passes its image to another transform
    object (of the same output sizes)."""

    def __init__(self, files, transform, other):
        super().__init__(files, transform, n=40)
        self.other = other

    def __getitem__(self, i):
        if i != 6:
            return super().__getitem__(i)
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return self.other(image), i % 3


@pytest.mark.parametrize("workers", [0, 2])
def test_an_index_that_disagrees_falls_back_to_its_own_getitem(files, workers):
    assert 6 not in probe_indexes(40)
    shared = centre(40, 32)  # view 0 the same object; index 6's view 1 another
    dataset = Disagrees(files, TwoCropTransform(shared), DataAugmentationDINO(
        shared, T.Compose([T.Resize(44), T.CenterCrop(32), T.ToTensor()]), shared, local_crops=0))
    ours, theirs = loaders(dataset, workers)
    assert ours.path.startswith("native: traced"), ours.path
    with pytest.warns(UserWarning, match=r"index 6\): passes view 1 to another transform object than index 0's"):
        got = list(ours)
    want = list(theirs)
    assert [structure(b) for b in got] == [structure(b) for b in want]
    for k, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, f"batch {k}")
    assert sorted(ours.stats()["native"]["traced"]["fallbacks"]) == [6]
    # (index 6's second view is unnormalised: a placeholder left in its slot would differ)
    assert got[1][0][1][2].min() >= 0


def test_a_view_with_a_python_only_transform_is_refused_with_its_name(files):
    local = T.Compose([T.CenterCrop(16), T.Lambda(lambda x: x), T.ToTensor()])
    loader = fastload.DataLoader(Folder(files, DataAugmentationDINO(centre(40, 32), centre(40, 32), local)),
                                 batch_size=4)
    assert loader.path.startswith("generic: "), loader.path
    assert "view 2's Compose is not native" in loader.path and "Lambda" in loader.path, loader.path
    views, _ = next(iter(loader))  # (torch's semantics: the dataset's own __getitem__)
    assert [tuple(v.shape[1:]) for v in views] == [(3, 32, 32)] * 2 + [(3, 16, 16)] * 4


def test_a_view_output_returned_twice_is_refused(files):
    class Twice(Folder):
        def __getitem__(self, i):
            image = Image.open(self.files[i]).convert("RGB")
            first = self.transform(image)
            self.transform(image)
            return first, first

    loader = fastload.DataLoader(Twice(files, centre(40, 32)), batch_size=4)
    assert loader.path.startswith("generic: "), loader.path
    assert "returns the output of view 0's Compose call 2 times" in loader.path, loader.path


def test_a_view_output_never_returned_is_refused(files):
    class Discards(Folder):
        def __getitem__(self, i):
            image = Image.open(self.files[i]).convert("RGB")
            first = self.transform(image)
            self.transform(image)  # (drawn, then dropped: no slot of the sample holds it)
            return first, i % 3

    loader = fastload.DataLoader(Discards(files, centre(40, 32)), batch_size=4)
    assert loader.path.startswith("generic: "), loader.path
    assert "does not return the output of view 1's Compose call" in loader.path, loader.path


def test_explain_lists_every_view_of_a_traced_dataset(files):
    dino = DataAugmentationDINO(centre(48, 40), T.Compose([T.Resize(44), T.CenterCrop(40), T.ToTensor()]),
                                centre(20, 16))
    report = fastload.explain(Folder(files, dino))
    assert "-> ([image, view 1, view 2, view 3, view 4, view 5], int)" in report, report
    view_lines = [line.strip() for line in report.splitlines() if line.strip().startswith("view")]
    assert [line.split(":")[0] for line in view_lines] == ["view 1 (from the same decode)",
                                                          "views 2-5 (from the same decode)"], report
    assert "CenterCrop(size=(40, 40))" in view_lines[0] and "Normalize" not in view_lines[0], report
    assert "CenterCrop(size=(16, 16))" in view_lines[1] and "Normalize" in view_lines[1], report
    assert "labels and other fields: each index's own" in report and "class index" not in report, report
    assert report.splitlines()[-1].strip() == "verdict: native path", report


def test_explain_lists_the_views_and_mask_of_fastloads_own_datasets(files, tmp_path):
    from fastload import transforms as FT

    views = fastload.FileList(files, views=[[FT.CenterCrop(32)], [FT.CenterCrop(16)], [FT.CenterCrop(16)]])
    assert "views 1-2 (from the same decode): CenterCrop(size=(16, 16))" in fastload.explain(views)
    masks = []
    for k, path in enumerate(files[:2]):
        masks.append(str(tmp_path / f"{k}.npy"))
        np.save(masks[-1], np.zeros(Image.open(path).size[::-1], dtype=np.uint8))
    pairs = fastload.SegmentationDataset(files[:2], masks, [FT.CenterCrop(16)], mask=fastload.Mask(fill=255))
    assert "mask: view 0's geometry, pil nearest, fill 255, int64" in fastload.explain(pairs)
