"""Where a loader's time goes: per-stage timings, throughput, the data-stall fraction.

`fastload.DataLoader.stats()` returns a `Stats` (a plain dict with a readable `str`);
`report(stats)` formats one. The numbers come from three places:

- worker side (fetch, collate): measured inside each worker around the dataset reads and
  the collate_fn, and shipped to the main process with the batch (worker-seconds: with W
  workers in parallel, their sum can exceed the wall time);
- pin and transfer: measured where they run (torch's pin-memory thread, the transfer
  stage); device copy time from CUDA events when batches go to a GPU;
- the training loop: the time spent inside `__next__` (waiting for data) and the time
  between consecutive batches.

Keys of the dict (seconds are float, counts int):
    path            "generic: <reason>" or "native: <what>" (loader.path)
    epochs          iterations started (each __iter__)
    batches         batches delivered by __next__
    samples         samples in those batches (images for an image dataset)
    skipped         samples skipped by on_error="skip" while reading or decoding (each
                    replaced by the next readable one): distinct samples per pass, summed
                    over passes
    skipped_samples those samples, each listed once (in the order first met) as
                    {"sample": index in the dataset, "source": its file path or
                    "shard.tar:member" (None where the dataset does not say), "reason":
                    what failed}; every path (in worker processes too) sends them here
    skipped_at_index
                    samples the dataset left out while indexing (on_error="skip" on a
                    malformed tar member or label; `dataset.skipped` lists them)
    fetch_s         worker time reading samples (dataset __getitem__/__getitems__)
    collate_s       worker time in collate_fn
    pin_s           time copying batches into pinned host memory
    transfer_s      host time issuing host-to-device copies and dtype/layout conversions
    copy_s          device time of those copies (CUDA events; 0.0 when not measured)
    wait_s          time the training loop spent inside __next__, in total
    first_batch_s   wait for the first batch of the latest epoch (None before any)
    loop_s          wall time of the iterations: from each epoch's first __next__ call to
                    its last return (or StopIteration), summed over epochs
    samples_per_s   samples / loop_s (None before any batch)
    stall_fraction  data-stall fraction: the wait between batches divided by the time
                    between batches, i.e. the share of the loop's steady-state time spent
                    waiting for data (first batch excluded; None before two batches)
    native          the native engine's counters (native path only): images, batches,
                    skipped, pil_fallback, gpu_cpu_fallback, engine_s, wait_s, threads;
                    stages_s {read, header, decode, augment: CPU seconds summed over the
                    engine threads} and thread_stages_s (the same per thread, with samples), a dict:
                    images, batches (produced by the engine), skipped (distinct samples
                    replaced under on_error="skip"), pil_fallback (samples PIL decoded:
                    formats other than JPEG and PNG, or PNG in a build without libpng),
                    gpu_cpu_fallback (decode_on="gpu": images nvJPEG rejected, and PNGs,
                    that the CPU decoded), engine_s (submit to result, summed over
                    batches: several overlap), wait_s (time result() waited for the
                    engine), threads, queue_depth (batches submitted to the engine when
                    one was taken, on average: below the prefetch depth, the engine lags)

`print(loader.stats())` shows the stages that ran on the loader's path (the workers'
fetch/collate, or the engine's read/header/decode/augment; then pin, and for batches sent
to a device the transfer and the device copy, or on the CPU the dtype/layout conversion),
each with seconds, ms per batch and per sample and its share, then one wait: "wait in
__next__", the training loop's time blocked in __next__ (wait_s; not an input stage, so
no share), and a verdict line: the input keeps up (stall below 5%), or which stage to speed
up. The engine's own wait_s (native dict) is a part of that wait and is not printed.

Every stage also shows in profiler traces as a `torch.profiler.record_function` range
named "fastload.<stage>" (fetch and collate in the worker processes' own traces; each
batch a worker made adds a "fastload.worker_batch" range to the main process's trace,
its arguments the worker's fetch/collate/pin milliseconds for that batch). On the
native path each sample's engine stages are ranges on the engine's own threads
("fastload.read", "fastload.decode", "fastload.augment"), and each batch adds a
"fastload.engine_stages" range whose arguments are the engine threads' milliseconds per stage
since the batch before: a Chrome/Perfetto trace of a training step shows where the input
time went beside the model's kernels. A data stall is a long "fastload.wait" on the main
thread; the engine ranges beside it say which stage is short of cores.

Example:
    >>> import torch, fastload
    >>> loader = fastload.DataLoader(torch.utils.data.TensorDataset(torch.arange(8)), batch_size=4)
    >>> for _ in loader: pass
    >>> s = loader.stats(); s["batches"], s["samples"]
    (2, 8)
    >>> print(fastload.stats.report(s).splitlines()[1])
      epochs 1, batches 2, samples 8, skipped 0
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import torch

STAGES = ("fetch", "collate", "pin", "transfer", "copy", "wait")
_STAGE_LABELS = {
    "fetch": "fetch (workers)",
    "collate": "collate (workers)",
    "pin": "pin",
    "transfer": "transfer (host)",
    "copy": "copy (device)",
    "wait": "wait in __next__",
}
# transfer_s of a loader whose batches stay on the CPU: the dtype/memory_format conversion.
_CONVERT_LABEL = "convert (host)"


def profile_summary(name: str, milliseconds: Dict[str, float]) -> None:
    """Records a zero-length profiler range `name` whose arguments are `milliseconds`
    (stage -> ms), when a torch.profiler is recording: work done where the main
    process's trace cannot see it (engine threads' totals, worker processes) shows in the
    trace beside the batch it fed. Costs one check when nothing is recording."""
    if not torch.autograd._profiler_enabled():
        return
    args = {stage: round(ms, 3) for stage, ms in milliseconds.items()}
    with torch.profiler.record_function(name, args=str(args)):
        pass


class Stats(dict):
    """The dict loader.stats() returns; `str(stats)` is report(stats)."""

    def __str__(self) -> str:
        return report(self)


def skipped_record(sample: int, source: Optional[str], reason: str) -> Dict[str, Any]:
    """One entry of stats()["skipped_samples"] (the shape fastload.prepare lists too)."""
    return {"sample": int(sample), "source": source, "reason": reason}


class SkippedSamples:
    """The samples on_error="skip" replaced: each listed once (skipped_record), in the order
    first met, and named by one UserWarning the first time it is met over this object's
    life (reset() forgets the list, not the warnings: a bad file is named once per loader,
    not once per epoch). The warning comes when the skip reaches the loader's process,
    before the batch that holds the replacement is returned.

    Args:
        warn: give the warnings (False in worker processes: their records travel to the
            loader's process with the batch, and are warned there).

    Example:
        >>> import warnings
        >>> skipped = SkippedSamples()
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     first, again = (skipped.add(3, "train/cat/003.jpg", "Premature end of JPEG file") for _ in "ab")
        >>> first, again, len(skipped.records()), len(caught)
        (True, False, 1, 1)
        >>> print(caught[0].message)
        fastload: on_error='skip' skipped sample 3 (train/cat/003.jpg): Premature end of JPEG file. \
It was replaced by the next readable sample; loader.stats()["skipped_samples"] lists every skipped sample.
    """

    def __init__(self, warn: bool = True) -> None:
        self.warn = warn
        self._records: Dict[int, Dict[str, Any]] = {}
        self._warned: Set[int] = set()

    def add(self, sample: int, source: Optional[str], reason: str) -> bool:
        """Lists a skipped sample (warning the first time); True when it was not listed yet."""
        sample = int(sample)
        new = sample not in self._records
        if new:
            self._records[sample] = skipped_record(sample, source, reason)
        if self.warn and sample not in self._warned:
            self._warned.add(sample)
            where = f" ({source})" if source else ""
            warnings.warn(f"fastload: on_error='skip' skipped sample {sample}{where}: {reason.rstrip('. ')}. "
                          "It was replaced by the next readable sample; loader.stats()[\"skipped_samples\"] lists "
                          "every skipped sample.", UserWarning, stacklevel=2)
        return new

    def records(self) -> List[Dict[str, Any]]:
        """The listed samples (copies), in the order first met."""
        return [dict(record) for record in self._records.values()]

    def reset(self) -> None:
        """Forgets the list (stats(reset=True)); the samples already named stay named."""
        self._records = {}

    def __len__(self) -> int:
        return len(self._records)


class LoaderStats:
    """Accumulates one loader's timings; cheap enough to run on every batch."""

    def __init__(self) -> None:
        # The generic path's skipped samples (the native runners keep their own).
        self.skipped_samples = SkippedSamples()
        self._skipped_this_pass: Set[int] = set()
        self.reset()

    def reset(self) -> None:
        """Forgets everything measured so far."""
        self.times: Dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.epochs = 0
        self.batches = 0
        self.samples = 0
        self.skipped = 0
        self.skipped_samples.reset()
        self.first_batch_s: Optional[float] = None
        self.loop_s = 0.0
        self.between_s = 0.0
        self.between_wait_s = 0.0
        self._last_return: Optional[float] = None

    # -- producers -----------------------------------------------------------------------
    def add_time(self, stage: str, seconds: float) -> None:
        self.times[stage] += seconds

    def add_worker(self, fetch_s: float, collate_s: float, pin_s: float,
                   skipped: Iterable[Dict[str, Any]] = ()) -> None:
        """A worker's (or the main process's) batch: its times, and the skipped_records of
        the samples on_error="skip" replaced in it (listed, warned once, and counted once
        per pass however many batches or workers met them)."""
        self.times["fetch"] += fetch_s
        self.times["collate"] += collate_s
        self.times["pin"] += pin_s
        for record in skipped:
            self.skipped_samples.add(record["sample"], record["source"], record["reason"])
            if record["sample"] not in self._skipped_this_pass:
                self._skipped_this_pass.add(record["sample"])
                self.skipped += 1

    # -- the training loop ---------------------------------------------------------------
    def start_epoch(self) -> None:
        self.epochs += 1
        self._last_return = None
        self._skipped_this_pass = set()

    def next_returned(self, called: float, samples: int) -> None:
        """A __next__ that started at perf_counter() == `called` returned a batch."""
        self._loop_step(called)
        self.batches += 1
        self.samples += samples

    def next_ended(self, called: float) -> None:
        """A __next__ that started at `called` raised (StopIteration or an error)."""
        self._loop_step(called)

    def _loop_step(self, called: float) -> None:
        now = time.perf_counter()
        wait = now - called
        self.times["wait"] += wait
        if self._last_return is None:
            self.first_batch_s = wait
            self.loop_s += wait
        else:
            self.between_s += now - self._last_return
            self.between_wait_s += wait
            self.loop_s += now - self._last_return
        self._last_return = now

    # -- consumers -----------------------------------------------------------------------
    def of_loader(self, path: str, runner: Any, dataset: Any, reset: bool = False) -> Stats:
        """A loader's stats(): these counters with its native runner's (None: the generic
        path) and the samples its dataset left out when it was indexed (fastload's sources
        list them in `skipped`). reset: start counting afresh after (the runner too)."""
        native = runner.stats(reset=reset) if runner is not None else None
        left_out = getattr(dataset, "skipped", None)
        out = self.as_dict(path, native, skipped_at_index=len(left_out) if isinstance(left_out, list) else 0)
        if reset:
            self.reset()
        return out

    def as_dict(self, path: str, native: Optional[Dict[str, Any]] = None,
                skipped_at_index: int = 0) -> Stats:
        if native is not None:  # the native runner lists its skipped samples; they go on top
            native = dict(native)
            native_skipped = native.pop("skipped_samples", [])
        else:
            native_skipped = []
        out = Stats(
            path=path,
            epochs=self.epochs,
            batches=self.batches,
            samples=self.samples,
            # The native engine replaces bad samples itself and counts them there.
            skipped=self.skipped + (native or {}).get("skipped", 0),
            skipped_samples=self.skipped_samples.records() + [dict(r) for r in native_skipped],
            skipped_at_index=skipped_at_index,
            **{f"{stage}_s": self.times[stage] for stage in STAGES},
            first_batch_s=self.first_batch_s,
            loop_s=self.loop_s,
            samples_per_s=self.samples / self.loop_s if self.batches and self.loop_s > 0 else None,
            stall_fraction=self.between_wait_s / self.between_s if self.between_s > 0 else None,
        )
        if native is not None:
            out["native"] = native
        return out


def _fmt(value: Optional[float], unit: str = "s") -> str:
    return "-" if value is None else f"{value:.3f} {unit}"


# Below this data-stall fraction the input pipeline keeps up with the training loop.
KEEPS_UP = 0.05


def stage_times(stats: Dict[str, Any]) -> List[Tuple[str, float]]:
    """(label, seconds) of every input stage that ran, in data-flow order: the workers'
    fetch/collate or the engine's read/header/decode/augment, then pin, transfer, copy.
    Stages that do not run on this path are left out rather than shown as zeros. The
    loop's wait (wait_s) is not an input stage and is not among them.

    transfer_s is "transfer (host)" when batches went to a CUDA device (its copies are
    timed: copy_s > 0); otherwise it is the dtype/memory_format conversion of batches that
    stay on the CPU, "convert (host)" (on a device without timed copies, such as "mps",
    that time also holds the copy).

    Example:
        >>> stage_times({"fetch_s": 2.0, "collate_s": 0.5, "wait_s": 1.0})
        [('fetch (workers)', 2.0), ('collate (workers)', 0.5)]
        >>> stage_times({"fetch_s": 2.0, "collate_s": 0.5, "transfer_s": 0.1})[-1]
        ('convert (host)', 0.1)
    """
    native = stats.get("native") or {}
    rows: List[Tuple[str, float]] = []
    for name, seconds in (native.get("stages_s") or {}).items():
        rows.append((f"{name} (engine)", float(seconds)))
    to_device = (stats.get("copy_s") or 0.0) > 0
    for stage in STAGES[:-1]:
        seconds = stats.get(f"{stage}_s") or 0.0
        if seconds > 0 or (stage in ("fetch", "collate") and not native):
            label = _CONVERT_LABEL if stage == "transfer" and not to_device else _STAGE_LABELS[stage]
            rows.append((label, float(seconds)))
    return rows


def _verdict(stats: Dict[str, Any], rows: List[Tuple[str, float]]) -> str:
    """One line that says what to fix: nothing (the input keeps up), or the stage with the
    most CPU time when the loop waits."""
    stall = stats.get("stall_fraction")
    if stall is None:
        return "verdict: fewer than two batches, no steady state to judge"
    if stall < KEEPS_UP:
        return f"verdict: the input keeps up (the loop waited {100 * stall:.1f}% of the time): speed up the model"
    if not rows or sum(seconds for _, seconds in rows) <= 0:
        return f"verdict: the loop waited {100 * stall:.0f}% of the time for data"
    label, seconds = max(rows, key=lambda row: row[1])
    share = seconds / sum(s for _, s in rows)
    return (f"verdict: the loop waited {100 * stall:.0f}% of the time for data; the largest input stage is "
            f"{label.split(' (')[0]} ({100 * share:.0f}% of the input time): speed it up or give it more cores")


def report(stats: Dict[str, Any]) -> str:
    """A readable table of a loader.stats() dict: throughput, the data stall, the time of
    each input stage that ran (the workers' or the engine's), and which one to fix.

    Example:
        >>> print(report({"path": "generic: test", "batches": 0}).splitlines()[0])
        fastload.DataLoader stats (generic: test)
        >>> print(report({"path": "native: test", "native": {"images": 8, "engine_s": 0.25}}).splitlines()[-1])
          native: images=8, engine_s=0.250
    """
    g = stats.get
    batches = g("batches") or 0
    samples = g("samples") or 0
    lines = [f"fastload.DataLoader stats ({g('path', '?')})"]
    lines.append(f"  epochs {g('epochs', 0)}, batches {batches}, samples {samples}, "
                 f"skipped {g('skipped', 0)}"
                 + (f" (+{g('skipped_at_index')} at index time)" if g("skipped_at_index") else ""))
    lines.extend(_skipped_lines(g("skipped_samples") or []))
    sps = g("samples_per_s")
    lines.append(f"  throughput {'-' if sps is None else f'{sps:,.1f}'} samples/s over "
                 f"{_fmt(g('loop_s'))}; first batch {_fmt(g('first_batch_s'))}")
    stall = g("stall_fraction")
    lines.append("  data stall " + ("-" if stall is None else f"{100 * stall:.1f}%")
                 + " (share of the time between batches spent waiting in __next__)")
    rows = stage_times(stats)
    total = sum(seconds for _, seconds in rows)
    lines.append(f"  {'stage':<20}{'seconds':>10}{'ms/batch':>10}{'ms/sample':>11}{'share':>7}")
    for label, seconds in rows + [(_STAGE_LABELS["wait"], float(g("wait_s") or 0.0))]:
        per_batch = f"{1e3 * seconds / batches:.2f}" if batches else "-"
        per_sample = f"{1e3 * seconds / samples:.3f}" if samples else "-"
        share = f"{100 * seconds / total:.0f}%" if total > 0 and label != _STAGE_LABELS["wait"] else ""
        lines.append(f"  {label:<20}{seconds:>10.3f}{per_batch:>10}{per_sample:>11}{share:>7}")
    lines.append("    (the training loop's time blocked in __next__, first batch included; not an input stage: "
                 "no share)")
    lines.append("  " + _verdict(stats, rows))
    native = g("native")
    if native:
        lines.extend(_native_lines(native))
    return "\n".join(lines)


# How many skipped samples report() names before "... and N more".
REPORT_SKIPPED = 10


def _skipped_lines(records: List[Dict[str, Any]]) -> List[str]:
    """The skipped samples, one a line: index, file or member, reason (the first
    REPORT_SKIPPED; stats()["skipped_samples"] has them all)."""
    lines = [f"    skipped sample {r['sample']}" + (f" ({r['source']})" if r.get("source") else "")
             + f": {r['reason']}" for r in records[:REPORT_SKIPPED]]
    if len(records) > REPORT_SKIPPED:
        lines.append(f"    ... and {len(records) - REPORT_SKIPPED} more (stats()[\"skipped_samples\"])")
    return lines


def _native_lines(native: Dict[str, Any]) -> List[str]:
    """The engine's threads (how evenly the work spread, how much of it had a core), its
    queue, its counters."""
    lines = []
    threads = native.get("thread_stages_s") or []
    if threads:
        busy = [sum(v for k, v in t.items() if k not in ("samples", "cpu_s")) for t in threads]
        each = ", ".join(f"{b:.2f} s / {t['samples']}" for b, t in zip(busy, threads))
        lines.append(f"  engine threads (busy s / samples): {each}")
        cpu = native.get("cpu_s")
        if cpu is not None and sum(busy) > 0:
            share = cpu / sum(busy)
            note = ": other processes took the cores, the stage times include waiting for one" if share < 0.9 else ""
            lines.append(f"  engine CPU {cpu:.2f} s = {100 * share:.0f}% of its busy time{note}")
    depth = native.get("queue_depth")
    if depth is not None:
        lines.append(f"  engine queue: {depth:.1f} batches submitted on average when one was taken")
    # The engine's wait_s (result() waiting for the engine) is a part of the loop's wait in
    # __next__ above: one wait is printed, the dict keeps both.
    counters = {k: v for k, v in native.items()
                if not isinstance(v, (dict, list)) and k not in ("queue_depth", "cpu_s", "wait_s")}
    lines.append("  native: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in counters.items()))
    return lines
