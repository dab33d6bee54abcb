"""The recipes' user-dataset shapes: Datasets as people write them around the same files,
each traced by fastload (fastload/compat/trace.py) and run against torch's DataLoader.

| recipe | the dataset |
|---|---|
| shape-own | a Dataset of its own class: Image.open(path).convert("RGB"), transform, (image, label) |
| shape-csv | a CSV read in __init__; torchvision's pil_loader idiom; (image, torch.tensor(label)) |
| shape-dict | Hugging Face style: {"pixel_values": v2 transforms(image), "labels": y} |
| shape-loader | torchvision ImageFolder(root, transform, loader=lambda p: Image.open(p).convert("RGB")) |
| shape-wrapper | a class holding an ImageFolder without a transform and applying its own |

Each uses the training transform RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
Normalize (shape-dict: the same in torchvision.transforms.v2).

Example:
    >>> from fastload.bench.shapes import SHAPES
    >>> sorted(SHAPES)
    ['shape-csv', 'shape-dict', 'shape-loader', 'shape-own', 'shape-wrapper']
"""

from __future__ import annotations

import csv
import os
import tempfile
from typing import Any, Callable, Dict

import torch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _train_v1() -> Any:
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def _train_v2() -> Any:
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def _samples(root: str) -> Any:
    from torchvision.datasets import ImageFolder

    return ImageFolder(root).samples


class OwnDataset(torch.utils.data.Dataset):
    """A list of (path, label); Image.open(path).convert("RGB"); the transform; (image, label)."""

    def __init__(self, root: str, transform: Any):
        self.items, self.transform = _samples(root), transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        path, label = self.items[i]
        return self.transform(Image.open(path).convert("RGB")), label


def pil_loader(path: str) -> Any:
    """torchvision's pil_loader, as scripts copy it."""
    from PIL import Image

    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


class CsvDataset(torch.utils.data.Dataset):
    """A CSV of (file, label) read in __init__; pil_loader; (img, torch.tensor(label))."""

    def __init__(self, csv_path: str, folder: str, transform: Any):
        with open(csv_path, newline="") as f:
            self.rows = [(row["file"], int(row["label"])) for row in csv.DictReader(f)]
        self.folder, self.transform = folder, transform

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx: int) -> Any:
        name, label = self.rows[idx]
        return self.transform(pil_loader(os.path.join(self.folder, name))), torch.tensor(label)


class DictDataset(torch.utils.data.Dataset):
    """{"pixel_values": transforms(image), "labels": y}."""

    def __init__(self, root: str, transforms: Any):
        self.samples, self.transforms = _samples(root), transforms

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        path, y = self.samples[i]
        return {"pixel_values": self.transforms(Image.open(path).convert("RGB")), "labels": y}


class Wrapper(torch.utils.data.Dataset):
    """Holds an ImageFolder without a transform and applies its own."""

    def __init__(self, root: str, transform: Any):
        from torchvision.datasets import ImageFolder

        self.base, self.transform = ImageFolder(root), transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> Any:
        image, label = self.base[i]
        return self.transform(image), label


def _open_rgb(path: str) -> Any:
    from PIL import Image

    return Image.open(path).convert("RGB")


def _csv(root: str) -> Any:
    path = os.path.join(tempfile.mkdtemp(prefix="fastload-bench-csv-"), "labels.csv")
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "label"])
        for file, label in _samples(root):
            writer.writerow([os.path.relpath(file, root), label])
    return CsvDataset(path, root, _train_v1())


def _loader(root: str) -> Any:
    from torchvision.datasets import ImageFolder

    return ImageFolder(root, transform=_train_v1(), loader=_open_rgb)


SHAPES: Dict[str, Callable[[str], Any]] = {
    "shape-own": lambda root: OwnDataset(root, _train_v1()),
    "shape-csv": _csv,
    "shape-dict": lambda root: DictDataset(root, _train_v2()),
    "shape-loader": _loader,
    "shape-wrapper": lambda root: Wrapper(root, _train_v1()),
}
SUMMARIES = {
    "shape-own": "a Dataset of its own class: Image.open(path).convert('RGB'), transform, (image, label)",
    "shape-csv": "a CSV + torchvision's pil_loader idiom, (image, torch.tensor(label))",
    "shape-dict": "{'pixel_values': v2 transforms(image), 'labels': y}",
    "shape-loader": "ImageFolder(root, transform, loader=lambda p: Image.open(p).convert('RGB'))",
    "shape-wrapper": "a class holding an ImageFolder without a transform, applying its own",
}
