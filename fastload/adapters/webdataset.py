"""A webdataset pipeline (`wds.WebDataset(...)...`) seen as a map-style view of its shards.

The view itself (which stages are mapped, the shards' index) is
fastload.datasets.webdataset; this adapter is what the loader asks: run the view in
place of the pipeline (with the batching the pipeline's `batched(n)` carries), or the
reason it stays torch's.

Example:
    >>> WebDatasetAdapter().claims([1, 2])
    False
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from fastload.adapters.base import Adapter, Adopted
from fastload.compat.conversion import Analysis


def _view_module() -> Any:
    """fastload.datasets.webdataset, where webdataset is imported (else no object is a pipeline)."""
    if "webdataset" not in sys.modules:
        return None
    from fastload.datasets import webdataset

    return webdataset


class WebDatasetAdapter(Adapter):
    name = "webdataset pipeline"

    def claims(self, dataset: Any) -> bool:
        view = _view_module()
        return view is not None and view.is_pipeline(dataset)

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        why = self.generic_reason(dataset) or "generic: a webdataset pipeline the loader did not map"
        return Analysis(type(dataset).__name__).refuse(why.removeprefix("generic: "))

    def adopt(self, dataset: Any, *, batch_size: Optional[int], shuffle: Optional[bool], drop_last: bool,
              on_error: str, accelerate: Any, distributed: Any) -> Optional[Adopted]:
        adopted = _view_module().adopt(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                                       on_error=on_error, accelerate=accelerate, distributed=distributed)
        return None if adopted is None else Adopted(*adopted)

    def generic_reason(self, dataset: Any) -> Optional[str]:
        return _view_module().generic_reason(dataset)
