"""A user's detection dataset (PIL image + tv_tensors.BoundingBoxes target through one v2
Compose call, `self.transforms(img, target)`) traced: native, images from the engine, each
index's boxes moved through the engine's draws, batches through torchvision's detection
collate; against torch's DataLoader on the same object over 2 epochs (deterministic
transforms: boxes within 1e-4 px, labels equal, images at the PSNR floor), random ones
against fastload.DetectionDataset's samples with the same seed (v2's ops on the engine's
draws, tests/test_boxes.py), and a transform whose boxes are not followed named."""

from __future__ import annotations

import glob
import os

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload import _ext
from jpeg_samples import write_image_folder

tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from torchvision.transforms import v2  # noqa: E402

pytestmark = [pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built"), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def annotations(tmp_path_factory):
    root = tmp_path_factory.mktemp("detection_trace")
    write_image_folder(root, classes=2, per_class=3)
    out = []
    for k, path in enumerate(sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))):
        with Image.open(path) as image:
            size = (image.height, image.width)
        # (the last one too small to pass SanitizeBoundingBoxes(min_size=3) after the resize)
        boxes = [[1.0 + k, 2.0, 20.0, 25.0 + k], [5.0, 3.0 + k, 30.0, 33.0]][: 1 + k % 2] + [[9.0, 9.0, 11.0, 10.5]]
        out.append((path, size, boxes, list(range(1, len(boxes) + 1))))
    return out


class UserDetection(Dataset):
    """A detection dataset as users write it for torchvision v2."""

    def __init__(self, annotations, transforms):
        self.annotations, self.transforms = annotations, transforms

    def __len__(self):
        return len(self.annotations)

    def __getitem__(self, i):
        path, size, boxes, labels = self.annotations[i]
        image = Image.open(path).convert("RGB")
        target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=size),
                  "labels": torch.tensor(labels)}
        return self.transforms(image, target)


def collate(batch):
    return tuple(zip(*batch))


EVAL = v2.Compose([v2.Resize((24, 28)), v2.ToImage(), v2.ClampBoundingBoxes(), v2.SanitizeBoundingBoxes()])


def psnr(a, b):
    import math

    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


MIN_PSNR_DB = 35.0  # engine vs PIL, same geometry: a level or two of resize rounding (tests/test_boxes.py)


def assert_same_sample(ours, theirs):
    (image, target), (want_image, want_target) = ours, theirs
    assert image.shape == want_image.shape and image.dtype == want_image.dtype
    assert psnr(image, want_image) >= MIN_PSNR_DB
    assert list(target) == list(want_target)
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
    assert target["boxes"].format == want_target["boxes"].format
    assert tuple(target["boxes"].canvas_size) == tuple(want_target["boxes"].canvas_size)
    assert target["boxes"].shape == want_target["boxes"].shape
    assert (target["boxes"].as_subclass(torch.Tensor) - want_target["boxes"].as_subclass(torch.Tensor)).abs().max() \
        <= 1e-4 if len(target["boxes"]) else True
    assert torch.equal(target["labels"], want_target["labels"])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_traced_detection_dataset_runs_natively_as_torch_over_two_epochs(annotations, num_workers):
    transforms = v2.Compose([v2.Resize(26), v2.CenterCrop((24, 29)), v2.RandomVerticalFlip(p=0.0), v2.ToImage(),
                             v2.ClampBoundingBoxes(), v2.SanitizeBoundingBoxes(min_size=3)])
    ds = UserDetection(annotations, transforms)
    assert "verdict: native path" in fastload.explain(ds)
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=collate, num_workers=num_workers)
    assert loader.path.startswith("native: traced UserDetection.__getitem__") and "collate_fn collate followed" in \
        loader.path, loader.path
    for epoch in range(2):
        loader.set_epoch(epoch)
        ours = [s for images, targets in loader for s in zip(images, targets)]
        theirs = [s for images, targets in TorchLoader(ds, batch_size=4, collate_fn=collate) for s in zip(images, targets)]
        assert len(ours) == len(theirs) == len(ds)
        for a, b in zip(ours, theirs):
            assert_same_sample(a, b)


def test_traced_random_boxes_take_the_engines_draws(annotations):
    transforms = v2.Compose([v2.ToImage(), v2.RandomResizedCrop((20, 22), scale=(0.2, 1.0)), v2.RandomHorizontalFlip(),
                             v2.SanitizeBoundingBoxes()])
    ds = UserDetection(annotations, transforms)
    loader = fastload.DataLoader(ds, batch_size=3, collate_fn=collate, seed=7)
    assert loader.path.startswith("native:"), loader.path
    # fastload's own DetectionDataset of the same files, seed and transforms: its samples
    # are v2's ops on the engine's draws (tests/test_boxes.py)
    twin = fastload.DetectionDataset([a[0] for a in annotations], [
        {"boxes": tv_tensors.BoundingBoxes(a[2], format="XYXY", canvas_size=a[1]), "labels": torch.tensor(a[3])}
        for a in annotations], transforms, seed=7)
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        twin.set_epoch(epoch)
        ours = [s for images, targets in loader for s in zip(images, targets)]
        for i, sample in enumerate(ours):
            assert_same_sample(sample, twin[i])
        epochs.append(torch.cat([t["boxes"].as_subclass(torch.Tensor).reshape(-1) for _, t in ours]))
    assert epochs[0].shape != epochs[1].shape or not torch.equal(epochs[0], epochs[1])  # drawn anew each epoch


def test_boxes_through_an_unfollowed_transform_name_it(annotations):
    ds = UserDetection(annotations, v2.Compose([v2.RandomAffine(10), v2.Resize((24, 28)), v2.ToImage()]))
    text = fastload.explain(ds)
    assert "whose RandomAffine moves boxes by its own draws" in text and "test_trace_boxes.py" in text, text
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=collate)
    assert loader.path.startswith("generic:"), loader.path


def test_the_same_data_as_a_detection_dataset_runs_natively(annotations):
    ds = UserDetection(annotations, EVAL)
    native = fastload.DetectionDataset([a[0] for a in annotations], [
        {"boxes": tv_tensors.BoundingBoxes(a[2], format="XYXY", canvas_size=a[1]), "labels": torch.tensor(a[3])}
        for a in annotations], EVAL)
    loader = fastload.DataLoader(native, batch_size=4, collate_fn=collate)
    assert loader.path.startswith("native: DetectionDataset"), loader.path
    for epoch in range(2):
        loader.set_epoch(epoch)
        ours = [s for images, targets in loader for s in zip(images, targets)]
        theirs = [s for images, targets in TorchLoader(ds, batch_size=4, collate_fn=collate)
                  for s in zip(images, targets)]
        assert len(ours) == len(theirs) == len(ds)
        for (image, target), (want_image, want_target) in zip(ours, theirs):
            assert image.shape == want_image.shape
            assert (image.double() - want_image.double()).abs().mean() < 3.0  # a level or two of resize rounding
            assert (target["boxes"] - want_target["boxes"]).abs().max() <= 1e-4
            assert torch.equal(target["labels"], want_target["labels"])


def test_boxes_of_another_canvas_than_the_image_are_refused_by_name(annotations):
    wrong = [(path, (size[0] + 1, size[1]), boxes, labels) for path, size, boxes, labels in annotations]
    ds = UserDetection(wrong, v2.Compose([v2.Resize((24, 28)), v2.ToImage()]))
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=collate)
    assert loader.path.startswith("native:"), loader.path
    with pytest.raises(ValueError, match=r"UserDetection.__getitem__ \(traced, index 0\): its boxes' canvas_size "
                                         r"\(\d+, \d+\) is not the size of its image"):
        next(iter(loader))


def test_traced_detection_with_the_default_collate_batches_as_torch(annotations):
    same_count = [(path, size, [[1.0, 2.0, 20.0, 25.0], [5.0, 3.0, 30.0, 33.0]], [4, 5])
                  for path, size, _, _ in annotations]
    ds = UserDetection(same_count, v2.Compose([v2.Resize((24, 28)), v2.RandomHorizontalFlip(p=0.0), v2.ToImage()]))
    loader = fastload.DataLoader(ds, batch_size=4)
    assert loader.path.startswith("native: traced UserDetection.__getitem__"), loader.path
    for (images, target), (want_images, want_target) in zip(loader, TorchLoader(ds, batch_size=4)):
        assert images.shape == want_images.shape and all(psnr(a, b) >= MIN_PSNR_DB for a, b in zip(images, want_images))
        assert target["boxes"].shape == want_target["boxes"].shape
        assert (target["boxes"] - want_target["boxes"]).abs().max() <= 1e-4
        assert torch.equal(target["labels"], want_target["labels"])


# ---- inside Subset / random_split / ConcatDataset ------------------------------------------

FOLLOWED = v2.Compose([v2.Resize(26), v2.CenterCrop((24, 29)), v2.ToImage(), v2.ClampBoundingBoxes(),
                       v2.SanitizeBoundingBoxes(min_size=3)])


def wrapped_like_torch(wrapped, chain, num_workers=0, epochs=2):
    """fastload's samples over a wrapper are torch's over the same object, shuffled by one
    seeded generator each, over `epochs` epochs (boxes within 1e-4 px); the path says native."""
    kwargs = lambda: dict(batch_size=2, collate_fn=collate, shuffle=True,  # noqa: E731
                          generator=torch.Generator().manual_seed(6))
    assert "verdict: native path" in fastload.explain(wrapped)
    loader = fastload.DataLoader(wrapped, num_workers=num_workers, **kwargs())
    assert loader.path.startswith(f"native: {chain}") and "collate_fn collate followed" in loader.path, loader.path
    theirs = TorchLoader(wrapped, num_workers=num_workers, **kwargs())
    for _ in range(epochs):
        ours = [s for images, targets in loader for s in zip(images, targets)]
        want = [s for images, targets in theirs for s in zip(images, targets)]
        assert len(ours) == len(want) == len(wrapped)
        for a, b in zip(ours, want):
            assert_same_sample(a, b)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_random_split_of_a_detection_dataset_is_native_and_equals_torchs(annotations, num_workers):
    train, val = torch.utils.data.random_split(UserDetection(annotations, FOLLOWED), [4, 2],
                                               generator=torch.Generator().manual_seed(2))
    for part in (train, val):
        wrapped_like_torch(part, "Subset -> traced UserDetection.__getitem__", num_workers)


def test_a_concat_of_two_detection_datasets_nested_in_a_subset_is_native(annotations):
    both = torch.utils.data.ConcatDataset([UserDetection(annotations, FOLLOWED),
                                           UserDetection(annotations[::-1][:4], FOLLOWED)])
    wrapped_like_torch(both, "ConcatDataset(traced UserDetection.__getitem__, traced UserDetection.__getitem__)")
    wrapped_like_torch(torch.utils.data.Subset(both, [9, 0, 6, 3, 7, 1]), "Subset -> ConcatDataset(")


def test_random_boxes_inside_a_subset_take_the_engines_draws_of_the_outer_index(annotations):
    transforms = v2.Compose([v2.ToImage(), v2.RandomResizedCrop((20, 22), scale=(0.2, 1.0)), v2.RandomHorizontalFlip(),
                             v2.SanitizeBoundingBoxes()])
    rows = [3, 1, 0, 5]
    subset = torch.utils.data.Subset(UserDetection(annotations, transforms), rows)
    loader = fastload.DataLoader(subset, batch_size=3, collate_fn=collate, seed=7)
    assert loader.path.startswith("native: Subset"), loader.path
    # fastload's DetectionDataset of the subset's files in its order, same seed and transforms:
    # its sample j is v2's ops on the engine's draws for sample j (tests/test_boxes.py)
    twin = fastload.DetectionDataset([annotations[r][0] for r in rows], [
        {"boxes": tv_tensors.BoundingBoxes(annotations[r][2], format="XYXY", canvas_size=annotations[r][1]),
         "labels": torch.tensor(annotations[r][3])} for r in rows], transforms, seed=7)
    for epoch in range(2):
        loader.set_epoch(epoch)
        twin.set_epoch(epoch)
        for j, sample in enumerate(s for images, targets in loader for s in zip(images, targets)):
            assert_same_sample(sample, twin[j])
