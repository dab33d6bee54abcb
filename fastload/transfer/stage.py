"""A loader's transfer stage: what every batch of a feed goes through before the loop gets it.

`TransferStage` is made once per loader and wraps each pass's feed (an iterator of
`(batch, tag)` pairs) by the loader's device, dtype, memory_format and
prefetch_to_device as they are at that iter():

- a device other than the CPU: the `DevicePrefetcher`, over the loader's one transport
  and pinned pool (the loader asks for them when it is built, so an absent device fails
  then, not at its first batch);
- the CPU with a dtype or memory_format: `HostConvert`, the conversion in the
  consumer's thread;
- else the feed itself.

Example:
    >>> import torch
    >>> from fastload.stats import LoaderStats
    >>> stage = TransferStage(LoaderStats())
    >>> feed = stage.wrap(iter([(torch.ones(2), "tag")]), device=None, dtype=torch.float16,
    ...                   memory_format=None, ahead=2)
    >>> batch, tag = next(feed)
    >>> batch.dtype, tag
    (torch.float16, 'tag')
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Optional, Tuple

import torch
from torch.profiler import record_function

from fastload.stats import LoaderStats


class HostConvert:
    """dtype/memory_format on the CPU, for device=None or "cpu": each batch of `source`
    converted by `convert` (fastload.transfer.make_convert), its time counted as transfer."""

    def __init__(self, source: Iterator[Tuple[Any, Any]], convert: Callable, stats: LoaderStats):
        self._source, self._convert, self._stats = source, convert, stats

    def __iter__(self) -> "HostConvert":
        return self

    def __next__(self) -> Tuple[Any, Any]:
        from fastload.transfer.tree import tree_map

        batch, tag = next(self._source)
        start = time.perf_counter()
        with record_function("fastload.transfer"):
            batch = tree_map(self._convert, batch)
        self._stats.add_time("transfer", time.perf_counter() - start)
        return batch, tag


class TransferStage:
    """One loader's transfer stage (see the module's docstring): its counters, and its
    device's transport and pinned pool once a device asked for them. The device, dtype,
    memory_format and prefetch depth are the loader's, read at each wrap()."""

    def __init__(self, stats: LoaderStats):
        self._stats = stats
        self._transport: Any = None
        self._pool: Any = None

    def device_transport(self, device: torch.device) -> Tuple[Any, Any]:
        """(the transport, the pinned pool) of `device`, made at the first call (the loader
        calls it when it is built, so an absent device fails then, not at its first batch)."""
        if self._transport is None:
            # Read from the package at call time: tests substitute make_transport there.
            import fastload.transfer as transfer

            self._transport = transfer.make_transport(device)
            self._pool = transfer.PinnedPool(self._transport)
        return self._transport, self._pool

    def wrap(self, feed: Iterator[Tuple[Any, Any]], *, device: Optional[torch.device], dtype: Optional[torch.dtype],
             memory_format: Optional[torch.memory_format], ahead: int) -> Iterator[Tuple[Any, Any]]:
        """The feed's batches through the stage: on `device` (the prefetcher issues `ahead`
        copies before the loop asks), or converted on the CPU."""
        from fastload.transfer.prefetch import DevicePrefetcher, make_convert

        convert = make_convert(dtype, memory_format)
        if device is not None and device.type != "cpu":
            transport, pool = self.device_transport(device)
            return DevicePrefetcher(feed, transport, ahead=ahead, pool=pool, convert=convert, stats=self._stats)
        if convert is not None:
            return HostConvert(feed, convert, self._stats)
        return feed

    def clear(self) -> None:
        """Frees the pinned pool's blocks (the loader is closed)."""
        if self._pool is not None:
            self._pool.clear()
