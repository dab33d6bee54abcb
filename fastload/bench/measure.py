"""Measures one contender in a fresh process: throughput, time to first batch, memory.

Each contender runs in its own child process (`python -m fastload.bench.measure CONFIG OUT`)
so that its memory figures are its own, that no library it imports (DALI, torch's
workers) lingers into the next one, and that a crash costs one row, not the table.

In the child:
  1. index the data (untimed: torchvision's folder scan, a shard list);
  2. t0; build the loader; take the first batch -> `first_batch_s`;
  3. warm up, then time a window of whole batches (`plan_window` says which) ->
     `images_per_s`; the CPU time of the child's process tree and of the whole machine over
     that window give `cpu_ms_per_image` and `others_cpu_pct` (the share of the machine
     other processes used: noise).
The parent polls the child's process tree (workers included) every POLL_S for RSS and
PSS, and keeps the peaks.

The timed window (every contender alike; `plan_window`):
  - Prefetch depth D = max(2, 2 x workers) batches: the most any contender keeps in
    flight. torch's DataLoader holds prefetch_factor (2) x num_workers; fastload's native
    feed max(2, prefetch_factor) (fastload/loader.py, `_native_feed`) and its process
    hybrid 2 x workers (`min_depth` in fastload/native/hybrid_processes.py); DALI's prefetch queue 2.
  - Warm-up: at least D + 1 batches (the first included). Loaders make up to D batches
    while the first one is awaited; taking D + 1 consumes that start-up backlog, so the
    clock starts in the steady state, not on batches made for free before it.
  - Minimum window: WINDOW_DEPTHS (20) x D batches. At t0 at most D batches were asked
    for before the clock started (what is in flight); in the steady state as much is in
    flight at the end, uncounted, but the two need not match exactly: the bias is at most
    D / window = 5%, the size of run-to-run noise. `--images` defaults to this window.
  - Epochs: when warm-up + window fit in one epoch, the window lies inside epoch 0 and
    times no epoch start, for everyone. Otherwise the warm-up is all of epoch 0 and the
    window is whole epochs (enough for the minimum), each started by a fresh epoch iterator
    after t0: nothing is prefetched at t0 (loaders do not prefetch across an epoch end;
    DALI's 2 batches are within the bound), nothing is in flight at the end, and every
    contender times exactly as many epoch starts (`window.epoch_starts` in the result).
  - Small data: an epoch start costs a pipeline refill (up to about D / 2 batches of idle
    workers). Whole epochs shorter than EPOCH_DEPTHS (10) x D batches may give that more
    than 5%: the result carries a "small data" warning; epochs under REFUSE_DEPTHS (2) x D
    batches (the whole epoch fits in the prefetch) are refused, with the data size needed.
  - A window shorter than the minimum (`--images` below it) runs, with a "short window"
    warning. Warnings travel in the result (`warnings`); the table and plot mark the row.

Example:
    >>> from fastload.bench.measure import MeasureConfig, plan_window
    >>> config = MeasureConfig(contender="baseline", root="/data", workers=2)
    >>> plan = plan_window(config, epoch_batches=10_000)
    >>> plan.prefetch_depth, plan.warmup_batches, plan.timed_batches, plan.whole_epochs
    (4, 5, 80, 0)
    >>> plan = plan_window(config, epoch_batches=15)  # 2000 images of 128: whole epochs
    >>> plan.warmup_batches, plan.whole_epochs, plan.timed_batches, plan.warnings[0][:10]
    (15, 6, 90, 'small data')
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from fastload.bench.procfs import ProcessTree, system_busy_seconds

POLL_S = 0.05  # RSS poll period: short enough to catch peaks, cheap (~0.1 ms a poll)
PSS_EVERY = 4  # PSS (smaps_rollup walks every mapping) every 4th poll
STDERR_TAIL = 4000  # characters of the child's stderr kept to explain a failure

PREFETCH_FACTOR = 2  # batches per worker in flight: torch's default prefetch_factor
MIN_DEPTH = 2  # fastload's native feed keeps at least 2 in flight; DALI's queue is 2
WINDOW_DEPTHS = 20  # timed batches per batch of prefetch depth: a bias of at most 1/20
EPOCH_DEPTHS = 10  # whole epochs shorter than this many depths: "small data"
REFUSE_DEPTHS = 2  # epochs shorter than this many depths: refused


def prefetch_depth(workers: int) -> int:
    """The most batches any contender keeps in flight with `workers` workers or threads."""
    return max(MIN_DEPTH, PREFETCH_FACTOR * workers)


def min_timed_batches(workers: int) -> int:
    """The shortest timed window, in batches, that the bench stands behind."""
    return WINDOW_DEPTHS * prefetch_depth(workers)


def min_epoch_batches(workers: int) -> int:
    """Fewer batches per epoch than this are refused."""
    return REFUSE_DEPTHS * prefetch_depth(workers)


def least_unmarked_images(workers: int, batch_size: int) -> int:
    """The fewest images per epoch whose whole epochs are not "small data"."""
    return EPOCH_DEPTHS * prefetch_depth(workers) * batch_size


def default_images(workers: int, batch_size: int) -> int:
    """`--images` when not given: the minimum window."""
    return min_timed_batches(workers) * batch_size


@dataclasses.dataclass
class MeasureConfig:
    contender: str
    root: str
    pipeline: str = "train"
    batch_size: int = 128
    workers: int = 2
    images: Optional[int] = None  # timed images (whole batches); None: the minimum window
    warmup_batches: int = 1  # at least; raised to the prefetch depth + 1
    seed: int = 0
    shards: list = dataclasses.field(default_factory=list)
    progress: bool = True
    dataset_factory: Optional[str] = None  # --dataset module:function
    recipe: Optional[str] = None  # --recipes: a recipe of fastload.bench.recipes
    dataset_images: Optional[int] = None  # samples in the data, for loaders without len()


@dataclasses.dataclass
class WindowPlan:
    """What one measurement takes before t0 and times after it (module docstring: why)."""

    prefetch_depth: int
    min_timed_batches: int
    epoch_batches: Optional[int]  # None: unknown (a loader without len() and no hint)
    warmup_batches: int  # taken before t0, the first batch included
    timed_batches: int  # at least this many (whole epochs: exactly, if epochs are as long)
    whole_epochs: int = 0  # 0: the window lies inside epoch 0; K: K whole fresh epochs
    refused: Optional[str] = None
    warnings: List[str] = dataclasses.field(default_factory=list)

    def describe(self, batch_size: int) -> str:
        """One line for the table's heading."""
        if self.whole_epochs:
            return (f"{self.whole_epochs} whole epoch(s) of {self.epoch_batches} batches timed "
                    f"({self.timed_batches * batch_size} images) after a warm-up epoch")
        return (f"{self.timed_batches} batches ({self.timed_batches * batch_size} images) timed inside one epoch "
                f"after {self.warmup_batches} warm-up batches")


def plan_window(config: MeasureConfig, epoch_batches: Optional[int]) -> WindowPlan:
    """The warm-up and timed window of `config` on epochs of `epoch_batches` batches."""
    depth = prefetch_depth(config.workers)
    minimum = min_timed_batches(config.workers)
    batch = config.batch_size
    images = default_images(config.workers, batch) if config.images is None else config.images
    timed = max(1, -(-images // batch))
    warmup = max(config.warmup_batches or 1, depth + 1)
    plan = WindowPlan(depth, minimum, epoch_batches, warmup, timed)
    need = REFUSE_DEPTHS * depth
    if epoch_batches is not None and epoch_batches < need:
        plan.refused = (
            f"the data holds {epoch_batches} batch(es) of {batch} per epoch, fewer than {need} "
            f"({REFUSE_DEPTHS} x the prefetch depth of {depth} batches with {config.workers} workers): the "
            f"whole epoch fits in what loaders prefetch; timing needs at least {need * batch} images "
            f"({EPOCH_DEPTHS * depth * batch} for no small-data warning), or a smaller --batch-size or --workers"
        )
        return plan
    if timed < minimum:
        plan.warnings.append(
            f"short window: {timed} timed batches, fewer than {minimum} ({WINDOW_DEPTHS} x the prefetch depth "
            f"of {depth}): batches made before the clock started can be up to {100 * depth / timed:.0f}% "
            f"of it; use --images {minimum * batch} or more (the default)"
        )
    if epoch_batches is not None and warmup + timed > epoch_batches:
        plan.whole_epochs = -(-timed // epoch_batches)
        plan.warmup_batches = epoch_batches
        plan.timed_batches = plan.whole_epochs * epoch_batches
        if epoch_batches < EPOCH_DEPTHS * depth:
            plan.warnings.append(
                f"small data: {epoch_batches} batches of {batch} per epoch, fewer than {EPOCH_DEPTHS * depth} "
                f"({EPOCH_DEPTHS} x the prefetch depth of {depth}): the window is {plan.whole_epochs} whole "
                f"epochs of the same images, each start (a pipeline refill) weighing more than in training; "
                f"use at least {EPOCH_DEPTHS * depth * batch} images ({(warmup + minimum) * batch} for no "
                f"epoch start in the window)"
            )
    return plan


def take_window(first_epoch: Iterator[Tuple[Any, Any]], new_epoch: Callable[[], Iterator[Tuple[Any, Any]]],
                plan: WindowPlan, start: Callable[[], None],
                on_batch: Optional[Callable[[int], None]] = None) -> Tuple[Dict[str, int], Optional[Iterator]]:
    """Takes the warm-up and the timed window of `plan`; calls `start()` at t0.

    Args:
        first_epoch: epoch 0's batches, its first batch already taken (the warm-up's first).
        new_epoch: the next epoch's batches; the loader starts that epoch on its first next().
        on_batch: called with the images of each timed batch (a progress bar).

    Returns:
        ({"warmup_batches", "batches", "images", "epoch_starts"} of what was taken, the epoch
        iterator still open (None when the window ended with an epoch): close it after
        reading the clocks.
    """
    taken = {"warmup_batches": 1, "batches": 0, "images": 0, "epoch_starts": 0}

    def count(images):
        taken["batches"] += 1
        taken["images"] += int(images.shape[0])
        if on_batch is not None:
            on_batch(int(images.shape[0]))

    if plan.whole_epochs:
        for _ in first_epoch:  # the rest of epoch 0: nothing is left in flight at t0
            taken["warmup_batches"] += 1
        start()
        for _ in range(plan.whole_epochs):
            before = taken["batches"]
            for images, _labels in new_epoch():
                count(images)
            taken["epoch_starts"] += 1
            if taken["batches"] == before:
                raise RuntimeError("fastload.bench: an epoch yielded no batch; expected at least one")
        return taken, None

    current = first_epoch

    def next_batch(timed: bool):
        nonlocal current
        try:
            return next(current)
        except StopIteration:
            current = new_epoch()
            taken["epoch_starts"] += timed
        try:
            return next(current)
        except StopIteration:
            raise RuntimeError("fastload.bench: an epoch yielded no batch; expected at least one") from None

    while taken["warmup_batches"] < plan.warmup_batches:
        next_batch(timed=False)
        taken["warmup_batches"] += 1
    start()
    while taken["batches"] < plan.timed_batches:
        images, _labels = next_batch(timed=True)
        count(images)
    return taken, current


def _first_batch_summary(images, labels) -> Dict[str, Any]:
    """Shape, dtype and a per-sample fingerprint, so tests can compare contenders' outputs."""
    import torch

    summary = {
        "shape": list(images.shape),
        "dtype": str(images.dtype).replace("torch.", ""),
        "labels_shape": list(labels.shape),
        "labels": [int(v) for v in labels.flatten()[:16]],
    }
    if images.dim() == 4 and images.is_floating_point():
        flat = images[:16].float().flatten(1)
        summary["sample_means"] = [round(float(v), 5) for v in flat.mean(1)]
        summary["sample_stds"] = [round(float(v), 5) for v in flat.std(1)]
        summary["finite"] = bool(torch.isfinite(images).all())
    return summary


def _stages_per_image(stats: Dict[str, Any]) -> Dict[str, float]:
    """{stage label: ms per sample} of a fastload loader's stats, the loop's wait last."""
    from fastload.stats import stage_times

    samples = max(1, stats.get("samples") or 0)
    out = {label: 1e3 * seconds / samples for label, seconds in stage_times(stats)}
    out["wait (loop)"] = 1e3 * (stats.get("wait_s") or 0.0) / samples
    return out


def run_in_this_process(config: MeasureConfig) -> Dict[str, Any]:
    """The child's work: the figures of one contender (never raises: failures are results)."""
    result: Dict[str, Any] = {"contender": config.contender, "pipeline": config.pipeline}
    try:
        from fastload.bench.contenders import RunConfig, get

        contender = get(config.contender)
        reason = contender.unavailable()
        if reason:
            return {**result, "status": "unavailable", "reason": reason}
        run = RunConfig(
            root=config.root, pipeline=config.pipeline, batch_size=config.batch_size,
            workers=config.workers, seed=config.seed, shards=list(config.shards),
            dataset_factory=config.dataset_factory, recipe=config.recipe,
        )
        import torch

        torch.manual_seed(config.seed)
        t = time.perf_counter()
        dataset = contender.dataset(run)
        result["index_s"] = time.perf_counter() - t

        t0 = time.perf_counter()
        loader = contender.loader(dataset, run)
        epochs = (contender.epoch(loader, run, e) for e in itertools.count())
        first_epoch = next(epochs)
        images, labels = next(first_epoch)
        result["first_batch_s"] = time.perf_counter() - t0
        result["first_batch"] = _first_batch_summary(images, labels)

        epoch_batches = contender.epoch_batches(loader, run)
        if epoch_batches is None and config.dataset_images:
            epoch_batches = config.dataset_images // config.batch_size
        plan = plan_window(config, epoch_batches)
        result["window"] = _window_record(plan)
        if plan.refused:
            first_epoch.close()
            return {**result, "status": "refused", "reason": plan.refused}

        stats = getattr(loader, "stats", None) if type(loader).__module__.startswith("fastload") else None
        tree = ProcessTree(os.getpid())
        bar = _bar(config, plan.timed_batches * config.batch_size)
        clocks: Dict[str, float] = {}

        def start() -> None:  # t0
            if stats is not None:
                stats(reset=True)  # the stage times of the timed batches only
            clocks.update(cpu=tree.cpu_seconds(), busy=system_busy_seconds(), wall=time.perf_counter())

        taken, current = take_window(first_epoch, lambda: next(epochs), plan, start,
                                     on_batch=bar.update if bar is not None else None)
        # Read the tree's CPU before the loader shuts down: exited workers' time is lost.
        elapsed = time.perf_counter() - clocks["wall"]
        cpu, busy = tree.cpu_seconds() - clocks["cpu"], system_busy_seconds() - clocks["busy"]
        if bar is not None:
            bar.close()
        count = taken["images"]
        warnings = list(plan.warnings)
        if not plan.whole_epochs and taken["epoch_starts"]:
            warnings.append(
                f"epoch starts in the window: {taken['epoch_starts']}, as the loader's epochs are shorter "
                f"than the {plan.epoch_batches} batches planned (or of unknown length): its figure includes them"
            )
        result["window"].update(warmup_batches=taken["warmup_batches"], timed_batches=taken["batches"],
                                epoch_starts=taken["epoch_starts"])
        result.update(
            status="ok",
            path=contender.path(loader),
            images=count,
            seconds=elapsed,
            images_per_s=count / elapsed,
            cpu_ms_per_image=1e3 * cpu / count,
            others_cpu_pct=100.0 * max(0.0, busy - cpu) / (elapsed * (os.cpu_count() or 1)),
            warnings=warnings,
        )
        if stats is not None:
            result["stages_ms_per_image"] = _stages_per_image(stats())
        if current is not None:
            current.close()  # ends the epoch generator: loaders shut their workers down
        del loader
        return result
    except BaseException as error:  # noqa: BLE001 -- a failing contender is a row, not a crash
        traceback.print_exc()
        message = str(error).strip().splitlines()
        return {**result, "status": "failed", "reason": f"{type(error).__name__}: {message[0] if message else ''}"[:300]}


def _window_record(plan: WindowPlan) -> Dict[str, Any]:
    """The plan as the JSON record keeps it (what was taken is filled in after the run)."""
    return {k: v for k, v in dataclasses.asdict(plan).items() if k not in ("refused", "warnings")}


def _bar(config: MeasureConfig, total: int):
    if not config.progress:
        return None
    from tqdm import tqdm

    return tqdm(
        total=total, unit="img", leave=False, file=sys.stderr,
        desc=f"{config.contender} ({config.recipe or config.pipeline})",
    )


class _TailReader(threading.Thread):
    """Forwards the child's stderr (tqdm bars, tracebacks) and keeps its tail."""

    def __init__(self, stream, forward: bool):
        super().__init__(daemon=True)
        self.stream, self.forward, self.tail = stream, forward, b""

    def run(self):
        for chunk in iter(lambda: self.stream.read1(4096), b""):
            if self.forward:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            self.tail = (self.tail + chunk)[-STDERR_TAIL:]


def run_in_subprocess(config: MeasureConfig, timeout: float = 600.0, forward_stderr: bool = True) -> Dict[str, Any]:
    """Runs one contender in a fresh interpreter and returns its figures.

    Returns:
        dict with status "ok" (and images_per_s, first_batch_s, peak_rss_mb, peak_pss_mb,
        path, ...), "unavailable" or "failed" (and reason).
    """
    with tempfile.TemporaryDirectory(prefix="fastload-bench-") as tmp:
        config_path, out_path = os.path.join(tmp, "config.json"), os.path.join(tmp, "result.json")
        with open(config_path, "w") as f:
            json.dump(dataclasses.asdict(config), f)
        child = subprocess.Popen(
            [sys.executable, "-m", "fastload.bench.measure", config_path, out_path],
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills workers too
        )
        reader = _TailReader(child.stderr, forward_stderr)
        reader.start()
        tree = ProcessTree(child.pid)
        peak_rss = peak_pss = polls = 0
        start = time.perf_counter()
        timed_out = False
        try:
            while child.poll() is None:
                peak_rss = max(peak_rss, tree.rss_bytes())
                if polls % PSS_EVERY == 0:
                    peak_pss = max(peak_pss, tree.pss_bytes())
                polls += 1
                if time.perf_counter() - start > timeout:
                    timed_out = True
                    _kill_group(child)
                    break
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C: the child is in its own session and would go on
            _kill_group(child)
            raise
        child.wait()
        reader.join(timeout=5)
        result: Optional[Dict[str, Any]] = None
        if os.path.exists(out_path):
            with open(out_path) as f:
                result = json.load(f)
        if result is None:
            tail = reader.tail.decode(errors="replace").strip().splitlines()
            last = tail[-1] if tail else ""
            why = f"timed out after {timeout:.0f} s" if timed_out else f"child exited with code {child.returncode}"
            result = {
                "contender": config.contender, "pipeline": config.pipeline, "status": "failed",
                "reason": f"{why}: {last}"[:300],
            }
        result["peak_rss_mb"] = peak_rss / 2**20
        result["peak_pss_mb"] = peak_pss / 2**20
        result["workers"] = config.workers
        result["batch_size"] = config.batch_size
        result["wall_s"] = time.perf_counter() - start
        return result


def _kill_group(child: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _child_main(config_path: str, out_path: str) -> int:
    with open(config_path) as f:
        config = MeasureConfig(**json.load(f))
    result = run_in_this_process(config)
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)
    sys.stderr.flush()
    # Skip interpreter teardown: some libraries' atexit hooks can hang or crash after
    # the figures are safe on disk; the figures are what matters.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2]))
