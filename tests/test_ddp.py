"""DDP with real processes: torchrun (--standalone, gloo, CPU), 2 and 3 ranks.

Three launches of tests/ddp/run_loader.py, each checking several things (see its
docstring): "first" on 2 ranks, "resume" on 2 ranks (same world: bit for bit) and on 3
ranks (elastic 2 -> 3). Every launch has a timeout that fails the test: a hang (say, an
all_reduce waiting for a rank that ran out of batches) cannot pass.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import sys
from collections import Counter

import pytest
import torch
from PIL import Image

import fastload
from fastload._ext import has_ops
from fastload.sampling.order import make_order
from fastload.datasets.write import write_shards

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp", "run_loader.py")
sys.path.insert(0, os.path.join(HERE, "ddp"))
import run_loader as cfg  # noqa: E402  (the script's constants: sizes, seeds, steps)

LAUNCH_TIMEOUT_S = 150
TAR_SAMPLES = 17  # 2 ranks x 3 per batch: 2 steps leave 5 samples, enough for 3 ranks


def _launch(world, phase, work, tar):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           SCRIPT, "--phase", phase, "--work", work]
    if tar:
        cmd += ["--tar", tar, "--tar-skip", tar + "::" + os.path.join(work, "bad.tar")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun {phase} x{world} did not finish in {LAUNCH_TIMEOUT_S} s (a hang?):\n"
                    f"{(e.stdout or b'')[-3000:]!r}\n{(e.stderr or b'')[-3000:]!r}")
    if proc.returncode != 0:
        pytest.fail(f"torchrun {phase} x{world} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    ranks = []
    for r in range(world):
        with open(os.path.join(work, f"{phase}-w{world}-rank{r}.json")) as f:
            ranks.append(json.load(f))
    assert [x["rank"] for x in ranks] == list(range(world)) and all(x["world"] == world for x in ranks)
    return ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("ddp"))
    tar = None
    if has_ops():  # the native path reads the shards (the generic one needs fastload.reference)
        gen = torch.Generator().manual_seed(0)
        images = [(torch.randint(0, 256, (3, 10 + i % 4, 12), dtype=torch.uint8, generator=gen), i)
                  for i in range(TAR_SAMPLES)]
        write_shards(images, os.path.join(work, "s-%02d.tar"), maxcount=5)
        tar = os.path.join(work, "s-{00..03}.tar")
        # One more good sample (label TAR_SAMPLES) and an image without a label.
        jpeg = io.BytesIO()
        Image.new("RGB", (12, 10), (200, 30, 90)).save(jpeg, format="JPEG")
        with tarfile.open(os.path.join(work, "bad.tar"), "w") as tf:
            for name, data in (("good.jpg", jpeg.getvalue()), ("good.cls", str(TAR_SAMPLES).encode()),
                               ("nolabel.jpg", jpeg.getvalue())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return {
        "tar": tar,
        "first": _launch(2, "first", work, tar),
        "resume2": _launch(2, "resume", work, tar),
        "resume3": _launch(3, "resume", work, tar),
        "state": json.load(open(os.path.join(work, "state.json"))),
    }


def _expected(n, world, batch_size, uneven, drop_last, seed=None, epoch=0):
    out = []
    for r in range(world):
        order = make_order(dataset_len=n, batch_size=batch_size, shuffle=True, drop_last=drop_last,
                           uneven=uneven, seed=seed, rank=r, world_size=world)
        order.set_epoch(epoch)
        out.append(list(order))
    return out


def _flat(batches):
    return [i for b in batches for i in b]


@pytest.mark.parametrize("launch,world", [("first", 2), ("resume3", 3)])
def test_uneven_modes_disjoint_union_equal_counts(runs, launch, world):
    ranks = runs[launch]
    for uneven in ("pad", "drop", "exact"):
        for drop_last in (False, True):
            name = f"{uneven}-{drop_last}"
            per_rank = [x["modes"][name]["batches"] for x in ranks]
            counts = [len(b) for b in per_rank]
            assert len(set(counts)) == 1, f"{name}: unequal batch counts {counts}"
            assert [x["modes"][name]["len"] for x in ranks] == counts  # len(loader) told the truth
            assert per_rank == _expected(cfg.N, world, cfg.BATCH, uneven, drop_last), name
            seen = Counter(i for b in per_rank for i in _flat(b))
            if uneven in ("drop", "exact"):
                assert max(seen.values()) == 1, f"{name}: ranks overlap"
            if not drop_last and uneven in ("pad", "exact"):
                assert set(seen) == set(range(cfg.N)), f"{name}: union is not the dataset"
            if uneven == "pad" and not drop_last:
                assert sum(seen.values()) == -(-cfg.N // world) * world  # padded, like DistributedSampler
    assert cfg.N % world != 0 and cfg.N % (world * cfg.BATCH) != 0  # the sizes do not divide


def test_worker_processes_keep_the_split(runs):
    for x in runs["first"]:
        assert x["exact-workers"] == x["modes"]["exact-False"]["batches"]


def test_resume_same_world_bit_for_bit(runs):
    first, resumed = runs["first"], runs["resume2"]
    k = cfg.RESUME_STEPS
    for a, b in zip(first, resumed, strict=True):
        assert a["head"] == a["full"][:k]
        assert b["rest"] == a["full"][k:]  # the remaining batches, in order, on the same rank
        assert b["next"] == a["full_next"]  # and the following epoch as if never interrupted
    assert runs["state"]["epoch"] == cfg.RESUME["epoch"] and runs["state"]["batches_consumed"] == k
    assert len(json.dumps(runs["state"])) < 1000  # small, plain data


def test_elastic_2_to_3_sees_every_remaining_sample_once(runs):
    first, three = runs["first"], runs["resume3"]
    before = [i for x in first for i in _flat(x["head"])]
    after_per_rank = [x["rest"] for x in three]
    assert len({len(r) for r in after_per_rank}) == 1, "unequal batch counts after the elastic resume"
    after = [i for r in after_per_rank for i in _flat(r)]
    assert len(after) == len(set(after)) and not set(after) & set(before)
    assert sorted(before + after) == list(range(cfg.RESUME["n"]))
    # The next epoch runs on 3 ranks normally.
    assert [x["next"] for x in three] == _expected(cfg.RESUME["n"], 3, cfg.RESUME["batch_size"], "exact", False,
                                                   seed=cfg.RESUME["seed"], epoch=cfg.RESUME["epoch"] + 1)


def test_tar_shards_under_ddp(runs):
    if runs["tar"] is None:
        pytest.skip("fastload._C not built: TarShards runs on the native path here")
    first, two, three = runs["first"], runs["resume2"], runs["resume3"]
    assert first[0]["tar_path"].startswith("native")
    for ranks, world in ((first, 2), (three, 3)):
        labels = [[lab for b in x["tar_pad"] for lab in b["labels"]] for x in ranks]
        assert len({len(x["tar_pad"]) for x in ranks}) == 1
        assert set(sum(labels, [])) == set(range(TAR_SAMPLES))
        assert sum(len(x) for x in labels) == -(-TAR_SAMPLES // world) * world
    # A bad sample skipped at index time: counted on every rank, batch counts still equal.
    for ranks, world in ((first, 2), (three, 3)):
        assert all(len(x["tar_skipped"]) == 1 and x["tar_skipped"][0][1] == "nolabel.jpg" for x in ranks)
        assert len({len(x["tar_skip"]) for x in ranks}) == 1
        labels = [lab for x in ranks for b in x["tar_skip"] for lab in b["labels"]]
        assert sorted(labels) == list(range(TAR_SAMPLES + 1))  # exact: each sample once
    # Resume on the same world: the same pixels, bit for bit (sha1 of each image).
    k = cfg.TAR_STEPS
    for a, b in zip(first, two, strict=True):
        assert a["tar_head"] == a["tar_full"][:k]
        assert b["tar_rest"] == a["tar_full"][k:]
    # Elastic: every remaining sample once, with the images it would have had.
    before = [lab for x in first for b in x["tar_head"] for lab in b["labels"]]
    after = [lab for x in three for b in x["tar_rest"] for lab in b["labels"]]
    assert len({len(x["tar_rest"]) for x in three}) == 1
    assert sorted(before + after) == list(range(TAR_SAMPLES))
    image_of = {lab: h for x in first for b in x["tar_full"]
                for lab, h in zip(b["labels"], b["sha1"], strict=True)}
    assert all(image_of[lab] == h for x in three for b in x["tar_rest"]
               for lab, h in zip(b["labels"], b["sha1"], strict=True))
    assert len(set(image_of.values())) == TAR_SAMPLES


def test_example_train_ddp_interrupt_and_elastic_resume(tmp_path):
    """examples/train_ddp.py: 2 ranks stop mid-epoch 1 (checkpoint), 3 ranks resume it."""
    example = os.path.join(os.path.dirname(HERE), "examples", "train_ddp.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    subprocess.run([sys.executable, example, "--make-data", str(tmp_path)], check=True, timeout=60,
                   capture_output=True, env=env)
    common = ["--data", str(tmp_path / "shards" / "train-{0000..0003}.tar"), "--epochs", "2",
              "--ckpt", str(tmp_path / "ckpt.pt"), "--save-every", "1"]
    outputs = []
    for world, extra in ((2, ["--stop-after", "7"]), (3, ["--resume"])):
        try:
            proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   f"--nproc_per_node={world}", example, *common, *extra],
                                  capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"examples/train_ddp.py x{world} did not finish in {LAUNCH_TIMEOUT_S} s")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        outputs.append(proc.stdout)
    # 72 samples, 8 per rank: 5 steps per epoch on 2 ranks; step 7 = 2 steps into epoch 1.
    assert "epoch 0: 72 samples" in outputs[0] and "stopping after 7 steps" in outputs[0]
    assert "resumed: epoch 1, 2 batches already consumed (saved by 2 process(es))" in outputs[1]
    # The rest of epoch 1 (72 - 32 = 40 samples) on 3 ranks, padded to a multiple of 3.
    assert "epoch 1: 42 samples" in outputs[1]
