"""A lazily traced dataset inside torch's Subset or ConcatDataset, traced as the loader reaches it.

`fastload/trace/lazy.py` traces a dataset of the user's own class a batch at a
time. Wrapped in a `Subset` (what `random_split` returns) or a `ConcatDataset` (nested to
any depth), each outer index is one index of one traced dataset: `LazyView` keeps that
map (two arrays, no `__getitem__` call) and its own index for the engine, filled as the
outer indexes are reached. Tracing outer index j traces its dataset's index i (in that
dataset's LazyTrace); a sample whose
trace disagrees with its dataset's index 0 runs through the outer dataset's own
`__getitem__` per sample, and the warning names both indexes.

So a wrapper costs at construction what its datasets' probes cost (index 0 twice and 16
spread indexes each, undone), whatever its length; at each later iter() the wrapper is
analysed anew (its map may change with the datasets it wraps), as cheaply. A ConcatDataset mixing a traced dataset with
one fastload recognises otherwise (a torchvision ImageFolder, ...) traces its traced
parts completely instead (`eager`), as every wrapper did before. A sample of another
structure (a dict, several image views, extra tensors) is rebuilt from its own template
inside a wrapper as in the loader's own dataset: the view keeps each outer index's template,
and the parts of a ConcatDataset must return one structure (torch's collate needs it too).
A detection sample's template carries its boxes (TracedBoxes): the batch moves them through
the engine's draws for the outer index, the index the engine is handed. A segmentation
dataset's mask files (fastload.trace.masked) get a table of the view's own (`mask_index`),
filled from its parts' as its image files are; a ConcatDataset's parts all read a mask or none.

Example (Photos: a user's dataset of 1000 samples, labels i % 10, counting its calls):
    >>> import torch
    >>> from torchvision import transforms as T
    >>> from fastload.adapters import analyse
    >>> from fastload.trace.doc_dataset import Photos
    >>> photos = Photos(T.Compose([T.CenterCrop(4), T.ToTensor()]))
    >>> subset = torch.utils.data.Subset(photos, range(500, 1000))
    >>> view = analyse(subset).trace
    >>> photos.calls, view.n, view.traced  # (the probes' calls undone)
    (0, 500, 0)
    >>> view.prepare([3, 4]); view.traced, view.index.labels[[3, 4]].tolist()
    (2, [3, 4])
"""

from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from fastload.compat.conversion import Analysis
from fastload.trace.lazy import LazyTrace, flat_index
from fastload.trace.masked import MaskedTrace, MaskTable
from fastload.trace.sample import shape_text

# Outer indexes whose dataset index is traced already, copied into the view when it is made
# (the probes, a small dataset, a dataset a loader went through): at most this many, the
# rest as the loader reaches them (a copy is ~1 us: a bound keeps construction constant).
_COPY_UP_FRONT = 4096


def is_lazy(trace: object) -> bool:
    """A trace a wrapper can take indexes of lazily (LazyTrace or LazyView)."""
    return isinstance(trace, LazyTrace)


class LazyView(LazyTrace):
    """The LazyTrace interface over a Subset or ConcatDataset of traced datasets.

    Outer index j is index `inner[j]` of `parts[part_of[j]]` (each a LazyTrace of one
    traced dataset). `index` (the engine's) is the view's own: untraced outer indexes point
    at part 0's index 0 file until `prepare` traces them; labels are the class labels.

    Args:
        dataset: the outer dataset (its own __getitem__ makes a per-sample fallback).
        chain: the dataset chain, for messages ("Subset -> traced Photos.__getitem__").
        parts: the traced datasets' LazyTraces (one sample structure, the image in one place).
        part_of: int64 [n], each outer index's part.
        inner: int64 [n], each outer index's index in its part.
    """

    def __init__(self, dataset: Any, chain: str, parts: List[LazyTrace], part_of: np.ndarray, inner: np.ndarray):
        self.parts, self.part_of, self.inner = parts, part_of, inner
        self.chain = chain
        n = len(part_of)
        first = parts[0].first.path.encode("utf-8", "surrogateescape")
        capacity = max(4096, 64 * min(n, _COPY_UP_FRONT) + len(first))  # (grown as paths come)
        # Segmentation parts (MaskedTrace; a ConcatDataset's are all or none): the engine's
        # mask file per outer index beside its image's, mask 0 part 0's index 0's.
        self.mask_table = MaskTable(n, capacity, parts[0].mask_table.first) \
            if isinstance(parts[0], MaskedTrace) else None
        self.mask_index = None if self.mask_table is None else self.mask_table.index
        # File 0: part 0's index 0 (traced, never a fallback): what an untraced or
        # falling-back outer index points at, so the engine always reads a real file.
        super().__init__(dataset, parts[0].probes, n=n, capacity=capacity)
        known = np.zeros(n, dtype=bool)
        for p, part in enumerate(parts):
            mine = part_of == p
            known[mine] = part.done[inner[mine]]
        # (a fallback known already was warned about when it was found: not again here)
        self.falls.warned = True
        for j in np.flatnonzero(known)[:_COPY_UP_FRONT].tolist():
            self._adopt(j)
        self.falls.warned = False

    def run_like_torch(self, num_workers: int, seed: int) -> None:
        super().run_like_torch(num_workers, seed)
        for part in self.parts:
            part.keep_effects = self.keep_effects  # (the parts' traced calls are the view's)

    def renew(self, keep: bool = False) -> bool:
        """False unless `keep` (then True): a wrapper's map of outer to inner indexes may
        change with the datasets it wraps, so each epoch is analysed anew (each part's
        probes, undone; the wrapper's arrays), as cheap as the loader's construction."""
        return keep and self.n == len(self.dataset())

    def who(self, j: int) -> str:
        part = self.parts[int(self.part_of[j])]
        return (f"{part.name}.__getitem__ (traced, index {int(self.inner[j])} of {part.name}, index {j} of the "
                f"{self.chain})")

    def attach(self, runner: Any, only: bool = False) -> None:
        super().attach(runner, only)
        if self.mask_table is not None:
            self.mask_table.files.attach(runner, only)

    def _trace(self, todo: List[int]) -> None:
        rows = np.asarray(todo, dtype=np.int64)
        parts, inner = self.part_of[rows], self.inner[rows]
        for p in np.unique(parts).tolist():
            part = self.parts[p]
            # The part's own warning would name its index alone: the view warns, naming both.
            warned, part.falls.warned = part.falls.warned, True
            try:
                part.prepare(inner[parts == p])
            finally:
                part.falls.warned = warned
        for j in todo:
            self._adopt(j)

    def _adopt(self, j: int) -> None:
        """Outer index j as its part traced it (the part has traced it)."""
        part, i = self.parts[int(self.part_of[j])], int(self.inner[j])
        if part.fallback[i]:
            self._fall_back(j, part.fallbacks[i])
            self.fallbacks[j] = f"index {i} of {part.name}: {part.fallbacks[i]}"  # (what explain lists)
            return
        index = part.index
        self.index.file_ids[j] = self.files.add(index.files[int(index.file_ids[i])])
        self.index.offsets[j], self.index.sizes[j] = index.offsets[i], index.sizes[i]  # (a byte range of a file)
        if self.mask_table is not None:
            self.mask_table.put(j, part.mask_table.path(i))
        if self.simple:
            self.index.labels[j] = index.labels[i]
        else:  # (the labels are the outer indexes: the batch is rebuilt from each one's template)
            self.templates[j] = part.templates[i]  # type: ignore[index]
        self.done[j] = True

    def _point_at_placeholder(self, j: int) -> None:
        super()._point_at_placeholder(j)
        if self.mask_table is not None:
            self.mask_table.point_at_placeholder(j)


def _parts_of(analysis: Analysis) -> List[LazyTrace]:
    """(parts, part_of, inner) of a traced analysis: a LazyView's own, or one LazyTrace's."""
    trace = analysis.trace
    if isinstance(trace, LazyView):
        return list(trace.parts), trace.part_of, trace.inner
    return [trace], np.zeros(trace.n, dtype=np.int64), np.arange(trace.n, dtype=np.int64)


def _unlike(part: Analysis, first: Analysis) -> str:
    """Why a ConcatDataset's traced `part` cannot share a batch with its `first` part ("" when
    it can): another sample structure, the image in another place, other image views."""
    its, theirs = part.trace.first, first.trace.first
    if bool(its.masks) != bool(theirs.masks):
        return (f"{'reads a' if its.masks else 'reads no'} mask file per sample, part 0 "
                f"{'does' if theirs.masks else 'does not'}; the engine runs one set of outputs per batch")
    if shape_text(its.template) != shape_text(theirs.template) or part.trace.simple != first.trace.simple:
        return (f"returns {shape_text(its.template)}, part 0 {shape_text(theirs.template)}; one batch is made "
                "of one sample structure")
    if its.slot_at != theirs.slot_at:
        return "returns the image in another place than part 0"
    if part.outputs != first.outputs:
        return "makes other image views than part 0 (one loader runs one set of view pipelines)"
    return ""


_WRAPPED_FIX = "return every part's samples in one structure, with the same transforms"


def subset(dataset: Any, inner: Analysis, rows: np.ndarray, out: Analysis) -> Analysis:
    """`out` (the Subset's analysis, reasons none) as an Analysis over a LazyView of
    the traced `inner` analysis taken at `rows`."""
    parts, part_of, index_in = _parts_of(inner)
    view = LazyView(dataset, out.chain, parts, part_of[rows], index_in[rows])
    return _traced(out, view)


def concat(dataset: Any, parts: Sequence[Analysis], out: Analysis) -> Analysis:
    """`out` (the ConcatDataset's analysis, reasons none) with its index: a LazyView when
    every part is traced lazily; else the traced parts traced completely (`eager`) and the
    indexes concatenated (None: `out` has a reason)."""
    from fastload.compat.conversion import concat_index

    if not all(is_lazy(getattr(p, "trace", None)) for p in parts):
        indexes = []
        for position, part in enumerate(parts):
            if is_lazy(getattr(part, "trace", None)):
                index, reason = eager(part)
                if index is None:
                    return out.refuse(f"part {position} ({part.chain}): {reason}", _WRAPPED_FIX)
                indexes.append(index)
            else:
                indexes.append(part.index)
        out.index = concat_index(indexes)
        return out
    traces, part_of, inner = [], [], []
    for position, part in enumerate(parts):
        why = _unlike(part, parts[0])
        if why:
            return out.refuse(f"part {position} ({part.chain}) {why}", _WRAPPED_FIX)
        its, of, at = _parts_of(part)
        part_of.append(of + len(traces))
        inner.append(at)
        traces += its
    view = LazyView(dataset, out.chain, traces, np.concatenate(part_of), np.concatenate(inner))
    return _traced(out, view)


def eager(analysis: Analysis) -> Analysis:
    """(index, "") of a traced analysis traced completely, one file per sample; (None, why)
    when its samples are not (image, int label) (a ConcatDataset beside a part fastload
    recognises otherwise takes only image and label) or an index disagrees with index 0."""
    trace = analysis.trace
    if not trace.simple or analysis.outputs is not None:
        return None, (f"{analysis.chain} returns {shape_text(trace.first.template)}: beside a part that is not "
                      "traced, a traced part's samples must be (image, int label)")
    trace.trace_all()
    if trace.fallbacks:
        index = min(trace.fallbacks)
        return None, f"{trace.who(index)}: {trace.fallbacks[index]}"
    return flat_index(trace), ""


def _traced(out: Analysis, view: LazyView) -> Analysis:
    analysis = Analysis(out.chain, list(out.reasons), list(out.fixes), view.index, out.pipeline,
                        out.target_transform, out.transform, list(out.wrappers))
    analysis.trace, analysis.rebuild, analysis.outputs = view, view, out.outputs
    return analysis
