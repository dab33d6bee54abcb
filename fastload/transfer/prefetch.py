"""DevicePrefetcher: host batches in, device batches out, N batches ahead.

The mechanism, one batch at a time:

1. pin: every CPU tensor of the batch that is not page-locked yet is copied into a block
   of the PinnedPool (already pinned tensors, e.g. from torch's pin-memory thread or the
   native engine, are used as they are);
2. copy: the transport issues the host-to-device copies (and the dtype/memory-format
   conversion) on its side stream and records an event after them; the pool blocks are
   released *with that event*, so none is rewritten before its copy completed;
3. deliver: when the training loop asks for the batch, the consumer's current stream waits
   on the event (no host synchronisation), and every output tensor is `record_stream`-ed
   on the consumer stream, so the caching allocator does not recycle its memory for the
   side stream while the loop's kernels may still read it;
4. retire: host tensors stay referenced until their event reports done.

Copies are issued `ahead` batches before they are needed: while the loop computes on
batch k, the copies of the next batches run on the side stream. What the device does
(streams, events, pinned allocation) is behind the small `Transport` interface, so all of
the above is tested on CPU with a fake transport that records its calls.

Example (CPU, with the identity transport that `make_transport("cpu")` returns):
    >>> import torch
    >>> from fastload.transfer import DevicePrefetcher, make_convert, make_transport
    >>> source = iter([(torch.arange(3), "b0"), (torch.arange(3, 6), "b1")])
    >>> pf = DevicePrefetcher(source, make_transport("cpu"), ahead=2,
    ...                       convert=make_convert(torch.float16, None))
    >>> [(b.tolist(), b.dtype, tag) for b, tag in pf]
    [([0, 1, 2], torch.int64, 'b0'), ([3, 4, 5], torch.int64, 'b1')]
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Deque, Iterator, List, Optional, Protocol, Tuple

import torch
from torch.profiler import record_function

from fastload.transfer.pool import PinnedPool
from fastload.transfer.tree import tree_map, tree_tensors

# 4-D and 5-D layouts apply to tensors of that rank only; a batch also holds labels etc.
_FORMAT_DIMS = {torch.channels_last: 4, torch.channels_last_3d: 5}


class Transport(Protocol):
    """What the prefetcher needs from a device. CudaTransport is the real one."""

    device: torch.device

    def alloc_pinned(self, nbytes: int) -> torch.Tensor:
        """A 1-D uint8 page-locked host tensor of nbytes."""

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """True if `tensor` is already page-locked host memory."""

    def copy(self, batch: Any, convert: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> Tuple[Any, Any]:
        """Issues the async copies of every tensor of `batch` (pinned) to the device, then
        `convert` on each, all on the side stream; returns (device batch, event recorded
        after them)."""

    def wait(self, event: Any) -> None:
        """Makes the consumer's current stream wait on `event` (no host sync)."""

    def record_stream(self, tensor: torch.Tensor) -> None:
        """Marks `tensor` as used by the consumer's current stream."""

    def query(self, event: Any) -> bool:
        """True if the work before `event` completed."""

    def synchronize(self, event: Any) -> None:
        """Blocks the host until `event` completed."""

    def elapsed_s(self, event: Any) -> Optional[float]:
        """Device time of the copy behind a completed `event`, or None if not measured."""


def make_convert(dtype: Optional[torch.dtype], memory_format: Optional[torch.memory_format]
                 ) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The per-tensor conversion the loader applies on the device, or None for none.

    Args:
        dtype: floating tensors become this dtype (e.g. torch.bfloat16 for AMP); integer
            and bool tensors (labels, masks, uint8 images) keep theirs, and so do
            torchvision's BoundingBoxes and KeyPoints (pixel coordinates: in bfloat16 a box
            edge at x = 1000 moves by up to 4 px).
        memory_format: torch.channels_last applies to 4-D tensors, channels_last_3d to 5-D,
            contiguous_format to every tensor; other ranks are left as they are.

    Example:
        >>> f = make_convert(torch.bfloat16, torch.channels_last)
        >>> y = f(torch.zeros(2, 3, 4, 5)); y.dtype, y.is_contiguous(memory_format=torch.channels_last)
        (torch.bfloat16, True)
        >>> f(torch.zeros(2, dtype=torch.int64)).dtype
        torch.int64
        >>> from torchvision import tv_tensors
        >>> f(tv_tensors.BoundingBoxes([[0.5, 1, 999.5, 20]], format="XYXY", canvas_size=(30, 1000))).dtype
        torch.float32
    """
    if dtype is None and memory_format in (None, torch.preserve_format):
        return None
    dims = _FORMAT_DIMS.get(memory_format) if memory_format is not None else None

    def convert(t: torch.Tensor) -> torch.Tensor:
        if dtype is not None and t.is_floating_point() and t.dtype != dtype and not _coordinates(t):
            t = t.to(dtype)
        if memory_format not in (None, torch.preserve_format) and (dims is None or t.dim() == dims):
            t = t.contiguous(memory_format=memory_format)
        return t

    return convert


def _coordinates(t: torch.Tensor) -> bool:
    """A torchvision tv_tensor of pixel coordinates (BoundingBoxes, KeyPoints), known by its
    class so that torchvision is not imported here."""
    cls = type(t)
    return cls is not torch.Tensor and cls.__name__ in ("BoundingBoxes", "KeyPoints") and \
        cls.__module__.startswith("torchvision.")


class _Entry:
    __slots__ = ("out", "tag", "event", "host")

    def __init__(self, out: Any, tag: Any, event: Any, host: Any):
        self.out, self.tag, self.event, self.host = out, tag, event, host


class _Failed:
    """An exception from the source, raised when the loop reaches its place in order."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class DevicePrefetcher:
    """Iterates `(device_batch, tag)` for each `(host_batch, tag)` of `source`.

    Args:
        source: iterator of (batch, tag) pairs; batch is any nesting of tensors (see
            tree.py), tag is passed through untouched (the loader's per-batch record).
        transport: the device, see Transport.
        ahead: batches whose copies are issued before the loop asks for them (>= 1); the
            device holds at most `ahead` prefetched batches plus the one in use.
        pool: where unpinned tensors are staged (default: a new PinnedPool on transport).
        convert: per-tensor conversion on the side stream after the copy (make_convert).
        stats: optional object with add_time(stage, seconds) for "pin", "transfer"
            (host time to stage and issue) and "copy" (device time, when measured).

    An exception from `source` is raised by the __next__ that reaches its position, after
    the batches before it were delivered, as torch's DataLoader would raise it; iterating
    may continue afterwards if the source can.
    """

    def __init__(self, source: Iterator[Tuple[Any, Any]], transport: Transport, *, ahead: int = 2,
                 pool: Optional[PinnedPool] = None,
                 convert: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, stats: Any = None):
        if not isinstance(ahead, int) or isinstance(ahead, bool) or ahead < 1:
            raise ValueError(f"fastload.DevicePrefetcher: expected ahead >= 1, got {ahead!r}.")
        self._source = source
        self.transport = transport
        self.ahead = ahead
        self.pool = pool if pool is not None else PinnedPool(transport)
        self.convert = convert
        self._stats = stats
        self._inflight: Deque[Any] = collections.deque()
        self._retiring: Deque[_Entry] = collections.deque()
        self._source_done = False

    def __iter__(self) -> "DevicePrefetcher":
        return self

    def __next__(self) -> Tuple[Any, Any]:
        self._retire()
        while len(self._inflight) < self.ahead and not self._source_done:
            try:
                item = next(self._source)
            except StopIteration:
                self._source_done = True
                break
            except Exception as error:  # noqa: BLE001 - re-raised in order below
                self._inflight.append(_Failed(error))
                break
            self._inflight.append(self._issue(item))
        if not self._inflight:
            self.close()
            raise StopIteration
        entry = self._inflight.popleft()
        if isinstance(entry, _Failed):
            raise entry.error
        self.transport.wait(entry.event)
        for t in tree_tensors(entry.out):
            self.transport.record_stream(t)
        self._retiring.append(entry)
        return entry.out, entry.tag

    def _issue(self, item: Tuple[Any, Any]) -> _Entry:
        batch, tag = item
        staged: List[torch.Tensor] = []

        def to_pinned(t: torch.Tensor) -> torch.Tensor:
            if t.device.type != "cpu" or t.numel() == 0 or self.transport.is_pinned(t):
                return t
            buf = self.pool.acquire(t.shape, t.dtype)
            buf.copy_(t)
            staged.append(buf)
            return buf

        start = time.perf_counter()
        with record_function("fastload.pin"):
            pinned = tree_map(to_pinned, batch)
        issued = time.perf_counter()
        with record_function("fastload.transfer"):
            out, event = self.transport.copy(pinned, self.convert)
        for buf in staged:
            self.pool.release(buf, event)
        if self._stats is not None:
            if staged:
                self._stats.add_time("pin", issued - start)
            self._stats.add_time("transfer", time.perf_counter() - issued)
        return _Entry(out, tag, event, pinned)

    def _retire(self) -> None:
        # Copies complete in issue order (one side stream): checking the oldest suffices.
        while self._retiring and self.transport.query(self._retiring[0].event):
            entry = self._retiring.popleft()
            self._account(entry)

    def _account(self, entry: _Entry) -> None:
        seconds = self.transport.elapsed_s(entry.event)
        if seconds is not None and self._stats is not None:
            self._stats.add_time("copy", seconds)

    def close(self) -> None:
        """Waits for the copies still reading host memory, then drops every reference."""
        for entry in list(self._retiring) + [e for e in self._inflight if isinstance(e, _Entry)]:
            self.transport.synchronize(entry.event)
        while self._retiring:
            self._account(self._retiring.popleft())
        self._inflight.clear()
        self._source_done = True
