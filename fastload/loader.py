"""fastload.DataLoader: torch's DataLoader, plus device prefetch, resume, sharding and stats.

Change one import: every argument of torch.utils.data.DataLoader (torch 2.14), in the same
order with the same defaults, means what it means there and is rejected with the same
exception when it is wrong. Extras are keyword-only, after torch's arguments.

Two paths produce the batches (`loader.path` says which one ran, and why):

- native: a fastload dataset (or a torchvision one the compat layer recognises) runs on the
  C++ engine, one call per batch (fastload/native.py), num_workers engine threads; this
  module keeps `prefetch_factor` (at least 2) batches submitted and takes them in order.
- generic: anything else runs on torch's own DataLoader machinery (worker processes,
  get_worker_info, worker_init_fn, timeout, persistent workers, in_order, pin memory),
  which this module configures but does not reimplement.

Both then go through the same transfer stage (fastload/transfer) and the same stats.

How the generic path wraps torch's (and why):

- Order. For map-style datasets with automatic batching, the order comes from
  fastload.source.sampling (torch's permutations on one process, a rank split under DDP,
  exact resume); torch's DataLoader gets it as its batch_sampler, so its workers fetch
  exactly those batches.
- Fetch wrapper. The dataset torch's workers index is a thin wrapper that times the reads
  (shipped to the main process with the batch, for stats) and, when a sample raises,
  attaches "fastload: raised by dataset[i] (sample index i)" to the exception as a note
  (Python 3.11 add_note), so the type and message are kept and the caller learns the index.
  The wrapper is invisible to user code: `loader.dataset` is the user's dataset, and in
  each worker, before worker_init_fn runs, `get_worker_info().dataset` is set back to the
  user's dataset object (the one the wrapper reads from), so the common pattern of
  configuring the worker's dataset copy in worker_init_fn keeps working. We chose this over
  wrapping collate_fn alone (it never sees which sample failed) and over patching torch's
  fetcher (a private class that changes between releases).
- Collate wrapper. collate_fn runs as given, timed; the batch travels back with its
  timings in a small record that the main process unwraps. pin_memory=True pins the
  batch exactly as torch does (torch's pin thread calls the record's pin_memory()).
- Worker failures are torch's: an exception in a worker is re-raised with its type and
  message; a worker killed by a signal or a timeout raises RuntimeError, never hangs.

Example:
    >>> import torch
    >>> from fastload import DataLoader
    >>> ds = torch.utils.data.TensorDataset(torch.arange(10.0))
    >>> loader = DataLoader(ds, batch_size=4, shuffle=True,
    ...                     generator=torch.Generator().manual_seed(0), dtype=torch.float16)
    >>> [b[0].dtype for b in loader]
    [torch.float16, torch.float16, torch.float16]
    >>> sd = loader.state_dict(); sd["epoch"], sd["batches_consumed"]
    (1, 0)
"""

from __future__ import annotations

import collections
import copy
import hashlib
import os
import time
import warnings
import weakref
from typing import Any, Callable, Deque, Iterator, List, Optional, Tuple, TypeVar, Union

import torch
import torch.utils.data
from torch.profiler import record_function
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data.dataloader import _DatasetKind
from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

from fastload.native import DECODE_ON as _DECODE_ON, select_path
from fastload.source.base import NativeDataset
from fastload.source import sampling
from fastload.stats import LoaderStats, Stats

# 2 added "dataset" (a fingerprint of the data the state was saved over); version 1
# states still load, without that check.
STATE_VERSION = 2
_STATE_VERSIONS = (1, 2)
_ACCELERATE = ("auto", True, False)
_ON_ERROR = ("raise", "skip")
_PREFIX = "fastload.DataLoader"
T_co = TypeVar("T_co", covariant=True)


# ---------------------------------------------------------------------------------------
# Worker side: what torch's worker processes run (picklable, importable for spawn)


def _add_note(error: BaseException, note: str) -> None:
    if hasattr(error, "add_note"):  # Python >= 3.11; the note travels in the traceback text
        error.add_note(note)
    elif error.args and isinstance(error.args[0], str):  # older Pythons: into the message
        error.args = (f"{error.args[0]} ({note})",) + error.args[1:]


class _Skipped:
    """What a fetch returns in place of a sample that on_error='skip' dropped."""


_SKIPPED = _Skipped()


class _WorkerBatch:
    """A collated batch plus what producing it cost, sent from a worker to the loader.

    `empty` marks a batch whose every sample was skipped (on_error="skip"): the loader
    counts it and moves on. pin_memory() is what torch's pin-memory thread (or its
    single-process iterator) calls when pin_memory=True: it pins the batch like torch
    would and measures it.
    """

    __slots__ = ("batch", "samples", "fetch_s", "collate_s", "pin_s", "skipped", "empty")

    def __init__(self, batch: Any, samples: int, fetch_s: float, collate_s: float, pin_s: float = 0.0,
                 skipped: int = 0, empty: bool = False):
        self.batch, self.samples, self.empty = batch, samples, empty
        self.fetch_s, self.collate_s, self.pin_s, self.skipped = fetch_s, collate_s, pin_s, skipped

    def __reduce__(self):
        return (_WorkerBatch, (self.batch, self.samples, self.fetch_s, self.collate_s, self.pin_s,
                               self.skipped, self.empty))

    def pin_memory(self) -> "_WorkerBatch":
        from torch.utils.data._utils.pin_memory import pin_memory

        start = time.perf_counter()
        with record_function("fastload.pin"):
            batch = self.batch if self.empty else pin_memory(self.batch)
        return _WorkerBatch(batch, self.samples, self.fetch_s, self.collate_s,
                            self.pin_s + time.perf_counter() - start, self.skipped, self.empty)


class _MapFetch(torch.utils.data.Dataset):
    """The map-style dataset torch's workers index: reads from the user's dataset, timed,
    with the sample index attached to any exception (see the module docstring)."""

    def __init__(self, dataset: Any, on_error: str):
        self.dataset = dataset
        self.on_error = on_error
        self.fetch_s = 0.0
        self.skipped = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def take(self) -> Tuple[float, int]:
        """(fetch seconds, skipped samples) since the last take()."""
        out = (self.fetch_s, self.skipped)
        self.fetch_s, self.skipped = 0.0, 0
        return out

    def _one(self, index: Any) -> Any:
        try:
            return self.dataset[index]
        except Exception as error:
            if self.on_error == "skip":
                self.skipped += 1
                return _SKIPPED
            _add_note(error, f"fastload: raised by dataset[{index!r}] (sample index {index!r})")
            raise

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
                        if self.on_error != "skip":
                            _add_note(error, f"fastload: raised by dataset.__getitems__ for sample indices "
                                             f"{list(indices)!r}")
                            raise
                        # skip: find the bad samples one by one
                data = [self._one(i) for i in indices]
                return [d for d in data if d is not _SKIPPED] if self.on_error == "skip" else data
        finally:
            self.fetch_s += time.perf_counter() - start


class _IterFetch(IterableDataset):
    """The iterable dataset torch's workers iterate: the user's, timed, with the position
    in this worker's stream attached to any exception."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.fetch_s = 0.0

    def take(self) -> Tuple[float, int]:
        out = (self.fetch_s, 0)
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
                _add_note(error, f"fastload: raised by the IterableDataset's iterator after {count} "
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
        fetch_s, skipped = self.fetch.take() if self.fetch is not None else (0.0, 0)
        if data is _SKIPPED or (skipped and isinstance(data, list) and not data):
            return _WorkerBatch(None, 0, fetch_s, 0.0, skipped=skipped, empty=True)
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
# Main process: order, sources, the iterator


class _Pass:
    """Bookkeeping of one iteration (epoch pass), for state_dict()."""

    __slots__ = ("epoch", "offset", "delivered", "total", "finished", "set_epoch", "resumed_from")

    def __init__(self, epoch: int, offset: int, set_epoch: Optional[int], resumed_from: Optional[dict] = None):
        self.epoch = epoch
        self.offset = offset  # batches of this epoch consumed before a resume
        self.delivered = 0  # order positions delivered by __next__ in this pass
        self.total: Optional[int] = None  # batches this pass yields, once known
        self.finished = False
        self.set_epoch = set_epoch  # epoch to select in the order when the pass starts
        self.resumed_from = resumed_from  # the loaded state this pass continues, if any


class _OrderBatches:
    """torch's batch_sampler (and the native loop's batches): one pass of the loader's order.

    A generator, so nothing happens before the first next(): torch's iterator calls iter()
    on its batch_sampler before drawing its worker base seed from the same generator, and
    the order draws its permutation lazily, like torch's RandomSampler.
    """

    def __init__(self, loader: "DataLoader"):
        # A weak reference: torch's DataLoader (kept by persistent workers) holds this
        # batch sampler, and a strong one back would make loader and workers a reference
        # cycle. The garbage collector then closes the workers' index queues (weakref
        # finalizers run before __del__) before torch's iterator can send them the
        # shutdown message, and torch waits 5 s per worker before killing it.
        self._loader_ref = weakref.ref(loader)

    def __deepcopy__(self, memo: dict) -> "_OrderBatches":
        # A copy of the loader (copy.deepcopy after iterating, with the kept inner torch
        # loader) must iterate its own order, not keep pointing at the original.
        loader = self._loader_ref()
        copied = object.__new__(_OrderBatches)
        memo[id(self)] = copied
        copied._loader_ref = weakref.ref(copy.deepcopy(loader, memo)) if loader is not None else self._loader_ref
        return copied

    @property
    def _loader(self) -> "DataLoader":
        loader = self._loader_ref()
        if loader is None:
            raise RuntimeError(f"{_PREFIX}: the loader this batch sampler belongs to was garbage-collected; "
                               "keep a reference to the DataLoader while iterating.")
        return loader

    def __iter__(self) -> Iterator[List[int]]:
        order, current = self._loader._order, self._loader._pass
        if current.set_epoch is not None:
            order.set_epoch(current.set_epoch)
        current.total = len(order)
        yield from order

    def __len__(self) -> int:
        return len(self._loader._order)


class _TorchSource:
    """(batch, (samples, position)) from torch's iterator; records the worker timings."""

    def __init__(self, torch_iter: Iterator[Any], stats: LoaderStats, keep_batch_count: bool = False):
        self._it = torch_iter
        self._stats = stats
        self._keep_batch_count = keep_batch_count  # DDP: every rank must yield as many batches
        self.position = 0

    def __iter__(self) -> "_TorchSource":
        return self

    def __next__(self) -> Tuple[Any, Tuple[int, int]]:
        while True:
            item = next(self._it)
            self.position += 1
            if not isinstance(item, _WorkerBatch):  # a DataPipe, read without our wrappers
                return item, (_count_samples(item), self.position)
            self._stats.add_worker(item.fetch_s, item.collate_s, item.pin_s, item.skipped)
            if not item.empty:
                return item.batch, (item.samples, self.position)
            if self._keep_batch_count:
                raise RuntimeError(
                    f"fastload.DataLoader: every sample of batch {self.position} failed and "
                    "on_error='skip' dropped them all; under DDP a rank cannot drop a batch without "
                    "hanging the others' collectives. Fix or remove the files (loader.stats() counts "
                    "them), or use a fastload dataset, whose native path replaces bad samples.")


class _NativeSource:
    """The native loop: `depth` batches submitted to the runner, results taken in order."""

    def __init__(self, runner: Any, batches: Iterator[List[int]], epoch: int, depth: int):
        self._runner, self._batches, self._epoch, self._depth = runner, batches, epoch, depth
        runner.start_pass()
        self._tickets: Deque[Tuple[int, int]] = collections.deque()
        self._done = False
        self.position = 0

    def __iter__(self) -> "_NativeSource":
        return self

    def __next__(self) -> Tuple[Any, Tuple[int, int]]:
        while len(self._tickets) < self._depth and not self._done:
            try:
                indices = next(self._batches)
            except StopIteration:
                self._done = True
                break
            self._tickets.append((self._runner.submit(indices, self._epoch), len(indices)))
        if not self._tickets:
            raise StopIteration
        ticket, samples = self._tickets.popleft()
        self.position += 1
        return self._runner.result(ticket), (samples, self.position)

    def close(self) -> None:
        """Releases the batches still in flight (a `break` out of the epoch)."""
        self._done = True
        while self._tickets:
            self._runner.discard(self._tickets.popleft()[0])

    def __del__(self):
        self.close()


class _HostConvert:
    """dtype/memory_format on the CPU, for device=None or "cpu"."""

    def __init__(self, source: Iterator[Tuple[Any, Any]], convert: Callable, stats: LoaderStats):
        self._source, self._convert, self._stats = source, convert, stats

    def __iter__(self) -> "_HostConvert":
        return self

    def __next__(self) -> Tuple[Any, Any]:
        from fastload.transfer.tree import tree_map

        batch, tag = next(self._source)
        start = time.perf_counter()
        with record_function("fastload.transfer"):
            batch = tree_map(self._convert, batch)
        self._stats.add_time("transfer", time.perf_counter() - start)
        return batch, tag


def _count_samples(batch: Any) -> int:
    from fastload.transfer.tree import tree_tensors

    tensors = tree_tensors(batch)
    return int(tensors[0].shape[0]) if tensors and tensors[0].dim() > 0 else 1


# torch iterator attributes that hold the loader's objects, and the loader attribute
# holding the user's object that fastload wrapped there.
_USERS_OBJECTS = {"_dataset": "dataset", "_collate_fn": "collate_fn", "_worker_init_fn": "worker_init_fn"}


class _LoaderIter:
    """What iter(loader) returns: batches in order, on the loader's device.

    On the generic path it also answers for torch's iterator that produces the batches
    (`torch_iter`): attributes it does not have itself (`_workers`, `_shutdown_workers`,
    `_num_workers`, `_sampler_iter`, ...) are read from that iterator, so tools that
    inspect torch's iterators keep working; `_dataset`, `_collate_fn` and
    `_worker_init_fn` are the user's objects, as on torch's iterator, not fastload's
    timing wrappers around them.
    """

    def __init__(self, loader: "DataLoader", current: _Pass, feed: Iterator[Tuple[Any, Any]], length: Any,
                 torch_iter: Any = None):
        self._loader = loader
        self._pass = current
        self._feed = feed
        self._stats = loader._stats
        self._length = length
        self._torch_iter = torch_iter

    def __getattr__(self, name: str) -> Any:
        # Only reached when the normal lookup failed. Dunder names are never forwarded
        # (copy/pickle probe them on half-built objects).
        torch_iter = self.__dict__.get("_torch_iter")
        if torch_iter is None or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = getattr(torch_iter, name)
        if name in _USERS_OBJECTS:  # torch's iterator holds fastload's wrapper there
            return getattr(self._loader, _USERS_OBJECTS[name])
        return value

    def __dir__(self) -> List[str]:
        names = set(object.__dir__(self))
        if self._torch_iter is not None:
            names.update(n for n in dir(self._torch_iter) if not (n.startswith("__") and n.endswith("__")))
        return sorted(names)

    def __iter__(self) -> "_LoaderIter":
        return self

    def __len__(self) -> int:
        return self._length()

    def __next__(self) -> Any:
        if self._pass.finished:
            raise StopIteration
        called = time.perf_counter()
        try:
            with record_function("fastload.wait"):
                batch, (samples, position) = next(self._feed)
        except StopIteration:
            self._pass.finished = True
            self._stats.next_ended(called)
            raise
        except BaseException:
            self._stats.next_ended(called)
            raise
        self._pass.delivered = position
        self._stats.next_returned(called, samples)
        return batch


# ---------------------------------------------------------------------------------------


class DataLoader(torch.utils.data.DataLoader[T_co]):
    """A drop-in torch.utils.data.DataLoader that can deliver batches on the GPU, resume
    mid-epoch, shard under DDP, run fastload datasets natively, and say where time goes.

    Args (torch's, same order, defaults and meaning; see torch.utils.data.DataLoader):
        dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
        num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
        worker_init_fn=None, multiprocessing_context=None, generator=None, *,
        prefetch_factor=None, persistent_workers=False, pin_memory_device="", in_order=True

    Keyword-only extras:
        device: where batches arrive (None or "cpu": like torch, on the CPU; "cuda[:N]":
            every tensor of the batch, whatever its nesting in dicts, lists, tuples,
            namedtuples or dataclasses, is staged in pinned memory, copied asynchronously on
            a side stream, and made safe to use on the caller's current stream).
        dtype: floating tensors are converted to it on the device (e.g. torch.bfloat16 for
            AMP); integer tensors (labels, uint8 images) keep their dtype.
        memory_format: e.g. torch.channels_last, applied to 4-D tensors on the device.
        prefetch_to_device: batches whose device copies are issued before the loop asks
            for them (>= 1; device memory holds that many plus the one in use).
        accelerate: "auto" runs a dataset on the native path when it can, True requires it
            (ValueError saying why not), False always uses the generic path.
        decode_on: where the native path decodes JPEGs: "cpu", "cpu+gpu" (CPU decodes the
            crop window, the GPU resizes and normalises), "gpu" (nvJPEG) or "auto" (by what
            was built and the device; loader.path says which). Ignored on the generic path.
        on_error: "raise" (torch's behaviour) or "skip": a sample whose read raises is left
            out of its batch (native path: replaced by the next good sample) and counted
            in stats()["skipped"]; map-style datasets only.
        distributed: "auto" (shard across ranks when torch.distributed is initialised or
            torchrun's RANK/WORLD_SIZE are set), True (require it) or False.
        uneven: when the dataset does not split evenly across ranks: "pad", "drop" or
            "exact" (see fastload.source.sampling).
        seed: base seed of the distributed permutation (None: 0, so that every rank
            agrees) and of the native path's random augmentation (None: a fastload dataset's
            own `seed`; for other datasets drawn from torch's global generator at
            construction, without advancing it, so torch.manual_seed makes it
            reproducible; saved in state_dict()).
        exact: native path only: never decode at a reduced DCT scale, so outputs follow a
            full decode to within rounding (default False: decode the crop window at the
            largest 1/2, 1/4, 1/8 scale that still covers the output, much faster on large
            images).

    Yields:
        What torch's DataLoader yields for the same arguments (same order, same values);
        tensors on `device`, floating ones in `dtype`, 4-D ones in `memory_format`.

    Epochs: the first iteration is epoch 0; every later `iter(loader)` (after a finished or
    abandoned one) is the next epoch, unless `set_epoch(e)` or `load_state_dict()` was
    called in between, which selects the epoch explicitly. A user's sampler or
    batch_sampler is never driven by the automatic count (call `sampler.set_epoch` as with
    torch, or `loader.set_epoch`, which forwards to it).

    Resume: `state_dict()` is plain data ({"version", "epoch", "batches_consumed", "order",
    "native_seed", "dataset"}) counting the batches delivered by __next__ (not those
    prefetched); after `load_state_dict(sd)` the next iteration continues right after the
    last delivered batch, and len(loader) stays the whole epoch's batch count (as torch's),
    so a resumed epoch yields len(loader) - batches_consumed batches. A state saved after
    an epoch's last batch resumes at the next epoch's start. Without a generator, the
    epochs after a resumed one are shuffled with the seeds the uninterrupted run drew from
    the global RNG (the state carries that RNG's stream), not from the new process's.
    IterableDataset and batch_size=None leave the order to torch: their state only counts
    epochs (a resumed epoch restarts from its beginning). With in_order=False the count is
    of batches received, so a resume may repeat or skip the few batches that were
    reordered. Per-worker random seeds (for random augmentation in workers) are torch's and
    are not restored by a resume.

    Example:
        >>> import torch
        >>> from fastload import DataLoader
        >>> loader = DataLoader(torch.utils.data.TensorDataset(torch.arange(6)), batch_size=4)
        >>> [b[0].tolist() for b in loader], len(loader), loader.path.split(":")[0]
        ([[0, 1, 2, 3], [4, 5]], 2, 'generic')
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Optional[Callable[[Any], Any]] = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,
        generator: Optional[torch.Generator] = None,
        *,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        device: Union[None, str, torch.device, int] = None,
        dtype: Optional[torch.dtype] = None,
        memory_format: Optional[torch.memory_format] = None,
        prefetch_to_device: int = 2,
        accelerate: Union[str, bool] = "auto",
        decode_on: str = "auto",
        on_error: str = "raise",
        distributed: Union[str, bool] = "auto",
        uneven: str = "pad",
        seed: Optional[int] = None,
        exact: bool = False,
    ) -> None:
        # torch validates its own arguments first, with its own exceptions and messages.
        super().__init__(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
            pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device, in_order=in_order,
        )
        self.device = _check_device(device)
        self.dtype = _check_dtype(dtype)
        self.memory_format = _check_memory_format(memory_format)
        if not isinstance(prefetch_to_device, int) or isinstance(prefetch_to_device, bool) or prefetch_to_device < 1:
            raise ValueError(f"{_PREFIX}: expected prefetch_to_device >= 1 (an int), got {prefetch_to_device!r}. "
                             "It is the number of batches copied to the device ahead of the loop; 2 is usual.")
        self.prefetch_to_device = prefetch_to_device
        if accelerate not in _ACCELERATE or (accelerate is not True and accelerate is not False
                                             and not isinstance(accelerate, str)):
            raise ValueError(f"{_PREFIX}: expected accelerate='auto', True or False, got {accelerate!r}.")
        self.accelerate = accelerate
        if decode_on not in _DECODE_ON:
            raise ValueError(f"{_PREFIX}: expected decode_on in {_DECODE_ON}, got {decode_on!r}.")
        self.decode_on = decode_on
        if on_error not in _ON_ERROR:
            raise ValueError(f"{_PREFIX}: expected on_error='raise' or 'skip', got {on_error!r}.")
        self.on_error = on_error
        if distributed not in ("auto", True, False) or (isinstance(distributed, (int, float))
                                                        and not isinstance(distributed, bool)):
            raise ValueError(f"{_PREFIX}: expected distributed='auto', True or False, got {distributed!r}.")
        self.distributed = distributed
        if uneven not in sampling.UNEVEN_MODES:
            raise ValueError(f"{_PREFIX}: expected uneven in {sampling.UNEVEN_MODES}, got {uneven!r}.")
        self.uneven = uneven
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"{_PREFIX}: expected seed=None or an int, got {seed!r}.")
        self.seed = seed

        iterable = self._dataset_kind == _DatasetKind.Iterable
        self._user_dataset = dataset  # before torch's DataPipe serialisation wrapper
        self._datapipe = isinstance(dataset, (IterDataPipe, MapDataPipe))
        if on_error == "skip" and iterable:
            raise ValueError(
                f"{_PREFIX}: expected on_error='raise' with an IterableDataset, got on_error='skip'. "
                "An iterator cannot go on after it raised; skip bad samples inside the dataset's __iter__."
            )
        self._user_sampler = sampler is not None or batch_sampler is not None

        # The order: fastload's for map-style datasets with automatic batching.
        self._order: Any = None
        reason = None
        if iterable:
            reason = "generic: IterableDataset (order left to the dataset and torch)"
        elif not self._auto_collation:
            reason = "generic: batch_size=None (no automatic batching; order left to torch)"
        elif self._datapipe:
            reason = "generic: a DataPipe (order left to torch)"
        else:
            try:
                dataset_len: Optional[int] = len(dataset)
            except TypeError:
                dataset_len = None
            if dataset_len is not None or self._user_sampler:
                # Without __len__ only a user's sampler can order the dataset; the length
                # then only labels resume states.
                self._order = sampling.make_order(
                    dataset_len=dataset_len or 0, batch_size=batch_size if batch_size is not None else 1,
                    shuffle=bool(shuffle), drop_last=drop_last, sampler=sampler, batch_sampler=batch_sampler,
                    generator=generator, distributed=distributed, uneven=uneven, seed=seed)
            else:
                reason = "generic: the dataset has no __len__ (order left to torch)"

        if distributed is True and self._order is None and not self._user_sampler:
            raise ValueError(
                f"{_PREFIX}: expected a map-style dataset with __len__ and automatic batching for "
                f"distributed=True, got {reason.split(': ', 1)[1]}. Shard such data yourself (e.g. "
                "by rank in the dataset's __iter__), or pass distributed='auto' or False.")

        # The path: native when the dataset can run on the C++ engine.
        self._runner: Any = None
        if reason is None and accelerate is False:
            reason = "generic: accelerate=False"
        if reason is None:
            # select_path may draw a default augmentation seed from the global RNG; torch's
            # DataLoader draws nothing at construction, and a draw here would shift the
            # user's RNG stream (so the permutation and worker seeds would differ from torch's).
            with torch.random.fork_rng(devices=[]):
                self._runner, reason = select_path(
                    dataset, batch_size=self.batch_size, collate_fn=collate_fn, num_workers=num_workers,
                    # Batches bound for a GPU are produced in pinned memory: no staging copy.
                    pin_memory=pin_memory or (self.device is not None and self.device.type == "cuda"),
                    accelerate=accelerate, dtype=self.dtype, memory_format=self.memory_format,
                    on_error=on_error, seed=seed, device=self.device, decode_on=decode_on, exact=exact)
        if accelerate is True and self._runner is None:
            raise ValueError(
                f"{_PREFIX}: expected a dataset the native pipeline can run (accelerate=True), got "
                f"{reason!r}. Pass accelerate='auto' to fall back to the generic path."
            )
        self._path = reason

        # Epochs, resume, the current pass.
        self._pending_epoch: Optional[int] = None
        self._explicit_epoch = False
        self._last_epoch: Optional[int] = None
        self._resume: Optional[Tuple[int, int]] = None
        self._loaded: Optional[dict] = None
        self._pass: Optional[_Pass] = None
        self._drew_base_seed = False

        self._stats = LoaderStats()
        self._inner: Optional[torch.utils.data.DataLoader] = None
        self._transport: Any = None
        self._pool: Any = None
        if self.device is not None and self.device.type != "cpu":
            self._device_transport()  # fails now, not at the first batch, if the device is absent

    # -- public extras --------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Which path produces the batches and why: "native: <what>" or "generic: <reason>"."""
        return self._path

    def stats(self, reset: bool = False) -> Stats:
        """Per-stage timings, throughput and data-stall fraction since creation (or the last
        reset); keys are documented in fastload.stats. `str()` of it is a readable report.

        Args:
            reset: start counting afresh after returning the numbers.
        """
        native = self._runner.stats(reset=reset) if self._runner is not None else None
        left_out = getattr(self.dataset, "skipped", None)  # fastload sources list them
        out = self._stats.as_dict(self._path, native,
                                  skipped_at_index=len(left_out) if isinstance(left_out, list) else 0)
        if reset:
            self._stats.reset()
        return out

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch of the next iteration (its shuffle and, under DDP, its split).

        A pending resume (load_state_dict) of the same epoch is kept; another epoch
        discards it. With a user's sampler or batch_sampler, forwards to its set_epoch.
        """
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise TypeError(f"{_PREFIX}.set_epoch: expected an int epoch, got {epoch!r}.")
        if epoch < 0:
            raise ValueError(f"{_PREFIX}.set_epoch: expected a non-negative epoch, got {epoch}.")
        if self._resume is not None and self._resume[0] == epoch:
            self._pending_epoch = epoch
            return
        self._resume = None
        self._pending_epoch = epoch
        self._explicit_epoch = True
        if self._order is not None:
            self._order.set_epoch(epoch)  # a pending resume of another epoch is dropped

    def state_dict(self) -> dict:
        """Where the loader is: plain Python data for a checkpoint (see the class docstring).

        Returns:
            {"version": 2, "epoch": int, "batches_consumed": int, "order": dict or None,
             "native_seed": int or None (the native path's augmentation seed),
             "dataset": {"len": int, "keys": str or None} or None (see load_state_dict)}
        """
        return self._with_dataset(self._position_state())

    def _position_state(self) -> dict:
        current = self._pass
        if current is None:
            if self._loaded is not None:
                return copy.deepcopy(self._loaded)
            return {"version": STATE_VERSION, "epoch": self._next_epoch(), "batches_consumed": 0, "order": None,
                    "native_seed": self._native_seed()}
        if current.total is None and not current.finished:
            # iter() ran but the pass has not drawn its order yet: the state is still the
            # one it started from.
            if current.resumed_from is not None:
                return copy.deepcopy(current.resumed_from)
            # The order still describes the pass before: its state carries the stream that
            # draws this epoch's shuffle seed (the epoch itself is restarted on load).
            order_state = self._order.state_dict(0) if self._order is not None else None
            return {"version": STATE_VERSION, "epoch": current.epoch, "batches_consumed": 0, "order": order_state,
                    "native_seed": self._native_seed()}
        finished = current.finished or (current.total is not None and current.delivered >= current.total)
        order_state = None
        if self._order is not None and current.total is not None:
            order_state = self._order.state_dict(current.delivered)
        if finished:
            epoch, consumed = current.epoch + 1, 0
            if order_state is not None and order_state.get("segments", []) == [] and not order_state.get("perm"):
                # The next epoch from its start: nothing in it depends on the finished pass's
                # length, so it is labelled with the dataset's length now, as the fingerprint is
                # (a dataset that grew between epochs still resumes).
                now = self._current_dataset_len()
                if now is not None:
                    order_state["dataset_len"] = now
        else:
            epoch, consumed = current.epoch, current.offset + current.delivered
        return {"version": STATE_VERSION, "epoch": epoch, "batches_consumed": consumed, "order": order_state,
                "native_seed": self._native_seed()}

    def _with_dataset(self, state: dict) -> dict:
        # A loaded state handed back before its epoch starts is re-saved as this version's.
        state["version"] = STATE_VERSION
        state["dataset"] = self._dataset_fingerprint()
        return state

    def _native_seed(self) -> Optional[int]:
        return self._runner.plan.seed if self._runner is not None else None

    def _dataset_fingerprint(self) -> Optional[dict]:
        """{"len": N, "keys": hash of the first and last samples' names and labels, or None}.

        Names come only from what is already in memory: a fastload dataset's index (the
        last two parts of a file's path, e.g. "dog/001.jpg", or a tar shard's file name and
        member), or a torchvision-style `samples` list of (path, label). Other datasets get
        only their length: reading samples to fingerprint them could cost a lot (remote
        storage, decoding) and need not be deterministic. Paths are cut to their last parts
        so that moving the data to another root still resumes. None without a len().
        """
        dataset = self._user_dataset
        n = self._current_dataset_len()
        if n is None:
            return None
        names = _sample_names(dataset, n) if n > 0 else None
        keys = hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()[:16] if names else None
        return {"len": n, "keys": keys}

    def _current_dataset_len(self) -> Optional[int]:
        """len(dataset), or None when it has none that works (an IterableDataset's __len__ may
        raise anything, e.g. NotImplementedError): a resume check is never a new way to fail."""
        try:
            n = len(self._user_dataset)
        except Exception:
            return None
        return n if isinstance(n, int) and n >= 0 else None

    def _check_dataset(self, saved: Any, where: str) -> None:
        if saved is None:
            return
        if not (isinstance(saved, dict) and type(saved.get("len")) is int
                and (saved.get("keys") is None or isinstance(saved.get("keys"), str))):
            raise ValueError(f"{where}: expected 'dataset' to be None or {{'len': int, 'keys': str or None}}, got "
                             f"{saved!r}. Load a state saved by fastload.DataLoader.state_dict().")
        current = self._dataset_fingerprint()
        if current is None:
            return
        fix = ("Resume with the dataset the state was saved over (the same samples in the same order), or start "
               "afresh without load_state_dict; to resume over this data anyway, delete the state's 'dataset' entry.")
        if saved["len"] != current["len"]:
            raise ValueError(f"{where}: the state was saved over a dataset of {saved['len']} samples, this loader's "
                             f"has {current['len']}. {fix}")
        if saved["keys"] is not None and current["keys"] is not None and saved["keys"] != current["keys"]:
            first, last = _sample_names(self._user_dataset, current["len"])
            raise ValueError(f"{where}: the state was saved over another dataset of the same length "
                             f"({current['len']} samples): its first and last samples differ from this dataset's "
                             f"(now {first!r} and {last!r}; fingerprint {saved['keys']} saved, {current['keys']} "
                             f"now). {fix}")

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state_dict(); the next iteration continues after its last batch.

        Call it between iterations (before `iter(loader)`), with a loader built with the
        same arguments over the same dataset. The whole state is checked before any of it
        is applied: a refused state (ValueError/TypeError saying what is wrong) leaves the
        loader exactly as it was. A state saved over another dataset is refused: one of
        another length, or, for fastload datasets and torchvision-style ones with a
        `samples` list, one whose first or last sample differs (see `state_dict`'s
        "dataset"); states of fastload versions before the fingerprint load without it.
        """
        where = f"{_PREFIX}.load_state_dict"
        if not isinstance(state_dict, dict):
            raise TypeError(f"{where}: expected a dict from state_dict(), got {type(state_dict).__name__}.")
        version = state_dict.get("version")
        if type(version) is not int or version not in _STATE_VERSIONS:
            raise ValueError(f"{where}: expected version {' or '.join(map(str, _STATE_VERSIONS))}, got {version!r}. "
                             "Resume with the fastload version that saved the state.")
        epoch, consumed = state_dict.get("epoch"), state_dict.get("batches_consumed")
        for name, value in (("epoch", epoch), ("batches_consumed", consumed)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{where}: expected a non-negative int {name}, got {value!r}.")
        native_seed = state_dict.get("native_seed")
        if native_seed is not None and (not isinstance(native_seed, int) or isinstance(native_seed, bool)
                                        or not -2 ** 63 <= native_seed < 2 ** 63):
            raise ValueError(f"{where}: expected native_seed to be None or a 64-bit int, got {native_seed!r}.")
        self._check_dataset(state_dict.get("dataset"), where)
        order_state = state_dict.get("order")
        if self._order is not None and order_state is not None:
            self._order.check_state_dict(order_state)

        # Checked: apply it.
        if self._runner is not None and native_seed is not None:
            self._runner.set_seed(native_seed)  # the same crops and flips as before the restart
        self._resume = None
        if self._order is not None and order_state is not None:
            if hasattr(self._order, "base_seed_draws"):
                # Draws from the global RNG before each epoch's shuffle: torch's iterator
                # (or the native loop) draws a base seed per epoch, once with persistent workers.
                self._order.base_seed_draws = 0 if self.persistent_workers else 1
            self._order.load_state_dict(order_state)
            if consumed == 0:
                # The start of an epoch (a finished one's successor, or nothing consumed
                # yet): nothing to skip; a user's sampler gets that epoch too.
                self._order.set_epoch(epoch)
            else:
                self._resume = (epoch, consumed)
        self._pending_epoch = epoch
        self._explicit_epoch = False
        self._pass = None
        self._loaded = copy.deepcopy(state_dict)

    def close(self) -> None:
        """Releases the native engine and persistent workers now rather than at exit."""
        if self._runner is not None:
            self._runner.close()
        self._inner = None
        if self._pool is not None:
            self._pool.clear()

    # -- torch's protocol -----------------------------------------------------------------
    def __len__(self) -> int:
        if self._order is not None:
            # The whole epoch's batch count, also while a resumed epoch yields only its
            # rest (as torch's and torchdata's): training loops size an epoch with it.
            # Over the dataset's current length when the next iter() will adopt it, without
            # adopting it here: the pass before still counts against its own length.
            return self._order.epoch_batches(self._dataset_len_to_follow(starting=False))
        return super().__len__()

    def __iter__(self) -> _LoaderIter:  # type: ignore[override]
        self._follow_dataset_len(starting=True)
        epoch = self._next_epoch()
        resume = self._resume if self._resume is not None and self._resume[0] == epoch else None
        set_epoch = None
        if self._order is not None and resume is None and (self._explicit_epoch or not self._user_sampler):
            set_epoch = epoch
        loaded = self._loaded if resume is not None else None
        self._pending_epoch, self._explicit_epoch, self._resume, self._loaded = None, False, None, None
        self._last_epoch = epoch
        current = _Pass(epoch, resume[1] if resume else 0, set_epoch, loaded)
        self._pass = current
        self._stats.start_epoch()

        # The order draws later epochs' seeds from a resumed run's stream only while nobody
        # else touches the global RNG; its own draws here (the base seed; with workers, the
        # shuffle seed) do not count.
        order_draws = self._order if isinstance(self._order, sampling._Order) else None
        if order_draws is not None:
            order_draws.begin_global_draws()
        if self._runner is not None:
            if not (self.persistent_workers and self._drew_base_seed):
                # torch's iterator draws its workers' base seed before the permutation;
                # drawing it here too keeps the permutation equal to torch's.
                torch.empty((), dtype=torch.int64).random_(generator=self.generator)
                self._drew_base_seed = True
            # Every engine thread works on every batch (one queue), so prefetch_factor
            # batches in flight keep them all busy; torch's per-worker multiple would only
            # hold more batch memory.
            if order_draws is not None:
                order_draws.end_global_draws()
            depth = max(2, self.prefetch_factor or 2)
            source: Iterator[Tuple[Any, Any]] = _NativeSource(
                self._runner, iter(_OrderBatches(self)), epoch, depth)
        else:
            if isinstance(self._user_dataset, NativeDataset):
                # A native dataset on the generic path draws the same parameters as the
                # native path would (workers get this copy when their iterator starts;
                # persistent workers keep their first copy: give such loaders a seed per
                # run instead, or use the native path).
                self._user_dataset.set_epoch(epoch)
                if self.seed is not None:
                    self._user_dataset.seed = self.seed
            try:
                source = _TorchSource(iter(self._inner_loader()), self._stats,
                                      keep_batch_count=getattr(self._order, "world_size", 1) > 1)
            finally:
                if order_draws is not None:
                    order_draws.end_global_draws()

        from fastload.transfer import DevicePrefetcher, make_convert

        convert = make_convert(self.dtype, self.memory_format)
        if self.device is not None and self.device.type != "cpu":
            transport, pool = self._device_transport()
            feed: Iterator[Tuple[Any, Any]] = DevicePrefetcher(
                source, transport, ahead=self.prefetch_to_device, pool=pool, convert=convert, stats=self._stats)
        elif convert is not None:
            feed = _HostConvert(source, convert, self._stats)
        else:
            feed = source
        return _LoaderIter(self, current, feed, self.__len__,
                           torch_iter=source._it if isinstance(source, _TorchSource) else None)

    # -- internals ------------------------------------------------------------------------
    def _follow_dataset_len(self, starting: bool) -> None:
        """torch's RandomSampler and SequentialSampler re-read len(dataset) at every len()
        and iter(), so a map-style dataset that grows (or shrinks) between epochs is
        followed; fastload's own single-process order does the same. Not while an epoch
        runs, is abandoned or waits to be resumed (its order and resume state are drawn
        for the length it started with; the next iter() takes the new one), not under DDP
        (every rank must agree, and DistributedSampler fixes its length too), and not on
        the native path (the engine's sample index is built once)."""
        dataset_len = self._dataset_len_to_follow(starting)
        if dataset_len is not None and dataset_len != self._order.dataset_len:
            self._order.dataset_len = dataset_len

    def _dataset_len_to_follow(self, starting: bool) -> Optional[int]:
        """The dataset's length if the order follows it now (see _follow_dataset_len), else None."""
        order = self._order
        if self._runner is not None or not isinstance(order, sampling._Order) or order.distributed:
            return None
        if self._resume is not None or (not starting and self._pass is not None and not self._pass.finished):
            return None
        return len(self.dataset)

    def _next_epoch(self) -> int:
        if self._pending_epoch is not None:
            return self._pending_epoch
        return 0 if self._last_epoch is None else self._last_epoch + 1

    def _device_transport(self) -> Tuple[Any, Any]:
        if self._transport is None:
            from fastload.transfer import PinnedPool, make_transport

            self._transport = make_transport(self.device)
            self._pool = PinnedPool(self._transport)
        return self._transport, self._pool

    def _inner_loader(self) -> torch.utils.data.DataLoader:
        """torch's DataLoader over the wrapped dataset (see the module docstring).

        Built at each iteration, so attributes changed after construction take effect as
        they would in torch; kept across epochs with persistent workers (as torch keeps
        its workers and their configuration).
        """
        if self.persistent_workers and self.num_workers > 0 and self._inner is not None:
            self._inner._IterableDataset_len_called = self._IterableDataset_len_called
            return self._inner
        iterable = self._dataset_kind == _DatasetKind.Iterable
        if self._datapipe:
            fetch: Any = None
            dataset: Any = self._user_dataset
        elif iterable:
            fetch = dataset = _IterFetch(self.dataset)
        else:
            fetch = dataset = _MapFetch(self.dataset, self.on_error)
        collate = _TimedCollate(self.collate_fn, fetch, self._auto_collation)
        cuda = self.device is not None and self.device.type == "cuda"
        common = dict(
            num_workers=self.num_workers,
            collate_fn=collate,
            # With a CUDA device, torch's pin thread pins in the background (its caching
            # host allocator does not reuse a block before the copies reading it ended).
            pin_memory=self.pin_memory or cuda,
            timeout=self.timeout,
            worker_init_fn=_WorkerInit(self.worker_init_fn),
            multiprocessing_context=self.multiprocessing_context if self.num_workers > 0 else None,
            generator=self.generator,
            prefetch_factor=self.prefetch_factor if self.num_workers > 0 else None,
            persistent_workers=self.persistent_workers,
            pin_memory_device=self.pin_memory_device,
            in_order=self.in_order,
        )
        with warnings.catch_warnings():
            # torch's worker-count warning was already given by our own __init__.
            warnings.simplefilter("ignore", UserWarning)
            if iterable:
                inner = torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, drop_last=self.drop_last,
                                                    **common)
            elif self._order is not None:
                inner = torch.utils.data.DataLoader(dataset, batch_sampler=_OrderBatches(self), **common)
            elif self._auto_collation:
                inner = torch.utils.data.DataLoader(dataset, batch_sampler=self.batch_sampler, **common)
            else:
                inner = torch.utils.data.DataLoader(dataset, batch_size=None, sampler=self.sampler, **common)
        inner._IterableDataset_len_called = self._IterableDataset_len_called
        self._inner = inner
        return inner


# ---------------------------------------------------------------------------------------
# Dataset fingerprint (resume)


def _last_parts(path: str) -> str:
    """"class/file.jpg" of a path: the same on every machine and under any data root."""
    return f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}"


def _sample_names(dataset: Any, n: int) -> Optional[Tuple[str, str]]:
    """Names and labels of the first and last samples, from memory only (or None)."""
    index = getattr(dataset, "index", None) if isinstance(dataset, NativeDataset) else None
    try:
        if index is not None and len(index) == n:
            def name(i: int) -> str:
                path = index.files[int(index.file_ids[i])]
                if index.members is not None:  # a tar shard: its file name and the member
                    where = f"{os.path.basename(path)}:{index.members[i]}"
                else:
                    where = _last_parts(path)
                return f"{where} (label {int(index.labels[i])})"
            return name(0), name(n - 1)
        samples = getattr(dataset, "samples", None)
        if isinstance(samples, (list, tuple)) and len(samples) == n:
            def name_of(item: Any) -> Optional[str]:
                if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                    path = item[0]
                    return f"{_last_parts(path)} (label {item[1]!r})"
                return None
            first, last = name_of(samples[0]), name_of(samples[-1])
            if first is not None and last is not None:
                return first, last
    except Exception:  # a fingerprint is a check, never a new way to fail a resume
        return None
    return None


# ---------------------------------------------------------------------------------------
# Argument checks for the extras


def _check_device(device: Any) -> Optional[torch.device]:
    if device is None:
        return None
    try:
        checked = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{_PREFIX}: expected device=None, 'cpu', 'cuda' or 'cuda:N' (or a torch.device), "
                         f"got {device!r}.") from None
    if checked.type == "cuda":
        _require_cuda_device(checked)
    return checked


def _require_cuda_device(device: torch.device) -> None:
    """Refuses a CUDA device that is absent or out of range, at construction: before
    anything is built for it (the native engine's CUDA stream would otherwise fail with
    torch's opaque "invalid argument to exchangeDevice")."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{_PREFIX}: expected an available CUDA device for device={str(device)!r}, got "
            "torch.cuda.is_available() == False (no GPU visible, or a CPU-only build of torch). "
            "Pass device=None (batches stay on the CPU) or run on a machine with a GPU and a "
            "CUDA build of torch.")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise RuntimeError(
            f"{_PREFIX}: expected a CUDA device index below torch.cuda.device_count() == {count}, got "
            f"device={str(device)!r}. Pass device='cuda' (the current device) or 'cuda:0'..'cuda:{count - 1}' "
            "(CUDA_VISIBLE_DEVICES renumbers the visible GPUs from 0).")


def _check_dtype(dtype: Any) -> Optional[torch.dtype]:
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{_PREFIX}: expected dtype=None or a floating torch.dtype (e.g. torch.bfloat16), "
                        f"got {dtype!r}. It converts floating tensors only; labels keep their dtype.")
    return dtype


def _check_memory_format(memory_format: Any) -> Optional[torch.memory_format]:
    if memory_format is None:
        return None
    if not isinstance(memory_format, torch.memory_format):
        raise TypeError(f"{_PREFIX}: expected memory_format=None or a torch.memory_format (e.g. "
                        f"torch.channels_last), got {memory_format!r}.")
    return memory_format
