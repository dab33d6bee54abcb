"""CudaTransport: side stream, events, pinned allocation on one CUDA device.

Imported only when a loader is given a CUDA device, so `import fastload` does not touch
CUDA. Every call runs under a device guard for the loader's device; the copies and the
dtype/memory-format conversion run on a stream of their own so they overlap the training
step's kernels on the consumer's stream.

Example (needs a GPU):
    >>> t = CudaTransport("cuda")                                     # doctest: +SKIP
    >>> out, ev = t.copy(torch.ones(4).pin_memory(), None); t.wait(ev)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import torch

from fastload.transfer.tree import tree_map, tree_tensors


class _CopyEvents:
    """The events around one batch's copies: `end` orders the consumer after them,
    `start`/`end` (timing enabled) give the device time of the copy."""

    __slots__ = ("start", "end")

    def __init__(self, start: torch.cuda.Event, end: torch.cuda.Event):
        self.start, self.end = start, end


class CudaTransport:
    """The real Transport (see prefetch.Transport) for one CUDA device.

    Args:
        device: a CUDA device ("cuda", "cuda:1", torch.device); "cuda" means the current
            device at construction.
    """

    def __init__(self, device: Any):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"fastload.CudaTransport: expected a CUDA device, got {device}.")
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"fastload.DataLoader: expected an available CUDA device for device={str(device)!r}, "
                "got torch.cuda.is_available() == False. Pass device=None (batches stay on the "
                "CPU) or run on a machine with a GPU and a CUDA build of torch."
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device=device)

    def alloc_pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return tensor.is_pinned()

    def copy(self, batch: Any, convert: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> Tuple[Any, Any]:
        def move(t: torch.Tensor) -> torch.Tensor:
            out = t.to(self.device, non_blocking=True)
            return convert(out) if convert is not None else out

        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            if any(t.device == self.device for t in tree_tensors(batch)):
                # Tensors made on the device (the native GPU paths) were produced on the
                # current stream: convert them only once it got there.
                self.stream.wait_stream(torch.cuda.current_stream(self.device))
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            out = tree_map(move, batch)
            end.record(self.stream)
        return out, _CopyEvents(start, end)

    def wait(self, event: _CopyEvents) -> None:
        torch.cuda.current_stream(self.device).wait_event(event.end)

    def record_stream(self, tensor: torch.Tensor) -> None:
        if tensor.device == self.device:
            tensor.record_stream(torch.cuda.current_stream(self.device))

    def query(self, event: _CopyEvents) -> bool:
        return event.end.query()

    def synchronize(self, event: _CopyEvents) -> None:
        event.end.synchronize()

    def elapsed_s(self, event: _CopyEvents) -> Optional[float]:
        return event.start.elapsed_time(event.end) / 1e3
