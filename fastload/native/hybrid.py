"""HybridRunner: the engine runs the native prefix, Python runs the tail per sample.

The engine decodes and augments each batch's prefix (crop window, resize, flip; uint8
unless the prefix itself converts) in its threads, GIL released, as on the native path.
Then each sample's output goes through the tail (fastload.augment.tail), and the outputs
are collated with torch's default_collate, as torch's DataLoader would: `[tail outputs
collated, labels int64 [B]]`. A tail output default_collate cannot batch (e.g. a PIL
image) raises its TypeError, with a note naming the tail.

Where the tail runs:
- HybridRunner(parallel="inline"): on the thread that asks for the batch, each sample
  under its own seed (reproducible; see fastload.augment.tail), while the engine's threads
  decode the next batches;
- HybridRunner(parallel="threads"): on a pool of `num_threads` Python threads (PIL and
  torch release the GIL in their pixel loops); draws are not reproducible (the global
  generators are shared by the threads);
- ProcessHybridRunner: whole batches (prefix, tail inline, collation) in worker
  processes, each with its own engine: the tail's Python runs in parallel, off the
  training loop's thread, and as reproducibly as inline.

hybrid_runner(tail_on=...) picks one; "auto" gives a loader worker processes when it has
num_workers >= 1 (as torch's DataLoader runs the dataset's Python) and the inline tail
without: benchmarks/hybrid_tail.py measures the three (figures in fastload/native/README.md
and benchmarks/RESULTS.md).

A torchvision dataset's target_transform runs on each batch's labels after the tail
(`labels=`), or after a fully native batch (LabelledRunner).

Failures of the tail follow on_error like a decode failure: "raise" re-raises the tail's
own exception with a note naming the transform, the sample and its file; "skip" fills the
slot with the next readable sample in dataset order (its prefix on the engine, then the
tail), counted in stats()["skipped"] and listed in stats()["skipped_samples"] (a worker
process's list goes to the parent with each batch; the parent counts and warns).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Set

import torch

from fastload.errors import DecodeError
from fastload.native.producers import HELD_BY_LOOP
from fastload.native.repair import MAX_SKIP_ATTEMPTS
from fastload.native.runner import NativeRunner
from fastload.augment.tail import BatchSlots, GlobalDraws, Tail, _TailError, sample_seed
from fastload.source.index import SampleIndex
from fastload.stats import SkippedSamples
from fastload.transfer.buffers import BatchBuffers, SharedBatches

PARALLEL = ("inline", "threads")


class HybridRunner:
    """A NativeRunner for the prefix plus the Python tail; the same interface (submit /
    result / discard / start_pass / set_seed / stats / close, `plan`, `on_error`).

    Args:
        index, plan, num_threads, on_error, description: as NativeRunner's (the engine
            always runs on the host: the tail needs host images).
        tail: the Python transforms after the prefix.
        pin_memory: pin the collated batches (as torch's pin_memory=True).
        parallel: "inline" or "threads" (see the module docstring).
        labels: None, or what makes a batch's labels from the class indexes int64 [B]
            (a torchvision dataset's target_transform, collated: Conversion.collate_labels).
        shared_batches: make each batch on fresh shared memory (a worker process's
            runner, whose batches are sent to the parent).
        timeout: seconds the engine may take over a batch (0: no limit; NativeRunner's).
            The tail runs on the caller's thread (or threads of this process), where a
            call that never returns cannot be stopped: as torch's DataLoader without
            workers, it has no limit.
    """

    def __init__(self, index: SampleIndex, plan: Any, tail: Tail, *, num_threads: int = 1, pin_memory: bool = False,
                 on_error: str = "raise", description: str = "hybrid", parallel: str = "inline",
                 labels: Optional[Callable[[torch.Tensor], Any]] = None, shared_batches: bool = False,
                 timeout: float = 0):
        if parallel not in PARALLEL:
            raise ValueError(f"fastload.HybridRunner: expected parallel in {PARALLEL}, got {parallel!r}.")
        # PIL images are made from HWC pixels: a channels_last batch gives them without a copy.
        memory_format = torch.channels_last if tail.takes_pil else torch.contiguous_format
        self.native = NativeRunner(index, plan, num_threads=num_threads, on_error=on_error,
                                   memory_format=memory_format, decode_on="cpu", description=description,
                                   timeout=timeout)
        self.tail = tail
        self.index = index
        self.parallel = parallel
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.description = description
        self.decode_on = "cpu"
        self._pool = ThreadPoolExecutor(max(1, int(num_threads)), thread_name_prefix="fastload-tail",
                                        initializer=torch.set_num_threads, initargs=(1,)) \
            if parallel == "threads" else None
        self._tail_s = 0.0
        self._labels = labels
        # The tail's batches are made one at a time in result(): the one being made and
        # those the training loop holds. In a worker process each goes to the parent:
        # made on shared memory, it travels as a handle, not as a copy.
        self._batches = SharedBatches() if shared_batches else BatchBuffers(capacity=1 + HELD_BY_LOOP)

    # -- the NativeRunner interface -------------------------------------------------------
    @property
    def plan(self) -> Any:
        return self.native.plan

    @property
    def on_error(self) -> str:
        return self.native.on_error

    @on_error.setter
    def on_error(self, on_error: str) -> None:
        self.native.on_error = on_error

    @property
    def num_threads(self) -> int:
        return self.native.num_threads

    def start_pass(self) -> None:
        self.native.start_pass()

    def set_seed(self, seed: int) -> None:
        self.native.set_seed(seed)

    def keep_in_flight(self, depth: int) -> None:
        # The prefix batches are read by the tail inside result(): only those in flight.
        self.native.keep_in_flight(depth)

    def submit(self, indices: List[int], epoch: int) -> int:
        return self.native.submit(indices, epoch)

    def discard(self, ticket: int) -> None:
        self.native.discard(ticket)

    def result(self, ticket: int) -> List[Any]:
        """Waits for the prefix of a submitted batch, runs the tail on each sample, and
        returns [collated tail outputs, labels int64 [B]]."""
        from torch.utils.data import default_collate

        samples, images, epoch = self.native.collect(ticket)
        started = time.perf_counter()
        with torch.profiler.record_function("fastload.python_tail"), _one_intra_op_thread():
            slots = BatchSlots(len(samples), self._batches)
            outputs, failures = self._run(images, samples, epoch, slots)
            if failures:
                samples = samples.clone()
                for slot, error in failures:
                    outputs[slot] = self._recover(slot, error, images, samples, epoch)
            try:
                batch = slots.collate(outputs)
                if batch is None:
                    batch = default_collate(outputs)
            except (TypeError, RuntimeError) as error:
                from fastload.errors import add_note

                add_note(error, f"fastload: collating the outputs of the Python transforms [{self.tail.description}] "
                                f"(a hybrid pipeline's tail) as torch's default_collate does; end the tail with "
                                "a transform that returns tensors (e.g. ToTensor or v2.ToImage).")
                raise
        labels = self.native.labels_of(samples)
        if self._labels is not None:
            labels = self._labels(labels)
        self._tail_s += time.perf_counter() - started
        out = [batch, labels]
        if self.pin_memory:
            from torch.utils.data._utils.pin_memory import pin_memory

            out = pin_memory(out)
        return out

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """NativeRunner's counters plus tail_s (time spent running the tail and collating)."""
        out = dict(self.native.stats(reset=reset), tail_s=self._tail_s)
        if reset:
            self._tail_s = 0.0
        return out

    def close(self) -> None:
        self.native.close()
        self._batches.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the tail -------------------------------------------------------------------------
    def _run(self, images: torch.Tensor, samples: torch.Tensor, epoch: int, slots: BatchSlots):
        """(outputs, [(slot, _TailError)]) of one batch; a failed slot's output is None.
        The tail's conversion writes straight into `slots` (its batch)."""
        indices = samples.tolist()
        outputs: List[Any] = [None] * len(indices)
        failures = []
        if self._pool is None:
            seed = self.plan.seed
            with GlobalDraws() as draws:
                for slot, index in enumerate(indices):
                    draws.seed(sample_seed(seed, epoch, index))
                    try:
                        outputs[slot] = self.tail(images[slot], slots, slot)
                    except _TailError as error:
                        failures.append((slot, error))
            return outputs, failures

        def run_one(slot: int):
            try:
                return self.tail(images[slot], slots, slot), None
            except _TailError as error:
                return None, error

        for slot, (output, error) in enumerate(self._pool.map(run_one, range(len(indices)))):
            outputs[slot] = output
            if error is not None:
                failures.append((slot, error))
        return outputs, failures

    def _recover(self, slot: int, error: _TailError, images: torch.Tensor, samples: torch.Tensor, epoch: int) -> Any:
        """The output for a slot whose tail raised: re-raised with a note under "raise";
        under "skip" the tail's output of the next readable sample."""
        policy = self.native.repair.policy
        sample = int(samples[slot])
        if not policy.skips:
            policy.handle(error.error, self.tail.note(error, sample, self.index.source(sample)))
        failed: Set[int] = set()
        last: Optional[_TailError] = error
        for _ in range(MAX_SKIP_ATTEMPTS):
            self.native.repair.replace(slot, sample, samples, images, epoch, failed, self._tail_reason(last))
            sample = int(samples[slot])
            try:
                with GlobalDraws() as draws:
                    draws.seed(sample_seed(self.plan.seed, epoch, sample))
                    output = self.tail(images[slot])
            except _TailError as again:
                last = again
                continue
            self.native.repair.count_skipped(failed, epoch)
            return output
        raise DecodeError(f"{MAX_SKIP_ATTEMPTS} consecutive samples failed in the Python transforms; last: "
                          f"{self.tail.note(last, sample, self.index.source(sample))} ({last.error!r})",
                          sample, self.index.source(sample))

    def _tail_reason(self, error: _TailError) -> str:
        """What failed, for stats()["skipped_samples"]: the tail's exception and transform."""
        return (f"{type(error.error).__name__}: {error.error} (in the Python transform "
                f"{self.tail.transforms[error.position]!r})")


@contextlib.contextmanager
def _one_intra_op_thread():
    """torch's intra-op threads set to 1 inside the block (restored after it), as torch's
    DataLoader sets them in its workers: the tail's tensor ops are per sample and small,
    and split over cores that the engine threads keep busy they spin instead of working
    (a RandAugment tail on 2 cores, 2 intra-op threads: 5.4x the CPU time of 1). The
    setting is the calling thread's (OpenMP), so the training loop's own ops on this
    thread get their threads back between batches."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# -- the tail in worker processes ---------------------------------------------------------

_WORKER: Optional[HybridRunner] = None  # this worker process's runner (processes mode)


_BUSY: Any = None  # the parent's board of (pid, ticket) rows; this worker's row is _ROW
_ROW = -1


def _start_worker(index: SampleIndex, plan: Any, tail: Tail, on_error: str, busy: Any = None) -> None:
    global _WORKER, _BUSY, _ROW
    torch.set_num_threads(1)  # as torch's DataLoader workers: the cores are the workers'
    _WORKER = HybridRunner(index, plan, tail, num_threads=1, on_error=on_error, parallel="inline",
                           shared_batches=True)
    # The skipped samples go to the parent with each batch (_work): it lists, counts and warns.
    _WORKER.native.repair.skipped_samples.warn = False
    if busy is not None:
        _BUSY, _ROW = busy, _claim_row(busy)
    _exit_with_parent(os.getppid())


def _claim_row(busy: Any) -> int:
    """This worker's row of `busy` (pid, ticket pairs): the first free one, else -1. The
    parent reads it to say which batch a dead or stuck worker was making."""
    with busy.get_lock():
        for row in range(len(busy) // 2):
            if busy[2 * row] == 0 or busy[2 * row] == os.getpid():
                busy[2 * row], busy[2 * row + 1] = os.getpid(), -1
                return row
    return -1


def _mark_busy(ticket: int) -> None:
    if _BUSY is not None and _ROW >= 0:
        _BUSY[2 * _ROW + 1] = ticket


# How often a worker looks for its parent (torch's DataLoader workers poll alike).
PARENT_POLL_S = 1.0


def _exit_with_parent(parent: int) -> None:
    """Ends this worker once its parent process is gone. A parent that ends without closing
    the pool (os._exit, a kill) leaves its workers blocked on a queue whose write end they
    hold themselves: they would live on, holding the parent's pipes open."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="fastload-parent-watch", daemon=True).start()


def _work(indices: List[int], epoch: int, seed: int, on_error: str, pass_id: int, ticket: int = -1):
    _mark_busy(ticket)
    runner = _WORKER
    if runner.plan.seed != seed:
        runner.set_seed(seed)
    if runner.on_error != on_error:
        runner.on_error = on_error
    if getattr(runner, "_pass_id", None) != pass_id:
        runner._pass_id = pass_id
        runner.start_pass()
    try:
        batch = runner.result(runner.submit(indices, epoch))
    finally:
        _mark_busy(-1)
    return batch, dict(runner.stats(reset=True), pid=os.getpid())


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
            self._pool = ProcessPoolExecutor(self.num_threads, mp_context=context, initializer=_start_worker,
                                             initargs=(self.index, self.plan, self.tail, self._on_error, self._busy))
        ticket, self._tickets = self._tickets, self._tickets + 1
        indices = list(indices)
        future = self._pool.submit(_work, indices, epoch, int(self.plan.seed), self._on_error, self._pass_id, ticket)
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

    def close(self) -> None:
        """Stops the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._jobs.clear()

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

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None and os.getpid() == self._owner_pid:  # not in a forked child
            pool.shutdown(wait=False, cancel_futures=True)


class LabelledRunner:
    """A fully native runner whose batch labels go through Python: [images, labels(class
    indexes int64 [B])] (a torchvision dataset's target_transform, collated). Everything
    else is the wrapped runner's."""

    def __init__(self, runner: Any, labels: Callable[[torch.Tensor], Any]):
        self.runner, self._labels = runner, labels

    def result(self, ticket: int) -> List[Any]:
        images, labels = self.runner.result(ticket)
        labels = self._labels(labels.cpu())
        if getattr(self.runner, "pin_memory", False):
            from torch.utils.data._utils.pin_memory import pin_memory

            labels = pin_memory(labels)
        return [images, labels]

    def __getattr__(self, name: str) -> Any:
        runner = self.__dict__.get("runner")
        if runner is None:  # (not yet initialised: e.g. a copy being built)
            raise AttributeError(name)
        return getattr(runner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("runner", "_labels"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.runner, name, value)


# Where a hybrid loader's tail runs (hybrid_runner's tail_on; "auto": see there).
TAIL_ON = ("auto", "inline", "threads", "processes")


def check_tail_on(tail_on: Any) -> str:
    """`tail_on` if it is one of TAIL_ON, else a ValueError naming them."""
    if tail_on not in TAIL_ON:
        raise ValueError(f"fastload.DataLoader: expected tail_on in {TAIL_ON}, got {tail_on!r}.")
    return tail_on


def hybrid_runner(index: SampleIndex, plan: Any, tail: Tail, *, num_workers: int, pin_memory: bool, on_error: str,
                  description: str, tail_on: str = "auto",
                  labels: Optional[Callable[[torch.Tensor], Any]] = None, timeout: float = 0) -> Any:
    """The runner a loader gets for a hybrid pipeline.

    timeout: seconds a batch may take (torch's DataLoader timeout; 0: no limit): the whole
    batch in a worker process on the "processes" runner, the engine's part on the others.

    tail_on: "inline" (max(1, num_workers) engine threads, the tail on the consumer
    thread), "threads" (the same, the tail on a pool of num_workers Python threads: draws
    not reproducible), "processes" (num_workers worker processes making whole batches,
    ProcessHybridRunner), or "auto": as torch's DataLoader runs the dataset's Python, in
    num_workers worker processes ("processes"), in the loop's own process without workers
    ("inline"). Worker processes keep the tail off the training loop's thread, and a heavy
    tail runs on every core: on 2 cores AugMix 1.37x torch's DataLoader in processes
    against 0.76x inline, RandAugment 1.68x against 1.55x, TrivialAugmentWide 1.68x
    against 1.73x (benchmarks/RESULTS.md, "Training recipes")."""
    if check_tail_on(tail_on) == "auto":
        tail_on = "processes" if num_workers >= 1 else "inline"
    if tail_on == "processes":
        return ProcessHybridRunner(index, plan, tail, num_threads=max(1, num_workers), pin_memory=pin_memory,
                                   on_error=on_error, description=description, labels=labels, timeout=timeout)
    return HybridRunner(index, plan, tail, num_threads=max(1, num_workers), pin_memory=pin_memory, on_error=on_error,
                        description=description, parallel=tail_on, labels=labels, timeout=timeout)
