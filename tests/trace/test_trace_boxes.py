"""A user's detection dataset (PIL image + tv_tensors.BoundingBoxes target through one v2
Compose call, `self.transforms(img, target)`): the tracer names why it is not followed
(boxes passed with the image) and what runs it natively (fastload.DetectionDataset); the
loader then gives torch's own batches on the generic path; the same data as a
DetectionDataset runs natively with boxes equal to v2's on the engine's draws
(tests/test_boxes.py checks those in depth)."""

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
        boxes = [[1.0 + k, 2.0, 20.0, 25.0 + k], [5.0, 3.0 + k, 30.0, 33.0]][: 1 + k % 2]
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


def test_boxes_passed_with_the_image_name_the_reason_and_the_native_dataset(annotations):
    ds = UserDetection(annotations, EVAL)
    text = fastload.explain(ds)
    assert "passes bounding boxes with the image to Compose (v2's transform(image, target))" in text, text
    assert "fastload.DetectionDataset(paths, targets, transforms)" in text and "test_trace_boxes.py" in text, text
    ours = fastload.DataLoader(ds, batch_size=4, collate_fn=collate)
    assert ours.path.startswith("generic:"), ours.path
    for (images, targets), (want_images, want_targets) in zip(ours, TorchLoader(ds, batch_size=4, collate_fn=collate)):
        assert all(torch.equal(a, b) for a, b in zip(images, want_images))
        for a, b in zip(targets, want_targets):
            assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["labels"], b["labels"])


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
