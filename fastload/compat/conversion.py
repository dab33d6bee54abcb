"""What the layers above make of a dataset: a `Conversion` (sample index + pipeline) or an `Analysis` with every reason.

Every adapter (fastload/adapters/: torchvision folders, fastload's own datasets, traced
classes, Hugging Face, webdataset) returns these types, so that the engine, resume, DDP
and stats need nothing else. `NativeSource` and `AnalysedSource` let datasets built above
this layer say what they are without this layer importing them.

Example:
    >>> from fastload.source.index import SampleIndex
    >>> analysis = Analysis("my dataset", index=SampleIndex.from_files(["a.jpg"], [3]))
    >>> analysis.conversion().origin, analysis.conversion().index.labels.tolist()
    ('my dataset', [3])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload.augment.split import Pipeline, transforms_repr
from fastload.compat.torchvision import NotConvertible, flatten
from fastload.source.index import FlatStrings, SampleIndex
from fastload.source.ranges import RemoteGroup


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
        rebuild: makes each batch in the dataset's own structure, `rebuild(images,
            labels, indices)`, where the index's labels are the dataset's indexes (a
            traced dataset's LazyTrace, a webdataset view's fields); None: batches are
            [images, labels] with the index's class labels.
        outputs: several image views per sample (fastload.augment.views.Outputs, view 0's
            specs those of `pipeline.native`), as a traced dataset whose one image
            reaches several transform calls makes them; None: one image per sample.
    """

    index: SampleIndex
    pipeline: Pipeline
    target_transform: Any
    origin: str
    prefix: Tuple[Any, ...] = ()
    rebuild: Any = None
    outputs: Any = None

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
        rebuild, trace: see Conversion.rebuild; trace: a traced dataset's LazyTrace.
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
    rebuild: Any = None  # as in Conversion
    trace: Any = None  # a traced dataset's LazyTrace (fastload.trace): what was traced, what fell back
    outputs: Any = None  # as in Conversion

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
            leaves = flatten(self.transform)[0]
            prefix = tuple(leaves[:len(leaves) - len(pipeline.tail)])
        return Conversion(self.index, pipeline, self.target_transform, self.chain, prefix, self.rebuild, self.outputs)


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


def rows_of(indices: Any, n: int) -> Tuple[Optional[np.ndarray], str]:
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


def take_rows(index: SampleIndex, rows: np.ndarray) -> SampleIndex:
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
