"""Tar shards vs image folder vs the webdataset package, same images, same transforms.

    .venv/bin/python benchmarks/tar_vs_folder.py [--images 1536] [--workers N] [--shards 8]
                                                 [--data DIR] [--skip-race]

Two tables, every figure measured in this run:

1. Shard reading, one thread, no decode: building the member index (cold, then cached),
   then reading every image's bytes in a shuffled order (fastload's SampleIndex.read: one
   pread per image) from the shards and from the folder, beside a PIL decode of the same
   images as the scale: shard reading must cost a small fraction of decoding.
2. The loader race (fastload-bench, each contender in a fresh process): torchvision
   ImageFolder baseline, fastload.ImageFolder (native), fastload.TarShards (native) and the
   webdataset package's own loader, all with RandomResizedCrop 224 + flip + normalize,
   float32 output, the same workers. Ratios are against the baseline of the same run.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import sys
import tempfile
import time

import numpy as np


def _table(rows, columns):
    widths = [max(len(title), *(len(str(r.get(key, ""))) for r in rows)) for title, key in columns]
    line = " | ".join(title.ljust(w) for (title, _), w in zip(columns, widths))
    out = [line, "-+-".join("-" * w for w in widths)]
    for r in rows:
        out.append(" | ".join(str(r.get(key, "")).ljust(w) for (_, key), w in zip(columns, widths)))
    return "\n".join(out)


def shard_reading(root: str, shards, decode_images: int, seed: int):
    import fastload
    from PIL import Image

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for path in shards:  # cold: no index anywhere
            for stale in glob.glob(path + ".idx.json"):
                os.unlink(stale)
        t = time.perf_counter()
        tar = fastload.TarShards(list(shards), cache_dir=cache, progress=False)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        tar2 = fastload.TarShards(list(shards), cache_dir=cache, progress=False)
        warm = time.perf_counter() - t
        assert tar2.index_status == ["cached"] * len(shards)
    t = time.perf_counter()
    folder = fastload.ImageFolder(root)
    scan = time.perf_counter() - t
    n = len(tar)
    assert len(folder) == n, f"the shards hold {n} samples, the folder {len(folder)}"
    rows.append({"what": f"index {len(shards)} shards, cold (tar header walk)", "total_s": f"{cold:.3f}",
                 "per_image_us": f"{cold / n * 1e6:.1f}"})
    rows.append({"what": "index, cached (.idx.json validated)", "total_s": f"{warm:.3f}",
                 "per_image_us": f"{warm / n * 1e6:.1f}"})
    rows.append({"what": "folder scan (fastload.ImageFolder)", "total_s": f"{scan:.3f}",
                 "per_image_us": f"{scan / n * 1e6:.1f}"})

    order = np.random.default_rng(seed).permutation(n)
    results = {}
    for name, ds in (("tar", tar), ("folder", folder)):
        t = time.perf_counter()
        nbytes = sum(len(ds.index.read(int(i))) for i in order)
        dt = time.perf_counter() - t
        results[name] = dt / n
        rows.append({"what": f"read bytes, shuffled: {name}", "total_s": f"{dt:.3f}",
                     "per_image_us": f"{dt / n * 1e6:.1f}", "mb_per_s": f"{nbytes / dt / 1e6:.0f}"})
    sample = order[:decode_images]
    blobs = [tar.index.read(int(i)) for i in sample]
    t = time.perf_counter()
    for b in blobs:
        with Image.open(io.BytesIO(b)) as im:
            im.convert("RGB").load()
    decode = (time.perf_counter() - t) / len(blobs)
    rows.append({"what": f"PIL decode (full image, {len(blobs)} images): the scale", "total_s": "",
                 "per_image_us": f"{decode * 1e6:.1f}"})
    for row in rows:
        if row["what"].startswith("read bytes"):
            key = row["what"].rsplit(" ", 1)[1]
            row["vs_decode"] = f"{results[key] / decode * 100:.1f}%"
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="an ImageFolder-layout folder (default: fastload-bench's generated data)")
    p.add_argument("--dataset-images", type=int, default=2000)
    p.add_argument("--images", type=int, default=1536, help="timed images per contender in the race")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--decode-images", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-race", action="store_true", help="only the shard-reading table")
    args = p.parse_args(argv)

    from fastload.bench import dataset as data

    if args.data:
        bench_data = data.describe_folder(args.data)
    else:
        bench_data = data.ensure_dataset(data.DatasetSpec(images=args.dataset_images, seed=args.seed))
    shards = data.ensure_shards(bench_data, args.shards)
    print(f"data: {bench_data.describe()}; {len(shards)} shards")
    rows = shard_reading(bench_data.root, shards, args.decode_images, args.seed)
    print("\nshard reading, one thread, no decode (SampleIndex.read = one pread per image):")
    print(_table(rows, [("what", "what"), ("total s", "total_s"), ("us/img", "per_image_us"),
                        ("MB/s", "mb_per_s"), ("of PIL decode", "vs_decode")]))
    if args.skip_race:
        return 0
    from fastload.bench.__main__ import main as bench_main

    print("\nloader race (fastload-bench, each contender in a fresh process):", flush=True)
    return bench_main([
        "--data", bench_data.root, "--suite", "main", "--pipeline", "train",
        "--contenders", "baseline,fastload-native,fastload-tar,webdataset", "--shards", str(args.shards),
        "--images", str(args.images), "--batch-size", str(args.batch_size), "--workers", str(args.workers),
        "--seed", str(args.seed), "--no-progress",
        "--json", os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "tar_vs_folder.json"),
    ])


if __name__ == "__main__":
    sys.exit(main())
