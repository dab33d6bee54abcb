"""The worker-process side of ProcessHybridRunner: each worker's own HybridRunner, the
batch it is making (a row of the parent's shared board), and its exit with the parent.

A worker process is started by the parent's ProcessPoolExecutor with `start_worker`
(its initializer) and runs `work` per batch: the prefix on an engine of one thread, the
tail inline, the collation, on fresh shared memory. The runner is this process's global
(`_WORKER`): a pool initializer has nowhere else to leave it for the calls that follow.
"""

from __future__ import annotations

import os
import time
from typing import Any, List, Optional

import torch

from fastload.augment.tail import Tail
from fastload.native.hybrid_local import HybridRunner
from fastload.native.protocol import LazyIndex
from fastload.source.index import SampleIndex

_WORKER: Optional[HybridRunner] = None  # this worker process's runner (processes mode)


_BUSY: Any = None  # the parent's board of (pid, ticket) rows; this worker's row is _ROW
_ROW = -1


_TRACE: Optional[LazyIndex] = None  # a lazily traced dataset's trace: this process's copy, filled per batch


def start_worker(index: SampleIndex, plan: Any, tail: Tail, on_error: str, busy: Any = None,
                 trace: Optional[LazyIndex] = None) -> None:
    global _WORKER, _BUSY, _ROW, _TRACE
    torch.set_num_threads(1)  # as torch's DataLoader workers: the cores are the workers'
    _WORKER = HybridRunner(index, plan, tail, num_threads=1, on_error=on_error, parallel="inline",
                           shared_batches=True)
    # The skipped samples go to the parent with each batch (_work): it lists, counts and warns.
    _WORKER.native.repair.skipped_samples.warn = False
    if trace is not None:  # `index` is the trace's own (forked): its path bytes move as it grows
        trace.attach(_WORKER.native, only=True)
        _WORKER.native.repair.trace = trace  # a replacement sample (on_error="skip") traced here
        _TRACE = trace
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


def work(indices: List[int], epoch: int, seed: int, on_error: str, pass_id: int, ticket: int = -1,
         traced: Optional[List[Any]] = None):
    """The batch of `indices` and this worker's counters (with the samples the batch holds).
    `traced`: the parent's trace of these indexes (LazyTrace.export), taken in first."""
    _mark_busy(ticket)
    if traced is not None and _TRACE is not None:
        _TRACE.adopt(traced)
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
    samples = runner.last_samples.tolist()  # (a list: a tensor would travel as a shared-memory segment)
    return batch, dict(runner.stats(reset=True), pid=os.getpid(), samples=samples)
