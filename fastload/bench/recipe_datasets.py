"""The recipes' self-supervised and segmentation datasets, written as their scripts write them.

| recipe | the dataset |
|---|---|
| simclr-two-views | a Dataset of its own class: one image, one Compose called twice, ((v1, v2), label) |
| simclr-two-crop | shape-own's class with SupContrast's TwoCropTransform(Compose): ([v1, v2], label) |
| simclr-two-crop-folder | SupContrast's script on a folder: ImageFolder(root, transform=TwoCropTransform(Compose)) |
| dino-multicrop | shape-own's class with DINO's DataAugmentationDINO(): (10 crops, label) |
| segmentation-512 | a Dataset of its own class: image + PNG mask files, v2 joint transforms, (image, mask) |
| segmentation-512-native | fastload.SegmentationDataset of the same files and geometry (fastload's side only) |

The views' transform is SimCLR's: RandomResizedCrop(224), RandomHorizontalFlip,
RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), RandomGrayscale(0.2), ToTensor,
Normalize. DINO's crops are its DataAugmentationDINO without its blur and solarisation: 2
global RandomResizedCrop(224, scale=(0.4, 1), bicubic) and 8 local (96, scale=(0.05, 0.4)),
each with flip and colour jitter. The segmentation masks are generated once: a mode L PNG
label map per JPEG of the folder, in a folder beside it (`ensure_masks`).

Example:
    >>> from fastload.bench.recipe_datasets import TwoCropTransform
    >>> TwoCropTransform(str.upper)("a")
    ['A', 'A']
"""

from __future__ import annotations

import os
import shutil
import zlib
from typing import Any, List, Tuple

import numpy as np
import torch

from fastload.bench.shapes import OwnDataset

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SEGMENTATION_CROP = 512
# Classes of the generated label maps (PASCAL VOC's 21) and the label of their object
# outlines, the ignore index as VOC writes it.
MASK_CLASSES = 21
IGNORE = 255
MASKS_DONE = "fastload-bench-masks"


def simclr_transform() -> Any:
    """SimCLR's view (strength 0.5 colour distortion, without its blur), torchvision v1."""
    from torchvision import transforms as T

    return T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(p=0.2),
        T.ToTensor(), T.Normalize(MEAN, STD),
    ])


class SimCLRPairs(OwnDataset):
    """shape-own's class (a list of (path, label)), its transform called twice on the image."""

    def __getitem__(self, index: int) -> Any:
        from PIL import Image

        path, label = self.items[index]
        image = Image.open(path).convert("RGB")
        return (self.transform(image), self.transform(image)), label


class TwoCropTransform:
    """SupContrast's util.py: two crops of the same image."""

    def __init__(self, transform: Any):
        self.transform = transform

    def __call__(self, x: Any) -> List[Any]:
        return [self.transform(x), self.transform(x)]


class DataAugmentationDINO:
    """DINO's main_dino.py augmentation (its GaussianBlur and Solarization left out):
    two global crops, then `local_crops_number` local ones."""

    def __init__(self, global_crops_scale=(0.4, 1.0), local_crops_scale=(0.05, 0.4), local_crops_number=8):
        from torchvision import transforms

        flip_and_color_jitter = transforms.Compose([
            transforms.RandomHorizontalFlip(p=0.5),
            transforms.RandomApply([transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)],
                                   p=0.8),
            transforms.RandomGrayscale(p=0.2),
        ])
        normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        bicubic = transforms.InterpolationMode.BICUBIC
        self.global_transfo1 = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
            flip_and_color_jitter, normalize])
        self.global_transfo2 = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
            flip_and_color_jitter, normalize])
        self.local_crops_number = local_crops_number
        self.local_transfo = transforms.Compose([
            transforms.RandomResizedCrop(96, scale=local_crops_scale, interpolation=bicubic),
            flip_and_color_jitter, normalize])

    def __call__(self, image: Any) -> List[Any]:
        crops = [self.global_transfo1(image), self.global_transfo2(image)]
        for _ in range(self.local_crops_number):
            crops.append(self.local_transfo(image))
        return crops


def simclr_two_views(root: str) -> Any:
    return SimCLRPairs(root, simclr_transform())


def simclr_two_crop(root: str) -> Any:
    return OwnDataset(root, TwoCropTransform(simclr_transform()))


def simclr_two_crop_folder(root: str) -> Any:
    """SupContrast's main_supcon.py on a folder: torchvision's ImageFolder, the transform given to it."""
    from torchvision import datasets

    return datasets.ImageFolder(root, transform=TwoCropTransform(simclr_transform()))


def dino_multicrop(root: str) -> Any:
    return OwnDataset(root, DataAugmentationDINO())


# -- segmentation ------------------------------------------------------------------------


def masks_folder(root: str) -> str:
    """Where `ensure_masks` writes the label maps of folder `root`: `<root>-masks`, beside it."""
    root = os.path.abspath(root)
    return os.path.join(os.path.dirname(root), os.path.basename(root) + "-masks")


def draw_mask(width: int, height: int, seed: int) -> np.ndarray:
    """A uint8 [height, width] label map drawn from `seed`: background 0, 4-12 objects of
    labels 1..20, their outlines IGNORE (3 px), as VOC's annotations look.

    Example:
        >>> m = draw_mask(40, 30, 1)
        >>> m.shape, m.dtype, int(m.max()) <= 255
        ((30, 40), dtype('uint8'), True)
    """
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    for _ in range(int(rng.integers(4, 13))):
        x0, y0 = rng.uniform(-0.1, 0.9) * width, rng.uniform(-0.1, 0.9) * height
        box = [x0, y0, x0 + rng.uniform(0.1, 0.5) * width, y0 + rng.uniform(0.1, 0.5) * height]
        label = int(rng.integers(1, MASK_CLASSES))
        if rng.random() < 0.5:
            draw.ellipse(box, fill=label, outline=IGNORE, width=3)
        else:
            draw.rectangle(box, fill=label, outline=IGNORE, width=3)
    return np.asarray(mask)


def ensure_masks(root: str) -> List[Tuple[str, str]]:
    """(image, mask) paths of every JPEG of the ImageFolder-layout `root`, in ImageFolder's
    order, each mask a mode L PNG of the image's size at the same relative path under
    `masks_folder(root)`. Written once (built in a temporary folder, renamed into place
    when complete); each map is drawn from its image's relative path, so it is the same
    whoever writes it.
    """
    from PIL import Image

    from fastload.datasets.folder import find_classes, scan_folder

    images = scan_folder(root, find_classes(root)[1])[0]
    where = masks_folder(root)
    relative = [os.path.splitext(os.path.relpath(p, root))[0] + ".png" for p in images]
    if not os.path.exists(os.path.join(where, MASKS_DONE)):
        staging = f"{where}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        for image, name in zip(images, relative):
            with Image.open(image) as im:  # the header only: the size
                width, height = im.size
            target = os.path.join(staging, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            Image.fromarray(draw_mask(width, height, zlib.crc32(name.encode()))).save(target, "PNG")
        open(os.path.join(staging, MASKS_DONE), "w").close()
        shutil.rmtree(where, ignore_errors=True)
        try:
            os.rename(staging, where)
        except OSError:  # another process finished them first: use theirs
            shutil.rmtree(staging, ignore_errors=True)
    return [(image, os.path.join(where, name)) for image, name in zip(images, relative)]


def segmentation_transforms(crop: int = SEGMENTATION_CROP) -> Any:
    """torchvision v2 joint transforms of an (image, tv_tensors.Mask) pair: RandomResizedCrop
    (nearest on the mask), flip, the image alone to float32 and normalised."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True), v2.Normalize(MEAN, STD),
        v2.ToPureTensor(),
    ])


class SegmentationFiles(torch.utils.data.Dataset):
    """(image, mask) file pairs; the image opened as RGB, the mask as a tv_tensors.Mask of
    the PIL label map ([1, H, W] uint8); one v2 call transforms both."""

    def __init__(self, pairs: List[Tuple[str, str]], transforms: Any):
        self.pairs, self.transforms = pairs, transforms

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> Any:
        from PIL import Image
        from torchvision import tv_tensors

        image_path, mask_path = self.pairs[index]
        image = Image.open(image_path).convert("RGB")
        mask = tv_tensors.Mask(Image.open(mask_path))
        return self.transforms(image, mask)


def segmentation(root: str) -> Any:
    return SegmentationFiles(ensure_masks(root), segmentation_transforms())


def segmentation_native(root: str) -> Any:
    """fastload.SegmentationDataset of segmentation()'s files, with its geometry and output:
    RandomResizedCrop(512), flip, Normalize; a uint8 [B, 1, H, W] mask resized as a tensor
    nearest (as v2 does a tv_tensors.Mask)."""
    import fastload
    from fastload import transforms as T

    pairs = ensure_masks(root)
    return fastload.SegmentationDataset(
        [image for image, _ in pairs], [mask for _, mask in pairs],
        [T.RandomResizedCrop(SEGMENTATION_CROP), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)],
        mask=fastload.Mask(dtype=torch.uint8, sampling="tensor", channel_dim=True))
