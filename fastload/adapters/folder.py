"""torchvision's DatasetFolder and its subclasses (ImageFolder, ImageNet, ...) keeping its `__getitem__`.

Sample i is `samples[i]`, its image goes through `transform`, its label through
`target_transform`, with the default PIL loader and the PIL image backend. A subclass that
overrides `__getitem__`, a custom loader or joint transforms: the tracer runs it instead
(fastload/adapters/traced.py), these reasons kept beside the trace's.

Example:
    >>> import os, tempfile
    >>> from PIL import Image
    >>> from torchvision import datasets, transforms as T
    >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
    >>> Image.new("RGB", (8, 8)).save(os.path.join(root, "a", "0.jpg"))
    >>> analysis = FolderAdapter().analyse(datasets.ImageFolder(root, transform=T.ToTensor()), wrapped=False)
    >>> analysis.chain, analysis.index.labels.tolist()
    ('torchvision ImageFolder', [0])
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from fastload.adapters.base import Adapter
from fastload.adapters.traced import traced
from fastload.compat.conversion import Analysis, callable_name
from fastload.compat.torchvision import flatten, split_transform
from fastload.source.index import SampleIndex


def same_methods(cls: type, base: type, *names: str) -> bool:
    """`cls` keeps `base`'s methods `names` (does not override them)."""
    return all(getattr(cls, n, None) is getattr(base, n, None) for n in names)


def folder_module() -> Any:
    """torchvision.datasets.folder when imported (no object is a DatasetFolder before)."""
    return sys.modules.get("torchvision.datasets.folder")


class FolderAdapter(Adapter):
    name = "torchvision DatasetFolder"

    def claims(self, dataset: Any) -> bool:
        folder = folder_module()
        return folder is not None and isinstance(dataset, folder.DatasetFolder)

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        folder = folder_module()
        name = type(dataset).__name__
        out = Analysis(f"torchvision {name}")
        cls = type(dataset)
        out.transform = dataset.transform
        out.pipeline = split_transform(dataset.transform, to_run=True)
        out.wrappers = flatten(dataset.transform)[1]
        out.target_transform = dataset.target_transform
        if not same_methods(cls, folder.DatasetFolder, "__getitem__", "__getitems__", "__len__"):
            out.refuse(f"{name} overrides DatasetFolder's __getitem__/__getitems__/__len__",
                       "keep DatasetFolder's __getitem__, or use fastload.FileList(paths, labels, transforms=...)")
        if dataset.loader not in (folder.default_loader, folder.pil_loader):
            out.refuse(f"{name} has a custom loader ({callable_name(dataset.loader)})",
                       "use the default PIL loader, or decode in a transform after it")
        import torchvision

        if torchvision.get_image_backend() != "PIL":
            out.refuse(f"torchvision's image backend is {torchvision.get_image_backend()!r} (native: PIL semantics)",
                       "torchvision.set_image_backend('PIL')")
        # torchvision's `dataset.transforms` is one callable: a StandardTransform wrapping
        # transform and target_transform, or the user's joint (image, target) transforms.
        joint = getattr(dataset, "transforms", None)
        if joint is not None and type(joint).__name__ != "StandardTransform":
            out.refuse(f"{name} has joint (image, target) transforms", "pass transform= and target_transform=")
        if out.reasons:
            return traced(dataset, out)
        if out.pipeline.tail and not out.pipeline.native:
            # A transform the folder cannot read (SupContrast's TwoCropTransform making two
            # views): its calls, traced, may all be native; else the folder's analysis stands.
            seen = traced(dataset, Analysis(out.chain))
            if not seen.reasons and seen.trace is not None:
                return seen
        try:
            paths = [os.fspath(path) for path, _ in dataset.samples]
            labels = [label for _, label in dataset.samples]
        except (TypeError, ValueError) as error:
            return out.refuse(f"{name}.samples is not a list of (path, class index) ({error})")
        if not all(type(label) is int or isinstance(label, np.integer) for label in labels):
            bad = next(label for label in labels if not (type(label) is int or isinstance(label, np.integer)))
            return out.refuse(f"{name}.samples holds a label {bad!r} that is not an int class index",
                              "keep class indexes in samples; map them with target_transform")
        out.index = SampleIndex.from_files(paths, labels)
        return out
