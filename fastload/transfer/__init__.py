"""transfer: host batches to the device: pinned pool, side-stream copies, events.

Stage: the last one. Input: a collated host batch (any nesting of tensors). Output: the
same structure on the loader's device, converted to its dtype/memory format, safe to use
on the consumer's current stream. See README.md for the design and prefetch.py for the
mechanism. Nothing here imports CUDA state until a CUDA device is asked for.

Example:
    >>> import torch
    >>> from fastload.transfer import make_transport
    >>> make_transport("cpu").device
    device(type='cpu')
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import torch

from fastload.transfer.pool import PinnedPool
from fastload.transfer.prefetch import DevicePrefetcher, Transport, make_convert
from fastload.transfer.stage import HostConvert, TransferStage
from fastload.transfer.tree import tree_map, tree_tensors

__all__ = ["DevicePrefetcher", "HostConvert", "PinnedPool", "SyncTransport", "TransferStage", "Transport",
           "make_convert", "make_transport", "tree_map", "tree_tensors"]


class SyncTransport:
    """A Transport for devices without streams here (CPU, or another accelerator):
    `tensor.to(device)` in the caller's thread; events are None and always complete.
    Tensors are never staged in pinned memory (is_pinned says True)."""

    def __init__(self, device: Any):
        self.device = torch.device(device)

    def alloc_pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return True

    def copy(self, batch: Any, convert: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> Tuple[Any, Any]:
        def move(t: torch.Tensor) -> torch.Tensor:
            out = t.to(self.device)
            return convert(out) if convert is not None else out

        return tree_map(move, batch), None

    def wait(self, event: Any) -> None:
        pass

    def record_stream(self, tensor: torch.Tensor) -> None:
        pass

    def query(self, event: Any) -> bool:
        return True

    def synchronize(self, event: Any) -> None:
        pass

    def elapsed_s(self, event: Any) -> Optional[float]:
        return None


def make_transport(device: Any) -> Transport:
    """The transport for `device`: CudaTransport for CUDA, SyncTransport otherwise."""
    device = torch.device(device)
    if device.type == "cuda":
        from fastload.transfer.cuda import CudaTransport

        return CudaTransport(device)
    return SyncTransport(device)
