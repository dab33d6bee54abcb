"""Hybrid runners: the engine runs the native prefix, Python runs the tail per sample;
`hybrid_runner` picks where the tail runs.

The engine decodes and augments each batch's prefix (crop window, resize, flip; uint8
unless the prefix itself converts) in its threads, GIL released, as on the native path.
Then each sample's output goes through the tail (fastload.augment.tail), and the outputs
are collated with torch's default_collate, as torch's DataLoader would: `[tail outputs
collated, labels int64 [B]]`. A tail output default_collate cannot batch (e.g. a PIL
image) raises its TypeError, with a note naming the tail.

Where the tail runs (one module per runner kind):
- HybridRunner(parallel="inline") (hybrid_local.py): on the thread that asks for the batch, each sample
  under its own seed (reproducible; see fastload.augment.tail), while the engine's threads
  decode the next batches;
- HybridRunner(parallel="threads") (hybrid_local.py): on a pool of `num_threads` Python threads (PIL and
  torch release the GIL in their pixel loops); draws are not reproducible (the global
  generators are shared by the threads);
- ProcessHybridRunner (hybrid_processes.py; the workers' side: hybrid_workers.py): whole
  batches (prefix, tail inline, collation) in worker processes, each with its own engine:
  the tail's Python runs in parallel, off the training loop's thread, and as reproducibly
  as inline.

hybrid_runner(tail_on=...) picks one; "auto" gives a loader worker processes when it has
num_workers >= 1 (as torch's DataLoader runs the dataset's Python) and the inline tail
without: benchmarks/hybrid_tail.py measures the three (figures in benchmarks/RESULTS.md).

A torchvision dataset's target_transform runs on each batch's labels after the tail
(`labels=`), or after a fully native batch (LabelledRunner, labelled.py).

Failures of the tail follow on_error like a decode failure: "raise" re-raises the tail's
own exception with a note naming the transform, the sample and its file; "skip" fills the
slot with the next readable sample in dataset order (its prefix on the engine, then the
tail), counted in stats()["skipped"] and listed in stats()["skipped_samples"] (a worker
process's list goes to the parent with each batch; the parent counts and warns).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from fastload.augment.tail import Tail
from fastload.native.hybrid_local import HybridRunner
from fastload.native.hybrid_processes import ProcessHybridRunner
from fastload.native.protocol import Runner
from fastload.source.index import SampleIndex


# Where a hybrid loader's tail runs (hybrid_runner's tail_on; "auto": see there).
TAIL_ON = ("auto", "inline", "threads", "processes")


def check_tail_on(tail_on: Any) -> str:
    """`tail_on` if it is one of TAIL_ON, else a ValueError naming them."""
    if tail_on not in TAIL_ON:
        raise ValueError(f"fastload.DataLoader: expected tail_on in {TAIL_ON}, got {tail_on!r}.")
    return tail_on


def hybrid_runner(index: SampleIndex, plan: Any, tail: Tail, *, num_workers: int, pin_memory: bool, on_error: str,
                  description: str, tail_on: str = "auto",
                  labels: Optional[Callable[[torch.Tensor], Any]] = None, timeout: float = 0) -> Runner:
    """The runner a loader gets for a hybrid pipeline.

    timeout: seconds a batch may take (torch's DataLoader timeout; 0: no limit): the whole
    batch in a worker process on the "processes" runner, the engine's part on the others.

    tail_on: "inline" (max(1, num_workers) engine threads, the tail on the consumer
    thread), "threads" (the same, the tail on a pool of num_workers Python threads: draws
    not reproducible), "processes" (num_workers worker processes making whole batches,
    ProcessHybridRunner), or "auto": as torch's DataLoader runs the dataset's Python, in
    num_workers worker processes ("processes"), in the loop's own process without workers
    ("inline"). Worker processes keep the tail off the training loop's thread, and a heavy
    tail runs on every core (figures: benchmarks/RESULTS.md, "Training recipes" and "Where
    a hybrid tail runs")."""
    if check_tail_on(tail_on) == "auto":
        tail_on = "processes" if num_workers >= 1 else "inline"
    if tail_on == "processes":
        return ProcessHybridRunner(index, plan, tail, num_threads=max(1, num_workers), pin_memory=pin_memory,
                                   on_error=on_error, description=description, labels=labels, timeout=timeout)
    return HybridRunner(index, plan, tail, num_threads=max(1, num_workers), pin_memory=pin_memory, on_error=on_error,
                        description=description, parallel=tail_on, labels=labels, timeout=timeout)
