"""A traced dataset inside torch's Subset or ConcatDataset (fastload/trace/views.py):
traced as the loader reaches it, as the dataset itself is (a bounded number of
__getitem__ calls up front, whatever the length), the batches equal to torch's
DataLoader's, and a per-sample fallback inside a part named by its outer and inner index."""

from __future__ import annotations

import glob
import os
import random

import pytest
import torch
from PIL import Image
from torch.utils.data import ConcatDataset, DataLoader as TorchLoader, Dataset, Subset

import fastload
from fastload.adapters import analyse
from fastload.trace import PROBES
from jpeg_samples import write_image_folder
from trace_helpers import EVAL_ATOL, eval_v1, needs_ops

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

pytestmark = pytest.mark.timeout(300)

EVAL = eval_v1()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("views")
    write_image_folder(root, classes=3, per_class=4)
    return sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))


class Cycling(Dataset):
    """n samples over a few files, label (i + shift) % 7; counts the __getitem__ calls the
    object sees (`calls`: torch's num_workers=0 loader makes one per index and epoch) and
    every call, the tracer's undone probes too (`every[0]`: an in-place change no rollback
    undoes)."""

    def __init__(self, files, n, shift=0, transform=EVAL):
        self.files, self.n, self.shift, self.transform, self.calls = files, n, shift, transform, 0
        self.every = [0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        self.every[0] += 1
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return self.transform(image), (i + self.shift) % 7


class DrawsAt(Cycling):
    """Index `at` draws from Python's global generator outside the transforms."""

    def __init__(self, files, n, at, shift=0):
        super().__init__(files, n, shift)
        self.at = at

    def __getitem__(self, i):
        if i == self.at:
            random.random()
        return super().__getitem__(i)


def assert_same_batches(ours, theirs):
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a[1], b[1])
        assert torch.allclose(a[0], b[0], atol=EVAL_ATOL), (a[0] - b[0]).abs().max()


@pytest.mark.parametrize("wrap", ["subset", "concat", "nested"])
def test_construction_traces_a_bounded_number_of_indexes(files, wrap):
    def build(n):
        parts = [Cycling(files, n), Cycling(files, n, shift=3)]
        if wrap == "subset":
            dataset = Subset(parts[0], range(n // 4, n))
        elif wrap == "concat":
            dataset = ConcatDataset(parts)
        else:
            dataset = Subset(ConcatDataset([Subset(parts[0], range(1, n)), parts[1]]), range(0, 2 * n - 1, 3))
        return dataset, parts

    calls = []
    for n in (1_000, 100_000):
        dataset, parts = build(n)
        loader = fastload.DataLoader(dataset, batch_size=8, accelerate="auto")
        assert "traced Cycling.__getitem__" in loader.path or loader.path.startswith("generic: "), loader.path
        calls.append([p.every[0] for p in parts])
        assert [p.calls for p in parts] == [0, 0]  # undone: torch's loader calls nothing when it is built
    # each part: index 0 twice and the spread probes, at 1k as at 100k samples
    used = [0] if wrap == "subset" else [0, 1]
    assert calls[0] == calls[1], calls
    assert all(calls[0][p] == PROBES + 1 for p in used), calls


@needs_ops
@pytest.mark.parametrize("wrap", ["subset", "concat"])
def test_batches_equal_torchs_and_indexes_are_traced_as_they_come(files, wrap):
    n = 20_000

    def make():
        a, b = Cycling(files, n), Cycling(files, n, shift=3)
        return Subset(a, list(range(n - 1, 0, -7))) if wrap == "subset" else ConcatDataset([a, b])

    kwargs = dict(batch_size=8, shuffle=True)
    dataset = make()
    loader = fastload.DataLoader(dataset, generator=torch.Generator().manual_seed(3), **kwargs)
    assert loader.path.startswith("native: "), loader.path
    assert "traced Cycling.__getitem__" in loader.path, loader.path
    theirs = TorchLoader(make(), generator=torch.Generator().manual_seed(3), **kwargs)
    taken = []
    for k, (a, b) in enumerate(zip(loader, theirs)):
        taken.append((a, b))
        if k == 5:
            break
    assert_same_batches([a for a, _ in taken], [b for _, b in taken])
    parts = [dataset.dataset] if wrap == "subset" else dataset.datasets
    # 6 batches taken, a few more submitted ahead: far from the epoch; each traced index's
    # call is the one torch's num_workers=0 loader would make
    assert 48 <= sum(p.calls for p in parts) <= 48 + 8 * 8


@needs_ops
def test_a_fallback_inside_a_concat_part_runs_through_getitem_named_by_both_indexes(files):
    n = 120

    def make():
        return ConcatDataset([Cycling(files, n), DrawsAt(files, n, at=50, shift=3)])

    loader = fastload.DataLoader(make(), batch_size=8)
    assert loader.path.startswith("native: ConcatDataset(traced Cycling.__getitem__, traced DrawsAt.__getitem__)"), \
        loader.path
    with pytest.warns(UserWarning, match=r"DrawsAt.__getitem__ \(traced, index 50 of DrawsAt, index 170 of the "
                                         r"ConcatDataset\(.*\)\): draws random numbers outside the transforms "
                                         r"\(random\) at .*test_trace_views.py:\d+.*runs through its own __getitem__"):
        ours = list(loader)
    assert_same_batches(ours, list(TorchLoader(make(), batch_size=8)))
    fallbacks = loader.stats()["native"]["traced"]["fallbacks"]
    assert sorted(fallbacks) == [170], fallbacks
    assert fallbacks[170].startswith("index 50 of DrawsAt: draws random numbers outside the transforms (random) at ")
    # the sample is the dataset's own (not the placeholder the engine made: part 0's index 0)
    row = ours[170 // 8][0][170 % 8]
    assert not torch.allclose(row, ours[0][0][0], atol=EVAL_ATOL)


@needs_ops
def test_a_concat_of_a_traced_dataset_and_an_imagefolder_traces_the_traced_part_whole(files):
    from torchvision.datasets import ImageFolder

    root = os.path.dirname(os.path.dirname(files[0]))

    def make():
        return ConcatDataset([ImageFolder(root, transform=EVAL), Cycling(files, 30)])

    dataset = make()
    loader = fastload.DataLoader(dataset, batch_size=8)
    assert loader.path.startswith("native: ConcatDataset(torchvision ImageFolder, traced Cycling.__getitem__)"), \
        loader.path
    assert_same_batches(list(loader), list(TorchLoader(make(), batch_size=8)))
    # the traced part traced whole when the path is chosen (its index is concatenated with the
    # ImageFolder's), each epoch anew: probes and traces undone
    calls = dataset.datasets[1].every[0]
    assert dataset.datasets[1].calls == 0
    assert_same_batches(list(loader), list(TorchLoader(make(), batch_size=8)))
    assert dataset.datasets[1].every[0] - calls == PROBES + 1 + 30


def keep(image):
    """A Python transform without a native equivalent: the rest of the pipeline is a tail."""
    return image


@needs_ops
@pytest.mark.parametrize("wrap", ["none", "subset"])
def test_a_tail_in_worker_processes_does_not_trace_every_index_up_front(files, wrap):
    """tail_on="processes" (the default with num_workers): the workers' copies of the trace
    were forked early; each batch carries its indexes' traced files to them."""
    n = 50_000
    tail = T.Compose([T.Resize(40), T.CenterCrop(32), keep, T.ToTensor()])

    def make():
        dataset = Cycling(files, n, transform=tail)
        return dataset if wrap == "none" else Subset(dataset, range(n - 1, 0, -3))

    dataset = make()
    loader = fastload.DataLoader(dataset, batch_size=8, num_workers=2, shuffle=True,
                                 generator=torch.Generator().manual_seed(4))
    assert loader.path.startswith("hybrid: native [Resize -> CenterCrop] + python [keep -> ToTensor]"), loader.path
    own = dataset if wrap == "none" else dataset.dataset
    assert own.calls == 0 and own.every[0] == PROBES + 1  # probed, undone
    theirs = TorchLoader(make(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(4))
    taken = []
    for k, pair in enumerate(zip(loader, theirs)):
        taken.append(pair)
        if k == 5:
            break
    assert_same_batches([a for a, _ in taken], [b for _, b in taken])
    # 6 batches, those in flight and traced ahead: not 50k (and with worker processes, undone here as
    # torch's calls would be made in the workers' copies)
    assert own.every[0] <= 2 * (PROBES + 1) + 8 * 32, own.every[0]
    assert own.calls == 0


@pytest.mark.parametrize("name", ["shape-numpy", "shape-random", "shape-npy"])
def test_explain_and_loader_path_name_why_a_generic_shape_stays_generic(files, name):
    """fastload-bench's shapes that stay generic (fastload/bench/shapes.py): the reason in
    loader.path is the one fastload.explain gives, with the shape's own file:line."""
    from fastload.bench.shapes import SHAPES

    dataset = SHAPES[name](os.path.dirname(os.path.dirname(files[0])))
    loader = fastload.DataLoader(dataset, batch_size=2)
    assert loader.path.startswith("generic: "), loader.path
    why = {"shape-numpy": "reads the image's pixels before a transform fastload maps at ",
           "shape-random": "draws random numbers outside the transforms (random) at ",
           "shape-npy": "NpyArrays is not a torchvision dataset fastload recognises"}[name]
    assert why in loader.path, loader.path
    if name != "shape-npy":
        assert os.path.join("fastload", "bench", "shapes.py:") in loader.path, loader.path
    report = fastload.explain(dataset)
    assert loader.path[len("generic: "):] in report and "verdict: generic path" in report, report
    images, labels = next(iter(loader))
    assert images.dtype == torch.float32 and labels.dtype == torch.int64


@needs_ops
def test_resume_mid_epoch_through_a_subset_of_a_traced_dataset(files):
    from resume_helpers import check_resume_at_every_position

    made = []

    def make():
        dataset = Cycling(files, 200, transform=T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))
        made.append(dataset)
        return fastload.DataLoader(Subset(dataset, range(199, 0, -2)), batch_size=7, shuffle=True, seed=5,
                                   generator=torch.Generator().manual_seed(2))

    assert make().path.startswith("native: Subset -> traced Cycling.__getitem__"), made[0].calls
    assert made[0].calls == 0 and made[0].every[0] == PROBES + 1  # probed, undone; the rest as the batches come
    check_resume_at_every_position(make, positions=[0, 3, 9])


# ---- samples of their own structure inside a wrapper ------------------------------------------


class Records(Cycling):
    """A dict sample with an extra tensor: {"pixel_values", "labels", "index"}; index `odd`
    (if any) opens its image with OpenCV-free numpy first (the tracer sees pixels read before
    the transform: that sample falls back)."""

    def __init__(self, files, n, odd=None, transform=EVAL):
        super().__init__(files, n, transform=transform)
        self.odd = odd

    def __getitem__(self, i):
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        if i == self.odd:
            image = Image.fromarray(__import__("numpy").asarray(image))
        return {"pixel_values": self.transform(image), "labels": i % 5, "index": torch.tensor([i, -i])}


class TwoViews(Cycling):
    """SimCLR's pair of one transform applied twice, and the label: ([v1, v2], label)."""

    def __getitem__(self, i):
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return [self.transform(image), self.transform(image)], (i + self.shift) % 7


def assert_same_structured(ours, theirs):
    for a, b in zip(ours, theirs, strict=True):
        assert type(a) is type(b)
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["index"], b["index"])
            assert torch.allclose(a["pixel_values"], b["pixel_values"], atol=EVAL_ATOL)
        else:
            (views_a, label_a), (views_b, label_b) = a, b
            assert torch.equal(label_a, label_b) and len(views_a) == len(views_b) == 2
            for x, y in zip(views_a, views_b):
                assert torch.allclose(x, y, atol=EVAL_ATOL), (x - y).abs().max()


@needs_ops
@pytest.mark.parametrize("workers", [0, 2])
def test_random_split_of_a_dict_dataset_is_native_and_equals_torchs(files, workers):
    own = Records(files, 60)
    train, _ = torch.utils.data.random_split(own, [40, 20], generator=torch.Generator().manual_seed(3))
    kwargs = lambda: dict(batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(8))  # noqa: E731
    loader = fastload.DataLoader(train, num_workers=workers, **kwargs())
    assert loader.path.startswith("native: Subset -> traced Records.__getitem__"), loader.path
    theirs = TorchLoader(train, **kwargs())
    for _ in range(2):  # two epochs: each epoch's samples traced anew
        assert_same_structured(list(loader), list(theirs))


@needs_ops
@pytest.mark.parametrize("wrap", ["concat", "subset"])
def test_two_view_datasets_in_a_wrapper_are_native_and_equal_torchs(files, wrap):
    if wrap == "concat":
        both = ConcatDataset([TwoViews(files, 9), TwoViews(files, 7, shift=3)])
        chain = "ConcatDataset(traced TwoViews.__getitem__, traced TwoViews.__getitem__)"
    else:
        both, chain = Subset(TwoViews(files, 20), range(3, 19)), "Subset -> traced TwoViews.__getitem__"
    loader = fastload.DataLoader(both, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert loader.path.startswith(f"native: {chain}") and "view 1" in loader.path, loader.path
    theirs = TorchLoader(both, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert_same_structured(list(loader), list(theirs))


@needs_ops
def test_a_fallback_of_a_structured_sample_inside_a_subset_is_its_own_getitems(files):
    subset = Subset(Records(files, 30, odd=11), list(range(29, -1, -1)))
    loader = fastload.DataLoader(subset, batch_size=5)
    assert loader.path.startswith("native: Subset -> traced Records.__getitem__"), loader.path
    with pytest.warns(UserWarning, match=r"index 11 of Records, index 18 of the Subset"):
        ours = list(loader)
    assert_same_structured(ours, list(TorchLoader(subset, batch_size=5)))


@needs_ops
def test_a_concat_of_parts_with_other_structures_or_views_is_refused_naming_the_part(files):
    mixed = ConcatDataset([Records(files, 6), Cycling(files, 6)])
    why = analyse(mixed).describe()
    assert "part 1 (traced Cycling.__getitem__) returns (image, int)" in why and "one sample structure" in why, why
    other_views = ConcatDataset([TwoViews(files, 6), TwoViews(files, 6, transform=T.Compose(
        [T.Resize(40), T.CenterCrop(24), T.ToTensor()]))])
    assert not fastload.DataLoader(other_views, batch_size=2).path.startswith("native"), analyse(other_views).describe()
