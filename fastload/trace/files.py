"""The engine's file table of a lazily traced dataset: path bytes in one buffer, filled as indexes are traced.

The engine reads the table in place (no copy per batch). Entry k's end offset is the
buffer's capacity until file k is added, so the offsets always increase and the engine's
checks hold; when the buffer fills up it moves to a larger one and each attached runner
is told (`refresh_index`), since its engine holds the old buffer.

Example:
    >>> files = TracedFiles(capacity=16, entries=4)
    >>> files.add("a.jpg"), files.add("b.jpg"), files.strings[1]
    (0, 1, 'b.jpg')
"""

from __future__ import annotations

import weakref
from typing import Any, List

import numpy as np

from fastload.source.index import FlatStrings


class GrowingStrings(FlatStrings):
    """FlatStrings whose buffer grows (TracedFiles moves it to a larger one in place)."""


class TracedFiles:
    """Paths added one at a time, as `strings` (what the SampleIndex's `files` is).

    Args:
        capacity: bytes of path reserved up front (grown when exceeded).
        entries: the most paths an epoch adds (one per index, the first probe's, the placeholder).
    """

    def __init__(self, capacity: int, entries: int):
        offsets = np.full(entries + 1, capacity, dtype=np.int64)
        offsets[0] = 0
        self.strings = GrowingStrings(np.empty(capacity, dtype=np.uint8), offsets)
        self.count, self.end = 0, 0
        self.placeholder_id = -1  # the placeholder image's entry this epoch (-1: not added yet)
        self._listeners: List[Any] = []  # weakrefs to runners whose engine holds the path bytes

    def add(self, path: str) -> int:
        """Appends `path`; its entry number."""
        data = path.encode("utf-8", "surrogateescape")
        end = self.end + len(data)
        if end > len(self.strings.data):
            self.grow(max(end, 2 * len(self.strings.data)))
        self.strings.data[self.end:end] = np.frombuffer(data, dtype=np.uint8)
        k = self.count
        self.strings.offsets[k + 1] = end
        self.count, self.end = k + 1, end
        return k

    def reset(self) -> None:
        """Empty for a new epoch (the buffer kept)."""
        self.count, self.end, self.placeholder_id = 0, 0, -1
        self.strings.offsets[1:] = len(self.strings.data)

    def trim(self) -> None:
        """The buffer cut to the bytes it holds (a worker process copies the table once)."""
        if len(self.strings.data) > self.end:
            self.grow(self.end)

    def grow(self, capacity: int) -> None:
        """The path bytes in a buffer of `capacity` bytes; the attached runners are handed it."""
        data = np.empty(capacity, dtype=np.uint8)
        data[:self.end] = self.strings.data[:self.end]
        object.__setattr__(self.strings, "data", data)
        self.strings.offsets[self.count + 1:] = capacity  # (entries not added yet: the capacity)
        for ref in list(self._listeners):
            runner = ref()
            if runner is None:
                self._listeners.remove(ref)
            else:
                runner.refresh_index()

    def attach(self, runner: Any, only: bool = False) -> None:
        """`runner.refresh_index()` is called when the bytes move to a larger buffer; `only`:
        instead of the runners attached before (a worker process's copy, whose parent's
        runners are not its own)."""
        if only:
            self._listeners = []
        self._listeners.append(weakref.ref(runner))
