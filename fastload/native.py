"""The native path: fastload datasets (and torchvision ImageFolders with known
transforms) run on the C++ batch engine, one call per batch, GIL released.

Python decides the order, the error policy and the labels; the engine reads, decodes
and augments every image of a batch straight into its slot of the output tensor.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from fastload import _ext
from fastload.augment.plan import Plan, UnsupportedPipeline, build_plan
from fastload.errors import DecodeError
from fastload.source.index import SampleIndex

# Per-sample status codes of csrc/engine/batch.cpp.
OK, DECODE_ERROR, NOT_JPEG, READ_ERROR = 0, 1, 2, 3
ON_ERROR = ("raise", "skip")
# How many replacement candidates on_error="skip" tries for one bad sample before
# concluding that the dataset is mostly unreadable.
MAX_SKIP_ATTEMPTS = 64


class NativeRunner:
    """Produces whole collated batches `[images, labels]` from sample indices.

    submit() queues a batch on the engine's thread pool and returns a ticket at once;
    result() waits for it (GIL released). images: [B, C, H, W] of the plan's dtype (and
    memory format), pinned when asked; labels: int64 [B]. Failed samples follow on_error:
    "raise" raises fastload.DecodeError naming the sample and file; "skip" replaces the
    sample with the next readable one (in dataset order) so the batch keeps its size, and
    counts it in stats().

    Args:
        index: where the samples' bytes are.
        plan: the fused pipeline.
        num_threads: engine threads.
        pin_memory: allocate outputs in pinned (page-locked) memory.
        memory_format: torch.contiguous_format or torch.channels_last.
        on_error: "raise" or "skip".
        description: what runs, for loader.path.
    """

    def __init__(self, index: SampleIndex, plan: Plan, *, num_threads: int = 1, pin_memory: bool = False,
                 memory_format: Optional[torch.memory_format] = None, on_error: str = "raise",
                 description: str = "native"):
        if on_error not in ON_ERROR:
            raise ValueError(f"fastload: on_error must be one of {ON_ERROR}, got {on_error!r}")
        module = _ext.require_ops()
        self.index = index
        self.plan = plan
        self.on_error = on_error
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.memory_format = memory_format or torch.contiguous_format
        self.description = description
        self._engine = module.BatchEngine(max(1, int(num_threads)))
        self._engine.set_index(
            torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
            torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes),
        )
        self._engine.set_plan(plan.config())
        self._labels = torch.from_numpy(np.ascontiguousarray(index.labels))
        self._pending: Dict[int, Tuple[torch.Tensor, torch.Tensor, int, float]] = {}
        self._lock = threading.Lock()
        self._stats = {"images": 0, "batches": 0, "skipped": 0, "pil_fallback": 0, "engine_seconds": 0.0,
                       "wait_seconds": 0.0}

    @property
    def num_threads(self) -> int:
        return self._engine.num_threads

    def _allocate(self, batch: int) -> torch.Tensor:
        channels = self.plan.channels
        height, width = self.plan.out_size
        return torch.empty((batch, channels, height, width), dtype=self.plan.dtype,
                           memory_format=self.memory_format, pin_memory=self.pin_memory)

    def submit(self, indices: List[int], epoch: int) -> int:
        samples = torch.as_tensor(indices, dtype=torch.int64)
        out = self._allocate(len(samples))
        ticket = self._engine.submit(samples, out, epoch)
        with self._lock:
            self._pending[ticket] = (samples, out, epoch, time.perf_counter())
        return ticket

    def result(self, ticket: int) -> List[torch.Tensor]:
        with self._lock:
            samples, out, epoch, submitted = self._pending.pop(ticket)
        started = time.perf_counter()
        with torch.profiler.record_function("fastload.native_batch"):
            status, messages = self._engine.wait(ticket)
        finished = time.perf_counter()
        samples = samples.clone()
        failed: set = set()  # distinct unreadable samples met while filling this batch
        for slot in torch.nonzero(status != OK).flatten().tolist():
            self._repair(slot, int(samples[slot]), int(status[slot]), messages[slot], samples, out, epoch, failed)
        stats = self._stats
        stats["skipped"] += len(failed)
        stats["images"] += len(samples)
        stats["batches"] += 1
        stats["engine_seconds"] += finished - submitted
        stats["wait_seconds"] += finished - started
        return [out, self._labels[samples]]

    def _repair(self, slot: int, sample: int, status: int, message: str, samples: torch.Tensor,
                out: torch.Tensor, epoch: int, failed: set) -> None:
        """Fills one slot that the engine could not: PIL for other formats, else the
        error policy."""
        candidate = sample
        for _ in range(MAX_SKIP_ATTEMPTS):
            if status == NOT_JPEG:
                status, message = self._decode_with_pil(slot, candidate, out, epoch)
                if status == OK:
                    samples[slot] = candidate
                    return
            if self.on_error == "raise":
                raise DecodeError(message, candidate, self.index.source(candidate))
            failed.add(candidate)
            candidate = (candidate + 1) % len(self.index)
            status, message = self._run_one(slot, candidate, out, epoch)
            if status == OK:
                samples[slot] = candidate
                return
        raise DecodeError(f"{MAX_SKIP_ATTEMPTS} consecutive samples failed to decode; last: {message}",
                          candidate, self.index.source(candidate))

    def _run_one(self, slot: int, sample: int, out: torch.Tensor, epoch: int,
                 predecoded: Optional[torch.Tensor] = None) -> Tuple[int, str]:
        extra = {0: predecoded} if predecoded is not None else {}
        ticket = self._engine.submit(torch.tensor([sample]), out[slot:slot + 1], epoch, extra)
        status, messages = self._engine.wait(ticket)
        return int(status[0]), messages[0]

    def _decode_with_pil(self, slot: int, sample: int, out: torch.Tensor, epoch: int) -> Tuple[int, str]:
        from fastload.decode.pil import decode_to_tensor

        try:
            image = decode_to_tensor(self.index.read(sample), index=sample, source=self.index.source(sample),
                                     channels=self.plan.channels, max_pixels=self.plan.max_pixels)
        except (DecodeError, OSError) as error:
            return DECODE_ERROR, getattr(error, "reason", str(error))
        self._stats["pil_fallback"] += 1
        return self._run_one(slot, sample, out, epoch, predecoded=image)

    def stats(self) -> Dict[str, Any]:
        """Counters: images, batches, skipped, pil_fallback; engine and wait seconds."""
        return dict(self._stats, threads=self.num_threads)

    def close(self) -> None:
        self._engine.close()

    def __del__(self):
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()


def _default_collate(collate_fn: Any) -> bool:
    from torch.utils.data import default_collate

    return collate_fn is None or collate_fn is default_collate


def native_pipeline(dataset: Any, *, dtype: Optional[torch.dtype], seed: int) -> Tuple[SampleIndex, Plan, str]:
    """(index, plan, description) for a dataset that runs natively, else UnsupportedPipeline."""
    from fastload.source.base import NativeDataset

    if isinstance(dataset, NativeDataset):
        index, specs, origin = dataset.index, dataset.ops, type(dataset).__name__
    else:
        from fastload.compat.torchvision import NotConvertible, convert_dataset

        try:
            index, specs = convert_dataset(dataset)
        except NotConvertible as error:
            raise UnsupportedPipeline(str(error)) from None
        origin = f"torchvision {type(dataset).__name__}"
    plan = build_plan(specs, seed=seed)
    if dtype is not None and plan.dtype.is_floating_point:
        plan.dtype = dtype  # e.g. bfloat16 for AMP, written directly by the kernel
    return index, plan, f"native: {origin} [{plan.description}]"


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
    seed: Optional[int],
    device: Optional[torch.device] = None,
) -> Tuple[Optional[NativeRunner], str]:
    """(runner, reason): a runner when the dataset can run natively, else None and why.

    The reason is what `loader.path` shows, e.g. "native: ImageFolder [RandomResizedCrop
    -> RandomHorizontalFlip -> Normalize]" or "generic: transform Grayscale() has no
    native equivalent".
    """
    if accelerate is False:
        return None, "generic: accelerate=False"
    if _ext.native_disabled_by_env():
        return None, "generic: FASTLOAD_NATIVE=0"
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return None, "generic: IterableDataset"
    if batch_size is None:
        return None, "generic: batch_size=None (no automatic batching)"
    if not _default_collate(collate_fn):
        return None, "generic: custom collate_fn"
    try:
        index, plan, description = native_pipeline(
            dataset, dtype=dtype, seed=0 if seed is None else int(seed))
    except UnsupportedPipeline as error:
        return None, f"generic: {error}"
    if not _ext.has_ops():
        return None, "generic: fastload._C is not built (make build)"
    runner = NativeRunner(index, plan, num_threads=max(1, num_workers), pin_memory=pin_memory,
                          memory_format=memory_format, on_error=on_error, description=description)
    return runner, description
