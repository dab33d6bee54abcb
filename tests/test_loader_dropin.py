"""fastload.DataLoader is a drop-in for torch.utils.data.DataLoader: the same scenarios run
through both, compared batch by batch (or as multisets where torch's order is not fixed)."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import os
import warnings

import pytest
import types

import torch
from torch.utils.data import (BatchSampler, DataLoader as TorchLoader, SequentialSampler,
                              SubsetRandomSampler, WeightedRandomSampler)

import fastload
from fastload import DataLoader
from loader_datasets import (BatchFetch, ConfiguredIterable, Images, RandomInWorker, RangeIterable, Squares,
                             Structured, WorkerId, collate_structured, set_init_value, split_configured)
from resume_helpers import batches_equal, check_resume_at_every_position

pytestmark = pytest.mark.timeout(120)


def same(a, b):
    """batches_equal, extended to dataclasses (field by field, same type)."""
    if dataclasses.is_dataclass(a) or dataclasses.is_dataclass(b):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return batches_equal(a, b)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _run(cls, make_dataset, make_kwargs, epochs, seed=0):
    torch.manual_seed(seed)  # the same global RNG state for both loaders
    loader = cls(make_dataset(), **make_kwargs())
    return [list(loader) for _ in range(epochs)], loader


def _assert_same(make_dataset, make_kwargs, epochs=1):
    want, ref = _run(TorchLoader, make_dataset, make_kwargs, epochs)
    got, ours = _run(DataLoader, make_dataset, make_kwargs, epochs)
    for e, (w, g) in enumerate(zip(want, got, strict=True)):
        assert len(g) == len(w), f"epoch {e}: {len(g)} batches, torch gave {len(w)}"
        for i, (a, b) in enumerate(zip(w, g, strict=True)):
            assert same(a, b), f"epoch {e} batch {i}: {b!r} != torch's {a!r}"
    return ours


def _collate_dict(samples):
    xs, ys = zip(*samples)
    return {"x": torch.stack(xs).sum(1), "y": torch.tensor(ys) * 2}


SCENARIOS = {
    "sequential": (Squares, lambda: dict(batch_size=3), 1),
    "shuffle_generator": (Squares, lambda: dict(batch_size=3, shuffle=True, generator=_gen(7)), 2),
    "shuffle_global_seed": (Squares, lambda: dict(batch_size=4, shuffle=True), 2),
    "drop_last": (Squares, lambda: dict(batch_size=3, shuffle=True, drop_last=True, generator=_gen(1)), 2),
    "subset_sampler": (Squares, lambda: dict(batch_size=2, sampler=SubsetRandomSampler([9, 1, 4, 6, 3],
                                                                                    generator=_gen(2))), 2),
    "weighted_sampler": (Squares, lambda: dict(batch_size=4, sampler=WeightedRandomSampler(
        [0.1 * (i + 1) for i in range(10)], 11, generator=_gen(3))), 1),
    "batch_sampler_list": (Squares, lambda: dict(batch_sampler=[[3, 1], [0], [9, 8, 7]]), 1),
    "batch_sampler": (Squares, lambda: dict(batch_sampler=BatchSampler(SequentialSampler(range(10)), 4, False)), 1),
    "collate_fn": (Squares, lambda: dict(batch_size=4, collate_fn=_collate_dict), 1),
    "batch_size_none": (Squares, lambda: dict(batch_size=None, shuffle=True, generator=_gen(4)), 1),
    "worker_rng": (RandomInWorker, lambda: dict(batch_size=3, shuffle=True), 2),
    "dict_batches": (Images, lambda: dict(batch_size=3), 1),
    "structured": (Structured, lambda: dict(batch_size=4, collate_fn=collate_structured), 1),
    "getitems": (lambda: BatchFetch(5), lambda: dict(batch_size=2), 1),
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_batches_as_torch(name, num_workers):
    make_dataset, make_kwargs, epochs = SCENARIOS[name]
    _assert_same(make_dataset, lambda: dict(make_kwargs(), num_workers=num_workers), epochs)


def test_structured_batches_keep_their_types():
    (batches,), _ = _run(DataLoader, Structured, lambda: dict(batch_size=4, collate_fn=collate_structured), 1)
    first = batches[0]
    assert type(first["pair"]).__name__ == "Pair" and first["tag"] == "batch"
    assert type(first["record"]).__name__ == "Record" and first["record"].image.shape == (4, 3, 2, 2)


def test_signature_matches_torch():
    torch_params = list(inspect.signature(TorchLoader.__init__).parameters.values())
    ours = list(inspect.signature(DataLoader.__init__).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[: len(torch_params)]] == \
        [(p.name, p.kind, p.default) for p in torch_params]
    extras = ours[len(torch_params):]
    assert [p.name for p in extras] == ["device", "dtype", "memory_format", "prefetch_to_device", "accelerate",
                                        "decode_on", "on_error", "distributed", "uneven", "seed", "dct_scaling",
                                        "exact", "tail_on", "trace"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extras)


def test_is_a_torch_dataloader_with_torch_attributes():
    ds = Squares()
    ours, ref = DataLoader(ds, batch_size=3, shuffle=True), TorchLoader(ds, batch_size=3, shuffle=True)
    assert isinstance(ours, TorchLoader)
    assert ours.dataset is ds
    for attr in ("batch_size", "drop_last", "num_workers", "timeout", "pin_memory", "prefetch_factor",
                 "persistent_workers", "in_order"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert type(ours.sampler) is type(ref.sampler) and type(ours.batch_sampler) is type(ref.batch_sampler)
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        ours.batch_size = 5


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size,drop_last", [(2, False), (2, True), (None, False)])
def test_iterable_dataset_split_by_workers(num_workers, batch_size, drop_last):
    _assert_same(RangeIterable, lambda: dict(batch_size=batch_size, drop_last=drop_last,
                                             num_workers=num_workers), 2)


def test_iterable_dataset_configured_in_worker_init_fn():
    # torch's documented pattern: worker_init_fn reconfigures get_worker_info().dataset.
    ours = _assert_same(ConfiguredIterable, lambda: dict(batch_size=3, num_workers=2,
                                                         worker_init_fn=split_configured), 1)
    assert sorted(int(v) for b in itertools.chain.from_iterable(_run(DataLoader, ConfiguredIterable, lambda: dict(
        batch_size=3, num_workers=2, worker_init_fn=split_configured), 1)[0]) for v in b) == list(range(10))
    assert ours.path.startswith("generic:")


def test_worker_init_fn_and_worker_info_see_the_users_dataset():
    ours = _assert_same(WorkerId, lambda: dict(batch_size=2, num_workers=2, worker_init_fn=set_init_value), 1)
    rows = torch.cat(list(ours))
    assert set(rows[:, 1].tolist()) == {0, 1}  # both workers read
    assert (rows[:, 2] == 100 + rows[:, 1]).all()  # worker_init_fn ran on the dataset copy it reads
    assert (rows[:, 3] == 1).all()  # get_worker_info().dataset is the user's dataset object


def test_persistent_workers_across_epochs():
    ours = _assert_same(Squares, lambda: dict(batch_size=3, num_workers=2, persistent_workers=True,
                                              shuffle=True, generator=_gen(5)), 3)
    assert ours._inner is not None

    class Pids(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.tensor([os.getpid()])

    def pids(persistent):
        loader = DataLoader(Pids(), batch_size=1, num_workers=2, persistent_workers=persistent)
        return [{int(b) for b in loader} for _ in range(2)]

    def abandon_then_full(cls):
        torch.manual_seed(0)
        loader = cls(Squares(10), batch_size=2, num_workers=2, persistent_workers=True, shuffle=True,
                     generator=_gen(6))
        it = iter(loader)
        head = [next(it)]
        return head + list(loader) + list(loader)

    want, got = abandon_then_full(TorchLoader), abandon_then_full(DataLoader)
    assert len(want) == len(got) and all(same(a, b) for a, b in zip(want, got, strict=True))

    first, second = pids(True)
    assert first == second  # the same worker processes served both epochs
    first, second = pids(False)
    assert not first & second  # fresh workers each epoch, as torch


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_multiprocessing_contexts(context):
    workers = 2 if context == "fork" else 1  # a spawned worker imports torch: seconds each
    _assert_same(Squares, lambda: dict(batch_size=3, num_workers=workers, multiprocessing_context=context,
                                       shuffle=True, generator=_gen(8)), 1)


def test_in_order_false_same_multiset():
    def batches(cls):
        torch.manual_seed(0)
        loader = cls(Squares(12), batch_size=2, num_workers=2, in_order=False, shuffle=True, generator=_gen(9))
        return sorted(tuple(b[0][:, 0].tolist()) for b in loader)

    assert batches(DataLoader) == batches(TorchLoader)


def test_prefetch_factor_and_timeout_do_not_change_results():
    _assert_same(Squares, lambda: dict(batch_size=2, num_workers=2, prefetch_factor=1, timeout=30), 1)


@pytest.mark.parametrize("kwargs", [
    dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None),
    dict(batch_sampler=[[1, 2], [3]]), dict(batch_size=4, sampler=[0, 2, 4, 6, 8, 1]),
])
def test_len(kwargs):
    assert len(DataLoader(Squares(10), **kwargs)) == len(TorchLoader(Squares(10), **kwargs))


@pytest.mark.parametrize("drop_last", [False, True])
def test_len_iterable(drop_last):
    kw = dict(batch_size=4, drop_last=drop_last)
    assert len(DataLoader(RangeIterable(), **kw)) == len(TorchLoader(RangeIterable(), **kw))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pin_memory(num_workers):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _assert_same(Images, lambda: dict(batch_size=3, pin_memory=True, num_workers=num_workers), 1)
    if not torch.cuda.is_available():  # torch warns that nothing gets pinned; so do we
        assert sum("pin_memory" in str(w.message) for w in caught) >= 2


def _image_folder(root, transform):
    torchvision = pytest.importorskip("torchvision")
    from PIL import Image

    for c, cls in enumerate(("cat", "dog")):
        os.makedirs(root / cls)
        for i in range(3):
            g = torch.Generator().manual_seed(10 * c + i)
            pixels = (torch.rand(6 + i, 7, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    return torchvision.datasets.ImageFolder(str(root), transform=transform)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchvision_image_folder_generic_path(tmp_path, num_workers):
    T = pytest.importorskip("torchvision.transforms")
    transform = T.Compose([T.Grayscale(), T.Resize((4, 4)), T.ToTensor()])
    ds = _image_folder(tmp_path, transform)
    ours = _assert_same(lambda: ds, lambda: dict(batch_size=4, shuffle=True, generator=_gen(0),
                                                 num_workers=num_workers), 1)
    assert ours.path.startswith("generic:")


# -- epochs and resume ---------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_at_every_position_shuffled(num_workers):
    make = lambda: DataLoader(Squares(10), batch_size=3, shuffle=True, generator=_gen(3),  # noqa: E731
                              num_workers=num_workers)
    positions = None if num_workers == 0 else [0, 2, 4]
    check_resume_at_every_position(make, positions=positions)


def test_resume_with_global_seed_and_drop_last():
    def make():
        torch.manual_seed(11)
        return DataLoader(Squares(11), batch_size=2, shuffle=True, drop_last=True)

    # The resumed epoch is exact (its seed is in the state), and so is the next one (the
    # state carries the global RNG's stream the uninterrupted run drew it from).
    check_resume_at_every_position(make)


@pytest.mark.parametrize("kwargs", [dict(batch_size=3, sampler=list(range(9, -1, -1))),
                                    dict(batch_sampler=[[3, 1], [0], [9, 8, 7], [2]])])
def test_resume_with_a_user_sampler(kwargs):
    check_resume_at_every_position(lambda: DataLoader(Squares(10), **kwargs))


def test_resume_continues_after_the_last_delivered_batch_not_the_prefetched_ones():
    loader = DataLoader(Squares(12), batch_size=2, num_workers=2, prefetch_factor=2)
    it = iter(loader)
    head = [next(it) for _ in range(2)]  # workers have prefetched more than these
    state = json.loads(json.dumps(loader.state_dict()))
    assert (state["epoch"], state["batches_consumed"]) == (0, 2)
    resumed = DataLoader(Squares(12), batch_size=2, num_workers=2)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [b[0][:, 0].tolist() for b in head + rest] == [[float(i), float(i + 1)] for i in range(0, 12, 2)]


def test_epoch_counting_rule():
    loader = DataLoader(Squares(6), batch_size=2)
    assert loader.state_dict()["epoch"] == 0
    list(loader)
    assert loader.state_dict()["epoch"] == 1  # a finished epoch: the next one from its start
    it = iter(loader)  # epoch 1
    next(it)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batches_consumed"]) == (1, 1)
    it = iter(loader)  # the abandoned epoch 1 is over: this is epoch 2
    next(it)
    assert loader.state_dict()["epoch"] == 2
    loader.set_epoch(7)
    assert loader.state_dict()["epoch"] == 2  # takes effect at the next iter()
    it = iter(loader)
    next(it)
    assert loader.state_dict()["epoch"] == 7


def test_set_epoch_reaches_a_user_sampler_with_set_epoch():
    sampler = torch.utils.data.distributed.DistributedSampler(Squares(8), num_replicas=2, rank=0, shuffle=True,
                                                              seed=1)
    loader = DataLoader(Squares(8), batch_size=2, sampler=sampler)
    ref = TorchLoader(Squares(8), batch_size=2, sampler=sampler)
    for epoch in (0, 3):
        loader.set_epoch(epoch)
        got = [b[0][:, 0].tolist() for b in loader]
        sampler.set_epoch(epoch)
        assert got == [b[0][:, 0].tolist() for b in ref]


def test_automatic_epochs_do_not_override_the_users_sampler_epoch():
    sampler = torch.utils.data.distributed.DistributedSampler(Squares(8), num_replicas=2, rank=1, shuffle=True)
    loader = DataLoader(Squares(8), batch_size=2, sampler=sampler)
    ref = TorchLoader(Squares(8), batch_size=2, sampler=sampler)
    list(loader)
    sampler.set_epoch(5)  # the user drives the sampler, as with torch
    assert [b[0].tolist() for b in loader] == [b[0].tolist() for b in ref]


def test_iterable_state_counts_epochs_only():
    loader = DataLoader(RangeIterable(0, 4), batch_size=2)
    list(loader)
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["order"] is None
    other = DataLoader(RangeIterable(0, 4), batch_size=2)
    other.load_state_dict(state)
    assert [b.view(-1).tolist() for b in other] == [[0, 1], [2, 3]]
    assert other.state_dict()["epoch"] == 2


def test_distributed_split_from_torchrun_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    seen = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        loader = DataLoader(Squares(9), batch_size=2, shuffle=True, seed=4)
        batches = [b[0][:, 0].long().tolist() for b in loader]
        assert len(loader) == len(batches) == 3  # 9 samples padded to 10, 5 per rank
        seen.append(sorted(itertools.chain.from_iterable(batches)))
    assert set(seen[0]) | set(seen[1]) == set(range(9))
    ref = DataLoader(Squares(9), batch_size=2, shuffle=True, distributed=False)
    assert len(ref) == 5


def test_no_len_dataset_with_a_sampler_like_torch():
    from loader_datasets import NoLen

    _assert_same(NoLen, lambda: dict(batch_size=2, sampler=[5, 3, 1]), 1)


def test_top_level_import_is_light():
    import subprocess
    import sys

    code = ("import sys, fastload, torch; from fastload import DataLoader; "
            "bad = [m for m in ('torchvision', 'fastload._C', 'fastload.transfer.cuda', 'PIL') if m in sys.modules]; "
            "assert not bad, bad; assert not torch.cuda.is_initialized()")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(fastload.__file__)))


# -- the native loop (with a fake runner standing in for the C++ engine) ----------------------


class FakeRunner:
    """Collates Squares samples like default_collate; records submit/result calls."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.calls = []
        self.pending = {}
        self.closed = False
        self.passes = 0
        self.plan = types.SimpleNamespace(seed=0)  # the augmentation seed the loader saves

    def set_seed(self, seed):
        self.plan.seed = seed

    def start_pass(self):
        self.passes += 1

    def keep_in_flight(self, depth):
        self.depth = depth  # batch memory is sized by it

    def discard(self, ticket):
        self.calls.append(("discard", ticket))
        self.pending.pop(ticket)

    def submit(self, indices, epoch):
        ticket = len(self.calls)
        self.calls.append(("submit", list(indices), epoch))
        self.pending[ticket] = list(indices)
        return ticket

    def result(self, ticket):
        self.calls.append(("result", ticket, len(self.pending)))
        return torch.utils.data.default_collate([self.dataset[i] for i in self.pending.pop(ticket)])

    def stats(self, reset=False):
        return {"decoded": sum(1 for c in self.calls if c[0] == "submit")}

    def close(self):
        self.closed = True


@pytest.fixture
def fake_native(monkeypatch):
    runners = []

    def select(dataset, **kwargs):
        runners.append(FakeRunner(dataset))
        return runners[-1], "native: fake runner"

    monkeypatch.setattr(fastload.loader_path, "select_path", select)
    return runners


@pytest.mark.parametrize("kwargs,exact", [({}, False), ({"dct_scaling": False}, True), ({"dct_scaling": True}, False),
                                          ({"exact": True}, True), ({"exact": False}, False),
                                          ({"dct_scaling": False, "exact": True}, True)])
def test_dct_scaling_false_means_what_exact_true_meant(monkeypatch, kwargs, exact):
    seen = []

    def select(dataset, **kw):
        seen.append(not kw["dct_scaling"])
        return FakeRunner(dataset), "native: fake runner"

    monkeypatch.setattr(fastload.loader_path, "select_path", select)
    loader = DataLoader(Squares(4), batch_size=2, **kwargs)
    assert seen == [exact] and loader.dct_scaling is not exact


def test_dct_scaling_and_exact_that_disagree_are_refused():
    with pytest.raises(ValueError, match=r"expected dct_scaling and exact .* to agree, got dct_scaling=False and "
                                         r"exact=False\. Pass dct_scaling only\."):
        DataLoader(Squares(4), batch_size=2, dct_scaling=False, exact=False)


@pytest.mark.parametrize("num_workers,prefetch_factor", [(0, None), (2, 3)])
def test_native_loop_keeps_batches_in_flight_in_order(fake_native, num_workers, prefetch_factor):
    kwargs = dict(batch_size=3, shuffle=True, num_workers=num_workers, prefetch_factor=prefetch_factor)
    torch.manual_seed(0)
    want = list(TorchLoader(Squares(10), generator=_gen(6), **kwargs))
    torch.manual_seed(0)
    loader = DataLoader(Squares(10), generator=_gen(6), **kwargs)
    got = list(loader)
    runner = fake_native[0]
    assert loader.path == "native: fake runner" and loader._inner is None  # no torch iterator
    assert len(got) == len(want) and all(batches_equal(a, b) for a, b in zip(want, got, strict=True))
    depth = max(2, prefetch_factor or 2)  # engine threads share every batch: no per-worker multiple
    in_flight = [c[2] for c in runner.calls if c[0] == "result"]
    assert max(in_flight) == min(depth, len(want))  # `depth` submitted before the first result
    assert runner.depth == depth  # and the runner keeps batch memory for that many
    assert [c[0] for c in runner.calls[:min(depth, len(want))]] == ["submit"] * min(depth, len(want))
    assert all(c[2] == 0 for c in runner.calls if c[0] == "submit")  # epoch 0
    assert loader.stats()["native"] == {"decoded": len(want)}
    list(loader)
    assert {c[2] for c in runner.calls if c[0] == "submit"} == {0, 1}
    loader.close()
    assert runner.closed


def test_native_loop_resume(fake_native):
    check_resume_at_every_position(lambda: DataLoader(Squares(10), batch_size=3, shuffle=True, generator=_gen(2)))


def test_state_between_iter_and_first_next_keeps_the_resume_point():
    dataset = torch.utils.data.TensorDataset(torch.arange(20))

    def make():
        return DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))

    reference = [b[0].tolist() for b in make()]
    first = make()
    it = iter(first)
    next(it), next(it)
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    it = iter(resumed)  # iterator made, nothing drawn yet
    again = make()
    again.load_state_dict(resumed.state_dict())
    assert [b[0].tolist() for b in again] == reference[2:]


def test_len_follows_set_epoch_after_a_resumed_epoch():
    dataset = torch.utils.data.TensorDataset(torch.arange(20))
    first = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    it = iter(first)
    next(it), next(it)
    resumed = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    resumed.load_state_dict(first.state_dict())
    assert len(resumed) == 5 and len(list(resumed)) == 3  # len: the whole epoch, as torch's
    resumed.set_epoch(1)
    assert len(resumed) == 5 and len(list(resumed)) == 5


# -- what code written against torch's DataLoader relies on -----------------------------------


def test_is_generic_in_its_batch_type_like_torch():
    import typing

    alias = DataLoader[list[torch.Tensor]]
    assert typing.get_origin(alias) is DataLoader and typing.get_args(alias) == (list[torch.Tensor],)
    assert TorchLoader[list[torch.Tensor]] is not None  # what the annotation mirrors


class Growing(torch.utils.data.Dataset):
    """A map-style dataset that grows (or shrinks) between epochs."""

    def __init__(self, n):
        self.items = list(range(n))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@pytest.mark.parametrize("kwargs", [dict(batch_size=2), dict(batch_size=2, drop_last=True), dict(batch_size=2, shuffle=True),
                                    dict(batch_size=3, shuffle=True, generator="seeded")])
def test_len_and_batches_follow_a_dataset_that_changes_size(kwargs):
    def run(cls):
        torch.manual_seed(0)
        make = dict(kwargs, generator=_gen(1)) if kwargs.get("generator") else kwargs
        dataset = Growing(5)
        loader = cls(dataset, **make)
        seen = [(len(loader), [b.tolist() for b in loader])]
        dataset.items += [10, 11, 12, 13]
        seen.append((len(loader), [b.tolist() for b in loader]))
        del dataset.items[1:7]
        seen.append((len(loader), [b.tolist() for b in loader]))
        return seen

    want, got = run(TorchLoader), run(DataLoader)
    assert got == want
    assert [length for length, _ in got] == [len(batches) for _, batches in got]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("new_len", [4, 16])
def test_state_at_an_epochs_end_after_the_dataset_changed_size_loads_over_the_new_dataset(shuffle, new_len):
    torch.manual_seed(0)
    dataset = Growing(10)
    loader = DataLoader(dataset, batch_size=3, shuffle=shuffle)
    list(loader)
    dataset.items = list(range(new_len))  # new data arrived (or some left) between epochs
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["dataset"]["len"] == state["order"]["dataset_len"] == new_len
    resumed = DataLoader(Growing(new_len), batch_size=3, shuffle=shuffle)
    resumed.load_state_dict(state)
    got = [b.tolist() for b in resumed]
    assert sorted(v for b in got for v in b) == list(range(new_len))
    assert len(got) == len(list(loader)) == -(-new_len // 3)  # the same as the loader going on


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("new_len", [4, 16])
def test_len_after_the_dataset_changed_size_changes_no_state(shuffle, new_len):
    dataset = Growing(10)
    loader = DataLoader(dataset, batch_size=3, shuffle=shuffle, generator=torch.Generator().manual_seed(3))
    list(loader)
    before = loader.state_dict()
    dataset.items = list(range(new_len))
    assert len(loader) == -(-new_len // 3)
    state = loader.state_dict()  # the finished pass still counts against its own length
    assert (state["epoch"], state["batches_consumed"]) == (1, 0)
    assert state["order"].get("generator") == before["order"].get("generator")


class _LengthUnknown(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(10))

    def __len__(self):
        raise NotImplementedError("the length of this stream is unknown")


def test_state_of_an_iterable_dataset_whose_len_raises_saves_and_loads():
    loader = DataLoader(_LengthUnknown(), batch_size=3)
    assert sum(1 for _ in loader) == 4
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["dataset"] is None
    again = DataLoader(_LengthUnknown(), batch_size=3)
    again.load_state_dict(state)
    again.load_state_dict(dict(state, dataset={"len": 10, "keys": None}))  # length unknown: not checked
    assert [b.tolist() for b in again] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_a_deep_copy_of_a_loader_that_iterated_iterates_its_own_order():
    import copy
    import gc

    loader = DataLoader(Growing(10), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(2))
    list(loader)
    twin = copy.deepcopy(loader)
    want = [b.tolist() for b in copy.deepcopy(loader)]
    list(loader)  # the original goes on to its next epoch: the copy's order must not move
    del loader
    gc.collect()
    # The torch loader the copy keeps (reused as is with persistent workers) serves the
    # copy's order, not the original's, which is gone.
    assert twin._inner.batch_sampler._cursor is twin._cursor and len(twin._inner) == 4
    assert [b.tolist() for b in twin] == want


# torch iterator attributes whose values differ on fastload's iterator, and why.
ITERATOR_DIFFERENCES = {
    "_index_sampler": "fastload's order (exact resume, DDP split) instead of torch's BatchSampler; same batches",
    "_dataset_fetcher": "reads through fastload's timing wrapper of the dataset",
    # Runtime state of the multi-process iterator: how many batches the workers got to
    # prefetch depends on timing, not on the loader.
    "_tasks_outstanding": "timing", "_send_idx": "timing", "_rcvd_idx": "timing", "_task_info": "timing",
    "_workers_status": "timing",
}
# Names only fastload's iterator has: its own state, plus __getattr__, which answers for torch's.
ITERATOR_EXTRAS = {"__getattr__", "_feed", "_length", "_loader", "_pass", "_stats", "_torch_iter"}
# Names of torch's iterator fastload's does not answer for: `__del__` (the wrapped torch
# iterator keeps its own, which runs when fastload's iterator drops it; forwarding it would
# shut persistent workers down while the loader still keeps them for the next epoch).
ITERATOR_MISSING = {0: set(), 2: {"__del__"}}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterator_has_torchs_iterator_attributes(num_workers):
    dataset = Squares(12)
    iterators = []
    for cls in (TorchLoader, DataLoader):
        torch.manual_seed(0)
        it = iter(cls(dataset, batch_size=2, shuffle=True, num_workers=num_workers))
        next(it)
        iterators.append(it)
    want, got = iterators
    assert set(dir(want)) - set(dir(got)) == ITERATOR_MISSING[num_workers]
    assert set(dir(got)) - set(dir(want)) == ITERATOR_EXTRAS
    compared = 0
    for name in sorted(set(dir(want)) - ITERATOR_MISSING[num_workers]):
        assert hasattr(got, name), name
        if name.startswith("__") or name in ITERATOR_DIFFERENCES:
            continue
        a, b = getattr(want, name), getattr(got, name)
        if isinstance(a, (bool, int, float, str, type(None))):
            assert a == b, name
        elif inspect.ismethod(a):
            assert a.__func__ is b.__func__, name  # torch's own method, on torch's iterator
        elif name in ("_dataset", "_collate_fn", "_worker_init_fn"):
            assert a is b, name  # the user's objects, not fastload's wrappers
        elif isinstance(a, (list, tuple)):
            assert type(a) is type(b) and len(a) == len(b), name
        else:
            assert type(a) is type(b), name
        compared += 1
    assert compared > (10 if num_workers == 0 else 30)
    if num_workers:
        assert len(got._workers) == 2 and all(w.pid and w.is_alive() for w in got._workers)
        got._shutdown_workers()  # what tools call on torch's iterator
        assert not any(w.is_alive() for w in got._workers)
        want._shutdown_workers()
    assert got._num_yielded == 1 and got._dataset is dataset


@pytest.mark.timeout(90)
@pytest.mark.parametrize("collect", [True, False])
def test_dropping_a_loader_mid_epoch_lets_persistent_workers_exit(monkeypatch, collect):
    """Its workers must get torch's shutdown message and exit on their own, not be killed
    (terminate()) after torch's join timeout of 5 s per worker. Without the garbage
    collector, dropping the last reference must be enough, as with torch (no reference
    cycle keeps the workers)."""
    import gc
    import multiprocessing.process

    killed = []
    terminate = multiprocessing.process.BaseProcess.terminate
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "terminate",
                        lambda self: (killed.append(self.pid), terminate(self))[1])
    loader = DataLoader(Squares(40), batch_size=2, num_workers=2, persistent_workers=True)
    it = iter(loader)
    next(it)
    workers = list(it._workers)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del it, loader
        if collect:
            gc.collect()
        for worker in workers:
            worker.join(timeout=30)
    finally:
        if enabled:
            gc.enable()
    assert not any(worker.is_alive() for worker in workers)
    assert killed == []


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kwargs", [dict(), dict(drop_last=True), dict(sampler=[]), dict(batch_size=None)])
def test_empty_dataset_yields_nothing(num_workers, kwargs):
    for cls in (TorchLoader, DataLoader):
        loader = cls(Squares(0), **dict(dict(batch_size=4), **kwargs), num_workers=num_workers)
        assert len(loader) == 0 and list(loader) == []


def test_empty_dataset_with_shuffle_is_refused_like_torch():
    # torch's RandomSampler refuses an empty dataset at construction; so does the drop-in.
    with pytest.raises(ValueError) as want:
        TorchLoader(Squares(0), batch_size=4, shuffle=True)
    with pytest.raises(ValueError) as got:
        DataLoader(Squares(0), batch_size=4, shuffle=True)
    assert str(got.value) == str(want.value)


def test_empty_dataset_under_ddp_yields_nothing_on_every_rank(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        for uneven in ("pad", "drop", "exact"):
            loader = DataLoader(Squares(0), batch_size=2, uneven=uneven)
            assert len(loader) == 0 and list(loader) == []
