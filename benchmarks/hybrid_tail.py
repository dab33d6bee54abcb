"""The Python tail of a hybrid pipeline: where to run it, and what it receives.

The recipe [RandomResizedCrop(224), RandomHorizontalFlip(), TrivialAugmentWide(),
ToTensor(), Normalize(m, s), RandomErasing(0.1)] has a native prefix (crop, flip) and a
Python tail (the rest). Measured on the bench's generated ImageNet-like JPEGs, batch 64,
the same number of cores for every contender (--workers):

- torch: torch's DataLoader + torchvision ImageFolder + PIL, --workers worker processes
  (the baseline);
- inline: fastload's hybrid runner, --workers engine threads, the tail on the consumer
  thread (per-sample seeds: reproducible);
- threads: the same, the tail on a pool of --workers Python threads;
- processes: --workers worker processes (ProcessHybridRunner), each making whole batches
  with its own engine (one thread) and the tail inline;
- inline-tensor: inline with tail_input="tensor" and the v2 twin of the tail (v2.ToDtype
  instead of ToTensor), to price the PIL round trip.

Each contender runs --rounds times, interleaved, one epoch each (the first batch, which
pays start-up, not counted); the median img/s is reported, with the baseline's beside it,
and the CPU time per image (all threads and worker processes, start-up included): on a
machine shared with other work, wall-clock rates move with the load, CPU time much less.
--compare also reports how far tail_input="tensor" is from "pil" on the same crops and seeds.

    .venv/bin/python benchmarks/hybrid_tail.py [--images 2000] [--workers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from torchvision import datasets
from torchvision import transforms as T
from torchvision.transforms import v2

import fastload
from fastload.augment.plan import build_plan
from fastload.bench.dataset import DatasetSpec, ensure_dataset
from fastload.native.feed import NativeFeed
from fastload.native.hybrid import HybridRunner, ProcessHybridRunner

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BATCH = 64


def recipe():
    return [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.TrivialAugmentWide(), T.ToTensor(),
            T.Normalize(MEAN, STD), T.RandomErasing(0.1)]


def recipe_tensor():
    """The same recipe for uint8 tensors (v2.ToDtype: ToTensor does not convert tensors)."""
    return [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), v2.TrivialAugmentWide(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.1)]


def batches_of(n: int, epoch: int):
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch)).tolist()
    return [order[i:i + BATCH] for i in range(0, n, BATCH)]


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished child processes:
    a cost that other load on the machine does not inflate as it does wall time."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(iterable) -> float:
    """img/s of one epoch, from the end of the first batch to the end of the last."""
    images, start = 0, None
    for batch in iterable:
        if start is None:
            start = time.perf_counter()
            continue
        images += len(batch[1])
    return images / (time.perf_counter() - start)


def run_torch(root: str, workers: int, epoch: int) -> float:
    dataset = datasets.ImageFolder(root, transform=T.Compose(recipe()))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(epoch))
    return timed(loader)


def run_runner(root: str, workers: int, epoch: int, parallel: str, tail_input: str = "pil") -> float:
    transforms = recipe() if tail_input == "pil" else recipe_tensor()
    dataset = fastload.ImageFolder(root, transforms=transforms)
    dataset.tail_input = tail_input
    runner = HybridRunner(dataset.index, build_plan(dataset.transforms), dataset.python_tail(),
                          num_threads=workers, parallel=parallel)
    try:
        return timed(batch for batch, _ in NativeFeed(runner, iter(batches_of(len(dataset), epoch)), epoch, depth=2))
    finally:
        runner.close()


def run_processes(root: str, workers: int, epoch: int) -> float:
    dataset = fastload.ImageFolder(root, transforms=recipe())
    runner = ProcessHybridRunner(dataset.index, build_plan(dataset.transforms), dataset.python_tail(),
                                 num_threads=workers)
    try:
        return timed(batch for batch, _ in NativeFeed(runner, iter(batches_of(len(dataset), epoch)), epoch, depth=2))
    finally:
        runner.close()


def compare_inputs(root: str, samples: int = 64) -> str:
    """Differences of tail_input="tensor" from "pil" on the same crops and seeds, after
    v2.TrivialAugmentWide alone (uint8 levels) and after the whole tensor recipe."""
    pil = fastload.ImageFolder(root, transforms=[T.RandomResizedCrop(224), v2.TrivialAugmentWide(), v2.PILToTensor()])
    ten = fastload.ImageFolder(root, transforms=[T.RandomResizedCrop(224), v2.TrivialAugmentWide()])
    ten.tail_input = "tensor"
    runners = [HybridRunner(d.index, build_plan(d.transforms), d.python_tail()) for d in (pil, ten)]
    a, b = (r.result(r.submit(list(range(samples)), 0))[0] for r in runners)
    for r in runners:
        r.close()
    diff = (a.int() - b.int()).abs()
    same = (diff.flatten(1).amax(1) == 0).float().mean().item()
    return (f"v2.TrivialAugmentWide on PIL vs uint8 tensor, same crops and seeds, {samples} samples: "
            f"{same:.0%} identical; mean |diff| {diff.float().mean():.2f} levels, "
            f"max {diff.max().item()}, 99th percentile {diff.float().quantile(0.99).item():.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)  # the bench's cached default
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--contenders", default="torch,inline,threads,processes,inline-tensor")
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    data = ensure_dataset(DatasetSpec(images=args.images))
    print(data.describe(), f"| batch {BATCH}, {args.workers} workers/threads, torch {torch.__version__}, "
          f"torch threads {torch.get_num_threads()}")
    runs = {
        "torch": lambda e: run_torch(data.root, args.workers, e),
        "inline": lambda e: run_runner(data.root, args.workers, e, "inline"),
        "threads": lambda e: run_runner(data.root, args.workers, e, "threads"),
        "processes": lambda e: run_processes(data.root, args.workers, e),
        "inline-tensor": lambda e: run_runner(data.root, args.workers, e, "inline", "tensor"),
    }
    names = args.contenders.split(",")
    figures = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names:
            before = cpu_seconds()
            figures[name].append(runs[name](round_))
            cpu[name].append((cpu_seconds() - before) / data.num_images * 1e3)
            print(f"  round {round_} {name:14s} {figures[name][-1]:7.1f} img/s {cpu[name][-1]:6.2f} CPU ms/img",
                  flush=True)
    base = statistics.median(figures["torch"]) if "torch" in figures else None
    base_cpu = statistics.median(cpu["torch"]) if "torch" in cpu else None
    print(f"{'contender':14s} {'img/s':>8s} {'vs torch':>9s} {'CPU ms/img':>11s} {'torch/this':>11s}")
    for name in names:
        value, ms = statistics.median(figures[name]), statistics.median(cpu[name])
        print(f"{name:14s} {value:8.1f} {value / base if base else float('nan'):8.2f}x {ms:11.2f} "
              f"{base_cpu / ms if base_cpu else float('nan'):10.2f}x")
    if args.compare:
        print(compare_inputs(data.root))


if __name__ == "__main__":
    torch.set_num_threads(1)  # intra-op threads would take cores from the --workers compared
    main()
