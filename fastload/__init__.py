"""fastload: fast, drop-in input pipelines for PyTorch.

Change one import; a torchvision ImageFolder with standard transforms then runs on
fastload's native pipeline (C++ JPEG decode of the crop window, one fused
crop/resize/flip/normalize pass per image, threads with the GIL released):

Example:
    >>> import torch
    >>> from fastload import DataLoader
    >>> loader = DataLoader(torch.utils.data.TensorDataset(torch.arange(10)), batch_size=4)
    >>> [batch[0].tolist() for batch in loader]
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]

Native datasets: fastload.ImageFolder, fastload.FileList, fastload.TarShards, with
their transforms from fastload.transforms (`transforms=[T.RandomResizedCrop(224), ...]`,
or `views=[[...], [...]]`: several views of each image from one decode), and
fastload.SegmentationDataset (image + mask file pairs, `mask=fastload.Mask(fill=255)`),
fastload.DetectionDataset (images and their bounding boxes: samples `(image, target)`).
`python -m fastload.info` says what was built.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from fastload.errors import DecodeError
from fastload.loader import DataLoader

# Imported on first use, so `import fastload` stays light.
_LAZY = {
    "transforms": ("fastload.transforms", None),
    "ops": ("fastload.ops", None),
    "ImageFolder": ("fastload.datasets.folder", "ImageFolder"),
    "FileList": ("fastload.datasets.folder", "FileList"),
    "TarShards": ("fastload.datasets.tar", "TarShards"),
    "SegmentationDataset": ("fastload.datasets.segmentation", "SegmentationDataset"),
    "Mask": ("fastload.augment.views", "Mask"),
    "DetectionDataset": ("fastload.datasets.detection", "DetectionDataset"),
    "write_shards": ("fastload.datasets.write", "write_shards"),
    "publish_shard_indexes": ("fastload.source.remote_index", "publish_indexes"),
    "prepare": ("fastload.prepare", None),  # a callable module: fastload.prepare(src, dst)
    "TarShardError": ("fastload.errors", "TarShardError"),
    "ManifestError": ("fastload.source.manifest", "ManifestError"),
    "NativeDataset": ("fastload.datasets.base", "NativeDataset"),
    "explain": ("fastload.adapters.explain", "explain"),
    # fastload's DataLoader wherever code builds torch's (`python -m fastload run` does it too).
    "patch": ("fastload.patch", None),  # a callable module: fastload.patch() is fastload.patch.patch()
    "unpatch": ("fastload.patch", "unpatch"),
    "is_patched": ("fastload.patch", "is_patched"),
    "patched_loaders": ("fastload.patch", "patched_loaders"),
    # Every exception type fastload raises to its users, so that it can be caught by name.
    "NotBuiltError": ("fastload._ext", "NotBuiltError"),
    "ErrorPolicy": ("fastload.errors", "ErrorPolicy"),
    "UnsupportedPipeline": ("fastload.errors", "UnsupportedPipeline"),
    "FolderInUse": ("fastload.errors", "FolderInUse"),
    "PrepareDecodeError": ("fastload.prepare.run", "PrepareDecodeError"),
    "UnreadableSample": ("fastload.prepare.source", "UnreadableSample"),
    "NotConvertible": ("fastload.compat.torchvision", "NotConvertible"),
}

__all__ = ["DataLoader", "DecodeError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'fastload' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
