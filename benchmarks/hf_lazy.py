"""What a Hugging Face dataset's set-up costs at ImageNet length: construction, first
batch, and the tracer's CPU per sample (header read + the dataset's formatting traced)
against the engine's.

    python benchmarks/hf_lazy.py [--samples 1281167] [--files 100] [--batch 256] [--threads 2] [--batches 40]
                                 [--noise 20] [--form arrow|paths]

`--files` 500x375 JPEGs (ImageNet's typical size and, with --noise 20, near its mean file
size) are saved as image bytes in an Arrow cache file (`save_to_disk` / `load_from_disk`);
`select` of `--samples` positions cycling over them gives an ImageNet-length dataset (an
indices mapping, as shuffle/select/filter make) without ImageNet's 140 GB. `--form paths`:
a table of `--samples` rows naming the files instead (load_dataset("imagefolder")'s
layout). `set_transform` of torchvision's eval transform (Resize 256, CenterCrop 224,
ToTensor, Normalize) as Hugging Face's examples write it. Prints:
  - construction: fastload.DataLoader(dataset, ...) and the rows the function saw;
  - first batch: iter() + next();
  - tracing CPU per sample: HFLazyTrace.prepare's time (trace_s) over `--batches` batches
    divided by the samples it traced; the engine's CPU per sample (stats()["cpu_s"] /
    images, all engine threads); their ratio;
  - the same files and pipeline as a fastload.FileList (no Hugging Face, no trace);
  - the up-front header read + trace of every row this replaces (timed over 20k rows, scaled).
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time

import datasets
import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

import fastload

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def make(where: str, files: int, samples: int, seen: list, paths: list = None) -> datasets.Dataset:
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])

    def transforms(examples):
        seen[0] += len(examples["image"])
        examples["pixel_values"] = [tf(image.convert("RGB")) for image in examples["image"]]
        del examples["image"]
        return examples

    if paths:  # a table of image paths, one row per sample (load_dataset("imagefolder")'s layout)
        dataset = datasets.Dataset.from_dict({"image": [paths[i % files] for i in range(samples)],
                                              "label": [i % 10 for i in range(samples)]})
        dataset = dataset.cast_column("image", datasets.Image())
    else:
        dataset = datasets.load_from_disk(where)
        dataset = dataset.select(np.arange(samples) % files)
    dataset.set_transform(transforms)
    return dataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_281_167)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--noise", type=float, default=20.0)
    parser.add_argument("--form", choices=("arrow", "paths"), default="arrow")
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    photos, paths = [], []
    for k in range(args.files):
        # ImageNet's typical size (500x375); --noise adds texture: 20 gives ~96 KB JPEGs
        # (ImageNet's mean is ~110 KB), 0 smooth ones (~17 KB, decoded faster)
        y, x = np.mgrid[0:375, 0:500]
        pixels = np.stack([(x + 3 * k) % 256, (y + 5 * k) % 256, (x + y) // 4 % 256], -1).astype(np.float32)
        pixels += rng.normal(0, args.noise, pixels.shape) if args.noise else 0
        pixels = pixels.clip(0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="JPEG", quality=90)
        photos.append(out.getvalue())
        paths.append(os.path.join(folder, f"{k:04d}.jpg"))
        with open(paths[-1], "wb") as f:
            f.write(photos[-1])
    where = os.path.join(folder, "arrow")
    datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in photos],
                                "label": [k % 10 for k in range(args.files)]},
                               features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
                               ).save_to_disk(where)
    seen = [0]
    fastload.DataLoader(make(where, args.files, 100, [0]), batch_size=8)  # imports and first-use costs, not timed

    start = time.perf_counter()
    table = paths if args.form == "paths" else None
    dataset = make(where, args.files, args.samples, seen, table)
    made = time.perf_counter() - start
    where_ = "a table of their paths (from_dict + cast_column" if table else \
        "one Arrow cache file (load_from_disk + select"
    print(f"dataset: {len(dataset)} samples over {args.files} JPEGs of {np.mean([len(p) for p in photos]) / 1e3:.0f} KB "
          f"in {where_} + set_transform: {made * 1e3:.0f} ms, not counted)")
    start = time.perf_counter()
    loader = fastload.DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.threads, seed=0)
    built = time.perf_counter() - start
    print(f"path: {loader.path}")
    print(f"construction: {built * 1e3:.0f} ms, {seen[0]} rows traced ({args.samples} samples)")
    start = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - start
    print(f"first batch: {first * 1e3:.0f} ms (iter + next, {args.batch} samples per batch)")
    for _ in range(args.batches - 1):
        next(it)
    trace = loader._runner._labels  # the loader's HFLazyTrace
    spent = (trace.trace_s, trace.traced_lazily)
    stats = loader.stats()
    native = stats.get("native") or stats
    images, cpu = native["images"], native["cpu_s"]
    per_trace = spent[0] / max(1, spent[1])
    per_native = cpu / max(1, images)
    print(f"tracing: {spent[1]} samples in {spent[0] * 1e3:.0f} ms = {per_trace * 1e6:.1f} us/sample")
    print(f"engine: {images} images, {cpu:.2f} s CPU = {per_native * 1e6:.0f} us/sample")
    print(f"tracing / engine CPU per sample: {100 * per_trace / per_native:.2f} %")
    del it, loader

    # The same files and pipeline without Hugging Face or a trace (fastload.FileList).
    from fastload import transforms as FT
    listed = fastload.FileList([paths[i % args.files] for i in range(args.samples)],
                               [i % 10 for i in range(args.samples)], transforms=[
        FT.Resize(256), FT.CenterCrop(224), FT.ToDtype(torch.float32, scale=True), FT.Normalize(MEAN, STD)])
    start = time.perf_counter()
    plain = fastload.DataLoader(listed, batch_size=args.batch, shuffle=True, num_workers=args.threads, seed=0)
    built_plain = time.perf_counter() - start
    start = time.perf_counter()
    next(iter(plain))
    print(f"untraced FileList of the same JPEGs: construction {built_plain * 1e3:.0f} ms, first batch "
          f"{(time.perf_counter() - start) * 1e3:.0f} ms")
    del plain, listed

    # What the up-front header read + trace of every row cost (what construction did):
    # the same work over 20k rows of a fresh analysis, scaled.
    from fastload.adapters import analyse
    fresh = analyse(make(where, args.files, args.samples, [0], table)).trace
    rows = min(20_000, args.samples)
    start = time.perf_counter()
    fresh.trace_all(chunk=rows) if rows == args.samples else fresh.prepare(range(rows))
    every = (time.perf_counter() - start) / rows
    print(f"up-front header read + trace of every row (before): {every * 1e6:.1f} us/sample, "
          f"{every * args.samples:.1f} s for {args.samples} samples")


if __name__ == "__main__":
    main()
