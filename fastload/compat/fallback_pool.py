"""Samples a traced dataset cannot have made by the engine, made by its own `__getitem__` in worker processes.

A traced index whose trace disagrees with the epoch's pipeline (fastload/compat/
trace_lazy.py) is made by the dataset's own `__getitem__`. With `num_workers=0` torch
makes every sample in the loop's process, one after another, and so does fastload. With
worker processes torch makes them in parallel, in copies of the dataset forked when the
epoch starts; `FallbackPool` does the same for the samples that fall back: `num_workers`
processes, forked when the epoch's first fallback comes (the dataset as it is then; the
loop's own object never sees their calls), seeded as torch seeds its workers (`random`,
torch and numpy from one base seed plus the worker's number, so random transforms draw
different numbers in each). A batch's fallbacks start when the batch is submitted and
are collected when it is taken, so they are made while the engine decodes.

Example:
    >>> import torch
    >>> pool = FallbackPool(torch.utils.data.TensorDataset(torch.arange(10) * 2), workers=2, base_seed=0)
    >>> made = pool.start([3, 7]); [made[i].result()[0].item() for i in (3, 7)]
    [6, 14]
    >>> pool.close()
"""

from __future__ import annotations

import multiprocessing
import random
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch

# The dataset of this worker process (set when it starts; inherited through fork).
_DATASET: Any = None


def _start_worker(dataset: Any, base_seed: int, counter: Any) -> None:
    global _DATASET
    _DATASET = dataset
    with counter.get_lock():
        worker_id = counter.value
        counter.value += 1
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    torch.set_num_threads(1)  # (as torch's workers: one process per core, not one pool of threads each)


def _make(index: int) -> Any:
    return _DATASET[index]


class FallbackPool:
    """`workers` forked processes making `dataset[i]` for the indexes given to `start`.

    Args:
        dataset: the map-style dataset (each worker's copy forked from it).
        workers: how many processes (the loader's num_workers).
        base_seed: worker k seeds its generators with base_seed + k.
    """

    def __init__(self, dataset: Any, *, workers: int, base_seed: int):
        self._dataset, self._workers, self._base_seed = dataset, max(1, int(workers)), int(base_seed)
        self._executor: Optional[ProcessPoolExecutor] = None

    def start(self, indexes: Sequence[int]) -> Dict[int, "Future[Any]"]:
        """Starts making each index's sample: {index: future of dataset[index]}."""
        if self._executor is None:
            context = multiprocessing.get_context("fork")
            self._executor = ProcessPoolExecutor(
                self._workers, mp_context=context, initializer=_start_worker,
                initargs=(self._dataset, self._base_seed, context.Value("i", 0)))
        return {int(i): self._executor.submit(_make, int(i)) for i in dict.fromkeys(indexes)}

    def close(self) -> None:
        """Stops the worker processes (the next `start` forks new ones)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
