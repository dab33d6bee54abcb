"""A batch_sampler on the native path: torch's DataLoader against fastload's, paired.

    PYTHONPATH=. python benchmarks/batch_sampler.py [--data DIR] [--images 512] [--rounds 6] [--workers 2]

A torchvision ImageFolder with the standard train transforms (RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize), batched by a `BatchSampler(RandomSampler, 64,
drop_last=False)`, as Accelerate's and other frameworks' rebuilt loaders are. fastload
follows the batch_sampler on the native path (before, a batch_sampler sent a loader to the
generic path: `accelerate=False` here measures that). On a shared machine one run of each
says little, so each round runs one pass of `--images` samples with each loader (the
order rotates every round; `--workers` worker processes or engine threads) and the report
gives per loader the median over rounds of its wall and CPU time (this process and its
reaped workers) over torch's in the same round.
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
    sampler = torch.utils.data.RandomSampler(subset, generator=torch.Generator().manual_seed(seed))
    loader = make_loader(subset, batch_sampler=torch.utils.data.BatchSampler(sampler, 64, False), num_workers=workers)
    wall, cpu = time.perf_counter(), cpu_seconds()
    count = sum(len(batch[1]) for batch in loader)
    del loader  # (its workers are joined and reaped: their CPU counts)
    return time.perf_counter() - wall, cpu_seconds() - cpu, count


def main() -> None:
    import torchvision
    from torchvision import transforms as T

    import fastload
    from fastload.bench.dataset import DatasetSpec, ensure_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    root = args.data or ensure_dataset(DatasetSpec(images=2000, classes=10, seed=0)).root
    dataset = torchvision.datasets.ImageFolder(root, transform=T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    loaders = {
        "torch": torch.utils.data.DataLoader,
        "fastload native": fastload.DataLoader,
        "fastload generic (accelerate=False)": lambda *a, **k: fastload.DataLoader(*a, accelerate=False, **k),
    }
    probe = fastload.DataLoader(dataset, batch_sampler=[[0, 1]])
    print(f"data: {root}; {args.images} images per pass, {args.rounds} rounds, {args.workers} workers; "
          f"load average {os.getloadavg()[0]:.1f} at start; fastload: {probe.path}")
    times = {name: [] for name in loaders}
    for k in range(args.rounds):
        names = list(loaders)[k % len(loaders):] + list(loaders)[:k % len(loaders)]
        for name in names:
            wall, cpu, count = one_pass(loaders[name], dataset, args.images, args.workers, seed=k)
            times[name].append((wall, cpu, count))
    base = times["torch"]
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    print("| loader | img/s (median) | wall vs torch (median ratio) | CPU vs torch (median ratio) |")
    print("|---|---|---|---|")
    for name, rows in times.items():
        rate = statistics.median(count / wall for wall, _, count in rows)
        wall_ratio = statistics.median(b[0] / r[0] for r, b in zip(rows, base))
        cpu_ratio = statistics.median(b[1] / r[1] for r, b in zip(rows, base))
        print(f"| {name} | {rate:.0f} | {wall_ratio:.2f}x | {cpu_ratio:.2f}x |")


if __name__ == "__main__":
    main()
