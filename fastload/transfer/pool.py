"""PinnedPool: page-locked host buffers, reused only after the copy that read them ended.

Pinned memory is slow to allocate (a cudaHostAlloc is a syscall plus page locking, often
milliseconds for batch-sized blocks) and a finite resource, so fastload keeps it in one
pool per loader and recycles it. The one rule that makes recycling safe: a block that fed
an asynchronous host-to-device copy may be written again only after that copy completed.
So `release(buffer, event)` returns a block *with the event recorded after its copy*, and
`acquire` hands out a free block only when its event reports done (or, when the pool is at
its byte limit, waits for the oldest one).

The event operations and the allocation come from a transport (see prefetch.Transport), so
the same logic runs on CPU in tests with a fake whose events complete when the test says.

Example (CPU, events that are always done):
    >>> import torch
    >>> from fastload.transfer.pool import PinnedPool
    >>> class Host:  # alloc_pinned/query/synchronize of a transport
    ...     def alloc_pinned(self, nbytes): return torch.empty(nbytes, dtype=torch.uint8)
    ...     def query(self, event): return True
    ...     def synchronize(self, event): pass
    >>> pool = PinnedPool(Host())
    >>> a = pool.acquire((2, 3), torch.float32); a.shape, a.dtype
    (torch.Size([2, 3]), torch.float32)
    >>> pool.release(a, event="copy-done"); b = pool.acquire((6,), torch.float32)
    >>> b.data_ptr() == a.data_ptr()   # same block, reused after its event
    True
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch


class _Block:
    __slots__ = ("storage", "nbytes", "event", "serial")

    def __init__(self, storage: torch.Tensor, serial: int):
        self.storage = storage  # 1-D uint8, pinned
        self.nbytes = storage.numel()
        self.event: Any = None  # recorded after the last copy that read this block
        self.serial = serial  # release order, to wait for the oldest first


class PinnedPool:
    """Recycles pinned host blocks behind events.

    Args:
        transport: gives `alloc_pinned(nbytes) -> uint8 tensor`, `query(event) -> bool`
            and `synchronize(event)`.
        max_bytes: cap on pinned bytes held; at the cap, acquire waits for a busy block of
            a fitting size rather than allocating (None: no cap; the loader's N-ahead
            bound already limits how many blocks can be busy at once).
        slack: a free block is reused for a request of at least nbytes / slack bytes, so
            a small last batch does not occupy (or force reallocating) a big block.
    """

    def __init__(self, transport: Any, *, max_bytes: Optional[int] = None, slack: float = 2.0):
        self._transport = transport
        self.max_bytes = max_bytes
        self.slack = slack
        self._free: List[_Block] = []
        self._out: Dict[int, _Block] = {}  # data_ptr -> block handed out by acquire
        self._serial = 0
        self.allocated_bytes = 0
        self.allocations = 0
        self.reuses = 0
        self.waits = 0

    def acquire(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A pinned tensor of `shape` and `dtype` (contiguous, contents undefined).

        The block behind it is not read by any copy still in flight.
        """
        numel = math.prod(shape)
        nbytes = max(1, numel * dtype.itemsize)
        fitting = [b for b in self._free if nbytes <= b.nbytes <= nbytes * self.slack]
        ready = [b for b in fitting if b.event is None or self._transport.query(b.event)]
        if ready:
            block = min(ready, key=lambda b: b.nbytes)
            self.reuses += 1
        elif fitting and self.max_bytes is not None and self.allocated_bytes + nbytes > self.max_bytes:
            block = min(fitting, key=lambda b: b.serial)  # the oldest copy ends first
            self._transport.synchronize(block.event)
            self.waits += 1
            self.reuses += 1
        else:
            block = _Block(self._transport.alloc_pinned(nbytes), 0)
            self.allocated_bytes += block.nbytes
            self.allocations += 1
        if block in self._free:
            self._free.remove(block)
        block.event = None
        self._out[block.storage.data_ptr()] = block
        return block.storage[: nbytes if numel else 0].view(dtype).view(tuple(shape))

    def owns(self, tensor: torch.Tensor) -> bool:
        """True if `tensor` was handed out by acquire and not yet released."""
        return tensor.data_ptr() in self._out

    def release(self, tensor: torch.Tensor, event: Any = None) -> None:
        """Gives a block back; it is handed out again only once `event` completed.

        Args:
            tensor: what acquire returned.
            event: recorded after the last copy that reads the block (None: free now).
        """
        block = self._out.pop(tensor.data_ptr(), None)
        if block is None:
            raise ValueError(
                "fastload.PinnedPool.release: expected a tensor from this pool's acquire(), got "
                "one it does not own (or released twice). Release each acquired buffer once."
            )
        self._serial += 1
        block.event, block.serial = event, self._serial
        self._free.append(block)

    def in_flight(self) -> int:
        """Free blocks whose last copy has not been observed complete (a diagnostic)."""
        return sum(1 for b in self._free if b.event is not None and not self._transport.query(b.event))

    def clear(self) -> None:
        """Drops free blocks, waiting first for copies still reading them."""
        for block in self._free:
            if block.event is not None:
                self._transport.synchronize(block.event)
        self.allocated_bytes -= sum(b.nbytes for b in self._free)
        self._free.clear()
