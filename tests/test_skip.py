"""on_error="skip": one rule on every path, and every skipped sample named.

A bad sample is replaced, in its slot, by the next readable sample in dataset order
(fastload.errors.ErrorPolicy says why): the native engine, the hybrid tail in each of its
tail_on modes and the generic path (torch's machinery, with and without worker
processes) deliver the same samples, batch for batch; every batch keeps its size, so DDP
ranks keep equal batch counts and a resume is exact. loader.stats()["skipped_samples"]
lists the skipped samples (index, file, reason) and a UserWarning names each, once per
loader. The data: 13 JPEGs, one per class (so a label is its sample's index), two of them
truncated after the start of their scan (PIL and libjpeg both fail on them).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import warnings

import pytest
import torch

import fastload
import jpeg_samples as js
from fastload import transforms as T
from resume_helpers import batches_equal, check_resume_at_every_position

torchvision = pytest.importorskip("torchvision")
pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not fastload._ext.has_ops(), reason="fastload._C not built")]

N = 13
BAD = (3, 7)
BATCH = 4
SKIP_WARNING = "fastload: on_error='skip' skipped sample"


def truncate(path):
    """Keeps a JPEG's headers and the first bytes of its scan: every decoder fails on it."""
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:data.index(b"\xff\xda") + 30])


def make_folder(root, bad):
    paths = js.write_image_folder(root, classes=N, per_class=1, size=(40, 48))
    for i in bad:
        truncate(paths[i])
    return str(root), paths


@pytest.fixture(scope="module")
def damaged_folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("skip"), BAD)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("clean"), ())[0]


def keep(image):
    """A Python transform without a native equivalent: the rest of the pipeline is a tail."""
    return image


def fastload_folder(root):
    return fastload.ImageFolder(root, transforms=[T.CenterCrop(24)])


def hybrid_folder(root):
    return fastload.ImageFolder(root, transforms=[T.CenterCrop(24), keep, torchvision.transforms.PILToTensor()])


def torchvision_folder(root):
    return torchvision.datasets.ImageFolder(root, transform=torchvision.transforms.Compose(
        [torchvision.transforms.CenterCrop(24), torchvision.transforms.PILToTensor()]))


# name -> (dataset maker, loader arguments, what loader.path starts with)
PATHS = {
    "native": (fastload_folder, dict(), "native"),
    "native-threads": (fastload_folder, dict(num_workers=2), "native"),
    "generic": (fastload_folder, dict(accelerate=False), "generic"),
    "generic-workers": (fastload_folder, dict(accelerate=False, num_workers=2), "generic"),
    "hybrid-inline": (hybrid_folder, dict(tail_on="inline"), "hybrid"),
    "hybrid-threads": (hybrid_folder, dict(tail_on="threads", num_workers=2), "hybrid"),
    "hybrid-processes": (hybrid_folder, dict(tail_on="processes", num_workers=2), "hybrid"),
    "torchvision-native": (torchvision_folder, dict(), "native"),
    "torchvision-generic": (torchvision_folder, dict(accelerate=False), "generic"),
    "torchvision-generic-workers": (torchvision_folder, dict(accelerate=False, num_workers=2), "generic"),
}


def make_loader(name, root, **extra):
    make_dataset, kwargs, path = PATHS[name]
    loader = fastload.DataLoader(make_dataset(root), batch_size=BATCH, on_error="skip", dct_scaling=False,
                                 **kwargs, **extra)
    assert loader.path.startswith(path), loader.path
    return loader


def shuffled(name, root):
    return make_loader(name, root, shuffle=True, generator=torch.Generator().manual_seed(0))


def next_readable(i):
    while i in BAD:
        i = (i + 1) % N
    return i


def epoch(loader):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", SKIP_WARNING)
        return [[images, labels] for images, labels in loader]


@pytest.fixture(scope="module")
def order(clean):
    """The shuffled order's batches of sample indices (the clean folder's labels)."""
    return [labels.tolist() for _, labels in epoch(shuffled("native", clean))]


@pytest.fixture(scope="module")
def reference(damaged_folder, order):
    """The native path's shuffled epoch, checked against the rule: each bad sample of the
    order replaced by the next readable one."""
    native = epoch(shuffled("native", damaged_folder[0]))
    assert [labels.tolist() for _, labels in native] == [[next_readable(i) for i in b] for b in order]
    return native


@pytest.mark.parametrize("name", list(PATHS))
def test_every_path_delivers_the_same_samples(damaged_folder, reference, name):
    """Labels, order and pixels (the center crop is exact on every path) equal the native
    path's; on the plain order, the batches torch's DataLoader would give, with samples 3
    and 7 replaced by 4 and 8."""
    got = epoch(shuffled(name, damaged_folder[0]))
    assert [labels.tolist() for _, labels in got] == [labels.tolist() for _, labels in reference]
    assert batches_equal(got, reference), name
    plain = epoch(make_loader(name, damaged_folder[0]))
    assert [labels.tolist() for _, labels in plain] == [[0, 1, 2, 4], [4, 5, 6, 8], [8, 9, 10, 11], [12]]
    assert torch.equal(plain[0][0][3], plain[1][0][0]) and torch.equal(plain[1][0][3], plain[2][0][0])


def skip_warnings(caught):
    return [str(w.message) for w in caught if SKIP_WARNING in str(w.message)]


@pytest.mark.parametrize("name", ["native", "generic", "generic-workers", "hybrid-inline", "hybrid-processes",
                                  "torchvision-generic-workers"])
def test_stats_list_the_skipped_files_and_one_warning_names_each(damaged_folder, name):
    root, paths = damaged_folder
    loader = make_loader(name, root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            list(loader)
    named = skip_warnings(caught)
    assert len(named) == 2, named  # once per file for the loader's life, not once per epoch
    for message, i in zip(named, BAD):
        assert f"sample {i} ({paths[i]})" in message and "replaced by the next readable sample" in message
    assert all(issubclass(w.category, UserWarning) for w in caught if SKIP_WARNING in str(w.message))

    stats = loader.stats(reset=True)
    assert stats["skipped"] == 4  # each bad sample once per pass, two passes
    assert [(r["sample"], r["source"]) for r in stats["skipped_samples"]] == [(i, paths[i]) for i in BAD]
    assert all(r["reason"] for r in stats["skipped_samples"])
    assert "skipped_samples" not in stats.get("native", {})  # listed once, at the top
    report = str(stats)
    assert all(f"skipped sample {i} ({paths[i]})" in report for i in BAD), report

    assert loader.stats()["skipped_samples"] == [] and loader.stats()["skipped"] == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(loader)
    assert skip_warnings(caught) == []  # already named by this loader
    again = loader.stats()
    assert again["skipped"] == 2 and [r["sample"] for r in again["skipped_samples"]] == list(BAD)


@pytest.mark.parametrize("name,positions", [("native", None), ("generic", None), ("hybrid-inline", None),
                                            ("generic-workers", [2]), ("hybrid-processes", [2])])
@pytest.mark.filterwarnings("ignore:fastload. on_error='skip' skipped sample")  # (a colon would split it)
def test_resume_with_skipped_samples_is_exact(damaged_folder, order, reference, name, positions):
    def make():
        return shuffled(name, damaged_folder[0])

    epoch_batches = check_resume_at_every_position(make, positions=positions)
    assert batches_equal(epoch_batches, reference)  # and the same samples as the native path
    # A resumed run lists the bad samples of the rest of the epoch.
    first = make()
    head = iter(first)
    for _ in range(2):
        next(head)
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    del head, first
    list(resumed)
    assert [r["sample"] for r in resumed.stats()["skipped_samples"]] == [i for b in order[2:] for i in b if i in BAD]


def test_tar_shard_members_are_named(tmp_path):
    """A fastload.TarShards sample is named by its shard and member, on both paths."""
    shard = str(tmp_path / "s.tar")
    with tarfile.open(shard, "w") as tf:
        for i in range(5):
            data = js.encode(js.photo(32, 40, seed=i))
            if i == 2:
                data = data[:data.index(b"\xff\xda") + 30]
            for name, payload in ((f"{i:05d}.jpg", data), (f"{i:05d}.cls", str(i).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    dataset = fastload.TarShards(shard, transforms=[T.CenterCrop(24)], cache_dir=str(tmp_path / "cache"))
    runs = []
    for accelerate in ("auto", False):
        loader = fastload.DataLoader(dataset, batch_size=2, on_error="skip", accelerate=accelerate)
        with pytest.warns(UserWarning, match=r"sample 2 \(.*s\.tar:00002\.jpg\)"):
            runs.append(list(loader))
        assert [labels.tolist() for _, labels in runs[-1]] == [[0, 1], [3, 3], [4]]
        assert [(r["sample"], r["source"]) for r in loader.stats()["skipped_samples"]] == [
            (2, dataset.index.source(2))]
    assert batches_equal(runs[0], runs[1])


DDP_SCRIPT = r'''
import datetime, json, os, sys, warnings
import torch, torch.distributed as dist, torchvision
import fastload
from fastload import transforms as T

root, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
warnings.simplefilter("ignore", UserWarning)


def fl():
    return fastload.ImageFolder(root, transforms=[T.CenterCrop(24)])


def tv():
    return torchvision.datasets.ImageFolder(root, transform=torchvision.transforms.Compose(
        [torchvision.transforms.CenterCrop(24), torchvision.transforms.PILToTensor()]))


runs = {}
for name, make, kwargs in (("native", fl, {}), ("generic", fl, dict(accelerate=False)),
                           ("generic-workers", tv, dict(accelerate=False, num_workers=2))):
    loader = fastload.DataLoader(make(), batch_size=2, on_error="skip", **kwargs)
    it, labels, steps, error = iter(loader), [], [], None
    # Lockstep that cannot hang: every rank gathers (has a batch, its size) at each step,
    # and all stop at the first step where any rank has none.
    while True:
        have, size = 0, 0
        if error is None:
            try:
                batch = next(it)
                have, size = 1, len(batch[1])
                labels.append(batch[1].tolist())
            except StopIteration:
                pass
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
        mine = torch.tensor([have, size], dtype=torch.int64)
        every = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(every, mine)
        steps.append([t.tolist() for t in every])
        if not all(t[0] for t in every):
            break
    runs[name] = {"path": loader.path, "len": len(loader), "labels": labels, "steps": steps, "error": error,
                  "skipped": [r["sample"] for r in loader.stats().get("skipped_samples", [])]}
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "runs": runs}, f)
dist.barrier()
dist.destroy_process_group()
'''


def test_ddp_ranks_keep_equal_batch_counts_and_sizes_with_a_bad_file_on_one_rank(tmp_path):
    """2 processes (torchrun, gloo): samples 4 and 6, rank 0's second batch, are bad.
    Every path gives every rank len(loader) batches of the same sizes, rank 0's bad
    samples replaced by 5 and 7; only rank 0 lists them."""
    from fastload.sampling.order import make_order

    root, _ = make_folder(tmp_path / "data", (4, 6))
    script = tmp_path / "ddp_skip.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                               str(script), root, str(tmp_path)], env=env, capture_output=True, text=True,
                              timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish (a hang?): {(e.stderr or b'')[-3000:]!r}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json"))["runs"] for r in range(2)]
    bad = {4: 5, 6: 7}
    for name in ("native", "generic", "generic-workers"):
        orders = [list(make_order(dataset_len=N, batch_size=2, shuffle=False, drop_last=False, uneven="pad",
                                  rank=r, world_size=2)) for r in range(2)]
        assert 4 in orders[0][1] and 6 in orders[0][1] and not {4, 6} & {i for b in orders[1] for i in b}
        for r in range(2):
            run = ranks[r][name]
            assert run["error"] is None, (name, r, run["error"])
            assert run["path"].startswith("generic" if "generic" in name else "native")
            assert len(run["labels"]) == run["len"] == len(orders[r]), (name, r)
            assert run["labels"] == [[bad.get(i, i) for i in b] for b in orders[r]], (name, r)
        steps = ranks[0][name]["steps"]
        assert steps == ranks[1][name]["steps"]
        # Every step but the last (where all ranks stopped together) saw equal batches.
        assert all(rows[0] == rows[1] and rows[0][0] == 1 for rows in steps[:-1]), (name, steps)
        assert steps[-1] == [[0, 0], [0, 0]], (name, steps)
    for name in ("native", "generic", "generic-workers"):
        assert [ranks[r][name]["skipped"] for r in range(2)] == [[4, 6], []], name


class Traced(torch.utils.data.Dataset):
    """A Dataset of its own class (traced, fastload/trace/lazy.py): `n` samples
    cycling over the folder's 13 files, label i (so a label names its sample); index
    `draws` draws from Python's global generator outside the transforms (its trace
    disagrees with index 0's: it runs through __getitem__ per sample)."""

    def __init__(self, paths, transform, n=40, draws=None):
        self.paths, self.transform, self.n, self.draws = paths, transform, n, draws

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import random
        from PIL import Image

        if i == self.draws:
            random.random()
        return self.transform(Image.open(self.paths[i % N]).convert("RGB")), i


def traced_transform(tail):
    tv = torchvision.transforms
    return tv.Compose([tv.CenterCrop(24), keep, tv.PILToTensor()] if tail else [tv.CenterCrop(24), tv.PILToTensor()])


TRACED = {"native": (False, {}, "native"), "hybrid-inline": (True, dict(tail_on="inline"), "hybrid"),
          "hybrid-processes": (True, dict(tail_on="processes", num_workers=2), "hybrid")}


def readable(i):
    while i % N in BAD:
        i += 1
    return i


@pytest.mark.parametrize("draws", [None, 4], ids=["traced", "falls-back"])
@pytest.mark.parametrize("name", list(TRACED))
def test_a_traced_datasets_replacement_sample_is_its_own_getitem(damaged_folder, name, draws):
    """Samples 3 and 7 (files 3 and 7) are bad: their slots hold samples 4 and 8 exactly as
    the dataset's own __getitem__ makes them (image and label), 4 traced when the loader
    reaches it (no probe: the loader is lazy) or, when its trace draws random numbers,
    made by __getitem__ itself; every bad sample of the pass is counted once."""
    tail, kwargs, path = TRACED[name]
    dataset = Traced(damaged_folder[1], traced_transform(tail), draws=draws)
    # 4 last: when the first batch's sample 3 is replaced, nothing has traced 4 yet
    sampler = [0, 1, 2, 3] + list(range(5, len(dataset))) + [4]
    loader = fastload.DataLoader(dataset, batch_size=BATCH, sampler=sampler, on_error="skip", dct_scaling=False,
                                 **kwargs)
    assert loader.path.startswith(path) and "not native: Traced" not in loader.path, loader.path
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", SKIP_WARNING)
        warnings.filterwarnings("ignore", "fastload: Traced.__getitem__ .traced, index 4.")
        got = list(loader)
    order = [sampler[s:s + BATCH] for s in range(0, len(sampler), BATCH)]
    assert [labels.tolist() for _, labels in got] == [[readable(i) for i in b] for b in order]
    for (images, labels), batch in zip(got, order):
        for slot, i in enumerate(batch):
            image, label = dataset[readable(i)]
            assert torch.equal(images[slot], image), (i, readable(i))
    bad = [i for i in sampler if i % N in BAD]
    stats = loader.stats()
    assert stats["skipped"] == len(bad)
    assert [r["sample"] for r in stats["skipped_samples"]] == bad
