"""Image folders and file lists as native datasets.

`ImageFolder` finds classes and files exactly as torchvision.datasets.ImageFolder does
(same class_to_idx, same sample order), but keeps the sample index in flat arrays.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fastload.augment.split import transforms_repr
from fastload.datasets.base import NativeDataset
from fastload.source.index import SampleIndex


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('s') else 's'}"


# torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def find_classes(directory: str) -> Tuple[List[str], Dict[str, int]]:
    """Class folders of `directory`, sorted, and their indices (torchvision's rule)."""
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {name: i for i, name in enumerate(classes)}


def scan_folder(directory: str, class_to_idx: Dict[str, int],
                extensions: Sequence[str] = IMG_EXTENSIONS) -> Tuple[List[str], List[int]]:
    """(paths, labels) in torchvision's make_dataset order; raises if a class is empty."""
    extensions = tuple(e.lower() for e in extensions)
    paths: List[str] = []
    labels: List[int] = []
    empty = []
    for name in sorted(class_to_idx):
        label = class_to_idx[name]
        before = len(paths)
        for root, _, files in sorted(os.walk(os.path.join(directory, name), followlinks=True)):
            for file in sorted(files):
                if file.lower().endswith(extensions):
                    paths.append(os.path.join(root, file))
                    labels.append(label)
        if len(paths) == before:
            empty.append(name)
    if empty:
        raise FileNotFoundError(
            f"Found no valid file for the classes {', '.join(sorted(empty))}. "
            f"Supported extensions are: {', '.join(extensions)}"
        )
    return paths, labels


class ImageFolder(NativeDataset):
    """A folder of class subfolders of images, run on fastload's native pipeline.

    Args:
        root: folder with one subfolder per class (torchvision's ImageFolder layout).
        transforms: specs from fastload.transforms (RandomResizedCrop, ...) applied to each image.
        extensions: file name endings that count as images.
        seed: base of the random augmentation parameters (the loader overrides it).
        ops: the older name of `transforms` (same meaning; pass one of the two).
        views: in place of `transforms`, one transform list per view of each image
            (NativeDataset's `views`): samples `([view_0, ...], label)`, all views from one
            decode.

    Attributes:
        classes, class_to_idx, targets: as torchvision's ImageFolder.
        index: the flat sample index (paths, labels) the C++ engine reads.

    Example:
        >>> import fastload
        >>> from fastload import transforms as T
        >>> ds = fastload.ImageFolder("data/train", transforms=[T.RandomResizedCrop(224),
        ...     T.RandomHorizontalFlip(), T.Normalize([0.485, 0.456, 0.406],
        ...     [0.229, 0.224, 0.225])])                                  # doctest: +SKIP
        >>> loader = fastload.DataLoader(ds, batch_size=256, shuffle=True, num_workers=8)  # doctest: +SKIP
        >>> simclr = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1)]
        >>> two_views = fastload.ImageFolder("data/train", views=[simclr, simclr])  # doctest: +SKIP
    """

    def __init__(self, root: str, transforms: Optional[Sequence[Any]] = None,
                 extensions: Sequence[str] = IMG_EXTENSIONS, seed: int = 0, *,
                 ops: Optional[Sequence[Any]] = None, views: Optional[Sequence[Any]] = None):
        self.root = os.fspath(root)
        self.classes, self.class_to_idx = find_classes(self.root)
        paths, labels = scan_folder(self.root, self.class_to_idx, extensions)
        super().__init__(SampleIndex.from_files(paths, labels), transforms, seed, ops=ops, views=views)

    def __repr__(self) -> str:
        return (f"fastload.ImageFolder({self.root!r}, {_count(len(self), 'image')}, "
                f"{_count(len(self.classes), 'class')}, transforms={transforms_repr(self.transforms, self.tail)})")


class FileList(NativeDataset):
    """Images listed explicitly, with their labels.

    Args:
        paths: image file paths.
        labels: one int per path (default: all 0).
        transforms: specs from fastload.transforms applied to each image.
        seed: base of the random augmentation parameters (the loader overrides it).
        ops: the older name of `transforms` (same meaning; pass one of the two).
        views: in place of `transforms`, one transform list per view (see ImageFolder).

    Example:
        >>> from fastload import transforms as T
        >>> ds = FileList(["a.jpg", "b.jpg"], [0, 1], transforms=[T.Resize(256), T.CenterCrop(224)])
        >>> len(ds), ds.targets, ds.transforms[1]
        (2, [0, 1], CenterCrop(size=(224, 224)))
    """

    def __init__(self, paths: Sequence[str], labels: Optional[Sequence[int]] = None,
                 transforms: Optional[Sequence[Any]] = None, seed: int = 0, *,
                 ops: Optional[Sequence[Any]] = None, views: Optional[Sequence[Any]] = None):
        paths = [os.fspath(p) for p in paths]
        labels = [0] * len(paths) if labels is None else list(labels)
        if len(labels) != len(paths):
            raise ValueError(f"fastload.FileList: expected one label per path, got {len(labels)} labels for {len(paths)} paths")
        super().__init__(SampleIndex.from_files(paths, labels), transforms, seed, ops=ops, views=views)

    def __repr__(self) -> str:
        return (f"fastload.FileList({_count(len(self), 'image')}, "
                f"transforms={transforms_repr(self.transforms, self.tail)})")
