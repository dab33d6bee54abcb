"""fastload's own datasets (ImageFolder, FileList, TarShards) and views that analyse themselves.

Example:
    >>> NativeAdapter().claims(object())
    False
"""

from __future__ import annotations

from typing import Any

from fastload.adapters.base import Adapter
from fastload.augment.split import Pipeline
from fastload.compat.conversion import AnalysedSource, Analysis, NativeSource


class AnalysedAdapter(Adapter):
    """A dataset that gives its own Analysis (a webdataset pipeline's view of its shards)."""

    name = "analysed source"

    def claims(self, dataset: Any) -> bool:
        return isinstance(dataset, AnalysedSource)

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        return dataset.analysis(wrapped)


class NativeAdapter(Adapter):
    """fastload's own datasets: their index and pipeline as they are, never converted again."""

    name = "fastload dataset"

    def claims(self, dataset: Any) -> bool:
        return isinstance(dataset, NativeSource)

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        name = type(dataset).__name__
        out = Analysis(f"fastload {name}", native_dataset=True)
        out.pipeline = Pipeline(tuple(dataset.transforms), tuple(dataset.tail), tuple(dataset.tail_blockers))
        out.index = dataset.index
        if wrapped:
            # Its random draws follow its own seed and sample numbers; inside a wrapper the
            # engine would number the samples differently and draw another seed.
            out.refuse(f"a fastload {name} inside a wrapper (its augmentation is seeded per its own sample "
                       "numbers)", "build the fastload dataset on the selected files: "
                       "fastload.FileList(paths, labels, transforms=...)")
        return out
