"""What the fused colour ops cost, one thread: the batch op (the engine's fused pass) on
one sample per call, with and without ColorJitter(0.4, 0.4, 0.4, 0.1) / RandomGrayscale /
RandomErasing records, beside torchvision's PIL ColorJitter on the same 224x224 result
(the baseline, measured in the same run).

Input as benchmarks/augment_micro.py: a decoded 400x470 RGB photo-like image, a 300x300
box -> 224x224, ImageNet mean/std, float32 NCHW, sample i into slot i % 32. Figures:
median over `--rounds` rounds of `--iters` samples, thread CPU ms per image.

    .venv/bin/python benchmarks/color_fused.py [--iters 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from augment_micro import BOX, MEAN, SIZE, SLOTS, STD, photo  # noqa: E402

from fastload import _ext, ops  # noqa: E402
from fastload.augment import color, specs  # noqa: E402
from fastload.augment.plan import build_plan  # noqa: E402


def measure(fn, iters: int, rounds: int) -> float:
    for i in range(min(iters, 20)):
        fn(i)
    cpu = []
    for _ in range(rounds):
        start = time.thread_time()
        for i in range(iters):
            fn(i)
        cpu.append((time.thread_time() - start) / iters * 1e3)
    return statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    core = _ext.require_ops()
    image = photo(400, 470)
    packed = image.flatten()
    shapes = torch.tensor([[0, 400, 470, 470 * 3]])
    boxes = torch.tensor([BOX], dtype=torch.float32)
    flips = torch.tensor([True])
    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    out = torch.empty(SLOTS, 3, *SIZE)
    base = [specs.RandomResizedCrop(SIZE), specs.RandomHorizontalFlip(), specs.ToDtype(torch.float32, scale=True),
            specs.Normalize(MEAN, STD)]
    variants = {
        "no colour ops": None,
        "ColorJitter(0.4, 0.4, 0.4, 0.1)": base[:2] + [color.ColorJitter(0.4, 0.4, 0.4, 0.1)] + base[2:],
        "ColorJitter + RandomGrayscale(0.2)": base[:2] + [color.ColorJitter(0.4, 0.4, 0.4, 0.1),
                                                          color.RandomGrayscale(0.2)] + base[2:],
        "RandomErasing(p=1, value='random')": base + [color.RandomErasing(p=1.0, value="random")],
        "ColorJitter + RandomErasing(p=0.25)": base[:2] + [color.ColorJitter(0.4, 0.4, 0.4, 0.1)] + base[2:] +
                                               [color.RandomErasing(p=0.25)],
        # The split: the PIL stage (Pillow's fixed-point resample, a neutral jitter op),
        # then one jitter op at a time.
        "split: PIL-stage resample (neutral jitter)": base[:2] + [color.ColorJitter(brightness=(1.0, 1.0))] + base[2:],
        "split: brightness 0.4": base[:2] + [color.ColorJitter(brightness=0.4)] + base[2:],
        "split: contrast 0.4": base[:2] + [color.ColorJitter(contrast=0.4)] + base[2:],
        "split: saturation 0.4": base[:2] + [color.ColorJitter(saturation=0.4)] + base[2:],
        "split: hue 0.1": base[:2] + [color.ColorJitter(hue=0.1)] + base[2:],
    }
    records = {}
    for name, pipeline in variants.items():
        if pipeline is not None:
            plan = build_plan(pipeline, seed=1)
            records[name] = core.color_passes(plan, torch.arange(args.iters), 0)

    def run(name):
        record = records.get(name)

        def fn(i):
            slot = i % SLOTS
            ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1 / 255, mean, std,
                                                 out[slot:slot + 1],
                                                 color=None if record is None else record[i:i + 1])
        return fn

    print(f"fused pass, {SIZE[0]}x{SIZE[1]} float32 NCHW, one thread, thread CPU ms / image "
          f"(median of {args.rounds} x {args.iters}):")
    plain = measure(run("no colour ops"), args.iters, args.rounds)
    print(f"  {'no colour ops':44s} {plain:7.3f}")
    for name in list(variants)[1:]:
        ms = measure(run(name), args.iters, args.rounds)
        print(f"  {name:44s} {ms:7.3f}  (+{ms - plain:.3f})")

    # Baseline: torchvision's ColorJitter on the PIL image of the same size, same run.
    from PIL import Image
    import torchvision.transforms as T

    pil = Image.fromarray(image[40:340, 60:360].numpy()).resize(SIZE, Image.BILINEAR)
    jitter = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
    torch.manual_seed(0)
    ms = measure(lambda i: jitter(pil), args.iters, args.rounds)
    print(f"  baseline: torchvision ColorJitter(0.4, 0.4, 0.4, 0.1) on the 224x224 PIL image alone: {ms:.3f}")
    erase = T.RandomErasing(p=1.0, value="random")
    tensor = torch.rand(3, *SIZE)
    ms = measure(lambda i: erase(tensor), args.iters, args.rounds)
    print(f"  baseline: torchvision RandomErasing(p=1, value='random') on a 224x224 tensor alone: {ms:.3f}")


if __name__ == "__main__":
    main()
