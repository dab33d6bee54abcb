"""Which order and which path a DataLoader takes: chosen when it is built, the path again when the dataset changes.

`choose_order` gives fastload's order (fastload.sampling.order) for a map-style dataset
with automatic batching, or None where torch orders the batches (an IterableDataset,
batch_size=None, a DataPipe, no __len__). `choose_runner` gives the native runner and
`loader.path` (fastload.native.select.select_path with the loader's checked arguments),
or raises where accelerate=True and the dataset would take the generic path. `basis_of`
is what a converted torchvision dataset's runner was made from, read again at each
iter() (fastload.adapters.basis); a traced dataset renews its own trace instead;
`runner_holds` says, at each iter(), whether the runner still runs the dataset.

Example:
    >>> import torch
    >>> from fastload.loader_args import check_loader_args
    >>> data = torch.utils.data.TensorDataset(torch.arange(6))
    >>> args = check_loader_args(device=None, dtype=None, memory_format=None, prefetch_to_device=2,
    ...     accelerate="auto", decode_on="auto", on_error="raise", distributed=False, uneven="pad", seed=None,
    ...     dct_scaling=True, exact=None, tail_on="auto", trace=True, iterable=False,
    ...     require_cuda_device=require_cuda_device)
    >>> choose_runner(data, args, batch_size=4, num_workers=0, timeout=0, sampler=None, batch_sampler=None,
    ...               collate_fn=None, pin_memory=False)[1][:8]
    'generic:'
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional, Tuple

import torch

from fastload.datasets.base import NativeDataset
from fastload.native.protocol import Runner
from fastload.native.select import order_left_to_torch, select_path
from fastload.sampling.order import make_order

_PREFIX = "fastload.DataLoader"


def choose_order(dataset: Any, *, iterable: bool, auto_collation: bool, datapipe: bool, user_sampler: bool,
                 batch_size: Optional[int], distributed: Any, sampler: Any, batch_sampler: Any,
                 **order_args: Any) -> Any:
    """fastload's order (fastload.sampling.order.make_order) for map-style datasets with
    automatic batching, or None where the order is left to torch; a ValueError for
    distributed=True where torch orders the batches."""
    order = _order(dataset, iterable=iterable, auto_collation=auto_collation, datapipe=datapipe,
                   user_sampler=user_sampler, batch_size=batch_size, distributed=distributed, sampler=sampler,
                   batch_sampler=batch_sampler, **order_args)
    if distributed is True and order is None and not user_sampler:
        reason = order_left_to_torch(dataset, batch_size=batch_size, sampler=sampler, batch_sampler=batch_sampler)
        raise ValueError(
            f"{_PREFIX}: expected a map-style dataset with __len__ and automatic batching for "
            f"distributed=True, got {reason.split(': ', 1)[1]}. Shard such data yourself (e.g. "
            "by rank in the dataset's __iter__), or pass distributed='auto' or False.")
    return order


def _order(dataset: Any, *, iterable: bool, auto_collation: bool, datapipe: bool, user_sampler: bool,
           batch_size: Optional[int], **order_args: Any) -> Any:
    if iterable or not auto_collation or datapipe:
        return None
    try:
        dataset_len: Optional[int] = len(dataset)
    except TypeError:
        dataset_len = None
    if dataset_len is None and not user_sampler:
        return None
    # Without __len__ only a user's sampler can order the dataset; the length then only
    # labels resume states.
    order_args["shuffle"] = bool(order_args["shuffle"])
    return make_order(dataset_len=dataset_len or 0, batch_size=batch_size if batch_size is not None else 1,
                      **order_args)


def choose_runner(dataset: Any, args: Any, *, batch_size: Optional[int], num_workers: int, timeout: float,
                  sampler: Any, batch_sampler: Any, collate_fn: Any, pin_memory: bool) -> Tuple[Optional[Runner], str]:
    """(the native runner or None, loader.path) for `dataset` and the loader's checked
    extras `args` (fastload.loader_args.LoaderArgs): native when the dataset can run on the
    C++ engine (accelerate=True: a ValueError where it cannot)."""
    accelerate, device = args.accelerate, args.device
    with contextlib.nullcontext() if args.trace else _tracer_off():
        runner, reason = select_path(
            dataset, batch_size=batch_size, sampler=sampler, batch_sampler=batch_sampler,
            collate_fn=collate_fn, num_workers=num_workers,
            # Batches bound for a GPU are produced in pinned memory: no staging copy.
            pin_memory=pin_memory or (device is not None and device.type == "cuda"),
            accelerate=accelerate, dtype=args.dtype, memory_format=args.memory_format, on_error=args.on_error,
            seed=args.seed, device=device, decode_on=args.decode_on, dct_scaling=args.dct_scaling,
            tail_on=args.tail_on, timeout=timeout)
    if accelerate is True and runner is None:
        # True means "not the generic path": the native path, or the hybrid one (a native
        # prefix, then a Python tail), whose loader.path names its Python part.
        raise ValueError(
            f"{_PREFIX}: expected a dataset the native pipeline can run (accelerate=True: the native or hybrid "
            f"path), got {reason!r}. Pass accelerate='auto' to fall back to the generic path."
        )
    return runner, reason


def basis_of(dataset: Any) -> Any:
    """What a converted torchvision dataset's native path was made from (None: nothing the
    loader reads again, e.g. a fastload dataset, or a traced one, which renews itself)."""
    if isinstance(dataset, NativeDataset):
        return None
    from fastload.adapters import basis

    return basis(dataset)


def runner_holds(runner: Runner, basis: Any, dataset: Any, *, keep: bool) -> bool:
    """Whether `runner` still runs `dataset` as it is at this iter(), as torch's DataLoader
    sees it (False: the loader chooses its path anew). A traced dataset is traced again for
    the epoch (LazyTrace.renew: probes undone, every served index traced as the epoch
    reaches it); a torchvision dataset's transform, its parameters, samples and length are
    read again and compared with `basis` (basis_of at the path's choice). The path no
    longer holds when the dataset changed what it is made from (another transform or
    parameters, another length, another sample structure). Where it holds, a hybrid tail's
    worker processes are forked anew (copies of the transforms as they are now). With
    `keep` (persistent workers after the first pass) torch's workers keep the dataset of
    the first iter(): so does the trace, unless the length changed, and so do the tail's
    workers."""
    renew = getattr(runner, "renew", None)
    if renew is not None:
        holds = renew(keep=keep)
    else:
        holds = keep or basis is None or basis == basis_of(dataset)
    if holds:
        refresh = getattr(runner, "refresh_workers", None)  # (a hybrid tail in worker processes)
        if refresh is not None and not keep:
            refresh()
    return holds


def _tracer_off() -> Any:
    """The tracer off while the path is chosen (trace=False); its module loads only then,
    or when a dataset is traced."""
    from fastload.trace import disabled

    return disabled()


def require_cuda_device(device: torch.device) -> None:
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
