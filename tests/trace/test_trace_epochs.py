"""A trace holds for one epoch (fastload/trace/lazy.py, DataLoader._renew_path): the
training loop changes the dataset between epochs (curriculum, pseudo-labels, resampling,
a new or mutated transform, a `train` flag, another length), opens handles in
`__getitem__`, counts its calls; fastload gives what torch's DataLoader gives on the same
dataset object, epoch after epoch, and its construction calls nothing the object sees.

Each test runs torch's loader and fastload's over the *same* object, the loop's change
made once before both."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader

import fastload
from trace_helpers import RESIZE_ATOL, needs_ops

torchvision = pytest.importorskip("torchvision")

import epoch_datasets as shapes  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ATOL = RESIZE_ATOL


@pytest.fixture(scope="module")
def files(make_image_folder):
    return shapes.image_files(make_image_folder(classes=3, per_class=6, size=(40, 52)))


def assert_same(ours, theirs, atol=ATOL):
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for a, b in zip(ours, theirs):
        assert a[0].shape == b[0].shape, (a[0].shape, b[0].shape)
        assert torch.equal(a[1], b[1]), (a[1], b[1])
        assert torch.allclose(a[0], b[0], atol=atol), (a[0] - b[0]).abs().max()


def epochs(dataset, change, *, num_workers=0, epochs=3, batch_size=4, shuffle_seed=None, atol=ATOL, **kwargs):
    """Both loaders over `dataset`, `change(dataset, epoch)` before each epoch: each epoch's
    batches are the same (shuffled by a generator of each loader's own from `shuffle_seed`).
    Returns fastload's loader."""
    def shuffled():
        return {} if shuffle_seed is None else dict(shuffle=True, generator=torch.Generator().manual_seed(shuffle_seed))

    ours = fastload.DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, **shuffled(), **kwargs)
    assert ours.path.startswith(("native: ", "hybrid: ")), ours.path
    theirs = TorchLoader(dataset, batch_size=batch_size, num_workers=num_workers, **shuffled(), **kwargs)
    for epoch in range(epochs):
        change(dataset, epoch)
        assert len(ours) == len(theirs)
        assert_same(ours, theirs, atol)
    return ours


WORKERS = pytest.mark.parametrize("num_workers", [0, 2])


@needs_ops
@WORKERS
def test_a_curriculum_that_picks_another_transform_each_epoch(files, num_workers):
    def change(dataset, epoch):
        dataset.epoch = epoch

    loader = epochs(shapes.Curriculum(files), change, num_workers=num_workers)
    assert "[Resize -> CenterCrop" in loader.path


@needs_ops
@WORKERS
def test_pseudo_labels_replaced_between_epochs(files, num_workers):
    def change(dataset, epoch):
        dataset.targets = [(t + epoch * 3) % 11 for t in dataset.targets]

    epochs(shapes.Photos(files), change, num_workers=num_workers)


@needs_ops
@WORKERS
def test_files_resampled_each_epoch_after_the_loader_is_built(files, num_workers):
    def change(dataset, epoch):
        dataset.resample(epoch)

    epochs(shapes.Resampled(files, 10), change, num_workers=num_workers, shuffle_seed=3)


@needs_ops
@WORKERS
def test_a_length_that_changes_between_epochs(files, num_workers):
    def change(dataset, epoch):
        n = [12, 7, 25][epoch]  # (shorter, then longer than when the loader was built)
        dataset.files = [files[(i + epoch) % len(files)] for i in range(n)]
        dataset.targets = [i % 5 for i in range(n)]

    epochs(shapes.Photos(files[:12]), change, num_workers=num_workers)


@needs_ops
@WORKERS
def test_a_transform_replaced_between_epochs(files, num_workers):
    """Progressive resizing / FixRes: `dataset.transform = ...`."""
    def change(dataset, epoch):
        dataset.transform = shapes.eval_transform([24, 32, 20][epoch])

    epochs(shapes.Photos(files), change, num_workers=num_workers)


@needs_ops
@WORKERS
def test_a_transform_changed_in_place(files, num_workers):
    transform = shapes.eval_transform(24)

    def change(dataset, epoch):
        resize, crop = transform.transforms[0], transform.transforms[1]
        resize.size = [24 + 8 * epoch + 8]
        crop.size = (24 + 8 * epoch, 20 + 8 * epoch)

    epochs(shapes.Photos(files, transform), change, num_workers=num_workers)


@needs_ops
@WORKERS
@pytest.mark.parametrize("wrap", ["traced", "imagefolder"])
def test_a_python_tail_changed_in_place(files, num_workers, wrap):
    """A hybrid pipeline: the tail runs in worker processes with num_workers (copies forked
    anew each epoch, as torch's workers are), inline without."""
    from torchvision.datasets import ImageFolder

    scale = shapes.Scale(1.0)
    if wrap == "traced":
        dataset = shapes.Photos(files, shapes.tail_transform(scale))
    else:
        dataset = ImageFolder(os.path.dirname(os.path.dirname(files[0])), transform=shapes.tail_transform(scale))

    def change(dataset, epoch):
        scale.factor = 1.0 + epoch

    loader = epochs(dataset, change, num_workers=num_workers, atol=3 * ATOL)  # (the rounding, scaled up to 3x)
    assert loader.path.startswith("hybrid: native [Resize -> CenterCrop -> ToDtype] + python [Scale]"), loader.path


@needs_ops
@WORKERS
def test_an_evaluation_pass_with_the_same_loader(files, num_workers):
    dataset = shapes.TrainOrEval(files)
    ours = fastload.DataLoader(dataset, batch_size=4, num_workers=num_workers)
    theirs = TorchLoader(dataset, batch_size=4, num_workers=num_workers)
    for _ in range(2):
        dataset.train = True
        for a, b in zip(ours, theirs, strict=True):  # random: only what the batch is
            assert a[0].shape == b[0].shape and torch.equal(a[1], b[1])
        dataset.train = False
        assert_same(ours, theirs)


@needs_ops
def test_a_torchvision_imagefolder_whose_transform_changes(files):
    from torchvision.datasets import ImageFolder

    dataset = ImageFolder(os.path.dirname(os.path.dirname(files[0])), transform=shapes.eval_transform(24))

    def change(dataset, epoch):
        if epoch == 1:
            dataset.transform = shapes.eval_transform(32)
        if epoch == 2:
            dataset.transform.transforms[1].size = (16, 16)
            dataset.samples = dataset.samples[:9]

    loader = epochs(dataset, change)
    assert loader.path.startswith("native: torchvision ImageFolder"), loader.path


@needs_ops
def test_persistent_workers_keep_the_first_epochs_dataset_as_torchs_do(files):
    """torch's persistent workers keep their copy of the dataset from the first iter():
    a later change of the loop's object is not seen, by torch's loader nor by fastload's."""
    def change(dataset, epoch):
        dataset.epoch = epoch

    loader = epochs(shapes.Curriculum(files), change, num_workers=2, persistent_workers=True)
    assert next(iter(loader))[0].shape[-1] == 24


# ---- what the calls leave, where they run ----------------------------------------------------


@needs_ops
@WORKERS
def test_building_the_loader_calls_nothing_and_each_epoch_calls_each_index_once(files, num_workers):
    dataset = shapes.Photos(files)
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=num_workers,
                                 generator=torch.Generator().manual_seed(5))
    assert loader.path.startswith("native: traced Photos.__getitem__"), loader.path
    assert (dataset.calls, dataset.served) == (0, [])
    theirs = shapes.Photos(files)
    torch_loader = TorchLoader(theirs, batch_size=4, shuffle=True, num_workers=num_workers,
                               generator=torch.Generator().manual_seed(5))
    for epoch in range(2):
        list(loader), list(torch_loader)
        # num_workers=0: each index once per epoch in this process, in torch's order;
        # with workers, torch's calls change the workers' copies only, and so do fastload's
        assert (dataset.calls, dataset.served) == (theirs.calls, theirs.served), epoch


@needs_ops
@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("shape", ["labels", "images"])
def test_a_zip_opened_lazily_in_getitem_works_as_under_torch(files, tmp_path, num_workers, persistent, shape):
    archive = str(tmp_path / "data.zip")
    shapes.write_archive(archive, files)
    make = shapes.ZippedLabels if shape == "labels" else shapes.ZippedImages
    dataset = make(files, archive)
    loader = epochs(dataset, lambda d, e: None, num_workers=num_workers, persistent_workers=persistent) \
        if shape == "labels" else None
    if loader is None:  # the image from an archive member: not a file the engine reads, generic
        loader = fastload.DataLoader(dataset, batch_size=4, num_workers=num_workers, persistent_workers=persistent)
        assert loader.path.startswith("generic: "), loader.path
        for _ in range(2):
            assert_same(loader, TorchLoader(dataset, batch_size=4, num_workers=num_workers))
    # as under torch: the loop's object opens no handle unless its own process made the calls
    assert (dataset.zf is None) == (num_workers > 0)


def test_a_dataset_that_waits_for_its_workers_does_not_hang_the_loader(monkeypatch):
    """torch's SynchronizedSeedDataset: __getitem__ waits until every worker called it.
    The tracer's probe (in the loop's process) is given up; the loader runs it as torch does."""
    monkeypatch.setenv("FASTLOAD_TRACE_TIMEOUT", "1")
    context = multiprocessing.get_context("fork")
    dataset = shapes.WaitsForWorkers(8, 4, context)
    start = time.monotonic()
    loader = fastload.DataLoader(dataset, batch_size=1, num_workers=4, multiprocessing_context=context)
    assert time.monotonic() - start < 60
    assert loader.path.startswith("generic: "), loader.path
    seeds = [int(s) for s in loader]
    assert len(set(seeds)) == 4, seeds  # one seed per worker, each worker's own


@pytest.mark.parametrize("how, why", [("segfault", "killed its process by signal SIGSEGV"),
                                      ("exit", "ended its process (exit code 3)")])
def test_a_getitem_that_kills_its_process_kills_a_worker_not_the_loop(how, why):
    """torch's test_segfault: building the loader must not run it in the loop's process;
    torch's loader then reports the dead worker, and so does fastload's (its generic path)."""
    loader = fastload.DataLoader(shapes.Crashes(4, how), batch_size=1, num_workers=2)
    assert loader.path.startswith(f"generic: Crashes.__getitem__ (traced, index 0): {why}, run apart"), loader.path
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid.*\) exited unexpectedly"):
        next(iter(loader))


@needs_ops
def test_a_dataset_that_needs_worker_info_runs_in_workers(files):
    dataset = shapes.NeedsWorkerInfo(files)
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2)
    assert loader.path.startswith("generic: "), loader.path
    assert_same(loader, TorchLoader(dataset, batch_size=4, num_workers=2))


# ---- fallbacks and errors -------------------------------------------------------------------


@needs_ops
@WORKERS
def test_every_other_sample_falling_back_gives_torchs_batches(files, num_workers):
    dataset = shapes.EveryOtherFallsBack(files)
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=num_workers)
    assert loader.path.startswith("native: traced EveryOtherFallsBack.__getitem__"), loader.path
    for _ in range(2):
        with pytest.warns(UserWarning, match="runs through its own __getitem__"):
            ours = list(loader)
        assert_same(ours, TorchLoader(dataset, batch_size=4, num_workers=num_workers))
        assert sorted(loader.stats()["native"]["traced"]["fallbacks"]) == list(range(1, len(dataset), 2))


@needs_ops
def test_samples_that_cannot_be_stacked_are_named_with_their_shapes(files):
    dataset = shapes.OddSizes(files)
    with pytest.raises(RuntimeError, match="stack"):
        list(TorchLoader(dataset, batch_size=4))
    loader = fastload.DataLoader(dataset, batch_size=4)
    with pytest.raises(RuntimeError) as caught, pytest.warns(UserWarning):
        list(loader)
    message = str(caught.value)
    assert "cannot stack the batch: OddSizes[13]" in message and "(3, 16, 16)" in message \
        and "(3, 24, 24)" in message, message
    assert "torch's" not in message and "default_collate" not in message, message  # (fastload's doing, not torch's)
