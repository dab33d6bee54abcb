"""Several processes sharing one small range cache: every batch reads whole, right bytes.

PROCESSES processes each open the same cache folder (as loaders and DDP ranks on one
machine do) with a limit of a few members and no grace period, and fetch random batches of
one shard's members (neighbours, scattered ones, whole runs: the requests coalesce in
every way), so that every write races other processes' evictions of neighbouring members
in the same blocks and lock windows. Between fetch() and release() each process reads its
batch's members from the shard's cache file and compares them with the shard: a member
evicted while held, a torn write or a hole punched over a neighbour's bytes fails the test.
The shard is a local file read through fsspec's file:// (the same code path as s3://, no
server needed). Seeded: FASTLOAD_FUZZ_SEED; FASTLOAD_FUZZ_CASES batches per process
(default 150).
"""

from __future__ import annotations

import multiprocessing
import os
import random

import numpy as np

from fastload.source.cache import RangeCache
from fastload.source.ranges import RemoteReads
from fastload.source.remote import RemoteStore

PROCESSES = 3
MEMBERS = 120
BATCHES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "150"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "0"))


def _layout(seed: int):
    """Member offsets and sizes of a tar-like shard: 512-aligned members of 300 B-9 KB with
    headers of 512-1536 B between them, so members share 4 KiB blocks with their neighbours."""
    rng = random.Random(seed)
    offsets, sizes, at = [], [], 512
    for _ in range(MEMBERS):
        size = rng.randint(300, 9000)
        offsets.append(at)
        sizes.append(size)
        at += (size + 511) // 512 * 512 + 512 * rng.randint(1, 3)
    return offsets, sizes, at


def _worker(rank: int, shard: str, root: str, queue) -> None:
    try:
        offsets, sizes, total = _layout(SEED)
        with open(shard, "rb") as f:
            truth = f.read()
        limit = sum(sizes) // 10  # about a dozen members: evictions all the time
        reads = RemoteReads(RemoteStore("file://" + shard), RangeCache(root, limit=limit, grace_s=0), concurrency=4)
        path = reads.add_shard("fuzz-shard.tar", "file://" + shard, total, dict(zip(offsets, sizes)))
        index = type("Index", (), {})()
        index.files, index.file_ids = [path], np.zeros(MEMBERS, dtype=np.int64)
        index.offsets, index.sizes = np.asarray(offsets), np.asarray(sizes)
        rng = random.Random(SEED * 1000 + rank)
        bad = []
        for batch in range(BATCHES):
            kind = rng.random()
            if kind < 0.4:  # neighbours: one coalesced request
                first = rng.randrange(MEMBERS - 6)
                samples = list(range(first, first + rng.randint(1, 6)))
            else:
                samples = rng.sample(range(MEMBERS), rng.randint(1, 6))
            reads.fetch(index, samples).result()
            with open(path, "rb") as f:
                for s in samples:
                    f.seek(offsets[s])
                    if f.read(sizes[s]) != truth[offsets[s]:offsets[s] + sizes[s]]:
                        bad.append((batch, s))
            reads.release(index, samples)
        queue.put((rank, bad, reads.cache.evicted_bytes))
    except BaseException as e:  # reported, not lost in the child
        queue.put((rank, repr(e), 0))


def test_processes_sharing_a_small_cache_read_every_batch_whole(tmp_path):
    offsets, sizes, total = _layout(SEED)
    shard = str(tmp_path / "shard.tar")
    with open(shard, "wb") as f:
        f.write(random.Random(SEED).randbytes(total))
    root = str(tmp_path / "cache")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, shard, root, queue)) for r in range(PROCESSES)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    for rank, bad, evicted in sorted(results):
        assert bad == [], f"process {rank}: members read wrong while held (batch, member): {bad}"
    assert sum(evicted for _, _, evicted in results) > 0  # the limit was exercised
    cache = RangeCache(root, limit=1 << 30)
    assert cache.used <= sum(sizes)
