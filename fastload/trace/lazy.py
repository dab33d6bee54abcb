"""A traced dataset learnt as the loader reaches it, one epoch at a time: a few probes, then each index as its batch comes.

Tracing every index when the loader is built costs ~15 us per sample (~20 s for
ImageNet's 1.28M) before the first batch. Instead, `probe(dataset)` traces index 0 twice
and PROBES indexes spread over the dataset (0 and the last among them): that decides
native or generic (any of them refused: the whole dataset is refused, with the index and
the user's file:line, as when every index was traced) and learns the transform and where
the image sits in the sample. torch's DataLoader calls no `__getitem__` when it is built,
so what the probes change on the dataset object is undone (rollback.py), and they run on
a watched thread: a `__getitem__` that blocks (a barrier of worker processes) refuses the
dataset instead of hanging the loader.

A trace holds for one epoch, as torch's calls do. At each iter() the loader asks the
trace to `renew()`: the probes run again (undone) on the dataset as it is now, and when
the length, the transform object, the native specs it makes (a Resize whose size was
changed in place makes others) and the sample structure are what the engine's pipeline
was made from, every index is untraced again; otherwise the loader chooses its path
anew. Each served index is then traced by `LazyTrace.prepare(indices)` just before the
engine is handed its batch (the loader submits batches ahead of the one it waits for: the
trace runs while the engine decodes earlier batches): its file, label or sample template
are the epoch's own (pseudo-labels, resampled files). With num_workers=0 that traced call
is the epoch's one call of `dataset[i]`, in the process where torch makes it, and its
effects stay; with worker processes, torch's calls change only the workers' copies, so
the traced calls are undone. The engine's index arrays (file ids, the path bytes, the
labels) are filled in place, so the engine reads them without a copy. Each DDP rank
traces only the indexes its sampler gives it. Under on_error="skip", a replacement sample
is traced before the engine runs it, and the batch takes the samples it holds (a
replacement that falls back is made by its own __getitem__). Inside a Subset or
ConcatDataset the wrapper takes its indexes through a LazyView (views.py), traced
as lazily. A hybrid pipeline whose Python tail runs in worker processes
(tail_on="processes") hands each batch's traced files to the worker with the batch
(`export` / `adopt`): the workers' copies were forked before the epoch's indexes were traced.

Tracing runs on the thread that submits batches, not on a thread of its own: the trace
compares Python's, numpy's and torch's global generators before and after the dataset's
code and restores them, and those generators are process-wide: a background thread would
see the training loop's draws as the dataset's and undo them.

A later index whose trace disagrees with the probes' (an exception, another transform
object, the image in another place, another sample structure, random numbers drawn
outside the transforms, anything the tracer cannot see through) falls back *per sample*:
the engine makes a tiny placeholder in its slot (placeholder.py) and the batch gets what
the dataset's own `__getitem__` returns for it, as torch's DataLoader would: in this
process with num_workers=0, else in `num_workers` forked processes started when the batch
is submitted (fallback_pool.py). One UserWarning names the first such index of an epoch
and the reason with the user's file:line; `fallbacks` (and the loader's
stats()["native"]["traced"]) lists them all.

Example (Photos: a user's dataset of 1000 samples, labels i % 10, counting its calls):
    >>> from torchvision import transforms as T
    >>> from fastload.trace.doc_dataset import Photos
    >>> photos = Photos(T.Compose([T.CenterCrop(4), T.ToTensor()]))
    >>> trace = probe(photos)
    >>> photos.calls, trace.traced
    (0, 0)
    >>> trace.prepare([500, 501]); trace.traced, trace.index.labels[[500, 501]].tolist()
    (2, [0, 1])
"""

from __future__ import annotations

import gc

import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch

from fastload.source.index import SampleIndex
from fastload.trace.fallbacks import Fallbacks, fitted, made_by_getitem
from fastload.trace.files import TracedFiles
from fastload.trace.patches import tracing_patches
from fastload.trace.placeholder import placeholder_jpeg
from fastload.trace.probes import (basis_of, disagreement, first_call_apart, joined_unless_still, OPENS_AN_IMAGE, Probe,
                                   probe_timeout, run_probes, TIMEOUT_ENV)
from fastload.trace.rollback import Snapshot
from fastload.trace.sample import SLOT, collated, is_simple_template, sample_of_call
from fastload.trace.state import TraceRefused, global_rng_moved, global_rng_restore, global_rng_state, record
from fastload.trace.where import REFUSAL_FIX, where_defined

# Samples traced at a time ahead of the engine (each trace patches PIL.Image.open and the
# transforms' __call__ and restores them: ~10 ms, and it resets the type caches of
# nn.Module's subclasses). 4096 samples: ~60 ms of tracing every 16 batches of 256.
AHEAD_SAMPLES = 4096
# Path bytes reserved per sample beyond the probes' longest path (grown when exceeded).
_PATH_SLACK = 1.25


def probe(dataset: Any) -> Union["LazyTrace", TraceRefused, None]:
    """The dataset's LazyTrace (probes traced; a dataset of at most PROBES + 1 samples
    completely), a TraceRefused (`.index`, `.why`, `.where`), or None when index 0 opens no
    image with PIL.

    The probes run on a thread of their own, watched: a dataset whose `__getitem__` waits
    for something only its worker processes would bring (a barrier, a lock, a queue) must
    not hang the loader's construction. When the probing thread stays at one place in the
    code for PROBE_TIMEOUT_S (FASTLOAD_TRACE_TIMEOUT) seconds, the dataset is refused (the
    generic path then runs it as torch does) and the call is left to return whenever it
    can; a probe that moves on (imports a library, reads headers) is waited for. What the
    probes change on the dataset is undone (rollback.py). Before any of that, index 0 is
    traced once in a forked child (`first_call_apart`): a `__getitem__` that kills its
    process (a segfault, os._exit) refuses the dataset there, never the loop's process.
    """
    apart = first_call_apart(dataset)
    if apart is not OPENS_AN_IMAGE:
        return apart
    result: List[Any] = []

    def run() -> None:
        try:
            result.append((run_probes(dataset), None))
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            result.append((None, error))

    worker = threading.Thread(target=run, name="fastload-probe", daemon=True)
    worker.start()
    if not joined_unless_still(worker, probe_timeout()):
        refused = TraceRefused(
            f"stayed at one place for {probe_timeout():g} s when traced (it waits for something the loader's own "
            f"process never brings: a barrier of worker processes, a lock, the network?); set {TIMEOUT_ENV} to "
            "wait longer", where_defined(dataset))
        refused.index = 0  # type: ignore[attr-defined]
        return refused
    found, error = result[0]
    if error is not None:
        raise error
    if not isinstance(found, Probe):
        return found
    return LazyTrace(dataset, found)


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

    The hooks a subclass overrides (a view over wrapped traces, fastload.trace.views; an
    adapter that locates its samples itself, Hugging Face's): `_trace(todo)` (trace these
    indexes), `_keep(i, sample)`, `_point_at_placeholder(i)`, `renew`, `who(i)`.

    Args:
        dataset: the map-style dataset traced.
        probes: its samples traced up front (index 0 first).
        n: the number of samples (len(dataset) when None).
        index: the engine's index when the subclass locates the samples itself; else one
            is made whose file table (TracedFiles) fills as indexes are traced.
        capacity: path bytes reserved up front for that table (from the probes' longest
            path when None).
    """

    def __init__(self, dataset: Any, probes: Probe, *, n: Optional[int] = None,
                 index: Optional[SampleIndex] = None, capacity: Optional[int] = None):
        self.probes = probes
        self.first = probes.samples[0]
        self.name = type(dataset).__name__
        self.n = n = len(dataset) if n is None else n
        self._dataset = held_weakly(dataset)
        self.simple = is_simple_template(self.first.template)
        self.templates: Optional[List[Any]] = None if self.simple else [None] * n
        self.done = np.zeros(n, dtype=bool)
        self.falls = Fallbacks(n)
        self.fallback, self.fallbacks = self.falls.flags, self.falls.why  # (the same array and dict)
        self.trace_s, self.traced_lazily = 0.0, 0  # CPU seconds in prepare() and the indexes it traced
        self._lock = threading.RLock()
        # What each traced call changes on the dataset stays only where torch's own call
        # would change the loop's object: with num_workers=0 (set by the loader). With
        # worker processes torch's calls change the workers' copies only: undone here.
        self.keep_effects = False
        self.files: Optional[TracedFiles] = None
        if index is not None:
            self.index = index
            return
        if capacity is None:
            longest = max(len(s.path.encode("utf-8", "surrogateescape")) for s in probes.samples.values())
            capacity = int(n * longest * _PATH_SLACK) + 4096
        self.files = TracedFiles(capacity, n + 2)  # (file 0, the placeholder, one per index)
        self.index = SampleIndex(self.files.strings, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                                 np.full(n, -1, dtype=np.int64),
                                 np.zeros(n, dtype=np.int64) if self.simple else np.arange(n, dtype=np.int64))
        # File 0: the first probe's, what an untraced index points at (the engine reads a real file).
        self.files.add(self.first.path)
        self.basis = basis_of(self.first, n)

    def run_like_torch(self, num_workers: int, seed: int) -> None:
        """Where `__getitem__` runs, as torch's DataLoader with `num_workers` would run it:
        with none, the traced calls keep their effects on the dataset and a fallback is
        made in this process; with workers, the traced calls are undone and fallbacks are
        made by `num_workers` processes (fallback_pool.py) seeded from `seed`."""
        self.keep_effects = num_workers == 0
        self.falls.workers, self.falls.seed = int(num_workers), int(seed)

    def close(self) -> None:
        """Stops the fallback worker processes, if any."""
        self.falls.close()

    # ---- what the loader calls ----

    def renew(self, keep: bool = False) -> bool:
        """A new epoch over the dataset as it is now: True when it still runs the way this
        trace was made (same length, same transform object making the same native specs,
        same sample structure), every index then untraced again (each is traced, once, as
        the epoch reaches it: labels, files and fallbacks are the epoch's own); False when
        the dataset changed so that the loader must choose its path anew. The probes that
        tell are undone (rollback.py). `keep`: the last epoch's traces are kept (torch's
        persistent workers keep their copy of the dataset) unless the length changed."""
        dataset = self.dataset()
        try:
            n = len(dataset)
        except Exception:  # noqa: BLE001 - a length that fails now: the loader's own analysis says why
            return False
        if keep and n == self.n:
            return True
        found = run_probes(dataset) if n > 0 else None
        if not isinstance(found, Probe) or basis_of(found.samples[0], n) != self.basis:
            return False
        with self._lock:
            self.falls.new_epoch()  # (the workers' copies are of the last epoch's dataset)
            self.probes, self.first = found, found.samples[0]
            if self.templates is not None:
                self.templates = [None] * n
            self.done[:] = False
            self.files.reset()
            self.index.file_ids[:] = 0
            self.files.add(self.first.path)
        return True

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

    def attach(self, runner: Any, only: bool = False) -> None:
        """`runner.refresh_index()` is called when the path bytes move to a larger buffer
        (its engine holds the old one); `only`: instead of the runners attached before (a
        worker process's copy of the trace, whose parent's runners are not its own)."""
        if self.files is not None:
            self.files.attach(runner, only)

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
        """The indexes of `export` (the parent's trace of them, this epoch's) taken into this
        copy: a worker reads what the parent traced without tracing it again."""
        index = self.index
        with self._lock:
            for i, path, label, offset, size in exported:
                index.offsets[i], index.sizes[i] = offset, size
                self.fallback[i] = path is None
                if path is None:  # (the parent makes its sample with __getitem__; the engine a placeholder)
                    self._point_at_placeholder(i)
                elif not (self.done[i] and index.files[int(index.file_ids[i])] == path):
                    index.file_ids[i] = self.files.add(path)
                if path is not None and self.simple:
                    index.labels[i] = label
                self.done[i] = True

    def trace_all(self, chunk: int = 4096) -> None:
        """Traces every index not traced yet (what a worker process that copies the index
        needs before it starts); the path bytes are then trimmed to their length."""
        for start in range(0, self.n, chunk):
            self.prepare(range(start, min(self.n, start + chunk)))
        if self.files is not None:
            with self._lock:
                self.files.trim()

    def template_of(self, i: int, label: Any = None) -> Any:
        """Index i's sample with SLOT where its image is (traced this epoch): its template;
        for (image, int label) samples, index 0's structure with i's label (or `label`)."""
        if not self.simple:
            return self.templates[i]  # type: ignore[index]
        label = int(self.index.labels[i]) if label is None else int(label)
        first = self.first.template
        kept = torch.tensor(label) if isinstance(first[1], torch.Tensor) else label
        return type(first)((SLOT, kept))

    def start_fallbacks(self, indices: Sequence[int]) -> Optional[Dict[int, Any]]:
        """The samples of `indices` (a batch about to be submitted, traced) that fall back,
        started in the worker processes ({index: future}); None when there are none or
        they are made in this process (num_workers=0)."""
        if not self.falls.flags[np.asarray(indices, dtype=np.int64)].any():
            return None
        return self.falls.start(self.dataset(), indices, in_workers=not self.keep_effects)

    def __call__(self, images: Any, labels: torch.Tensor, indices: Sequence[int],
                 started: Optional[Dict[int, Any]] = None) -> Any:
        """The batch of these samples: `images` (the engine's, [B, ...], or one such batch
        per image view for a dataset whose image reaches several transform calls) and `labels` (the
        index's labels of the batch's samples) made into the dataset's own structure, each
        per-sample fallback's slot filled with what its own __getitem__ returns (`started`:
        those start_fallbacks began). `indices` are the samples submitted (the labels are
        the rows for a rebuilt one)."""
        rows = labels.tolist() if not self.simple else [int(i) for i in indices]
        falling = [k for k, r in enumerate(rows) if self.fallback[r]]
        made = {rows[k]: self.made_by_getitem(rows[k], started) for k in falling}
        if self.simple:
            if falling:
                labels = labels.clone()
                for k in falling:
                    image, label = self.fitted_fallback(rows[k], made[rows[k]], images)
                    copy_into(images[k], image)
                    labels[k] = int(label)
            return [images, labels]
        templates = [self.templates[r] for r in rows]  # type: ignore[index]
        several = not isinstance(images, torch.Tensor)  # one batch per image view
        for k in falling:
            image, templates[k] = self.fitted_fallback(rows[k], made[rows[k]], images)
            for view, batch in zip(image, images) if several else ((image, images),):
                copy_into(batch[k], view)
        return collated(templates, images)

    def made_by_getitem(self, i: int, started: Optional[Dict[int, Any]]) -> Any:
        """Index i's sample from its own __getitem__: a worker's (started), else made here."""
        return made_by_getitem(self.dataset(), i, started, self.keep_effects)

    def fitted_fallback(self, i: int, sample: Any, images: Any) -> Any:
        """(image, label) (simple) or (image, template) of index i's `sample` (made by its
        own __getitem__), checked to fit the batch."""
        made = f"{self.name}[{i}] (made by its own __getitem__: {self.fallbacks[i]})"
        return fitted(made, sample, images, self.first, self.simple)

    def who(self, i: int) -> str:
        """Whose index i, for messages (a LazyView names the outer and the inner index)."""
        return f"{self.name}.__getitem__ (traced, index {i})"

    # ---- tracing ----

    def _trace(self, todo: List[int]) -> None:
        for i, sample in traced_calls(self.dataset(), todo, self._one).items():
            if isinstance(sample, str):
                self._fall_back(i, sample)
            else:
                self._keep(i, sample)

    def _one(self, dataset: Any, i: int) -> Any:
        """index i's TracedSample, or why it falls back. What the call changed on the dataset is
        undone unless it is the epoch's one call of `dataset[i]` in the process where
        torch would make it (keep_effects, and the sample does not fall back: a fallback's
        own __getitem__ call makes its effects)."""
        snapshot = Snapshot(dataset)
        call, value = record(dataset, i)
        try:
            sample = sample_of_call(dataset, call, value)
            why, where = disagreement(self.first, sample), ""
        except TraceRefused as refused:
            sample, why, where = None, refused.why, refused.where
        finally:
            call.outputs.clear()  # (each output refers to the call: no cycle left for the collector)
            call.masks.clear()
        if why or not self.keep_effects:
            snapshot.restore()
        return f"{why} at {where or where_defined(dataset)}" if why else sample

    def _keep(self, i: int, sample: Any) -> None:
        self.index.file_ids[i] = self.files.add(sample.path)
        if self.simple:
            self.index.labels[i] = int(sample.template[1])
        else:
            self.templates[i] = sample.template  # type: ignore[index]
        self.done[i] = True

    def _fall_back(self, i: int, why: str) -> None:
        # The engine makes a tiny placeholder image in its slot (almost no work); the batch
        # replaces it with the sample its own __getitem__ makes.
        self._point_at_placeholder(i)
        self.done[i] = True
        if self.falls.add(i, why):
            warnings.warn(self._fallback_warning(i, why), UserWarning, stacklevel=2)

    def _fallback_warning(self, i: int, why: str) -> str:
        """The one warning of an epoch's first fallback."""
        return (f"fastload: {self.who(i)}: {why}; this sample (and any other that disagrees with index 0's trace) "
                f"runs through its own __getitem__ in Python. {REFUSAL_FIX[0].upper()}{REFUSAL_FIX[1:]}.")

    def _point_at_placeholder(self, i: int) -> None:
        """Index i's entry made the placeholder image's (placeholder.py), added to the file
        table once per epoch."""
        if self.files.placeholder_id < 0:
            self.files.placeholder_id = self.files.add(placeholder_jpeg())
        index = self.index
        index.file_ids[i], index.offsets[i], index.sizes[i] = self.files.placeholder_id, 0, -1


def traced_calls(dataset: Any, todo: List[int], one: Callable[[Any, int], Any]) -> Dict[int, Any]:
    """{i: one(dataset, i)} for each index of `todo`, under one patching of the tracer, or
    why i falls back: the global generators drawn from in its call (each index traced
    again from the same state to find which drew); the generators restored either way."""
    before = global_rng_state()
    kept: Dict[int, Any] = {}
    # The collector off while tracing: each trace allocates a few containers, and the
    # collections they trigger walk every object the process holds (an ImageNet-length
    # dataset's lists of paths: millions), several times the trace itself. Each
    # trace's own cycles (call <-> outputs) are broken as it is kept.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with tracing_patches(dataset):
            for i in todo:
                kept[i] = one(dataset, i)
            if global_rng_moved(before):
                for i in todo:
                    global_rng_restore(before)
                    snapshot = Snapshot(dataset)
                    record(dataset, i)
                    snapshot.restore()
                    moved = global_rng_moved(before)
                    if moved:
                        kept[i] = f"draws random numbers outside the transforms ({', '.join(moved)}) at " \
                                  f"{where_defined(dataset)}"
    finally:
        if collecting:
            gc.enable()
        global_rng_restore(before)
    return kept


def copy_into(slot: torch.Tensor, image: torch.Tensor) -> None:
    """slot[...] = image. One thread: torch's copy_ of an image-sized tensor splits it over
    the intra-op threads, which on cores busy with the engine and the workers waits ms
    where a plain copy takes tens of us (measured: 5 ms against 0.07 ms on 2 busy cores)."""
    if slot.dtype == image.dtype and slot.device.type == image.device.type == "cpu" and \
            slot.shape == image.shape and slot.dtype in _NUMPY_COPIES:
        view = _NUMPY_COPIES[slot.dtype]
        np.copyto(slot.view(view).numpy(), image.view(view).numpy())
    else:
        slot.copy_(image)


# dtypes copied through numpy (bfloat16 as its bits: numpy has no bfloat16).
_NUMPY_COPIES = {torch.float32: torch.float32, torch.float16: torch.float16, torch.bfloat16: torch.int16,
                 torch.float64: torch.float64, torch.uint8: torch.uint8, torch.int64: torch.int64}


def flat_index(trace: LazyTrace) -> SampleIndex:
    """A plain SampleIndex of a completely traced dataset (what Subset and ConcatDataset
    take rows of): one file per sample."""
    index = trace.index
    paths = [index.files[int(f)] for f in index.file_ids]
    return SampleIndex.from_files(paths, index.labels.copy())
