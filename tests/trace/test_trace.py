"""Datasets of the user's own class, learnt by running their own __getitem__ under the
tracer (fastload/trace/): the common shapes run natively with torch's batches,
what the tracer cannot see through falls back naming the reason and the user's file:line.

Every test here fails with the tracer off (FASTLOAD_TRACE=0), except the one that checks
that switch itself."""

from __future__ import annotations

import csv
import io
import os
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset, Subset

import fastload
from fastload.adapters import analyse
from trace_helpers import EVAL_ATOL, MEAN, STD, assert_same_structure, eval_v1, line_of, needs_ops

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def train_v1():
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def eval_v2():
    return v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


def train_v2():
    return v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def root(make_image_folder):
    return make_image_folder(classes=3, per_class=4)


# ---- the shapes ----------------------------------------------------------------------------


class OwnDataset(Dataset):
    """A list of (path, label); Image.open(path).convert("RGB"); the transform; (image, label)."""

    def __init__(self, root, transform=None):
        self.items = [(path, label) for path, label in ImageFolder(root).samples]
        self.transform = transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        image = Image.open(path).convert("RGB")
        if self.transform:
            image = self.transform(image)
        return image, label


def pil_loader(path):
    with open(path, "rb") as f:
        img = Image.open(f)
        img = img.convert("RGB")
        return img


class CsvDataset(Dataset):
    """A CSV of (file, label) read in __init__; torchvision's pil_loader idiom; (img, tensor(label))."""

    def __init__(self, csv_path, folder, transform=None):
        with open(csv_path, newline="") as f:
            self.rows = [(row["file"], int(row["label"])) for row in csv.DictReader(f)]
        self.folder, self.transform = folder, transform

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        name, label = self.rows[idx]
        img = pil_loader(os.path.join(self.folder, name))
        if self.transform is not None:
            img = self.transform(img)
        return img, torch.tensor(label)


@pytest.fixture(scope="module")
def csv_file(root, tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "labels.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "label"])
        for file, label in ImageFolder(root).samples:
            writer.writerow([os.path.relpath(file, root), label])
    return str(path)


class DictDataset(Dataset):
    """Hugging Face style: {"pixel_values": transforms(image), "labels": y}, v2 transforms."""

    def __init__(self, root, transforms):
        self.samples = ImageFolder(root).samples
        self.transforms = transforms

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, y = self.samples[i]
        image = Image.open(path).convert("RGB")
        return {"pixel_values": self.transforms(image), "labels": y}


class Wrapper(Dataset):
    """Holds an ImageFolder without a transform and applies its own."""

    def __init__(self, root, transform):
        self.base = ImageFolder(root)
        self.transform = transform

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        image, label = self.base[i]
        return self.transform(image), label


def loader_folder(root, transform):
    return ImageFolder(root, transform=transform, loader=lambda p: Image.open(p).convert("RGB"))


SHAPES = {
    "own": lambda root, csv_file, transform: OwnDataset(root, transform),
    "csv": lambda root, csv_file, transform: CsvDataset(csv_file, root, transform),
    "dict": lambda root, csv_file, transform: DictDataset(root, transform),
    "loader": lambda root, csv_file, transform: loader_folder(root, transform),
    "wrapper": lambda root, csv_file, transform: Wrapper(root, transform),
}
CLASS = {"own": "OwnDataset", "csv": "CsvDataset", "dict": "DictDataset", "loader": "ImageFolder",
         "wrapper": "Wrapper"}


def images_and_rest(batch):
    """(the image batch, everything else) of a batch of either shape."""
    if isinstance(batch, dict):
        return batch["pixel_values"], batch["labels"]
    return batch[0], batch[1]


@needs_ops
@pytest.mark.parametrize("shape", list(SHAPES))
def test_eval_transforms_run_natively_with_torchs_batches(shape, root, csv_file):
    transform = eval_v2() if shape == "dict" else eval_v1()
    make = lambda: SHAPES[shape](root, csv_file, transform)  # noqa: E731
    loader = fastload.DataLoader(make(), batch_size=5)
    assert loader.path.startswith(f"native: traced {CLASS[shape]}.__getitem__ [Resize -> CenterCrop -> "), loader.path
    ours, theirs = list(loader), list(TorchLoader(make(), batch_size=5))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert_same_structure(a, b)
        (images, rest), (want_images, want_rest) = images_and_rest(a), images_and_rest(b)
        assert torch.equal(rest, want_rest)
        assert torch.allclose(images, want_images, atol=EVAL_ATOL), (images - want_images).abs().max()


@needs_ops
@pytest.mark.parametrize("shape", list(SHAPES))
def test_train_transforms_give_torchs_structure_dtypes_and_labels(shape, root, csv_file):
    transform = train_v2() if shape == "dict" else train_v1()
    make = lambda: SHAPES[shape](root, csv_file, transform)  # noqa: E731
    loader = fastload.DataLoader(make(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))
    assert loader.path.startswith(f"native: traced {CLASS[shape]}.__getitem__ [RandomResizedCrop -> "), loader.path
    ours = list(loader)
    theirs = list(TorchLoader(make(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3)))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert_same_structure(a, b)
        assert torch.equal(images_and_rest(a)[1], images_and_rest(b)[1])  # the same samples, in the same order


@needs_ops
def test_a_python_tail_runs_hybrid_on_the_traced_dataset(root):
    transform = T.Compose([T.Resize(40), T.CenterCrop(32), T.RandomInvert(1.0), T.ToTensor(), T.Normalize(MEAN, STD)])
    loader = fastload.DataLoader(DictDataset(root, transform), batch_size=6)
    assert loader.path.startswith("hybrid: native [Resize -> CenterCrop] + python [RandomInvert -> "), loader.path
    ours, theirs = list(loader), list(TorchLoader(DictDataset(root, transform), batch_size=6))
    for a, b in zip(ours, theirs):
        assert_same_structure(a, b)
        assert torch.equal(a["labels"], b["labels"])
        assert torch.allclose(a["pixel_values"], b["pixel_values"], atol=EVAL_ATOL)


class Extras(Dataset):
    """A sample with more than a label: a namedtuple-free tuple of image, float target, name, index."""

    def __init__(self, root, transform):
        self.samples = ImageFolder(root).samples
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, y = self.samples[i]
        image = self.transform(Image.open(path).convert("RGB"))
        return image, {"y": float(y) / 2, "name": os.path.basename(path), "i": np.int32(i)}


@needs_ops
def test_extra_fields_are_collated_as_torch_collates_them(root):
    loader = fastload.DataLoader(Extras(root, eval_v1()), batch_size=5)
    assert loader.path.startswith("native: traced Extras.__getitem__"), loader.path
    ours, theirs = list(loader), list(TorchLoader(Extras(root, eval_v1()), batch_size=5))
    for (images, rest), (want_images, want_rest) in zip(ours, theirs):
        assert torch.allclose(images, want_images, atol=EVAL_ATOL)
        assert rest["name"] == want_rest["name"]
        for key in ("y", "i"):
            assert rest[key].dtype == want_rest[key].dtype and torch.equal(rest[key], want_rest[key])


class ShiftedLabels(ImageFolder):
    """A DatasetFolder subclass with its own __getitem__ (what the compat layer alone refuses)."""

    def __getitem__(self, i):
        image, label = super().__getitem__(i)
        return image, label + 1


def test_a_datasetfolder_with_its_own_getitem_is_traced_with_its_labels(root):
    dataset = ShiftedLabels(root, transform=train_v1())
    analysis = analyse(dataset)
    analysis.trace.prepare(range(len(dataset)))  # (indexes are traced as the loader reaches them)
    conversion = analysis.conversion()
    assert conversion.origin == "traced ShiftedLabels.__getitem__" and conversion.target_transform is None
    assert conversion.index.labels.tolist() == [label + 1 for _, label in dataset.samples]
    assert [type(s).__name__ for s in conversion.pipeline.native] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                                                     "ToDtype", "Normalize"]


@needs_ops
def test_a_structured_sample_is_rebuilt_on_engine_threads_and_in_shuffled_order(root):
    make = lambda: DictDataset(root, eval_v2())  # noqa: E731
    kwargs = lambda: dict(batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(1))  # noqa: E731
    loader = fastload.DataLoader(make(), num_workers=2, **kwargs())
    assert loader.path.startswith("native: traced DictDataset.__getitem__"), loader.path
    ours, theirs = list(loader), list(TorchLoader(make(), **kwargs()))
    for a, b in zip(ours, theirs, strict=True):
        assert_same_structure(a, b)
        assert torch.equal(a["labels"], b["labels"])
        assert torch.allclose(a["pixel_values"], b["pixel_values"], atol=EVAL_ATOL)


def test_a_subset_of_a_traced_dataset_takes_its_rows(root):
    subset = Subset(OwnDataset(root, train_v1()), [5, 0, 7])
    analysis = analyse(subset)
    analysis.trace.prepare(range(3))  # (indexes are traced as the loader reaches them)
    conversion = analysis.conversion()
    assert conversion.origin == "Subset -> traced OwnDataset.__getitem__"
    files = ImageFolder(root).samples
    assert [conversion.index.source(k) for k in range(3)] == [files[5][0], files[0][0], files[7][0]]
    assert conversion.index.labels.tolist() == [files[5][1], files[0][1], files[7][1]]


def test_tracing_leaves_the_callers_random_streams_and_patches_as_they_were(root):
    import PIL.Image

    open_before, call_before = PIL.Image.open, torch.nn.Module.__call__
    torch.manual_seed(11), random.seed(11), np.random.seed(11)
    assert analyse(OwnDataset(root, train_v1())).chain == "traced OwnDataset.__getitem__"
    analyse(RandomOutside(root))  # its draws are undone too
    drawn = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(11), random.seed(11), np.random.seed(11)
    assert drawn == (torch.rand(1), random.random(), np.random.rand())
    assert PIL.Image.open is open_before and torch.nn.Module.__call__ is call_before
    assert T.Compose.__call__ is vars(T.Compose)["__call__"] and "__wrapped__" not in vars(T.Compose.__call__)


# ---- what falls back, and why ---------------------------------------------------------------


class PixelsRead(OwnDataset):
    def __getitem__(self, i):
        path, label = self.items[i]
        image = Image.open(path).convert("RGB")
        mean = np.asarray(image).mean()  # pixels read before the transform
        return self.transform(image), label, mean


class CropFirst(OwnDataset):
    def __getitem__(self, i):
        path, label = self.items[i]
        image = Image.open(path).convert("RGB").crop((0, 0, 16, 16))
        return self.transform(image), label


class RandomOutside(OwnDataset):
    def __init__(self, root):
        super().__init__(root, train_v1())

    def __getitem__(self, i):
        path, label = self.items[i]
        image = Image.open(path).convert("RGB")
        if random.random() < 0.5:  # a draw outside the transforms
            label = label + 0
        return self.transform(image), label


class Raises(OwnDataset):
    def __getitem__(self, i):
        path, label = self.items[i]
        image = Image.open(path).convert("RGB")
        if i == 7:
            raise ValueError(f"no label for sample {i}")
        return self.transform(image), label


class Disagrees(OwnDataset):
    calls = 0

    def __getitem__(self, i):
        path, label = self.items[i]
        Disagrees.calls += 1
        return self.transform(Image.open(path).convert("RGB")), label, Disagrees.calls


class FromBytes(OwnDataset):
    """Bytes held in memory (bytes read from the file in the call are followed:
    tests/trace/test_trace_openers.py)."""

    def __init__(self, root, transform):
        super().__init__(root, transform)
        self.blobs = {}
        for path, _ in self.items:
            with open(path, "rb") as f:
                self.blobs[path] = f.read()

    def __getitem__(self, i):
        path, label = self.items[i]
        data = self.blobs[path]
        return self.transform(Image.open(io.BytesIO(data)).convert("RGB")), label


class NotConverted(OwnDataset):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(Image.open(path)), label


FALLBACKS = [
    (PixelsRead, "np.asarray(image)", "reads the image's pixels"),
    (CropFirst, ".crop((0, 0, 16, 16))", "uses the image's .crop"),
    (RandomOutside, "random.random()", "draws random numbers outside the transforms (random)"),
    (Raises, "raise ValueError", "raised ValueError: no label for sample 7"),
    (Disagrees, "def __getitem__", "returns different samples when traced twice at index 0"),
    (FromBytes, "io.BytesIO(data)", "opens an image from a BytesIO"),
    (NotConverted, "self.transform(Image.open(path))", "without .convert('RGB')"),
]


@pytest.mark.parametrize("cls, text, why", FALLBACKS, ids=[f[0].__name__ for f in FALLBACKS])
def test_what_the_tracer_cannot_see_through_falls_back_naming_the_line(cls, text, why, root):
    dataset = cls(root) if cls is RandomOutside else cls(root, train_v1())
    path = fastload.DataLoader(dataset, batch_size=4).path
    assert path.startswith(f"generic: {cls.__name__}.__getitem__ (traced, index "), path
    assert why in path, path
    assert line_of(cls.__getitem__, text) in path, path
    assert "fastload.FileList" in analyse(dataset).fixes[0]


class ImageCache(OwnDataset):
    """Keeps each decoded image (a dict cache): the tracer's stand-in for index 0 stays in it."""

    def __init__(self, root, transform):
        super().__init__(root, transform)
        self.cache = {}

    def __getitem__(self, i):
        path, label = self.items[i]
        if i not in self.cache:
            self.cache[i] = Image.open(path).convert("RGB")
        return self.transform(self.cache[i]), label


class SampleCache(OwnDataset):
    """Keeps each finished sample (a dict cache)."""

    def __init__(self, root, transform):
        super().__init__(root, transform)
        self.cache = {}

    def __getitem__(self, i):
        if i not in self.cache:
            path, label = self.items[i]
            self.cache[i] = (self.transform(Image.open(path).convert("RGB")), label)
        return self.cache[i]


@pytest.mark.parametrize("cls, why", [
    (ImageCache, "uses an image opened in an earlier __getitem__ call (a cache of images?"),
    (SampleCache, "keeps the transform's output after __getitem__ returns (a cache? the tracer's stand-in was "
                  "taken out of it)")])
def test_a_cache_falls_back_and_still_gives_torchs_batches(cls, why, root):
    dataset = cls(root, eval_v1())
    loader = fastload.DataLoader(dataset, batch_size=5)
    assert loader.path.startswith(f"generic: {cls.__name__}.__getitem__ (traced, index 0): {why}"), loader.path
    image = dataset[0][0]  # what the trace left in the cache is the real thing
    assert isinstance(image, torch.Tensor) and image.shape == (3, 32, 32)
    for a, b in zip(loader, TorchLoader(cls(root, eval_v1()), batch_size=5), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# A cache outside the dataset object, which no rollback reaches.
KEPT_OUTSIDE = {}


class ImageCacheOutside(OwnDataset):
    def __getitem__(self, i):
        path, label = self.items[i]
        if i not in KEPT_OUTSIDE:
            KEPT_OUTSIDE[i] = Image.open(path).convert("RGB")
        return self.transform(KEPT_OUTSIDE[i]), label


def test_an_image_kept_past_its_trace_is_undone_or_the_real_image_when_used(root):
    dataset = ImageCache(root, eval_v1())
    analyse(dataset)
    assert dataset.cache == {}  # what the probes put in the dataset's own cache is undone
    dataset = ImageCacheOutside(root, eval_v1())
    analyse(dataset)
    kept = KEPT_OUTSIDE[0]  # a stand-in left where the tracer cannot undo it turns into the real image
    want = Image.open(dataset.items[0][0]).convert("RGB")
    assert kept.size == want.size and isinstance(kept, Image.Image)
    assert np.array_equal(np.asarray(kept), np.asarray(want))


def test_an_exception_names_the_index(root):
    assert "(traced, index 7): raised ValueError" in analyse(Raises(root, train_v1())).reasons[0]


def test_a_custom_loader_that_reads_pixels_keeps_its_reason_and_adds_the_traces(root):
    def rotating(path):
        return Image.open(path).convert("RGB").rotate(90)

    reasons = analyse(ImageFolder(root, transform=train_v1(), loader=rotating)).reasons
    assert reasons[0].startswith("ImageFolder has a custom loader")
    assert "uses the image's .rotate" in reasons[1] and line_of(rotating, ".rotate(90)") in reasons[1]


def test_fastload_trace_0_turns_the_tracer_off(root, monkeypatch):
    monkeypatch.setenv("FASTLOAD_TRACE", "0")
    reasons = analyse(OwnDataset(root, train_v1())).reasons
    assert reasons and "is not a torchvision dataset fastload recognises" in reasons[0]
    assert fastload.DataLoader(OwnDataset(root, train_v1()), batch_size=4).path.startswith("generic: ")
