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
is run under the tracer (fastload/compat/trace.py): where it opens each image with PIL and
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

import os
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import ConcatDataset, Subset

from fastload.augment.split import MAX_DEPTH, Pipeline, transforms_repr
from fastload.source.index import FlatStrings, SampleIndex
from fastload.source.ranges import RemoteGroup

_KNOWN = ("ImageFolder, DatasetFolder and subclasses keeping its __getitem__ and loader, "
          "Subset/random_split and ConcatDataset of those")
_OWN_DATASET_FIX = ("subclass torchvision.datasets.DatasetFolder/ImageFolder without overriding __getitem__, "
                    "or use fastload.FileList(paths, labels, transforms=...)")


class NativeSource:
    """A dataset that is fastload's own: a sample index and transforms already cut into
    the native prefix and the Python tail. fastload.datasets.base.NativeDataset (ImageFolder,
    FileList, TarShards) derives from it, so that `analyse` takes such a dataset as it is
    (its index and pipeline, never converted again) without this layer importing the
    datasets built above it.

    Attributes (set by the subclass):
        index: SampleIndex, where each sample's bytes are, and its label.
        transforms: the fastload specs of the native prefix.
        tail: the Python transforms after it (a tuple, empty when all is native).
        tail_blockers: why each tail transform has no native equivalent.
    """

    index: SampleIndex
    transforms: List[Any]
    tail: Tuple[Any, ...]
    tail_blockers: Tuple[str, ...]


class AnalysedSource:
    """A dataset built above this layer that gives its own Analysis (`analysis(wrapped)`),
    e.g. fastload.datasets.webdataset.WebDatasetSamples, a webdataset pipeline's view of
    its shards: `analyse` takes it as it says, without importing the layer that made it."""

    def analysis(self, wrapped: bool = False) -> "Analysis":
        raise NotImplementedError


@dataclass(frozen=True)
class Conversion:
    """A dataset the native engine can read, and what runs on each sample.

    Attributes:
        index: where each sample's bytes are, and its class index, in the dataset's order.
        pipeline: the transforms cut into the native prefix (`pipeline.native`, fastload
            specs the engine runs), the Python tail (`pipeline.tail`, the user's
            transforms from the first non-native one on, applied per sample to the
            prefix's output) and `pipeline.blockers` (each tail transform without a
            native equivalent, "<transform>: <why>").
        target_transform: applied in Python to each label (see collate_labels), or None.
        origin: the dataset chain, outermost first: "Subset -> torchvision ImageFolder".
        prefix: the user's transforms of the native prefix, wrappers opened (what says
            whether torchvision's image is a tensor where the tail starts).
    """

    index: SampleIndex
    pipeline: Pipeline
    target_transform: Any
    origin: str
    prefix: Tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"Conversion({_summary(self.origin, self.index, self.pipeline, self.target_transform)})"

    def blockers(self) -> List[str]:
        """Everything that keeps this dataset off the fully native path, in one list."""
        out = list(self.pipeline.blockers)
        if self.target_transform is not None:
            out.append(f"target_transform {callable_name(self.target_transform)} (runs in Python on each label)")
        return out

    def native_specs(self) -> List[Any]:
        """The specs, when the engine alone gives the dataset's samples (no tail, no
        target_transform); else NotConvertible naming every blocker."""
        from fastload.compat.torchvision import NotConvertible

        blockers = self.blockers()
        if blockers:
            raise NotConvertible(f"{self.origin}: " + "; ".join(blockers))
        return list(self.pipeline.native)

    def python_tail(self, input: str = "pil") -> Any:
        """The Python tail as a fastload.augment.tail.Tail (None when every transform is
        native). It receives what torchvision's DatasetFolder hands that transform: a PIL
        RGB image, or the prefix's tensor when the prefix converted to one (ToTensor,
        PILToTensor, ToImage, ToDtype, Normalize, timm's MaybeToTensor/MaybePILToTensor)."""
        if not self.pipeline.tail:
            return None
        from fastload.augment import specs
        from fastload.augment.tail import Tail, makes_tensor

        tensor = any(makes_tensor(t) or type(t).__name__ in ("MaybeToTensor", "MaybePILToTensor")
                     for t in self.prefix) or any(isinstance(s, (specs.ToDtype, specs.Normalize))
                                                  for s in self.pipeline.native)
        return Tail(self.pipeline.tail, input=input, prefix_makes_tensor=tensor, blockers=self.pipeline.blockers)

    def tail_refusal(self) -> Optional[str]:
        """Why the tail cannot run on the engine's output although the prefix is native,
        or None: a prefix ending in timm's ToNumpy hands the tail a numpy array, which the
        engine does not make."""
        if self.pipeline.tail and any(type(t).__module__.startswith("timm.") and type(t).__name__ == "ToNumpy"
                                      for t in self.prefix):
            return (f"{self.origin}: the Python tail after timm's ToNumpy would receive numpy arrays (the native "
                    "prefix makes tensors)")
        return None

    def collate_labels(self, labels: torch.Tensor) -> Any:
        """A batch's labels as the dataset gives them: the int64 class indexes, or
        default_collate of target_transform(int(label)) for each."""
        if self.target_transform is None:
            return labels
        from torch.utils.data import default_collate

        return default_collate([self.target_transform(int(label)) for label in labels.tolist()])


@dataclass
class Analysis:
    """What the compat layer sees in a dataset (fastload.explain prints it).

    Attributes:
        chain: the dataset chain, outermost first ("Subset -> torchvision ImageFolder").
        reasons: why the dataset itself cannot be indexed (empty: it can).
        fixes: what to change for each reason, in the same order.
        index, pipeline, target_transform: as in Conversion (index None when reasons;
            pipeline None when no transform could be found).
        transform: the transform object the pipeline comes from.
        wrappers: the transform wrappers opened (e.g. ["ClassificationPresetTrain", "Compose"]).
    """

    chain: str
    reasons: List[str] = field(default_factory=list)
    fixes: List[str] = field(default_factory=list)
    index: Optional[SampleIndex] = None
    pipeline: Optional[Pipeline] = None
    target_transform: Any = None
    transform: Any = None
    wrappers: List[str] = field(default_factory=list)
    native_dataset: bool = False

    def __repr__(self) -> str:
        reasons = f", reasons={self.reasons!r}" if self.reasons else ""
        return f"Analysis({_summary(self.chain, self.index, self.pipeline, self.target_transform)}{reasons})"

    def refuse(self, reason: str, fix: str = "") -> "Analysis":
        self.reasons.append(reason)
        self.fixes.append(fix)
        self.index = None
        return self

    def describe(self) -> str:
        """One line: every reason and blocker, prefixed by the chain where it helps."""
        items = list(self.reasons)
        if self.pipeline is not None:
            items += list(self.pipeline.blockers)
        if self.target_transform is not None:
            items.append(f"target_transform {callable_name(self.target_transform)} (runs in Python on each label)")
        prefix = f"{self.chain}: " if (" -> " in self.chain or "(" in self.chain or not self.reasons) else ""
        return prefix + "; ".join(items) if items else self.chain

    def conversion(self) -> "Conversion":
        assert self.index is not None and not self.reasons
        pipeline = self.pipeline or Pipeline((), (), ())
        prefix: Tuple[Any, ...] = ()
        if self.transform is not None:
            from fastload.compat.torchvision import flatten

            leaves = flatten(self.transform)[0]
            prefix = tuple(leaves[:len(leaves) - len(pipeline.tail)])
        return Conversion(self.index, pipeline, self.target_transform, self.chain, prefix)


def _summary(chain: str, index: Optional[SampleIndex], pipeline: Optional[Pipeline], target_transform: Any) -> str:
    """"<chain>, <n> samples, transforms=[<native>] + python[<tail>]" for the reprs (the
    native part is what the engine runs, the tail what runs per sample in Python)."""
    parts = [chain]
    if index is not None:
        parts.append(f"{len(index)} sample{'' if len(index) == 1 else 's'}")
    if pipeline is not None:
        parts.append(f"transforms={transforms_repr(pipeline.native, pipeline.tail)}")
    if target_transform is not None:
        parts.append(f"target_transform={callable_name(target_transform)}")
    return ", ".join(parts)


def callable_name(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", None)  # functions and classes; instances: their repr
    return qualname if isinstance(qualname, str) else repr(obj)


def _same(cls: type, base: type, *names: str) -> bool:
    return all(getattr(cls, n, None) is getattr(base, n, None) for n in names)


def analyse(dataset: Any, _depth: int = 0) -> Analysis:
    """The compat layer's view of `dataset`: chain, reasons, index, pipeline (no raising)."""
    name = type(dataset).__name__
    if _depth > MAX_DEPTH:
        return Analysis(name).refuse(f"{name}: datasets nested more than {MAX_DEPTH} deep")
    if isinstance(dataset, Subset):
        return _subset(dataset, _depth)
    if isinstance(dataset, ConcatDataset):
        return _concat(dataset, _depth)
    return _base(dataset, wrapped=_depth > 0)


def convert(dataset: Any) -> Conversion:
    """Conversion of `dataset`, else NotConvertible naming every reason and blocker."""
    from fastload.compat.torchvision import NotConvertible

    analysis = analyse(dataset)
    if analysis.reasons:
        raise NotConvertible(analysis.describe(), fix="; ".join(f for f in analysis.fixes if f))
    return analysis.conversion()


def _subset(dataset: Subset, depth: int) -> Analysis:
    name = type(dataset).__name__
    inner = analyse(dataset.dataset, depth + 1)
    out = Analysis(f"{name} -> {inner.chain}", list(inner.reasons), list(inner.fixes), inner.index, inner.pipeline,
                   inner.target_transform, inner.transform, inner.wrappers)
    if not _same(type(dataset), Subset, "__getitem__", "__getitems__", "__len__"):
        return out.refuse(f"{name} overrides Subset's __getitem__/__getitems__/__len__",
                          "use torch.utils.data.Subset itself")
    if out.index is None:
        return out
    rows, why = _rows(dataset.indices, len(out.index))
    if rows is None:
        return out.refuse(f"{name}.indices {why}", "pass integer indices within the wrapped dataset")
    if _lazily_traced(inner):  # its rows taken as the loader reaches them
        from fastload.compat import trace_views

        return trace_views.subset(dataset, inner, rows, out)
    out.index = _take(out.index, rows)
    return out


def _lazily_traced(analysis: Analysis) -> bool:
    """An analysis whose index a trace fills as the loader reaches it
    (fastload.compat.trace_lazy): a wrapper takes its rows through a LazyView."""
    trace = getattr(analysis, "trace", None)
    if trace is None:
        return False
    from fastload.compat.trace_views import is_lazy

    return is_lazy(trace)


def _rows(indices: Any, n: int) -> Tuple[Optional[np.ndarray], str]:
    try:
        if isinstance(indices, torch.Tensor):
            rows = indices.detach().cpu().numpy()
        else:
            rows = np.asarray(indices if isinstance(indices, (np.ndarray, list, tuple)) else list(indices))
    except (TypeError, ValueError, RuntimeError) as error:
        return None, f"cannot be read as integers ({error})"
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64), ""
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        return None, f"are not a flat list of integers (got {rows.dtype} with shape {rows.shape})"
    rows = rows.astype(np.int64)
    bad = (rows < -n) | (rows >= n)
    if bad.any():
        return None, f"hold {int(rows[bad][0])}, out of range for the {n} samples it wraps"
    return np.where(rows < 0, rows + n, rows), ""


def _take(index: SampleIndex, rows: np.ndarray) -> SampleIndex:
    members = None if index.members is None else FlatStrings.from_list(index.members[int(i)] for i in rows)
    return SampleIndex(index.files, index.file_ids[rows], index.offsets[rows], index.sizes[rows],
                       index.labels[rows], members, remote=index.remote)


def concat_index(indexes: Sequence[SampleIndex]) -> SampleIndex:
    file_shift = np.cumsum([0] + [len(i.files) for i in indexes[:-1]])
    byte_shift = np.cumsum([0] + [len(i.files.data) for i in indexes[:-1]])
    files = FlatStrings(
        np.concatenate([i.files.data for i in indexes] or [np.zeros(0, np.uint8)]),
        np.concatenate([[0]] + [i.files.offsets[1:] + b for i, b in zip(indexes, byte_shift)]).astype(np.int64))
    members = None
    if any(i.members is not None for i in indexes):
        members = FlatStrings.from_list(
            (i.members[k] if i.members is not None else "") for i in indexes for k in range(len(i)))
    cat = lambda arrays: np.concatenate(arrays or [np.zeros(0, np.int64)]).astype(np.int64)  # noqa: E731
    return SampleIndex(files, cat([i.file_ids + s for i, s in zip(indexes, file_shift)]),
                       cat([i.offsets for i in indexes]), cat([i.sizes for i in indexes]),
                       cat([i.labels for i in indexes]), members,
                       remote=RemoteGroup.of([i.remote for i in indexes]))


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
    if not _same(type(dataset), ConcatDataset, "__getitem__", "__getitems__", "__len__"):
        out.refuse(f"{name} overrides ConcatDataset's __getitem__/__getitems__/__len__",
                   "use torch.utils.data.ConcatDataset itself")
    if not parts:
        return out.refuse(f"{name} has no parts")
    first = parts[0]
    out.pipeline, out.target_transform, out.transform, out.wrappers = \
        first.pipeline, first.target_transform, first.transform, first.wrappers
    for position, part in enumerate(parts[1:], start=1):
        if not _same_pipeline(first, part):
            out.refuse(f"part {position} has other transforms than part 0 "
                       f"({_pipeline_text(part)} vs {_pipeline_text(first)}); one loader runs one pipeline",
                       "build every part with the same transform and target_transform objects, or use one "
                       "loader per part")
    if out.reasons:
        return out
    if any(_lazily_traced(p) for p in parts):  # traced parts: their indexes taken as the loader reaches them
        from fastload.compat import trace_views

        out = trace_views.concat(dataset, parts, out)
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


def _traced(dataset: Any, out: Analysis, wrapped: bool) -> Analysis:
    """`out`, the analysis of a dataset not recognised, or what running its own
    __getitem__ under the tracer shows (fastload/compat/trace.py)."""
    from fastload.compat.trace import trace_dataset

    return trace_dataset(dataset, out, wrapped=wrapped)


def _base(dataset: Any, wrapped: bool) -> Analysis:
    from fastload.compat.torchvision import flatten, split_transform
    name = type(dataset).__name__
    if isinstance(dataset, AnalysedSource):  # e.g. a webdataset pipeline's view of its shards
        return dataset.analysis(wrapped)
    if "datasets" in sys.modules:  # (no object is a Hugging Face dataset before that import)
        from fastload.compat.hf_datasets import analyse_hf, is_hf_dataset

        if is_hf_dataset(dataset):  # a Hugging Face datasets.Dataset: its Arrow table and formatting
            return analyse_hf(dataset, wrapped=wrapped)
    if isinstance(dataset, NativeSource):
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
    folder = sys.modules.get("torchvision.datasets.folder")
    if folder is None or not isinstance(dataset, folder.DatasetFolder):
        out = Analysis(name)
        transform = getattr(dataset, "transform", None)
        if hasattr(dataset, "samples") and transform is not None:
            out.refuse(f"{name} is a Dataset of its own with samples and transform, but its __getitem__ is its own: "
                       "fastload cannot tell what it returns without running it", _OWN_DATASET_FIX)
        elif type(dataset).__module__.startswith("torchvision."):
            out.refuse(f"{name} is not a torchvision DatasetFolder (native: image files listed in .samples)",
                       "write it once with fastload.write_shards (images + labels), then use fastload.TarShards")
        else:
            out.refuse(f"{name} is not a torchvision dataset fastload recognises ({_KNOWN})", _OWN_DATASET_FIX)
        if transform is not None:
            out.transform, out.pipeline = transform, split_transform(transform, to_run=True)
            out.wrappers = flatten(transform)[1]
        return _traced(dataset, out, wrapped)

    out = Analysis(f"torchvision {name}")
    cls = type(dataset)
    out.transform = dataset.transform
    out.pipeline = split_transform(dataset.transform, to_run=True)
    out.wrappers = flatten(dataset.transform)[1]
    out.target_transform = dataset.target_transform
    if not _same(cls, folder.DatasetFolder, "__getitem__", "__getitems__", "__len__"):
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
        return _traced(dataset, out, wrapped)
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
    folder = sys.modules.get("torchvision.datasets.folder")
    if folder is None or not isinstance(dataset, folder.DatasetFolder) or \
            not _same(type(dataset), folder.DatasetFolder, "__getitem__"):
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
        from fastload.compat.torchvision import split_transform

        pipeline = split_transform(transform, to_run=True)
        specs = (tuple(pipeline.native), tuple(_Same(t) for t in pipeline.tail))
    samples = getattr(dataset, "samples", None)
    return (_Same(dataset), length, _Same(samples), len(samples) if isinstance(samples, list) else -1,
            _Same(transform), specs, _Same(getattr(dataset, "target_transform", None)),
            _Same(getattr(dataset, "loader", None)))
