"""fastload.DataLoader: torch's DataLoader, plus device prefetch, resume, sharding and stats.

Change one import: every argument of torch.utils.data.DataLoader (torch 2.14), in the same
order with the same defaults, means what it means there and is rejected with the same
exception when it is wrong. Extras are keyword-only, after torch's arguments.

This module is the facade: it has its extras checked once (fastload/loader_args.py:
LoaderArgs), picks the path, and chains feed -> transfer -> iterator. Two paths produce
the batches (`loader.path` says which one ran, and why):

- native: a fastload dataset (or a torchvision one the compat layer recognises) runs on the
  C++ engine, one call per batch (fastload/native/), num_workers engine threads; the
  native feed keeps `prefetch_factor` (at least 2) batches submitted and takes them in order.
- generic: anything else runs on torch's own DataLoader machinery (worker processes,
  get_worker_info, worker_init_fn, timeout, persistent workers, in_order, pin memory),
  which fastload/generic.py configures but does not reimplement (its docstring says how
  it wraps torch's, and why).

Both then go through the same transfer stage (fastload/transfer) and the same stats.
Epochs and resume belong to one cursor (fastload/resume.py): the loader asks it which
epoch a pass runs, which batches it yields, and what state_dict() says.

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

import time
from typing import Any, Callable, Iterator, List, Optional, Tuple, TypeVar, Union

import torch
import torch.utils.data
from torch.profiler import record_function
from torch.utils.data.dataloader import _DatasetKind
from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

from fastload.datasets.base import NativeDataset
from fastload.generic import GenericFeed, InnerArgs, TorchDataLoader, inner_loader
from fastload.loader_args import check_loader_args
from fastload.native.feed import native_feed
from fastload.native.protocol import Runner
from fastload.loader_path import basis_of, choose_order, choose_runner, require_cuda_device, runner_holds
from fastload.rebuild import Rebuildable, offer
from fastload.resume import STATE_VERSION, Cursor, Pass  # noqa: F401  (STATE_VERSION: public name)
from fastload.sampling.order import Order
from fastload.stats import LoaderStats, Stats
from fastload.transfer import TransferStage

_PREFIX = "fastload.DataLoader"
T_co = TypeVar("T_co", covariant=True)


# ---------------------------------------------------------------------------------------
# Transfer and the iterator


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

    def __init__(self, loader: "DataLoader", current: Pass, feed: Iterator[Tuple[Any, Any]], length: Any,
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


class DataLoader(TorchDataLoader[T_co], Rebuildable):  # torch's class, also after a swap of the name
    """A drop-in torch.utils.data.DataLoader that can deliver batches on the GPU, resume
    mid-epoch, shard under DDP, run fastload datasets natively, and say where time goes.

    Args (torch's, same order, defaults and meaning; see torch.utils.data.DataLoader):
        dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
        num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
        worker_init_fn=None, multiprocessing_context=None, generator=None, *,
        prefetch_factor=None, persistent_workers=False, pin_memory_device="", in_order=True

    Keyword-only extras (each in full in fastload.loader_args.LoaderArgs, where they are
    checked; each is also a public attribute of the loader):
        device: None or "cpu" (like torch) or "cuda[:N]": batches copied ahead on a side stream.
        dtype, memory_format: floating tensors' dtype, 4-D tensors' layout, set on the device.
        prefetch_to_device: batches copied to the device ahead of the loop (>= 1, default 2).
        accelerate: "auto"; True requires the engine: the native path or the hybrid path (a
            ValueError saying why not); False: the generic path. loader.path says which ran:
            "native: <dataset> [<transforms>], ...", "hybrid: native [<prefix>] + python
            [<tail>], ...; not native: <blockers>" or "generic: <why not>".
        decode_on: where the native path decodes JPEGs: "auto", "cpu", "cpu+gpu" or "gpu".
        on_error: "raise" or "skip" (a bad sample replaced by the next readable one, counted).
        distributed: "auto", True or False; uneven: "pad", "drop" or "exact" (DDP ranks).
        seed: of the distributed permutation and the native augmentation (in state_dict()).
        dct_scaling: decode at a reduced DCT scale that covers the output (`exact`: old name).
        tail_on: where a hybrid pipeline's Python tail runs: "auto", "processes", "inline",
            "threads".
        trace: run a Dataset of the user's own class under the tracer (fastload.trace).

    Yields:
        What torch's DataLoader yields for the same arguments (same order, same values);
        tensors on `device`, floating ones in `dtype`, 4-D ones in `memory_format`.

    Epochs and resume (in full: fastload.resume's docstring): the first iteration is epoch
    0, every later `iter(loader)` the next one unless `set_epoch(e)` or `load_state_dict()`
    chose one. `state_dict()` is plain data counting the batches __next__ delivered; after
    `load_state_dict(sd)` the next iteration continues right after the last of them, and
    len(loader) stays the whole epoch's batch count, as torch's.

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
        dct_scaling: bool = True,
        exact: Optional[bool] = None,
        tail_on: str = "auto",
        trace: bool = True,
    ) -> None:
        # What the dataset is, asked once (fastload/adapters/): a webdataset pipeline whose
        # stages fastload maps runs as a map-style view of its shards, its batch size,
        # shuffle and drop_last coming along; a streaming dataset is split between the DDP
        # ranks, as a map-style one is.
        from fastload.adapters import adapter_for

        adapter = adapter_for(dataset)
        adopted = adapter.adopt(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                                on_error=on_error, accelerate=accelerate, distributed=distributed)
        if adopted is not None:
            dataset, batch_size, shuffle, drop_last = adopted
        dataset = adapter.for_ranks(dataset, distributed)
        # torch validates its own arguments first, with its own exceptions and messages.
        super().__init__(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
            pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device, in_order=in_order,
        )
        # The extras, checked once, in the order of the signature (fastload/loader_args.py).
        iterable = self._dataset_kind == _DatasetKind.Iterable
        args = check_loader_args(
            device=device, dtype=dtype, memory_format=memory_format, prefetch_to_device=prefetch_to_device,
            accelerate=accelerate, decode_on=decode_on, on_error=on_error, distributed=distributed, uneven=uneven,
            seed=seed, dct_scaling=dct_scaling, exact=exact, tail_on=tail_on, trace=trace, iterable=iterable,
            require_cuda_device=require_cuda_device)
        self._args = args
        # torch-style public attributes for each extra, as before the facade kept LoaderArgs.
        self.device, self.dtype, self.memory_format = args.device, args.dtype, args.memory_format
        self.prefetch_to_device, self.accelerate = args.prefetch_to_device, args.accelerate
        self.decode_on, self._errors, self.on_error = args.decode_on, args.errors, args.on_error
        self.distributed, self.uneven, self.seed = args.distributed, args.uneven, args.seed
        self.dct_scaling, self.tail_on, self.trace = args.dct_scaling, args.tail_on, args.trace

        self._user_dataset = dataset  # before torch's DataPipe serialisation wrapper
        self._datapipe = isinstance(dataset, (IterDataPipe, MapDataPipe))
        self._user_sampler = sampler is not None or batch_sampler is not None
        self._runner: Optional[Runner]
        order = choose_order(
            dataset, iterable=iterable, auto_collation=self._auto_collation, datapipe=self._datapipe,
            user_sampler=self._user_sampler, batch_size=self.batch_size, shuffle=shuffle, drop_last=drop_last,
            sampler=sampler, batch_sampler=batch_sampler, generator=generator, distributed=args.distributed,
            uneven=args.uneven, seed=args.seed)
        # What the path is chosen from, to choose it anew when the dataset changes between epochs.
        self._path_args = dict(sampler=sampler, batch_sampler=batch_sampler, collate_fn=collate_fn,
                               pin_memory=pin_memory)
        self._runner, self._path = self._choose_runner()
        self._basis = basis_of(dataset) if self._runner is not None else None

        # Epochs, resume, the current pass: one owner.
        self._cursor = Cursor(order, dataset, runner=self._runner, user_sampler=self._user_sampler,
                              persistent_workers=self.persistent_workers)
        self._stats = LoaderStats()
        self._inner: Optional[TorchDataLoader] = None
        self._transfer = TransferStage(self._stats)
        if self.device is not None and self.device.type != "cpu":
            self._transfer.device_transport(self.device)  # fails now, not at the first batch, if absent
        # A framework that rebuilds a loader over this dataset object (Accelerate's prepare,
        # skip_first_batches) builds a fastload loader with these extras (fastload/rebuild.py).
        offer(self)

    # -- public extras --------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Which path produces the batches and why, in one of three forms: "native: <what>"
        (the C++ engine makes every sample), "hybrid: native [<prefix>] + python [<tail>], ...;
        not native: <blockers>" (the engine runs the prefix, the Python tail runs per sample)
        or "generic: <reason>" (torch's DataLoader machinery)."""
        return self._path

    def stats(self, reset: bool = False) -> Stats:
        """Per-stage timings, throughput and data-stall fraction since creation (or the last
        reset); keys are documented in fastload.stats. `str()` of it is a readable report.

        Args:
            reset: start counting afresh after returning the numbers.
        """
        return self._stats.of_loader(self._path, self._runner, self.dataset, reset=reset)

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch of the next iteration (its shuffle and, under DDP, its split).

        A pending resume (load_state_dict) of the same epoch is kept; another epoch
        discards it. With a user's sampler or batch_sampler, forwards to its set_epoch.
        """
        self._cursor.set_epoch(epoch)

    def state_dict(self) -> dict:
        """Where the loader is: plain Python data for a checkpoint (see the class docstring).

        Returns:
            {"version": 2, "epoch": int, "batches_consumed": int, "order": dict or None,
             "native_seed": int or None (the native path's augmentation seed),
             "dataset": {"len": int, "keys": str or None} or None (see load_state_dict)}
        """
        return self._cursor.state_dict()

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
        self._cursor.load_state_dict(state_dict)

    def close(self) -> None:
        """Releases the native engine and persistent workers now rather than at exit."""
        if self._runner is not None:
            self._runner.close()
        self._inner = None
        self._transfer.clear()

    # -- torch's protocol -----------------------------------------------------------------
    def __len__(self) -> int:
        if self._order is not None:
            return self._cursor.epoch_batches()  # the whole epoch's, also while resuming
        return super().__len__()

    def __iter__(self) -> _LoaderIter:  # type: ignore[override]
        # torch's iterator draws its workers' base seed once per worker lifetime with
        # persistent workers; the native feed draws as it would (before the permutation).
        draw_base_seed = not (self.persistent_workers and self._cursor.passes > 0)
        self._renew_path()
        current = self._cursor.begin()
        self._stats.start_epoch()

        # The order draws later epochs' seeds from a resumed run's stream only while nobody
        # else touches the global RNG; its own draws here (the base seed; with workers, the
        # shuffle seed) do not count.
        order_draws = self._order if isinstance(self._order, Order) else None
        if order_draws is not None:
            order_draws.begin_global_draws()
        try:
            if self._runner is not None:
                if draw_base_seed:
                    # Drawing it as torch's iterator would keeps the permutation equal to torch's.
                    torch.empty((), dtype=torch.int64).random_(generator=self.generator)
                feed: Iterator[Tuple[Any, Any]] = self._native_feed(current.epoch)
            else:
                feed = self._generic_feed(current.epoch)
        finally:
            if order_draws is not None:
                order_draws.end_global_draws()
        torch_iter = feed._it if isinstance(feed, GenericFeed) else None
        feed = self._transfer.wrap(feed, device=self.device, dtype=self.dtype, memory_format=self.memory_format,
                                   ahead=self.prefetch_to_device)
        return _LoaderIter(self, current, feed, self.__len__, torch_iter=torch_iter)

    # -- internals ------------------------------------------------------------------------
    def _renew_path(self) -> None:
        """The path chosen anew where the runner no longer runs the dataset as it is at this
        iter() (fastload.loader_path.runner_holds says when, and what is renewed)."""
        if self._runner is None:
            return  # (the generic path's workers read the dataset themselves)
        keep = self.persistent_workers and self._cursor.passes > 0
        if runner_holds(self._runner, self._basis, self._user_dataset, keep=keep):
            return
        self._runner.close()
        self._runner, self._path = self._choose_runner()
        self._cursor.runner = self._runner
        self._basis = basis_of(self._user_dataset) if self._runner is not None else None

    def _choose_runner(self) -> Tuple[Optional[Runner], str]:
        """(the native runner or None, loader.path) for the dataset as it is now."""
        return choose_runner(self._user_dataset, self._args, batch_size=self.batch_size, num_workers=self.num_workers,
                             timeout=self.timeout, **self._path_args)

    @property
    def _order(self) -> Any:
        """fastload's order (fastload.sampling.order), or None where torch's applies."""
        return self._cursor.order

    def _native_feed(self, epoch: int) -> Iterator[Tuple[Any, Any]]:
        return native_feed(self._runner, self._cursor.batches(), epoch, self.prefetch_factor)

    def _generic_feed(self, epoch: int) -> GenericFeed:
        if isinstance(self._user_dataset, NativeDataset):
            # A native dataset on the generic path draws the same parameters as the native
            # path would (workers get this copy when their iterator starts; persistent
            # workers keep their first copy: give such loaders a seed per run instead, or
            # use the native path).
            self._user_dataset.set_epoch(epoch)
            if self.seed is not None:
                self._user_dataset.seed = self.seed
        self._inner = inner_loader(self._inner_args(), self._inner, self._cursor.batch_sampler())
        return GenericFeed(iter(self._inner), self._stats)

    def _inner_args(self) -> InnerArgs:
        """The generic path's arguments, read now: torch lets some change between iterations."""
        return InnerArgs(
            dataset=self.dataset, user_dataset=self._user_dataset, datapipe=self._datapipe,
            iterable=self._dataset_kind == _DatasetKind.Iterable, errors=self._errors,
            auto_collation=self._auto_collation, has_order=self._order is not None,
            cuda=self.device is not None and self.device.type == "cuda",
            iterable_len_called=self._IterableDataset_len_called, batch_size=self.batch_size,
            drop_last=self.drop_last, sampler=self.sampler, batch_sampler=self.batch_sampler,
            collate_fn=self.collate_fn, num_workers=self.num_workers, pin_memory=self.pin_memory,
            timeout=self.timeout, worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context, generator=self.generator,
            prefetch_factor=self.prefetch_factor, persistent_workers=self.persistent_workers,
            pin_memory_device=self.pin_memory_device, in_order=self.in_order)
