"""The member index of a remote shard, read once and cached, built by range reads if need be.

For each remote shard, in order of preference:
1. the index cached under `cache_dir/index/` from an earlier run, used while the object's
   size and ETag (else modification time) are unchanged: no read of the shard at all;
2. the index beside the shard (`<url>.idx.json`, as fastload.prepare writes it), checked
   against the object's size and the fingerprint of a few of its blocks (about 20 small
   range reads, in parallel);
3. a walk of the shard's tar headers by range reads (`HeaderReads`: each read fetches a
   block of READ_BLOCK bytes from where the walk is, so small members cost nothing more
   and large ones are skipped), the same walk as for local shards.
The result is written to the cache (2 and 3), so the next run starts at 1. Shards are
indexed on a thread pool, `concurrency` at once.

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
import io
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from fastload.source.remote import RemoteStore
from fastload.source.tar_index import (INDEX_FORMAT, INDEX_SUFFIX, INDEX_VERSION, consistent_index, fingerprint,
                                       fingerprint_blocks, scan_reads, write_index)
from fastload.source.urls import cache_name

# Bytes fetched per read while walking headers: a header, a label member and the next
# header usually fall in one block; a large image is skipped over, not read.
READ_BLOCK = 64 * 1024
# Shards indexed at once.
INDEX_CONCURRENCY = 32


class HeaderReads:
    """read(offset, size) over a remote object, a READ_BLOCK-sized block per request."""

    def __init__(self, store: RemoteStore, url: str, size: int, block: int = READ_BLOCK):
        self.store, self.url, self.size, self.block = store, url, size, block
        self._start, self._data = 0, b""

    def __call__(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        if not (self._start <= offset and end <= self._start + len(self._data)):
            self._start = offset
            self._data = self.store.read(self.url, offset, min(self.size, max(end, offset + self.block)))
        return self._data[offset - self._start:end - self._start]


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


def remote_index(store: RemoteStore, url: str, cache_dir: str,
                 identity: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], str]:
    """(index record, "cached" | "built") of one remote shard (see the module's docstring).

    identity: the object's {"size", "tag"} when already known (from a listing).
    """
    identity = identity or store.identity(url)
    path = _cache_path(url, cache_dir)
    record = _cached(path, identity)
    if record is not None:
        return record, "cached"
    record, status = _beside(store, url, identity), "cached"
    if record is None:
        reads = HeaderReads(store, url, identity["size"])
        record = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "shard_size": identity["size"],
                  **scan_reads(reads, identity["size"], lambda: io.BufferedReader(_Seekable(reads)),
                               with_fingerprint=False)}  # the object's ETag says when it changed
        status = "built"
    record = dict(record, remote_identity=identity)
    write_index(path, record)
    return record, status


def remote_indexes(store: RemoteStore, urls: List[str], cache_dir: str,
                   concurrency: int = INDEX_CONCURRENCY) -> List[Tuple[Dict[str, Any], str]]:
    """remote_index() of every URL, `concurrency` shards at once, in the order of `urls`;
    the objects' sizes and tags come from one listing per folder where possible."""
    identities = store.identities(urls)
    with concurrent.futures.ThreadPoolExecutor(max(1, min(concurrency, len(urls)))) as pool:
        return list(pool.map(lambda args: remote_index(store, args[0], cache_dir, args[1]), zip(urls, identities)))
