"""A traced dataset learnt as the loader reaches it (fastload/trace/lazy.py): a
fixed number of probing __getitem__ calls when the loader is built whatever the length
(undone: the dataset object sees none), each served index traced just before its batch
is submitted, a later index that disagrees with index 0 run through its own __getitem__
per sample; resume and DDP through such a dataset."""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload.trace import PROBES, probe
from jpeg_samples import write_image_folder
from resume_helpers import check_resume_at_every_position
from trace_helpers import EVAL_ATOL, eval_v1, needs_ops

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("lazy")
    write_image_folder(root, classes=3, per_class=4)
    return sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))


class Cycling(Dataset):
    """n samples over a few files (as a list of paths would be), label i % 7; counts the
    calls on the object (what torch's num_workers=0 loader makes) and, in `every_call`, all
    calls of the class (the probes' too, which the object never sees)."""

    every_call = [0]

    def __init__(self, files, n, transform):
        self.files, self.n, self.transform, self.calls = files, n, transform, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        self.every_call[0] += 1
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return self.transform(image), i % 7


def test_the_calls_up_front_do_not_grow_with_the_length_and_leave_nothing_behind(files):
    small, large = Cycling(files, 1_000, eval_v1()), Cycling(files, 100_000, eval_v1())
    for dataset in (small, large):
        before = Cycling.every_call[0]
        loader = fastload.DataLoader(dataset, batch_size=8, accelerate="auto")
        assert loader.path.startswith("generic: ") or "traced Cycling.__getitem__" in loader.path, loader.path
        # index 0 twice, then the other probes: the same count at 1k and 100k samples
        assert Cycling.every_call[0] - before == PROBES + 1
        assert dataset.calls == 0  # undone, as torch's DataLoader calls nothing when it is built
    trace = probe(large)
    assert large.calls == 0 and trace.traced == 0  # (each index is traced as the epoch reaches it)


@needs_ops
def test_indexes_are_traced_as_their_batches_are_submitted_and_kept(files):
    dataset = Cycling(files, 100_000, eval_v1())
    loader = fastload.DataLoader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert loader.path.startswith("native: traced Cycling.__getitem__ [Resize -> CenterCrop -> "), loader.path
    theirs = TorchLoader(Cycling(files, 100_000, eval_v1()), batch_size=8, shuffle=True,
                         generator=torch.Generator().manual_seed(1))
    for k, (a, b) in enumerate(zip(loader, theirs)):
        assert torch.equal(a[1], b[1])
        assert torch.allclose(a[0], b[0], atol=EVAL_ATOL)
        if k == 4:
            break
    traced = loader.stats()["native"]["traced"]["samples"]
    # 5 batches taken and a few more submitted ahead of them: nowhere near the epoch
    assert 40 <= traced <= 40 + 8 * 8, traced
    # num_workers=0: each traced index's one call is the one torch's loader would make here
    assert dataset.calls == traced


class Disagrees(Cycling):
    """Index 150 (not a probe) goes through another transform object, and index 151 draws
    from Python's global generator: each runs through its own __getitem__."""

    def __init__(self, files, n):
        super().__init__(files, n, eval_v1())
        self.other = eval_v1()

    def __getitem__(self, i):
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        if i == 151 and random.random() < 2:  # a draw outside the transforms
            return self.transform(image), i % 7
        return (self.other if i == 150 else self.transform)(image), i % 7


@pytest.mark.parametrize("num_workers", [0, 2])
@needs_ops
def test_a_later_index_that_disagrees_runs_through_its_own_getitem(files, num_workers):
    n = 200
    assert 150 not in probe(Cycling(files, n, eval_v1())).probes.samples
    loader = fastload.DataLoader(Disagrees(files, n), batch_size=8, num_workers=num_workers)
    assert loader.path.startswith("native: traced Disagrees.__getitem__"), loader.path
    with pytest.warns(UserWarning, match=r"Disagrees.__getitem__ \(traced, index 150\): passes the image to another "
                                         r"transform object than index 0's .* runs through its own __getitem__"):
        ours = list(loader)
    theirs = list(TorchLoader(Disagrees(files, n), batch_size=8))
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a[1], b[1])
        assert torch.allclose(a[0], b[0], atol=EVAL_ATOL), (a[0] - b[0]).abs().max()
    fallbacks = loader.stats()["native"]["traced"]["fallbacks"]
    assert sorted(fallbacks) == [150, 151]
    assert "draws random numbers outside the transforms (random)" in fallbacks[151]
    # the fallback's own image (not the placeholder the engine made)
    row = ours[150 // 8][0][150 % 8]
    assert not torch.allclose(row, ours[0][0][0], atol=EVAL_ATOL)


class Structured(Cycling):
    def __getitem__(self, i):
        image = Image.open(self.files[i % len(self.files)]).convert("RGB")
        return {"pixel_values": self.transform(image), "labels": i % 7, "i": i}


@needs_ops
def test_resume_mid_epoch_through_a_lazily_traced_dataset(files):
    def make():
        return fastload.DataLoader(Structured(files, 60, T.Compose([T.RandomResizedCrop(16), T.ToTensor()])),
                                   batch_size=7, shuffle=True, seed=5, generator=torch.Generator().manual_seed(2))

    assert make().path.startswith("native: traced Structured.__getitem__"), make().path
    check_resume_at_every_position(make, positions=[0, 3, 5, 9])


@needs_ops
def test_ddp_reads_each_sample_once_and_each_rank_traces_its_own(files, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(HERE, "ddp", "run_traced.py"), "--images", os.path.dirname(os.path.dirname(files[0])),
           "--out", str(tmp_path)]
    # this checkout's fastload in the ranks, whatever the environment installs
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert all(r["path"].startswith("native: traced Cycling.__getitem__") for r in ranks), ranks[0]["path"]
    seen = ranks[0]["seen"] + ranks[1]["seen"]
    assert sorted(seen) == list(range(600))  # exactly once across the ranks
    for r in ranks:
        # its own 300 samples, each called once in its process (num_workers=0), none of the other rank's
        assert r["traced"] == r["calls"] == 300, r


def test_trace_false_turns_the_tracer_off_for_one_loader(files):
    dataset = Cycling(files, 100, eval_v1())
    assert fastload.DataLoader(dataset, batch_size=4, trace=False).path.startswith("generic: Cycling is not a "), \
        "the tracer ran"
    assert dataset.calls == 0
    with pytest.raises(TypeError, match="expected trace=True or False"):
        fastload.DataLoader(dataset, batch_size=4, trace="no")
