"""BatchBuffers: the memory of pageable batch tensors, reused once nobody holds it.

A 128x3x224x224 float32 batch is 77 MB: allocating it afresh costs its page faults on
every batch, about a fifth of the native path's CPU time. Buffers are numpy arrays; a
batch is a view of one, and every tensor, view or storage made from it holds one
reference to the array, so the array is free exactly when its refcount falls back to the
pool's own. Pinned batches come from torch's caching host allocator instead (it already
reuses page-locked blocks), and the transfer stage's own staging from PinnedPool.

Example:
    >>> import torch
    >>> from fastload.transfer.buffers import BatchBuffers
    >>> buffers = BatchBuffers(capacity=2)
    >>> a = buffers.take((2, 3, 4, 4), torch.float32, torch.channels_last)
    >>> a.is_contiguous(memory_format=torch.channels_last), a.dtype
    (True, torch.float32)
    >>> address = a.data_ptr(); del a   # nobody holds it any more
    >>> buffers.take((2, 3, 4, 4), torch.float32, torch.contiguous_format).data_ptr() == address
    True
"""

from __future__ import annotations

import sys
from typing import List, Tuple

import numpy as np
import torch


def _layout(shape: Tuple[int, ...], dtype: torch.dtype,
            memory_format: torch.memory_format) -> Tuple[Tuple[int, ...], int]:
    """The strides of a tensor of `shape` in `memory_format`, and its size in bytes."""
    strides = torch.empty(shape, dtype=dtype, memory_format=memory_format, device="meta").stride()
    return strides, int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()


class BatchBuffers:
    """Reuses the memory of pageable batch tensors once nobody holds them any more.

    Args:
        capacity: most buffers kept; beyond it batches are plain allocations.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._buffers: List[np.ndarray] = []

    def take(self, shape: Tuple[int, ...], dtype: torch.dtype, memory_format: torch.memory_format) -> torch.Tensor:
        """An uninitialised tensor of `shape`, `dtype` and `memory_format`, on memory no
        live tensor uses."""
        strides, nbytes = _layout(shape, dtype, memory_format)
        for buffer in self._buffers:
            # Free: referenced by this list, `buffer` and getrefcount's argument only.
            if buffer.nbytes == nbytes and sys.getrefcount(buffer) <= 3:
                return self._view(buffer, shape, strides, dtype)
        if len(self._buffers) >= self.capacity or nbytes == 0:
            return torch.empty(shape, dtype=dtype, memory_format=memory_format)
        buffer = np.empty(nbytes, dtype=np.uint8)
        self._buffers.append(buffer)
        return self._view(buffer, shape, strides, dtype)

    @staticmethod
    def _view(buffer: np.ndarray, shape, strides, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(buffer).view(dtype).as_strided(shape, strides)

    def resize(self, capacity: int) -> None:
        """Keeps at most `capacity` buffers from now on; free ones beyond it are dropped
        (busy ones are freed by their last tensor)."""
        self.capacity = capacity
        del self._buffers[capacity:]

    @property
    def kept(self) -> int:
        """Buffers held (free or busy)."""
        return len(self._buffers)

    def clear(self) -> None:
        """Forgets the buffers (tensors still using one keep it alive themselves)."""
        self._buffers.clear()


class SharedBatches:
    """BatchBuffers' interface for batches a worker process sends to its parent: each
    batch on fresh shared memory, as torch's default_collate makes it in a DataLoader
    worker. Sending a tensor on pageable memory through a multiprocessing queue copies
    it into shared memory first (torch.multiprocessing's reductions); on shared memory
    only its handle travels.

    Example:
        >>> import torch
        >>> from fastload.transfer.buffers import SharedBatches
        >>> batch = SharedBatches().take((2, 3, 4, 4), torch.float32, torch.contiguous_format)
        >>> batch.is_shared(), batch.shape
        (True, torch.Size([2, 3, 4, 4]))
    """

    @staticmethod
    def take(shape: Tuple[int, ...], dtype: torch.dtype, memory_format: torch.memory_format) -> torch.Tensor:
        """An uninitialised tensor of `shape`, `dtype` and `memory_format` on new shared memory."""
        strides, nbytes = _layout(shape, dtype, memory_format)
        storage = torch.UntypedStorage._new_shared(nbytes)
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape, strides)

    def clear(self) -> None:
        """Nothing is kept: each batch's memory is its own."""
