"""NativeRunner: the C++ batch engine's lifecycle and the tickets of the batches in flight."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from fastload import _contract as contract
from fastload import _ext
from fastload.errors import ErrorPolicy, TarShardError
from fastload.native.producers import PRODUCERS
from fastload.native.repair import Repair
from fastload.source.index import SampleIndex
from fastload.stats import profile_summary

_OWNER = "fastload.NativeRunner"
# The counters of stats(); "threads" is added when they are read.
_COUNTERS = {"images": 0, "batches": 0, "skipped": 0, "pil_fallback": 0, "gpu_cpu_fallback": 0,
             "engine_s": 0.0, "wait_s": 0.0, "queued": 0}


def _set_views(engine: Any, views: Any, mask_index: Optional[SampleIndex]) -> None:
    """Hands the engine the image views beyond the plan, the masks and their files."""
    engine.set_views(views.plans[1:], [contract.mask_spec(m.follows, m.fill, m.sampling) for m in views.masks])
    _set_mask_index(engine, views, mask_index)


def _set_mask_index(engine: Any, views: Any, mask_index: Optional[SampleIndex]) -> None:
    if views.masks and len(mask_index):
        engine.set_mask_index(torch.from_numpy(mask_index.files.data), torch.from_numpy(mask_index.files.offsets),
                              torch.from_numpy(mask_index.file_ids), torch.from_numpy(mask_index.offsets),
                              torch.from_numpy(mask_index.sizes))


class NativeRunner:
    """Produces whole collated batches `[images, labels]` from sample indices.

    submit() queues a batch and returns a ticket at once; result() waits for it (GIL
    released). images: [B, C, H, W] of the plan's dtype (and memory format), pinned when
    asked; labels: int64 [B]. Failed samples follow on_error: "raise" raises
    fastload.DecodeError naming the sample and file; "skip" replaces the sample with the
    next readable one (in dataset order) so the batch keeps its size, counts it in
    stats()["skipped"], lists it in stats()["skipped_samples"] and names it in a
    UserWarning (once per sample over the runner's life).

    Args:
        index: where the samples' bytes are.
        plan: the fused pipeline.
        num_threads: engine threads.
        pin_memory: allocate outputs in pinned (page-locked) memory.
        memory_format: torch.contiguous_format or torch.channels_last.
        on_error: "raise" or "skip".
        decode_on: "cpu", "cpu+gpu" or "gpu" (see fastload.native.producers); the last
            two produce batches on `device`.
        device: where "cpu+gpu" and "gpu" batches are produced.
        description: what runs, for loader.path.
        timeout: seconds result() waits for a batch (0: no limit), torch's DataLoader
            `timeout`: past it, RuntimeError "DataLoader timed out after N seconds" naming
            the batch's samples (a read that never returns: a hung network file system).
        views: several outputs per sample from one decode (fastload.augment.views.ViewPlans),
            decode_on="cpu" only; batches then take `views.outputs`' structure.
        mask_index: each sample's mask file (same sample numbers), when `views` has masks.
    """

    def __init__(self, index: SampleIndex, plan: Any, *, num_threads: int = 1, pin_memory: bool = False,
                 memory_format: Optional[torch.memory_format] = None, on_error: str = "raise",
                 decode_on: str = "cpu", device: Optional[torch.device] = None, description: str = "native",
                 timeout: float = 0, views: Any = None, mask_index: Optional[SampleIndex] = None):
        policy = ErrorPolicy(on_error, owner=_OWNER)
        if decode_on not in PRODUCERS:
            raise ValueError(f"{_OWNER}: expected decode_on in {tuple(PRODUCERS)}, got {decode_on!r}.")
        if views is not None and (decode_on != "cpu" or (views.masks and mask_index is None)):
            raise ValueError(f"{_OWNER}: several views or masks per sample run with decode_on='cpu' (got "
                             f"{decode_on!r}), masks with a mask_index (each sample's mask file).")
        self.decode_on = decode_on
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        module = _ext.require_ops()
        self.index = index
        self.plan = plan
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
        self._engine.set_plan(plan)
        self.views, self.mask_index = views, mask_index
        if views is not None:
            _set_views(self._engine, views, mask_index)
        self._labels = torch.from_numpy(np.ascontiguousarray(index.labels))
        # The samples the batch result() last returned holds (under on_error="skip" a
        # replacement in a bad sample's slot): a lazily traced dataset's batches need them.
        self.last_samples: Optional[torch.Tensor] = None
        self._stats: Dict[str, Any] = dict(_COUNTERS)
        options = {"views": views} if views is not None else {}
        self.producer = PRODUCERS[decode_on](self._engine, plan, pin_memory=self.pin_memory,
                                             memory_format=self.memory_format, device=self.device,
                                             stats=self._stats, **options)
        self._repair = Repair(self._engine, index, plan, policy, self._stats,
                              image_views=views.image_views if views is not None else 1)
        self._stages = tuple(module.engine_stages)  # the engine's stage names, in its order
        self._times_at_reset = self._engine.thread_times()  # stats() reports what came after
        self._times_at_batch = self._times_at_reset[0].sum(0)  # for each batch's profiler range
        self._tickets = itertools.count()
        # ticket -> (samples, producer handle, epoch, submit time)
        self._pending: Dict[int, Tuple[torch.Tensor, Any, int, float]] = {}
        # Handles of batches that timed out: their jobs may still write into their memory,
        # so it is never handed out again.
        self._timed_out: List[Any] = []
        self._lock = threading.Lock()
        self.timeout = timeout

    def refresh_index(self) -> None:
        """Hands the engine the index's arrays again: an index filled in place as a traced
        dataset is traced (fastload.trace.lazy) moved its path bytes to a larger
        buffer. Batches already submitted keep the arrays they were given."""
        index = self.index
        self._engine.set_index(
            torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
            torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes),
        )
        if self.views is not None:  # (a traced dataset's mask files fill in place too)
            _set_mask_index(self._engine, self.views, self.mask_index)

    @property
    def timeout(self) -> float:
        """Seconds result() waits for a batch (0: no limit); may be changed between batches."""
        return self.producer.timeout

    @timeout.setter
    def timeout(self, timeout: float) -> None:
        if not timeout >= 0:
            raise ValueError(f"{_OWNER}: expected timeout >= 0 seconds (0: no limit), got {timeout!r}.")
        self.producer.timeout = float(timeout)

    @property
    def on_error(self) -> str:
        """"raise" or "skip"; may be changed between batches."""
        return self._repair.policy.mode

    @on_error.setter
    def on_error(self, on_error: str) -> None:
        self._repair.policy = ErrorPolicy(on_error, owner=_OWNER)

    @property
    def num_threads(self) -> int:
        return self._engine.num_threads

    def start_pass(self) -> None:
        """A new pass over the data begins (the loader calls it at each iter()): its bad
        samples are counted afresh, even when it repeats an epoch number."""
        self._repair.start_pass()

    def keep_in_flight(self, depth: int) -> None:
        """The caller keeps `depth` batches submitted: batch memory is kept for those and
        the ones a training loop holds, no more."""
        self.producer.keep_in_flight(depth)

    def set_seed(self, seed: int) -> None:
        """Sets the base of every random parameter (the loader restores it on resume)."""
        self.plan.seed = int(seed)
        self._engine.set_plan(self.plan)

    def submit(self, indices: List[int], epoch: int) -> int:
        """Queues the batch of these sample indices (epoch picks the random parameters);
        returns a ticket for result()."""
        samples = torch.as_tensor(indices, dtype=torch.int64)
        remote = self.index.remote
        # Samples of remote shards: their bytes are fetched (many requests in flight) and the
        # engine gets the batch once they are there, in submission order (_start_fetched).
        fetch = remote.fetch(self.index, samples.tolist()) if remote is not None else None
        handle = self.producer.submit(samples, epoch) if fetch is None else None
        ticket = next(self._tickets)
        with self._lock:
            self._pending[ticket] = (samples, handle, epoch, time.perf_counter(), fetch)
        if fetch is not None:
            self._start_fetched()
        return ticket

    def _start_fetched(self) -> None:
        """Hands the engine, in ticket order, the waiting batches whose bytes have arrived."""
        with self._lock:
            waiting = sorted(t for t, entry in self._pending.items() if entry[1] is None)
        for ticket in waiting:
            with self._lock:
                entry = self._pending.get(ticket)
            if entry is None or not entry[4].done():
                break
            self._start(ticket)

    def _start(self, ticket: int) -> Tuple[torch.Tensor, Any, int, float, Any]:
        """Waits for a waiting batch's bytes, then hands it to the engine. A failed fetch
        raises (TarShardError naming the URL) under on_error="raise"; under "skip" the
        engine meets the missing bytes and the batch is repaired as for any unreadable file."""
        with self._lock:
            samples, handle, epoch, submitted, fetch = entry = self._pending[ticket]
        if handle is not None:
            return entry
        try:
            fetch.result(timeout=self.timeout or None)
        except concurrent.futures.TimeoutError:
            raise _timed_out_error(self.index, samples, self.timeout) from None
        except TarShardError:
            if not self._repair.policy.skips:
                with self._lock:
                    self._pending.pop(ticket, None)
                _release(self.index, samples, fetch)
                raise
        entry = (samples, self.producer.submit(samples, epoch), epoch, submitted, fetch)
        with self._lock:
            self._pending[ticket] = entry
        return entry

    def result(self, ticket: int) -> List[torch.Tensor]:
        """Waits for a submitted batch (GIL released); returns [images, labels]."""
        samples, out, _ = self.collect(ticket)
        self.last_samples = samples
        labels = self._labels[samples]
        labels = labels.pin_memory() if self.pin_memory else labels  # pinned like torch's batches
        if self.views is not None:  # one tensor per image view, then per mask
            k = self.views.image_views
            return self.views.outputs.arrange(out[:k], out[k:], labels)
        return [out, labels]

    def collect(self, ticket: int) -> Tuple[torch.Tensor, torch.Tensor, int]:
        """Waits for a submitted batch and repairs it: (samples int64 [B], the samples the
        batch holds after repair; images [B, C, H, W]; the batch's epoch)."""
        self._start(ticket)
        with self._lock:
            samples, handle, epoch, submitted, fetch = self._pending.pop(ticket)
            self._stats["queued"] += 1 + len(self._pending)  # batches in the engine's queue, this one too
        started = time.perf_counter()
        with torch.profiler.record_function("fastload.native_batch"):
            try:
                status, messages, out = self.producer.collect(handle)
            except TimeoutError:  # the batch outlived the loader's timeout
                self._timed_out.append(handle)
                _release(self.index, samples, fetch)
                raise _timed_out_error(self.index, samples, self.timeout) from None
        finished = time.perf_counter()
        if torch.autograd._profiler_enabled():
            self._profile_stages()
        _mark_unfetched(self.index, samples, fetch, status, messages)
        kept = self._repair.fill(samples, status, messages, out, epoch)
        if fetch is not None:  # the batch's members may be evicted now (without a disk cache: removed)
            self.index.remote.release(self.index, samples.tolist())
            self._start_fetched()
        samples = kept
        stats = self._stats
        stats["images"] += len(samples)
        stats["batches"] += 1
        stats["engine_s"] += finished - submitted
        stats["wait_s"] += finished - started
        return samples, out, epoch

    @property
    def repair(self) -> Repair:
        """The repair of failed slots (a hybrid runner replaces its tail's failures there)."""
        return self._repair

    def labels_of(self, samples: torch.Tensor) -> torch.Tensor:
        """int64 labels of these samples."""
        return self._labels[samples]

    def discard(self, ticket: int) -> None:
        """Drops a submitted batch nobody will take (an abandoned epoch), so that its
        engine job and output buffer are released."""
        if os.getpid() != self._owner_pid:
            return  # a forked child (e.g. collecting garbage in a DataLoader worker): no engine threads here
        with self._lock:
            entry = self._pending.pop(ticket, None)
        if entry is not None and entry[1] is not None:
            self.producer.discard(entry[1])
        elif entry is not None:
            entry[4].cancel()  # its bytes were not all fetched yet: the engine never had it
        if entry is not None:
            _release(self.index, entry[0], entry[4])

    def _profile_stages(self) -> None:
        """A zero-length "fastload.engine_stages" range whose arguments are the engine
        threads' milliseconds per stage since the previous batch (all threads), so a trace shows
        read/decode/augment per batch beside the model; each sample's stages are also ranges
        on the engine threads themselves."""
        now = self._engine.thread_times()[0].sum(0)
        spent = {f"{name}_ms": 1e3 * float(v) for name, v in zip(self._stages, now - self._times_at_batch)}
        self._times_at_batch = now
        profile_summary("fastload.engine_stages", spent)

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """Counters: images, batches, skipped, pil_fallback, gpu_cpu_fallback; engine_s
        (submit to result, summed) and wait_s (time result() waited); threads;
        queue_depth (batches in the engine when one was taken, on average: the loader's
        prefetch depth when the engine keeps up);
        `stages_s` {stage: seconds the engine threads spent in it, summed} for the stages
        read, header, decode, augment; `cpu_s`, the CPU time of those threads (below the
        stages' sum when other processes take the cores); and `thread_stages_s` (one such
        dict per thread, with its "samples" and "cpu_s"); `skipped_samples`, the samples
        replaced under on_error="skip" (fastload.stats.skipped_record dicts; the loader
        moves them to the top of its stats). `reset` starts them afresh after returning them."""
        now = self._engine.thread_times()
        seconds, samples, cpu = (now[i] - self._times_at_reset[i] for i in range(3))
        out = dict(self._stats, threads=self.num_threads)
        queued = out.pop("queued")
        out["queue_depth"] = queued / out["batches"] if out["batches"] else None
        out["stages_s"] = {name: float(v) for name, v in zip(self._stages, seconds.sum(0))}
        out["cpu_s"] = float(cpu.sum())
        out["thread_stages_s"] = [dict({name: float(v) for name, v in zip(self._stages, row)}, samples=int(n),
                                       cpu_s=float(c)) for row, n, c in zip(seconds, samples, cpu)]
        out["skipped_samples"] = self._repair.skipped_samples.records()
        if reset:
            self._stats.update(_COUNTERS)
            self._repair.skipped_samples.reset()
            self._times_at_reset = now
        return out

    def close(self) -> None:
        """Stops the engine's threads and drops the reusable batch memory."""
        self._engine.close()
        self.producer.close()

    def __del__(self):
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()


def _timed_out_error(index: SampleIndex, samples: torch.Tensor, timeout: float) -> RuntimeError:
    indices = samples.tolist()
    shown = ", ".join(index.source(i) for i in indices[:4]) + (", ..." if len(indices) > 4 else "")
    return RuntimeError(
        f"DataLoader timed out after {timeout:g} seconds. fastload: the native engine had not finished the "
        f"batch of samples {indices} ({shown}). A read that never returns (a hung network file system) or an "
        "overloaded machine: check the files' storage, or raise timeout (0: no limit).")


def _mark_unfetched(index: SampleIndex, samples: torch.Tensor, fetch: Any, status: torch.Tensor,
                    messages: List[str]) -> None:
    """Under on_error="skip" a batch whose fetch failed still went to the engine: its
    samples whose bytes never came are unreadable, with the fetch's error as their message
    (what the engine read there is a hole of the cache file, not the sample)."""
    failure = fetch.exception() if fetch is not None else None
    if failure is not None:
        for slot in index.remote.missing(index, samples.tolist()):
            status[slot], messages[slot] = contract.READ_ERROR, str(failure)


def _release(index: SampleIndex, samples: torch.Tensor, fetch: Any) -> None:
    """A batch of remote samples (`fetch` not None) lets its members go: made, dropped or failed."""
    if fetch is not None:
        index.remote.release(index, samples.tolist())
