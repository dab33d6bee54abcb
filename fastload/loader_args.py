"""fastload.DataLoader's extras, checked once: `check_loader_args` -> `LoaderArgs`.

torch's own arguments are checked by torch's DataLoader (same exceptions, same messages);
the keyword-only extras are checked here, in the order of the signature, each with an
error naming the argument, what came and what to pass. The result is one frozen
`LoaderArgs`, which the loader keeps and reads (the facade holds no checks of its own).

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
    """The extras of fastload.DataLoader, checked (see its docstring for each meaning).

    Attributes:
        device: None or the torch.device batches arrive on.
        dtype, memory_format: the conversion of floating / 4-D tensors, or None.
        prefetch_to_device: batches copied to the device ahead of the loop (>= 1).
        accelerate: "auto", True or False.
        decode_on: "auto", "cpu", "cpu+gpu" or "gpu".
        errors: the on_error policy (fastload.errors.ErrorPolicy); `on_error` its mode.
        distributed: "auto", True or False; uneven: "pad", "drop" or "exact".
        seed: None or an int.
        dct_scaling: decode at a reduced DCT scale when it covers the output.
        tail_on: "auto", "processes", "inline" or "threads".
        trace: run a Dataset of the user's own class under the tracer (fastload.trace).
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
