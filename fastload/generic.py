"""The generic path: torch's own DataLoader machinery, configured, never reimplemented.

Any dataset the native engine cannot run goes through torch's DataLoader (worker
processes, get_worker_info, worker_init_fn, timeout, persistent workers, in_order, pin
memory). This module builds that inner loader and reads its batches as a feed; what it
adds runs inside torch's workers, so every class here is module-level (importable and
picklable under the spawn start method):

- Order. For map-style datasets with automatic batching, the order comes from
  fastload.sampling through the loader's resume cursor; torch's DataLoader gets it
  as its batch_sampler, so its workers fetch exactly those batches.
- Fetch wrapper. The dataset torch's workers index is a thin wrapper that times the reads
  (shipped to the main process with the batch, for stats) and, when a sample raises,
  attaches "fastload: raised by dataset[i] (<its file>)" to the exception as a note
  (fastload.errors.add_note; the file where the dataset says it, see sample_source, else
  "(sample index i)"), so the type and message are kept and the caller learns which
  sample; under on_error="skip" (fastload.errors.ErrorPolicy) the sample is replaced by
  the next readable one in dataset order, as on the native path, and recorded: the records
  travel to the main process with the batch, where they are listed in stats(), counted
  and warned about once (fastload.stats.SkippedSamples). The wrapper is invisible to user
  code: `loader.dataset` is the user's dataset, and in each worker, before
  worker_init_fn runs, `get_worker_info().dataset` is set back to the user's dataset
  object (the one the wrapper reads from), so the common pattern of configuring the
  worker's dataset copy in worker_init_fn keeps working. We
  chose this over wrapping collate_fn alone (it never sees which sample failed) and over
  patching torch's fetcher (a private class that changes between releases).
- Collate wrapper. collate_fn runs as given, timed; the batch travels back with its
  timings in a small record that the main process unwraps (GenericFeed). pin_memory=True
  pins the batch exactly as torch does (torch's pin thread calls the record's pin_memory()).
- Worker failures are torch's: an exception in a worker is re-raised with its type and
  message; a worker killed by a signal or a timeout raises RuntimeError, never hangs.

Example:
    >>> import torch
    >>> from fastload.errors import ErrorPolicy
    >>> fetch = _MapFetch([1, 2, 3], ErrorPolicy("raise"))
    >>> batch = _TimedCollate(torch.utils.data.default_collate, fetch, True)(fetch.__getitems__([0, 2]))
    >>> batch.batch.tolist(), batch.samples
    ([1, 3], 2)
"""

from __future__ import annotations

import operator
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.utils.data
from torch.profiler import record_function
from torch.utils.data import IterableDataset, get_worker_info

from fastload.errors import DecodeError, ErrorPolicy, add_note
from fastload.datasets.base import NativeDataset
from fastload.stats import LoaderStats, profile_summary, skipped_record


def _torch_dataloader_class() -> type:
    """torch's own DataLoader class, even where the name torch.utils.data.DataLoader was
    already bound to a subclass (fastload's, or another library's) when this module loads:
    the class of that name defined in torch.utils.data.dataloader, found in the MRO."""
    bound = torch.utils.data.dataloader.DataLoader
    for cls in getattr(bound, "__mro__", ()):
        if cls.__module__ == "torch.utils.data.dataloader" and cls.__qualname__ == "DataLoader":
            return cls
    return bound


# torch's DataLoader, kept when fastload loads: the generic path builds on this class, never
# on what the name torch.utils.data.DataLoader holds when a loader is built. After
# `torch.utils.data.DataLoader = fastload.DataLoader` (fastload.patch, or a user's swap) a
# look-up by name would make every generic loader build another fastload loader inside
# itself, until RecursionError.
TorchDataLoader: type = _torch_dataloader_class()

# ---------------------------------------------------------------------------------------
# Worker side: what torch's worker processes run


def sample_source(dataset: Any, index: Any) -> Optional[str]:
    """Where dataset[index]'s bytes are, where the dataset says it: a fastload dataset's
    index (a file path or "shard.tar:member"), a torchvision DatasetFolder / ImageFolder's
    `samples[i][0]` (or `imgs`), through torch Subsets; else None. Never raises.

    Example:
        >>> class Folder(torch.utils.data.Dataset):
        ...     samples = [("train/cat/000.jpg", 0), ("train/cat/001.jpg", 0)]
        >>> sample_source(torch.utils.data.Subset(Folder(), [1, 0]), 0), sample_source([1, 2], 0)
        ('train/cat/001.jpg', None)
    """
    try:
        i = operator.index(index)
        for _ in range(16):  # Subsets of Subsets
            if not isinstance(dataset, torch.utils.data.Subset):
                break
            dataset, i = dataset.dataset, operator.index(dataset.indices[i])
        if isinstance(dataset, NativeDataset):
            return dataset.index.source(i + len(dataset) if i < 0 else i)
        for name in ("samples", "imgs"):
            entries = getattr(dataset, name, None)
            if isinstance(entries, (list, tuple)) and -len(entries) <= i < len(entries):
                entry = entries[i]
                path = entry[0] if isinstance(entry, (list, tuple)) and entry else entry
                if isinstance(path, (str, os.PathLike)):
                    return os.fspath(path)
    except Exception:  # noqa: BLE001 - a dataset that cannot say gets the plain message
        pass
    return None


def raised_by(index: Any, source: Optional[str]) -> str:
    """The note added to a sample's exception: "fastload: raised by dataset[3]
    (train/cat/003.jpg)", or "(sample index 3)" where the file is not known."""
    return f"fastload: raised by dataset[{index!r}] ({source if source else f'sample index {index!r}'})"


def _reason(error: BaseException) -> str:
    """What failed, for stats()["skipped_samples"] and the warning."""
    if isinstance(error, DecodeError):
        return error.reason
    return f"{type(error).__name__}: {error}"


class _WorkerBatch:
    """A collated batch plus what producing it cost, sent from a worker to the loader.

    `skipped` lists the samples on_error="skip" replaced in it (fastload.stats.skipped_record
    dicts): the loader lists, counts and warns about them. pin_memory() is what torch's
    pin-memory thread (or its single-process iterator) calls when pin_memory=True: it pins
    the batch like torch would and measures it.
    """

    __slots__ = ("batch", "samples", "fetch_s", "collate_s", "pin_s", "skipped")

    def __init__(self, batch: Any, samples: int, fetch_s: float, collate_s: float, pin_s: float = 0.0,
                 skipped: Optional[List[Dict[str, Any]]] = None):
        self.batch, self.samples = batch, samples
        self.fetch_s, self.collate_s, self.pin_s, self.skipped = fetch_s, collate_s, pin_s, skipped or []

    def __reduce__(self):
        return (_WorkerBatch, (self.batch, self.samples, self.fetch_s, self.collate_s, self.pin_s, self.skipped))

    def pin_memory(self) -> "_WorkerBatch":
        from torch.utils.data._utils.pin_memory import pin_memory

        start = time.perf_counter()
        with record_function("fastload.pin"):
            batch = pin_memory(self.batch)
        return _WorkerBatch(batch, self.samples, self.fetch_s, self.collate_s,
                            self.pin_s + time.perf_counter() - start, self.skipped)


class _MapFetch(torch.utils.data.Dataset):
    """The map-style dataset torch's workers index: reads from the user's dataset, timed,
    with the sample and its file attached to any exception; under on_error="skip" a bad
    sample is replaced by the next readable one (see the module docstring)."""

    def __init__(self, dataset: Any, on_error: ErrorPolicy):
        self.dataset = dataset
        self.on_error = ErrorPolicy(on_error)
        self.fetch_s = 0.0
        self.skipped: List[Dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.dataset)

    def take(self) -> Tuple[float, List[Dict[str, Any]]]:
        """(fetch seconds, skipped_records) since the last take()."""
        out = (self.fetch_s, self.skipped)
        self.fetch_s, self.skipped = 0.0, []
        return out

    def _one(self, index: Any) -> Any:
        try:
            return self.dataset[index]
        except Exception as error:
            return self._replace(index, error)

    def _replace(self, index: Any, error: Exception) -> Any:
        """dataset[index] raised `error`: raised with a note under "raise"; under "skip" the
        next readable sample in dataset order (ErrorPolicy.replacements), the native path's
        rule, each unreadable one recorded."""
        source = sample_source(self.dataset, index)
        self.on_error.handle(error, raised_by(index, source))
        try:
            sample, length = operator.index(index), len(self.dataset)
        except TypeError:
            sample = length = None
        if sample is None:
            add_note(error, f"{raised_by(index, source)}; on_error='skip' replaces a bad sample with the next one in "
                            "dataset order, which needs integer indices and len(dataset)")
            raise error
        sample += length if sample < 0 else 0
        self.skipped.append(skipped_record(sample, source, _reason(error)))
        for candidate in self.on_error.replacements(sample, length):
            try:
                return self.dataset[candidate]
            except Exception as again:  # noqa: BLE001 - the policy decides, as for the first
                error, where = again, sample_source(self.dataset, candidate)
                self.skipped.append(skipped_record(candidate, where, _reason(again)))
        add_note(error, f"{raised_by(candidate, where)}; on_error='skip' found no readable sample among the "
                        f"{ErrorPolicy.MAX_REPLACEMENTS} after dataset[{sample}], which raised too")
        raise error

    def __getitem__(self, index: Any) -> Any:  # batch_size=None: one sample per fetch
        start = time.perf_counter()
        try:
            with record_function("fastload.fetch"):
                return self._one(index)
        finally:
            self.fetch_s += time.perf_counter() - start

    def __getitems__(self, indices: List[Any]) -> Any:  # automatic batching: one batch
        start = time.perf_counter()
        try:
            with record_function("fastload.fetch"):
                many = getattr(self.dataset, "__getitems__", None)
                if many:
                    try:
                        return many(indices)
                    except Exception as error:
                        # skip: find the bad samples one by one
                        self.on_error.handle(error, f"fastload: raised by dataset.__getitems__ for sample "
                                                    f"indices {list(indices)!r}")
                return [self._one(i) for i in indices]
        finally:
            self.fetch_s += time.perf_counter() - start


class _IterFetch(IterableDataset):
    """The iterable dataset torch's workers iterate: the user's, timed, with the position
    in this worker's stream attached to any exception."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.fetch_s = 0.0

    def take(self) -> Tuple[float, List[Dict[str, Any]]]:
        out = (self.fetch_s, [])
        self.fetch_s = 0.0
        return out

    def __iter__(self) -> Iterator[Any]:
        it = None
        count = 0
        while True:
            start = time.perf_counter()
            try:
                with record_function("fastload.fetch"):
                    if it is None:
                        it = iter(self.dataset)
                    item = next(it)
            except StopIteration:
                return
            except Exception as error:
                info = get_worker_info()
                where = f"worker {info.id}'s" if info is not None else "the"
                add_note(error, f"fastload: raised by the IterableDataset's iterator after {count} "
                                f"samples of {where} stream")
                raise
            finally:
                self.fetch_s += time.perf_counter() - start
            count += 1
            yield item


class _TimedCollate:
    """collate_fn as given, timed; returns a _WorkerBatch carrying the timings."""

    def __init__(self, collate_fn: Callable[[Any], Any], fetch: Any, auto_collation: bool):
        self.collate_fn = collate_fn
        self.fetch = fetch  # the _MapFetch/_IterFetch this worker reads through (or None)
        self.auto_collation = auto_collation

    def __call__(self, data: Any) -> _WorkerBatch:
        fetch_s, skipped = self.fetch.take() if self.fetch is not None else (0.0, [])
        samples = len(data) if self.auto_collation and hasattr(data, "__len__") else 1
        start = time.perf_counter()
        with record_function("fastload.collate"):
            batch = self.collate_fn(data)
        return _WorkerBatch(batch, samples, fetch_s, time.perf_counter() - start, skipped=skipped)


class _WorkerInit:
    """Runs first in each worker: makes get_worker_info().dataset the user's dataset again
    (not the fetch wrapper), then calls the user's worker_init_fn."""

    def __init__(self, worker_init_fn: Optional[Callable[[int], None]]):
        self.worker_init_fn = worker_init_fn

    def __call__(self, worker_id: int) -> None:
        info = get_worker_info()
        if info is not None and isinstance(info.dataset, (_MapFetch, _IterFetch)):
            # WorkerInfo is a frozen dataclass; this is the one field we restore.
            object.__setattr__(info, "dataset", info.dataset.dataset)
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)


# ---------------------------------------------------------------------------------------
# Main process: the inner torch DataLoader and its feed


@dataclass(frozen=True)
class InnerArgs:
    """What the inner torch DataLoader is built from: the outer loader's arguments as they
    are when an iteration starts (torch lets num_workers, collate_fn, timeout, ... change
    after construction, and they take effect at the next iteration, as in torch).

    Attributes:
        dataset: the dataset torch's DataLoader holds (after its DataPipe wrapper).
        user_dataset: the user's object, before that wrapper (a DataPipe runs as it is).
        datapipe: the user's dataset is a DataPipe.
        iterable: an IterableDataset (torch's _DatasetKind.Iterable).
        errors: the on_error policy (fastload.errors.ErrorPolicy).
        auto_collation: torch's automatic batching is on (a batch_sampler).
        has_order: fastload's order (the resume cursor's batch_sampler) drives the batches.
        cuda: batches go to a CUDA device (torch's pin thread then pins them).
        iterable_len_called: torch's `_IterableDataset_len_called`, carried over.
        the rest: torch's DataLoader arguments of the same names.
    """

    dataset: Any
    user_dataset: Any
    datapipe: bool
    iterable: bool
    errors: ErrorPolicy
    auto_collation: bool
    has_order: bool
    cuda: bool
    iterable_len_called: Any
    batch_size: Optional[int]
    drop_last: bool
    sampler: Any
    batch_sampler: Any
    collate_fn: Any
    num_workers: int
    pin_memory: bool
    timeout: float
    worker_init_fn: Any
    multiprocessing_context: Any
    generator: Any
    prefetch_factor: Optional[int]
    persistent_workers: bool
    pin_memory_device: str
    in_order: bool


def inner_loader(args: InnerArgs, kept: Optional[TorchDataLoader], batch_sampler: Any) -> TorchDataLoader:
    """torch's DataLoader (TorchDataLoader) over the wrapped dataset, configured from `args`.

    Built at each iteration, so attributes changed after construction take effect as
    they would in torch; `kept` (the one built before) is reused with persistent workers
    (as torch keeps its workers and their configuration). `batch_sampler` is fastload's
    order (the loader's resume cursor), used when `args.has_order`.
    """
    if args.persistent_workers and args.num_workers > 0 and kept is not None:
        kept._IterableDataset_len_called = args.iterable_len_called
        return kept
    if args.datapipe:
        fetch: Any = None
        dataset: Any = args.user_dataset
    elif args.iterable:
        fetch = dataset = _IterFetch(args.dataset)
    else:
        fetch = dataset = _MapFetch(args.dataset, args.errors)
    collate = _TimedCollate(args.collate_fn, fetch, args.auto_collation)
    common = dict(
        num_workers=args.num_workers,
        collate_fn=collate,
        # With a CUDA device, torch's pin thread pins in the background (its caching
        # host allocator does not reuse a block before the copies reading it ended).
        pin_memory=args.pin_memory or args.cuda,
        timeout=args.timeout,
        worker_init_fn=_WorkerInit(args.worker_init_fn),
        multiprocessing_context=args.multiprocessing_context if args.num_workers > 0 else None,
        generator=args.generator,
        prefetch_factor=args.prefetch_factor if args.num_workers > 0 else None,
        persistent_workers=args.persistent_workers,
        pin_memory_device=args.pin_memory_device,
        in_order=args.in_order,
    )
    with warnings.catch_warnings():
        # torch's worker-count warning was already given by the loader's own __init__.
        warnings.simplefilter("ignore", UserWarning)
        if args.iterable:
            inner = TorchDataLoader(dataset, batch_size=args.batch_size, drop_last=args.drop_last, **common)
        elif args.has_order:
            inner = TorchDataLoader(dataset, batch_sampler=batch_sampler, **common)
        elif args.auto_collation:
            inner = TorchDataLoader(dataset, batch_sampler=args.batch_sampler, **common)
        else:
            inner = TorchDataLoader(dataset, batch_size=None, sampler=args.sampler, **common)
    inner._IterableDataset_len_called = args.iterable_len_called
    return inner


class GenericFeed:
    """(batch, (samples, position)) from torch's iterator; records the worker timings and
    the skipped samples (listed, counted, warned about in this process).

    Args:
        torch_iter: iter() of the inner torch DataLoader (kept as `_it`: the loader's
            iterator answers for its attributes).
        stats: where worker timings and skipped samples are counted.

    Nothing here changes a rank's batch count (DDP ranks stay in lockstep): on_error="skip"
    replaces bad samples, so every batch keeps its size.
    """

    def __init__(self, torch_iter: Iterator[Any], stats: LoaderStats):
        self._it = torch_iter
        self._stats = stats
        self.position = 0

    def __iter__(self) -> "GenericFeed":
        return self

    def __next__(self) -> Tuple[Any, Tuple[int, int]]:
        item = next(self._it)
        self.position += 1
        if not isinstance(item, _WorkerBatch):  # a DataPipe, read without our wrappers
            return item, (_count_samples(item), self.position)
        self._stats.add_worker(item.fetch_s, item.collate_s, item.pin_s, item.skipped)
        # The worker processes' ranges are in their own traces only: their times, per
        # batch, in the main process's.
        profile_summary("fastload.worker_batch", {"fetch_ms": 1e3 * item.fetch_s,
                                                  "collate_ms": 1e3 * item.collate_s, "pin_ms": 1e3 * item.pin_s})
        return item.batch, (item.samples, self.position)


def _count_samples(batch: Any) -> int:
    from fastload.transfer.tree import tree_tensors

    tensors = tree_tensors(batch)
    return int(tensors[0].shape[0]) if tensors and tensors[0].dim() > 0 else 1
