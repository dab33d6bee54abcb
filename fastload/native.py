"""The native path: fastload datasets (and torchvision ImageFolders with known transforms)
run on the C++ batch engine, one call per batch, GIL released.

THIS FILE IS AN API STUB (the contract between loader.py and the native pipeline).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch


class NativeRunner:
    """Produces whole collated batches for a loader from sample indices.

    submit() queues a batch on the engine's thread pool and returns at once; result()
    waits for it (GIL released) and returns the collated batch `(images, labels)`:
    images [B, C, H, W] of the loader's dtype/memory format, pinned when requested;
    labels int64 [B]. Failed samples follow on_error ("raise": DecodeError naming the
    sample and file; "skip": replaced by the next good sample, counted in stats()).
    """

    def submit(self, indices: List[int], epoch: int) -> int:
        raise NotImplementedError

    def result(self, ticket: int) -> Any:
        raise NotImplementedError

    def stats(self) -> dict:
        """Counters: decoded, skipped, pil_fallback, per-stage seconds."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def select_path(
    dataset: Any,
    *,
    batch_size: Optional[int],
    collate_fn: Any,
    num_workers: int,
    pin_memory: bool,
    accelerate: Any,
    dtype: Optional[torch.dtype],
    memory_format: Optional[torch.memory_format],
    on_error: str,
    seed: int,
    device: Optional[torch.device],
) -> Tuple[Optional[NativeRunner], str]:
    """(runner, reason): a runner when the dataset can run natively, else None and why.

    The reason is shown by `loader.path`, e.g. "native: fastload.ImageFolder" or
    "generic: transform Grayscale() has no native equivalent".
    """
    return None, "generic: native pipeline not available yet"
