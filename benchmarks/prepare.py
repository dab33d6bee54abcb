"""Prepared shards (fastload.prepare) against the original files, one run, interleaved.

    .venv/bin/python benchmarks/prepare.py [--images 1024] [--workers 2] [--rounds 3]
                                           [--variants lossless,512/q90] [--no-torch]

Data: the bench's generated ImageNet-like JPEGs (fastload.bench.dataset, ~500x375, q90).
Variants: the original folder; lossless shards; max_side 512/q90, 512/q75, 384/q90.
Per variant:

- preparation: wall seconds per 1,000 images with `--workers` processes, and the size
  on disk (shards; the folder's files for the original) beside the original's;
- PSNR of training crops against the original-file pipeline: the same relative boxes
  (whole image, 25 % and 8 % of the area, seeded positions) cut from both decodes and
  resized to 224x224 (PIL bilinear, the same call for both); lossless must be inf;
- loading: fastload.DataLoader (native, `--workers` threads) with RandomResizedCrop(224)
  + flip + Normalize, float32, batch 128, over one epoch; beside torch's DataLoader +
  torchvision ImageFolder + v2 transforms (PIL) on the original files with `--workers`
  processes, the same run. Every contender runs once per round, rounds interleaved
  (the machine is shared: each figure is the best round); img/s excludes the first
  batch, whose latency (from constructing the loader) is reported apart; CPU ms per
  image (this process and the workers, loader construction to worker exit, the least
  of the rounds) is the steadier figure where other jobs share the cores.
"""

from __future__ import annotations

import argparse
import gc
import io
import math
import os
import platform
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fastload  # noqa: E402
from fastload import transforms as T  # noqa: E402
from fastload.bench.dataset import DatasetSpec, ensure_dataset  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CROP = 224
VARIANTS = [("lossless", {}), ("512/q90", dict(max_side=512, quality=90)),
            ("512/q75", dict(max_side=512, quality=75)), ("384/q90", dict(max_side=384, quality=90))]
CROP_AREAS = [("whole", 1.0), ("25%", 0.25), ("8%", 0.08)]


def folder_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def torch_loader(root: str, workers: int, batch: int):
    import torchvision
    from torchvision.transforms import v2

    transform = v2.Compose([v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    dataset = torchvision.datasets.ImageFolder(root, transform=transform)
    return torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                                       drop_last=True, generator=torch.Generator().manual_seed(0))


def fastload_loader(dataset_of, workers: int, batch: int):
    pipeline = [T.RandomResizedCrop(CROP), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
    dataset = dataset_of(pipeline)
    return fastload.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                               dtype=torch.float32, generator=torch.Generator().manual_seed(0))


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (torch's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_epoch(make_loader):
    """(first-batch seconds, img/s after the first batch, path, CPU ms per image) of one
    epoch. CPU time counts everything from constructing the loader to its workers'
    exit: on a shared machine it moves less than wall time."""
    gc.collect()
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    loader = make_loader()
    iterator = iter(loader)
    images, _ = next(iterator)
    first = time.perf_counter() - start
    count, t0 = 0, time.perf_counter()
    for images, _ in iterator:
        count += images.shape[0]
    rate = count / (time.perf_counter() - t0) if count else float("nan")
    path = getattr(loader, "path", "torch (PIL)")
    total = count + images.shape[0] if count else images.shape[0]
    del iterator, loader
    gc.collect()  # torch's workers exit (and are reaped) with their iterator
    return first, rate, str(path), (cpu_seconds() - cpu0) / total * 1e3


def crop_boxes(width: int, height: int, rng: np.random.Generator):
    """(name, [(left, top, right, bottom) in relative units]) per crop area, 3 positions each."""
    out = []
    for name, area in CROP_AREAS:
        side = math.sqrt(area)
        boxes = []
        for _ in range(1 if area == 1.0 else 3):
            left, top = rng.uniform(0, 1 - side), rng.uniform(0, 1 - side)
            boxes.append((left, top, left + side, top + side))
        out.append((name, boxes))
    return out


def psnr_table(original: "fastload.ImageFolder", prepared: "fastload.TarShards", images: int):
    """{crop name: PSNR dB} of 224x224 crops of prepared vs original decodes (mean MSE)."""
    from PIL import Image

    sums = {name: [0.0, 0] for name, _ in CROP_AREAS}
    rng = np.random.default_rng(0)
    for i in range(min(images, len(original))):
        a = Image.open(io.BytesIO(original.index.read(i))).convert("RGB")
        b = Image.open(io.BytesIO(prepared.index.read(i))).convert("RGB")
        for name, boxes in crop_boxes(*a.size, rng):
            for box in boxes:
                crops = [np.asarray(im.resize((CROP, CROP), Image.Resampling.BILINEAR,
                                              box=(box[0] * im.width, box[1] * im.height,
                                                   box[2] * im.width, box[3] * im.height)), dtype=np.float64)
                         for im in (a, b)]
                sums[name][0] += float(np.mean((crops[0] - crops[1]) ** 2))
                sums[name][1] += 1
    return {name: (float("inf") if s == 0 else 10 * math.log10(255.0 ** 2 / (s / n))) for name, (s, n) in sums.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--psnr-images", type=int, default=64)
    parser.add_argument("--out", default=None, help="where the prepared shards go (default: a temporary folder)")
    parser.add_argument("--variants", default=",".join(n for n, _ in VARIANTS),
                        help="prepared variants to measure, comma-separated (default: all)")
    parser.add_argument("--no-torch", action="store_true", help="leave out torch+PIL (its columns show nan)")
    args = parser.parse_args()
    chosen = args.variants.split(",")
    unknown = [n for n in chosen if n not in dict(VARIANTS)]
    if unknown:
        parser.error(f"unknown variants {unknown}; expected some of {[n for n, _ in VARIANTS]}")

    data = ensure_dataset(DatasetSpec(images=args.images), progress=False)
    root = data.root
    work = args.out or tempfile.mkdtemp(prefix="fastload-prepare-bench-")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
          f"{args.images} generated JPEGs ({data.mean_width:.0f}x{data.mean_height:.0f} mean, "
          f"{data.mean_bytes / 1e3:.0f} KB), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    original_size = folder_bytes(root)
    original = fastload.ImageFolder(root)
    rows = {"original": {"prep": "-", "size": original_size, "psnr": {n: float("inf") for n, _ in CROP_AREAS}}}
    datasets = {"original": lambda p: fastload.ImageFolder(root, transforms=p)}
    for name, options in [v for v in VARIANTS if v[0] in chosen]:
        dst = os.path.join(work, name.replace("/", "_"))
        shutil.rmtree(dst, ignore_errors=True)
        t = time.perf_counter()
        out = fastload.prepare(root, dst, samples_per_shard=256, num_workers=args.workers, progress=False, **options)
        prep = time.perf_counter() - t
        size = sum(s["size"] for s in out.manifest["shards"])
        rows[name] = {"prep": f"{prep / args.images * 1000:.1f}", "size": size,
                      "psnr": psnr_table(original, fastload.TarShards(dst), args.psnr_images)}
        datasets[name] = (lambda d: lambda p: fastload.TarShards(d, transforms=p))(dst)
        print(f"prepared {name}: {prep:.1f} s, {size / 1e6:.1f} MB", flush=True)

    contenders = [] if args.no_torch else [("torch+PIL (original)", lambda: torch_loader(root, args.workers, args.batch))]
    contenders += [(f"fastload ({name})", (lambda f: lambda: fastload_loader(f, args.workers, args.batch))(f))
                   for name, f in datasets.items()]
    results = {name: [] for name, _ in contenders}
    for r in range(args.rounds):
        order = contenders if r % 2 == 0 else contenders[::-1]
        for name, make in order:
            results[name].append(one_epoch(make))
            first_s, rate, _, cpu_ms = results[name][-1]
            print(f"round {r}: {name}: {rate:.0f} img/s, {cpu_ms:.2f} CPU ms/img, first batch {first_s:.2f} s",
                  flush=True)

    best = {name: max(r[1] for r in runs) for name, runs in results.items()}
    first = {name: min(r[0] for r in runs) for name, runs in results.items()}
    cpu = {name: min(r[3] for r in runs) for name, runs in results.items()}
    torch_rate, fl_original = best.get("torch+PIL (original)", math.nan), best["fastload (original)"]
    torch_cpu, fl_cpu = cpu.get("torch+PIL (original)", math.nan), cpu["fastload (original)"]
    print()
    print("| data | loader | img/s (best of %d) | vs torch+PIL | vs fastload on originals | CPU ms/img (least) | "
          "CPU vs torch+PIL / vs fastload on originals | first batch s | size MB (vs original) | "
          "prep s / 1,000 img | PSNR whole / 25%% / 8%% dB |" % args.rounds)
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        data_name = "original" if "original" in name else name.split("(")[1].rstrip(")")
        row = rows[data_name]
        psnr = " / ".join("inf" if math.isinf(v) else f"{v:.1f}" for v in row["psnr"].values())
        print(f"| {data_name} | {name.split(' (')[0]} | {best[name]:.0f} | {best[name] / torch_rate:.2f}x | "
              f"{best[name] / fl_original:.2f}x | {cpu[name]:.2f} | {torch_cpu / cpu[name]:.2f}x / "
              f"{fl_cpu / cpu[name]:.2f}x | {first[name]:.2f} | {row['size'] / 1e6:.1f} "
              f"({row['size'] / original_size:.2f}x) | {row['prep']} | {psnr} |")
    print(f"\npaths: " + ", ".join(f"{n}: {runs[0][2]}" for n, runs in results.items()))
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
