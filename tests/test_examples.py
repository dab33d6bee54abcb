"""The examples run: a tiny configuration of each on the CPU (the AMP loop in this process,
the others as scripts, as a user runs them), and the properties they rely on hold: the
quantization calibration sees the same batches on every run, a Lightning run resumed
mid-epoch sees the uninterrupted run's batches."""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torchvision")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_train_amp_tiny(amp, tmp_path):
    example = load("train_amp")
    data = example.make_tiny_folder(str(tmp_path), classes=2, per_class=8)
    result = example.main(["--tiny", "--data", data, "--device", "cpu", "--amp", amp, "--epochs", "2",
                           "--workers", "1", "--accumulate", "2"])
    assert result["path"].startswith("native")
    assert result["batches"] == 2 and len(result["losses"]) == 4
    assert all(math.isfinite(loss) for loss in result["losses"])


def run_example(name, *args, timeout=150):
    """Runs examples/<name>.py as a script; returns its stdout (fails with its output)."""
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, f"{name}.py"), *args], capture_output=True,
                            text=True, timeout=timeout, cwd=os.path.join(EXAMPLES, ".."))
    assert result.returncode == 0, \
        f"{name}.py {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result.stdout


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.timeout(200)
def test_train_lightning_tiny_resumed_run_sees_the_uninterrupted_runs_batches(tmp_path):
    pytest.importorskip("pytorch_lightning")
    out = run_example("train_lightning", "--tiny", "--record", str(tmp_path / "batches"))
    assert "train loader: native" in out
    step = int(re.search(r"resume: from \S*step=(\d+)\.ckpt", out).group(1))
    full = read_jsonl(tmp_path / "batches.full.rank0")
    resumed = read_jsonl(tmp_path / "batches.resumed.rank0")
    assert [(r["epoch"], r["batch"]) for r in full] == [(e, b) for e in range(2) for b in range(8)]
    assert len({r["hash"] for r in full}) == len(full)  # every batch differs: the hashes see the data
    after = [r for r in full if r["step"] >= step]
    assert 0 < len(after) < 8 and after[0]["batch"] > 0  # the checkpoint is inside an epoch
    # The resumed run continues on the next batch: no batch skipped, none repeated, the
    # same samples with the same random crops (each hash covers labels and pixels).
    assert resumed == after


def test_quantize_tiny_calibrates_on_the_same_batches_every_run(tmp_path):
    data = load("train_amp").make_tiny_folder(str(tmp_path / "data"), classes=2, per_class=16)
    out = run_example("quantize", "--tiny", "--data", data)
    # The script hashed the calibration batches on two passes and stopped had they differed.
    match = re.search(r"calibration: (\d+) batches, fingerprint (\w+) \(identical on 2 passes\)", out)
    assert match, out
    assert "calibration loader: native" in out
    agreement = float(re.search(r"int8 agrees with fp32 on ([\d.]+)%", out).group(1))
    assert 50 <= agreement <= 100
    assert re.search(r"fp32 [\d.]+ ms, int8 [\d.]+ ms", out)

    # Another run (this process, a new loader): the same batches, so the same int8 model.
    example = load("quantize")
    loader = example.calibration_loader(data, image_size=32, batch_size=8, images=1024, workers=2)
    assert example.fingerprint(loader) == (match.group(2), int(match.group(1)))
    loader.close()


def test_prune_tiny_reaches_the_sparsity_and_fine_tunes():
    out = run_example("prune", "--tiny", "--amount", "0.6")
    assert "train loader: native" in out
    sparsity = re.search(r"sparsity ([\d.]+)% \(permanent\)", out)
    assert sparsity and abs(float(sparsity.group(1)) - 60.0) < 0.1, out
    losses = re.search(r"val loss: dense ([\d.]+), pruned ([\d.]+), fine-tuned ([\d.]+)", out)
    assert losses and all(math.isfinite(float(v)) for v in losses.groups()), out
    assert "fine-tuned 12 steps (24 micro-batches, bf16 autocast)" in out


@pytest.mark.parametrize("how", ["fastload.DataLoader", "python -m fastload run"])
def test_train_accelerate_tiny_resumes_on_the_uninterrupted_runs_batches(tmp_path, how):
    pytest.importorskip("accelerate", reason="accelerate is not installed (make setup installs it)")
    work = ["--tiny", "--work", str(tmp_path)]
    if how == "python -m fastload run":  # the script builds torch's DataLoader; the patch makes it fastload's
        def run(*args):
            proc = subprocess.run([sys.executable, "-m", "fastload", "run", os.path.join(EXAMPLES, "train_accelerate.py"),
                                   "--torch-loader", *work, *args], capture_output=True, text=True, timeout=150)
            assert proc.returncode == 0, proc.stderr[-4000:]
            assert "fastload: " in proc.stderr and " native, 0 generic" in proc.stderr
            return proc.stdout
    else:
        def run(*args):
            return run_example("train_accelerate", *work, *args)
    out = run()
    assert "train loader: native: torchvision ImageFolder" in out
    assert re.search(r"validation \d+/18 correct", out)  # gather_for_metrics: each sample counted once
    out = run("--resume")
    assert "resume: 2 batches after step 3 of epoch 1, equal to the uninterrupted run's" in out


def run_under_fastload(name, *args, timeout=150):
    """`python -m fastload run examples/<name>.py ARGS`: (stdout, the summary line on stderr)."""
    proc = subprocess.run([sys.executable, "-m", "fastload", "run", os.path.join(EXAMPLES, f"{name}.py"), *args],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{name}.py {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    summary = [line for line in proc.stderr.splitlines() if line.startswith("fastload: ")]
    assert len(summary) == 1, proc.stderr[-3000:]
    return proc.stdout, summary[0]


@pytest.mark.timeout(300)
def test_train_trainer_tiny_resumes_natively_on_the_uninterrupted_runs_batches(tmp_path):
    """transformers' Trainer, unmodified, under `python -m fastload run`: trained 12 steps,
    then a new process resumes from the checkpoint at step 6 (inside the first epoch:
    accelerate's skip_first_batches) and trains on the same samples with the same crops."""
    pytest.importorskip("transformers", reason="transformers is not installed (make setup installs it)")
    pytest.importorskip("datasets", reason="datasets is not installed (make setup installs it)")
    work = ["--tiny", "--work", str(tmp_path)]
    out, summary = run_under_fastload("train_trainer", *work)
    assert "train loader: native: Hugging Face Dataset" in out and "collate_fn collate_fn followed" in out
    assert "trained 12 steps" in out
    built = int(re.match(r"fastload: (\d+) DataLoader", summary).group(1))
    assert summary.endswith(f"{built} native, 0 generic")
    out, summary = run_under_fastload("train_trainer", *work, "--resume", "--resume-step", "6")
    assert "resume: 6 steps after step 6, equal to the uninterrupted run's (samples and pixels)" in out
    # One loader more than the uninterrupted run built (the resumed epoch's), every one native.
    assert summary == f"fastload: {built + 1} DataLoaders: {built + 1} native, 0 generic"


def test_train_timm_tiny_runs_timms_default_loader_natively(tmp_path):
    pytest.importorskip("timm", reason="timm is not installed (make setup installs it)")
    out, summary = run_under_fastload("train_timm", "--tiny", "--work", str(tmp_path), "--record",
                                      str(tmp_path / "batches"))
    assert "train loader: native: traced ImageDataset.__getitem__" in out and "fast_collate followed" in out
    assert summary == "fastload: 1 DataLoader: 1 native, 0 generic"
    epochs = [[r["labels"] for r in read_jsonl(tmp_path / "batches.rank0") if r["epoch"] == e] for e in range(2)]
    assert [sorted(sum(e, [])) for e in epochs] == [list(range(16))] * 2 and epochs[0] != epochs[1]
