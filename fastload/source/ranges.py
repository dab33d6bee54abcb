"""Samples of remote shards read by range requests, ahead of the engine, into a bounded cache.

A remote shard is never copied whole unless a batch needs most of it: its members are
fetched by byte range (`RemoteStore.read`) into the shard's sparse cache file of a
`RangeCache` (`<cache>/<shard key>`, each member at its own offset), and the sample index
points the engine at that file with the shard's own offsets. `RemoteReads.fetch(index,
samples)` is called with each batch before the engine reads it: the batch's members are
held (no eviction until `release`), those not yet cached are grouped per shard,
neighbours coalesced into one request (gaps up to COALESCE_GAP bytes are read and
dropped; a shard of which the batch needs at least WHOLE_SHARD_FRACTION is read in one
request; once a reader has asked for READ_AHEAD_FRACTION of a shard, the rest of it
comes in whole-shard requests that read through members cached already, up to
READ_THROUGH_GAP bytes of them in a row), and the requests run on a thread pool,
`concurrency` at once. With `keep=False` (no disk cache) the cache lives in a private
folder in memory and members are removed as soon as their batch is made (`release`).

Example:
    >>> import tempfile
    >>> from fastload.source.cache import RangeCache
    >>> groups = coalesce({0: 100, 1536: 100, 9000000: 100}, gap=65536, shard_size=10 ** 7)
    >>> [(start, end) for start, end, _ in groups]
    [(0, 1636), (9000000, 9000100)]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import shutil
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from fastload.source.cache import RangeCache, memory_folder
from fastload.source.remote import RemoteStore, is_remote, protocol

# Bytes between two wanted members that are read rather than spent on another request
# (a tar member's header and a label member sit between two images: ~1.5 KB).
COALESCE_GAP = 64 * 1024
# Inside a read ahead of the rest of a shard, members cached already (read by earlier
# batches) are read again rather than splitting the request around them, up to this many
# bytes in a row: the 25 % of a shard read before the read ahead would otherwise cut the
# rest into one request per gap (~50 per shard), and a request costs far more than 100 KB
# more of an answer (measured, benchmarks/RESULTS.md: 827 -> 498 requests an epoch halved
# the CPU of the S3 server and proxy on the same cores; the loader's did not change).
READ_THROUGH_GAP = 1 << 20
# A coalesced request is cut at this size so that one slow request does not hold a batch.
MAX_REQUEST_BYTES = 16 << 20
# A batch that needs at least this fraction of a shard's bytes reads the whole span in one request.
WHOLE_SHARD_FRACTION = 0.5
# Once a reader has asked for this fraction of a shard's member bytes, the rest of the
# shard is fetched in whole-shard requests: a rank that reads a quarter of a shard in a
# shuffled order reads all of it this epoch (a rank of many reads a small part: per member).
READ_AHEAD_FRACTION = 0.25
# Requests in flight at once (network waits release the GIL).
DEFAULT_CONCURRENCY = 32
# The range cache's earlier layout (`cache_dir/ranges/`) is renamed to this + an id, then removed.
OLD_CACHE_PREFIX = ".ranges-removed-"


def coalesce(members: Dict[int, int], gap: int = COALESCE_GAP, shard_size: Optional[int] = None,
             max_bytes: int = MAX_REQUEST_BYTES) -> List[Tuple[int, int, List[Tuple[int, int]]]]:
    """Groups members {offset: size} of one shard into requests [(start, end, [(offset, size)])].

    Neighbours closer than `gap` share a request, up to `max_bytes` per request; members
    adding up to WHOLE_SHARD_FRACTION of `shard_size` or more are read as one span (then
    cut at max_bytes).
    """
    items = sorted(members.items())
    if not items:
        return []
    if shard_size and sum(size for _, size in items) >= WHOLE_SHARD_FRACTION * shard_size:
        gap = shard_size
    groups: List[Tuple[int, int, List[Tuple[int, int]]]] = []
    start, end, group = items[0][0], items[0][0] + items[0][1], [items[0]]
    for offset, size in items[1:]:
        if offset - end <= gap and offset + size - start <= max_bytes:
            end = max(end, offset + size)
            group.append((offset, size))
        else:
            groups.append((start, end, group))
            start, end, group = offset, offset + size, [(offset, size)]
    groups.append((start, end, group))
    return groups


class _AllDone:
    """A future for several: done when all are, failed with the first failure.

    `again`: checks run once all are done, each returning more futures to wait for (the
    members a batch holds that are still not there: they were on their way in a request
    that found them cached, and another process evicted them before this batch held them).
    """

    def __init__(self, futures: Sequence[concurrent.futures.Future],
                 again: Sequence[Callable[[], List[concurrent.futures.Future]]] = ()):
        self.futures, self.again = list(futures), list(again)

    def result(self, timeout: Optional[float] = None) -> None:
        self._wait(self.futures, timeout)
        checks, self.again = self.again, []
        more = [f for check in checks for f in check()]
        if more:
            self.futures += more
            self._wait(more, timeout)

    @staticmethod
    def _wait(futures: Sequence[concurrent.futures.Future], timeout: Optional[float]) -> None:
        # All of them first: a batch handed on after a failure (on_error="skip") must not
        # meet members of other requests still on their way.
        done, pending = concurrent.futures.wait(futures, timeout=timeout)
        if pending:
            raise concurrent.futures.TimeoutError(f"{len(pending)} range requests still running")
        for f in futures:
            if not f.cancelled():
                f.result()

    def done(self) -> bool:
        return all(f.done() for f in self.futures)

    def exception(self) -> Optional[BaseException]:
        """The first failure among the finished requests, or None."""
        return next((e for f in self.futures if f.done() and not f.cancelled()
                     and (e := f.exception()) is not None), None)

    def cancel(self) -> None:
        for f in self.futures:
            f.cancel()


class _Holds:
    """holding() and ensure() of a reader that has fetch() and release()."""

    @contextlib.contextmanager
    def holding(self, index: Any, samples: Sequence[int]) -> Iterator[None]:
        """The samples' members are there, and stay, inside the block."""
        fetch = self.fetch(index, samples)
        try:
            fetch.result()
            yield
        finally:
            self.release(index, samples)

    def ensure(self, index: Any, samples: Sequence[int]) -> None:
        """Fetches the samples' members and waits for them (a warm-up: not held after)."""
        with self.holding(index, samples):
            pass


class RemoteReads(_Holds):
    """The range reads of one dataset's remote shards: where each shard's cache file is,
    and the fetch that fills it before the engine reads a batch.

    Args:
        store: the RemoteStore the shards are read through.
        cache: where members go (a RangeCache; a private memory folder when keep=False).
        keep: False: members are removed once their batch is made (no disk cache).
        concurrency: requests in flight at once.

    A batch is held from `fetch` to `release`: its members are held (never evicted while
    the engine may read them) and, without a disk cache, removed by `release`.

    Attributes:
        stats(): requests, bytes read, retries, members fetched, cache hits, cache bytes
            (now and peak).
    """

    def __init__(self, store: RemoteStore, cache: RangeCache, *, keep: bool = True,
                 concurrency: int = DEFAULT_CONCURRENCY):
        self.store, self.cache, self.keep = store, cache, keep
        self.concurrency = max(1, int(concurrency))
        self.urls: Dict[str, str] = {}  # shard key -> URL
        self.shard_sizes: Dict[str, int] = {}
        self._keys: Dict[str, str] = {}  # cache file -> shard key
        self._asked: Dict[str, int] = {}  # shard key -> member bytes asked for (read ahead past a fraction)
        self._ahead: set = set()  # shards read ahead whole
        self._in_flight: Dict[Tuple[str, int], concurrent.futures.Future] = {}  # (key, offset) -> its fetch
        self.hits = self.fetched = 0
        # Reentrant: a fetch that is already done runs its done-callback (_landed) at once,
        # in the thread that adds it, which holds this lock then.
        self._lock = threading.RLock()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pid = os.getpid()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_pool"] = None
        state["_in_flight"] = {}
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def add_shard(self, key: str, url: str, size: int, members: Dict[int, int]) -> str:
        """Registers a shard of `size` bytes and its samples' members {offset: size};
        returns the file the engine reads them from (at their offsets in the shard)."""
        self.urls[key] = url
        self.shard_sizes[key] = int(size)
        ordered = sorted(members.items())
        self.cache.register(key, size, [o for o, _ in ordered], [n for _, n in ordered])
        path = self.cache.path(key)
        self._keys[path] = key
        return path

    def source(self, path: str) -> Optional[str]:
        """The shard URL of a cache file of this reader (None for other paths), for messages."""
        key = self._keys.get(path)
        return None if key is None else self.urls[key]

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():
            self._pool = concurrent.futures.ThreadPoolExecutor(self.concurrency, thread_name_prefix="fastload-range")
            self._pid = os.getpid()
            self._in_flight = {}  # a forked child: the parent's fetches never land here
        return self._pool

    def _members_of(self, index: Any, samples: Sequence[int]) -> Dict[str, Dict[int, int]]:
        """{shard key: {offset: size}} of the samples that are this reader's."""
        files, file_ids, offsets, sizes = index.files, index.file_ids, index.offsets, index.sizes
        out: Dict[str, Dict[int, int]] = {}
        for s in samples:
            key = self._keys.get(files[int(file_ids[s])])
            if key is not None:
                out.setdefault(key, {})[int(offsets[s])] = int(sizes[s])
        return out

    def fetch(self, index: Any, samples: Sequence[int]) -> _AllDone:
        """Holds the members of `samples` (rows of `index`) and starts fetching those not
        cached; returns a future whose result() waits for them (TarShardError naming the
        URL when a request failed after its retries). Call release() when the engine has
        read them."""
        wanted: Dict[str, Dict[int, int]] = {}
        hits = 0
        for key, members in self._members_of(index, samples).items():
            cache = self.cache
            present = cache.hold(key, cache.ordinals(key, members))  # (stays until release())
            self._asked[key] = self._asked.get(key, 0) + sum(members.values())
            hits += int(present.sum())
            for (offset, size), here in zip(members.items(), present):
                if not here:
                    wanted.setdefault(key, {})[offset] = size
        absent_when_held = {key: dict(members) for key, members in wanted.items()}
        for key in list(wanted):
            size = self.shard_sizes[key]
            # (Not without a disk cache: read-ahead members would wait in memory for their batch.)
            if (self.keep and key not in self._ahead and self._asked[key] >= READ_AHEAD_FRACTION * size
                    and size <= self.cache.limit // 4):
                # The rest of the shard in few large requests (cut by coalesce at MAX_REQUEST_BYTES).
                self._ahead.add(key)
                offsets, sizes = self.cache.members(key)
                present = self.cache.present(key, range(len(offsets)))
                wanted[key] = {o: n for o, n, here in zip(offsets.tolist(), sizes.tolist(), present)
                               if o in wanted[key] or not here}
        pool = self._executor()
        with self._lock:
            self.hits += hits
            # A member already on its way (an earlier batch, a read-ahead) is waited for, not fetched again.
            futures = {id(f): f for key, members in wanted.items() for o in members
                       if (f := self._in_flight.get((key, o))) is not None}
            for key, members in wanted.items():
                members = {o: n for o, n in members.items() if (key, o) not in self._in_flight}
                size = self.shard_sizes[key]
                # A span read whole (a read ahead) stays whole where cached members interrupt it.
                gap = READ_THROUGH_GAP if sum(members.values()) >= WHOLE_SHARD_FRACTION * size else COALESCE_GAP
                for start, end, group in coalesce(members, shard_size=size):
                    future = pool.submit(self._fetch_group, key, start, end, group, gap)
                    for o, _ in group:
                        self._in_flight[(key, o)] = future
                    future.add_done_callback(functools.partial(self._landed, key, group))
                    futures[id(future)] = future
        return _AllDone(list(futures.values()), again=[functools.partial(self._fetch_absent, absent_when_held)])

    def _fetch_absent(self, wanted: Dict[str, Dict[int, int]]) -> List[concurrent.futures.Future]:
        """Once their fetches are done, requests for the members still not there: a request
        of another batch found them cached and another process evicted them before this
        batch held them. (Held now, they stay once fetched.)"""
        futures = []
        for key, members in wanted.items():
            present = self.cache.present(key, self.cache.ordinals(key, members))
            absent = {o: n for (o, n), here in zip(members.items(), present) if not here}
            for start, end, group in coalesce(absent, shard_size=self.shard_sizes[key]):
                futures.append(self._executor().submit(self._fetch_group, key, start, end, group))
        return futures

    def _landed(self, key: str, group: List[Tuple[int, int]], future: concurrent.futures.Future) -> None:
        with self._lock:
            for o, _ in group:
                if self._in_flight.get((key, o)) is future:
                    del self._in_flight[(key, o)]

    def _fetch_group(self, key: str, start: int, end: int, group: List[Tuple[int, int]],
                     gap: int = COALESCE_GAP) -> None:
        cache = self.cache
        # The locks of the group's byte range: another thread or process fetching any of
        # these members waits here, then finds them cached.
        with cache.locked(key, start, end):
            ordinals = cache.ordinals(key, [o for o, _ in group])
            present = cache.present(key, ordinals)
            missing = {o: s for (o, s), here in zip(group, present) if not here}
            if not missing:
                return
            # Only the span of what is still missing (another fetch may have brought the rest),
            # in pieces where cached members leave a gap wider than `gap`.
            for start, end, part in coalesce(missing, gap=gap, max_bytes=MAX_REQUEST_BYTES):
                data = self.store.read(self.urls[key], start, end)
                cache.write(key, start, data, cache.ordinals(key, [o for o, _ in part]))
        with self._lock:
            self.fetched += len(missing)
        if self.keep and cache.over_limit():
            cache.evict()  # (not under the locks: eviction takes them)

    def missing(self, index: Any, samples: Sequence[int]) -> List[int]:
        """The positions in `samples` of those whose member is not cached (a failed fetch)."""
        files, file_ids, offsets = index.files, index.file_ids, index.offsets
        out = []
        for i, s in enumerate(samples):
            key = self._keys.get(files[int(file_ids[s])])
            if key is not None and not self.cache.present(key, self.cache.ordinals(key, [int(offsets[s])]))[0]:
                out.append(i)
        return out

    def release(self, index: Any, samples: Sequence[int]) -> None:
        """Lets the samples' members go (their batch is made or dropped): evictable again,
        and without a disk cache removed."""
        for key, members in self._members_of(index, samples).items():
            self.cache.release(key, self.cache.ordinals(key, members), drop=not self.keep)
        if self.keep and self.cache.over_limit():
            # On a fetch thread: eviction waits for the requests in flight in its windows.
            self._executor().submit(self.cache.evict)

    def stats(self) -> Dict[str, Any]:
        """Counters since construction: requests, bytes_read, retries, members_fetched,
        cache_hits, cache_bytes, cache_peak_bytes, cache_evicted_bytes."""
        return {"requests": self.store.requests, "bytes_read": self.store.bytes_read,
                "retries": self.store.retries_made, "members_fetched": self.fetched, "cache_hits": self.hits,
                "cache_bytes": self.cache.used, "cache_peak_bytes": self.cache.peak,
                "cache_evicted_bytes": self.cache.evicted_bytes}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def ranged(url: str) -> bool:
    """True for a URL read by range requests: any remote URL but http(s)://, which is
    downloaded whole (fastload/source/urls.py: fsspec's HTTP needs aiohttp)."""
    return is_remote(url) and protocol(url) not in ("http", "https")


def open_reads(urls: Sequence[str], cache_dir: str, *, storage_options: Optional[Dict[str, Any]] = None,
               cache_limit: Optional[int] = None, concurrency: int = DEFAULT_CONCURRENCY,
               retries: Optional[int] = None, timeout: Optional[float] = None) -> RemoteReads:
    """The RemoteReads of shards `urls` (all of one protocol): a cache under
    `cache_dir/members` holding at most `cache_limit` bytes of members (None: a fraction of
    the free disk; 0: no disk cache, members in a private memory folder removed after each batch);
    `retries` and `timeout` per request as RemoteStore takes them."""
    protocols = sorted({protocol(u) for u in urls})
    if len(protocols) != 1:
        raise ValueError(f"fastload.TarShards: expected remote shards of one protocol, got {protocols}; "
                         "make one dataset per protocol and join them (torch.utils.data.ConcatDataset).")
    if cache_limit is not None and not (isinstance(cache_limit, int) and cache_limit >= 0):
        raise ValueError(f"fastload.TarShards: expected cache_limit to be None (a fraction of the free disk), 0 "
                         f"(no disk cache) or a number of bytes, got {cache_limit!r}.")
    store = RemoteStore(urls[0], storage_options, retries=retries, timeout=timeout)
    remove_old_cache(cache_dir)
    if cache_limit == 0:
        # Files must still exist for the engine: in memory, members removed once their batch is made.
        return RemoteReads(store, RangeCache(memory_folder(), limit=1 << 62), keep=False, concurrency=concurrency)
    return RemoteReads(store, RangeCache(os.path.join(cache_dir, "members"), limit=cache_limit),
                       concurrency=concurrency)


def remove_old_cache(cache_dir: str) -> None:
    """Frees the disk of the range cache's earlier layout, `cache_dir/ranges/` (a file per
    member, under a `.locks` folder), which nothing reads any more: renamed away at once
    (one process takes it, whoever else opens the cache) and removed on a thread (a large
    cache takes a while; what a process ending first leaves, the next one removes)."""
    old = os.path.join(cache_dir, "ranges")
    if os.path.isdir(os.path.join(old, ".locks")):
        with contextlib.suppress(OSError):  # another process took it, or it is not ours to change
            os.rename(old, os.path.join(cache_dir, f"{OLD_CACHE_PREFIX}{os.getpid()}-{threading.get_ident()}"))
    with contextlib.suppress(OSError):
        doomed = [os.path.join(cache_dir, name) for name in os.listdir(cache_dir) if name.startswith(OLD_CACHE_PREFIX)]
        if doomed:
            threading.Thread(target=lambda: [shutil.rmtree(path, True) for path in doomed],
                             name="fastload-old-cache", daemon=True).start()


class RemoteGroup(_Holds):
    """Several datasets' RemoteReads as one (an index joined from them: ConcatDataset).
    Each reader fetches only the members of its own shards."""

    def __init__(self, reads: Sequence[Any]):
        self.reads = list(reads)
        self.keep = all(r.keep for r in self.reads)

    @classmethod
    def of(cls, reads: Sequence[Optional[Any]]) -> Optional[Any]:
        """None, the one reader, or a group of the distinct readers among `reads`."""
        distinct = list({id(r): r for r in reads if r is not None}.values())
        return None if not distinct else distinct[0] if len(distinct) == 1 else cls(distinct)

    def fetch(self, index: Any, samples: Sequence[int]) -> _AllDone:
        parts = [r.fetch(index, samples) for r in self.reads]
        return _AllDone([f for p in parts for f in p.futures], again=[c for p in parts for c in p.again])

    def release(self, index: Any, samples: Sequence[int]) -> None:
        for r in self.reads:
            r.release(index, samples)

    def missing(self, index: Any, samples: Sequence[int]) -> List[int]:
        return sorted({i for r in self.reads for i in r.missing(index, samples)})

    def source(self, path: str) -> Optional[str]:
        return next((s for s in (r.source(path) for r in self.reads) if s is not None), None)
