"""Datasets that stay on the generic path, torch's DataLoader against fastload's, paired.

    PYTHONPATH=. python benchmarks/generic_shapes.py [--data DIR] [--images 512] [--rounds 6] [--workers 2]

fastload.DataLoader runs such a dataset through torch's own DataLoader (fastload/generic.py):
it should cost what torch's costs. On a shared machine one run of each says little (the
load swings by more than the difference sought), so this alternates them: each round
runs one pass of `--images` samples (a Subset of the first ones, shuffled, batch 64,
`--workers` worker processes started in the pass) with torch's loader, then with
fastload's (the order flips every round), and reports per shape the median over rounds
of fastload's wall time over torch's and of their CPU time (this process and its
reaped workers). The shapes are fastload-bench's generic ones (fastload/bench/shapes.py:
shape-numpy, shape-random, shape-npy) on the images `fastload-bench` generates, or `--data`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from timing import cpu_seconds


def one_pass(make_loader, dataset, images: int, workers: int, seed: int):
    subset = torch.utils.data.Subset(dataset, range(min(images, len(dataset))))
    loader = make_loader(subset, batch_size=64, shuffle=True, num_workers=workers,
                         generator=torch.Generator().manual_seed(seed))
    wall, cpu = time.perf_counter(), cpu_seconds()
    count = sum(len(batch[1]) for batch in loader)
    del loader  # (its workers are joined and reaped: their CPU counts)
    return time.perf_counter() - wall, cpu_seconds() - cpu, count


def main() -> None:
    import fastload
    from fastload.bench import shapes
    from fastload.bench.dataset import DatasetSpec, ensure_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(shapes.GENERIC))
    args = parser.parse_args()
    root = args.data or ensure_dataset(DatasetSpec(images=2000, classes=10, seed=0)).root
    print(f"data: {root}; {args.images} images per pass, {args.rounds} rounds, {args.workers} workers; "
          f"load average {os.getloadavg()[0]:.1f} at start")
    for name in args.shapes.split(","):
        dataset = shapes.SHAPES[name](root)
        path = fastload.DataLoader(dataset, batch_size=64).path
        walls, cpus = [], []
        for k in range(args.rounds):
            order = [("torch", torch.utils.data.DataLoader), ("fastload", fastload.DataLoader)]
            if k % 2:
                order.reverse()
            got = {who: one_pass(make, dataset, args.images, args.workers, seed=k) for who, make in order}
            assert got["torch"][2] == got["fastload"][2]
            walls.append(got["fastload"][0] / got["torch"][0])
            cpus.append(got["fastload"][1] / got["torch"][1])
            print(f"  {name} round {k}: torch {got['torch'][2] / got['torch'][0]:.0f} img/s, "
                  f"fastload {got['fastload'][2] / got['fastload'][0]:.0f} img/s")
        print(f"{name}: fastload/torch wall time median {statistics.median(walls):.3f} "
              f"(min {min(walls):.3f}, max {max(walls):.3f}); CPU time median {statistics.median(cpus):.3f}; "
              f"load average {os.getloadavg()[0]:.1f}\n  path: {path}")


if __name__ == "__main__":
    main()
