"""Detection images of their own sizes (torchvision's detection references): fastload against torch's DataLoader.

    PYTHONPATH=. python benchmarks/detection_sizes.py [--data DIR] [--images 640] [--batch 8] [--workers 2]
                                                      [--repeat 2] [--pipelines hflip,resize800]

`--data`: an ImageFolder tree of JPEGs (default: `--images` generated 500x375 photo-like JPEGs).
Pipelines: `hflip`, the references' "hflip" policy (RandomHorizontalFlip(0.5), PILToTensor,
ToDtype(float, scale=True), SanitizeBoundingBoxes); `resize800`, the same after
`Resize(800, max_size=1333)` (what GeneralizedRCNNTransform does, here in the data pipeline).
Each image has 4 boxes; batches are `tuple(zip(*batch))`, images of their own sizes.

Rows, alternating, best of `--repeat` epochs each: torch's DataLoader on a dataset of the
user's own class (PIL + tv_tensors.BoundingBoxes through one v2 Compose call), fastload's on
the same object (traced), fastload's on a `fastload.DetectionDataset` of the same files, and
`kernels`: the C++ decode and fused kernel called one image at a time in one thread (what
each image costs the engine, without the runner's Python per image). CPU ms/img is the
process's user + system time (workers included) over the images of the epoch.
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time

import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import fastload
from detection_user import UserDetection, annotations_of  # (benchmarks/: the script's folder is on sys.path)
from timing import cpu_seconds


def collate(batch):
    return tuple(zip(*batch))


def pipeline(name: str):
    resize = [v2.Resize(800, max_size=1333)] if name == "resize800" else []
    return v2.Compose(resize + [v2.RandomHorizontalFlip(0.5), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
                                v2.SanitizeBoundingBoxes()])


def epoch(loader):
    """(img/s, CPU ms/img) of one epoch."""
    start, cpu, images = time.perf_counter(), cpu_seconds(), 0
    for batch, _ in loader:
        images += len(batch)
    return images / (time.perf_counter() - start), 1e3 * (cpu_seconds() - cpu) / images


def kernels(paths, plan):
    """(img/s, CPU ms/img) of the C++ decode + fused kernel, one image at a time, one thread."""
    from fastload._ops import decode_jpeg
    from fastload.augment.own_size import apply_own_size

    datas = [torch.frombuffer(bytearray(open(p, "rb").read()), dtype=torch.uint8) for p in paths]
    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), cpu_seconds()
    for i, data in enumerate(datas):
        apply_own_size(plan, decode_jpeg(data), 0, i)
    return len(datas) / (time.perf_counter() - start), 1e3 * (cpu_seconds() - cpu) / len(datas)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data")
    parser.add_argument("--images", type=int, default=640)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--pipelines", default="hflip,resize800")
    args = parser.parse_args()
    if args.data:
        paths = sorted(glob.glob(os.path.join(args.data, "*", "*.jpg")))[: args.images]
    else:
        from jpeg_samples import photo  # tests/jpeg_samples.py (PYTHONPATH=.:tests)

        root = tempfile.mkdtemp()
        paths = []
        for k in range(args.images):
            paths.append(os.path.join(root, f"{k}.jpg"))
            Image.fromarray(photo(375, 500, seed=k)).save(paths[-1], quality=90)
    annotations = annotations_of(paths)
    kwargs = dict(batch_size=args.batch, shuffle=True, num_workers=args.workers, collate_fn=collate)
    print(f"{len(paths)} images, batch {args.batch}, {args.workers} workers, load average "
          f"{os.getloadavg()[0]:.1f}")
    for name in args.pipelines.split(","):
        user = UserDetection(annotations, pipeline(name))
        native = fastload.DetectionDataset([a[0] for a in annotations], [
            {"boxes": tv_tensors.BoundingBoxes(a[2], format="XYXY", canvas_size=a[1]), "labels": a[3]}
            for a in annotations], pipeline(name))
        loaders = {"torch (user's class)": torch.utils.data.DataLoader(user, **kwargs),
                   "fastload, traced": fastload.DataLoader(user, **kwargs),
                   "fastload.DetectionDataset": fastload.DataLoader(native, **kwargs)}
        print(f"{name}: traced path: {loaders['fastload, traced'].path}")
        runs = {k: [] for k in loaders}
        for _ in range(args.repeat):
            for key, loader in loaders.items():
                runs[key].append(epoch(loader))
        threads = torch.get_num_threads()
        runs["kernels (1 thread, no loader)"] = [kernels(paths, native.plan())]
        torch.set_num_threads(threads)
        base = max(r[0] for r in runs["torch (user's class)"])
        print("| contender | img/s | vs torch | CPU ms/img |")
        print("|---|---|---|---|")
        for key, values in runs.items():
            rate, cpu = max(values)
            print(f"| {key} | {rate:.0f} | {rate / base:.2f}x | {cpu:.2f} |")
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
