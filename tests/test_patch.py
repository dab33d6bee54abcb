"""fastload in place of torch's DataLoader: a global swap of the name never recurses (the
generic path builds on torch's own class, kept at import)."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.utils.data

import fastload
import fastload.generic
from loader_datasets import Squares

# (In a container: patch() rebinds every module-level name that holds torch's class, this
# module's too.)
TORCH = {"class": torch.utils.data.dataloader.DataLoader}


@pytest.fixture
def swapped():
    """torch.utils.data.DataLoader (both names) bound to fastload's class, as a user may do."""
    saved = torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader
    torch.utils.data.DataLoader = torch.utils.data.dataloader.DataLoader = fastload.DataLoader
    try:
        yield
    finally:
        torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader = saved


def test_fastload_keeps_torchs_own_class():
    assert fastload.generic.TorchDataLoader is TORCH['class'] and fastload.DataLoader.__bases__[0] is TORCH['class']


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_global_swap_does_not_recurse(swapped, num_workers):
    loader = torch.utils.data.DataLoader(Squares(5), batch_size=2, num_workers=num_workers)
    assert type(loader) is fastload.DataLoader and loader.path.startswith("generic: ")
    assert [b[1].tolist() for b in loader] == [[0, 1], [2, 0], [1]]
    assert type(loader._inner) is TORCH['class']  # the generic path's inner loader is torch's own


def test_the_class_is_found_when_the_name_was_swapped_before_fastload_loaded():
    """A process that bound the name to a subclass before importing fastload."""
    code = ("import torch.utils.data as d\n"
            "class Other(d.DataLoader): pass\n"
            "torch_class = d.DataLoader\n"
            "d.DataLoader = d.dataloader.DataLoader = Other\n"
            "import fastload.generic\n"
            "assert fastload.generic.TorchDataLoader is torch_class, fastload.generic.TorchDataLoader\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_timm_prefetcher_loader_under_a_global_swap(swapped, image_folder):
    timm_loader = pytest.importorskip("timm.data.loader", reason="timm is not installed (make setup installs it)")
    torchvision = pytest.importorskip("torchvision")
    dataset = torchvision.datasets.ImageFolder(image_folder)
    loader = timm_loader.create_loader(dataset, input_size=(3, 16, 16), batch_size=4, is_training=False,
                                       use_prefetcher=True, device=torch.device("cpu"), num_workers=0)
    assert type(loader.loader) is fastload.DataLoader
    batches = list(loader)
    assert [tuple(x.shape) for x, _ in batches] == [(4, 3, 16, 16)] * 2
    assert torch.cat([y for _, y in batches]).tolist() == dataset.targets


# ---------------------------------------------------------------------------------------
# fastload.patch() / unpatch()


@pytest.fixture
def patched():
    """fastload.patch() for one test, undone after it whatever happens."""
    from fastload.patch import patch, unpatch

    patch(summary=False)
    try:
        yield
    finally:
        unpatch()


def test_patch_binds_torchs_names_and_unpatch_restores_them():
    import types

    from fastload.patch import PatchedDataLoader, is_patched, patch, patched_names, unpatch

    before = torch.utils.data.DataLoader(Squares(4), batch_size=2)  # built before the patch
    framework = types.ModuleType("framework_bound_at_import")  # `from torch.utils.data import DataLoader`
    framework.DataLoader = TORCH['class']
    sys.modules[framework.__name__] = framework

    class Subclass(torch.utils.data.DataLoader):  # defined before the patch: stays torch's
        pass

    try:
        patch(summary=False)
        changed = patched_names()
        assert is_patched()
        assert {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader",
                "framework_bound_at_import.DataLoader"} <= set(changed)
        assert not any(name.startswith("fastload.") for name in changed)
        for name in (torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader, framework.DataLoader):
            assert name is PatchedDataLoader
        assert isinstance(before, torch.utils.data.DataLoader) and isinstance(before, framework.DataLoader)
        assert issubclass(Subclass, torch.utils.data.DataLoader)
        assert not isinstance(Squares(1), torch.utils.data.DataLoader)
        after = framework.DataLoader(Squares(4), batch_size=2)
        assert isinstance(after, fastload.DataLoader) and isinstance(after, TORCH['class'])
        assert [b[1].tolist() for b in after] == [b[1].tolist() for b in before]
        assert fastload.generic.TorchDataLoader is TORCH['class']  # fastload's own reference untouched
    finally:
        unpatch()
        del sys.modules[framework.__name__]
    assert not is_patched() and patched_names() == []
    for name in (torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader, framework.DataLoader):
        assert name is TORCH['class']
    assert type(torch.utils.data.DataLoader(Squares(2))) is TORCH['class']


def test_modules_imported_after_the_patch_bind_fastload_and_are_restored(patched, tmp_path, monkeypatch):
    from fastload.patch import PatchedDataLoader, unpatch

    (tmp_path / "imported_later.py").write_text("from torch.utils.data import DataLoader\n"
                                                "from torch.utils.data.dataloader import DataLoader as Loader\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import imported_later

    try:
        assert imported_later.DataLoader is PatchedDataLoader and imported_later.Loader is PatchedDataLoader
        unpatch()
        assert imported_later.DataLoader is TORCH['class'] and imported_later.Loader is TORCH['class']
    finally:
        del sys.modules["imported_later"]


def test_patched_loaders_say_which_ran_native_and_why_not(patched, image_folder):
    from fastload.patch import patched_loaders, summary

    torchvision = pytest.importorskip("torchvision")
    from torchvision import transforms as T

    seen = len(patched_loaders())
    native = torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(
        image_folder, transform=T.Compose([T.Resize((8, 8)), T.ToTensor()])), batch_size=4)
    generic = torch.utils.data.DataLoader(Squares(4), batch_size=2, collate_fn=list)
    records = patched_loaders()[seen:]
    assert [r.native for r in records] == [True, False]
    assert records[0].path == native.path and records[1].path == "generic: custom collate_fn" == generic.path
    assert all(r.where.startswith("test_patch.py:") for r in records)
    line = summary()
    assert line.startswith("fastload: ") and "generic" in line and f"{records[1].where}: custom collate_fn" in line


def test_a_loader_rebuilt_over_a_datasets_object_draws_its_random_crops(patched, image_folder):
    """A framework's rebuild of a loader (skip_first_batches for a resumed epoch) is built
    later, after the global RNG moved: it keeps the augmentation seed of the live fastload
    loader over that dataset object, so the resumed batches have the uninterrupted run's crops."""
    torchvision = pytest.importorskip("torchvision")
    from torchvision import transforms as T

    def folder():
        return torchvision.datasets.ImageFolder(image_folder, transform=T.Compose([
            T.RandomResizedCrop(8), T.ToTensor()]))

    dataset = folder()
    first = torch.utils.data.DataLoader(dataset, batch_size=4)
    torch.rand(3)  # (the global RNG moves on, as a training step's does)
    rebuilt = torch.utils.data.DataLoader(dataset, batch_sampler=[[2, 3], [4, 5]])
    other = torch.utils.data.DataLoader(folder(), batch_size=4)  # another object: its own draw
    assert first.path.startswith("native: ") and rebuilt.path.startswith("native: ")
    seeds = [loader.state_dict()["native_seed"] for loader in (first, rebuilt, other)]
    assert seeds[0] == seeds[1] != seeds[2]
    assert all(map(torch.equal, next(iter(rebuilt)), [b[2:4] for b in next(iter(first))]))


# ---------------------------------------------------------------------------------------
# python -m fastload run


SCRIPT = '''
import sys
import torch
from torch.utils.data import DataLoader


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i


def main():
    loader = DataLoader(Rows(), batch_size=2, collate_fn=list)
    print("argv", sys.argv[1:], __name__, type(loader).__name__, [b for b in loader])
    if "--fail" in sys.argv:
        raise ValueError("the script failed")
    sys.exit(int(sys.argv[-1]))


if __name__ == "__main__":
    main()
'''


def run_fastload(args, cwd, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "fastload", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_run_a_script_unmodified(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = run_fastload(["run", str(script), "--epochs", "1", "3"], cwd="/")
    assert proc.returncode == 3, proc.stderr  # the script's exit code
    assert proc.stdout.strip() == "argv ['--epochs', '1', '3'] __main__ PatchedDataLoader [[0, 1], [2, 3]]"
    assert proc.stderr.strip().splitlines()[-1] == "fastload: 1 DataLoader: 0 native, 1 generic (train.py:16: custom collate_fn)"


def test_run_reports_the_scripts_exception_and_a_module(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = run_fastload(["run", "train.py", "--fail", "0"], cwd=tmp_path)
    assert proc.returncode == 1 and "ValueError: the script failed" in proc.stderr
    proc = run_fastload(["run", "-m", "train", "5"], cwd=tmp_path, env={"FASTLOAD_SUMMARY": "0"})
    assert proc.returncode == 5 and "PatchedDataLoader" in proc.stdout and "fastload:" not in proc.stderr


def test_run_refuses_what_it_cannot_run(tmp_path):
    proc = run_fastload(["run", "missing.py"], cwd=tmp_path)
    assert proc.returncode == 2 and "expected a script file, got 'missing.py'" in proc.stderr
    proc = run_fastload(["train.py"], cwd=tmp_path)
    assert proc.returncode == 2 and "expected `run SCRIPT.py [ARGS...]`" in proc.stderr


DDP_SCRIPT = '''
import json, os, sys
import torch
import torch.distributed as dist
import torchvision
from torchvision import transforms as T

dist.init_process_group("gloo")
dataset = torchvision.datasets.ImageFolder(sys.argv[1], transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))
sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=3)
loader = torch.utils.data.DataLoader(dataset, batch_size=2, sampler=sampler)
epochs = []
for epoch in range(2):
    loader.set_epoch(epoch)
    labels = [i for _, y in loader for i in y.tolist()]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, labels)
    epochs.append(everyone)
if dist.get_rank() == 0:
    with open(sys.argv[2], "w") as f:
        json.dump({"type": type(loader).__name__, "path": loader.path, "epochs": epochs}, f)
dist.destroy_process_group()
'''


def test_run_under_torchrun(tmp_path, image_folder):
    pytest.importorskip("torchvision")
    from fastload._ext import has_ops

    (tmp_path / "train_ddp.py").write_text(DDP_SCRIPT)
    out = tmp_path / "out.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "fastload", "run", "train_ddp.py", image_folder, str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["type"] == "PatchedDataLoader"
    assert result["path"].startswith("native: " if has_ops() else "generic: ")
    targets = sorted(torchvision_targets(image_folder))
    for epoch in result["epochs"]:
        assert sorted(epoch[0] + epoch[1]) == targets  # each sample once, split between the ranks
        assert len(epoch[0]) == len(epoch[1])
    assert result["epochs"][0] != result["epochs"][1]  # set_epoch reached the DistributedSampler
    # (the two ranks write to one pipe: their lines may interleave)
    assert all(f"[rank {rank}] fastload: 1 DataLoader: " in proc.stderr for rank in (0, 1)), proc.stderr[-2000:]


def torchvision_targets(root):
    import torchvision

    return torchvision.datasets.ImageFolder(root).targets
