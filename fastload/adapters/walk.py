"""Datasets people wrap, seen through to a sample index and one transform pipeline.

Recognised (everything else: a reason naming the class):

- torchvision DatasetFolder and its subclasses (ImageFolder, ImageNet, ...) that keep
  DatasetFolder's `__getitem__`, `__len__` (and no `__getitems__`), with the default PIL
  loader and the PIL image backend: sample i is `samples[i]`, its image goes through
  `transform`, its label through `target_transform`.
- torch Subset (what random_split returns), nested to any depth: the index is the
  wrapped one taken at `indices` (negative indices count from the end, as Python's).
- torch ConcatDataset: the parts' indexes one after the other; every part must have the
  same transform pipeline and target_transform (one loader runs one pipeline).

Not recognised (a Dataset of its own class, a DatasetFolder with its own `__getitem__` or
loader): its `__getitem__` is arbitrary code (how it opens the file, whether it converts
to RGB, applies the transform, what it returns), and only running it tells. Such a dataset
is run under the tracer (fastload/trace/): where it opens each image with PIL and
hands it to a transform fastload maps, the trace gives the same index and pipeline (chain
"traced <Class>.__getitem__"); else it runs on the generic path, and the reason says why.

Labels: the index holds each sample's class index (int64). Without a target_transform
that is the batch's label tensor; with one, each label is `target_transform(int(label))`
collated with torch's default_collate (`Conversion.collate_labels`), exactly what
DatasetFolder's `__getitem__` and the default collate give.

Example:
    >>> import torch
    >>> data = torch.utils.data.Subset(torch.utils.data.TensorDataset(torch.arange(4)), [0, 2])
    >>> analyse(data).describe()
    'Subset -> TensorDataset: TensorDataset is not a torchvision dataset fastload recognises ...'
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import ConcatDataset, Subset

from fastload.adapters.folder import folder_module, same_methods
from fastload.adapters.registry import adapter_for
from fastload.augment.split import MAX_DEPTH
from fastload.compat.conversion import (AnalysedSource, Analysis, Conversion, NativeSource, callable_name, concat_index,
                                       rows_of, take_rows)
from fastload.compat.torchvision import NotConvertible, split_transform
from fastload.trace import concat_view, is_lazy, subset_view

def analyse(dataset: Any, _depth: int = 0) -> Analysis:
    """The compat layer's view of `dataset`: chain, reasons, index, pipeline (no raising)."""
    name = type(dataset).__name__
    if _depth > MAX_DEPTH:
        return Analysis(name).refuse(f"{name}: datasets nested more than {MAX_DEPTH} deep")
    if isinstance(dataset, Subset):
        return _subset(dataset, _depth)
    if isinstance(dataset, ConcatDataset):
        return _concat(dataset, _depth)
    return adapter_for(dataset).analyse(dataset, wrapped=_depth > 0)


def convert(dataset: Any) -> Conversion:
    """Conversion of `dataset`, else NotConvertible naming every reason and blocker."""
    analysis = analyse(dataset)
    if analysis.reasons:
        raise NotConvertible(analysis.describe(), fix="; ".join(f for f in analysis.fixes if f))
    return analysis.conversion()


def _subset(dataset: Subset, depth: int) -> Analysis:
    name = type(dataset).__name__
    inner = analyse(dataset.dataset, depth + 1)
    out = Analysis(f"{name} -> {inner.chain}", list(inner.reasons), list(inner.fixes), inner.index, inner.pipeline,
                   inner.target_transform, inner.transform, inner.wrappers)
    out.outputs = inner.outputs  # (several image views: the wrapper's batches have them too)
    if not same_methods(type(dataset), Subset, "__getitem__", "__getitems__", "__len__"):
        return out.refuse(f"{name} overrides Subset's __getitem__/__getitems__/__len__",
                          "use torch.utils.data.Subset itself")
    if out.index is None:
        return out
    rows, why = rows_of(dataset.indices, len(out.index))
    if rows is None:
        return out.refuse(f"{name}.indices {why}", "pass integer indices within the wrapped dataset")
    if _lazily_traced(inner):  # its rows taken as the loader reaches them
        return subset_view(dataset, inner, rows, out)
    out.index = take_rows(out.index, rows)
    return out


def _lazily_traced(analysis: Analysis) -> bool:
    """An analysis whose index a trace fills as the loader reaches it
    (fastload.trace.lazy): a wrapper takes its rows through a LazyView (fastload.trace.views)."""
    trace = getattr(analysis, "trace", None)
    if trace is None:
        return False
    return is_lazy(trace)


def _same_pipeline(a: Analysis, b: Analysis) -> bool:
    if a.target_transform is not b.target_transform:
        return False
    if a.pipeline is None or b.pipeline is None:
        return a.pipeline is b.pipeline
    return a.pipeline.native == b.pipeline.native and len(a.pipeline.tail) == len(b.pipeline.tail) \
        and all(x is y for x, y in zip(a.pipeline.tail, b.pipeline.tail))


def _concat(dataset: ConcatDataset, depth: int) -> Analysis:
    name = type(dataset).__name__
    parts = [analyse(d, depth + 1) for d in dataset.datasets]
    out = Analysis(f"{name}({', '.join(p.chain for p in parts)})")
    for position, part in enumerate(parts):
        for reason, fix in zip(part.reasons, part.fixes):
            out.refuse(f"part {position} ({part.chain}): {reason}", fix)
    if not same_methods(type(dataset), ConcatDataset, "__getitem__", "__getitems__", "__len__"):
        out.refuse(f"{name} overrides ConcatDataset's __getitem__/__getitems__/__len__",
                   "use torch.utils.data.ConcatDataset itself")
    if not parts:
        return out.refuse(f"{name} has no parts")
    first = parts[0]
    out.pipeline, out.target_transform, out.transform, out.wrappers, out.outputs = \
        first.pipeline, first.target_transform, first.transform, first.wrappers, first.outputs
    for position, part in enumerate(parts[1:], start=1):
        if not _same_pipeline(first, part):
            out.refuse(f"part {position} has other transforms than part 0 "
                       f"({_pipeline_text(part)} vs {_pipeline_text(first)}); one loader runs one pipeline",
                       "build every part with the same transform and target_transform objects, or use one "
                       "loader per part")
    if out.reasons:
        return out
    if any(_lazily_traced(p) for p in parts):  # traced parts: their indexes taken as the loader reaches them
        out = concat_view(dataset, parts, out)
        if out.reasons:
            return out
        index = out.index
    else:
        index = concat_index([p.index for p in parts])
    if len(index) != len(dataset):
        return out.refuse(f"{name} has {len(dataset)} samples, its parts {len(index)}")
    out.index = index
    return out


def _pipeline_text(part: Analysis) -> str:
    if part.pipeline is None or part.transform is None:
        return "no transform"
    text = " -> ".join(type(s).__name__ for s in part.pipeline.native) or "no native transform"
    if part.pipeline.tail:
        text += " | Python: " + " -> ".join(type(t).__name__ for t in part.pipeline.tail)
    if part.target_transform is not None:
        text += f", target_transform {callable_name(part.target_transform)}"
    return text


class _Same:
    """An object compared by identity (a list of samples must not be compared item by item)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    __hash__ = None  # type: ignore[assignment]


def basis(dataset: Any, _depth: int = 0) -> Any:
    """What the conversion of a torchvision dataset (inside Subset / ConcatDataset) is made
    of, read cheaply: each layer's object and length, a Subset's indices, a DatasetFolder's
    samples, loader, transform and target_transform objects, and the fastload specs the
    transform makes now (a Resize whose size was changed in place makes others). Equal
    bases give equal conversions; the loader compares them at each iter() (torch reads
    the dataset anew each epoch) and converts the dataset again when they differ. A
    dataset of another class inside a wrapper (traced whole) has a basis equal to no other:
    converted each time.

    Example:
        >>> import os, tempfile
        >>> from PIL import Image
        >>> from torchvision import datasets, transforms as T
        >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
        >>> Image.new("RGB", (8, 8)).save(os.path.join(root, "a", "0.jpg"))
        >>> folder = datasets.ImageFolder(root, transform=T.Compose([T.Resize(6), T.ToTensor()]))
        >>> before = basis(folder)
        >>> before == basis(folder)
        True
        >>> folder.transform.transforms[0].size = 4
        >>> before == basis(folder)
        False
    """
    if _depth > MAX_DEPTH:
        return _Same(dataset)
    if isinstance(dataset, Subset):
        return ("Subset", _Same(dataset), _Same(dataset.indices), len(dataset.indices), basis(dataset.dataset, _depth + 1))
    if isinstance(dataset, ConcatDataset):
        return ("ConcatDataset", _Same(dataset), tuple(len(d) for d in dataset.datasets),
                tuple(basis(d, _depth + 1) for d in dataset.datasets))
    if isinstance(dataset, (NativeSource, AnalysedSource)):
        return _Same(dataset)
    folder = folder_module()
    if folder is None or not isinstance(dataset, folder.DatasetFolder) or \
            not same_methods(type(dataset), folder.DatasetFolder, "__getitem__"):
        # Inside a wrapper, a class of the user's own was traced whole: only tracing it again
        # tells what it is now. (The loader's own dataset, when traced, renews its trace.)
        return object() if _depth else _Same(dataset)
    try:
        length = len(dataset)
    except Exception:  # noqa: BLE001 - a length that fails: the conversion says why
        length = -1
    transform = getattr(dataset, "transform", None)
    specs: Any = None
    if transform is not None:
        pipeline = split_transform(transform, to_run=True)
        specs = (tuple(pipeline.native), tuple(_Same(t) for t in pipeline.tail))
    samples = getattr(dataset, "samples", None)
    return (_Same(dataset), length, _Same(samples), len(samples) if isinstance(samples, list) else -1,
            _Same(transform), specs, _Same(getattr(dataset, "target_transform", None)),
            _Same(getattr(dataset, "loader", None)))
