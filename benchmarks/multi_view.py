"""Multi-view self-supervision: torch's DataLoader against fastload's views, paired.

    PYTHONPATH=. python benchmarks/multi_view.py [--data DIR] [--images 384] [--rounds 3] [--workers 2]
                                                 [--recipes simclr,dino,simclr-traced] [--batch-size 64]

Three recipes on the same generated JPEG folder (fastload.bench's ImageNet-like images):

- simclr: two views of one image, each RandomResizedCrop(224) + RandomHorizontalFlip +
  RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8) + RandomGrayscale(0.2) + ToTensor +
  Normalize (SimCLR's / SupContrast's TwoCropTransform);
- dino: 2 global views (RandomResizedCrop(224, scale=(0.4, 1)), flip, jitter p=0.8,
  grayscale 0.2, GaussianBlur(23) with p=1.0 and 0.1) + 8 local views (96, scale=(0.05,
  0.4), blur p=0.5), as DINO's DataAugmentationDINO (without its solarisation);
- simclr-traced: simclr's views from a dataset class of the user's own (`TwoCropFiles`:
  `__getitem__` opens the file with PIL and returns `(TwoCropTransform(image), label)`),
  the one object given to torch's DataLoader and to fastload.DataLoader (traced).

Contenders, each one pass of `--images` samples per round, the order rotating each round:
- torch: torch.utils.data.DataLoader over torchvision's ImageFolder whose transform
  returns the list of views (`--workers` worker processes);
- fastload views: fastload.ImageFolder(root, views=[...the same torchvision
  transforms...]) + fastload.DataLoader (`--workers` engine threads): one read and one
  decode per image for all views;
- fastload K decodes: the same views as K single-view fastload loaders over the same
  images (each view read and decoded on its own): what the shared decode saves;
- fastload traced (simclr-traced only, against torch over the same dataset object): the
  user's class traced, its two views made from one decode.

Reported per contender: median img/s, CPU ms per image (this process and its reaped
workers), and the median over rounds of the wall and CPU ratios against torch's pass in
the same round. float32, batch 64, same cores for all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Dict, List, Tuple

import torch

from timing import cpu_seconds

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def recipes() -> Dict[str, List]:
    """Each recipe's views as torchvision Compose objects."""
    from torchvision import transforms as T

    def view(size, scale, blur_p):
        ops = [T.RandomResizedCrop(size, scale=scale), T.RandomHorizontalFlip(),
               T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2 if blur_p is not None else 0.4, 0.1)], p=0.8),
               T.RandomGrayscale(0.2)]
        if blur_p is not None:
            ops.append(T.RandomApply([T.GaussianBlur(23, (0.1, 2.0))], p=blur_p))
        return T.Compose(ops + [T.ToTensor(), T.Normalize(MEAN, STD)])

    simclr = view(224, (0.08, 1.0), None)
    dino = [view(224, (0.4, 1.0), 1.0), view(224, (0.4, 1.0), 0.1)] + [view(96, (0.05, 0.4), 0.5)] * 8
    return {"simclr": [simclr, simclr], "dino": dino, "simclr-traced": [simclr, simclr]}


class MultiView:
    """A torchvision transform returning one output per view (TwoCropTransform's shape)."""

    def __init__(self, views):
        self.views = views

    def __call__(self, image):
        return [view(image) for view in self.views]


class TwoCropTransform:
    """SupContrast's: the same transform applied twice to one image."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, x):
        return [self.transform(x), self.transform(x)]


class TwoCropFiles(torch.utils.data.Dataset):
    """A user's own SimCLR dataset: files and labels, a TwoCropTransform."""

    def __init__(self, paths, labels, transform):
        self.paths, self.labels, self.transform = paths, labels, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        image = Image.open(self.paths[i]).convert("RGB")
        return self.transform(image), self.labels[i]


def one_pass(make: Callable[[], List], images: int) -> Tuple[float, float, int]:
    wall, cpu = time.perf_counter(), cpu_seconds()
    count = 0
    for loader in make():
        count += sum(len(batch[1]) for batch in loader)
        del loader  # its workers are joined and reaped: their CPU counts
    return time.perf_counter() - wall, cpu_seconds() - cpu, count


def traced_contenders(root: str, views: List, images: int, workers: int, batch: int) -> Dict[str, Callable]:
    """torch's DataLoader and fastload's over one TwoCropFiles object (the user's class)."""
    import torchvision

    import fastload

    folder = torchvision.datasets.ImageFolder(root)
    dataset = TwoCropFiles([p for p, _ in folder.samples[:images]], [c for _, c in folder.samples[:images]],
                           TwoCropTransform(views[0]))

    def torch_loader():
        return [torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers)]

    def fastload_traced():
        return [fastload.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, seed=3)]

    return {"torch": torch_loader, "fastload traced": fastload_traced}


def contenders(root: str, views: List, images: int, workers: int, batch: int) -> Dict[str, Callable]:
    import torchvision

    import fastload
    from fastload._contract import view_seed

    def torch_loader():
        dataset = torchvision.datasets.ImageFolder(root, transform=MultiView(views))
        subset = torch.utils.data.Subset(dataset, range(images))
        return [torch.utils.data.DataLoader(subset, batch_size=batch, shuffle=True, num_workers=workers)]

    def fastload_views():
        dataset = fastload.FileList(paths, labels, views=views, seed=1)
        return [fastload.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, seed=3)]

    def fastload_separate():
        out = []
        for v, transform in enumerate(views):
            dataset = fastload.FileList(paths, labels, transforms=transform, seed=view_seed(1, v))
            out.append(fastload.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, seed=3))
        return out

    folder = torchvision.datasets.ImageFolder(root)
    paths = [p for p, _ in folder.samples[:images]]
    labels = [c for _, c in folder.samples[:images]]
    # (separate loaders yield K times the batches: count images once)
    return {"torch": torch_loader, "fastload views": fastload_views, "fastload K decodes": fastload_separate}


def main() -> None:
    from fastload.bench.dataset import DatasetSpec, ensure_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--images", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--recipes", default="simclr,dino,simclr-traced")
    args = parser.parse_args()
    root = args.data or ensure_dataset(DatasetSpec(images=2000, classes=10, seed=0)).root
    torch.set_num_threads(1)  # as torch's workers run: one intra-op thread per process
    import fastload

    print(f"data: {root}; {args.images} images per pass, {args.rounds} rounds, {args.workers} workers, batch "
          f"{args.batch_size}, float32; load average {os.getloadavg()[0]:.1f} at start")
    for name in args.recipes.split(","):
        views = recipes()[name]
        traced = name.endswith("-traced")
        runs = (traced_contenders if traced else contenders)(root, views, args.images, args.workers,
                                                             args.batch_size)
        probe = runs["fastload traced"]()[0] if traced else fastload.DataLoader(fastload.FileList(
            [os.path.join(root, os.listdir(root)[0], os.listdir(os.path.join(root, os.listdir(root)[0]))[0])],
            views=views), batch_size=1)
        print(f"\n{name}: {len(views)} views; fastload: {probe.path}")
        del probe
        times: Dict[str, list] = {k: [] for k in runs}
        for r in range(args.rounds):
            order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
            for k in order:
                wall, cpu, count = one_pass(runs[k], args.images)
                times[k].append((wall, cpu, args.images))
        base = times["torch"]
        print(f"load average {os.getloadavg()[0]:.1f} at end")
        print("| recipe | loader | img/s (median) | CPU ms/img (median) | wall vs torch | CPU vs torch |")
        print("|---|---|---|---|---|---|")
        for k, rows in times.items():
            rate = statistics.median(n / wall for wall, _, n in rows)
            cpu_ms = statistics.median(1e3 * cpu / n for _, cpu, n in rows)
            wall_ratio = statistics.median(b[0] / x[0] for x, b in zip(rows, base))
            cpu_ratio = statistics.median(b[1] / x[1] for x, b in zip(rows, base))
            print(f"| {name} | {k} | {rate:.0f} | {cpu_ms:.1f} | {wall_ratio:.2f}x | {cpu_ratio:.2f}x |")


if __name__ == "__main__":
    main()
