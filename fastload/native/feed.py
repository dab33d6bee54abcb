"""NativeFeed: the native loop. Keeps `depth` batches submitted to the runner and yields
their results in order; `native_feed` makes the loader's, one per pass.

Every engine thread works on every batch (one queue), so a couple of batches in flight
keep them all busy; more would only hold more batch memory.

Example (a stand-in runner that "decodes" a batch into its indices):
    >>> from fastload.native.feed import NativeFeed
    >>> import itertools
    >>> class Runner:
    ...     def __init__(self): self.jobs, self.tickets = {}, itertools.count()
    ...     def start_pass(self): pass
    ...     def submit(self, indices, epoch):
    ...         ticket = next(self.tickets); self.jobs[ticket] = indices; return ticket
    ...     def result(self, ticket): return self.jobs.pop(ticket)
    ...     def discard(self, ticket): self.jobs.pop(ticket)
    >>> runner = Runner()
    >>> list(NativeFeed(runner, iter([[0, 1], [2, 3], [4]]), epoch=0, depth=2))
    [([0, 1], (2, 1)), ([2, 3], (2, 2)), ([4], (1, 3))]
    >>> feed = NativeFeed(runner, iter([[0, 1], [2, 3], [4]]), epoch=1, depth=2)
    >>> next(feed)[0], len(runner.jobs)   # the next batch is already in flight
    ([0, 1], 1)
    >>> feed.close(); runner.jobs         # a `break`: what is in flight is released
    {}
"""

from __future__ import annotations

import collections
from typing import Any, Deque, Iterator, List, Optional, Tuple

from fastload.native.protocol import Runner


class NativeFeed:
    """Yields `(batch, (samples, position))` for each batch of `batches`, in order.

    batch is what runner.result() returns (`[images, labels]`), samples the number of
    sample indices in it, position its 1-based place in this pass (what the loader's
    state counts).

    Args:
        runner: a Runner (fastload.native.protocol): NativeRunner, HybridRunner, ...
        batches: the pass's batches of sample indices, in order.
        epoch: picks the random parameters.
        depth: batches kept submitted ahead of the one being waited for (at least the
            runner's `min_depth`, where it has one).
    """

    def __init__(self, runner: Runner, batches: Iterator[List[int]], epoch: int, depth: int):
        # A runner whose batches are made by several workers at once (ProcessHybridRunner)
        # needs that many in flight to keep them all busy.
        depth = max(depth, getattr(runner, "min_depth", 0))
        self._runner, self._batches, self._epoch, self._depth = runner, batches, epoch, depth
        runner.start_pass()
        self._tickets: Deque[Tuple[int, int]] = collections.deque()
        self._done = False
        self.position = 0

    def __iter__(self) -> "NativeFeed":
        return self

    def __next__(self) -> Tuple[Any, Tuple[int, int]]:
        while len(self._tickets) < self._depth and not self._done:
            try:
                indices = next(self._batches)
            except StopIteration:
                self._done = True
                break
            self._tickets.append((self._runner.submit(indices, self._epoch), len(indices)))
        if not self._tickets:
            raise StopIteration
        ticket, samples = self._tickets.popleft()
        self.position += 1
        return self._runner.result(ticket), (samples, self.position)

    def close(self) -> None:
        """Releases the batches still in flight (a `break` out of the epoch)."""
        self._done = True
        while self._tickets:
            self._runner.discard(self._tickets.popleft()[0])

    def __del__(self):
        self.close()


def native_feed(runner: Runner, batches: Iterator[List[int]], epoch: int, prefetch_factor: Optional[int]) -> NativeFeed:
    """A loader's native feed for one pass: `prefetch_factor` batches in flight, at least 2
    (every engine thread works on every batch, one queue, so that many keep them all busy;
    torch's per-worker multiple would only hold more batch memory), and a lazily traced
    dataset traced ahead of the engine (the runner's `ahead`, where it has one)."""
    depth = max(2, prefetch_factor or 2)
    runner.keep_in_flight(depth)
    ahead = getattr(runner, "ahead", None)
    return NativeFeed(runner, ahead(batches) if ahead is not None else batches, epoch, depth)
