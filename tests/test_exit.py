"""The interpreter exits normally while threads wait in the engine.

Python (<= 3.13) ends a daemon thread that asks for the GIL back after finalisation began
with pthread_exit; a C++ frame that cannot let that forced unwind pass aborts the process
(SIGABRT, "terminate called without an active exception"). Each case runs a child process
whose daemon threads sit in one blocking engine call (wait, read_samples, close, a loader's
iteration, submits into a deep queue) while the main thread returns; the exit status must be
0 in every trial. The exit races the threads' GIL requests, so each case runs TRIALS times.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fastload import _ext

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

# Before the fix 3 of 3 trials of a waiting loader aborted; 6 trials per call keeps the
# chance of missing a call that still aborts below 1 in 500 at a one-in-three rate, in ~10 s.
TRIALS = 6

CHILD = textwrap.dedent("""
    import sys, threading, time
    import torch
    import fastload
    from fastload import _ext
    from fastload import transforms as T

    root, call = sys.argv[1], sys.argv[2]
    dataset = fastload.ImageFolder(root, transforms=[T.Resize(96), T.CenterCrop(96)])
    C = _ext.require_ops()

    def engine(threads=1):
        index = dataset.index
        e = C.BatchEngine(threads)
        e.set_index(torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                    torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets),
                    torch.from_numpy(index.sizes))
        e.set_plan(plan)
        return e

    from fastload.augment.plan import build_plan
    plan = build_plan([T.Resize(96), T.CenterCrop(96)])
    samples = torch.arange(len(dataset)).repeat(8)
    ready = threading.Event()

    def in_wait():  # wait() on a batch that takes seconds
        e = engine()
        ticket = e.submit(samples, torch.empty(len(samples), 3, 96, 96), 0)
        ready.set()
        e.wait(ticket)

    def in_read_samples():  # read_samples() in a loop: the GIL is released and taken back each call
        e = engine()
        ready.set()
        while True:
            e.read_samples(samples)

    def in_close():  # close() joins workers that drain a long queue
        e = engine()
        e.submit(samples, torch.empty(len(samples), 3, 96, 96), 0)
        ready.set()
        e.close()

    def in_submit():  # submits into a deep queue, collecting the oldest
        e = engine()
        tickets = []
        while True:
            tickets.append(e.submit(samples[:4], torch.empty(4, 3, 96, 96), 0))
            if len(tickets) > 64:
                ready.set()
                e.wait(tickets.pop(0))

    def in_loader():  # a native loader's iteration, epoch after epoch
        loader = fastload.DataLoader(dataset, batch_size=8, num_workers=2, persistent_workers=True)
        while True:
            for _ in loader:
                ready.set()

    target = {"wait": in_wait, "read_samples": in_read_samples, "close": in_close, "submit": in_submit,
              "loader": in_loader}[call]
    threads = [threading.Thread(target=target, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    if not ready.wait(60):
        sys.exit("the threads never reached the engine")
    time.sleep(0.05)
    print("exiting", flush=True)
""")


@pytest.fixture(scope="module")
def root(make_image_folder):
    return make_image_folder(classes=2, per_class=8, size=(384, 512))


@pytest.mark.parametrize("call", ["wait", "read_samples", "close", "submit", "loader"])
def test_interpreter_exits_normally_with_threads_waiting_in_the_engine(root, call, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                                     os.environ.get("PYTHONPATH")])))
    for trial in range(TRIALS):
        child = subprocess.run([sys.executable, str(script), root, call], capture_output=True, text=True,
                               timeout=120, env=env)
        assert child.returncode == 0 and "exiting" in child.stdout, (
            f"trial {trial}: exit status {child.returncode}\n{child.stderr[-3000:]}")


HYBRID_CHILD = textwrap.dedent("""
    import sys
    import torchvision
    from torchvision.transforms import v2
    import fastload

    dataset = torchvision.datasets.ImageFolder(sys.argv[1], transform=v2.Compose([
        v2.RandomResizedCrop(32), v2.RandomRotation(10), v2.ToImage()]))
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2)  # kept until the interpreter exits
    assert loader.path.startswith("hybrid"), loader.path
    for _ in loader:
        pass
    print("exiting", flush=True)
""")


def test_a_hybrid_loader_alive_at_exit_stops_its_worker_processes_quietly(root, tmp_path):
    """The tail's worker pool is shut down before the interpreter tears its modules down:
    no "Exception ignored" tracebacks on stderr."""
    script = tmp_path / "hybrid_child.py"
    script.write_text(HYBRID_CHILD)
    child = subprocess.run([sys.executable, str(script), root], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and "exiting" in child.stdout, child.stderr[-3000:]
    assert "Exception ignored" not in child.stderr, child.stderr[-3000:]
