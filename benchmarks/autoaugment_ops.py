"""What each TrivialAugmentWide / RandAugment / AugMix op costs, one thread, beside
torchvision's own op on the same 224x224 image (measured in the same run): Pillow's for
the first two (fastload::auto_augment against torchvision's _apply_op on the PIL image),
the tensor path for AugMix (fastload::augmix_step against _apply_op on the uint8 tensor).

Input: a photo-like 224x224 RGB image (benchmarks/augment_micro.py's photo()). Figures:
median over `--rounds` rounds of `--iters` calls, thread CPU ms per call (the native
figure includes the op's argument checks and its output tensor).

    .venv/bin/python benchmarks/autoaugment_ops.py [--iters 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from augment_micro import photo  # noqa: E402

from fastload import ops  # noqa: E402
from fastload.augment.autoaugment import OPS  # noqa: E402

# (op, magnitude) at typical magnitudes of the spaces.
CASES = [("ShearX", 0.2), ("TranslateX", 30.0), ("Rotate", 12.0), ("Brightness", 0.3), ("Color", 0.3),
         ("Contrast", 0.3), ("Sharpness", 0.3), ("Posterize", 4.0), ("Solarize", 200.0), ("AutoContrast", 0.0),
         ("Equalize", 0.0)]


def cpu_ms(call, iters: int, rounds: int) -> float:
    figures = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(iters):
            call()
        figures.append((time.thread_time() - start) / iters * 1e3)
    return statistics.median(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op

    image = Image.fromarray(photo(224, 224).numpy())
    pixels = torch.from_numpy(np.array(image))
    tensor = pixels.permute(2, 0, 1).contiguous()
    print(f"one thread, ms per 224x224 op (median of {args.rounds} rounds of {args.iters})")
    print(f"{'op':<13} {'mode':<9} {'PIL fastload':>12} {'PIL tv':>8} {'tensor fastload':>15} {'tensor tv':>10}")
    for name, magnitude in CASES:
        op = OPS.index(name)
        for mode in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR):
            bilinear = mode == InterpolationMode.BILINEAR
            row = [cpu_ms(lambda: ops.auto_augment(pixels, [op], [magnitude], [], bilinear), args.iters, args.rounds),
                   cpu_ms(lambda: _apply_op(image, name, magnitude, mode, None), args.iters, args.rounds),
                   cpu_ms(lambda: ops.augmix_step(pixels, op, magnitude, bilinear), args.iters, args.rounds),
                   cpu_ms(lambda: _apply_op(tensor, name, magnitude, mode, None), args.iters, args.rounds)]
            print(f"{name:<13} {mode.value:<9} " + " ".join(f"{v:>{w}.3f}" for v, w in zip(row, (12, 8, 15, 10))))
            if name not in ("ShearX", "TranslateX", "Rotate"):
                break  # the mode is the affine ops' only


if __name__ == "__main__":
    main()
