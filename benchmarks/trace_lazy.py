"""What tracing a Dataset of the user's own class costs at ImageNet scale: construction,
first batch, and the tracer's CPU per sample against the engine's.

    python benchmarks/trace_lazy.py [--samples 1281167] [--files 100] [--batch 256] [--threads 2] [--batches 40]

A synthetic Dataset lists `--samples` paths cycling over `--files` 500x375 JPEGs (so the
tracer sees an ImageNet-length dataset without ImageNet), Image.open(path).convert("RGB")
+ torchvision's eval transform (Resize 256, CenterCrop 224, ToTensor, Normalize) +
(image, label). Prints:
  - construction: fastload.DataLoader(dataset, ...) (the probes) and the __getitem__ calls
    it made;
  - first batch: iter() + next() (the first batches traced as they are submitted);
  - tracing CPU per sample: the time LazyTrace.prepare spent (stats()["native"]["traced"])
    over `--batches` batches divided by the samples it traced; the engine's CPU per sample
    (stats()["cpu_s"] / images, all engine threads); their ratio;
  - a second epoch: iter() again (the trace renewed: the probes run again, undone) and
    `--batches` batches, every served index traced again (a trace holds for one epoch);
  - the up-front trace of every index this replaces (timed over 20k indexes, scaled).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

import fastload
from fastload import trace as trace_lazy


class Listed(torch.utils.data.Dataset):
    def __init__(self, files, n):
        self.paths = [files[i % len(files)] for i in range(n)]
        self.labels = [i % 1000 for i in range(n)]
        self.transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
        self.calls = 0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        self.calls += 1
        image = Image.open(self.paths[i]).convert("RGB")
        return self.transform(image), self.labels[i]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_281_167)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    files = []
    for k in range(args.files):
        path = os.path.join(folder, f"n{k // 10:03d}", f"{k:04d}.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # ImageNet's typical size (500x375), smooth content (JPEG sizes near photographs')
        y, x = np.mgrid[0:375, 0:500]
        pixels = np.stack([(x + 3 * k) % 256, (y + 5 * k) % 256, (x + y) // 4 % 256], -1).astype(np.uint8)
        Image.fromarray(pixels).save(path, quality=90)
        files.append(path)
    dataset = Listed(files, args.samples)
    fastload.DataLoader(Listed(files, 100), batch_size=8)  # imports and first-use costs, not timed

    start = time.perf_counter()
    loader = fastload.DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.threads, seed=0)
    built = time.perf_counter() - start
    calls = dataset.calls
    print(f"path: {loader.path}")
    print(f"construction: {built * 1e3:.0f} ms, {calls} __getitem__ calls ({args.samples} samples)")
    other = Listed(files, args.samples)
    start = time.perf_counter()
    trace_lazy.probe(other)
    print(f"  of which the probes and the index arrays (probe() on a fresh dataset object): "
          f"{(time.perf_counter() - start) * 1e3:.0f} ms")
    del other
    for epoch in range(2):
        start = time.perf_counter()
        it = iter(loader)
        renewed = time.perf_counter() - start
        next(it)
        first = time.perf_counter() - start
        print(f"epoch {epoch}: iter() {renewed * 1e3:.0f} ms (the trace renewed: probes again, undone), first "
              f"batch {first * 1e3:.0f} ms (iter + next, {args.batch} samples per batch)")
        before = loader.stats()["native"]["traced"]
        for _ in range(args.batches - 1):
            next(it)
        stats = loader.stats()
        traced = stats["native"]["traced"]
        spent = (traced["trace_s"] - (before["trace_s"] if epoch else 0.0),
                 traced["traced_total"] - (before["traced_total"] if epoch else 0))
        images, cpu = stats["native"]["images"], stats["native"]["cpu_s"]
        per_trace = spent[0] / max(1, spent[1])
        per_native = cpu / max(1, images)
        print(f"  tracing: {spent[1]} samples in {spent[0] * 1e3:.0f} ms = {per_trace * 1e6:.1f} us/sample; "
              f"engine: {images} images so far, {cpu:.2f} s CPU = {per_native * 1e6:.0f} us/sample; tracing / "
              f"engine CPU per sample: {100 * per_trace / per_native:.2f} %")
        del it
    print(f"__getitem__ calls the dataset object saw: {dataset.calls} (num_workers={args.threads}: torch's "
          "calls are made in its workers' copies, so are undone here)")
    del loader

    # The same files and pipeline without a trace (fastload.FileList): the first batch's
    # cost apart from tracing.
    from fastload import transforms as FT
    listed = fastload.FileList(dataset.paths, dataset.labels, transforms=[
        FT.Resize(256), FT.CenterCrop(224), FT.ToDtype(torch.float32, scale=True),
        FT.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    start = time.perf_counter()
    plain = fastload.DataLoader(listed, batch_size=args.batch, shuffle=True, num_workers=args.threads, seed=0)
    built_plain = time.perf_counter() - start
    start = time.perf_counter()
    next(iter(plain))
    print(f"untraced FileList of the same paths: construction {built_plain * 1e3:.0f} ms, first batch "
          f"{(time.perf_counter() - start) * 1e3:.0f} ms")
    del plain

    # What the up-front trace of every index cost: the same tracer over 20k indexes, scaled.
    from fastload import trace as _t
    fresh = Listed(files, args.samples)
    sample = min(20_000, args.samples)
    start = time.perf_counter()
    with _t.tracing_patches():
        for i in range(sample):
            _t.sample_of_call(fresh, *_t.record(fresh, i))
    every = (time.perf_counter() - start) / sample
    print(f"up-front trace of every index (before): {every * 1e6:.1f} us/sample, "
          f"{every * args.samples:.1f} s for {args.samples} samples")


if __name__ == "__main__":
    main()
