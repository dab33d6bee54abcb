"""Mosaic Streaming and LitData reading the same images from the same S3 bucket, for
benchmarks/s3_shards.py's comparison rows. Runs in a virtual environment of its own (the
two libraries pin versions of their own; they never go into the project's .venv):

    python -m venv /tmp/cmpvenv
    /tmp/cmpvenv/bin/pip install mosaicml-streaming litdata   # torch as the project's
    /tmp/cmpvenv/bin/python benchmarks/s3_others.py --library streaming --shards a.tar b.tar ... \
        --upload-endpoint http://127.0.0.1:PORT --endpoint http://127.0.0.1:PROXY --work DIR

The samples are read from the webdataset shards given (the same JPEG bytes and labels
fastload reads), written once in the library's own format (Mosaic's MDS shards, LitData's
chunks, about the size of the tar shards), uploaded to s3://bench/<library>/ through
`--upload-endpoint`, then read back through `--endpoint` (the benchmark's latency proxy)
for one epoch: the library's StreamingDataset (its downloader, its local cache, its
shuffle), PIL decode and torchvision v2 RandomResizedCrop(224) + flip + Normalize in
torch's DataLoader workers, batch `--batch-size`. Prints one JSON line: images/s,
first-batch seconds (from iter()), and the CPU seconds of this process and its workers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import tarfile
import time
from typing import List, Tuple

BUCKET = "bench"


def samples(shards: List[str]) -> List[Tuple[bytes, int]]:
    """(JPEG bytes, label) of every sample of the shards, in order."""
    out = []
    for path in shards:
        pending = {}
        with tarfile.open(path) as tf:
            for m in tf:
                if not m.isfile():
                    continue
                key, ext = m.name.split(".", 1)
                pending.setdefault(key, {})[ext] = tf.extractfile(m).read()
        out += [(v["jpg"], int(v["cls"])) for v in pending.values()]
    return out


def transform():
    import torch
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def decode(jpg: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(jpg)).convert("RGB")


def upload(folder: str, prefix: str, endpoint: str) -> None:
    """Uploads the folder's files to s3://BUCKET/prefix/, one PUT each (SeaweedFS answered
    boto3's multipart uploads of 25 MB chunks with InternalError under load), then marks
    the folder uploaded (a rerun of the same server skips it)."""
    import boto3
    from boto3.s3.transfer import TransferConfig

    s3 = boto3.client("s3", endpoint_url=endpoint)
    single = TransferConfig(multipart_threshold=1 << 30)
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            s3.upload_file(path, BUCKET, f"{prefix}/{os.path.relpath(path, folder)}", Config=single)
    open(os.path.join(folder, ".uploaded"), "w").close()


class _Transformed:
    """__getitem__ of a library's dataset, then PIL decode and the transform. (Classes at
    module level: LitData's workers are spawned, and unpickle the dataset by name.)"""

    def __getitem__(self, i):
        sample = super().__getitem__(i)
        if getattr(self, "_tf", None) is None:
            self._tf = transform()
        return self._tf(decode(sample["jpg"])), sample["cls"]


try:
    import streaming as _streaming

    class _Mosaic(_Transformed, _streaming.StreamingDataset):
        pass
except ImportError:
    _Mosaic = None
try:
    import litdata as _litdata
    import litdata.streaming.downloader as _lit_downloader

    class _Lit(_Transformed, _litdata.StreamingDataset):
        pass

    # LitData fetches chunks with obstore, which refuses a plain-http endpoint ("builder
    # error") unless told; the bench's server is on loopback without TLS. (Patched in
    # every process: its workers import this module again.)
    if isinstance(getattr(_lit_downloader, "_OBSTORE_CLIENT_OPTIONS", None), dict):
        _lit_downloader._OBSTORE_CLIENT_OPTIONS = {**_lit_downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
except ImportError:
    _Lit = None


def streaming_dataset(args, data, work):
    """Mosaic Streaming: MDS shards, StreamingDataset with a local cache."""
    from streaming import MDSWriter
    from streaming.base.util import clean_stale_shared_memory

    # An earlier run's leftovers (shared memory, and the file locks Mosaic keeps in the
    # temporary folder) make a new run wait for a barrier no one holds (60 s, its read
    # timeout) and let its workers read shards still being written. No other Mosaic job
    # runs beside the benchmark.
    clean_stale_shared_memory()
    import glob
    import tempfile

    for lock in glob.glob(os.path.join(tempfile.gettempdir(), "*_barrier_filelock")) + \
            glob.glob(os.path.join(tempfile.gettempdir(), "*_cache_filelock")):
        os.unlink(lock)

    out = os.path.join(work, "mds")
    if not os.path.exists(os.path.join(out, ".uploaded")):
        shutil.rmtree(out, ignore_errors=True)
        with MDSWriter(out=out, columns={"jpg": "bytes", "cls": "int"}, size_limit=args.shard_bytes) as w:
            for jpg, label in data:
                w.write({"jpg": jpg, "cls": label})
        upload(out, "mds", args.upload_endpoint)
    os.environ["S3_ENDPOINT_URL"] = args.endpoint
    # A cold cache of a name of its own: the epoch reads from the bucket. (Mosaic waited
    # 60 s, its read timeout, in a run whose cache folder an earlier run had used.)
    cache = os.path.join(work, f"mds-cache-{os.getpid()}")
    return _Mosaic(remote=f"s3://{BUCKET}/mds", local=cache, shuffle=True, shuffle_seed=0,
                  batch_size=args.batch_size), cache


def litdata_dataset(args, data, work):
    """LitData: optimize() chunks, StreamingDataset with a local cache."""
    import litdata

    out = os.path.join(work, "litdata")
    if not os.path.exists(os.path.join(out, ".uploaded")):
        shutil.rmtree(out, ignore_errors=True)
        litdata.optimize(fn=_litdata_item, inputs=data, output_dir=out, chunk_bytes=args.shard_bytes, num_workers=1,
                         mode="overwrite")
        upload(out, "litdata", args.upload_endpoint)
    cache = os.path.join(work, f"litdata-cache-{os.getpid()}")  # a cold cache: the epoch reads from the bucket
    options = {"endpoint_url": args.endpoint, "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
               "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"]}
    return _Lit(f"s3://{BUCKET}/litdata", cache_dir=cache, shuffle=True, seed=0, storage_options=options), cache


def _litdata_item(item):
    jpg, label = item
    return {"jpg": jpg, "cls": label}


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(folder) for f in files)


def cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", choices=["streaming", "litdata"], required=True)
    parser.add_argument("--shards", nargs="+", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--upload-endpoint", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-bytes", type=int, default=None, help="default: the tar shards' mean size")
    args = parser.parse_args()
    args.shard_bytes = args.shard_bytes or sum(os.path.getsize(p) for p in args.shards) // len(args.shards)

    import torch

    data = samples(args.shards)
    os.makedirs(args.work, exist_ok=True)
    make = streaming_dataset if args.library == "streaming" else litdata_dataset
    t0 = time.perf_counter()
    ds, cache = make(args, data, args.work)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, drop_last=True)
    c0, start = cpu_s(), time.perf_counter()
    first, images = None, 0
    for x, _ in loader:
        images += len(x)
        if first is None:
            first = time.perf_counter() - start
    elapsed = time.perf_counter() - start
    del loader  # workers joined: their CPU is counted in RUSAGE_CHILDREN
    print(json.dumps({"library": args.library, "images": images, "img/s": images / elapsed, "first": first,
                      "cpu_s": cpu_s() - c0, "read_bytes": folder_bytes(cache), "setup_s": start - t0}), flush=True)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
