"""How close the native engine's resize is to albumentations' own (OpenCV INTER_LINEAR).

A dataset of the OpenCV + albumentations shape (cv2.imread, BGR -> RGB,
`A.Compose([A.Resize(h, w), ToTensorV2()])`) runs through fastload.DataLoader (traced,
native) and through torch's DataLoader (albumentations itself); the uint8 batches are
compared as PSNR per resize factor, enlarging and shrinking.

    PYTHONPATH=. .venv/bin/python benchmarks/albumentations_resize.py --images 6
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile

import albumentations as A
import cv2
import numpy as np
import torch
from albumentations.pytorch import ToTensorV2
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload.bench.dataset import draw_image, encode_jpeg

HEIGHT, WIDTH = 375, 500
FACTORS = (1.6, 1.0 / 1.25, 1.0 / 1.5, 1.0 / 2.0, 1.0 / 3.0)


class OpenCVDataset(Dataset):
    def __init__(self, paths, transform):
        self.paths, self.transform = paths, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = cv2.cvtColor(cv2.imread(self.paths[index]), cv2.COLOR_BGR2RGB)
        return self.transform(image=image)["image"], 0


def psnr(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    mse = float(((ours.double() - theirs.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        paths = []
        for k in range(args.images):
            pixels = draw_image(seed=1, index=k)
            pixels = cv2.resize(pixels, (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA)  # photo-like, one size
            path = os.path.join(root, f"{k}.jpg")
            with open(path, "wb") as f:
                f.write(encode_jpeg(np.ascontiguousarray(pixels), 90))
            paths.append(path)
        print(f"{args.images} photo-like {WIDTH}x{HEIGHT} JPEGs; fastload {fastload.__version__}, "
              f"albumentations {A.__version__}, OpenCV {cv2.__version__}")
        print("| resize | output | loader.path | PSNR (dB) | max level difference |")
        print("|---|---|---|---|---|")
        for factor in FACTORS:
            size = (round(HEIGHT * factor), round(WIDTH * factor))
            dataset = OpenCVDataset(paths, A.Compose([A.Resize(*size), ToTensorV2()]))
            native = fastload.DataLoader(dataset, batch_size=args.images)
            ours, _ = next(iter(native))
            theirs, _ = next(iter(TorchLoader(dataset, batch_size=args.images)))
            worst = int((ours.int() - theirs.int()).abs().max())
            label = f"enlarge {factor:.2f}x" if factor > 1 else f"shrink {1 / factor:.2f}x"
            print(f"| {label} | {size[0]}x{size[1]} | {native.path.split(' [')[0]} | {psnr(ours, theirs):.1f} | "
                  f"{worst} |")


if __name__ == "__main__":
    main()
