"""A traced dataset whose every other sample falls back: fastload against torch's DataLoader.

    python benchmarks/trace_fallback.py [--images 1000] [--batch 64] [--workers 2] [--repeat 2]

A Dataset of its own class over `--images` generated ImageNet-sized JPEGs (500x375),
Image.open(path).convert("RGB") + torchvision's train transform (RandomResizedCrop 224,
RandomHorizontalFlip, ToTensor, Normalize). Odd indexes draw a number from Python's
`random` outside the transforms, which the tracer cannot follow: each of them is made by
the dataset's own `__getitem__` (fastload/trace/lazy.py), the even ones by the
engine. The same dataset object through torch's DataLoader and fastload.DataLoader
(same batch size, workers, shuffle), alternating, best of `--repeat` epochs each:
images/s and the ratio. With workers, fastload makes the fallbacks in `--workers` forked
processes while the engine's threads decode the rest (fastload/trace/fallback_pool.py).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

import fastload
from timing import epoch_rate  # (benchmarks/: the script's folder is on sys.path)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class EveryOtherFallsBack(torch.utils.data.Dataset):
    def __init__(self, files):
        self.files = files
        self.transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                                    T.Normalize(MEAN, STD)])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        if i % 2:
            random.random()  # outside the transforms: this index is made by __getitem__ itself
        return self.transform(Image.open(self.files[i]).convert("RGB")), i % 1000


def write_images(folder: str, n: int):
    files = []
    for k in range(n):
        path = os.path.join(folder, f"{k:05d}.jpg")
        y, x = np.mgrid[0:375, 0:500]
        pixels = np.stack([(x + 3 * k) % 256, (y + 5 * k) % 256, (x + y) // 4 % 256], -1).astype(np.uint8)
        Image.fromarray(pixels).save(path, quality=90)
        files.append(path)
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    # An odd count whose probes (index 0 and 16 spread over 0..n-1) are all even: n - 1 a multiple of 30.
    n = (args.images - 1) // 30 * 30 + 1
    files = write_images(tempfile.mkdtemp(), n)
    dataset = EveryOtherFallsBack(files)
    kwargs = dict(batch_size=args.batch, shuffle=True, num_workers=args.workers)
    ours = fastload.DataLoader(dataset, **kwargs)
    theirs = torch.utils.data.DataLoader(dataset, **kwargs)
    print(f"path: {ours.path}")
    rates = {"torch": [], "fastload": []}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the one fallback warning per epoch)
        for _ in range(args.repeat):
            rates["torch"].append(epoch_rate(theirs))
            rates["fastload"].append(epoch_rate(ours))
    fallbacks = len(ours.stats()["native"]["traced"]["fallbacks"])
    best = {k: max(v) for k, v in rates.items()}
    print(f"{n} images, {fallbacks} made by __getitem__ per epoch, batch {args.batch}, {args.workers} workers")
    for name, values in rates.items():
        print(f"  {name}: best {best[name]:.1f} img/s (runs: {', '.join(f'{v:.1f}' for v in values)})")
    print(f"  fastload / torch: {best['fastload'] / best['torch']:.2f}x")


if __name__ == "__main__":
    main()
