"""Measures one contender in a fresh process: throughput, time to first batch, memory.

Each contender runs in its own child process (`python -m fastload.bench.measure CONFIG OUT`)
so that its memory figures are its own, that no library it imports (DALI, torch's
workers) lingers into the next one, and that a crash costs one row, not the table.

In the child:
  1. index the data (untimed: torchvision's folder scan, a shard list);
  2. t0; build the loader; take the first batch -> `first_batch_s`;
  3. take `warmup_batches - 1` more (the first one is the first of the warm-up);
  4. time `images` images (whole batches) -> `images_per_s`; the CPU time of the child's
     process tree and of the whole machine over that window give `cpu_ms_per_image` and
     `others_cpu_pct` (the share of the machine other processes used: noise).
The parent polls the child's process tree (workers included) every POLL_S for RSS and
PSS, and keeps the peaks.

Example:
    >>> from fastload.bench.measure import MeasureConfig
    >>> MeasureConfig(contender="baseline", root="/data").images
    1536
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Dict, Optional

from fastload.bench.procfs import ProcessTree, system_busy_seconds

POLL_S = 0.05  # RSS poll period: short enough to catch peaks, cheap (~0.1 ms a poll)
PSS_EVERY = 4  # PSS (smaps_rollup walks every mapping) every 4th poll
STDERR_TAIL = 4000  # characters of the child's stderr kept to explain a failure


@dataclasses.dataclass
class MeasureConfig:
    contender: str
    root: str
    pipeline: str = "train"
    batch_size: int = 128
    workers: int = 2
    images: int = 1536  # timed images (rounded up to whole batches)
    warmup_batches: int = 1
    seed: int = 0
    shards: list = dataclasses.field(default_factory=list)
    progress: bool = True
    dataset_factory: Optional[str] = None  # --dataset module:function
    recipe: Optional[str] = None  # --recipes: a recipe of fastload.bench.recipes


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
        batches = contender.batches(loader, run)
        images, labels = next(batches)
        result["first_batch_s"] = time.perf_counter() - t0
        result["first_batch"] = _first_batch_summary(images, labels)
        for _ in range(config.warmup_batches - 1):
            next(batches)

        stats = getattr(loader, "stats", None) if type(loader).__module__.startswith("fastload") else None
        if stats is not None:
            stats(reset=True)  # the stage times of the timed batches only
        tree = ProcessTree(os.getpid())
        bar = _bar(config)
        cpu0, busy0, t1 = tree.cpu_seconds(), system_busy_seconds(), time.perf_counter()
        count = 0
        while count < config.images:
            images, labels = next(batches)
            count += int(images.shape[0])
            if bar is not None:
                bar.update(int(images.shape[0]))
        # Read the tree's CPU before the loader shuts down: exited workers' time is lost.
        elapsed, cpu, busy = time.perf_counter() - t1, tree.cpu_seconds() - cpu0, system_busy_seconds() - busy0
        if bar is not None:
            bar.close()
        result.update(
            status="ok",
            path=contender.path(loader),
            images=count,
            seconds=elapsed,
            images_per_s=count / elapsed,
            cpu_ms_per_image=1e3 * cpu / count,
            others_cpu_pct=100.0 * max(0.0, busy - cpu) / (elapsed * (os.cpu_count() or 1)),
        )
        if stats is not None:
            result["stages_ms_per_image"] = _stages_per_image(stats())
        batches.close()  # ends the epoch generators: loaders shut their workers down
        del loader
        return result
    except BaseException as error:  # noqa: BLE001 -- a failing contender is a row, not a crash
        traceback.print_exc()
        message = str(error).strip().splitlines()
        return {**result, "status": "failed", "reason": f"{type(error).__name__}: {message[0] if message else ''}"[:300]}


def _bar(config: MeasureConfig):
    if not config.progress:
        return None
    from tqdm import tqdm

    return tqdm(
        total=config.images, unit="img", leave=False, file=sys.stderr,
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
