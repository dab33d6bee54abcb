"""Traced user datasets that open images with OpenCV or torchvision.io: torch's
DataLoader against fastload.DataLoader over the very same dataset object, same run,
alternating rounds.

Shapes (the dataset code users write, unchanged):
  opencv   cv2.imread + cv2.cvtColor(BGR2RGB) + A.Compose([RandomResizedCrop(224),
           HorizontalFlip, Normalize, ToTensorV2]) -> (image, label)
  tvio     torchvision.io.read_image(path) + v2.Compose([RandomResizedCrop(224),
           RandomHorizontalFlip, ToDtype(float32, scale=True), Normalize]) -> (image, label)

Each round times one full epoch per loader (a fresh iterator; the first batch is timed
too, as a user's epoch is), torch first on odd rounds, fastload first on even ones; the
figure is the median round. fastload's loader is built once per shape (the trace, timed
apart as `trace s`).

    python benchmarks/trace_openers.py --images 1000 --batch 64 --workers 2 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import cv2
import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def make_images(root: str, count: int, classes: int = 10, seed: int = 0) -> list:
    """JPEGs of about 500 x 375 (+-15 %), photo-like content, quality 90: (path, label)."""
    rng = np.random.default_rng(seed)
    files = []
    for k in range(count):
        label = k % classes
        folder = os.path.join(root, f"class_{label}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{k:05d}.jpg")
        if not os.path.exists(path):
            h, w = int(375 * rng.uniform(0.85, 1.15)), int(500 * rng.uniform(0.85, 1.15))
            y, x = np.mgrid[0:h, 0:w].astype(np.float32)
            base = np.stack([np.sin(x / (17 + k % 7)) * 60 + y / h * 120, np.cos(y / (13 + k % 5)) * 50 + x / w * 100,
                             (x + y) / (w + h) * 200], -1) + 40
            noise = rng.normal(0, 12, (h, w, 3))
            Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(path, quality=90)
        files.append((path, label))
    return files


class OpenCVDataset(Dataset):
    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, idx):
        path, label = self.files[idx]
        image = cv2.imread(path)
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        return self.transform(image=image)["image"], label


class TorchvisionIODataset(Dataset):
    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, idx):
        from torchvision.io import read_image

        path, label = self.files[idx]
        return self.transform(read_image(path)), label


def shapes(files):
    import albumentations as A
    from albumentations.pytorch import ToTensorV2
    from torchvision.transforms import v2

    return {
        "opencv": OpenCVDataset(files, A.Compose([A.RandomResizedCrop(size=(224, 224)), A.HorizontalFlip(),
                                                  A.Normalize(), ToTensorV2()])),
        "tvio": TorchvisionIODataset(files, v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                                                        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])),
    }


def epoch(loader) -> float:
    """Images per second over one epoch."""
    start, images = time.perf_counter(), 0
    for batch in loader:
        images += batch[0].shape[0]
    return images / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fastload-trace-openers"))
    parser.add_argument("--shapes", default="opencv,tvio")
    args = parser.parse_args()
    files = make_images(args.data, args.images)
    print(f"{len(files)} JPEGs in {args.data}, batch {args.batch}, num_workers={args.workers}, "
          f"{args.rounds} alternating rounds, torch {torch.__version__}, cv2 {cv2.__version__}, {os.cpu_count()} CPUs")
    kwargs = dict(batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=False)
    print(f"{'shape':8} {'torch img/s':>12} {'fastload img/s':>15} {'ratio':>6} {'trace s':>8}  path")
    for name, dataset in shapes(files).items():
        if name not in args.shapes.split(","):
            continue
        start = time.perf_counter()
        ours = fastload.DataLoader(dataset, **kwargs)
        path = ours.path
        trace_s = time.perf_counter() - start
        theirs = TorchLoader(dataset, persistent_workers=False, **kwargs)
        torch_rates, our_rates = [], []
        for round_ in range(args.rounds):
            order = [(theirs, torch_rates), (ours, our_rates)]
            for loader, rates in (order if round_ % 2 == 0 else order[::-1]):
                rates.append(epoch(loader))
        t, f = statistics.median(torch_rates), statistics.median(our_rates)
        print(f"{name:8} {t:12.0f} {f:15.0f} {f / t:5.2f}x {trace_s:8.2f}  {path.split(' [')[0]}")
        print(f"         rounds torch {[round(r) for r in torch_rates]} fastload {[round(r) for r in our_rates]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
