"""A segmentation Dataset of the user's own class (image + mask files): fastload against torch's DataLoader.

    PYTHONPATH=. python benchmarks/trace_masks.py [--images 600] [--batch 32] [--workers 2] [--repeat 2]
                                                  [--library v2|albumentations]

`--images` generated 500x375 JPEGs and their 8-bit L PNG masks (21 labels in blocks).
`v2`: torchvision's v2 segmentation shape, `tv_tensors.Mask(Image.open(mask))` and
`image, mask = transforms(image, mask)` with RandomResizedCrop 224, RandomHorizontalFlip,
ToImage, ToDtype(float32, scale=True), Normalize, the mask returned `.squeeze(0).long()`;
`albumentations`: `cv2.imread` + BGR2RGB, `cv2.imread(mask, IMREAD_GRAYSCALE)`, A.Compose
of the same ops and ToTensorV2 with `mask=`. The same dataset object through torch's
DataLoader and fastload.DataLoader (traced: the image and its mask made by the engine from
one call per batch, fastload/trace/masks.py), same batch size, workers and shuffle,
alternating, best of `--repeat` epochs each: images/s and the ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch
from PIL import Image

import fastload
from timing import epoch_rate  # (benchmarks/: the script's folder is on sys.path)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class V2Segmentation(torch.utils.data.Dataset):
    def __init__(self, pairs):
        from torchvision.transforms import v2

        self.pairs = pairs
        self.transforms = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ToImage(),
                                      v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        from torchvision import tv_tensors

        image_path, mask_path = self.pairs[i]
        image, mask = self.transforms(Image.open(image_path).convert("RGB"), tv_tensors.Mask(Image.open(mask_path)))
        return image, mask.squeeze(0).long()


class AlbumentationsSegmentation(V2Segmentation):
    def __init__(self, pairs):
        import albumentations as A
        from albumentations.pytorch import ToTensorV2

        self.pairs = pairs
        self.transform = A.Compose([A.RandomResizedCrop(size=(224, 224)), A.HorizontalFlip(), A.Normalize(MEAN, STD),
                                    ToTensorV2()])

    def __getitem__(self, i):
        import cv2

        image_path, mask_path = self.pairs[i]
        image = cv2.cvtColor(cv2.imread(image_path), cv2.COLOR_BGR2RGB)
        out = self.transform(image=image, mask=cv2.imread(mask_path, cv2.IMREAD_GRAYSCALE))
        return out["image"], out["mask"].long()


def write_pairs(folder: str, n: int):
    pairs = []
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:375, 0:500]
    for k in range(n):
        image, mask = os.path.join(folder, f"{k:05d}.jpg"), os.path.join(folder, f"{k:05d}.png")
        pixels = np.stack([(x + 3 * k) % 256, (y + 5 * k) % 256, (x + y) // 4 % 256], -1).astype(np.uint8)
        Image.fromarray(pixels).save(image, quality=90)
        labels = rng.integers(0, 21, size=(24, 32)).astype(np.uint8).repeat(16, 0).repeat(16, 1)[:375, :500]
        Image.fromarray(labels, "L").save(mask)
        pairs.append((image, mask))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--library", choices=("v2", "albumentations"), default="v2")
    args = parser.parse_args()
    pairs = write_pairs(tempfile.mkdtemp(), args.images)
    dataset = (V2Segmentation if args.library == "v2" else AlbumentationsSegmentation)(pairs)
    kwargs = dict(batch_size=args.batch, shuffle=True, num_workers=args.workers)
    ours = fastload.DataLoader(dataset, **kwargs)
    theirs = torch.utils.data.DataLoader(dataset, **kwargs)
    print(f"path: {ours.path}")
    rates = {"torch": [], "fastload": []}
    for _ in range(args.repeat):
        rates["torch"].append(epoch_rate(theirs))
        rates["fastload"].append(epoch_rate(ours))
    best = {k: max(v) for k, v in rates.items()}
    print(f"{args.library}: {args.images} image + mask pairs (500x375), batch {args.batch}, {args.workers} workers")
    for name, values in rates.items():
        print(f"  {name}: best {best[name]:.1f} img/s (runs: {', '.join(f'{v:.1f}' for v in values)})")
    print(f"  fastload / torch: {best['fastload'] / best['torch']:.2f}x")


if __name__ == "__main__":
    main()
