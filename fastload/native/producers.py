"""One producer per decode_on mode: how a batch of samples becomes a batch of images.

Every producer has the same small interface, so the runner never asks which mode runs:

    submit(samples int64 [B], epoch) -> handle     queue the batch, return at once
    collect(handle) -> (status int32 [B], messages, images)
                                                   wait for it; images [B, C, H, W]
    discard(handle)                                release a batch nobody will collect
    close()

`status` holds the engine's per-sample codes (fastload._contract); the slots that
are not OK hold garbage, and the runner's repair step fills them.

- CpuProducer ("cpu"): the engine reads, decodes and augments into a (pinned, or reused
  pageable) batch on the host.
- CpuGpuProducer ("cpu+gpu"): the engine decodes each sample's DCT-scaled crop window to
  uint8 and returns the windows packed; the device resizes, flips, normalises and casts
  them on a side stream. Only uint8 window bytes cross PCIe.
- GpuProducer ("gpu"): nvJPEG decodes whole images on the device
  (fastload.decode.nvjpeg); the same device step samples each image's region.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional, Protocol, Tuple

import torch

from fastload import _contract as contract
from fastload._contract import interpolation_of, region_of, regions_of, sampling_views
from fastload.transfer.buffers import BatchBuffers

Collected = Tuple[torch.Tensor, List[str], torch.Tensor]


def _wait(engine: Any, ticket: int, timeout: float) -> tuple:
    """engine.wait(ticket) for at most `timeout` seconds (0: no limit). TimeoutError when
    the batch is not done by then: its ticket stays in the engine, whose job still writes
    into the batch's memory."""
    result = engine.wait(ticket, timeout)
    if result is None:
        raise TimeoutError(ticket)
    return result


class Producer(Protocol):
    """What the runner needs of a mode. Constructed as `Producer(engine, plan, *,
    pin_memory, memory_format, device, stats)`; `stats` is the runner's counter dict,
    which a producer may add to (e.g. gpu_cpu_fallback). collect() raises TimeoutError
    when the engine takes longer than `timeout` seconds (0: no limit)."""

    timeout: float

    def submit(self, samples: torch.Tensor, epoch: int) -> Any: ...

    def collect(self, handle: Any) -> Collected: ...

    def discard(self, handle: Any) -> None: ...

    def keep_in_flight(self, depth: int) -> None:
        """The loader keeps `depth` batches submitted (host memory is sized by it)."""

    def close(self) -> None: ...


# Batches the training loop holds while the next ones are made: the one it works on
# (`for batch in loader` keeps it bound while __next__ runs). A loop that keeps more gets
# plain allocations for the extra ones: correct, only without reuse.
HELD_BY_LOOP = 1
DEFAULT_DEPTH = 2  # the loader's default prefetch depth


def batches_held(depth: int) -> int:
    """Most host batches alive at once when `depth` are kept submitted."""
    return depth + HELD_BY_LOOP


class CpuProducer:
    """decode_on="cpu": the engine writes every image into its slot of a host batch."""

    def __init__(self, engine: Any, plan: Any, *, pin_memory: bool, memory_format: torch.memory_format,
                 device: torch.device, stats: Dict[str, Any], views: Any = None):
        self._engine, self._plan = engine, plan
        self._pin_memory, self._memory_format = pin_memory, memory_format
        # Several outputs per sample (fastload.augment.views.ViewPlans): a batch is then a
        # list, one tensor per image view, then one per mask.
        self._views = views
        self._buffers = BatchBuffers(capacity=batches_held(DEFAULT_DEPTH) * (1 + self._extra_outputs()))
        self.timeout = 0.0

    def _extra_outputs(self) -> int:
        return 0 if self._views is None else len(self._views.plans) - 1 + len(self._views.masks)

    def _take(self, shape: Tuple[int, ...], dtype: torch.dtype, memory_format: torch.memory_format) -> torch.Tensor:
        if self._pin_memory:  # torch's caching host allocator reuses pinned blocks itself
            return torch.empty(shape, dtype=dtype, memory_format=memory_format, pin_memory=True)
        return self._buffers.take(shape, dtype, memory_format)

    def _allocate(self, batch: int) -> Any:
        plan = self._plan
        out = self._take((batch, plan.channels, *plan.out_size), plan.dtype, self._memory_format)
        if self._views is None:
            return out
        outs = [out] + [self._take((batch, p.channels, *p.out_size), p.dtype, self._memory_format)
                        for p in self._views.plans[1:]]
        for mask in self._views.masks:
            size = self._views.plans[mask.follows].out_size
            outs.append(self._take(mask.shape(batch, size), mask.dtype, torch.contiguous_format))
        return outs

    def submit(self, samples: torch.Tensor, epoch: int) -> Tuple[int, Any]:
        out = self._allocate(len(samples))
        if self._views is None:
            return self._engine.submit(samples, out, epoch), out
        k = len(self._views.plans)
        return self._engine.submit(samples, out[0], epoch, views=out[1:k], masks=out[k:]), out

    def collect(self, handle: Tuple[int, torch.Tensor]) -> Collected:
        ticket, out = handle
        status, messages = _wait(self._engine, ticket, self.timeout)
        return status, messages, out

    def discard(self, handle: Tuple[int, torch.Tensor]) -> None:
        self._engine.wait(handle[0])

    def keep_in_flight(self, depth: int) -> None:
        """The loader keeps `depth` batches submitted: keep buffers for them and for what
        the training loop may hold, no more (each is a whole batch: 77 MB at 128 x 224^2
        float32)."""
        self._buffers.resize(batches_held(depth) * (1 + self._extra_outputs()))

    def close(self) -> None:
        self._buffers.clear()


class DeviceAugment:
    """Resize + flip + normalise + cast of packed uint8 pixels on the device, on a side
    stream that the consumer's stream then waits for (no host synchronisation)."""

    def __init__(self, plan: Any, device: torch.device, memory_format: torch.memory_format):
        self.plan, self.device, self.memory_format = plan, device, memory_format
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._mean = torch.tensor(plan.mean, dtype=torch.float32)
        self._std = torch.tensor(plan.std, dtype=torch.float32)

    def __call__(self, packed: torch.Tensor, shapes: torch.Tensor, boxes: torch.Tensor,
                 flips: torch.Tensor) -> torch.Tensor:
        """images [N, C, H, W] of the plan's dtype on the device, from `packed` uint8
        pixels; `shapes` int64 [N, 4] (offset, height, width, row stride) of each window,
        `boxes` float32 [N, 4] relative to it, `flips` bool [N] or [N, 2] (left-right,
        top-bottom)."""
        from fastload import _ops as ops

        device, plan, stream = self.device, self.plan, self.stream
        if stream is not None:
            # Inputs already on the device (nvJPEG's images) were made on the current stream.
            stream.wait_stream(torch.cuda.current_stream(device))
            for tensor in (packed, shapes, boxes, flips):
                if tensor.device.type == "cuda":
                    tensor.record_stream(stream)
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            out = torch.empty((len(shapes), plan.channels, *plan.out_size), dtype=plan.dtype, device=device,
                              memory_format=self.memory_format)
            if len(shapes):
                ops.crop_resize_flip_normalize_batch(
                    packed.to(device, non_blocking=True), shapes.to(device, non_blocking=True),
                    boxes.to(device, non_blocking=True), flips.to(device, non_blocking=True), plan.value_scale,
                    self._mean.to(device, non_blocking=True), self._std.to(device, non_blocking=True), out,
                    interpolation=interpolation_of(plan))
        if stream is not None:
            torch.cuda.current_stream(device).wait_stream(stream)
            out.record_stream(torch.cuda.current_stream(device))
        return out


class CpuGpuProducer:
    """decode_on="cpu+gpu": the engine returns crop windows, the device augments them."""

    def __init__(self, engine: Any, plan: Any, *, pin_memory: bool, memory_format: torch.memory_format,
                 device: torch.device, stats: Dict[str, Any]):
        self._engine, self._pin_memory = engine, pin_memory
        self._augment = DeviceAugment(plan, device, memory_format)
        self.timeout = 0.0

    def submit(self, samples: torch.Tensor, epoch: int) -> int:
        return self._engine.submit(samples, None, epoch, pin_memory=self._pin_memory)

    def collect(self, ticket: int) -> Collected:
        status, messages, packed, shapes, boxes, flips = _wait(self._engine, ticket, self.timeout)
        return status, messages, self._augment(packed, shapes, boxes, flips)

    def discard(self, ticket: int) -> None:
        self._engine.wait(ticket)

    def keep_in_flight(self, depth: int) -> None:
        pass  # device batches come from torch's caching allocator

    def close(self) -> None:
        pass


class GpuProducer:
    """decode_on="gpu": nvJPEG decodes whole images, the device samples their regions.

    Reading and decoding are issued in collect(): nvJPEG's batched call runs on the
    caller's thread, so submit() only records the batch.

    Attributes:
        decoder: the fastload.decode.nvjpeg.NvjpegDecoder; `decoder.batch_decode` is the
            batched decode itself (tests put the CPU decoder there).
    """

    def __init__(self, engine: Any, plan: Any, *, pin_memory: bool, memory_format: torch.memory_format,
                 device: torch.device, stats: Dict[str, Any]):
        # Imported here: decode.nvjpeg takes its status codes from this package.
        from fastload.decode.nvjpeg import NvjpegDecoder

        self._plan, self._device = plan, device
        self._stats = stats
        self.decoder = NvjpegDecoder(engine.read_samples, channels=plan.channels, max_pixels=plan.max_pixels,
                                     device=device)
        self._augment = DeviceAugment(plan, device, memory_format)
        self.timeout = 0.0  # nvJPEG decodes on the caller's thread, in collect(): nothing to wait for

    def submit(self, samples: torch.Tensor, epoch: int) -> Tuple[torch.Tensor, int]:
        return samples, epoch

    def collect(self, handle: Tuple[torch.Tensor, int]) -> Collected:
        samples, epoch = handle
        status, messages, images, cpu_fallbacks = self.decoder.decode(samples)
        self._stats["gpu_cpu_fallback"] += cpu_fallbacks
        return status, messages, self._augment_decoded(images, samples, epoch, status, messages)

    def discard(self, handle: Tuple[torch.Tensor, int]) -> None:
        pass  # nothing was started

    def keep_in_flight(self, depth: int) -> None:
        pass  # device batches come from torch's caching allocator

    def close(self) -> None:
        pass

    def _augment_decoded(self, images: List[Optional[torch.Tensor]], samples: torch.Tensor, epoch: int,
                         status: torch.Tensor, messages: List[str]) -> torch.Tensor:
        """Packs whole decoded uint8 HWC images (on the device) with their plan geometry:
        each sampling view becomes a strided window (offset, row stride) of the packed
        buffer. A failed slot (no image, or geometry without pixels to sample, marked
        BAD_GEOMETRY here as the CPU modes do) gets one black pixel, so the batched kernel
        stays valid and the error policy handles that sample alone."""
        try:
            boxes, clamps, flips = self._regions_of(images, samples, epoch)
        except ValueError:  # some box has no pixels: find which, so that only they fail
            for slot, image in enumerate(images):
                if image is None:
                    continue
                try:
                    region_of(self._plan, image.shape[0], image.shape[1], epoch, int(samples[slot]))
                except ValueError as error:
                    status[slot], messages[slot], images[slot] = contract.BAD_GEOMETRY, str(error), None
            boxes, clamps, flips = self._regions_of(images, samples, epoch)
        channels = self._plan.channels
        for slot, image in enumerate(images):
            if image is None:
                images[slot] = torch.zeros((1, 1, channels), dtype=torch.uint8, device=self._device)
        sizes = torch.tensor([[im.shape[0], im.shape[1]] for im in images], dtype=torch.int64)
        views, relative = sampling_views(boxes, clamps, sizes)
        lengths = sizes[:, 0] * sizes[:, 1] * channels
        starts = torch.cumsum(lengths, 0) - lengths
        row_stride = sizes[:, 1] * channels
        shapes = torch.stack([starts + views[:, 0] * row_stride + views[:, 1] * channels, views[:, 2], views[:, 3],
                              row_stride], dim=1)
        packed = torch.cat([im.reshape(-1) for im in images]) if images else torch.empty(0, dtype=torch.uint8)
        return self._augment(packed, shapes, relative, flips)

    def _regions_of(self, images: List[Optional[torch.Tensor]], samples: torch.Tensor, epoch: int):
        """Regions of the images there are; a missing one gets the box of its one-pixel
        stand-in."""
        boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]]).repeat(len(images), 1)
        clamps, flips = boxes.clone(), torch.zeros((len(images), 2), dtype=torch.bool)
        present = [slot for slot, image in enumerate(images) if image is not None]
        if present:
            sizes = torch.tensor([[images[s].shape[0], images[s].shape[1]] for s in present], dtype=torch.int64)
            boxes[present], clamps[present], flips[present] = regions_of(self._plan, sizes, samples[present], epoch)
        return boxes, clamps, flips


# decode_on mode -> its producer.
PRODUCERS = {"cpu": CpuProducer, "cpu+gpu": CpuGpuProducer, "gpu": GpuProducer}
