"""Hybrid pipelines against torch's DataLoader: torchvision's training recipes with an auto-augmentation.

The recipes are torchvision's reference ClassificationPresetTrain (references/classification/
presets.py, backend "pil", v1 transforms; the copy in fastload.bench.recipes) with an auto_augment_policy:

- ta_wide+erase: RandomResizedCrop(224), RandomHorizontalFlip, TrivialAugmentWide,
  PILToTensor, ConvertImageDtype, Normalize, RandomErasing(0.1);
- ra: the same with RandAugment and no RandomErasing;
- augmix: the same with AugMix.

Each runs on one torchvision ImageFolder (the bench's generated ImageNet-like JPEGs),
batch 64, --workers for every contender:

- torch: torch.utils.data.DataLoader, --workers worker processes (the baseline);
- fastload: fastload.DataLoader on the same dataset object (the hybrid path: the engine
  runs the crop and flip, the rest runs per sample in Python), where the loader puts
  the tail by default (`--tail-on` picks another for the contenders "inline",
  "threads", "processes": the tail on the consumer thread, on a pool of Python threads,
  or whole batches in worker processes);
- tensor: a fastload.ImageFolder with the recipe's v2 twin and tail_input="tensor" (the
  tail on the engine's uint8 tensors, no PIL round trip), inline.

Each contender runs --rounds times, interleaved, one epoch each (the first batch, which
pays start-up, not counted); the median img/s is reported with the baseline's beside it,
and the CPU time per image (all threads and worker processes, start-up included): on a
machine shared with other work wall-clock rates move with the load, CPU time much less.
--compare also reports how far the tail on uint8 tensors is from the tail on PIL images
on the same crops and seeds.

    .venv/bin/python benchmarks/hybrid_tail.py [--images 2000] [--workers 2] [--rounds 2]
        [--recipes ta_wide+erase,ra,augmix] [--contenders torch,fastload,inline,processes]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from torchvision import datasets
from torchvision import transforms as T

import fastload
from fastload.bench.dataset import DatasetSpec, ensure_dataset
from fastload.bench.recipes import ClassificationPresetTrain

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BATCH = 64


RECIPES = {
    "ta_wide+erase": dict(auto_augment_policy="ta_wide", random_erase_prob=0.1),
    "ra": dict(auto_augment_policy="ra"),
    "augmix": dict(auto_augment_policy="augmix"),
}


def dataset_of(root: str, recipe: str) -> datasets.ImageFolder:
    return datasets.ImageFolder(root, transform=ClassificationPresetTrain(crop_size=224, **RECIPES[recipe]))


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


def run_torch(root: str, recipe: str, workers: int, epoch: int) -> float:
    loader = torch.utils.data.DataLoader(dataset_of(root, recipe), batch_size=BATCH, shuffle=True,
                                         num_workers=workers, generator=torch.Generator().manual_seed(epoch))
    return timed(loader)


def run_fastload(root: str, recipe: str, workers: int, epoch: int, tail_on: str = "auto") -> float:
    from fastload.native import hybrid, select

    # No loader argument chooses where the tail runs: the benchmark swaps the default.
    if tail_on != "auto":
        select.hybrid_runner = lambda *args, **kwargs: hybrid.hybrid_runner(*args, **{**kwargs, "tail_on": tail_on})
    try:
        loader = fastload.DataLoader(dataset_of(root, recipe), batch_size=BATCH, shuffle=True, num_workers=workers,
                                     generator=torch.Generator().manual_seed(epoch))
    finally:
        select.hybrid_runner = hybrid.hybrid_runner
    assert loader.path.startswith("hybrid: "), loader.path
    try:
        return timed(loader)
    finally:
        loader.close()


def tensor_twin(recipe: str) -> list:
    """The recipe for a tail on uint8 tensors: v2 transforms, v2.ToDtype for the
    PILToTensor + ConvertImageDtype pair (which do not take tensors)."""
    from torchvision.transforms import v2

    options = RECIPES[recipe]
    augment = {"ta_wide": lambda: v2.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
               "ra": lambda: v2.RandAugment(interpolation=T.InterpolationMode.BILINEAR),
               "augmix": lambda: v2.AugMix(interpolation=T.InterpolationMode.BILINEAR)}[options["auto_augment_policy"]]
    out = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), augment(), v2.ToDtype(torch.float32, scale=True),
           v2.Normalize(MEAN, STD)]
    if options.get("random_erase_prob"):
        out.append(v2.RandomErasing(options["random_erase_prob"]))
    return out


def run_tensor_tail(root: str, recipe: str, workers: int, epoch: int) -> float:
    dataset = fastload.ImageFolder(root, transforms=tensor_twin(recipe))
    dataset.tail_input = "tensor"  # (a NativeDataset argument; ImageFolder keeps it as an attribute)
    loader = fastload.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers,
                                 generator=torch.Generator().manual_seed(epoch))
    assert "on uint8 tensors" in loader.path, loader.path
    try:
        return timed(loader)
    finally:
        loader.close()


def compare_inputs(root: str, recipe: str, samples: int = 64) -> str:
    """How far the tail on uint8 tensors is from the tail on PIL images, same crops and seeds."""
    from fastload.augment.plan import build_plan
    from fastload.adapters import convert as convert_dataset
    from fastload.native.hybrid_local import HybridRunner
    from fastload.augment.tail import Tail

    conversion = convert_dataset(dataset_of(root, recipe))
    pil = conversion.python_tail()
    tensor = Tail(pil.transforms[:1], input="tensor")  # the augmentation alone, on the prefix's tensor
    plan = build_plan(list(conversion.pipeline.native), seed=0)
    outputs = []
    for tail in (Tail(pil.transforms[:2], input="pil"), tensor):  # (PILToTensor after it on PIL images)
        runner = HybridRunner(conversion.index, plan, tail)
        outputs.append(runner.result(runner.submit(list(range(samples)), 0))[0])
        runner.close()
    diff = (outputs[0].int() - outputs[1].int()).abs()
    same = (diff.flatten(1).amax(1) == 0).float().mean().item()
    return (f"{recipe}: {type(pil.transforms[0]).__name__} on PIL vs uint8 tensor, same crops and seeds, {samples} "
            f"samples: {same:.0%} identical; mean |diff| {diff.float().mean():.2f} levels, pixels > 1 level apart "
            f"{(diff > 1).float().mean().item():.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)  # the bench's cached default
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--contenders", default="torch,fastload")
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    data = ensure_dataset(DatasetSpec(images=args.images))
    print(data.describe(), f"| batch {BATCH}, {args.workers} workers, torch {torch.__version__}, "
          f"torch threads {torch.get_num_threads()}")
    runs = {
        "torch": lambda r, e: run_torch(data.root, r, args.workers, e),
        "fastload": lambda r, e: run_fastload(data.root, r, args.workers, e),
        "inline": lambda r, e: run_fastload(data.root, r, args.workers, e, "inline"),
        "threads": lambda r, e: run_fastload(data.root, r, args.workers, e, "threads"),
        "processes": lambda r, e: run_fastload(data.root, r, args.workers, e, "processes"),
        "tensor": lambda r, e: run_tensor_tail(data.root, r, args.workers, e),
    }
    names = args.contenders.split(",")
    rows = []
    for recipe in args.recipes.split(","):
        figures = {name: [] for name in names}
        cpu = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names:
                before = cpu_seconds()
                figures[name].append(runs[name](recipe, round_))
                cpu[name].append((cpu_seconds() - before) / data.num_images * 1e3)
                print(f"  {recipe} round {round_} {name:10s} {figures[name][-1]:7.1f} img/s "
                      f"{cpu[name][-1]:6.2f} CPU ms/img", flush=True)
        base = statistics.median(figures["torch"]) if "torch" in figures else None
        base_cpu = statistics.median(cpu["torch"]) if "torch" in cpu else None
        for name in names:
            value, ms = statistics.median(figures[name]), statistics.median(cpu[name])
            rows.append(f"{recipe:14s} {name:10s} {value:8.1f} {value / base if base else float('nan'):8.2f}x "
                        f"{ms:11.2f} {base_cpu / ms if base_cpu else float('nan'):10.2f}x")
    print(f"{'recipe':14s} {'contender':10s} {'img/s':>8s} {'vs torch':>9s} {'CPU ms/img':>11s} {'torch/this':>11s}")
    print("\n".join(rows))
    if args.compare:
        for recipe in args.recipes.split(","):
            print(compare_inputs(data.root, recipe))


if __name__ == "__main__":
    torch.set_num_threads(1)  # intra-op threads would take cores from the --workers compared
    main()
