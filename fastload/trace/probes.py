"""The probes: index 0 twice and a few indexes spread over the dataset, traced up front, watched."""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from typing import Any, Dict, List, NamedTuple, Sequence, Tuple, Union

from fastload.augment.split import Pipeline

from fastload.trace.patches import tracing_patches, where_drawn
from fastload.trace.rollback import Snapshot
from fastload.trace.sample import TracedSample, is_simple_template, same_value, sample_of_call, sample_unless_kept, shape_text
from fastload.trace.state import RngState, TraceRefused, global_rng_moved, global_rng_restore, global_rng_state, record
from fastload.trace.where import where_defined


# Indexes traced up front, spread evenly over the dataset from index 0 (traced twice) to the last.
PROBES = 16
# Seconds the probes may stay at one place in the code before the dataset is refused (a
# __getitem__ that blocks): tracing reads no pixels, so no step of an image dataset's
# probes takes nearly as long.
PROBE_TIMEOUT_S = 3.0
TIMEOUT_ENV = "FASTLOAD_TRACE_TIMEOUT"


class Probe:
    """The samples traced up front: their index -> _Sample."""

    def __init__(self, samples: Dict[int, TracedSample]):
        self.samples = samples

    def agrees(self, other: "Probe") -> bool:
        if list(self.samples) != list(other.samples):
            return False
        return all(a.path == b.path and a.transform is b.transform and same_value(a.template, b.template)
                   and a.masks == b.masks for a, b in zip(self.samples.values(), other.samples.values()))


def probe_indexes(n: int) -> List[int]:
    if n <= PROBES + 1:
        return list(range(n))
    return sorted({round(k * (n - 1) / (PROBES - 1)) for k in range(PROBES)} | {0})


def run_probes(dataset: Any) -> Union[Probe, TraceRefused, None]:
    """Probe, a _Refused (with `.index`), or None when index 0 opens no image with PIL."""
    n = len(dataset)
    if n == 0:
        return None
    before = global_rng_state()
    snapshot = Snapshot(dataset)  # (torch calls no __getitem__ here: what the probes do is undone)
    index = 0
    try:
        with tracing_patches(dataset):
            traced = list(record(dataset, 0))  # [call, value]: _kept_or empties it
            if not traced[0].opened:
                return None
            try:
                first = sample_unless_kept(dataset, traced, snapshot.restore)
                moved = global_rng_moved(before)
                if moved:
                    raise TraceRefused(f"draws random numbers outside the transforms ({', '.join(moved)})",
                                      where_drawn(dataset, 0, before))
                again = sample_of_call(dataset, *record(dataset, 0))
                if not (again.path == first.path and again.transform is first.transform
                        and same_value(again.template, first.template) and again.masks == first.masks):
                    what = "image path" if again.path != first.path else "transform" \
                        if again.transform is not first.transform else "masks" if again.masks != first.masks \
                        else "returned values"
                    raise TraceRefused(f"returns different samples when traced twice at index 0 (the {what} "
                                      "differ)", where_defined(dataset))
                samples = {0: first}
                indexes = probe_indexes(n)
                for index in indexes[1:]:
                    sample = sample_of_call(dataset, *record(dataset, index))
                    why = disagreement(first, sample)
                    if why:
                        raise TraceRefused(why, where_defined(dataset))
                    samples[index] = sample
                if global_rng_moved(before):
                    index, where, moved = first_draw(dataset, indexes, before)
                    raise TraceRefused(f"draws random numbers outside the transforms ({', '.join(moved)})", where)
            except TraceRefused as refused:
                refused.index = index  # type: ignore[attr-defined]
                if not refused.where:
                    refused.where = where_defined(dataset)
                return refused
    finally:
        global_rng_restore(before)
        snapshot.restore()
    return Probe(samples)


class Basis(NamedTuple):
    """What a trace's engine pipeline was made from: a later epoch whose probes give
    another basis needs another pipeline (the loader chooses its path anew)."""

    length: int
    transform: Any
    native: Tuple[Any, ...]  # the fastload specs the transform makes now (a Resize's size changed in place: others)
    tail: Tuple[int, ...]  # ids of the Python transforms after them
    slot_at: Tuple[Any, ...]
    simple: bool
    # Image views beyond view 0: (id of the view's transform, its native specs, its place) each.
    views: Tuple[Any, ...] = ()
    # Masks (fastload.trace.masks): (the engine's Mask, its place) each.
    masks: Tuple[Any, ...] = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Basis) and self.transform is other.transform and \
            tuple.__eq__(self._replace(transform=None), other._replace(transform=None))

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]


def basis_of(first: TracedSample, n: int) -> Basis:
    pipeline, _ = pipeline_of(first.transform)
    views = tuple((id(t), tuple(pipeline_of(t)[0].native), at)
                  for t, at in zip(first.views[1:], first.views_at[1:]))
    return Basis(n, first.transform, tuple(pipeline.native), tuple(id(t) for t in pipeline.tail), first.slot_at,
                  is_simple_template(first.template), views,
                  tuple((mask, at) for (_, mask), at in zip(first.masks, first.masks_at)))


def disagreement(first: TracedSample, sample: TracedSample) -> str:
    """Why `sample` (a later index's trace) cannot be made the way index 0 is, or ""."""
    if sample.transform is not first.transform:
        return f"passes the image to another transform object than index 0's ({type(sample.transform).__name__})"
    if sample.slot_at != first.slot_at:
        return "returns the image in another place than index 0's"
    if len(sample.views) != len(first.views):
        return (f"passes the image to {max(1, len(sample.views))} transform calls, index 0 to "
                f"{max(1, len(first.views))} (another number of views)")
    for v, (theirs, ours) in enumerate(zip(sample.views, first.views)):
        if theirs is not ours:
            return f"passes view {v} to another transform object than index 0's ({type(theirs).__name__})"
    if sample.views_at != first.views_at:
        return "returns its views in other places than index 0's"
    if [m for _, m in sample.masks] != [m for _, m in first.masks] or sample.masks_at != first.masks_at:
        return (f"makes its masks {[m for _, m in sample.masks]} at {sample.masks_at}, index 0 "
                f"{[m for _, m in first.masks]} at {first.masks_at}")
    if is_simple_template(first.template) != is_simple_template(sample.template):
        return f"returns {shape_text(sample.template)}, index 0 {shape_text(first.template)}"
    return ""


def first_draw(dataset: Any, indexes: Sequence[int], before: RngState) -> Tuple[int, str, List[str]]:
    """(index, file:line, generators) of the first of `indexes` whose trace draws."""
    for index in indexes:
        global_rng_restore(before)
        record(dataset, index)
        moved = global_rng_moved(before)
        if moved:
            return index, where_drawn(dataset, index, before), moved
    return indexes[0], where_defined(dataset), ["a generator"]


# What first_call_apart says when index 0's traced call, in a child, opened an image (or
# could not be run apart): the probes then run in this process.
OPENS_AN_IMAGE = object()


def first_call_apart(dataset: Any) -> Union[object, TraceRefused, None]:
    """Index 0 traced once in a forked child: OPENS_AN_IMAGE when it opened an image (or
    fork is unavailable, or the child did not answer within the probe timeout: the watched
    probes decide), None when it opened none (not a dataset to trace: nothing runs here),
    a TraceRefused when the call ended the child's process (torch calls `__getitem__` only
    in worker processes, whose death it reports; the generic path does the same)."""
    if not hasattr(os, "fork"):
        return OPENS_AN_IMAGE
    for stream in (sys.stdout, sys.stderr):  # (else the child's copy of their buffers is written twice)
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one traced call, its answer, and out without running any exit handler
        try:
            os.close(read_end)
            answer = b"e"
            try:
                with tracing_patches(dataset):
                    call, _ = record(dataset, 0)
                answer = b"1" if call.opened else b"0"
            finally:
                os.write(write_end, answer)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], probe_timeout())
        answer = os.read(read_end, 1) if ready else None
    finally:
        os.close(read_end)
    if answer is None:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if answer == b"0":
        return None
    if answer:
        return OPENS_AN_IMAGE
    if answer is None:
        return OPENS_AN_IMAGE  # (slow or blocked: the watched probes tell which)
    how = f"killed its process by signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) \
        else f"ended its process (exit code {os.WEXITSTATUS(status)})"
    refused = TraceRefused(f"{how}, run apart in a forked process (torch's DataLoader runs __getitem__ in "
                              "worker processes and reports their death)", where_defined(dataset))
    refused.index = 0  # type: ignore[attr-defined]
    return refused


def joined_unless_still(worker: threading.Thread, still_s: float) -> bool:
    """Waits for `worker`: True when it ended, False when its innermost Python frame stayed
    at the same instruction for `still_s` seconds (blocked, not slow)."""
    last, since = None, time.monotonic()
    while True:
        worker.join(min(0.25, still_s))
        if not worker.is_alive():
            return True
        frame = sys._current_frames().get(worker.ident)  # (sampled, not traced: costs the probe nothing)
        where = (id(frame), frame.f_lasti) if frame is not None else None
        if where != last:
            last, since = where, time.monotonic()
        elif time.monotonic() - since >= still_s:
            return False


def probe_timeout() -> float:
    """Seconds the probes of one dataset may take (FASTLOAD_TRACE_TIMEOUT, else PROBE_TIMEOUT_S)."""
    try:
        return float(os.environ.get(TIMEOUT_ENV, PROBE_TIMEOUT_S))
    except ValueError:
        raise ValueError(f"fastload: expected {TIMEOUT_ENV} to be a number of seconds, got "
                         f"{os.environ[TIMEOUT_ENV]!r}") from None


def pipeline_of(transform: Any) -> Tuple[Pipeline, List[str]]:
    """(Pipeline, wrappers opened) of a transform a traced call intercepted: torchvision's,
    timm's or albumentations' (the cut into the native prefix and the Python tail, read
    from the transform's parameters as they are now)."""
    from fastload.compat import albumentations
    from fastload.compat.torchvision import flatten, split_transform

    if albumentations.is_albumentations(transform):
        return albumentations.split_transform(transform, to_run=True)
    return split_transform(transform, to_run=True), flatten(transform)[1]
