"""What a dataset is, asked once: the adapters and the walk through torch's wrappers.

The loader asks `adapter_for(dataset)` what kind of dataset it holds and `analyse(dataset)`
what the native engine can make of it; neither it nor fastload/native/ names a library.
Each kind is one `Adapter` (fastload/adapters/base.py), asked in this order
(registry.py): a webdataset pipeline (webdataset.py), a view that analyses itself
(native.py), a Hugging Face dataset (huggingface.py, huggingface_trace.py), fastload's own
datasets (native.py), torchvision's DatasetFolder (folder.py), and any other class, run
under the tracer (traced.py, on fastload.trace). torch's Subset and ConcatDataset are
seen through around any of them (walk.py), and `explain` reports it all as text.

Example:
    >>> import torch
    >>> data = torch.utils.data.Subset(torch.utils.data.TensorDataset(torch.arange(4)), [0, 2])
    >>> analyse(data).describe()
    'Subset -> TensorDataset: TensorDataset is not a torchvision dataset fastload recognises ...'
"""

from typing import Any, List, Tuple

from fastload.adapters.base import Adapter, Adopted
from fastload.adapters.registry import ADAPTERS, adapter_for
from fastload.adapters.walk import analyse, basis, convert
from fastload.source.index import SampleIndex


def convert_native(dataset: Any) -> Tuple[SampleIndex, List[Any]]:
    """(sample index, fastload specs) for a dataset that runs fully natively: no Python
    tail, no target_transform. Else NotConvertible naming every blocker in one line."""
    conversion = convert(dataset)
    return conversion.index, conversion.native_specs()


__all__ = ["ADAPTERS", "Adapter", "Adopted", "adapter_for", "analyse", "basis", "convert", "convert_native"]
