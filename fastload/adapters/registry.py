"""The adapters, in the order they are asked, and `adapter_for(dataset)`.

Example:
    >>> import torch
    >>> adapter_for(torch.utils.data.TensorDataset(torch.arange(2))).name
    'traced dataset'
"""

from __future__ import annotations

from typing import Any, Tuple

from fastload.adapters.base import Adapter
from fastload.adapters.folder import FolderAdapter
from fastload.adapters.huggingface import HuggingFaceAdapter
from fastload.adapters.native import AnalysedAdapter, NativeAdapter
from fastload.adapters.traced import TracedAdapter
from fastload.adapters.webdataset import WebDatasetAdapter

# Most specific first; the tracer last: it claims every dataset.
ADAPTERS: Tuple[Adapter, ...] = (WebDatasetAdapter(), AnalysedAdapter(), HuggingFaceAdapter(), NativeAdapter(),
                                 FolderAdapter(), TracedAdapter())


def adapter_for(dataset: Any) -> Adapter:
    """The adapter of `dataset`'s kind (the tracer's when no other claims it)."""
    return next(adapter for adapter in ADAPTERS if adapter.claims(dataset))
