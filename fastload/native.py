"""The native path: fastload datasets (and torchvision ImageFolders with known
transforms) run on the C++ batch engine, one call per batch, GIL released.

Python decides the order, the error policy and the labels; the engine reads, decodes
and augments every image of a batch straight into its slot of the output tensor.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
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
OK, DECODE_ERROR, NOT_JPEG, READ_ERROR, BAD_GEOMETRY = 0, 1, 2, 3, 4  # BAD_GEOMETRY: no pixels to sample
ON_ERROR = ("raise", "skip")
# Where decoding and augmenting run:
#   "cpu":     the engine decodes and augments into the (pinned) batch; uint8 or float
#              crosses PCIe as the plan says.
#   "cpu+gpu": the engine decodes the DCT-scaled crop window to uint8; only those bytes
#              cross PCIe; the device resizes, flips, normalises and casts.
#   "gpu":     nvJPEG decodes whole images on the device (the CPU decodes what it
#              rejects), the device does the rest.
DECODE_ON = ("auto", "cpu", "cpu+gpu", "gpu")
# How many replacement candidates on_error="skip" tries for one bad sample before
# concluding that the dataset is mostly unreadable.
MAX_SKIP_ATTEMPTS = 64


class BatchBuffers:
    """Reuses the memory of pageable batch tensors once nobody holds them any more.

    A 128x3x224x224 float32 batch is 77 MB: allocating it afresh costs its page faults on
    every batch, about a fifth of the native path's CPU time. Buffers are numpy arrays;
    a batch is a view of one, and every tensor, view or storage made from it holds one
    reference to the array, so the array is free exactly when its refcount falls back to
    the pool's own. (Pinned batches come from torch's caching host allocator instead.)

    Args:
        capacity: most buffers kept; beyond it batches are plain allocations.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._buffers: List[np.ndarray] = []

    def take(self, shape: Tuple[int, ...], dtype: torch.dtype, memory_format: torch.memory_format) -> torch.Tensor:
        strides = torch.empty(shape, dtype=dtype, memory_format=memory_format, device="meta").stride()
        nbytes = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
        for buffer in self._buffers:
            # Free: referenced by this list, `buffer` and getrefcount's argument only.
            if buffer.nbytes == nbytes and sys.getrefcount(buffer) <= 3:
                return self._view(buffer, shape, strides, dtype)
        if len(self._buffers) >= self.capacity or nbytes == 0:
            return torch.empty(shape, dtype=dtype, memory_format=memory_format)
        buffer = np.empty(nbytes, dtype=np.uint8)
        self._buffers.append(buffer)
        return self._view(buffer, shape, strides, dtype)

    @staticmethod
    def _view(buffer: np.ndarray, shape, strides, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(buffer).view(dtype).as_strided(shape, strides)

    def clear(self) -> None:
        self._buffers.clear()


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
        decode_on: "cpu", "cpu+gpu" or "gpu" (see DECODE_ON); the last two produce
            batches on `device`.
        device: where "cpu+gpu" and "gpu" batches are produced.
        description: what runs, for loader.path.
    """

    def __init__(self, index: SampleIndex, plan: Plan, *, num_threads: int = 1, pin_memory: bool = False,
                 memory_format: Optional[torch.memory_format] = None, on_error: str = "raise",
                 decode_on: str = "cpu", device: Optional[torch.device] = None, description: str = "native"):
        if on_error not in ON_ERROR:
            raise ValueError(f"fastload: on_error must be one of {ON_ERROR}, got {on_error!r}")
        if decode_on not in DECODE_ON[1:]:
            raise ValueError(f"fastload: decode_on must be one of {DECODE_ON}, got {decode_on!r}")
        self.decode_on = decode_on
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        module = _ext.require_ops()
        self.index = index
        self.plan = plan
        self.on_error = on_error
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.memory_format = memory_format or torch.contiguous_format
        self.description = description
        self._engine = module.BatchEngine(max(1, int(num_threads)))
        self._owner_pid = os.getpid()
        if len(index):
            # An empty dataset (a split or rank without files) never submits a batch, and
            # the engine's index checks need at least one file.
            self._engine.set_index(
                torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes),
            )
        self._engine.set_plan(plan.config())
        self._labels = torch.from_numpy(np.ascontiguousarray(index.labels))
        # The batches in flight (the loader keeps prefetch_factor, 2 by default) plus the
        # few the training loop may still hold.
        self._buffers = BatchBuffers(capacity=6)
        self._mean = torch.tensor(plan.mean, dtype=torch.float32)
        self._std = torch.tensor(plan.std, dtype=torch.float32)
        # nvJPEG batched decode; tests substitute the CPU decoder to check the packing.
        self._gpu_decoder = functools.partial(_nvjpeg_decode, max_pixels=plan.max_pixels)
        self._gpu_tickets = itertools.count(-1, -1)  # apart from the engine's tickets (>= 0)
        self._pending: Dict[int, Tuple[torch.Tensor, torch.Tensor, int, float]] = {}
        self._lock = threading.Lock()
        self._stats = {"images": 0, "batches": 0, "skipped": 0, "pil_fallback": 0, "gpu_cpu_fallback": 0,
                       "engine_seconds": 0.0, "wait_seconds": 0.0}
        # The unreadable samples already counted in "skipped" this epoch: a replacement
        # search may pass the same bad sample from several batches (or slots).
        self._skipped_seen: set = set()
        self._skipped_epoch: Optional[int] = None

    def start_pass(self) -> None:
        """A new pass over the data begins (the loader calls it at each iter()): its bad
        samples are counted afresh, even when it repeats an epoch number."""
        self._skipped_seen = set()
        self._skipped_epoch = None

    def set_seed(self, seed: int) -> None:
        """Sets the base of every random parameter (the loader restores it on resume)."""
        self.plan.seed = int(seed)
        self._engine.set_plan(self.plan.config())

    @property
    def num_threads(self) -> int:
        return self._engine.num_threads

    def _allocate(self, batch: int) -> torch.Tensor:
        shape = (batch, self.plan.channels, *self.plan.out_size)
        if self.pin_memory:  # torch's caching host allocator reuses pinned blocks itself
            return torch.empty(shape, dtype=self.plan.dtype, memory_format=self.memory_format, pin_memory=True)
        return self._buffers.take(shape, self.plan.dtype, self.memory_format)

    def _allocate_cpu(self, batch: int) -> torch.Tensor:
        return torch.empty((batch, self.plan.channels, *self.plan.out_size), dtype=self.plan.dtype)

    def submit(self, indices: List[int], epoch: int) -> int:
        """Queues the batch of these sample indices (epoch picks the random parameters);
        returns a ticket for result()."""
        samples = torch.as_tensor(indices, dtype=torch.int64)
        if self.decode_on == "cpu":
            out = self._allocate(len(samples))
            ticket = self._engine.submit(samples, out, epoch)
        elif self.decode_on == "cpu+gpu":
            out = None  # the device kernel allocates it
            ticket = self._engine.submit(samples, None, epoch, pin_memory=self.pin_memory)
        else:
            out = None  # nvJPEG runs in result(): reading and decoding are issued there
            ticket = next(self._gpu_tickets)
        with self._lock:
            self._pending[ticket] = (samples, out, epoch, time.perf_counter())
        return ticket

    def result(self, ticket: int) -> List[torch.Tensor]:
        """Waits for a submitted batch (GIL released); returns [images, labels]."""
        with self._lock:
            samples, out, epoch, submitted = self._pending.pop(ticket)
        started = time.perf_counter()
        with torch.profiler.record_function("fastload.native_batch"):
            if self.decode_on == "cpu":
                status, messages = self._engine.wait(ticket)
            elif self.decode_on == "cpu+gpu":
                status, messages, *windows = self._engine.wait(ticket)
                out = self._augment_on_device(*windows)
            else:
                status, messages, out = self._decode_on_device(samples, epoch)
        finished = time.perf_counter()
        samples = samples.clone()
        failed: set = set()  # distinct unreadable samples met while filling this batch
        for slot in torch.nonzero(status != OK).flatten().tolist():
            self._repair(slot, int(samples[slot]), int(status[slot]), messages[slot], samples, out, epoch, failed)
        if epoch != self._skipped_epoch:
            self._skipped_seen, self._skipped_epoch = set(), epoch
        stats = self._stats
        stats["skipped"] += len(failed - self._skipped_seen)
        self._skipped_seen |= failed
        stats["images"] += len(samples)
        stats["batches"] += 1
        stats["engine_seconds"] += finished - submitted
        stats["wait_seconds"] += finished - started
        labels = self._labels[samples]
        return [out, labels.pin_memory() if self.pin_memory else labels]  # pinned like torch's batches

    def discard(self, ticket: int) -> None:
        """Drops a submitted batch nobody will take (an abandoned epoch), so that its
        engine job and output buffer are released."""
        if os.getpid() != self._owner_pid:
            return  # a forked child (e.g. collecting garbage in a DataLoader worker): no engine threads here
        with self._lock:
            self._pending.pop(ticket, None)
        if ticket >= 0:  # an engine job (the nvJPEG mode does its work in result())
            self._engine.wait(ticket)

    def _device_stream(self):
        return torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()

    def _augment_on_device(self, packed: torch.Tensor, shapes: torch.Tensor, boxes: torch.Tensor,
                           flips: torch.Tensor) -> torch.Tensor:
        """Resize + flip + normalise + cast packed uint8 windows on the device, on a side
        stream; the consumer's stream waits for it."""
        from fastload import ops

        device, plan = self.device, self.plan
        if self._stream is not None:
            # Inputs already on the device (nvJPEG's images) were made on the current stream.
            self._stream.wait_stream(torch.cuda.current_stream(device))
            for tensor in (packed, shapes, boxes, flips):
                if tensor.device.type == "cuda":
                    tensor.record_stream(self._stream)
        with self._device_stream():
            out = torch.empty((len(shapes), plan.channels, *plan.out_size), dtype=plan.dtype, device=device,
                              memory_format=self.memory_format)
            if len(shapes):
                ops.crop_resize_flip_normalize_batch(
                    packed.to(device, non_blocking=True), shapes.to(device, non_blocking=True),
                    boxes.to(device, non_blocking=True), flips.to(device, non_blocking=True), plan.value_scale,
                    self._mean.to(device, non_blocking=True), self._std.to(device, non_blocking=True), out)
        if self._stream is not None:
            torch.cuda.current_stream(device).wait_stream(self._stream)
            out.record_stream(torch.cuda.current_stream(device))
        return out

    def _decode_on_device(self, samples: torch.Tensor, epoch: int):
        """nvJPEG path: read bytes (C++), decode on the device, crop/resize/normalise there."""
        from fastload import ops

        datas, errors = self._engine.read_samples(samples)
        status = torch.zeros(len(samples), dtype=torch.int32)
        messages = list(errors)
        decodable = []
        for slot, (data, error) in enumerate(zip(datas, errors)):
            if error:
                status[slot] = READ_ERROR
            elif not _looks_like_jpeg(data):
                status[slot] = NOT_JPEG
            else:
                decodable.append(slot)
        images: List[Optional[torch.Tensor]] = [None] * len(samples)
        if decodable:
            try:
                decoded, cpu_fallback = self._gpu_decoder([datas[s] for s in decodable], self.plan.channels, self.device)
                self._stats["gpu_cpu_fallback"] += int(cpu_fallback.sum())
                for slot, image in zip(decodable, decoded):
                    images[slot] = image
            except RuntimeError:
                # Some sample neither nvJPEG nor libjpeg decodes: find which, one by one on
                # the CPU; the error policy then handles those slots.
                for slot in decodable:
                    try:
                        images[slot] = ops.decode_jpeg(datas[slot], channels=self.plan.channels,
                                                       max_pixels=self.plan.max_pixels).to(self.device)
                        self._stats["gpu_cpu_fallback"] += 1
                    except RuntimeError as error:
                        status[slot], messages[slot] = DECODE_ERROR, str(error)
        return status, messages, self._augment_decoded(images, samples, epoch, status, messages)

    def _augment_decoded(self, images: List[Optional[torch.Tensor]], samples: torch.Tensor, epoch: int,
                         status: torch.Tensor, messages: List[str]) -> torch.Tensor:
        """Packs whole decoded uint8 HWC images (on the device) with their plan geometry:
        the clamp region becomes a strided view (offset, row stride) of the packed buffer.
        A failed slot (no image, or geometry without pixels to sample, marked BAD_GEOMETRY
        here as the CPU modes do) gets one black pixel, so the batched kernel stays valid
        and the error policy handles that sample alone."""
        config, ops = self.plan.config(), _ext.require_ops()
        try:
            boxes, clamps, flips = self._regions_of(images, samples, epoch)
        except ValueError:  # some box has no pixels: find which, so that only they fail
            for slot, image in enumerate(images):
                if image is None:
                    continue
                try:
                    ops.plan_region(config, image.shape[0], image.shape[1], epoch, int(samples[slot]))
                except ValueError as error:
                    status[slot], messages[slot], images[slot] = BAD_GEOMETRY, str(error), None
            boxes, clamps, flips = self._regions_of(images, samples, epoch)
        for slot, image in enumerate(images):
            if image is None:
                images[slot] = torch.zeros((1, 1, self.plan.channels), dtype=torch.uint8, device=self.device)
        sizes = torch.tensor([[im.shape[0], im.shape[1]] for im in images], dtype=torch.int64)
        channels = self.plan.channels
        lengths = sizes[:, 0] * sizes[:, 1] * channels
        starts = torch.cumsum(lengths, 0) - lengths
        top = clamps[:, 0].floor().clamp(min=0).long()
        left = clamps[:, 1].floor().clamp(min=0).long()
        bottom = torch.minimum((clamps[:, 0] + clamps[:, 2]).ceil().long(), sizes[:, 0])
        right = torch.minimum((clamps[:, 1] + clamps[:, 3]).ceil().long(), sizes[:, 1])
        row_stride = sizes[:, 1] * channels
        shapes = torch.stack([starts + top * row_stride + left * channels, (bottom - top).clamp(min=1),
                              (right - left).clamp(min=1), row_stride], dim=1)
        relative = boxes.clone()
        relative[:, 0] -= top.float()
        relative[:, 1] -= left.float()
        packed = torch.cat([im.reshape(-1) for im in images]) if images else torch.empty(0, dtype=torch.uint8)
        return self._augment_on_device(packed, shapes, relative, flips)

    def _regions_of(self, images: List[Optional[torch.Tensor]], samples: torch.Tensor, epoch: int):
        """plan_regions of the images there are; a missing one gets the box of its
        one-pixel stand-in."""
        boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]]).repeat(len(images), 1)
        clamps, flips = boxes.clone(), torch.zeros(len(images), dtype=torch.bool)
        present = [slot for slot, image in enumerate(images) if image is not None]
        if present:
            sizes = torch.tensor([[images[s].shape[0], images[s].shape[1]] for s in present], dtype=torch.int64)
            boxes[present], clamps[present], flips[present] = _ext.require_ops().plan_regions(
                self.plan.config(), sizes, samples[present], epoch)
        return boxes, clamps, flips

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
        """Fills out[slot] with one sample on the CPU engine (then copied to the device)."""
        extra = {0: predecoded} if predecoded is not None else {}
        target = out[slot:slot + 1] if out.device.type == "cpu" else self._allocate_cpu(1)
        ticket = self._engine.submit(torch.tensor([sample]), target, epoch, extra)
        status, messages = self._engine.wait(ticket)
        if target is not out and int(status[0]) == OK:
            out[slot:slot + 1].copy_(target)
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

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """Counters: images, batches, skipped, pil_fallback, gpu_cpu_fallback; engine and
        wait seconds; `reset` starts them afresh after returning them."""
        out = dict(self._stats, threads=self.num_threads)
        if reset:
            self._stats.update({key: type(value)() for key, value in self._stats.items()})
        return out

    def close(self) -> None:
        self._engine.close()
        self._buffers.clear()

    def __del__(self):
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()


def _nvjpeg_decode(datas: List[torch.Tensor], channels: int, device: torch.device, max_pixels: int):
    """(images on device, cpu_fallback bool [N]); raises when a sample is undecodable or
    over the plan's limits."""
    from fastload import ops

    return ops.decode_jpeg_cuda(datas, channels, device, max_pixels=max_pixels)


def _looks_like_jpeg(data: torch.Tensor) -> bool:
    return data.numel() >= 3 and data[:3].tolist() == [0xFF, 0xD8, 0xFF]  # SOI + a marker


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
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and plan.dtype.is_floating_point:
        plan.dtype = dtype  # e.g. bfloat16 for AMP, written directly by the kernel
    # (other dtypes, e.g. float64, are converted after the batch, as on the generic path)
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
    decode_on: str = "auto",
    exact: bool = False,
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
    if decode_on not in DECODE_ON:
        raise ValueError(f"fastload.DataLoader: expected decode_on in {DECODE_ON}, got {decode_on!r}")
    try:
        index, plan, description = native_pipeline(dataset, dtype=dtype, seed=0)
    except UnsupportedPipeline as error:
        return None, f"generic: {error}"
    if not _ext.has_ops():
        from fastload.source.base import NativeDataset

        if isinstance(dataset, NativeDataset):  # its geometry is C++ on every path: fail now
            _ext.require_ops()
        return None, "generic: fastload._C is not built (make build)"
    if seed is None:
        # A native dataset carries its own seed (reproducible by default, and the one its
        # generic twin uses); else like torch's own augmentation randomness, from the
        # global generator.
        dataset_seed = getattr(dataset, "seed", None)
        seed = dataset_seed if isinstance(dataset_seed, int) else int(torch.empty((), dtype=torch.int64).random_().item())
    plan.seed = int(seed)
    plan.exact = bool(exact)
    decode_on, why = _resolve_decode_on(decode_on, device)
    runner = NativeRunner(index, plan, num_threads=max(1, num_workers), pin_memory=pin_memory,
                          memory_format=memory_format, on_error=on_error, decode_on=decode_on,
                          device=device, description=description)
    return runner, f"{description}, decode_on={decode_on}{why}"


def _resolve_decode_on(decode_on: str, device: Optional[torch.device]) -> Tuple[str, str]:
    """(mode, why) for decode_on; "auto" moves resize/normalise to a CUDA device when the
    CUDA kernels were built, so only uint8 crop windows cross PCIe."""
    on_cuda = device is not None and torch.device(device).type == "cuda"
    if decode_on == "auto":
        if on_cuda and _ext.has_cuda_ops():
            return "cpu+gpu", " (auto: CUDA kernels built, batches bound for the GPU)"
        return "cpu", " (auto)" if not on_cuda else " (auto: fastload._C has no CUDA kernels)"
    if decode_on != "cpu" and not on_cuda:
        raise ValueError(f"fastload.DataLoader: decode_on={decode_on!r} needs device='cuda', got device={device}")
    if decode_on != "cpu":
        _ext.require_cuda_ops()
    return decode_on, ""
