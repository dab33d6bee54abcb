"""Augment micro-benchmark, one thread: fastload's fused crop_resize_flip_normalize
beside torch (interpolate antialias + normalize) and PIL (resize with box + ToTensor +
Normalize) on the same crop, same run.

The image is a decoded ~ImageNet-sized photo-like 400x470 RGB (what the decoder hands
the kernel); the crop a 300x300 box at a fractional offset; the output 224x224, flipped,
ImageNet mean/std. fastload writes each sample into its own slot of a 32-slot batch
tensor (as the batch engine does: output streams to memory, the input is hot in cache
after its decode); the baselines allocate their outputs, as they do in a pipeline.
Figures: median over `--rounds` rounds of `--iters` images, ms per image, thread CPU
time (robust to other processes on a shared machine) and wall time.

    .venv/bin/python benchmarks/augment_micro.py [--iters 200] [--rounds 5] [--json PATH]

`--isa baseline` runs fastload's loops compiled for plain x86-64 (FASTLOAD_NO_AVX2=1),
in a child process; by default both are measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

from fastload import ops

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BOX = (40.5, 60.25, 300.0, 300.0)  # top, left, height, width
SIZE = (224, 224)
SLOTS = 32


def photo(height: int, width: int) -> torch.Tensor:
    """uint8 [H, W, 3]: smooth gradients, edges and noise, like a decoded photo."""
    gen = torch.Generator().manual_seed(0)
    y = torch.linspace(0, 1, height)[:, None, None]
    x = torch.linspace(0, 1, width)[None, :, None]
    c = torch.arange(3)[None, None, :]
    image = 127 + 90 * torch.sin(9 * x + 5 * y * (c + 1)) + torch.randint(-25, 26, (height, width, 3), generator=gen)
    image[height // 3 : height // 2, width // 4 : width // 2] = torch.tensor([200, 40, 90])
    return image.clamp(0, 255).to(torch.uint8)


def measure(fn, iters: int, rounds: int):
    """(cpu_ms, wall_ms) per call: medians over rounds."""
    for i in range(min(iters, 20)):  # warm-up
        fn(i)
    cpu, wall = [], []
    for _ in range(rounds):
        c0, w0 = time.thread_time(), time.perf_counter()
        for i in range(iters):
            fn(i)
        cpu.append((time.thread_time() - c0) / iters * 1e3)
        wall.append((time.perf_counter() - w0) / iters * 1e3)
    return statistics.median(cpu), statistics.median(wall)


def fastload_rows(image: torch.Tensor, iters: int, rounds: int):
    """fastload batch op, one sample per call into slot i % SLOTS, per dtype and layout."""
    height, width, _ = image.shape
    packed = image.flatten()
    shapes = torch.tensor([[0, height, width, width * 3]])
    boxes = torch.tensor([BOX], dtype=torch.float32)
    flips = torch.ones(1, dtype=torch.bool)
    mean_u8, std_u8 = torch.zeros(3), torch.ones(3)
    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    rows = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.uint8):
        for layout in ("NCHW", "NHWC"):
            batch = torch.empty(SLOTS, 3, *SIZE, dtype=dtype)
            if layout == "NHWC":
                batch = batch.contiguous(memory_format=torch.channels_last)
            # uint8 output: plain values (ToDtype-less pipelines); floats: ToTensor + Normalize.
            scale, m, s = (1.0, mean_u8, std_u8) if dtype == torch.uint8 else (1 / 255, mean, std)

            def run(i, batch=batch, scale=scale, m=m, s=s):
                ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, scale, m, s, batch[i % SLOTS : i % SLOTS + 1])

            rows.append((f"fastload {str(dtype).replace('torch.', '')} {layout}", *measure(run, iters, rounds)))
    # RandomResizedCrop's other extremes, float32 NCHW: a small crop (upscaled) and the
    # largest square one (1.8x down).
    batch = torch.empty(SLOTS, 3, *SIZE)
    for name, box in (("130x130 crop", (100.25, 150.5, 130, 130)), ("400x400 crop", (0, 35, 400, 400))):
        other = torch.tensor([box], dtype=torch.float32)

        def run(i, other=other):
            ops.crop_resize_flip_normalize_batch(packed, shapes, other, flips, 1 / 255, mean, std, batch[i % SLOTS : i % SLOTS + 1])

        rows.append((f"fastload float32 NCHW, {name}", *measure(run, iters, rounds)))
    return rows


def baseline_rows(image: torch.Tensor, iters: int, rounds: int):
    import torch.nn.functional as F
    from PIL import Image

    top, left, height, width = BOX
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    # torch needs an integer crop: the nearest one (the kernel's box is fractional).
    t, l, h, w = round(top), round(left), int(height), int(width)
    crop = image[t : t + h, l : l + w].permute(2, 0, 1)[None]

    def torch_uint8(_):
        # torchvision v2 on a uint8 tensor: resize (torch's uint8 AVX2 path), flip,
        # ToDtype(float32, scale=True), Normalize.
        out = F.interpolate(crop, size=SIZE, mode="bilinear", antialias=True)[0].flip(-1)
        return (out.float().div_(255) - mean) / std

    def torch_float(_):
        out = F.interpolate(crop.float(), size=SIZE, mode="bilinear", antialias=True)[0].flip(-1)
        return (out.div_(255) - mean) / std

    pil = Image.fromarray(image.numpy())

    def pil_pipeline(_):
        # torchvision v1: PIL resize of the box (float box, like the kernel), flip,
        # ToTensor, Normalize.
        out = pil.resize(SIZE[::-1], Image.BILINEAR, box=(left, top, left + width, top + height))
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
        tensor = torch.from_numpy(__import__("numpy").asarray(out).copy()).permute(2, 0, 1).float().div_(255)
        return (tensor - mean) / std

    return [
        ("torch interpolate(uint8, antialias) + float + normalize", *measure(torch_uint8, iters, rounds)),
        ("torch interpolate(float32, antialias) + normalize", *measure(torch_float, iters, rounds)),
        ("PIL resize(BILINEAR, box) + ToTensor + Normalize", *measure(pil_pipeline, iters, rounds)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--isa", choices=["both", "native", "baseline"], default="both",
                        help="fastload loop build: AVX2+FMA when the CPU has it (native), plain x86-64 (baseline)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    image = photo(400, 470)

    rows = []
    if args.isa in ("both", "native"):
        rows += fastload_rows(image, args.iters, args.rounds)
    if args.isa == "both":  # the baseline build in a child (the ISA is chosen once per process)
        child = subprocess.run(
            [sys.executable, __file__, "--isa", "baseline", "--iters", str(args.iters), "--rounds", str(args.rounds),
             "--quiet", "--json", "/dev/stdout"],
            env=dict(os.environ, FASTLOAD_NO_AVX2="1"), capture_output=True, text=True, check=True,
        )
        rows += [(name.replace("fastload", "fastload x86-64 baseline"), cpu, wall)
                 for name, cpu, wall in json.loads(child.stdout)]
    elif args.isa == "baseline":
        rows += fastload_rows(image, args.iters, args.rounds)
    if args.isa != "baseline":
        rows += baseline_rows(image, args.iters, args.rounds)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    if args.quiet:
        return
    print(f"augment micro-benchmark: 400x470 RGB, box {BOX} -> {SIZE[0]}x{SIZE[1]}, flip, one thread; "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"{'contender':58s} {'cpu ms/img':>10s} {'wall ms/img':>11s}")
    for name, cpu, wall in rows:
        print(f"{name:58s} {cpu:10.3f} {wall:11.3f}")


if __name__ == "__main__":
    main()
