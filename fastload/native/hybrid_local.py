"""HybridRunner: the engine runs the native prefix, Python runs the tail per sample, in
this process: inline on the thread that asks for the batch, or on a pool of threads.
What every hybrid runner does with a batch: fastload/native/hybrid.py.

- parallel="inline": each sample under its own seed (reproducible; see
  fastload.augment.tail), while the engine's threads decode the next batches;
- parallel="threads": on a pool of `num_threads` Python threads (PIL and torch release
  the GIL in their pixel loops); draws are not reproducible (the global generators are
  shared by the threads).

Worker processes run this runner inline, one per process (fastload/native/hybrid_workers.py,
fastload/native/hybrid_processes.py); fastload/native/hybrid.py chooses among them.
Failures of the tail follow on_error as described there.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Set

import torch

from fastload.augment.tail import BatchSlots, GlobalDraws, Tail, TailError, sample_seed
from fastload.errors import DecodeError
from fastload.native.producers import HELD_BY_LOOP
from fastload.native.repair import MAX_SKIP_ATTEMPTS
from fastload.native.runner import NativeRunner
from fastload.source.index import SampleIndex
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
        self.last_samples: Optional[torch.Tensor] = None
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
        self.last_samples = samples  # (as NativeRunner's: the samples the batch holds)
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
        """(outputs, [(slot, TailError)]) of one batch; a failed slot's output is None.
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
                    except TailError as error:
                        failures.append((slot, error))
            return outputs, failures

        def run_one(slot: int):
            try:
                return self.tail(images[slot], slots, slot), None
            except TailError as error:
                return None, error

        for slot, (output, error) in enumerate(self._pool.map(run_one, range(len(indices)))):
            outputs[slot] = output
            if error is not None:
                failures.append((slot, error))
        return outputs, failures

    def _recover(self, slot: int, error: TailError, images: torch.Tensor, samples: torch.Tensor, epoch: int) -> Any:
        """The output for a slot whose tail raised: re-raised with a note under "raise";
        under "skip" the tail's output of the next readable sample."""
        policy = self.native.repair.policy
        sample = int(samples[slot])
        if not policy.skips:
            policy.handle(error.error, self.tail.note(error, sample, self.index.source(sample)))
        failed: Set[int] = set()
        last: Optional[TailError] = error
        for _ in range(MAX_SKIP_ATTEMPTS):
            self.native.repair.replace(slot, sample, samples, images, epoch, failed, self._tail_reason(last))
            sample = int(samples[slot])
            try:
                with GlobalDraws() as draws:
                    draws.seed(sample_seed(self.plan.seed, epoch, sample))
                    output = self.tail(images[slot])
            except TailError as again:
                last = again
                continue
            self.native.repair.count_skipped(failed, epoch)
            return output
        raise DecodeError(f"{MAX_SKIP_ATTEMPTS} consecutive samples failed in the Python transforms; last: "
                          f"{self.tail.note(last, sample, self.index.source(sample))} ({last.error!r})",
                          sample, self.index.source(sample))

    def _tail_reason(self, error: TailError) -> str:
        """What failed, for stats()["skipped_samples"]: the tail's exception and transform."""
        return (f"{type(error.error).__name__}: {error.error} (in the Python transform "
                f"{self.tail.transforms[error.position]!r})")


@contextlib.contextmanager
def _one_intra_op_thread():
    """torch's intra-op threads set to 1 inside the block (restored after it), as torch's
    DataLoader sets them in its workers: the tail's tensor ops are per sample and small,
    and split over cores that the engine threads keep busy they spin instead of working
    (benchmarks/RESULTS.md, "Where a hybrid tail runs", gives the cost). The
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
