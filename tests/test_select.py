"""Path selection (fastload.native.select): every "generic: <why>" reason comes from
select_path, with the texts loader.path shows; the native path's description; decode_on
resolution; no visible draw from the global RNG."""

from __future__ import annotations

import re

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, default_collate
from torch.utils.data.datapipes.map import SequenceWrapper

import fastload
from fastload import _ext, ops
from fastload.native import DECODE_ON, NativeRunner, order_left_to_torch, select_path
from loader_datasets import Squares

needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


class NoLen(Dataset):
    def __getitem__(self, i):
        return i


def select(dataset, **kwargs):
    args = dict(batch_size=2, collate_fn=None, num_workers=0, pin_memory=False, accelerate="auto", dtype=None,
                memory_format=None, on_error="raise", seed=None)
    runner, reason = select_path(dataset, **{**args, **kwargs})
    if runner is not None:
        runner.close()
    return runner, reason


@pytest.fixture(scope="module")
def folder(make_image_folder):
    return make_image_folder(classes=2, per_class=2)


def native_dataset(folder):
    return fastload.ImageFolder(folder, ops=[ops.Resize(8), ops.CenterCrop(8)])


# (dataset maker, select_path arguments, the reason). The first five are the loader's own
# texts (also checked against loader.path below); every reason select_path gives is here.
GENERIC = {
    "iterable": (lambda folder: Stream(), {}, "generic: IterableDataset (order left to the dataset and torch)"),
    "batch_size_none": (lambda folder: Squares(4), dict(batch_size=None),
                        "generic: batch_size=None (no automatic batching; order left to torch)"),
    "datapipe": (lambda folder: SequenceWrapper(range(4)), {}, "generic: a DataPipe (order left to torch)"),
    "no_len": (lambda folder: NoLen(), {}, "generic: the dataset has no __len__ (order left to torch)"),
    "accelerate_false": (native_dataset, dict(accelerate=False), "generic: accelerate=False"),
    "custom_collate": (native_dataset, dict(collate_fn=list), "generic: custom collate_fn"),
    "unsupported": (lambda folder: Squares(4), {}, "generic: Squares is not a torchvision "),
}
LOADER_TEXTS = ["iterable", "batch_size_none", "datapipe", "no_len", "accelerate_false", "custom_collate"]


@pytest.mark.parametrize("case", list(GENERIC))
def test_every_generic_reason_comes_from_select_path(folder, case):
    make, kwargs, reason = GENERIC[case]
    runner, got = select(make(folder), **kwargs)
    assert runner is None
    assert got.startswith(reason) if reason.endswith(" ") else got == reason


def test_the_environment_switch_and_a_missing_extension_are_reasons(folder, monkeypatch):
    monkeypatch.setenv("FASTLOAD_NATIVE", "0")
    assert select(native_dataset(folder)) == (None, "generic: FASTLOAD_NATIVE=0")
    monkeypatch.delenv("FASTLOAD_NATIVE")
    torchvision = pytest.importorskip("torchvision")
    from torchvision.transforms import v2

    monkeypatch.setattr(_ext, "load_extension", lambda: (None, ImportError("fastload._C not built")))
    transform = v2.Compose([v2.CenterCrop(8), v2.PILToTensor()])
    assert select(torchvision.datasets.ImageFolder(folder, transform=transform)) == (
        None, "generic: fastload._C is not built (make build)")
    with pytest.raises(_ext.NotBuiltError, match="make build"):  # a fastload dataset needs it on every path
        select(native_dataset(folder))


@pytest.mark.parametrize("case", LOADER_TEXTS)
def test_the_reasons_are_the_texts_loader_path_shows(folder, case):
    make, kwargs, reason = GENERIC[case]
    loader_kwargs = dict(kwargs)
    if "batch_size" not in loader_kwargs:
        loader_kwargs["batch_size"] = 2
    loader = fastload.DataLoader(make(folder), **loader_kwargs)
    assert loader.path == reason


def test_a_sampler_orders_a_dataset_without_len():
    assert order_left_to_torch(NoLen(), batch_size=2, sampler=[0, 1]) is None
    assert order_left_to_torch(NoLen(), batch_size=None, batch_sampler=[[0, 1]]) is None
    assert order_left_to_torch(Squares(4), batch_size=2) is None


@needs_ops
def test_a_native_dataset_gets_a_runner_and_its_description(folder):
    runner, reason = select(native_dataset(folder), num_workers=3)
    assert isinstance(runner, NativeRunner) and runner.num_threads == 3
    assert reason == "native: ImageFolder [Resize -> CenterCrop], decode_on=cpu (auto)"


@needs_ops
@pytest.mark.parametrize("kwargs, dct_scaling", [(dict(), True), (dict(dct_scaling=False), False),
                                                 (dict(dct_scaling=True), True)])
def test_dct_scaling_reaches_the_plan(folder, kwargs, dct_scaling):
    runner, _ = select(native_dataset(folder), **kwargs)
    assert runner.plan.dct_scaling is dct_scaling


@needs_ops
def test_decode_on_is_checked_and_resolved(folder):
    assert DECODE_ON == ("auto", "cpu", "cpu+gpu", "gpu")
    with pytest.raises(ValueError, match=r"expected decode_on in \('auto', 'cpu', 'cpu\+gpu', 'gpu'\), got 'tpu'"):
        select(native_dataset(folder), decode_on="tpu")
    with pytest.raises(ValueError, match=r"decode_on='gpu' needs device='cuda', got device=cpu"):
        select(native_dataset(folder), decode_on="gpu", device=torch.device("cpu"))
    runner, reason = select(native_dataset(folder), decode_on="cpu", device=torch.device("cpu"))
    assert runner.decode_on == "cpu" and reason.endswith("decode_on=cpu")


@needs_ops
def test_a_drawn_seed_leaves_the_global_rng_where_it_was(folder):
    """seed=None on a dataset without its own seed: the seed is torch's next draw, but
    the caller's stream does not move (torch's DataLoader draws nothing at construction)."""
    dataset = native_dataset(folder)
    dataset.seed = None  # as a torchvision dataset: no seed of its own
    torch.manual_seed(123)
    expected = int(torch.empty((), dtype=torch.int64).random_().item())
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    runner, _ = select(dataset)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert runner.plan.seed == expected
    runner, _ = select(dataset, seed=7)
    assert runner.plan.seed == 7


def test_default_collate_is_not_custom(folder):
    _, reason = select(Squares(4), collate_fn=default_collate)
    assert "collate_fn" not in reason


def test_colour_plans_stay_on_the_cpu_engine_when_bound_for_a_gpu(monkeypatch):
    from fastload import _ext
    from fastload.native import select

    monkeypatch.setattr(_ext, "has_cuda_ops", lambda: True)
    assert select._resolve_decode_on("auto", torch.device("cuda"), colour=False)[0] == "cpu+gpu"
    mode, why = select._resolve_decode_on("auto", torch.device("cuda"), colour=True)
    assert mode == "cpu" and "colour ops" in why
    for mode in ("cpu+gpu", "gpu"):
        with pytest.raises(ValueError, match=rf"decode_on='{re.escape(mode)}' does not run colour ops"):
            select._resolve_decode_on(mode, torch.device("cuda"), colour=True)
