"""The recipes' user-dataset shapes: Datasets as people write them around the same files,
each traced by fastload (fastload/trace/) and run against torch's DataLoader.

| recipe | the dataset |
|---|---|
| shape-own | a Dataset of its own class: Image.open(path).convert("RGB"), transform, (image, label) |
| shape-csv | a CSV read in __init__; torchvision's pil_loader idiom; (image, torch.tensor(label)) |
| shape-dict | Hugging Face style: {"pixel_values": v2 transforms(image), "labels": y} |
| shape-loader | torchvision ImageFolder(root, transform, loader=lambda p: Image.open(p).convert("RGB")) |
| shape-wrapper | a class holding an ImageFolder without a transform and applying its own |

Each uses the training transform RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
Normalize (shape-dict: the same in torchvision.transforms.v2).

Shapes that stay on the generic path, rightly (fastload cannot make their samples; the
reason is in `loader.path`), where fastload must be as fast as torch's DataLoader, since it runs it:

| recipe | the dataset |
|---|---|
| shape-numpy | np.asarray(image), its center square sampled to 224x224 and normalised in numpy, torch.from_numpy |
| shape-random | shape-own, plus label noise drawn from Python's `random` in __getitem__ |
| shape-npy | a uint8 array per sample from np.load (no image), scaled to float in __getitem__ |

Example:
    >>> from fastload.bench.shapes import GENERIC, SHAPES
    >>> sorted(SHAPES), sorted(GENERIC)
    (['shape-csv', 'shape-dict', 'shape-loader', 'shape-npy', 'shape-numpy', 'shape-own', 'shape-random', \
'shape-wrapper'], ['shape-npy', 'shape-numpy', 'shape-random'])
"""

from __future__ import annotations

import csv
import hashlib
import os
import random
import tempfile
from typing import Any, Callable, Dict

import numpy as np
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


class NumpyPixels(torch.utils.data.Dataset):
    """np.asarray of the RGB image, its center square sampled to 224x224 and ImageNet
    normalisation in numpy (the trace stops where the pixels are read: generic)."""

    def __init__(self, root: str):
        self.samples = _samples(root)
        self.mean = np.asarray(MEAN, dtype=np.float32) * 255
        self.std = np.asarray(STD, dtype=np.float32) * 255

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        path, label = self.samples[i]
        pixels = np.asarray(Image.open(path).convert("RGB"))
        h, w = pixels.shape[:2]
        side = min(h, w)  # the center square, sampled to 224x224 (nearest)
        rows = (h - side) // 2 + np.arange(224) * side // 224
        cols = (w - side) // 2 + np.arange(224) * side // 224
        crop = (pixels[rows][:, cols].astype(np.float32) - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(crop.transpose(2, 0, 1))), label


class RandomLabels(OwnDataset):
    """shape-own with label noise: 10% of the labels drawn again with Python's `random`
    (a draw outside the transforms: generic, the draws are the dataset's)."""

    def __getitem__(self, i: int) -> Any:
        image, label = super().__getitem__(i)
        if random.random() < 0.1:
            label = random.randrange(1000)
        return image, label


class NpyArrays(torch.utils.data.Dataset):
    """One .npy per sample (uint8 [3, 128, 128], written once next to the images' cache),
    np.load, scaled to float32 in [0, 1]: no image is opened (generic)."""

    SHAPE = (3, 128, 128)

    def __init__(self, root: str):
        self.samples = _samples(root)
        key = hashlib.sha1(os.path.abspath(root).encode()).hexdigest()[:12]
        self.folder = os.path.join(tempfile.gettempdir(), f"fastload-bench-npy-{key}")
        done = os.path.join(self.folder, ".done")
        if not os.path.exists(done):
            os.makedirs(self.folder, exist_ok=True)
            rng = np.random.default_rng(0)
            for k in range(len(self.samples)):
                np.save(os.path.join(self.folder, f"{k}.npy"), rng.integers(0, 256, self.SHAPE, dtype=np.uint8))
            open(done, "w").close()

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        array = np.load(os.path.join(self.folder, f"{i}.npy"))
        return torch.from_numpy(array).float().div_(255), self.samples[i][1]


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
    "shape-numpy": NumpyPixels,
    "shape-random": lambda root: RandomLabels(root, _train_v1()),
    "shape-npy": NpyArrays,
}
# The shapes that stay generic; the others are traced natively.
GENERIC = ("shape-numpy", "shape-random", "shape-npy")
SUMMARIES = {
    "shape-own": "a Dataset of its own class: Image.open(path).convert('RGB'), transform, (image, label)",
    "shape-csv": "a CSV + torchvision's pil_loader idiom, (image, torch.tensor(label))",
    "shape-dict": "{'pixel_values': v2 transforms(image), 'labels': y}",
    "shape-loader": "ImageFolder(root, transform, loader=lambda p: Image.open(p).convert('RGB'))",
    "shape-wrapper": "a class holding an ImageFolder without a transform, applying its own",
    "shape-numpy": "generic: np.asarray(image), its center square sampled to 224x224 and normalised in numpy",
    "shape-random": "generic: shape-own with label noise from Python's random in __getitem__; RRC(224), flip, "
                    "ToTensor, Normalize",
    "shape-npy": "generic: np.load of a uint8 [3, 128, 128] array per sample, scaled to float (no image)",
}
