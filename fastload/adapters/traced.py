"""A dataset no other adapter claims: its own `__getitem__` run under the tracer (fastload.trace).

The analysis says first why it is not a dataset fastload recognises, then the tracer
learns it from its own calls (`fastload.trace.trace_dataset`): a traced analysis, or
these reasons with the trace's (the user's file:line).

Example:
    >>> import torch
    >>> TracedAdapter().analyse(torch.utils.data.TensorDataset(torch.arange(2)), wrapped=False).reasons[0][:40]
    'TensorDataset is not a torchvision datas'
"""

from __future__ import annotations

from typing import Any

from fastload.adapters.base import Adapter
from fastload.compat.conversion import Analysis
from fastload.compat.torchvision import flatten, split_transform
from fastload.trace import trace_dataset

KNOWN = ("ImageFolder, DatasetFolder and subclasses keeping its __getitem__ and loader, "
         "Subset/random_split and ConcatDataset of those")
OWN_DATASET_FIX = ("subclass torchvision.datasets.DatasetFolder/ImageFolder without overriding __getitem__, "
                   "or use fastload.FileList(paths, labels, transforms=...)")


def traced(dataset: Any, out: Analysis) -> Analysis:
    """`out` (the analysis of a dataset not recognised, with its reasons), or what running
    its own `__getitem__` under the tracer shows."""
    return trace_dataset(dataset, out)


class TracedAdapter(Adapter):
    """The last adapter asked: claims every dataset."""

    name = "traced dataset"

    def claims(self, dataset: Any) -> bool:
        return True

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        name = type(dataset).__name__
        out = Analysis(name)
        transform = getattr(dataset, "transform", None)
        if hasattr(dataset, "samples") and transform is not None:
            out.refuse(f"{name} is a Dataset of its own with samples and transform, but its __getitem__ is its own: "
                       "fastload cannot tell what it returns without running it", OWN_DATASET_FIX)
        elif type(dataset).__module__.startswith("torchvision."):
            out.refuse(f"{name} is not a torchvision DatasetFolder (native: image files listed in .samples)",
                       "write it once with fastload.write_shards (images + labels), then use fastload.TarShards")
        else:
            out.refuse(f"{name} is not a torchvision dataset fastload recognises ({KNOWN})", OWN_DATASET_FIX)
        if transform is not None:
            out.transform, out.pipeline = transform, split_transform(transform, to_run=True)
            out.wrappers = flatten(transform)[1]
        return traced(dataset, out)
