"""Frameworks that build DataLoaders: the names they bind are patched, Accelerate's batch
samplers run natively (against torch's DataLoader), accelerator.prepare under
`python -m fastload run` shards a native fastload loader once across 2 torchrun ranks
(gather_for_metrics, save_state/load_state + skip_first_batches exact, equal to torch's),
transformers' Trainer trains on fastload's loaders, and timm's create_loader builds them. Each test skips, with the reason,
where its framework is absent (`make setup` installs them)."""

import importlib
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

import fastload
from fastload import ops
from resume_helpers import batches_equal, check_resume_at_every_position

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS_SCRIPT = os.path.join(HERE, "frameworks", "accelerate_ranks.py")
LAUNCH_TIMEOUT_S = 240
SAMPLES = 10  # one image per class (label = index); 2 ranks x batch 2 leave a remainder of 2
IMAGE_SUM_ATOL = 1e-2  # ~3e3 values per rank's batch, each within ~1e-6
TORCH = {"class": torch.utils.data.dataloader.DataLoader}  # (a container: patch() rebinds module names)


def need(module):
    return pytest.importorskip(module, reason=f"{module.split('.')[0]} is not installed (make setup installs it)")


@pytest.fixture(scope="module")
def folder(make_image_folder):
    return make_image_folder(classes=SAMPLES, per_class=1, size=(40, 52))


def dataset(folder):
    return fastload.ImageFolder(folder, ops=[ops.RandomResizedCrop(16), ops.Normalize((0.5,) * 3, (0.5,) * 3)],
                                seed=5)


# ---------------------------------------------------------------------------------------
# The names frameworks bind at import


@pytest.mark.parametrize("module", ["accelerate.data_loader", "transformers.trainer"])
def test_patch_rebinds_the_name_a_framework_bound_at_import(module):
    framework = need(module)
    from fastload.patch import PatchedDataLoader, patch, unpatch

    assert framework.DataLoader is TORCH["class"]
    patch(summary=False)
    try:
        assert framework.DataLoader is PatchedDataLoader
    finally:
        unpatch()
    assert framework.DataLoader is TORCH["class"]


# ---------------------------------------------------------------------------------------
# Accelerate's batch samplers on the native path


def shard(process_index, seed=3, seedable=False):
    data_loader = need("accelerate.data_loader")
    if seedable:
        sampler = data_loader.SeedableRandomSampler(range(SAMPLES), data_seed=seed)
    else:
        sampler = RandomSampler(range(SAMPLES), generator=torch.Generator().manual_seed(seed))
    return data_loader.BatchSamplerShard(BatchSampler(sampler, 3, False), num_processes=2,
                                         process_index=process_index)


@pytest.mark.parametrize("process_index", [0, 1])
def test_batch_sampler_shard_runs_native_like_torch(folder, process_index):
    ours = fastload.DataLoader(dataset(folder), batch_sampler=shard(process_index), dct_scaling=False)
    assert ours.path.startswith("native: ")
    reference_dataset = dataset(folder)
    theirs = torch.utils.data.DataLoader(reference_dataset, batch_sampler=shard(process_index))
    for epoch in range(3):
        reference_dataset.set_epoch(epoch)
        got, want = list(ours), list(theirs)
        assert [b[1].tolist() for b in got] == [b[1].tolist() for b in want], f"epoch {epoch}"
        for a, b in zip(got, want):
            torch.testing.assert_close(a[0], b[0], atol=1e-4, rtol=0)  # see tests/test_batch_sampler.py


def test_batch_sampler_shard_resumes_at_every_position(folder):
    check_resume_at_every_position(
        lambda: fastload.DataLoader(dataset(folder), batch_sampler=shard(1), dct_scaling=False))


def test_a_finished_epoch_of_a_seedable_sampler_resumes_at_the_next(folder):
    """SeedableRandomSampler counts its own epochs (set_epoch(epoch + 1) at its end): a
    state saved after an epoch's last batch resumes at the next epoch's order."""
    def make():
        return fastload.DataLoader(dataset(folder), batch_sampler=shard(0, seedable=True), dct_scaling=False)

    reference = make()
    epochs = [list(reference) for _ in range(3)]
    assert [b[1].tolist() for b in epochs[0]] != [b[1].tolist() for b in epochs[1]]
    run = make()
    list(run)
    state = run.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert all(map(batches_equal, list(resumed), epochs[1]))
    assert all(map(batches_equal, list(resumed), epochs[2]))


# ---------------------------------------------------------------------------------------
# accelerator.prepare under python -m fastload run, 2 torchrun ranks


@pytest.fixture(scope="module")
def accelerate_ranks(folder, tmp_path_factory):
    need("accelerate")
    out = str(tmp_path_factory.mktemp("accelerate") / "ranks.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "fastload", "run", RANKS_SCRIPT, folder, out]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in {LAUNCH_TIMEOUT_S} s (a hang?):\n{(e.stderr or b'')[-3000:]!r}")
    assert proc.returncode == 0, proc.stderr[-5000:]
    with open(out) as f:
        return json.load(f), proc.stderr


def test_prepare_builds_its_shards_over_a_native_fastload_loader(accelerate_ranks):
    result, stderr = accelerate_ranks
    assert result["world"] == 2
    assert result["torch"]["base"] == "DataLoader"  # unpatched: torch's, the reference
    assert result["fastload"]["base"] == result["fastload"]["resume_base"] == "PatchedDataLoader"
    assert result["prepared"]["base"] == "DataLoader" and result["prepared"]["resume_base"] == "DataLoader"
    for run in ("fastload", "prepared"):
        assert result[run]["path"].startswith("native: ImageFolder")
    assert all(f"[rank {r}] fastload: " in stderr for r in (0, 1))


def test_prepare_shards_once_and_gathers_every_sample_once(accelerate_ranks):
    result, _ = accelerate_ranks
    for run in ("torch", "prepared", "fastload"):
        for epoch, steps in enumerate(result[run]["epochs"]):
            gathered = [label for step in steps for label in step["gathered"]]
            assert sorted(gathered) == list(range(SAMPLES)), f"{run} epoch {epoch}: {gathered}"
            assert all(len(step["labels"]) == 2 for step in steps)  # rank 0's share of each step


@pytest.mark.parametrize("run", ["fastload", "prepared"])
def test_prepare_gives_torchs_batches_and_resumes_exactly(accelerate_ranks, run):
    result, _ = accelerate_ranks
    torch_run, ours = result["torch"], result[run]
    for epoch, (got, want) in enumerate(zip(ours["epochs"], torch_run["epochs"])):
        assert [s["gathered"] for s in got] == [s["gathered"] for s in want], f"epoch {epoch}"
        # Images (their sums): the engine vs the dataset's own __getitem__ under torch's
        # loader; no DCT scaling at these sizes, so only summation order differs per pixel.
        assert [s["images"] for s in got] == pytest.approx([s["images"] for s in want], abs=IMAGE_SUM_ATOL)
    steps = 1  # accelerate_ranks.py's STEPS
    assert [s["labels"] for s in ours["resume"]] == [s["labels"] for s in ours["epochs"][1][steps:]]
    assert [s["gathered"] for s in ours["resume"]] == [s["gathered"] for s in torch_run["resume"]]


# ---------------------------------------------------------------------------------------
# transformers' Trainer


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {"x": torch.tensor([float(i)]), "labels": torch.tensor(float(i))}


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(1, 1)

    def forward(self, x, labels=None):
        out = self.linear(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def trainer_of(tmp_path, model, dataset):
    """transformers' Trainer for one CPU epoch of batch 2, no logging or checkpoints (call under the patch)."""
    transformers = importlib.import_module("transformers")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2,
                                          num_train_epochs=1, use_cpu=True, report_to=[], save_strategy="no",
                                          logging_strategy="no", disable_tqdm=True)
    return transformers.trainer.Trainer(model=model, args=args, train_dataset=dataset)


def test_trainer_trains_on_fastload_loaders(tmp_path):
    need("transformers.trainer")
    from fastload.patch import patch, patched_loaders, unpatch

    seen = len(patched_loaders())
    patch(summary=False)
    try:
        trainer = trainer_of(tmp_path, Regression(), Rows())
        loader = trainer.get_train_dataloader()
        assert isinstance(loader.base_dataloader, fastload.DataLoader)
        assert sorted(int(i) for batch in loader for i in batch["labels"]) == list(range(6))
        trainer.train()
    finally:
        unpatch()
    built = patched_loaders()[seen:]
    # The Trainer's collator is a custom collate_fn: the generic path, and the reason is said.
    assert built and all(r.path == "generic: custom collate_fn" for r in built)
    assert any(r.where.startswith("trainer.py:") for r in built)


class Photos(torch.utils.data.Dataset):
    """An image dataset as Hugging Face-style scripts write it: {"pixel_values", "labels"}."""

    def __init__(self, root):
        import glob

        from torchvision import transforms as T

        self.files = sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))
        self.transform = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor()])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image

        return {"pixel_values": self.transform(Image.open(self.files[i]).convert("RGB")), "labels": i % 3}


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3 * 16 * 16, 3)

    def forward(self, pixel_values, labels=None):
        logits = self.linear(pixel_values.flatten(1))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def test_trainer_runs_an_image_dataset_natively_through_its_collator(folder, tmp_path):
    """The Trainer's default collator (default_data_collator, behind its column-removing
    wrapper) stacks the images: followed around the engine's batch (fastload.trace.collate)."""
    need("transformers.trainer")
    from fastload.patch import patch, patched_loaders, unpatch

    seen = len(patched_loaders())
    patch(summary=False)
    try:
        trainer = trainer_of(tmp_path, Classifier(), Photos(folder))
        loader = trainer.get_train_dataloader()
        batch = next(iter(loader))
        assert batch["pixel_values"].shape == (2, 3, 16, 16) and batch["labels"].dtype == torch.int64
        trainer.train()
    finally:
        unpatch()
    built = patched_loaders()[seen:]
    assert built and all(r.path.startswith("native: traced Photos.__getitem__") for r in built), \
        [r.path for r in built]


# ---------------------------------------------------------------------------------------
# accelerator.prepare(fastload_loader) in one process, with and without the patch


PREPARE_SCRIPT = '''
import sys, warnings
import torch
import fastload
from fastload import ops
from accelerate import Accelerator

dataset = fastload.ImageFolder(sys.argv[1], ops=[ops.Resize((8, 8)), ops.Normalize((0.5,) * 3, (0.5,) * 3)])
accelerator = Accelerator(cpu=True)
if sys.argv[2] == "patched":
    fastload.patch(summary=False)
loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, dtype=torch.float64, seed=7)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    prepared = accelerator.prepare(loader)
    base = prepared.base_dataloader
    images, labels = next(iter(prepared))
import accelerate.data_loader
print(type(base).__name__, getattr(base, "path", "-").split(":")[0], images.dtype, getattr(base, "seed", None),
      len(prepared), accelerate.data_loader.DataLoader.__module__)
skipped = accelerator.skip_first_batches(prepared, 1)  # Accelerate's resume: torch's class again
print(type(skipped.base_dataloader).__module__, len(list(skipped)))
for w in caught:
    print("warning:", w.message)
'''


@pytest.mark.parametrize("mode", ["patched", "plain"])
def test_prepare_keeps_a_fastload_loader_and_its_extras(folder, tmp_path, mode):
    need("accelerate")
    script = tmp_path / "prepare.py"
    script.write_text(PREPARE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, str(script), folder, mode], capture_output=True, text=True,
                          timeout=LAUNCH_TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    if mode == "patched":
        assert lines == ["PatchedDataLoader native torch.float64 7 3 fastload.patch",
                         "fastload.patch 2"]
    else:
        # The one rebuild in prepare() is fastload's, then Accelerate's name is torch's again.
        assert lines == ["DataLoader native torch.float64 7 3 torch.utils.data.dataloader",
                         "torch.utils.data.dataloader 2"]


# ---------------------------------------------------------------------------------------
# timm's loader factory


@pytest.mark.parametrize("prefetcher", [False, True])
def test_timm_create_loader_builds_fastload_under_the_patch(image_folder, prefetcher):
    timm_loader = need("timm.data.loader")
    torchvision = need("torchvision")
    from fastload.patch import PatchedDataLoader, patch, unpatch

    dataset = torchvision.datasets.ImageFolder(image_folder)
    patch(summary=False)
    try:
        loader = timm_loader.create_loader(dataset, input_size=(3, 32, 32), batch_size=4, is_training=True,
                                           use_prefetcher=prefetcher, device=torch.device("cpu"), num_workers=0)
        inner = loader.loader if prefetcher else loader
        assert type(inner) is PatchedDataLoader
        # timm's train transforms run natively; with its prefetcher, they end in ToNumpy (uint8) and
        # fast_collate stacks them: the engine's uint8 batch, as a tuple.
        assert inner.path.startswith("native: torchvision ImageFolder"), inner.path
        assert ("collate_fn timm fast_collate followed" in inner.path) == prefetcher, inner.path
        batches = list(loader)
    finally:
        unpatch()
    assert [tuple(x.shape) for x, _ in batches] == [(4, 3, 32, 32)] * 2
    assert sorted(torch.cat([y for _, y in batches]).tolist()) == sorted(dataset.targets)


def test_timms_default_prefetcher_path_gives_timms_values(image_folder):
    """create_loader(use_prefetcher=True) for evaluation: ToNumpy, fast_collate and the
    prefetcher's normalisation, through fastload's native loader and through torch's."""
    timm_loader = need("timm.data.loader")
    torchvision = need("torchvision")
    from fastload.patch import patch, unpatch

    def batches():
        dataset = torchvision.datasets.ImageFolder(image_folder)
        loader = timm_loader.create_loader(dataset, input_size=(3, 32, 32), batch_size=4, is_training=False,
                                           use_prefetcher=True, device=torch.device("cpu"), num_workers=0)
        return loader, list(loader)

    theirs = batches()[1]
    patch(summary=False)
    try:
        loader, ours = batches()
        assert loader.loader.path.startswith("native: torchvision ImageFolder"), loader.loader.path
    finally:
        unpatch()
    assert len(ours) == len(theirs)
    for (x, y), (want_x, want_y) in zip(ours, theirs):
        assert x.dtype == want_x.dtype and x.shape == want_x.shape and torch.equal(y, want_y)
        # two uint8 levels of resize rounding, after timm's normalisation (std ~0.225)
        assert torch.allclose(x, want_x, atol=2.5 / 255 / 0.225), (x - want_x).abs().max()
