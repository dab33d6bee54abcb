"""The sample index: where every sample's bytes are, in flat arrays.

Millions of samples cost a few flat numpy arrays, not millions of Python strings: cheap
to build, to pickle into workers, and to hand to the C++ engine without copies.
"""

from __future__ import annotations

import collections.abc
import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Optional, Sequence

import numpy as np


@dataclass(frozen=True, eq=False)
class FlatStrings(collections.abc.Sequence):
    """A read-only list of strings stored as one UTF-8 byte buffer plus offsets: no Python
    object per string, with millions of files. Indexing (negative indices too), slicing (a
    list of str), len, iteration, `in`, equality with a list and tolist() behave as on a
    list.

    Example:
        >>> names = FlatStrings.from_list(["a.jpg", "b/c.jpg", "d.jpg"])
        >>> len(names), names[1], names[-1], names[:2], "d.jpg" in names
        (3, 'b/c.jpg', 'd.jpg', ['a.jpg', 'b/c.jpg'], True)
    """

    data: np.ndarray  # uint8 [total_bytes]
    offsets: np.ndarray  # int64 [n + 1]

    @classmethod
    def from_list(cls, strings: Iterable[str]) -> "FlatStrings":
        encoded = [s.encode("utf-8", "surrogateescape") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        return cls(data, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        n = len(self)
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(n))]
        try:
            j = i.__index__()
        except AttributeError:
            raise TypeError(f"fastload.FlatStrings: expected an int index or a slice, got {i!r}.") from None
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"fastload.FlatStrings: index {i} out of range for {n} strings.")
        return self._at(j)

    def _at(self, j: int) -> str:
        start, end = int(self.offsets[j]), int(self.offsets[j + 1])
        return self.data[start:end].tobytes().decode("utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        data, bounds = self.data.tobytes(), self.offsets.tolist()
        for start, end in zip(bounds, bounds[1:]):
            yield data[start:end].decode("utf-8", "surrogateescape")

    def tolist(self) -> List[str]:
        return list(self)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, FlatStrings):
            return np.array_equal(self.offsets, other.offsets) and np.array_equal(self.data, other.data)
        if isinstance(other, list):
            return self.tolist() == other
        return NotImplemented

    __hash__ = None  # unhashable, as a list is

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"FlatStrings([{head}{', ...' if len(self) > 3 else ''}], {len(self)} strings)"


@dataclass(frozen=True)
class SampleIndex:
    """Where each sample's encoded bytes live, plus its label.

    Sample i is bytes [offsets[i], offsets[i] + sizes[i]) of file files[file_ids[i]]
    (sizes[i] == -1: the whole file). Folders have one file per sample; tar shards have
    many samples per file. The C++ engine reads samples straight from these arrays.
    """

    files: FlatStrings  # paths of the files holding the samples
    file_ids: np.ndarray  # int64 [N]
    offsets: np.ndarray  # int64 [N]
    sizes: np.ndarray  # int64 [N]
    labels: np.ndarray  # int64 [N]
    members: Optional[FlatStrings] = None  # [N] member names inside tar shards, for messages
    # Samples of remote shards: a RemoteReads (fastload/source/ranges.py) whose fetch fills
    # their files before they are read (the native runner calls it with each batch).
    remote: Optional[Any] = None

    @classmethod
    def from_files(cls, paths: Sequence[str], labels: Sequence[int]) -> "SampleIndex":
        """One sample per file (image folders and file lists)."""
        n = len(paths)
        return cls(
            files=FlatStrings.from_list(paths),
            file_ids=np.arange(n, dtype=np.int64),
            offsets=np.zeros(n, dtype=np.int64),
            sizes=np.full(n, -1, dtype=np.int64),
            labels=np.asarray(labels, dtype=np.int64).reshape(n),
        )

    def __len__(self) -> int:
        return len(self.file_ids)

    def source(self, i: int) -> str:
        """Where sample i's bytes are, for messages: the file's path, or "shard:member".

        The Python side of the engine's read stage names samples the same way: the native
        loader's DecodeError carries this as its `source`.
        """
        path = self.files[int(self.file_ids[i])]
        if self.remote is not None:
            path = self.remote.source(path) or path  # the shard's URL, not the cache's file
        if self.members is None:
            return path
        return f"{path}:{self.members[i]}"

    def read(self, i: int) -> bytes:
        """The encoded bytes of sample i: the Python twin of the engine's read stage.

        The C++ engine reads samples itself (one pread of (offset, size), or the whole file
        when size is -1); this is the same read for the paths that run in Python (a native
        dataset indexed directly, the PIL fallback, write_shards), with the engine's error
        texts: what failed, the sample and its source, and the fix.

        Raises:
            OSError: the file cannot be opened or read (the OSError subclass and errno of
                the failure, e.g. FileNotFoundError).
            EOFError: the file ends before the sample's last byte (a truncated file or
                shard).
        """
        if self.remote is not None:
            with self.remote.holding(self, [i]):
                return self._read(i)
        return self._read(i)

    def _read(self, i: int) -> bytes:
        path = self.files[int(self.file_ids[i])]
        size, offset = int(self.sizes[i]), int(self.offsets[i])
        try:
            f = open(path, "rb")
        except OSError as error:
            raise self._read_error(i, error, f"cannot open: {error.strerror or error}") from error
        with f:
            try:
                data = f.read() if size < 0 else os.pread(f.fileno(), size, offset)
            except OSError as error:
                raise self._read_error(i, error, f"read failed: {error.strerror or error}") from error
        if len(data) != size and size >= 0:
            raise EOFError(self._read_message(
                i, f"expected {size} bytes at offset {offset}, file ends after {len(data)} (truncated?)"))
        return data

    def _read_message(self, i: int, what: str) -> str:
        # The engine's read errors reach users as DecodeError(what, i, source); this is
        # that message, with "read" for "decode".
        from fastload.errors import SKIP_HINT

        return f"fastload: cannot read sample {i}, {self.source(i)}: {what}. Fix or remove the file, or {SKIP_HINT}."

    def _read_error(self, i: int, error: OSError, what: str) -> OSError:
        # The same OSError subclass and errno (callers catch FileNotFoundError, ...), the
        # message of the engine's read.
        out = type(error)(self._read_message(i, what))
        out.errno = error.errno
        return out
