"""ProcessHybridRunner: a hybrid pipeline's whole batches made in worker processes.

Each worker (fastload/native/hybrid_workers.py) runs the prefix on an engine of one
thread, the tail inline and the collation; the parent hands out batches, takes them back
through shared memory in order, and says which batch a dead or stuck worker was making.
"""

from __future__ import annotations

import os
import signal
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Set

import torch

from fastload.augment.tail import Tail
from fastload.native import hybrid_workers
from fastload.native.protocol import LazyIndex
from fastload.source.index import SampleIndex
from fastload.stats import SkippedSamples


def _add_numbers(into: Dict[str, Any], values: Dict[str, Any]) -> None:
    for key, value in values.items():
        into[key] = into.get(key, 0) + value


class ProcessHybridRunner:
    """The HybridRunner interface with whole batches (prefix on an engine of one thread,
    tail inline, collation) made in `num_workers` worker processes, forked at the first
    submit: the tail's Python runs in parallel without sharing a GIL, and each sample's
    tail runs under its own seed (a worker draws on one thread), so the draws are as
    reproducible as inline. Batches come back through shared memory (torch.multiprocessing).

    Args: as HybridRunner's; num_threads is the number of worker processes; timeout:
        seconds result() waits for a batch (0: forever), as torch's DataLoader timeout;
        also settable as the `timeout` attribute.

    A worker that dies (a signal: the OOM killer, a segfault) or a batch not made within
    `timeout` raises RuntimeError in torch's words ("DataLoader worker (pid N) is killed by
    signal: Killed.", "DataLoader timed out after N seconds.") naming the batch's sample
    indices; the workers are then stopped, and the next submit (the next epoch) starts
    fresh ones.

    Each batch comes back with the samples its worker skipped (on_error="skip"); the parent
    lists them, names each in a UserWarning once, and counts each once per pass in
    stats()["skipped"], also one met by two workers (a replacement search crossing into a
    batch another worker made).
    """

    def __init__(self, index: SampleIndex, plan: Any, tail: Tail, *, num_threads: int = 1, pin_memory: bool = False,
                 on_error: str = "raise", description: str = "hybrid",
                 labels: Optional[Callable[[torch.Tensor], Any]] = None, timeout: float = 0):
        from fastload.errors import ErrorPolicy

        self.index, self.plan, self.tail = index, plan, tail
        self.timeout = timeout
        self.num_threads = max(1, int(num_threads))
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.description = description
        self.decode_on = "cpu"
        self._on_error = ErrorPolicy(on_error, owner="fastload.HybridRunner").mode
        self._pool: Any = None
        self._pool_finalizer: Optional[weakref.finalize] = None
        self._owner_pid = os.getpid()
        self._jobs: Dict[int, Any] = {}  # ticket -> (future, the batch's sample indices)
        self._workers: Dict[int, Any] = {}  # pid -> multiprocessing.Process, every worker this pool started
        self._busy: Any = None  # (pid, ticket) per worker, written by the workers (_mark_busy)
        self._tickets = 0
        self._pass_id = 0
        self._stats: Dict[str, Any] = {}
        self._skipped_samples = SkippedSamples()  # what the workers skipped, warned here
        self._skipped_this_pass: Set[int] = set()
        self._labels = labels  # applied here: the workers return class indexes
        # A lazily traced dataset's trace (fastload.trace.lazy; set by the loader):
        # the workers' copies were forked before most indexes were traced, so each batch
        # carries its indexes' traced files (LazyTrace.export/adopt).
        self.trace: Optional[LazyIndex] = None
        self.last_samples: Optional[torch.Tensor] = None  # as NativeRunner's

    @property
    def min_depth(self) -> int:
        """Batches to keep submitted so that every worker is busy (torch's default
        prefetch_factor of 2 per worker)."""
        return 2 * self.num_threads

    @property
    def on_error(self) -> str:
        return self._on_error

    @on_error.setter
    def on_error(self, on_error: str) -> None:
        from fastload.errors import ErrorPolicy

        self._on_error = ErrorPolicy(on_error, owner="fastload.HybridRunner").mode

    def start_pass(self) -> None:
        self._pass_id += 1
        self._skipped_this_pass = set()

    def set_seed(self, seed: int) -> None:
        self.plan.seed = int(seed)

    def keep_in_flight(self, depth: int) -> None:
        """Nothing to size here: each worker's engine holds the one batch it makes."""

    @property
    def timeout(self) -> float:
        return self._timeout

    @timeout.setter
    def timeout(self, timeout: float) -> None:
        if timeout < 0:
            raise ValueError(f"fastload.HybridRunner: expected timeout >= 0 (0: wait forever), got {timeout!r}.")
        self._timeout = float(timeout)

    def submit(self, indices: List[int], epoch: int) -> int:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            import torch.multiprocessing  # noqa: F401  (tensors then travel through shared memory)

            # fork: the tail's callables (lambdas included) need no pickling, as in torch's
            # workers; a worker that dies fails its batches (BrokenProcessPool), never hangs.
            context = multiprocessing.get_context("fork")
            self._busy = context.Array("q", 2 * self.num_threads)
            self._workers = {}
            self._pool = ProcessPoolExecutor(self.num_threads, mp_context=context,
                                             initializer=hybrid_workers.start_worker,
                                             initargs=(self.index, self.plan, self.tail, self._on_error, self._busy,
                                                       self.trace))
            # A finalizer, not __del__: it also runs at interpreter exit, before the modules
            # that shutting the pool down needs are torn down.
            self._pool_finalizer = weakref.finalize(self, _shutdown_pool, self._pool, self._owner_pid)
        ticket, self._tickets = self._tickets, self._tickets + 1
        indices = list(indices)
        traced = self.trace.export(indices) if self.trace is not None else None
        future = self._pool.submit(hybrid_workers.work, indices, epoch, int(self.plan.seed), self._on_error,
                                   self._pass_id, ticket, traced)
        self._jobs[ticket] = (future, indices)
        # The pool starts its workers as jobs come and forgets them once broken: kept here
        # to find the one that died and its signal.
        self._workers.update(getattr(self._pool, "_processes", None) or {})
        return ticket

    def result(self, ticket: int) -> List[Any]:
        """Waits for a submitted batch (at most `timeout` seconds where it is > 0); returns
        [collated tail outputs, labels int64 [B]].

        Raises:
            RuntimeError: the batch was not made within `timeout` ("DataLoader timed out
                after N seconds"), or a worker process died ("DataLoader worker (pid N) is
                killed by signal: ..."); the workers are stopped, the next submit starts
                fresh ones.
        """
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        future, indices = self._jobs.pop(ticket)
        try:
            batch, stats = future.result(timeout=self._timeout or None)
        except FutureTimeout:
            raise self._timed_out(ticket, indices) from None
        except BrokenProcessPool as error:
            raise self._worker_died(ticket, indices) from error
        pid = stats.pop("pid")
        samples = stats.pop("samples", None)
        self.last_samples = None if samples is None else torch.tensor(samples, dtype=torch.int64)
        stats.pop("skipped", None)  # counted here from the records, once per pass across workers
        for record in stats.pop("skipped_samples", ()):
            self._skipped_samples.add(record["sample"], record["source"], record["reason"])
            if record["sample"] not in self._skipped_this_pass:
                self._skipped_this_pass.add(record["sample"])
                self._stats["skipped"] = self._stats.get("skipped", 0) + 1
        for key, value in stats.items():
            if key == "thread_stages_s":  # one engine thread per worker: summed per worker
                per_worker = self._stats.setdefault(key, {}).setdefault(pid, {})
                for row in value:
                    _add_numbers(per_worker, row)
            elif isinstance(value, dict):
                _add_numbers(self._stats.setdefault(key, {}), value)
            elif key not in ("threads", "queue_depth"):  # a worker's own queue says nothing here
                self._stats[key] = self._stats.get(key, 0) + value
        if self._labels is not None:
            batch = [batch[0], self._labels(batch[1])]
        if self.pin_memory:
            from torch.utils.data._utils.pin_memory import pin_memory

            batch = pin_memory(batch)
        return batch

    def discard(self, ticket: int) -> None:
        job = self._jobs.pop(ticket, None)
        if job is not None:
            future, _ = job
            future.cancel()  # a batch already started is finished, and nobody takes it

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """The workers' counters summed (images, batches, ..., tail_s); skipped (distinct
        samples per pass) and skipped_samples from the workers' records; threads is the
        number of worker processes; stages_s summed, thread_stages_s one row per worker."""
        out = dict(self._stats, threads=self.num_threads)
        out.setdefault("skipped", 0)
        out["skipped_samples"] = self._skipped_samples.records()
        if "thread_stages_s" in out:
            out["thread_stages_s"] = [dict(row) for row in out["thread_stages_s"].values()]
        if reset:
            self._stats = {}
            self._skipped_samples.reset()
        return out

    def refresh_workers(self) -> None:
        """The workers stopped now and forked anew at the next submit, as torch's
        non-persistent workers are at each iter(): their copies of the dataset and of the
        tail's transforms are the loop's as they are then (a transform changed in place
        between epochs included)."""
        self.close()

    def close(self) -> None:
        """Stops the worker processes (the next submit forks new ones)."""
        self._forget_finalizer()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._jobs.clear()

    def _forget_finalizer(self) -> None:
        if self._pool_finalizer is not None:
            self._pool_finalizer.detach()
            self._pool_finalizer = None

    # -- a stuck or dead worker -----------------------------------------------------------
    def _doing(self) -> Dict[int, int]:
        """pid -> the ticket each worker is making now (-1: between batches)."""
        if self._busy is None:
            return {}
        with self._busy.get_lock():
            values = list(self._busy)
        return {values[i]: values[i + 1] for i in range(0, len(values), 2) if values[i]}

    def _batch_of(self, ticket: int, waited: int, indices: List[int]) -> str:
        if ticket == waited:
            return f"the batch of samples {indices}"
        job = self._jobs.get(ticket)
        return f"the batch of samples {job[1]}" if job is not None else "a batch"

    def _drop_pool(self, kill: bool) -> None:
        """Stops the workers (SIGKILL where `kill`: a stuck tail never returns) and forgets
        the pool and its batches: the next submit starts fresh workers."""
        pool, self._pool = self._pool, None
        self._forget_finalizer()
        if kill:
            for process in list(self._workers.values()):
                if process.exitcode is None:
                    process.kill()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._jobs.clear()
        self._workers = {}
        self._busy = None

    def _timed_out(self, ticket: int, indices: List[int]) -> RuntimeError:
        doing = self._doing()
        stuck = [f"worker pid {pid} on {self._batch_of(on, ticket, indices)}"
                 for pid, on in doing.items() if on >= 0]
        self._drop_pool(kill=True)
        where = f" ({'; '.join(stuck)})" if stuck else ""
        return RuntimeError(
            f"DataLoader timed out after {self._timeout:g} seconds. fastload: waiting for the batch of samples "
            f"{indices} made by a worker process of the hybrid pipeline [{self.tail.description}]{where}; the "
            "workers were stopped, and the next iter(loader) starts fresh ones. A Python transform that never "
            "returns (a lock, a network call) stops its worker: fix it, or raise timeout.")

    def _worker_died(self, ticket: int, indices: List[int]) -> RuntimeError:
        doing = self._doing()
        dead = []
        for pid, process in self._workers.items():
            process.join(timeout=5)  # the pool ends the others with SIGTERM: tell them apart below
            # The pool's own thread reaps its workers too: a join that loses that race sees no
            # exit code (ECHILD) until the winner has stored it, a moment later.
            for _ in range(50):
                if process.exitcode is not None:
                    break
                time.sleep(0.02)
            if process.exitcode is not None and process.exitcode != 0:
                dead.append((pid, process.exitcode))
        # The first to die is the one killed by something else than the pool's SIGTERM.
        dead.sort(key=lambda row: row[1] == -signal.SIGTERM)
        self._drop_pool(kill=True)
        context = (f"fastload: a worker process of the hybrid pipeline [{self.tail.description}] died while the "
                   f"loader waited for the batch of samples {indices}")
        advice = ("the next iter(loader) starts fresh workers. A worker killed by signal: Killed is often the OOM "
                  "killer (fewer num_workers or a smaller batch_size); Segmentation fault, a crash in a transform's "
                  "native code.")
        if not dead:
            return RuntimeError(f"DataLoader worker exited unexpectedly. {context}; {advice}")
        pid, code = dead[0]
        on = doing.get(pid, -1)
        making = f" (it was making {self._batch_of(on, ticket, indices)})" if on >= 0 else ""
        if code < 0:
            try:
                name = signal.strsignal(-code) or signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            head = f"DataLoader worker (pid {pid}) is killed by signal: {name}."
        else:
            head = f"DataLoader worker (pid {pid}) exited unexpectedly with exit code {code}."
        return RuntimeError(f"{head} {context}{making}; {advice}")


def _shutdown_pool(pool: Any, owner_pid: int) -> None:
    """Stops a runner's worker processes once the runner is gone (or the interpreter
    exits); never from a forked child, whose copy of the pool is not its own."""
    if os.getpid() == owner_pid:
        pool.shutdown(wait=False, cancel_futures=True)
