"""A traced dataset learnt as the loader reaches it: a few indexes up front, the rest per batch.

Tracing every index when the loader is built costs ~15 us per sample (~20 s for
ImageNet's 1.28M) before the first batch. Instead, `probe(dataset)` traces index 0 twice
and PROBES indexes spread over the dataset (0 and the last among them): that decides native or generic (any of
them refused: the whole dataset is refused, with the index and the user's file:line, as
when every index was traced) and learns the transform and where the image sits in the
sample. A dataset of at most PROBES + 1 samples is then traced completely.

Every other index is traced by `LazyTrace.prepare(indices)` just before the engine is
handed the batch that holds it (the loader submits batches ahead of the one it waits
for: the trace runs while the engine decodes earlier batches). The engine's index arrays
(file ids, the path bytes, the labels) are filled in place then, so the engine reads them
without a copy. Traced indexes are kept: a second epoch, a second loader over the same
dataset object (while its probes agree) and a resume trace nothing again. Each DDP rank
traces only the indexes its sampler gives it. Under on_error="skip", a replacement sample
is traced before the engine runs it, and the batch takes the samples it holds (a
replacement that falls back is made by its own __getitem__). Inside a Subset or
ConcatDataset the wrapper takes its indexes through a LazyView (trace_views.py), traced
as lazily. A hybrid pipeline whose Python tail runs in worker processes
(tail_on="processes") hands each batch's traced files to the worker with the batch
(`export` / `adopt`): the workers' copies were forked before most indexes were traced.

Tracing runs on the thread that submits batches, not on a thread of its own: the trace
compares Python's, numpy's and torch's global generators before and after the dataset's
code and restores them, and those generators are process-wide: a background thread would
see the training loop's draws as the dataset's and undo them.

A later index whose trace disagrees with index 0's (an exception, another transform
object, the image in another place, another sample structure, random numbers drawn
outside the transforms, anything the tracer cannot see through) falls back *per sample*:
the engine makes a placeholder in its slot and the batch gets what the dataset's own
`__getitem__` returns for it, run in Python, as torch's DataLoader would (one UserWarning
names the first such index and the reason with the user's file:line; `fallbacks` lists
them all).

Example:
    >>> import os, tempfile, torch
    >>> from PIL import Image
    >>> from torchvision import transforms as T
    >>> path = os.path.join(tempfile.mkdtemp(), "a.jpg"); Image.new("RGB", (8, 8)).save(path)
    >>> class Photos(torch.utils.data.Dataset):
    ...     def __init__(self, transform): self.transform, self.calls = transform, 0
    ...     def __len__(self): return 1000
    ...     def __getitem__(self, i):
    ...         self.calls += 1
    ...         return self.transform(Image.open(path).convert("RGB")), i % 10
    >>> photos = Photos(T.Compose([T.CenterCrop(4), T.ToTensor()]))
    >>> trace = probe(photos)
    >>> photos.calls, trace.traced
    (17, 16)
    >>> trace.prepare([500, 501]); trace.traced, trace.index.labels[[500, 501]].tolist()
    (18, [0, 1])
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch

from fastload.compat import trace as _t
from fastload.source.index import FlatStrings, SampleIndex

# Indexes traced up front, spread evenly over the dataset from index 0 (traced twice) to the last.
PROBES = 16
# Samples traced at a time ahead of the engine (each trace patches PIL.Image.open and the
# transforms' __call__ and restores them: ~10 ms, and it resets the type caches of
# nn.Module's subclasses). 4096 samples: ~60 ms of tracing every 16 batches of 256.
AHEAD_SAMPLES = 4096
# Path bytes reserved per sample beyond the probes' longest path (grown when exceeded).
_PATH_SLACK = 1.25


class _GrowingStrings(FlatStrings):
    """The engine's file table of a lazily traced dataset: one buffer of path bytes,
    filled as indexes are traced. Entry k's end offset is the buffer's capacity until
    file k is traced, so the offsets always increase and the engine's checks hold."""


class _Probe:
    """The samples traced up front: their index -> _Sample."""

    def __init__(self, samples: Dict[int, Any]):
        self.samples = samples

    def agrees(self, other: "_Probe") -> bool:
        if list(self.samples) != list(other.samples):
            return False
        return all(a.path == b.path and a.transform is b.transform and _t._same(a.template, b.template)
                   for a, b in zip(self.samples.values(), other.samples.values()))


def _probe_indexes(n: int) -> List[int]:
    if n <= PROBES + 1:
        return list(range(n))
    return sorted({round(k * (n - 1) / (PROBES - 1)) for k in range(PROBES)} | {0})


def _probe(dataset: Any) -> Any:
    """_Probe, a _Refused (with `.index`), or None when index 0 opens no image with PIL."""
    n = len(dataset)
    if n == 0:
        return None
    before = _t._rng_state()
    index = 0
    try:
        with _t._patched(dataset):
            traced = list(_t._trace_call(dataset, 0))  # [call, value]: _kept_or empties it
            if not traced[0].opened:
                return None
            try:
                first = _t._kept_or(dataset, traced)
                moved = _t._rng_moved(before)
                if moved:
                    raise _t._Refused(f"draws random numbers outside the transforms ({', '.join(moved)})",
                                      _t._find_draw(dataset, 0, before))
                again = _t._sample(dataset, *_t._trace_call(dataset, 0))
                if not (again.path == first.path and again.transform is first.transform
                        and _t._same(again.template, first.template)):
                    what = "image path" if again.path != first.path else "transform" \
                        if again.transform is not first.transform else "returned values"
                    raise _t._Refused(f"returns different samples when traced twice at index 0 (the {what} "
                                      "differ)", _t._where_defined(dataset))
                samples = {0: first}
                indexes = _probe_indexes(n)
                for index in indexes[1:]:
                    sample = _t._sample(dataset, *_t._trace_call(dataset, index))
                    why = _disagreement(first, sample)
                    if why:
                        raise _t._Refused(why, _t._where_defined(dataset))
                    samples[index] = sample
                if _t._rng_moved(before):
                    index, where, moved = _first_draw(dataset, indexes, before)
                    raise _t._Refused(f"draws random numbers outside the transforms ({', '.join(moved)})", where)
            except _t._Refused as refused:
                refused.index = index  # type: ignore[attr-defined]
                if not refused.where:
                    refused.where = _t._where_defined(dataset)
                return refused
    finally:
        _t._rng_restore(before)
    return _Probe(samples)


def _disagreement(first: Any, sample: Any) -> str:
    """Why `sample` (a later index's trace) cannot be made the way index 0 is, or ""."""
    if sample.transform is not first.transform:
        return f"passes the image to another transform object than index 0's ({type(sample.transform).__name__})"
    if sample.slot_at != first.slot_at:
        return "returns the image in another place than index 0's"
    if _t._simple(first.template) != _t._simple(sample.template):
        return f"returns {_t._shape(sample.template)}, index 0 {_t._shape(first.template)}"
    return ""


def _first_draw(dataset: Any, indexes: Sequence[int], before: Any) -> Any:
    """(index, file:line, generators) of the first of `indexes` whose trace draws."""
    for index in indexes:
        _t._rng_restore(before)
        _t._trace_call(dataset, index)
        moved = _t._rng_moved(before)
        if moved:
            return index, _t._find_draw(dataset, index, before), moved
    return indexes[0], _t._where_defined(dataset), ["a generator"]


# dataset -> its LazyTrace, kept while the dataset lives (a second loader, a second epoch).
_CACHE: "weakref.WeakKeyDictionary[Any, LazyTrace]" = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def probe(dataset: Any) -> Any:
    """The dataset's LazyTrace (probes traced; a dataset of at most PROBES + 1 samples
    completely), a _Refused (`.index`, `.why`, `.where`), or None when index 0 opens no
    image with PIL. A LazyTrace made for this dataset object before is reused when the
    probes trace the same (paths, transform object, samples) and the length is the same."""
    found = _probe(dataset)
    if not isinstance(found, _Probe):
        return found
    n = len(dataset)
    with _CACHE_LOCK:
        try:
            cached = _CACHE.get(dataset)
        except TypeError:  # an unhashable dataset: not kept
            cached = None
        if cached is not None and cached.n == n and cached.probes.agrees(found):
            return cached
        trace = LazyTrace(dataset, found)
        try:
            _CACHE[dataset] = trace
        except TypeError:
            pass
    return trace


def held_weakly(dataset: Any) -> Callable[[], Any]:
    """A callable giving `dataset` back: a weak reference (a trace must not keep the
    user's dataset alive), or the dataset itself where it takes none."""
    try:
        return weakref.ref(dataset)
    except TypeError:
        return lambda: dataset


class LazyTrace:
    """A traced dataset's index, filled as indexes are traced, and its batches.

    `index` is a SampleIndex whose arrays the engine reads in place: untraced samples
    point at index 0's file until `prepare` traces them. Its labels are the class labels
    when index 0's sample is (image, int label) (`simple`), else the dataset indexes (the
    batch is rebuilt from each index's sample template).

    Args:
        dataset: the map-style dataset traced.
        probes: its samples traced up front (index 0 first).
    """

    def __init__(self, dataset: Any, probes: _Probe):
        self._start(dataset, probes)
        n = self.n
        longest = max(len(s.path.encode("utf-8", "surrogateescape")) for s in probes.samples.values())
        capacity = int(n * longest * _PATH_SLACK) + 4096
        offsets = np.full(n + 1, capacity, dtype=np.int64)
        offsets[0] = 0
        self._files = _GrowingStrings(np.empty(capacity, dtype=np.uint8), offsets)
        self._file_count, self._end = 0, 0
        self.index = SampleIndex(self._files, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                                 np.full(n, -1, dtype=np.int64),
                                 np.zeros(n, dtype=np.int64) if self.simple else np.arange(n, dtype=np.int64))
        for i, sample in probes.samples.items():
            self._keep(i, sample)

    def _start(self, dataset: Any, probes: _Probe) -> None:
        """What is kept of any lazily traced dataset, its index aside (a subclass that
        locates the samples otherwise, fastload.compat.hf_datasets, builds its own)."""
        self.probes = probes
        self.first = probes.samples[0]
        self.name = type(dataset).__name__
        self.n = n = len(dataset)
        self._dataset = held_weakly(dataset)
        self.simple = _t._simple(self.first.template)
        self.templates: Optional[List[Any]] = None if self.simple else [None] * n
        self.done = np.zeros(n, dtype=bool)
        self.fallback = np.zeros(n, dtype=bool)
        self.fallbacks: Dict[int, str] = {}  # index -> why its trace disagreed, at the user's file:line
        self._warned = False
        self.trace_s, self.traced_lazily = 0.0, 0  # CPU seconds in prepare() and the indexes it traced
        self._lock = threading.RLock()
        self._listeners: List[Any] = []  # weakrefs to runners whose engine holds the path bytes

    # ---- what the loader calls ----

    @property
    def traced(self) -> int:
        """The number of indexes traced so far."""
        return int(self.done.sum())

    @property
    def complete(self) -> bool:
        return bool(self.done.all())

    def dataset(self) -> Any:
        dataset = self._dataset()
        if dataset is None:
            raise RuntimeError(f"fastload: the traced {self.name} is gone (no reference to it is left)")
        return dataset

    def attach(self, runner: Any) -> None:
        """`runner.refresh_index()` is called when the path bytes move to a larger buffer
        (its engine holds the old one)."""
        self._listeners.append(weakref.ref(runner))

    def prepare(self, indices: Sequence[int]) -> None:
        """Traces the indexes of `indices` not traced yet (the batch about to be submitted)."""
        rows = np.asarray(indices, dtype=np.int64)
        if rows.size == 0 or self.done[rows].all():
            return
        with self._lock:
            todo = [int(i) for i in rows[~self.done[rows]]]
            if todo:
                start = time.thread_time()  # CPU of this thread: the engine's threads share the cores
                todo = list(dict.fromkeys(todo))
                self._trace(todo)
                self.trace_s += time.thread_time() - start
                self.traced_lazily += len(todo)

    def ahead(self, batches: Iterator[List[int]]) -> Iterator[List[int]]:
        """`batches` (a pass's batches of indexes, in order), traced a chunk at a time
        before they are yielded: one trace (one patching of PIL and the transforms) per
        chunk. Chunks start at one batch and double up to AHEAD_SAMPLES samples, so the
        first batches wait for little more than their own trace."""
        chunk, want = [], 1
        for batch in batches:
            chunk.append(batch)
            if len(chunk) >= want:
                self.prepare([i for b in chunk for i in b])
                yield from chunk
                chunk, want = [], min(2 * want, max(1, AHEAD_SAMPLES // max(1, len(batch))))
        if chunk:
            self.prepare([i for b in chunk for i in b])
            yield from chunk

    def export(self, indices: Sequence[int]) -> List[Any]:
        """What a worker process needs of these traced indexes to read them (its copy of
        this trace was forked before they were traced): (index, path or None for a
        per-sample fallback, label, offset, size) for each. `adopt` takes it in the worker."""
        index = self.index
        return [(i, None if self.fallback[i] else index.files[int(index.file_ids[i])], int(index.labels[i]),
                 int(index.offsets[i]), int(index.sizes[i])) for i in dict.fromkeys(int(i) for i in indices)]

    def adopt(self, exported: List[Any]) -> None:
        """The indexes of `export` (the parent's trace of them) taken into this copy, untraced
        ones only: a worker reads what the parent traced without tracing it again."""
        with self._lock:
            for i, path, label, offset, size in exported:
                if self.done[i]:
                    continue
                self.index.offsets[i], self.index.sizes[i] = offset, size
                if path is None:  # (the parent makes its sample with __getitem__; the engine a placeholder)
                    self.index.file_ids[i] = self.index.file_ids[0]
                    self.fallback[i] = True
                else:
                    self.index.file_ids[i] = self._add_file(path)
                    if self.simple:
                        self.index.labels[i] = label
                self.done[i] = True

    def trace_all(self, chunk: int = 4096) -> None:
        """Traces every index not traced yet (what a worker process that copies the index
        needs before it starts); the path bytes are then trimmed to their length."""
        for start in range(0, self.n, chunk):
            self.prepare(range(start, min(self.n, start + chunk)))
        with self._lock:
            if len(self._files.data) > self._end:
                self._grow(self._end)

    def __call__(self, images: Any, labels: torch.Tensor, indices: Sequence[int]) -> Any:
        """The batch of these samples: `images` (the engine's, [B, ...]) and `labels` (the
        index's labels of the batch's samples) made into the dataset's own structure, each
        per-sample fallback's slot filled with what its own __getitem__ returns.
        `indices` are the samples submitted (the labels are the rows for a rebuilt one)."""
        rows = labels.tolist() if not self.simple else [int(i) for i in indices]
        falling = [k for k, r in enumerate(rows) if self.fallback[r]]
        if self.simple:
            if falling:
                labels = labels.clone()
                for k in falling:
                    image, label = self._real(rows[k], images)
                    images[k].copy_(image)
                    labels[k] = int(label)
            return [images, labels]
        from torch.utils.data._utils.collate import collate, default_collate_fn_map

        templates = [self.templates[r] for r in rows]  # type: ignore[index]
        for k in falling:
            image, templates[k] = self._real(rows[k], images)
            images[k].copy_(image)

        def fill(batch: Any, *, collate_fn_map: Any = None) -> Any:
            return images

        return collate(templates, collate_fn_map={_t._Slot: fill, **default_collate_fn_map})

    # ---- tracing ----

    def _trace(self, todo: List[int]) -> None:
        dataset = self.dataset()
        before = _t._rng_state()
        kept: Dict[int, Any] = {}
        # The collector off while tracing: each trace allocates a few containers, and the
        # collections they trigger walk every object the process holds (an ImageNet-length
        # dataset's lists of paths: millions), several times the trace itself. Each
        # trace's own cycles (call <-> outputs) are broken as it is kept.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with _t._patched(dataset):
                for i in todo:
                    kept[i] = self._one(dataset, i)
                if _t._rng_moved(before):
                    # Which of them drew: each traced again from the same state.
                    for i in todo:
                        _t._rng_restore(before)
                        _t._trace_call(dataset, i)
                        moved = _t._rng_moved(before)
                        if moved:
                            kept[i] = f"draws random numbers outside the transforms ({', '.join(moved)}) at " \
                                      f"{_t._where_defined(dataset)}"
        finally:
            if collecting:
                gc.enable()
            _t._rng_restore(before)
        for i, sample in kept.items():
            if isinstance(sample, str):
                self._fall_back(i, sample)
            else:
                self._keep(i, sample)

    def _one(self, dataset: Any, i: int) -> Any:
        """index i's _Sample, or why it falls back."""
        call, value = _t._trace_call(dataset, i)
        try:
            sample = _t._sample(dataset, call, value)
        except _t._Refused as refused:
            return f"{refused.why} at {refused.where or _t._where_defined(dataset)}"
        finally:
            call.outputs.clear()  # (each output refers to the call: no cycle left for the collector)
        why = _disagreement(self.first, sample)
        return f"{why} at {_t._where_defined(dataset)}" if why else sample

    def _keep(self, i: int, sample: Any) -> None:
        self.index.file_ids[i] = self._add_file(sample.path)
        if self.simple:
            self.index.labels[i] = int(sample.template[1])
        else:
            self.templates[i] = sample.template  # type: ignore[index]
        self.done[i] = True

    def _fall_back(self, i: int, why: str) -> None:
        # The engine makes index 0's image in its slot; the batch replaces it.
        index = self.index
        index.file_ids[i], index.offsets[i], index.sizes[i] = index.file_ids[0], index.offsets[0], index.sizes[0]
        self.fallback[i] = True
        self.fallbacks[i] = why
        self.done[i] = True
        if not self._warned:
            self._warned = True
            warnings.warn(self._fallback_warning(i, why), UserWarning, stacklevel=2)

    def _fallback_warning(self, i: int, why: str) -> str:
        """The one warning of a dataset's first fallback."""
        return (f"fastload: {self._who(i)}: {why}; this sample (and any other that disagrees with index 0's trace) "
                f"runs through its own __getitem__ in Python. {_t._FIX[0].upper()}{_t._FIX[1:]}.")

    def _who(self, i: int) -> str:
        """Whose index i, for messages (a LazyView names the outer and the inner index)."""
        return f"{self.name}.__getitem__ (traced, index {i})"

    def _add_file(self, path: str) -> int:
        data = path.encode("utf-8", "surrogateescape")
        end = self._end + len(data)
        if end > len(self._files.data):
            self._grow(max(end, 2 * len(self._files.data)))
        self._files.data[self._end:end] = np.frombuffer(data, dtype=np.uint8)
        k = self._file_count
        self._files.offsets[k + 1] = end
        self._file_count, self._end = k + 1, end
        return k

    def _grow(self, capacity: int) -> None:
        """The path bytes in a buffer of `capacity` bytes; the engines are handed it."""
        data = np.empty(capacity, dtype=np.uint8)
        data[:self._end] = self._files.data[:self._end]
        object.__setattr__(self._files, "data", data)
        self._files.offsets[self._file_count + 1:] = capacity  # (untraced entries: the capacity)
        for ref in list(self._listeners):
            runner = ref()
            if runner is None:
                self._listeners.remove(ref)
            else:
                runner.refresh_index()

    # ---- per-sample fallback ----

    def _real(self, i: int, images: Any) -> Any:
        """(image, label) (simple) or (image, template) of index i from its own __getitem__."""
        dataset = self.dataset()
        sample = dataset[i]
        image = sample
        try:
            for key in self.first.slot_at:
                image = image[key]
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"fastload: {self.name}[{i}] (run in Python: {self.fallbacks[i]}) has no image where "
                               f"index 0's sample has it ({_t._shape(self.first.template)}); torch's default_collate "
                               "could not batch it with the others either. Make every sample the same structure.") \
                from None
        if not isinstance(image, torch.Tensor) or image.shape != images.shape[1:]:
            what = f"{tuple(image.shape)} {image.dtype}" if isinstance(image, torch.Tensor) else type(image).__name__
            raise RuntimeError(f"fastload: {self.name}[{i}] (run in Python: {self.fallbacks[i]}) returns an image "
                               f"{what}, the batch's are {tuple(images.shape[1:])} {images.dtype}; torch's "
                               "default_collate could not stack them either. Make every sample's transform the same.")
        if self.simple:
            label = sample[1]
            if not _t._int_label(label):
                raise RuntimeError(f"fastload: {self.name}[{i}] (run in Python: {self.fallbacks[i]}) returns the label "
                                   f"{label!r}, index 0 an int class index. Return the same label type for every "
                                   "sample.")
            return image, label
        return image, _t._templated(sample, image, [], ())


def _flat_index(trace: LazyTrace) -> SampleIndex:
    """A plain SampleIndex of a completely traced dataset (what Subset and ConcatDataset
    take rows of): one file per sample."""
    index = trace.index
    paths = [index.files[int(f)] for f in index.file_ids]
    return SampleIndex.from_files(paths, index.labels.copy())
