"""A hybrid pipeline's tail in worker processes (ProcessHybridRunner) that hangs or dies:
torch's errors (timeout, a killed worker) naming the batch, and fresh workers after."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

import fastload
from fastload import _ext

pytest.importorskip("torchvision")
from torchvision import datasets  # noqa: E402
from torchvision import transforms as T  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

SAMPLES = 8  # 2 classes x 4 images


class FailOn:
    """A Python transform that hangs or kills its own process on the image whose pixel sum
    is `marker`'s (one chosen sample), once only when `flag` names a file not there yet
    (created on the way): a later epoch then runs clean."""

    def __init__(self, how: str, marker: int, flag: str = ""):
        self.how, self.marker, self.flag = how, marker, flag

    def __call__(self, image):
        if _pixel_sum(image) == self.marker and not (self.flag and os.path.exists(self.flag)):
            if self.flag:
                open(self.flag, "w").close()
            if self.how == "hang":
                while True:
                    time.sleep(1)
            os.kill(os.getpid(), signal.SIGKILL)
        return image


def _pixel_sum(image) -> int:
    import numpy as np

    return int(np.asarray(image, dtype=np.int64).sum())


def _dataset(image_folder, tail):
    # CenterCrop: a deterministic prefix, so the chosen sample's image is known beforehand.
    return datasets.ImageFolder(image_folder, transform=T.Compose([T.Resize(32), T.CenterCrop(32), tail, T.ToTensor()]))


class Record:
    def __init__(self):
        self.sums = []

    def __call__(self, image):
        self.sums.append(_pixel_sum(image))
        return image


def _marker(image_folder, sample: int) -> int:
    """The pixel sum of `sample`'s image as the tail gets it (the engine's prefix, inline)."""
    record = Record()
    loader = fastload.DataLoader(_dataset(image_folder, record), batch_size=4, num_workers=0)
    assert loader.path.startswith("hybrid: "), loader.path
    list(loader)
    assert len(set(record.sums)) == SAMPLES  # each sample told apart by its sum
    return record.sums[sample]


def _loader(dataset, **kwargs):
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2, **kwargs)
    assert loader.path.startswith("hybrid: "), loader.path
    return loader


@pytest.mark.timeout(60)
def test_hanging_tail_in_worker_honours_timeout_on_the_runner(image_folder):
    loader = _loader(_dataset(image_folder, FailOn("hang", _marker(image_folder, 5))))
    runner = loader._runner
    runner.timeout = 2
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 2 seconds") as raised:
        list(loader)
    assert time.monotonic() - started < 40
    assert "[4, 5, 6, 7]" in str(raised.value)  # the batch waited for
    assert "worker pid" in str(raised.value)  # the stuck worker
    assert runner._pool is None  # the stuck worker was stopped with its pool


@pytest.mark.timeout(60)
def test_hanging_tail_in_worker_honours_the_loaders_timeout(image_folder, tmp_path):
    flag = str(tmp_path / "hung_once")
    dataset = _dataset(image_folder, FailOn("hang", _marker(image_folder, 5), flag=flag))
    loader = _loader(dataset, timeout=2)
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 2 seconds") as raised:
        list(loader)
    assert "[4, 5, 6, 7]" in str(raised.value)
    assert [len(labels) for _, labels in loader] == [4, 4]  # fresh workers, the next epoch runs


@pytest.mark.timeout(60)
def test_killed_tail_worker_names_pid_and_signal(image_folder):
    loader = _loader(_dataset(image_folder, FailOn("kill", _marker(image_folder, 2))))
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid \d+\) is killed by signal: Killed\.") as raised:
        list(loader)
    message = str(raised.value)
    assert "[0, 1, 2, 3]" in message  # the batch the dead worker was making
    assert "next iter(loader) starts fresh workers" in message


@pytest.mark.timeout(90)
def test_next_epoch_after_killed_worker_starts_fresh_workers(image_folder, tmp_path):
    flag = str(tmp_path / "killed_once")
    dataset = _dataset(image_folder, FailOn("kill", _marker(image_folder, 6), flag=flag))
    loader = _loader(dataset)
    with pytest.raises(RuntimeError, match="is killed by signal"):
        list(loader)
    assert os.path.exists(flag)
    batches = list(loader)
    assert [len(labels) for _, labels in batches] == [4, 4]
    expected = [dataset[i] for i in range(SAMPLES)]
    images = torch.cat([images for images, _ in batches])
    labels = torch.cat([labels for _, labels in batches])
    assert torch.equal(labels, torch.tensor([label for _, label in expected]))
    assert torch.allclose(images, torch.stack([image for image, _ in expected]), atol=1 / 255 + 1e-6)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_an_abandoned_epoch_discards_its_batches_in_flight(image_folder):
    import gc

    loader = _loader(_dataset(image_folder, Record()))
    iterator = iter(loader)
    next(iterator)  # the second batch is in flight
    del iterator
    gc.collect()
    assert loader._runner._jobs == {}
    assert [len(labels) for _, labels in loader] == [4, 4]
