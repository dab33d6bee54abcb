"""Samples a traced dataset cannot have made by the engine, made by its own `__getitem__` in worker processes.

A traced index whose trace disagrees with the epoch's pipeline (fastload/trace/
lazy.py) is made by the dataset's own `__getitem__`. With `num_workers=0` torch
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

import math
import multiprocessing
import random
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload.augment.split import MAX_DEPTH

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


def _make(indexes: List[int]) -> Tuple[List[Any], torch.Tensor]:
    """The samples of `indexes`, their plain CPU tensors moved into one shared-memory byte
    buffer: torch passes a shared tensor between processes as one file descriptor, so one
    buffer per chunk costs one (one per tensor costs ~1.6 ms per 3x224x224 image, more
    than making it; pickling the bytes through the pipe costs more still)."""
    tensors: List[torch.Tensor] = []
    samples = [_pack(_DATASET[i], tensors) for i in indexes]
    offsets, total = [], 0
    for tensor in tensors:
        offsets.append(total)
        total += -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN
    buffer = torch.empty(total, dtype=torch.uint8).share_memory_()
    for tensor, offset in zip(tensors, offsets):
        size = tensor.numel() * tensor.element_size()
        buffer[offset:offset + size].copy_(tensor.contiguous().reshape(-1).view(torch.uint8))
    return [_placed(sample, offsets) for sample in samples], buffer


# Each tensor's bytes start at a multiple of this in the buffer (any dtype's alignment).
_ALIGN = 64


class _Slice:
    """A plain CPU tensor in transit: the k-th in its chunk's buffer (offset set later)."""

    __slots__ = ("k", "offset", "dtype", "shape")

    def __init__(self, k: int, dtype: torch.dtype, shape: Tuple[int, ...]):
        self.k, self.offset, self.dtype, self.shape = k, 0, dtype, shape

    def __reduce__(self) -> Any:
        return _slice, (self.k, self.offset, self.dtype, self.shape)

    def tensor(self, buffer: torch.Tensor) -> torch.Tensor:
        size = math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()
        return buffer[self.offset:self.offset + size].view(self.dtype).reshape(self.shape)


def _slice(k: int, offset: int, dtype: torch.dtype, shape: Tuple[int, ...]) -> _Slice:
    out = _Slice(k, dtype, shape)
    out.offset = offset
    return out


def _walk(value: Any, leaf: Any, depth: int = 0) -> Any:
    """`value` (tuples, lists, dicts) with `leaf(x)` in place of each x for which it is not None."""
    replaced = leaf(value)
    if replaced is not None:
        return replaced
    kind = type(value)
    if depth > MAX_DEPTH:
        return value
    if kind is tuple or kind is list:
        return kind(_walk(v, leaf, depth + 1) for v in value)
    if kind is dict:
        return {k: _walk(v, leaf, depth + 1) for k, v in value.items()}
    return value


def _pack(sample: Any, tensors: List[torch.Tensor]) -> Any:
    def leaf(x: Any) -> Any:
        if type(x) is torch.Tensor and x.device.type == "cpu" and not x.requires_grad and x.layout == torch.strided:
            tensors.append(x)
            return _Slice(len(tensors) - 1, x.dtype, tuple(x.shape))
        return None

    return _walk(sample, leaf)


def _placed(sample: Any, offsets: List[int]) -> Any:
    def leaf(x: Any) -> Any:
        if type(x) is _Slice:
            x.offset = offsets[x.k]
            return x
        return None

    return _walk(sample, leaf)


def _unpack(sample: Any, buffer: torch.Tensor) -> Any:
    return _walk(sample, lambda x: x.tensor(buffer) if type(x) is _Slice else None)


class _Part:
    """One sample of a chunk made by one worker: a future's way to it."""

    __slots__ = ("chunk", "position")

    def __init__(self, chunk: "_Chunk", position: int):
        self.chunk, self.position = chunk, position

    def result(self) -> Any:
        return self.chunk.samples()[self.position]


class _Chunk:
    """A worker's chunk of samples, unpickled once when the first of them is asked for."""

    __slots__ = ("future", "_samples")

    def __init__(self, future: "Future[Tuple[List[Any], torch.Tensor]]"):
        self.future, self._samples = future, None

    def samples(self) -> List[Any]:
        if self._samples is None:
            samples, buffer = self.future.result()
            self._samples = [_unpack(sample, buffer) for sample in samples]
        return self._samples


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

    def start(self, indexes: Sequence[int]) -> Dict[int, Any]:
        """Starts making each index's sample: {index: an object whose result() is
        dataset[index]}. The indexes go to the workers in one chunk each (one message
        each way per worker, not per sample)."""
        if self._executor is None:
            context = multiprocessing.get_context("fork")
            self._executor = ProcessPoolExecutor(
                self._workers, mp_context=context, initializer=_start_worker,
                initargs=(self._dataset, self._base_seed, context.Value("i", 0)))
            # Stopped at interpreter exit too, before the modules it needs are torn down (else
            # the executor's own callbacks print "Exception ignored" tracebacks).
            self._stop = weakref.finalize(self, _stop, self._executor)
        todo = [int(i) for i in dict.fromkeys(indexes)]
        chunks = [todo[k::self._workers] for k in range(min(self._workers, len(todo)))]
        out: Dict[int, Any] = {}
        for chunk in chunks:
            made = _Chunk(self._executor.submit(_make, chunk))
            out.update({i: _Part(made, position) for position, i in enumerate(chunk)})
        return out

    def close(self) -> None:
        """Stops the worker processes (the next `start` forks new ones)."""
        if self._executor is not None:
            self._stop()
            self._executor = None


def _stop(executor: ProcessPoolExecutor) -> None:
    executor.shutdown(wait=True, cancel_futures=True)
