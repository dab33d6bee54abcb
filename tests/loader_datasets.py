"""Small datasets for the DataLoader tests, in an importable module so that worker
processes started with "spawn" can unpickle them."""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import signal
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

Pair = collections.namedtuple("Pair", ["x", "y"])


@dataclasses.dataclass(frozen=True)
class Record:
    image: torch.Tensor
    label: torch.Tensor
    name: str = "r"


class Squares(Dataset):
    """Sample i: (float tensor [2] = (i, i*i), int label i % 3)."""

    def __init__(self, n: int = 10):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return torch.tensor([float(i), float(i * i)]), i % 3


class Images(Dataset):
    """Sample i: {"image": uint8 [3, 4, 5], "x": float [3, 4, 5], "label": i}."""

    def __init__(self, n: int = 8):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 4, 5, generator=g)
        return {"image": (x * 255).to(torch.uint8), "x": x, "label": i}


class Structured(Dataset):
    """Samples whose batches (with the identity-ish collate below) are namedtuples/dataclasses."""

    def __init__(self, n: int = 6):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return i


def collate_structured(indices):
    t = torch.tensor(indices, dtype=torch.float32)
    return {"pair": Pair(t, t.long()), "record": Record(t.view(-1, 1, 1, 1).expand(-1, 3, 2, 2).contiguous(),
                                                          t.long()), "tag": "batch"}


class RandomInWorker(Dataset):
    """Sample i: a draw from torch's global RNG, i.e. it depends on the worker's seed."""

    def __init__(self, n: int = 8):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.rand(1), i


class WorkerId(Dataset):
    """Sample i: (i, the id of the worker that read it, a value worker_init_fn set)."""

    def __init__(self, n: int = 8):
        self.n = n
        self.init_value = -1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        info = get_worker_info()
        same = info is None or info.dataset is self
        return torch.tensor([i, -1 if info is None else info.id, self.init_value, int(same)])


def set_init_value(worker_id: int) -> None:
    """worker_init_fn: marks the worker's dataset copy (through get_worker_info)."""
    get_worker_info().dataset.init_value = 100 + worker_id


class RangeIterable(IterableDataset):
    """range(start, end), split across workers with get_worker_info (torch's docs pattern)."""

    def __init__(self, start: int = 0, end: int = 11):
        self.start, self.end = start, end

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            lo, hi = self.start, self.end
        else:
            per = int(math.ceil((self.end - self.start) / float(info.num_workers)))
            lo = self.start + info.id * per
            hi = min(lo + per, self.end)
        return iter(torch.tensor([v]) for v in range(lo, hi))


class ConfiguredIterable(IterableDataset):
    """Yields range(start, end) where worker_init_fn sets start/end on the worker's copy."""

    def __init__(self, start: int = 0, end: int = 10):
        self.start, self.end = start, end

    def __iter__(self):
        return iter(range(self.start, self.end))


def split_configured(worker_id: int) -> None:
    """worker_init_fn of torch's docs: reconfigure get_worker_info().dataset per worker."""
    info = get_worker_info()
    ds = info.dataset
    total = ds.end - ds.start
    per = int(math.ceil(total / float(info.num_workers)))
    ds.start = ds.start + worker_id * per
    ds.end = min(ds.start + per, ds.end)


class Sleepy(Dataset):
    """Each __getitem__ sleeps `seconds`."""

    def __init__(self, n: int = 8, seconds: float = 0.02):
        self.n, self.seconds = n, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.seconds)
        return torch.tensor([i])


class Failing(Dataset):
    """Raises `error(message)` for the samples in `bad`."""

    def __init__(self, n: int = 10, bad=(7,), error=ValueError, message="bad sample"):
        self.n, self.bad, self.error, self.message = n, set(bad), error, message

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i in self.bad:
            raise self.error(self.message)
        return torch.tensor([i])


class Killer(Dataset):
    """Kills its own (worker) process with SIGKILL at sample `victim`."""

    def __init__(self, n: int = 8, victim: int = 3):
        self.n, self.victim = n, victim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.victim and get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([i])


class Stuck(Dataset):
    """Sample `slow` takes `seconds`, the others are immediate."""

    def __init__(self, n: int = 4, slow: int = 1, seconds: float = 5.0):
        self.n, self.slow, self.seconds = n, slow, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.slow:
            time.sleep(self.seconds)
        return torch.tensor([i])


class NoLen(Dataset):
    """A map-style dataset without __len__ (only a sampler can order it)."""

    def __getitem__(self, i: int):
        return torch.tensor([i])


class BatchFetch(Dataset):
    """A dataset with __getitems__ (batched reads), like torch's Subset/StackDataset."""

    def __init__(self, n: int = 9):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.tensor([i])

    def __getitems__(self, indices):
        if 5 in indices:
            raise KeyError("no five")
        return [torch.tensor([i * 10]) for i in indices]


class NeedsTwo(Exception):
    """An exception torch cannot rebuild from a message alone (it re-raises RuntimeError)."""

    def __init__(self, message, code):
        super().__init__(message, code)


class FailingTwo(Failing):
    def __getitem__(self, i: int):
        if i in self.bad:
            raise NeedsTwo(self.message, 2)
        return torch.tensor([i])
