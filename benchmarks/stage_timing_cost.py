"""What the engine's per-stage timing costs: the native train pipeline with the engine's
stage clocks on and off (BatchEngine.timing), interleaved in one process, CPU time per
image from the process clock.

    python benchmarks/stage_timing_cost.py [--data DIR] [--rounds 5] [--batches 12]

Without --data it uses fastload-bench's generated dataset (made on first use).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import fastload
from fastload import transforms as T


def cpu_ms_per_image(loader, batches: int) -> float:
    iterator = iter(loader)
    next(iterator)  # warm: buffers, page cache
    images, start = 0, time.process_time()
    for _ in range(batches):
        images += len(next(iterator)[0])
    spent = time.process_time() - start
    del iterator
    return 1e3 * spent / images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    if args.data is None:
        from fastload.bench.dataset import DatasetSpec, ensure_dataset

        args.data = ensure_dataset(DatasetSpec()).root
    dataset = fastload.ImageFolder(args.data, transforms=[
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = fastload.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=2, drop_last=True)
    engine = loader._runner._engine
    figures = {True: [], False: []}
    for _ in range(args.rounds):
        for timing in (True, False):
            engine.timing = timing
            figures[timing].append(cpu_ms_per_image(loader, args.batches))
    on, off = statistics.median(figures[True]), statistics.median(figures[False])
    print(f"CPU ms/img, median of {args.rounds} interleaved rounds of {args.batches} batches of {args.batch_size}:")
    print(f"  timing on  {on:.3f}   ({', '.join(f'{v:.3f}' for v in figures[True])})")
    print(f"  timing off {off:.3f}   ({', '.join(f'{v:.3f}' for v in figures[False])})")
    print(f"  cost: {100 * (on - off) / off:+.2f}% (the rounds' own spread: "
          f"{100 * (max(figures[False]) - min(figures[False])) / off:.1f}%)")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
