"""A bounded, shared cache of byte ranges fetched from remote shards: one file per member.

The C++ engine reads samples by (file, offset, size) from local files, so every member
fetched from object storage is written to its own file, `<root>/<shard key>/<offset>`,
under a temporary name renamed into place when complete: a reader never sees a torn file,
whichever loader, rank or process wrote it. Fetches of the same members by several
processes are serialised by lock files (those of LOCK_STRIPES picked by the shard and the
LOCK_WINDOW-sized windows the fetch's bytes touch), so the second one finds the files and
downloads nothing.

The cache holds at most `limit` bytes: past it, the least recently used files (by mtime,
refreshed on every hit) are removed until it is back under EVICT_TO of the limit. A file
used in the last `grace_s` seconds is never removed, so a batch that another loader has
fetched but not yet read keeps its files; the cache may exceed its limit by what is
fetched in that window.

Example:
    >>> import tempfile
    >>> cache = RangeCache(tempfile.mkdtemp(), limit=1 << 20)
    >>> path = cache.path("0123abcd-train-0000.tar", 1536)
    >>> cache.put(path, b"bytes of one member"); cache.has(path)
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
import tempfile
import threading
import time
import zlib
from typing import Iterator, List, Optional, Tuple, Union

# Lock files under <root>/.locks: a byte window of a shard maps to one of these, so locking
# never grows the cache.
LOCK_STRIPES = 1024
# The windows a fetch locks: every window its byte range touches, so two fetches whose
# ranges overlap (one reader's group and another's that starts at a later member, because
# the first members were cached meanwhile) always share a lock.
LOCK_WINDOW = 4 << 20
# After an eviction the cache holds at most this fraction of its limit (room for the next fetches).
EVICT_TO = 0.8
# The default limit: this fraction of the free space where the cache lives.
DEFAULT_FRACTION_OF_FREE = 0.25
# Files used this recently are never evicted (a fetched batch waiting for the engine).
DEFAULT_GRACE_S = 10.0


def default_limit(folder: str) -> int:
    """DEFAULT_FRACTION_OF_FREE of the free disk space at `folder` (or its nearest existing parent)."""
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return int(shutil.disk_usage(probe).free * DEFAULT_FRACTION_OF_FREE)


def memory_folder() -> str:
    """A fresh private folder for a cache that must not outlive its batches: in /dev/shm
    (memory) when the machine has it, else the temporary folder."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="fastload-ranges-", dir=base)


class RangeCache:
    """Member files under `root`, at most `limit` bytes in all, least recently used evicted.

    Args:
        root: the cache folder (created when missing); may be shared by processes.
        limit: bytes the cache may hold (default: DEFAULT_FRACTION_OF_FREE of the free disk).
        grace_s: files used this recently are never evicted.
    """

    def __init__(self, root: str, limit: Optional[int] = None, grace_s: float = DEFAULT_GRACE_S):
        self.root = os.fspath(root)
        os.makedirs(os.path.join(self.root, ".locks"), exist_ok=True)
        self.limit = int(limit) if limit is not None else default_limit(self.root)
        if self.limit < 0:
            raise ValueError(f"fastload.RangeCache: expected a limit >= 0 bytes, got {limit!r}.")
        self.grace_s = float(grace_s)
        self._lock = threading.Lock()
        self._folders: set = set()  # shard folders known to exist
        self._serial = itertools.count()
        self._used = self._scan_size()
        self.peak = self._used
        self.evicted_bytes = 0

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"], state["_serial"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._serial = itertools.count()

    @property
    def used(self) -> int:
        """Bytes in the cache, as this process last counted them (others' writes are
        counted at the next eviction's scan)."""
        return self._used

    def path(self, shard_key: str, offset: int) -> str:
        """The file that holds the member at `offset` of the shard `shard_key`."""
        return os.path.join(self.root, shard_key, str(int(offset)))

    def has(self, path: str) -> bool:
        """True when the file is there; a hit refreshes its place in the LRU order."""
        try:
            os.utime(path)
            return True
        except OSError:
            return False

    def put(self, path: str, data: Union[bytes, bytearray, memoryview]) -> None:
        """Writes one member's bytes: temporary file, then rename (never a torn file).

        `data` may be a memoryview into a larger buffer (a coalesced request's): written
        from there, not copied first. os calls, not a Python file object: this runs once per
        member fetched, so its few microseconds count."""
        folder = os.path.dirname(path)
        if folder not in self._folders:
            os.makedirs(folder, exist_ok=True)
            self._folders.add(folder)
        try:
            replaced = os.stat(path).st_size  # (counted once: a rewrite replaces it)
        except OSError:
            replaced = 0
        # Unique per process and thread: no name is drawn and tried as mkstemp does.
        tmp = os.path.join(folder, f".partial-{os.getpid()}-{threading.get_ident()}-{next(self._serial)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:  # the folder was removed meanwhile (an eviction): once more
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            written = 0
            try:
                while written < len(view):
                    written += os.write(fd, view[written:])
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._lock:
            self._used += len(view) - replaced
            self.peak = max(self.peak, self._used)
            over = self._used > self.limit
        if over:
            self.evict()

    def remove(self, path: str) -> None:
        """Drops one file (a cache without disk keeps members only until their batch is made)."""
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except OSError:
            return
        with self._lock:
            self._used -= size

    @contextlib.contextmanager
    def locked(self, shard_key: str, start: int, end: int) -> Iterator[None]:
        """Holds the lock files of the windows bytes [start, end) of the shard touch (other
        threads and processes fetching any of those bytes wait), taken in stripe order so
        that no two holders wait for each other."""
        windows = range(int(start) // LOCK_WINDOW, max(int(start), int(end) - 1) // LOCK_WINDOW + 1)
        stripes = sorted({zlib.crc32(f"{shard_key}:{w}".encode("utf-8", "surrogateescape")) % LOCK_STRIPES
                          for w in windows})
        fds: List[int] = []
        try:
            for stripe in stripes:
                fds.append(os.open(os.path.join(self.root, ".locks", str(stripe)), os.O_RDWR | os.O_CREAT, 0o666))
                fcntl.flock(fds[-1], fcntl.LOCK_EX)
            yield
        finally:
            for fd in reversed(fds):
                os.close(fd)  # releases its lock

    def _files(self) -> List[Tuple[float, int, str]]:
        out = []
        with os.scandir(self.root) as shards:
            for shard in shards:
                if shard.name.startswith(".") or not shard.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(shard.path) as members:
                    for m in members:
                        if m.name.startswith("."):
                            continue
                        try:
                            st = m.stat(follow_symlinks=False)
                        except OSError:
                            continue  # removed meanwhile
                        out.append((st.st_mtime, st.st_size, m.path))
        return out

    def _scan_size(self) -> int:
        return sum(size for _, size, _ in self._files())

    def evict(self) -> int:
        """Removes least recently used files until the cache holds EVICT_TO of its limit;
        returns the bytes removed. One process evicts at a time (the others go on)."""
        fd = os.open(os.path.join(self.root, ".locks", "evict"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0  # another process is evicting
            files = sorted(self._files())
            used = sum(size for _, size, _ in files)
            target = int(self.limit * EVICT_TO)
            young = time.time() - self.grace_s
            removed = 0
            for mtime, size, path in files:
                if used - removed <= target or mtime > young:
                    break
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed += size
            with self._lock:
                self._used = used - removed
                self.evicted_bytes += removed
            return removed
        finally:
            os.close(fd)
