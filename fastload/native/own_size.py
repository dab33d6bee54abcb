"""OwnSizeRunner: batches of images of their own sizes (a list of [C, H_i, W_i] tensors,
as torchvision's detection references make them), each image on the engine's kernels.

Why not the batch engine: its batch call writes one [B, C, H, W] output, whose shape a
pipeline without a crop does not have. Each image instead runs alone on a pool of
`num_threads` threads: the file read, the C++ decode (JPEG, PNG; other formats through
PIL) and the fused resize / flip / colour / normalise kernel
(fastload.augment.own_size.apply_own_size), each call releasing the GIL. The draws are the
engine's (seed, epoch, index), so a sample is the same on every path and after a resume.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from fastload.augment.own_size import apply_own_size
from fastload.decode.header import PNG_SIGNATURE
from fastload.errors import DecodeError, ErrorPolicy
from fastload.source.index import SampleIndex
from fastload.stats import SkippedSamples

_OWNER = "fastload.OwnSizeRunner"
_STAGES = ("read", "decode", "augment")  # (the engine's stage names that apply)
_COUNTERS = {"images": 0, "batches": 0, "skipped": 0, "pil_fallback": 0, "engine_s": 0.0, "wait_s": 0.0}


def decode_image(data: bytes, plan: Any, index: int, source: str) -> Tuple[torch.Tensor, bool, Any, int]:
    """(uint8 [H, W, channels], whether PIL decoded it, the full size (height, width), the
    DCT scale denominator it was decoded at): JPEG (at a reduced DCT scale where the plan's
    dct_scaling allows and the output still has as many pixels) and PNG in C++, other
    formats with PIL. Raises DecodeError naming the sample and file."""
    from fastload._contract import dct_scale_denom
    from fastload._ops import decode_jpeg, decode_png, jpeg_header
    from fastload.augment.own_size import own_size

    channels, max_pixels = plan.channels, plan.max_pixels
    if not data:
        raise DecodeError("expected an image, got 0 bytes", index, source)
    try:
        if data[:2] == b"\xff\xd8":
            tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            scale = 1
            if plan.dct_scaling:
                height, width = jpeg_header(tensor)[:2]
                scale = dct_scale_denom(height, width, *own_size(plan, height, width))
            image = decode_jpeg(tensor, scale_denom=scale, channels=channels, max_pixels=max_pixels)
            return image, False, (height, width) if scale > 1 else tuple(image.shape[:2]), scale
        if data[:8] == PNG_SIGNATURE:
            image = decode_png(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode="RGB" if channels == 3
                               else "L", max_pixels=max_pixels)
            return image, False, tuple(image.shape[:2]), 1
    except (RuntimeError, ValueError) as error:
        raise DecodeError(str(error), index, source) from None
    from fastload.decode.pil import decode_to_tensor

    image = decode_to_tensor(data, index=index, source=source, channels=channels, max_pixels=max_pixels)
    return image, True, tuple(image.shape[:2]), 1


class OwnSizeRunner:
    """Makes batches `[images, labels]`: images a list of [C, H_i, W_i] tensors of the
    plan's dtype (an own-size plan: fastload.augment.own_size), labels int64 [B]. Takes
    NativeRunner's arguments that apply; on_error "skip" replaces a bad sample by the next
    readable one (ErrorPolicy.replacements), counted and named as the engine's are."""

    def __init__(self, index: SampleIndex, plan: Any, *, num_threads: int = 1, pin_memory: bool = False,
                 on_error: str = "raise", description: str = "native", timeout: float = 0):
        self.index, self.plan, self.description = index, plan, description
        self.policy = ErrorPolicy(on_error, owner=_OWNER)
        self.num_threads = max(1, int(num_threads))
        # (the batch's wrapper, TargetsRunner, pins the list where this says so)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.timeout = float(timeout)
        self._pool = concurrent.futures.ThreadPoolExecutor(self.num_threads, thread_name_prefix="fastload-own-size")
        self._labels = torch.as_tensor(index.labels, dtype=torch.int64)
        self._tickets = itertools.count()
        self._pending: Dict[int, Tuple[List[int], List[Any], int, float]] = {}
        self._lock = threading.Lock()
        self._stats: Dict[str, Any] = dict(_COUNTERS)
        self._cpu_s = 0.0
        self._stages = dict.fromkeys(_STAGES, 0.0)
        self._skipped_seen: set = set()
        self.skipped_samples = SkippedSamples()
        self.last_samples: Optional[torch.Tensor] = None
        # A lazily traced dataset's trace (set by the loader's wrapper): a replacement
        # sample under on_error="skip" is traced before it runs.
        self.trace: Any = None

    @property
    def repair(self) -> "OwnSizeRunner":
        """(where NativeRunner's wrapper sets `trace`: the runner repairs its own slots)"""
        return self

    def refresh_index(self) -> None:
        """(each sample reads the index as it is then: nothing to hand over)"""

    @property
    def on_error(self) -> str:
        return self.policy.mode

    @on_error.setter
    def on_error(self, on_error: str) -> None:
        self.policy = ErrorPolicy(on_error, owner=_OWNER)

    def start_pass(self) -> None:
        self._skipped_seen = set()

    def keep_in_flight(self, depth: int) -> None:
        """(each image's memory is its own: nothing to size)"""

    def set_seed(self, seed: int) -> None:
        self.plan.seed = int(seed)

    def one(self, sample: int, epoch: int) -> torch.Tensor:
        """Sample `sample`'s image at `epoch`: [C, H, W]; raises DecodeError naming its file."""
        started, times = time.thread_time(), [time.perf_counter()]
        source = self.index.source(sample)
        try:
            data = self.index.read(sample)
        except OSError as error:
            raise DecodeError(f"{type(error).__name__}: {error}", sample, source) from None
        times.append(time.perf_counter())
        image, by_pil, full_size, scale = decode_image(data, self.plan, sample, source)
        times.append(time.perf_counter())
        try:
            out = apply_own_size(self.plan, image, epoch, sample, full_size=full_size, scale_denom=scale)
        except (RuntimeError, ValueError) as error:  # e.g. a thin image resized to 0 pixels
            raise DecodeError(str(error), sample, source) from None
        times.append(time.perf_counter())
        with self._lock:
            self._stats["pil_fallback"] += int(by_pil)
            self._cpu_s += time.thread_time() - started
            for stage, start, end in zip(_STAGES, times, times[1:]):
                self._stages[stage] += end - start
        return out

    def submit(self, indices: Any, epoch: int) -> int:
        samples = [int(i) for i in indices]
        futures = [self._pool.submit(self.one, i, epoch) for i in samples]
        ticket = next(self._tickets)
        with self._lock:
            self._pending[ticket] = (samples, futures, int(epoch), time.perf_counter())
        return ticket

    def result(self, ticket: int) -> List[Any]:
        """Waits for a submitted batch; returns [images (a list), labels int64 [B]]."""
        with self._lock:
            samples, futures, epoch, submitted = self._pending.pop(ticket)
        started = time.perf_counter()
        done, waiting = concurrent.futures.wait(futures, timeout=self.timeout or None)
        if waiting:
            shown = ", ".join(self.index.source(i) for i in samples[:4])
            raise RuntimeError(f"DataLoader timed out after {self.timeout:g} seconds. fastload: the batch of samples "
                               f"{samples} ({shown}) was not finished. Check the files' storage, or raise timeout "
                               "(0: no limit).")
        images = []
        for slot, future in enumerate(futures):
            error = future.exception()
            if error is None:
                images.append(future.result())
                continue
            images.append(self._replace(slot, samples, error, epoch))
        finished = time.perf_counter()
        stats = self._stats
        stats["images"] += len(samples)
        stats["batches"] += 1
        stats["engine_s"] += finished - submitted
        stats["wait_s"] += finished - started
        kept = torch.tensor(samples, dtype=torch.int64)
        self.last_samples = kept
        return [images, self._labels[kept]]

    def _replace(self, slot: int, samples: List[int], error: BaseException, epoch: int) -> torch.Tensor:
        """The image of the first readable sample after samples[slot] (under "skip"),
        which takes the slot; raises the error otherwise."""
        if not isinstance(error, DecodeError) or not self.policy.skips:
            raise error
        bad = samples[slot]
        for candidate in self.policy.replacements(bad, len(self.index)):
            self.skipped_samples.add(bad, self.index.source(bad), error.reason)
            if bad not in self._skipped_seen:
                self._skipped_seen.add(bad)
                self._stats["skipped"] += 1
            if self.trace is not None:
                self.trace.prepare([candidate])
            try:
                image = self.one(candidate, epoch)
            except DecodeError as next_error:
                bad, error = candidate, next_error
                continue
            samples[slot] = candidate
            return image
        raise error

    def discard(self, ticket: int) -> None:
        with self._lock:
            entry = self._pending.pop(ticket, None)
        for future in (entry[1] if entry is not None else ()):
            future.cancel()

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """NativeRunner's counters (images, batches, skipped, pil_fallback, engine_s,
        wait_s, threads, stages_s: read, decode, augment seconds summed over the pool's
        threads, cpu_s: their CPU time in the samples, skipped_samples)."""
        out = dict(self._stats, threads=self.num_threads, cpu_s=self._cpu_s, stages_s=dict(self._stages),
                   skipped_samples=self.skipped_samples.records())
        if reset:
            self._stats.update(_COUNTERS)
            self._cpu_s = 0.0
            self._stages = dict.fromkeys(_STAGES, 0.0)
            self.skipped_samples.reset()
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
