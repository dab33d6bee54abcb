"""The member index of a remote shard, read once and cached, built by range reads if need be.

For each remote shard, in order of preference:
1. the index cached under `cache_dir/index/` from an earlier run, used while the object's
   size and ETag (else modification time) are unchanged: no read of the shard at all;
2. the index beside the shard (`<url>.idx.json`, as fastload.prepare writes it), checked
   against the object's size and the fingerprint of a few of its blocks (about 20 small
   range reads, in parallel);
3. a walk of the shard's tar headers by range reads, the same walk as for local shards
   (`HeaderReads`: a small block past a large member, so images are skipped, not read;
   larger blocks where small members follow each other), a large shard in spans walked
   at once (`SPAN_BYTES`: a walk is one request per header, in sequence, so its time is
   requests times latency; spans divide it).
2 and 3 are done under a lock per shard (`cache_dir/index/.locks/`), so the processes of
one machine sharing `cache_dir` (its ranks) index each shard once between them and read
the others' results from the cache; and under torch.distributed, once per job: the
machines share what they built through the process group's store (job_index.py).
The result is written to the cache (2 and 3), so the next run starts at 1; it is not
written beside the shard in the bucket (fastload/source/README.md says why) unless asked
for: `publish_indexes` puts 2 there for every later cold start, on any machine. Shards
are indexed on a thread pool, `concurrency` at once, their spans on another.

Example:
    >>> from fastload.source.remote import RemoteStore
    >>> import io, tarfile, tempfile
    >>> buf = io.BytesIO()
    >>> with tarfile.open(fileobj=buf, mode="w") as tf:
    ...     info = tarfile.TarInfo("k.cls"); info.size = 1; tf.addfile(info, io.BytesIO(b"7"))
    >>> store = RemoteStore("memory://")
    >>> store.fs.pipe_file("/doc-bucket/s.tar", buf.getvalue())
    >>> [(record, status)] = remote_indexes(store, ["memory://doc-bucket/s.tar"], tempfile.mkdtemp())
    >>> record["names"], status
    (['k.cls'], 'built')
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import io
import json
import os
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

from fastload.errors import TarShardError
from fastload.source.job_index import JobShare
from fastload.source.remote import RemoteStore
from fastload.source.tar_index import (INDEX_FORMAT, INDEX_SUFFIX, INDEX_VERSION, checksum_ok, consistent_index,
                                       default_cache_dir,
                                       fingerprint, fingerprint_blocks, scan_reads, walk_span, write_index)
from fastload.source.urls import cache_name, expand_urls

# Bytes fetched per read while walking headers. After a skip over a large member (an
# image), a small block: the next headers (extended ones included), a label member and
# the headers after it (~3.5 KiB with pax headers), not the image that follows. Each read
# that starts where the last block ended (small members back to back) doubles the block,
# up to READ_BLOCK: many headers per request.
SMALL_BLOCK = 4 * 1024
READ_BLOCK = 64 * 1024
# A shard of at least 2 * SPAN_BYTES is walked as up to MAX_SPANS spans at once: each
# span starts at the first member header found by scanning from its first byte, walks to
# where the next span starts, and the spans are joined only if each walk lands exactly on
# the next one's header (anything unusual: one walk from the start). A walk is one
# request per header, in sequence, so spans divide the time a shard takes by their
# number; with 20 ms per request, 1000 members walked in one span take 20 s.
SPAN_BYTES = 2 << 20
MAX_SPANS = 32
# Bytes per request while looking for a span's first header (about half a large member
# is read before one is met).
SCAN_BLOCK = 32 * 1024
# Shards indexed at once, and span walks in flight at once (over all shards).
INDEX_CONCURRENCY = 32
SPAN_CONCURRENCY = 64
# Seconds of header walks after which remote_indexes(progress=True) says how to avoid them.
WALK_HINT_S = 10.0


class HeaderReads:
    """read(offset, size) over a remote object, a block per request (SMALL_BLOCK after a
    skip, doubled up to READ_BLOCK while the walk runs on past the block it has; READ_BLOCK
    first)."""

    def __init__(self, store: RemoteStore, url: str, size: int, block: int = READ_BLOCK,
                 small_block: int = SMALL_BLOCK, first_block: int = READ_BLOCK):
        self.store, self.url, self.size = store, url, size
        self.max_block, self.small_block, self.first_block = block, small_block, first_block
        self._block = small_block
        self._start, self._data = 0, b""

    def __call__(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        have = self._start + len(self._data)
        if not (self._start <= offset and end <= have):
            # (The first read of a walk: a large block, a small shard's whole.)
            running_on = not self._data or self._start <= offset <= have + 512
            self._block = self.first_block if not self._data else (
                min(self.max_block, 2 * self._block) if running_on else self.small_block)
            self._start = offset
            self._data = self.store.read(self.url, offset, min(self.size, max(end, offset + self._block)))
        return self._data[offset - self._start:end - self._start]


def find_header(read, start: int, stop: int, block: int = SCAN_BLOCK) -> Optional[int]:
    """The offset of the first tar header at a multiple of 512 in [start, stop) (ustar
    magic and a valid checksum), or None; `read(offset, size)` gives the object's bytes.
    A JPEG or PNG body holding both by chance is not met in practice, and a walk that
    starts at one does not land on the next span's header, so it is never used."""
    pos = -(-start // 512) * 512
    while pos < stop:
        data = read(pos, min(block, stop - pos + 512))
        if len(data) < 512:
            return None
        at = data.find(b"ustar", 257)
        while 0 <= at <= len(data) - 255:
            head = at - 257
            if head % 512 == 0 and pos + head < stop and checksum_ok(data[head:head + 512]):
                return pos + head
            at = data.find(b"ustar", at + 1)
        pos += (len(data) // 512) * 512
    return None


def _walk_spans(store: RemoteStore, url: str, size: int,
                pool: concurrent.futures.ThreadPoolExecutor) -> Optional[Tuple[Any, ...]]:
    """walk_headers' result for the whole shard from spans walked at once (see SPAN_BYTES),
    or None when the spans cannot be joined (the caller walks from the start)."""
    spans = min(MAX_SPANS, size // SPAN_BYTES)
    if spans < 2:
        return None
    bounds = [i * size // spans for i in range(spans)]
    found = list(pool.map(lambda b: find_header(lambda o, n: store.read(url, o, min(size, o + n)), b, b + size // spans),
                          bounds[1:]))
    starts = [0] + sorted({f for f in found if f is not None})
    # (A span's walk starts with a small block: it starts at a header found inside the shard.)
    walks = list(pool.map(lambda i: walk_span(HeaderReads(store, url, size, first_block=SMALL_BLOCK if i else READ_BLOCK),
                                              size, starts[i],
                                              starts[i + 1] if i + 1 < len(starts) else None),
                          range(len(starts))))
    names: List[str] = []
    offsets: List[int] = []
    sizes: List[int] = []
    labels: Dict[str, str] = {}
    end = 0  # where the spans joined so far stopped: an entry of the next span's walk
    for walk in walks:
        if walk is None:
            return None  # a problem or an unusual archive: one walk from the start names it right
        (n, o, s, texts, _), stopped, entries = walk
        if end >= stopped:
            continue  # the spans before it walked past all of it (one large member)
        if end not in entries:
            return None  # a start that is not where the walk from the start goes: one walk from the start
        first = entries[end]  # (members before it were walked by the span before, with their headers)
        labels.update({str(int(k) - first + len(names)): v for k, v in texts.items() if int(k) >= first})
        names += n[first:]
        offsets += o[first:]
        sizes += s[first:]
        end = stopped
    return names, offsets, sizes, labels, []


class _Seekable(io.RawIOBase):
    """A read-only file over HeaderReads, for tarfile (unusual archives)."""

    def __init__(self, reads: HeaderReads):
        self._reads, self._pos = reads, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset if whence == 0 else self._pos + offset if whence == 1 else self._reads.size + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        n = self._reads.size - self._pos if n is None or n < 0 else n
        data = self._reads(self._pos, n)
        self._pos += len(data)
        return data


def _cache_path(url: str, cache_dir: str) -> str:
    return os.path.join(cache_dir, "index", cache_name(url, url) + INDEX_SUFFIX)


def _cached(path: str, identity: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    try:
        with open(path, "r", encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    if record.get("remote_identity") == identity and consistent_index(record, identity["size"]):
        return record
    return None


def _beside(store: RemoteStore, url: str, identity: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The index fastload.prepare wrote beside the shard, if any and if it matches it."""
    data = store.read_object(url + INDEX_SUFFIX)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not consistent_index(record, identity["size"]):
        return None
    blocks = fingerprint_blocks(identity["size"], record["offsets"])
    read = dict(zip(blocks, [store.read(url, o, min(o + n, identity["size"])) for o, n in blocks]))
    if fingerprint(lambda o, n: read[(o, n)], identity["size"], record["offsets"]) != record["fingerprint"]:
        return None
    return record


@contextlib.contextmanager
def _indexing(path: str, wait: bool) -> Iterator[bool]:
    """Holds the lock of one shard's cached index while this process builds it (an flock
    on `<index folder>/.locks/<index name>`, freed by the system if the process dies);
    yields False without it when `wait` is False and another process holds it."""
    folder = os.path.join(os.path.dirname(path), ".locks")
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, os.path.basename(path)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:  # a read-only cache folder: nothing is shared through it anyway
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError:  # a filesystem without locks (ENOLCK): each process builds its own
            pass
        yield True
    finally:
        os.close(fd)


def remote_index(store: RemoteStore, url: str, cache_dir: str, identity: Optional[Dict[str, Any]] = None,
                 spans: Optional[concurrent.futures.ThreadPoolExecutor] = None,
                 wait: bool = True) -> Optional[Tuple[Dict[str, Any], str]]:
    """(index record, "cached" | "built") of one remote shard (see the module's docstring).

    identity: the object's {"size", "tag"} when already known (from a listing).
    spans: a thread pool for walking spans of a large shard at once (None: one walk).
    wait: while another process builds this shard's index (the loaders and ranks of one
        machine sharing `cache_dir`), wait for it and read it from the cache (True), or
        return None at once (False).
    """
    identity = identity or store.identity(url)
    path = _cache_path(url, cache_dir)
    record = _cached(path, identity)
    if record is not None:
        return record, "cached"
    with _indexing(path, wait) as mine:
        if not mine:
            return None
        record = _cached(path, identity)  # built by another process while this one waited
        if record is not None:
            return record, "cached"
        job = JobShare.current()
        if job is None:
            return _build(store, url, path, identity, spans)
        return _build_for_job(job, store, url, path, identity, spans, wait)


def _build_for_job(job: JobShare, store: RemoteStore, url: str, path: str, identity: Dict[str, Any],
                   spans: Optional[concurrent.futures.ThreadPoolExecutor],
                   wait: bool) -> Optional[Tuple[Dict[str, Any], str]]:
    """remote_index()'s record when the job's machines share indexes (fastload/source/
    job_index.py): posted by another rank, or claimed and built here, or (a claim of
    another rank) waited for when `wait`, else None."""
    key = job.key(url, identity)
    record = job.posted(key)
    claimed = record is None and job.claim(key)
    if record is None and not claimed:
        if not wait:
            return None  # another rank builds it: this one takes other shards first
        record = job.wait(key)
    if record is not None and consistent_index(record, identity["size"]):  # (another version's: built here)
        record = dict(record, remote_identity=identity)
        write_index(path, record)
        return record, "cached"
    try:
        out = _build(store, url, path, identity, spans)
    except BaseException:
        if claimed:
            job.post(key, None)  # waiters build it themselves, and name the fault
        raise
    if claimed:
        job.post(key, out[0])
    return out


def _build(store: RemoteStore, url: str, path: str, identity: Dict[str, Any],
           spans: Optional[concurrent.futures.ThreadPoolExecutor]) -> Tuple[Dict[str, Any], str]:
    """remote_index()'s record from the index beside the shard or a walk, written to `path`."""
    record, status = _beside(store, url, identity), "cached"
    if record is None:
        size = identity["size"]
        walk = _walk_spans(store, url, size, spans) if spans is not None else None
        if walk is not None:
            names, offsets, sizes, labels_text, problems = walk
            fields = {"fingerprint": "", "names": names, "offsets": offsets, "sizes": sizes,
                      "labels_text": labels_text, "problems": problems}
        else:
            reads = HeaderReads(store, url, size)
            fields = scan_reads(reads, size, lambda: io.BufferedReader(_Seekable(reads)),
                                with_fingerprint=False)  # the object's ETag says when it changed
        record = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "shard_size": size, **fields}
        status = "built"
    record = dict(record, remote_identity=identity)
    write_index(path, record)
    return record, status


def _first_shard(shards: int) -> int:
    """Where this process starts indexing: its rank's share of the list (torchrun's RANK
    and WORLD_SIZE, else LOCAL_RANK and LOCAL_WORLD_SIZE), 0 outside torchrun."""
    for rank_name, world_name in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        try:
            rank, world = int(os.environ[rank_name]), int(os.environ[world_name])
        except (KeyError, ValueError):
            continue
        if 0 <= rank < world:
            return rank * shards // world
    return 0


def remote_indexes(store: RemoteStore, urls: List[str], cache_dir: str,
                   concurrency: int = INDEX_CONCURRENCY, progress: bool = False) -> List[Tuple[Dict[str, Any], str]]:
    """remote_index() of every URL, `concurrency` shards at once (and SPAN_CONCURRENCY span
    walks of large shards), in the order of `urls`; the objects' sizes and tags come from
    one listing per folder where possible.

    progress: a tqdm bar of the shards indexed, shown once indexing has taken a second
    (a walk of plain shards is one request per sample: minutes for a large dataset), and
    a warning after a walk of WALK_HINT_S or more saying how to never wait for it again.
    """
    from tqdm.auto import tqdm

    identities = store.identities(urls)
    start, requests = time.monotonic(), store.requests
    # One bar per machine: its first rank's (a bar per rank would garble the terminal).
    bar = tqdm(total=len(urls), unit="shard", desc="fastload: indexing remote shards", delay=1.0, leave=False,
               disable=not progress or os.environ.get("LOCAL_RANK", "0") != "0")

    def index(i: int, wait: bool) -> Optional[Tuple[Dict[str, Any], str]]:
        out = remote_index(store, urls[i], cache_dir, identities[i], spans, wait)
        if out is not None:
            bar.update()
        return out

    # Processes sharing cache_dir (a machine's ranks, started together), and the machines
    # of a job (fastload/source/job_index.py), split the work: each starts at its own
    # place in the list, takes the shards no other one is indexing, then waits for the
    # ones others were building.
    first = _first_shard(len(urls))
    turn = list(range(first, len(urls))) + list(range(first))
    records: List[Any] = [None] * len(urls)
    # Two pools: a shard's task waits for its spans, which must never wait for a shard's place.
    with bar, concurrent.futures.ThreadPoolExecutor(SPAN_CONCURRENCY, thread_name_prefix="fastload-span") as spans, \
            concurrent.futures.ThreadPoolExecutor(max(1, min(concurrency, len(urls)))) as pool:
        for wait in (False, True):
            pending = [i for i in turn if records[i] is None]
            for i, out in zip(pending, pool.map(lambda i: index(i, wait), pending)):
                records[i] = out
    walked = sum(status == "built" for _, status in records)
    seconds = time.monotonic() - start
    if progress and walked and seconds >= WALK_HINT_S:
        warnings.warn(
            f"fastload: {walked} remote shard(s) had no member index: their tar headers were walked by range "
            f"reads ({store.requests - requests} requests, {seconds:.0f} s). This machine reuses the result "
            f"({os.path.join(cache_dir, 'index')}); for every other machine's first start, write each index "
            "beside its shard once: fastload.publish_shard_indexes(<these shards' URLs>, storage_options=...) "
            "(or build the shards with fastload.prepare).", UserWarning, stacklevel=3)
    return records


def publish_indexes(urls: Any, storage_options: Optional[Dict[str, Any]] = None,
                    cache_dir: Optional[str] = None) -> List[str]:
    """Writes each remote shard's member index beside it (`<url>.idx.json`, the file
    fastload.prepare writes beside its shards): every later cold start, on any machine,
    then reads one small file and about 20 small blocks per shard instead of walking the
    shard's tar headers (one request per sample). Needs credentials that may write to the
    bucket; the shards themselves are not changed. An index is used only while the shard
    matches it (size and a fingerprint of its blocks): a rewritten shard is walked again.

    Args:
        urls: shard URLs, a brace pattern or a "::" list, as fastload.TarShards takes them.
        storage_options: fsspec/s3fs arguments (None: the environment).
        cache_dir: where indexes already built are found (default fastload's cache).

    Returns the URLs of the indexes written.

    Example:
        >>> import io, tarfile, tempfile
        >>> from fastload.source.remote import RemoteStore
        >>> buf = io.BytesIO()
        >>> with tarfile.open(fileobj=buf, mode="w") as tf:
        ...     for name, data in [("a.jpg", b"x" * 3000), ("a.cls", b"1")]:
        ...         info = tarfile.TarInfo(name); info.size = len(data); tf.addfile(info, io.BytesIO(data))
        >>> RemoteStore("memory://").fs.pipe_file("/published/s.tar", buf.getvalue())
        >>> publish_indexes("memory://published/s.tar", cache_dir=tempfile.mkdtemp())
        ['memory://published/s.tar.idx.json']
    """
    urls = expand_urls(urls)
    if not urls:
        return []
    store = RemoteStore(urls[0], storage_options)
    written = []
    records = remote_indexes(store, urls, cache_dir or default_cache_dir())
    for url, (record, _) in zip(urls, records):
        size = record["shard_size"]
        blocks = fingerprint_blocks(size, record["offsets"])
        read = dict(zip(blocks, [store.read(url, o, min(o + n, size)) for o, n in blocks]))
        beside = {k: v for k, v in record.items() if k != "remote_identity"}
        beside["fingerprint"] = fingerprint(lambda o, n: read[(o, n)], size, record["offsets"])
        try:
            store.fs.pipe_file(store.path(url + INDEX_SUFFIX), json.dumps(beside).encode("utf-8"))
        except Exception as e:
            raise TarShardError(f"fastload.publish_shard_indexes: cannot write {url + INDEX_SUFFIX}: "
                                f"{type(e).__name__}: {e}. Writing beside the shards needs credentials that "
                                "may write to the bucket.", url) from e
        written.append(url + INDEX_SUFFIX)
    return written
