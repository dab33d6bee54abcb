"""A traced dataset's batches through the user's collate_fn (fastload/trace/collate.py):
a collate_fn that stacks the images (Hugging Face's examples, transformers'
default_data_collator) is followed around the engine's batch; one that does more keeps
the generic path, naming why. Each compared with torch's DataLoader over the same object."""

from __future__ import annotations

import os

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from trace_helpers import RESIZE_ATOL, needs_ops

torchvision = pytest.importorskip("torchvision")

import epoch_datasets as shapes  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ATOL = RESIZE_ATOL


@pytest.fixture(scope="module")
def files(make_image_folder):
    return shapes.image_files(make_image_folder(classes=3, per_class=6, size=(40, 52)))


class Rows(Dataset):
    """{"pixel_values": image, "label": int, "name": str}, as Hugging Face-style scripts return."""

    def __init__(self, files, transform=None):
        self.files, self.transform = files, transform or shapes.eval_transform(24)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        image = self.transform(Image.open(self.files[i]).convert("RGB"))
        return {"pixel_values": image, "label": i % 4, "name": os.path.basename(self.files[i])}


def stack_rows(rows):
    return {"pixel_values": torch.stack([r["pixel_values"] for r in rows]),
            "labels": torch.tensor([r["label"] for r in rows]), "names": [r["name"] for r in rows]}


def pairs(rows):
    images, labels = zip(*rows)
    return torch.stack(images), torch.tensor(labels) * 10


def scaled(rows):
    return {"pixel_values": torch.stack([r["pixel_values"] for r in rows]) * 2}


def assert_same(ours, theirs):
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert type(a) is type(b)
        items = a.items() if isinstance(a, dict) else enumerate(a)
        for key, value in items:
            want = b[key]
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                assert value.shape == want.shape and torch.allclose(value, want, atol=ATOL), key
            elif isinstance(value, torch.Tensor):
                assert torch.equal(value, want), key
            else:
                assert value == want, key


@needs_ops
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_collate_fn_that_stacks_dict_rows_is_followed(files, num_workers):
    dataset = Rows(files)
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=stack_rows, num_workers=num_workers)
    assert loader.path.startswith("native: traced Rows.__getitem__") and "collate_fn stack_rows followed" in \
        loader.path, loader.path
    for _ in range(2):
        assert_same(loader, TorchLoader(dataset, batch_size=4, collate_fn=stack_rows, num_workers=num_workers))


@needs_ops
def test_a_collate_fn_over_image_label_pairs_is_followed(files):
    dataset = shapes.Photos(files)
    loader = fastload.DataLoader(dataset, batch_size=5, collate_fn=pairs, shuffle=True,
                                 generator=torch.Generator().manual_seed(2))
    assert loader.path.startswith("native: traced Photos.__getitem__"), loader.path
    assert_same(loader, TorchLoader(dataset, batch_size=5, collate_fn=pairs, shuffle=True,
                                    generator=torch.Generator().manual_seed(2)))


@needs_ops
def test_transformers_default_data_collator_is_followed(files):
    transformers = pytest.importorskip("transformers", reason="transformers is optional (make installs it)")
    collator = transformers.default_data_collator
    dataset = Rows(files)
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=collator)
    assert loader.path.startswith("native: "), loader.path
    assert_same(loader, TorchLoader(dataset, batch_size=4, collate_fn=collator))


@needs_ops
def test_fallbacks_inside_a_collated_batch_are_the_samples_own(files):
    dataset = shapes.EveryOtherFallsBack(files)
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=pairs)
    assert loader.path.startswith("native: traced EveryOtherFallsBack.__getitem__"), loader.path
    with pytest.warns(UserWarning, match="runs through its own __getitem__"):
        ours = list(loader)
    assert_same(ours, TorchLoader(dataset, batch_size=4, collate_fn=pairs))


@needs_ops
def test_a_collate_fn_that_computes_from_the_images_stays_generic(files):
    dataset = Rows(files)
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=scaled)
    assert loader.path.startswith("generic: custom collate_fn (scaled does not return the images stacked"), \
        loader.path
    assert_same(loader, TorchLoader(dataset, batch_size=4, collate_fn=scaled))
