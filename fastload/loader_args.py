"""fastload.DataLoader's extras, checked once: `check_loader_args` -> `LoaderArgs`.

torch's own arguments are checked by torch's DataLoader (same exceptions, same messages);
the keyword-only extras are checked here, in the order of the signature, each with an
error naming the argument, what came and what to pass. The result is one frozen
`LoaderArgs`, which the loader keeps and reads (the facade holds no checks of its own).
What each extra means is written once, in `LoaderArgs`' docstring (fastload.DataLoader's
lists them and points there).

Example:
    >>> import torch
    >>> args = check_loader_args(dtype=torch.bfloat16, seed=3)
    >>> args.dtype, args.seed, args.on_error, args.device
    (torch.bfloat16, 3, 'raise', None)
    >>> check_loader_args(prefetch_to_device=0)
    Traceback (most recent call last):
    ...
    ValueError: fastload.DataLoader: expected prefetch_to_device >= 1 (an int), got 0. ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch

from fastload.errors import ErrorPolicy
from fastload.native.hybrid import check_tail_on
from fastload.native.select import check_decode_on
from fastload.sampling.distributed import check_distributed, check_uneven

_ACCELERATE = ("auto", True, False)
_PREFIX = "fastload.DataLoader"


@dataclass(frozen=True)
class LoaderArgs:
    """The keyword-only extras of fastload.DataLoader, checked: what each one means.

    Attributes:
        device: where batches arrive (None or "cpu": like torch, on the CPU; "cuda[:N]":
            every tensor of the batch, whatever its nesting in dicts, lists, tuples,
            namedtuples or dataclasses, is staged in pinned memory, copied asynchronously on
            a side stream, and made safe to use on the caller's current stream). Checked
            into None or a torch.device.
        dtype: floating tensors are converted to it on the device (e.g. torch.bfloat16 for
            AMP); integer tensors (labels, uint8 images) keep their dtype, and so do
            detection boxes (torchvision's BoundingBoxes: pixel coordinates).
        memory_format: e.g. torch.channels_last, applied to 4-D tensors on the device.
        prefetch_to_device: batches whose device copies are issued before the loop asks
            for them (>= 1; device memory holds that many plus the one in use).
        accelerate: "auto" runs a dataset on the C++ engine when it can, else on the generic
            path; True requires the engine: the native path or the hybrid path (a
            ValueError, naming the reason, where the loader would take the generic path);
            False always uses the generic path. loader.path says which ran, in one of three
            forms: "native: <dataset> [<transforms>], ..." (the engine makes every sample),
            "hybrid: native [<prefix>] + python [<tail>], ...; not native: <blockers>" (the
            engine runs the native prefix, the Python tail runs per sample on its output), or
            "generic: <why not>" (torch's DataLoader machinery).
        decode_on: where the native path decodes JPEGs: "cpu", "cpu+gpu" (CPU decodes the
            crop window, the GPU resizes and normalises), "gpu" (nvJPEG) or "auto" (by what
            was built and the device; loader.path says which). Ignored on the generic path.
        errors: the on_error policy (fastload.errors.ErrorPolicy); `on_error` is its mode:
            "raise" (torch's behaviour) or "skip": a sample whose read raises is
            replaced by the next readable sample in dataset order, on every path (batch
            sizes, batch counts and resume positions unchanged), counted in
            stats()["skipped"], listed in stats()["skipped_samples"] and warned about once
            per sample (docs/errors.md); map-style datasets only.
        distributed: "auto" (shard across ranks when torch.distributed is initialised or
            torchrun's RANK/WORLD_SIZE are set), True (require it) or False.
        uneven: when the dataset does not split evenly across ranks: "pad", "drop" or
            "exact" (see fastload.sampling).
        seed: base seed of the distributed permutation (None: 0, so that every rank
            agrees) and of the native path's random augmentation (None: a fastload dataset's
            own `seed`; for other datasets drawn from torch's global generator at
            construction, without advancing it, so torch.manual_seed makes it
            reproducible; saved in state_dict()).
        dct_scaling: native path only: decode the crop window at the largest 1/2, 1/4, 1/8
            DCT scale that still covers the output (default True; much faster on large
            images). False never decodes at a reduced scale, so outputs follow a full decode
            to within rounding. The loader also takes `exact`, its old name (exact=True is
            dct_scaling=False); given with a dct_scaling it disagrees with, a ValueError.
        tail_on: hybrid path only (a native prefix, then Python transforms): where the
            Python tail runs. "auto" (the default) is where torch's DataLoader runs a
            dataset's Python: "processes" with num_workers >= 1, "inline" without;
            "processes": num_workers worker processes making whole batches (prefix and
            tail; the training loop's thread is free, a heavy tail uses every core);
            "inline": the consumer thread runs each sample's tail while num_workers engine
            threads decode (the least CPU; a tail of a few ms per sample then caps the
            rate); "threads": a pool of num_workers Python threads (random draws not
            reproducible). Every mode but "threads" draws the same per-sample seeds.
        trace: a dataset of the user's own class is learnt by running its own
            __getitem__ under a tracer (fastload.trace): a few indexes when the
            loader is built, each other one just before its batch is submitted. False
            (or FASTLOAD_TRACE=0 in the environment) turns the tracer off: such a
            dataset runs on the generic path.
    """

    device: Optional[torch.device]
    dtype: Optional[torch.dtype]
    memory_format: Optional[torch.memory_format]
    prefetch_to_device: int
    accelerate: Union[str, bool]
    decode_on: str
    errors: ErrorPolicy
    distributed: Union[str, bool]
    uneven: str
    seed: Optional[int]
    dct_scaling: bool
    tail_on: str
    trace: bool

    @property
    def on_error(self) -> str:
        return self.errors.mode


def _no_device_check(device: torch.device) -> None:
    """The default of check_loader_args' `require_cuda_device`: the device is not probed."""


def check_loader_args(*, device: Any = None, dtype: Any = None, memory_format: Any = None,
                      prefetch_to_device: Any = 2, accelerate: Any = "auto", decode_on: Any = "auto",
                      on_error: Any = "raise", distributed: Any = "auto", uneven: Any = "pad", seed: Any = None,
                      dct_scaling: Any = True, exact: Any = None, tail_on: Any = "auto", trace: Any = True,
                      iterable: bool = False,
                      require_cuda_device: Callable[[torch.device], None] = _no_device_check) -> LoaderArgs:
    """The extras checked, in the order of fastload.DataLoader's signature.

    Args:
        device, dtype, ...: as fastload.DataLoader takes them (`exact` is the old name of
            `not dct_scaling`).
        iterable: the dataset is an IterableDataset (on_error="skip" is refused there).
        require_cuda_device: called with a CUDA device, to refuse one that is absent before
            anything is built for it (the loader passes its check of the machine).

    Raises:
        ValueError, TypeError: naming the argument, what came, and what to pass.
    """
    checked_device = _check_device(device, require_cuda_device)
    checked_dtype = _check_dtype(dtype)
    checked_format = _check_memory_format(memory_format)
    ahead = _check_prefetch_to_device(prefetch_to_device)
    checked_accelerate = _check_accelerate(accelerate)
    checked_decode_on = check_decode_on(decode_on)
    errors = ErrorPolicy(on_error, owner=_PREFIX)
    checked_distributed = check_distributed(distributed)
    checked_uneven = check_uneven(uneven)
    checked_seed = _check_seed(seed)
    checked_dct_scaling = _check_dct_scaling(dct_scaling, exact)
    checked_tail_on = check_tail_on(tail_on)
    if not isinstance(trace, bool):
        raise TypeError(f"{_PREFIX}: expected trace=True or False, got {trace!r}.")
    if errors.skips and iterable:
        raise ValueError(
            f"{_PREFIX}: expected on_error='raise' with an IterableDataset, got on_error='skip'. "
            "An iterator cannot go on after it raised; skip bad samples inside the dataset's __iter__."
        )
    return LoaderArgs(checked_device, checked_dtype, checked_format, ahead, checked_accelerate, checked_decode_on,
                      errors, checked_distributed, checked_uneven, checked_seed, checked_dct_scaling, checked_tail_on,
                      trace)


def _check_prefetch_to_device(prefetch_to_device: Any) -> int:
    if not isinstance(prefetch_to_device, int) or isinstance(prefetch_to_device, bool) or prefetch_to_device < 1:
        raise ValueError(f"{_PREFIX}: expected prefetch_to_device >= 1 (an int), got {prefetch_to_device!r}. "
                         "It is the number of batches copied to the device ahead of the loop; 2 is usual.")
    return prefetch_to_device


def _check_accelerate(accelerate: Any) -> Union[str, bool]:
    if accelerate not in _ACCELERATE or (accelerate is not True and accelerate is not False
                                         and not isinstance(accelerate, str)):
        raise ValueError(f"{_PREFIX}: expected accelerate='auto', True or False, got {accelerate!r}.")
    return accelerate


def _check_seed(seed: Any) -> Optional[int]:
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"{_PREFIX}: expected seed=None or an int, got {seed!r}.")
    return seed


def _check_dct_scaling(dct_scaling: Any, exact: Any) -> bool:
    """dct_scaling, or the inverse of its old name `exact` when that is given. The default
    dct_scaling=True cannot be told from an explicit one, so there exact decides."""
    if exact is None:
        return bool(dct_scaling)
    if dct_scaling is not True and bool(dct_scaling) == bool(exact):
        raise ValueError(f"{_PREFIX}: expected dct_scaling and exact (its old name: exact=True is "
                         f"dct_scaling=False) to agree, got dct_scaling={dct_scaling!r} and exact={exact!r}. "
                         "Pass dct_scaling only.")
    return not exact


def _check_device(device: Any, require_cuda_device: Callable[[torch.device], None]) -> Optional[torch.device]:
    if device is None:
        return None
    try:
        checked = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{_PREFIX}: expected device=None, 'cpu', 'cuda' or 'cuda:N' (or a torch.device), "
                         f"got {device!r}.") from None
    if checked.type == "cuda":
        require_cuda_device(checked)
    return checked


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
