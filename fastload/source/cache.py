"""A bounded, shared cache of the members fetched from remote shards: one sparse file per shard.

The C++ engine reads samples by (file, offset, size) from local files. Every member
fetched from object storage is written into its shard's cache file, `<root>/<shard key>`,
at the member's own offset in the shard: the file is a sparse copy of the shard holding
only what was fetched, so the sample index points at it with the shard's own offsets,
fixed when the dataset opens and the same in every process and rank. A request's answer
(one member, or many neighbours read at once) is written with one `pwrite` per run of
members: no file per member (creating, writing and renaming one cost the loader more CPU
than the request that fetched it).

Which members are there is kept in a table beside each file, `<root>/.members/<shard
key>`, memory-mapped by every process that uses the shard: one row per member (offset,
size, last use in seconds or 0 when absent, holders, last hold). A member is marked present only after its
bytes are written, so a reader that finds it marked reads whole bytes, whichever loader,
rank or process wrote them. Fetches of the same members by several processes are
serialised by lock files (those of LOCK_STRIPES picked by the shard and the
LOCK_WINDOW-sized windows the fetch's bytes touch), so the second one finds the members
and downloads nothing.

The cache holds at most `limit` bytes of members: past it, the least recently used ones
are unmarked and their bytes freed (a hole punched in the file) until it is back under
EVICT_TO of the limit. A member is never evicted while a batch of any process holds it
(`hold`: a count of holders in its row, changed only under its window's table locks,
which eviction takes too, so a hold and an eviction never interleave; a hold older than
HOLD_S, left by a process that died, no longer counts), nor when used in the last
`grace_s` seconds.

Example:
    >>> import tempfile
    >>> cache = RangeCache(tempfile.mkdtemp(), limit=1 << 20)
    >>> cache.register("0123abcd-train-0000.tar", 4096, offsets=[512, 2048], sizes=[1000, 1500])
    >>> cache.write("0123abcd-train-0000.tar", 512, b"m" * 1000, [0])
    >>> cache.present("0123abcd-train-0000.tar", [0, 1]).tolist()
    [True, False]
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import shutil
import tempfile
import threading
import time
import warnings
import zlib
from typing import ContextManager, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

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
# A process recounts the cache's bytes from the tables this often (others write to it too).
RECOUNT_S = 5.0
# ... and each time it has written this fraction of the limit.
RECOUNT_FRACTION = 0.1
# Members used this recently are never evicted.
DEFAULT_GRACE_S = 10.0
# A hold this old no longer keeps a member (its process died before releasing it).
HOLD_S = 600.0
# Bytes between two members written with them in one pwrite (a tar header and a label
# member sit between two images); wider gaps are not written at all.
WRITE_GAP = 4096
# The name a member table has while it is written (then linked into place).
TABLE_TEMP = ".new-"
# A table row: the member's offset and size in the shard, its last use (0: absent), the
# batches holding it (all processes) and when it was last held.
ROW = np.dtype([("offset", "<i8"), ("size", "<i8"), ("used", "<f8"), ("holders", "<i8"), ("held_at", "<f8")])

_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


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


def punch_hole(fd: int, offset: int, size: int) -> bool:
    """Frees bytes [offset, offset + size) of a file, which then read as zeros (the file
    keeps its size); False where the filesystem cannot (the bytes stay)."""
    if size <= 0:
        return True
    if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE,
                       ctypes.c_int64(offset), ctypes.c_int64(size)) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS):
        return False
    raise OSError(err, f"fastload: cannot free bytes {offset}-{offset + size} of a range cache file: "
                       f"{os.strerror(err)}")


@contextlib.contextmanager
def window_locks(root: str, key: str, start: int, end: int, kind: str = "") -> Iterator[None]:
    """Holds the lock files under `root` of the windows bytes [start, end) of the shard
    `key` touch (other threads and processes taking any of them wait), taken in stripe
    order so that no two holders wait for each other. `kind` names a separate set of locks
    ("": fetches and evictions, "t": the table's holds, releases and evictions)."""
    windows = range(int(start) // LOCK_WINDOW, max(int(start), int(end) - 1) // LOCK_WINDOW + 1)
    stripes = sorted({zlib.crc32(f"{key}:{w}".encode("utf-8", "surrogateescape")) % LOCK_STRIPES
                      for w in windows})
    fds: List[int] = []
    try:
        for stripe in stripes:
            fds.append(os.open(os.path.join(root, ".locks", f"{kind}{stripe}"), os.O_RDWR | os.O_CREAT, 0o666))
            fcntl.flock(fds[-1], fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)  # releases its lock


def _by_window(rows: np.ndarray, members: Sequence[int]) -> Iterator[Tuple[int, int, List[int]]]:
    """(start, end, positions in `members`) of the members grouped by the lock windows
    their bytes touch: one lock per group."""
    windows: Dict[Tuple[int, int], List[int]] = {}
    offsets, sizes = rows["offset"], rows["size"]
    for i, m in enumerate(members):
        start, end = int(offsets[m]), int(offsets[m] + sizes[m])
        windows.setdefault((start // LOCK_WINDOW, (end - 1) // LOCK_WINDOW), []).append(i)
    for (first, last), positions in windows.items():
        yield first * LOCK_WINDOW, (last + 1) * LOCK_WINDOW, positions


def _held(rows: np.ndarray, m: int, now: float) -> bool:
    """A batch of some process holds member m (a hold older than HOLD_S does not count)."""
    return rows["holders"][m] > 0 and rows["held_at"][m] > now - HOLD_S


def _read_rows(path: str) -> Optional[np.ndarray]:
    """A member table read as it stands (None when it cannot be)."""
    try:
        with open(path, "rb") as f:
            return np.frombuffer(f.read(), dtype=ROW)
    except (OSError, ValueError):
        return None


def _table(path: str, offsets: np.ndarray, sizes: np.ndarray) -> mmap.mmap:
    """The shard's member table mapped (shared): the one there if it lists these members,
    else a new one (all absent) put in place whole, so a process never maps a table that
    another is still filling (a table of another layout is replaced, not rewritten)."""
    rows = np.zeros(max(1, len(offsets)), dtype=ROW)
    rows["offset"][:len(offsets)], rows["size"][:len(offsets)] = offsets, sizes
    for attempt in range(3):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = None
        if fd is not None:
            try:
                if os.fstat(fd).st_size == rows.nbytes:
                    table = mmap.mmap(fd, rows.nbytes)
                    found = np.frombuffer(table, dtype=ROW)
                    if np.array_equal(found[["offset", "size"]], rows[["offset", "size"]]):
                        return table
                    del found
                    table.close()
            finally:
                os.close(fd)
        tmp = f"{path}{TABLE_TEMP}{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(rows.tobytes())
        try:
            if fd is None:
                os.link(tmp, path)  # (a table another process put there first is kept)
            else:
                os.replace(tmp, path)
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    raise OSError(f"fastload.RangeCache: cannot set up the member table {path}")


def _oldest(tables: Iterator[Tuple[str, np.ndarray]], target: int,
            young: float) -> Tuple[int, Dict[str, List[int]]]:
    """(bytes of members in `tables`, {key: members}): the least recently used members, none
    used since `young`, whose removal brings the cache down to `target` bytes. As arrays: a
    large cache holds millions. (A held one among them is passed over by the removal: the
    next eviction frees more.)"""
    keys, last_use, sizes, tables_of, members = [], [], [], [], []
    for key, rows in tables:
        present = np.flatnonzero(rows["used"] != 0.0)
        last_use.append(rows["used"][present])
        sizes.append(rows["size"][present])
        tables_of.append(np.full(len(present), len(keys)))
        members.append(present)
        keys.append(key)
    last_use, sizes, tables_of, members = (np.concatenate(a) if a else np.zeros(0, dtype=np.int64)
                                           for a in (last_use, sizes, tables_of, members))
    used = int(sizes.sum())
    oldest = np.argsort(last_use, kind="stable")
    oldest = oldest[last_use[oldest] <= young]
    enough = int(np.searchsorted(np.cumsum(sizes[oldest]), used - target)) + 1 if used > target else 0
    chosen: Dict[str, List[int]] = {}
    for t, m in zip(tables_of[oldest[:enough]].tolist(), members[oldest[:enough]].tolist()):
        chosen.setdefault(keys[int(t)], []).append(int(m))
    return used, chosen


class _Shard:
    """One shard's cache file and its member table, mapped in this process. (The file is
    opened for each write or eviction, not held: a run over thousands of shards would
    hold a descriptor for each.)"""

    def __init__(self, data: str, table: str, size: int, offsets: np.ndarray, sizes: np.ndarray):
        self.data, self.size = data, int(size)
        with self.opened() as fd:
            if os.fstat(fd).st_size < self.size:
                os.ftruncate(fd, self.size)  # sparse: no block is used until written
        self._map = _table(table, offsets, sizes)
        self.rows = np.frombuffer(self._map, dtype=ROW, count=len(offsets))

    @contextlib.contextmanager
    def opened(self) -> Iterator[int]:
        fd = os.open(self.data, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            yield fd
        finally:
            os.close(fd)

    def close(self) -> None:
        self.rows = None
        with contextlib.suppress(BufferError):  # (a view still in use: the map goes with it)
            self._map.close()


class RangeCache:
    """Members of remote shards under `root`, at most `limit` bytes in all, least recently
    used evicted; shared by the processes and ranks that use `root`.

    Args:
        root: the cache folder (created when missing).
        limit: bytes of members the cache may hold (default: DEFAULT_FRACTION_OF_FREE of the free disk).
        grace_s: members used this recently are never evicted.

    A shard is `register`ed with its members (offsets and sizes in the shard, the same
    lists in every process); its members are then named by their place in those lists.
    """

    def __init__(self, root: str, limit: Optional[int] = None, grace_s: float = DEFAULT_GRACE_S):
        self.root = os.fspath(root)
        for sub in (".locks", ".members"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self.limit = int(limit) if limit is not None else default_limit(self.root)
        if self.limit < 0:
            raise ValueError(f"fastload.RangeCache: expected a limit >= 0 bytes, got {limit!r}.")
        self.grace_s = float(grace_s)
        self._lock = threading.Lock()
        self._known: Dict[str, Tuple[int, np.ndarray, np.ndarray]] = {}  # key -> (size, offsets, sizes)
        self._open: Dict[str, _Shard] = {}
        self._places: Dict[str, Dict[int, int]] = {}  # key -> {member offset: its place}
        self._used: Optional[int] = None  # counted at the first need (a scan of the tables)
        self._counted_at, self._written_since_count = time.monotonic(), 0
        self.peak = 0
        self.evicted_bytes = 0
        self._warned = False
        self._evicting = self._evict_again = False  # (see evict)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_open"], state["_places"] = {}, {}
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def close(self) -> None:
        """Closes the files this process has open (the cache stays on disk)."""
        with self._lock:
            shards, self._open = list(self._open.values()), {}
        for shard in shards:
            shard.close()

    # -- where members are ----------------------------------------------------------

    def register(self, key: str, size: int, offsets: Sequence[int], sizes: Sequence[int]) -> None:
        """Makes the shard `key` (`size` bytes) known with its members' offsets and sizes
        (in offset order); nothing is created until a member is written or looked up."""
        offsets = np.asarray(offsets, dtype=np.int64)
        if len(offsets) > 1 and not (np.diff(offsets) > 0).all():
            raise ValueError("fastload.RangeCache: expected member offsets in increasing order.")
        self._known[key] = (int(size), offsets, np.asarray(sizes, dtype=np.int64))

    def path(self, key: str) -> str:
        """The file that holds the shard's fetched members at their offsets in the shard."""
        return os.path.join(self.root, key)

    def _shard(self, key: str) -> _Shard:
        shard = self._open.get(key)
        if shard is None:
            with self._lock:
                shard = self._open.get(key)
                if shard is None:
                    size, offsets, sizes = self._known[key]
                    shard = self._open[key] = _Shard(self.path(key), os.path.join(self.root, ".members", key),
                                                     size, offsets, sizes)
        return shard

    def members(self, key: str) -> Tuple[np.ndarray, np.ndarray]:
        """(offsets, sizes) of the shard's members, as registered."""
        return self._known[key][1:]

    def ordinals(self, key: str, offsets: Iterable[int]) -> List[int]:
        """The places of the members at `offsets` in the shard's list (KeyError for an
        offset that is not a member's)."""
        places = self._places.get(key)
        if places is None:  # (built for the shards a run touches, on the first look)
            places = self._places[key] = {o: i for i, o in enumerate(self._known[key][1].tolist())}
        return [places[int(o)] for o in offsets]

    def present(self, key: str, members: Sequence[int]) -> np.ndarray:
        """Whether each member is there (bool array). (A member found here may be evicted
        at any moment: a reader holds it first, `hold`.)"""
        return self._shard(key).rows["used"][np.asarray(members, dtype=np.int64)] != 0.0

    # -- writing and holding ----------------------------------------------------------

    def write(self, key: str, start: int, data: Union[bytes, bytearray, memoryview], members: Sequence[int]) -> None:
        """Writes `data`, the shard's bytes from `start`, for `members` (all inside it):
        each run of members closer than WRITE_GAP in one pwrite from a view of `data` (no
        copy), then marks them present (after their bytes, so no reader meets a torn member)."""
        shard = self._shard(key)
        rows = shard.rows
        self.used  # (counted before these members are marked)
        view = memoryview(data)
        members = sorted(members)
        added = 0
        runs: List[Tuple[int, int]] = []  # byte spans written, one pwrite each
        i = 0
        while i < len(members):
            first = last = members[i]
            while i + 1 < len(members) and (rows["offset"][members[i + 1]]
                                            - rows["offset"][last] - rows["size"][last]) <= WRITE_GAP:
                i += 1
                last = members[i]
            lo, hi = int(rows["offset"][first]), int(rows["offset"][last] + rows["size"][last])
            if lo < start or hi > start + len(view):
                raise ValueError(f"fastload.RangeCache: members {lo}-{hi} are not inside the bytes "
                                 f"{start}-{start + len(view)} written to {key}.")
            runs.append((lo, hi))
            i += 1
        with shard.opened() as fd:
            for lo, hi in runs:
                written = 0
                while written < hi - lo:
                    written += os.pwrite(fd, view[lo - start + written:hi - start], lo + written)
        now = time.time()
        used = rows["used"]
        for m in members:
            if used[m] == 0.0:
                added += int(rows["size"][m])
            used[m] = max(used[m], now)
        with self._lock:
            self._used += added
            self._written_since_count += added
            self.peak = max(self.peak, self._used)

    def hold(self, key: str, members: Sequence[int]) -> np.ndarray:
        """Holds the members for a batch that will read them (there or still to be fetched)
        until `release`, and says which are there (bool array): no process evicts a held
        member. Under the members' table locks, which evictions take too: none falls
        between finding a member and holding it."""
        rows = self._shard(key).rows
        present = np.zeros(len(members), dtype=bool)
        for start, end, positions in _by_window(rows, members):
            with self._table_locked(key, start, end):
                now = time.time()
                for i in positions:
                    m = members[i]
                    rows["holders"][m] += 1
                    rows["held_at"][m] = now
                    present[i] = rows["used"][m] != 0.0
        return present

    def release(self, key: str, members: Sequence[int], drop: bool = False) -> None:
        """Lets go of members `hold` held (their batch is made): their last use becomes now,
        or with `drop` (no disk cache) those no other batch holds are removed."""
        rows = self._shard(key).rows
        for start, end, positions in _by_window(rows, members):
            with self._table_locked(key, start, end):
                now = time.time()
                for i in positions:
                    m = members[i]
                    rows["holders"][m] = max(0, rows["holders"][m] - 1)
                    if rows["used"][m] != 0.0:
                        rows["used"][m] = now
        if drop:
            self._remove(key, members)

    # -- removing -------------------------------------------------------------------

    def _remove(self, key: str, members: Sequence[int], used_before: Optional[float] = None) -> int:
        """Unmarks the members (those not held and, given `used_before`, not used since:
        looked at again under the locks, since another process may have held them since
        they were chosen), then frees their bytes and the bytes around them up to the
        nearest present members (headers and members already gone: a block is freed only
        when a punch covers all of it); returns the member bytes removed."""
        shard = self._shard(key)
        rows, removed = shard.rows, 0
        offsets, sizes, used = rows["offset"], rows["size"], rows["used"]
        for m in sorted(members):
            offset, size = int(offsets[m]), int(sizes[m])
            # Under the locks of the member's windows: a fetch writing any byte of them waits,
            # so no member is marked present over bytes freed after its write. The freed
            # span stays inside those windows.
            with self.locked(key, offset, offset + size), self._table_locked(key, offset, offset + size):
                if used[m] == 0.0 or _held(rows, m, time.time()) or (used_before is not None
                                                                         and used[m] > used_before):
                    continue
                used[m] = 0.0
                lo = offset // LOCK_WINDOW * LOCK_WINDOW
                hi = ((offset + size - 1) // LOCK_WINDOW + 1) * LOCK_WINDOW
                first, last = int(np.searchsorted(offsets, lo)), int(np.searchsorted(offsets, hi))
                before = np.flatnonzero(used[max(first - 1, 0):m] != 0.0)  # (one may start in the window before)
                if before.size:
                    j = max(first - 1, 0) + int(before[-1])
                    lo = max(lo, int(offsets[j] + sizes[j]))
                after = np.flatnonzero(used[m + 1:last] != 0.0)
                if after.size:
                    hi = int(offsets[m + 1 + int(after[0])])
                with shard.opened() as fd:
                    freed = punch_hole(fd, lo, min(hi, shard.size) - lo)
                if not freed and not self._warned:
                    self._warned = True
                    warnings.warn(f"fastload: the filesystem of the range cache {self.root} cannot free parts "
                                  "of files (no hole punching): evicted members keep their disk space. Put "
                                  "cache_dir on ext4, xfs, btrfs or tmpfs.", RuntimeWarning, stacklevel=3)
                removed += size
        with self._lock:
            if self._used is not None:
                self._used -= removed
        return removed

    def locked(self, key: str, start: int, end: int) -> ContextManager[None]:
        """window_locks() of this cache: fetches and evictions of bytes [start, end) of the shard wait."""
        return window_locks(self.root, key, start, end)

    def _table_locked(self, key: str, start: int, end: int) -> ContextManager[None]:
        # Holds and releases take only these, not the fetches' locks: a batch is held at
        # once, never after the requests in flight in its windows. Eviction takes both.
        return window_locks(self.root, key, start, end, kind="t")

    # -- the limit ------------------------------------------------------------------

    @property
    def used(self) -> int:
        """Bytes of members in the cache, as this process last counted them (others'
        writes are counted at the next eviction's scan)."""
        if self._used is None:
            counted = self._count()  # (not under the lock: counting opens the shards' tables)
            with self._lock:
                if self._used is None:
                    self._used = counted
        return self._used

    def _tables(self) -> Iterator[Tuple[str, np.ndarray]]:
        """(key, rows) of every shard in the cache, this process's and others' (read where
        they stand; a table being put in place is skipped)."""
        folder = os.path.join(self.root, ".members")
        for key in sorted(os.listdir(folder)):
            rows = self._shard(key).rows if key in self._known else _read_rows(os.path.join(folder, key))
            if rows is not None and TABLE_TEMP not in key:
                yield key, rows

    def _count(self) -> int:
        return sum(int(rows["size"][rows["used"] != 0.0].sum()) for _, rows in self._tables())

    def over_limit(self) -> bool:
        """Whether the cache holds more than its limit. This process's count is redone from
        the tables every RECOUNT_S seconds and each time it has written RECOUNT_FRACTION of
        the limit, so the writes of other processes (a loader's workers, other ranks) count
        too: together they exceed the limit by about that much at most."""
        now = time.monotonic()
        if now - self._counted_at > RECOUNT_S or self._written_since_count > RECOUNT_FRACTION * self.limit:
            self._counted_at, self._written_since_count = now, 0
            counted = self._count()
            with self._lock:
                self._used = counted
        return self.used > self.limit

    def evict(self) -> int:
        """Removes least recently used members until the cache holds EVICT_TO of its limit;
        returns the bytes removed. One eviction at a time: called while this process
        evicts, it makes the running one look again when done (members released meanwhile
        count); while another process evicts, it returns 0 (that one goes on). Members of
        shards this process does not know are evicted too (their table and file are
        opened for it)."""
        with self._lock:
            self._evict_again = self._evicting
            if self._evicting:
                return 0
            self._evicting = True
        removed = 0
        try:
            while True:
                removed += _evict_oldest(self)
                with self._lock:
                    if not self._evict_again:
                        return removed
                    self._evict_again = False
        finally:
            with self._lock:
                self._evicting = False

    def _adopt(self, key: str) -> None:
        """Knows another dataset's shard from its table (to evict its members)."""
        rows = _read_rows(os.path.join(self.root, ".members", key))
        if rows is None:
            raise OSError(f"no table for {key}")
        size = int((rows["offset"] + rows["size"]).max()) if len(rows) else 0
        self.register(key, max(size, os.stat(self.path(key)).st_size), rows["offset"].copy(), rows["size"].copy())


def _evict_oldest(cache: "RangeCache") -> int:
    """One eviction pass of `cache` (RangeCache.evict): the least recently used members
    that no batch holds, under the machine-wide eviction lock; 0 if another process holds it."""
    fd = os.open(os.path.join(cache.root, ".locks", "evict"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another process is evicting
        target, young = int(cache.limit * EVICT_TO), time.time() - cache.grace_s
        used, chosen = _oldest(cache._tables(), target, young)
        removed = 0
        for key, members in chosen.items():
            try:
                if key not in cache._known:
                    cache._adopt(key)
                removed += cache._remove(key, members, used_before=young)
            except (OSError, ValueError):
                continue  # a table or file removed or damaged meanwhile: left to its owner
        with cache._lock:
            cache._used = used - removed
            cache.evicted_bytes += removed
        return removed
    finally:
        os.close(fd)
