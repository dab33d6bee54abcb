"""loader.stats(): keys, and numbers that follow what the data and the loop actually did
(lower bounds only: no timed upper bounds on a shared machine)."""

from __future__ import annotations

import time

import pytest
import torch

import fastload
from fastload import DataLoader
from loader_datasets import Sleepy, Squares

pytestmark = pytest.mark.timeout(120)

KEYS = {"path", "epochs", "batches", "samples", "skipped", "skipped_at_index", "skipped_samples", "fetch_s", "collate_s", "pin_s", "transfer_s",
        "copy_s", "wait_s", "first_batch_s", "loop_s", "samples_per_s", "stall_fraction"}


def test_keys_and_counts():
    loader = DataLoader(Squares(10), batch_size=4)
    before = loader.stats()
    assert set(before) == KEYS and before["batches"] == 0 and before["samples_per_s"] is None
    assert before["stall_fraction"] is None and before["first_batch_s"] is None
    for _ in range(2):
        list(loader)
    stats = loader.stats()
    assert set(stats) == KEYS
    assert (stats["epochs"], stats["batches"], stats["samples"], stats["skipped"]) == (2, 6, 20, 0)
    assert stats["path"] == loader.path and stats["path"].startswith("generic:")
    assert stats["samples_per_s"] > 0 and stats["loop_s"] >= stats["wait_s"] - 1e-9
    assert isinstance(stats, dict) and str(stats) == fastload.stats.report(stats)


def test_reset():
    loader = DataLoader(Squares(10), batch_size=4)
    list(loader)
    assert loader.stats(reset=True)["batches"] == 3
    assert loader.stats()["batches"] == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_slow_dataset_shows_in_fetch_time_and_a_high_stall(num_workers):
    sleep, n = 0.03, 12
    loader = DataLoader(Sleepy(n, sleep), batch_size=2, num_workers=num_workers)
    for _ in loader:
        pass  # an instant loop body: all the time is waiting for data
    stats = loader.stats()
    assert stats["fetch_s"] >= n * sleep * 0.95  # measured in the workers, shipped with the batches
    assert stats["fetch_s"] > 10 * stats["collate_s"]
    assert stats["wait_s"] >= n * sleep / max(1, num_workers) * 0.9
    assert stats["stall_fraction"] > 0.8


def test_slow_loop_body_gives_a_low_stall():
    loader = DataLoader(Squares(12), batch_size=2)
    for _ in loader:
        time.sleep(0.03)  # the "training step"
    stats = loader.stats()
    assert stats["stall_fraction"] < 0.3
    assert stats["loop_s"] >= 5 * 0.03  # five intervals between six batches, at least


def test_batch_size_none_counts_samples_one_by_one():
    loader = DataLoader(Squares(5), batch_size=None)
    list(loader)
    assert (loader.stats()["batches"], loader.stats()["samples"]) == (5, 5)


def test_report_is_readable():
    loader = DataLoader(Squares(8), batch_size=4)
    list(loader)
    text = fastload.stats.report(loader.stats())
    assert text.splitlines()[0] == f"fastload.DataLoader stats ({loader.path})"
    for word in ("samples/s", "data stall", "fetch (workers)", "collate (workers)", "wait in __next__", "verdict:"):
        assert word in text
    assert "transfer (host)" not in text  # a stage this loader does not run is left out, not shown as 0
    assert "batches 2, samples 8" in text


def test_profiler_ranges():
    from torch.profiler import ProfilerActivity, profile

    loader = DataLoader(Squares(8), batch_size=4, dtype=torch.float16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        list(loader)
    names = {e.name for e in prof.events()}
    for stage in ("fastload.wait", "fastload.fetch", "fastload.collate", "fastload.transfer"):
        assert stage in names, stage


NATIVE_KEYS = {"images", "batches", "skipped", "pil_fallback", "gpu_cpu_fallback", "engine_s", "wait_s", "threads",
               "stages_s", "thread_stages_s", "queue_depth", "cpu_s"}


@pytest.mark.skipif(not fastload._ext.has_ops(), reason="fastload._C not built")
def test_native_counters_name_seconds_with_s_and_show_in_the_report(tmp_path):
    import jpeg_samples as js

    js.write_image_folder(tmp_path, classes=2, per_class=3)
    dataset = fastload.ImageFolder(str(tmp_path), ops=[fastload.ops.Resize(8), fastload.ops.CenterCrop(8)])
    loader = DataLoader(dataset, batch_size=4, num_workers=2)
    list(loader)
    stats = loader.stats()
    assert loader.path.startswith("native") and set(stats) == KEYS | {"native"}
    native = stats["native"]
    assert set(native) == NATIVE_KEYS
    assert (native["images"], native["batches"], native["threads"]) == (6, 2, 2)
    assert native["engine_s"] >= native["wait_s"] >= 0.0
    line = [line for line in fastload.stats.report(stats).splitlines() if line.strip().startswith("native:")]
    assert line and "engine_s=" in line[0] and "wait_s=" not in line[0]  # one wait: the loop's, in the table


STAGES = ("read", "header", "decode", "augment")


def _native_loader(tmp_path, **kwargs):
    import jpeg_samples as js

    js.write_image_folder(tmp_path, classes=2, per_class=4)
    dataset = fastload.ImageFolder(str(tmp_path), transforms=[fastload.transforms.RandomResizedCrop(16)])
    return DataLoader(dataset, batch_size=4, num_workers=2, **kwargs)


@pytest.mark.skipif(not fastload._ext.has_ops(), reason="fastload._C not built")
def test_native_stats_say_which_engine_stage_took_the_cpu_time(tmp_path):
    loader = _native_loader(tmp_path)
    list(loader)
    native = loader.stats()["native"]
    assert tuple(native["stages_s"]) == STAGES == tuple(fastload._ext.require_ops().engine_stages)
    assert all(native["stages_s"][stage] > 0 for stage in ("read", "decode", "augment")), native["stages_s"]
    threads = native["thread_stages_s"]
    assert len(threads) == 2 and sum(t["samples"] for t in threads) == native["images"] == 8
    for stage in STAGES:  # the total is the threads' sum
        assert native["stages_s"][stage] == pytest.approx(sum(t[stage] for t in threads))
    # CPU time measured by each thread's own clock: it ran, at most while it was busy.
    assert native["cpu_s"] == pytest.approx(sum(t["cpu_s"] for t in threads)) and native["cpu_s"] > 0
    assert all(t["cpu_s"] <= sum(t[s] for s in STAGES) + 0.05 for t in threads)
    text = str(loader.stats())
    rows = {line.split()[0]: line for line in text.splitlines()[5:] if "(engine)" in line}
    assert set(rows) == set(STAGES) and "ms/sample" in text and "share" in text
    assert "fetch (workers)" not in text and "collate (workers)" not in text  # the engine does their work
    assert "engine queue:" in text and text.count("verdict:") == 1


@pytest.mark.skipif(not fastload._ext.has_ops(), reason="fastload._C not built")
def test_native_stage_times_start_afresh_after_a_reset(tmp_path):
    loader = _native_loader(tmp_path)
    list(loader)
    before = loader.stats(reset=True)["native"]["stages_s"]
    assert before["decode"] > 0
    after = loader.stats()["native"]
    assert all(v == 0 for v in after["stages_s"].values()) and all(t["samples"] == 0 for t in after["thread_stages_s"])
    list(loader)
    assert 0 < loader.stats()["native"]["stages_s"]["decode"]


@pytest.mark.skipif(not fastload._ext.has_ops(), reason="fastload._C not built")
def test_engine_stages_show_in_a_profiler_trace(tmp_path):
    loader = _native_loader(tmp_path)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        list(loader)
    events = profile.events()
    names = {event.name for event in events}
    assert {"fastload.read", "fastload.decode", "fastload.augment"} <= names, sorted(n for n in names if "fastload" in n)
    main_thread = {e.thread for e in events if e.name == "fastload.wait"}
    engine_threads = {e.thread for e in events if e.name == "fastload.decode"}
    assert engine_threads and not engine_threads & main_thread  # on the engine's own threads
    summaries = [e for e in events if e.name == "fastload.engine_stages"]
    assert len(summaries) == 2  # one per batch


def test_the_verdict_names_the_largest_input_stage_only_when_the_loop_waits():
    native = {"images": 100, "stages_s": {"read": 0.1, "header": 0.05, "decode": 2.0, "augment": 0.5}}
    waiting = {"path": "native: x", "batches": 10, "samples": 100, "stall_fraction": 0.6, "wait_s": 3.0,
               "native": native}
    assert "largest input stage is decode (75% of the input time)" in fastload.stats.report(waiting)
    keeping_up = dict(waiting, stall_fraction=0.01)
    assert "the input keeps up" in fastload.stats.report(keeping_up)
    generic = {"path": "generic: x", "batches": 10, "samples": 100, "stall_fraction": 0.5, "fetch_s": 1.0,
               "collate_s": 3.0, "transfer_s": 0.5, "copy_s": 0.4}
    text = fastload.stats.report(generic)
    assert "largest input stage is collate" in text and "transfer (host)" in text


@pytest.mark.timeout(120)
def test_worker_times_reach_the_main_process_trace():
    from torch.profiler import ProfilerActivity, profile

    loader = DataLoader(Squares(8), batch_size=4, num_workers=1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        list(loader)
    summaries = [e for e in prof.events() if e.name == "fastload.worker_batch"]
    assert len(summaries) == 2  # one per batch, recorded in this process


@pytest.mark.skipif(not fastload._ext.has_ops(), reason="fastload._C not built")
@pytest.mark.parametrize("prefetch_factor", [2, 3])
def test_native_batch_memory_is_bounded_by_what_is_in_flight(tmp_path, prefetch_factor):
    import jpeg_samples as js

    js.write_image_folder(tmp_path, classes=2, per_class=12)
    dataset = fastload.ImageFolder(str(tmp_path), transforms=[fastload.transforms.RandomResizedCrop(16)])
    loader = DataLoader(dataset, batch_size=2, num_workers=1, prefetch_factor=prefetch_factor)
    held = list(loader)  # a loop that keeps every batch: reuse cannot hide extra buffers
    assert len(held) == 12
    # `prefetch_factor` batches submitted and the one a `for` loop holds, no more.
    assert loader._runner.producer._buffers.kept == prefetch_factor + 1
    del held
    addresses = {images.data_ptr() for images, _ in loader}  # a plain loop reuses those
    assert len(addresses) == prefetch_factor + 1
