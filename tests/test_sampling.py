"""fastload.sampling: order, DDP split, resume, elastic resume (one process).

Ranks are simulated in one process with make_order(rank=r, world_size=W); the real
multi-process checks are in test_ddp.py.
"""

from __future__ import annotations

import itertools
import os
import json
from collections import Counter

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

from fastload.sampling.distributed import resolve_distributed
from fastload.sampling.order import make_order
from fastload.sampling.state import ORDER_STATE_VERSION
from resume_helpers import check_resume_at_every_position


def epochs_of(loader, n):
    return [[b[0].tolist() for b in loader] for _ in range(n)]


def ranks(n, w, b, *, uneven="pad", drop_last=False, shuffle=True, seed=0):
    return [make_order(dataset_len=n, batch_size=b, shuffle=shuffle, drop_last=drop_last,
                       uneven=uneven, seed=seed, rank=r, world_size=w) for r in range(w)]


# ---------------------------------------------------------------------------------------
# One process: exactly torch's order


@pytest.mark.parametrize("n,b,drop_last", [(23, 4, False), (23, 4, True), (24, 8, False), (24, 8, True), (3, 8, False), (3, 8, True), (7, 1, False)])
@pytest.mark.parametrize("with_generator", [True, False])
def test_same_order_as_torch_dataloader(n, b, drop_last, with_generator):
    ds = TensorDataset(torch.arange(n))
    g_torch = torch.Generator().manual_seed(7) if with_generator else None
    g_ours = torch.Generator().manual_seed(7) if with_generator else None
    torch.manual_seed(3)
    want = epochs_of(DataLoader(ds, batch_size=b, shuffle=True, drop_last=drop_last, generator=g_torch), 3)
    rng_torch = torch.get_rng_state()
    torch.manual_seed(3)
    order = make_order(dataset_len=n, batch_size=b, shuffle=True, drop_last=drop_last,
                       generator=g_ours, distributed=False)
    got = epochs_of(DataLoader(ds, batch_sampler=order, generator=g_ours), 3)
    assert got == want
    assert len(set(map(str, got))) > 1 or got[0] == []  # epochs differ (a shuffle per epoch)
    # The RNGs torch drew from end in the same state, so whatever comes next matches too.
    assert torch.equal(torch.get_rng_state(), rng_torch)
    if with_generator:
        assert torch.equal(g_ours.get_state(), g_torch.get_state())
    assert order.epoch == 2  # automatic epoch counting


def test_same_order_as_torch_with_worker_processes():
    # The multi-process iterator calls iter(batch_sampler) twice per epoch; epochs must
    # still count once and the draws stay torch's.
    ds = TensorDataset(torch.arange(10))
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    want = epochs_of(DataLoader(ds, batch_size=3, shuffle=True, generator=g1, num_workers=2), 2)
    order = make_order(dataset_len=10, batch_size=3, shuffle=True, drop_last=False, generator=g2, distributed=False)
    assert epochs_of(DataLoader(ds, batch_sampler=order, generator=g2, num_workers=2), 2) == want
    assert order.epoch == 1


@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_like_torch(drop_last):
    ds = TensorDataset(torch.arange(10))
    order = make_order(dataset_len=10, batch_size=3, shuffle=False, drop_last=drop_last, distributed=False)
    assert epochs_of(DataLoader(ds, batch_sampler=order), 2) == epochs_of(
        DataLoader(ds, batch_size=3, drop_last=drop_last), 2)
    assert len(order) == (3 if drop_last else 4)


# ---------------------------------------------------------------------------------------
# Distributed split (simulated ranks)

CASES = [(n, w, b, dl) for n in (1, 2, 5, 7, 10, 13, 31, 64, 100) for w in (2, 3, 4, 8)
         for b in (1, 2, 3, 5, 16) for dl in (False, True)]


def _exact_possible(n, w, b, drop_last):
    return drop_last or (n >= w and (b > 1 or n % w == 0))


@pytest.mark.parametrize("uneven", ["pad", "drop", "exact"])
def test_rank_split_invariants(uneven):
    checked = 0
    for n, w, b, drop_last in CASES:
        if uneven == "exact" and not _exact_possible(n, w, b, drop_last):
            with pytest.raises(ValueError, match="uneven='exact'"):
                ranks(n, w, b, uneven=uneven, drop_last=drop_last)
            continue
        per_rank = [list(o) for o in ranks(n, w, b, uneven=uneven, drop_last=drop_last)]
        where = f"N={n} W={w} B={b} drop_last={drop_last} uneven={uneven}"
        counts = {len(batches) for batches in per_rank}
        assert len(counts) == 1, f"{where}: unequal batch counts {counts}"
        assert all(len(o) == len(bs) for o, bs in zip(ranks(n, w, b, uneven=uneven, drop_last=drop_last), per_rank))
        sizes = [len(x) for bs in per_rank for x in bs]
        assert all(1 <= s <= b for s in sizes), f"{where}: batch sizes {sizes}"
        if drop_last and uneven != "exact":
            assert all(s == b for s in sizes), where
        seen = Counter(i for bs in per_rank for x in bs for i in x)
        assert set(seen) <= set(range(n)), where
        per_rank_samples = [sum(len(x) for x in bs) for bs in per_rank]
        if uneven == "exact":
            assert all(c == 1 for c in seen.values()), f"{where}: a sample seen twice"
            if not drop_last:
                assert set(seen) == set(range(n)), f"{where}: samples lost"
            else:
                assert sum(seen.values()) > n - w * b, f"{where}: dropped more than one step"
        elif uneven == "pad":
            if not drop_last:
                assert set(seen) == set(range(n)), f"{where}: samples lost"
                assert per_rank_samples == [-(-n // w)] * w
        else:  # drop
            assert all(c == 1 for c in seen.values()), where
            if not drop_last:
                assert per_rank_samples == [n // w] * w
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("uneven,ds_drop_last", [("pad", False), ("drop", True)])
@pytest.mark.parametrize("n,w,b,drop_last", [(13, 3, 2, False), (13, 3, 2, True), (10, 4, 3, False), (2, 3, 1, False), (64, 8, 4, True)])
def test_pad_and_drop_equal_distributed_sampler(uneven, ds_drop_last, n, w, b, drop_last):
    for epoch in (0, 3):
        for r, order in enumerate(ranks(n, w, b, uneven=uneven, drop_last=drop_last, seed=11)):
            sampler = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=True, seed=11, drop_last=ds_drop_last)
            sampler.set_epoch(epoch)
            order.set_epoch(epoch)
            assert list(order) == list(BatchSampler(sampler, b, drop_last))


def test_exact_smaller_last_batches_never_empty():
    per_rank = [list(o) for o in ranks(9, 4, 2, uneven="exact")]
    assert [[len(x) for x in bs] for bs in per_rank] == [[2, 1], [1, 1], [1, 1], [1, 1]]
    assert sorted(i for bs in per_rank for x in bs for i in x) == list(range(9))


def test_exact_errors_explain():
    with pytest.raises(ValueError, match="needs at least one sample per rank, got 2 samples for 3 ranks"):
        make_order(dataset_len=2, batch_size=4, shuffle=True, drop_last=False, uneven="exact", rank=0, world_size=3)
    with pytest.raises(ValueError, match="batch_size=1 needs a number of samples divisible"):
        make_order(dataset_len=5, batch_size=1, shuffle=True, drop_last=False, uneven="exact", rank=0, world_size=2)


def test_distributed_epochs_differ_and_ranks_agree():
    a, b = ranks(20, 2, 3)
    a0, b0, a1 = list(a), list(b), list(a)
    assert a.epoch == 1 and a0 != a1  # automatic epoch counting reshuffles
    a.set_epoch(0)
    assert list(a) == a0
    # The permutation depends on (seed, epoch) only: a fresh rank 1 agrees with rank 1.
    assert list(ranks(20, 2, 3)[1]) == b0
    assert list(ranks(20, 2, 3, seed=1)[1]) != b0


def test_first_steps_consume_a_prefix_of_the_global_order():
    # The property elastic resume rests on: after k lockstep steps the whole job consumed a
    # prefix of the epoch's permutation.
    n, w, b = 29, 3, 4
    g = torch.Generator()
    g.manual_seed(5)
    perm = torch.randperm(n, generator=g).tolist()
    per_rank = [list(o) for o in ranks(n, w, b, uneven="exact", seed=5)]
    taken = 0
    for step in range(len(per_rank[0])):
        taken += sum(len(bs[step]) for bs in per_rank)
        got = {i for bs in per_rank for x in bs[: step + 1] for i in x}
        assert got == set(perm[:taken])


# ---------------------------------------------------------------------------------------
# Resume


@pytest.mark.parametrize("with_generator", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_every_position_one_process(with_generator, drop_last):
    def make():
        torch.manual_seed(0)  # a new process; used only when there is no generator
        gen = torch.Generator().manual_seed(2) if with_generator else None
        return make_order(dataset_len=11, batch_size=3, shuffle=True, drop_last=drop_last,
                          generator=gen, distributed=False)
    # Without a generator the next epoch is drawn from the global RNG; the state carries
    # that RNG's stream, so the resumed order goes on with the uninterrupted run's seeds.
    check_resume_at_every_position(make, max_state_bytes=8000)


def test_resume_replays_the_generator_for_later_epochs():
    # Resumed through torch's DataLoader (which draws its base seed from the generator
    # first): the rest of the epoch, and the epochs after it, are torch's.
    ds = TensorDataset(torch.arange(11))
    g_ref = torch.Generator().manual_seed(9)
    want = epochs_of(DataLoader(ds, batch_size=3, shuffle=True, generator=g_ref), 3)
    g = torch.Generator().manual_seed(9)
    order = make_order(dataset_len=11, batch_size=3, shuffle=True, drop_last=False, generator=g, distributed=False)
    loader = DataLoader(ds, batch_sampler=order, generator=g)
    it = iter(loader)
    head = [next(it)[0].tolist() for _ in range(2)]
    state = json.loads(json.dumps(order.state_dict(2)))
    g2 = torch.Generator().manual_seed(12345)  # the new process's generator, restored by the state
    order2 = make_order(dataset_len=11, batch_size=3, shuffle=True, drop_last=False, generator=g2, distributed=False)
    order2.load_state_dict(state)
    got = epochs_of(DataLoader(ds, batch_sampler=order2, generator=g2), 3)
    assert head + got[0] == want[0]
    assert got[1:] == want[1:]
    # An end-of-epoch state restores the generator; a malformed one is refused before
    # anything is applied.
    end = order2.state_dict(len(got[-1]))
    g3 = torch.Generator().manual_seed(5)
    order3 = make_order(dataset_len=11, batch_size=3, shuffle=True, drop_last=False, generator=g3, distributed=False)
    with pytest.raises(ValueError, match="'generator' to be a saved CPU generator state"):
        order3.load_state_dict({**end, "epoch": 9, "generator": "AAAA"})
    assert order3.epoch == 0 and torch.equal(g3.get_state(), torch.Generator().manual_seed(5).get_state())


def test_resume_sequential_and_user_samplers():
    check_resume_at_every_position(lambda: make_order(
        dataset_len=10, batch_size=4, shuffle=False, drop_last=False, distributed=False))

    def with_sampler():
        s = DistributedSampler(range(13), num_replicas=3, rank=1, shuffle=True, seed=4)
        return make_order(dataset_len=13, batch_size=2, shuffle=False, drop_last=False, sampler=s)
    ref = check_resume_at_every_position(with_sampler)
    # A user DistributedSampler is not sharded again: the order is exactly its own.
    s = DistributedSampler(range(13), num_replicas=3, rank=1, shuffle=True, seed=4)
    assert ref == list(BatchSampler(s, 2, False))

    def with_batch_sampler():
        return make_order(dataset_len=9, batch_size=1, shuffle=False, drop_last=False,
                          batch_sampler=BatchSampler(range(9), 4, True))
    assert check_resume_at_every_position(with_batch_sampler) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_user_sampler_set_epoch_forwarded_and_restored():
    s = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=True, seed=1)
    order = make_order(dataset_len=10, batch_size=2, shuffle=False, drop_last=False, sampler=s)
    order.set_epoch(4)
    assert s.epoch == 4 and order.epoch == 4
    it = iter(order)
    next(it)
    state = order.state_dict(1)
    s2 = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=True, seed=1)
    order2 = make_order(dataset_len=10, batch_size=2, shuffle=False, drop_last=False, sampler=s2)
    order2.load_state_dict(state)
    assert s2.epoch == 4 and len(order2) == 2
    assert [next(it) for _ in range(2)] == list(order2)


@pytest.mark.parametrize("uneven", ["pad", "drop", "exact"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_every_position_each_rank(uneven, drop_last):
    for rank in range(3):
        def make():
            o = make_order(dataset_len=17, batch_size=2, shuffle=True, drop_last=drop_last, uneven=uneven,
                           seed=3, rank=rank, world_size=3)
            o.set_epoch(5)
            return o
        check_resume_at_every_position(make, max_state_bytes=600)


def test_state_is_the_same_on_every_rank_and_plain():
    orders = ranks(17, 3, 2, uneven="exact")
    for o in orders:
        it = iter(o)
        next(it), next(it)
    states = [o.state_dict(2) for o in orders]
    assert states[0] == states[1] == states[2]
    assert json.loads(json.dumps(states[0])) == states[0]
    assert states[0]["version"] == ORDER_STATE_VERSION


def _run_steps(orders, steps):
    """Lockstep: every rank takes `steps` batches; returns what each saw and the state."""
    its = [iter(o) for o in orders]
    seen = [[next(it) for _ in range(steps)] for it in its]
    states = [o.state_dict(steps) for o in orders]
    assert all(s == states[0] for s in states)
    return seen, json.loads(json.dumps(states[0]))


@pytest.mark.parametrize("n,b", [(17, 2), (30, 4), (31, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_elastic_2_to_3_sees_every_remaining_sample_once(n, b, drop_last):
    total_steps = len(ranks(n, 2, b, uneven="exact", drop_last=drop_last)[0])
    for k in range(total_steps):
        seen2, state = _run_steps(ranks(n, 2, b, uneven="exact", drop_last=drop_last), k)
        three = ranks(n, 3, b, uneven="exact", drop_last=drop_last)
        left = n - sum(len(x) for r in seen2 for x in r)
        if not drop_last and left < 3:
            # Fewer unseen samples than ranks: no equal, non-empty split exists; say so.
            with pytest.raises(ValueError, match=f"got {left} samples for 3 ranks"):
                three[0].load_state_dict(state)
            continue
        for o in three:
            o.load_state_dict(state)
        rest3 = [list(o) for o in three]
        assert len({len(r) for r in rest3}) == 1, f"k={k}: unequal batch counts after elastic resume"
        assert all(len(x) >= 1 for r in rest3 for x in r)
        before = [i for r in seen2 for x in r for i in x]
        after = [i for r in rest3 for x in r for i in x]
        assert not set(before) & set(after), f"k={k}: a sample seen before was served again"
        assert len(after) == len(set(after))
        if not drop_last:
            assert sorted(before + after) == list(range(n)), f"k={k}: samples lost"
        # The following epoch runs normally on 3 ranks.
        nxt = [list(o) for o in three]
        assert [list(o) for o in ranks(n, 3, b, uneven="exact", drop_last=drop_last, seed=0)] != nxt
        fresh = ranks(n, 3, b, uneven="exact", drop_last=drop_last)
        for o in fresh:
            o.set_epoch(1)
        assert nxt == [list(o) for o in fresh]
        assert all(o.epoch == 1 for o in three)


@pytest.mark.parametrize("uneven", ["pad", "drop"])
def test_elastic_pad_drop_serve_only_unseen(uneven):
    n, b = 23, 2
    seen2, state = _run_steps(ranks(n, 2, b, uneven=uneven), 3)
    three = ranks(n, 3, b, uneven=uneven)
    for o in three:
        o.load_state_dict(state)
    rest = [list(o) for o in three]
    assert len({len(r) for r in rest}) == 1
    before = {i for r in seen2 for x in r for i in x}
    after = [i for r in rest for x in r for i in x]
    unseen = set(range(n)) - before
    assert len(before) == 12
    if uneven == "pad":  # every unseen sample, plus fewer than W repeats to even out
        assert set(after) >= unseen and len(after) - len(unseen) < 3
    else:  # only unseen samples, fewer than W of them dropped
        assert set(after) <= unseen and len(after) == len(set(after)) > len(unseen) - 3


def test_elastic_chain_2_to_3_to_1_then_resume_mid_chain():
    n, b = 40, 3
    seen2, s1 = _run_steps(ranks(n, 2, b, uneven="exact"), 2)  # 12 samples
    three = ranks(n, 3, b, uneven="exact")
    for o in three:
        o.load_state_dict(s1)
    seen3, s2 = _run_steps(three, 1)  # 9 samples
    assert len(s2["segments"]) == 2
    one = make_order(dataset_len=n, batch_size=b, shuffle=True, drop_last=False, uneven="exact", distributed=False)
    one.load_state_dict(s2)
    rest = list(one)
    all_ids = [i for part in (seen2, seen3) for r in part for x in r for i in x] + [i for x in rest for i in x]
    assert sorted(all_ids) == list(range(n))
    # and the last segment's resume at every position
    def make():
        o = make_order(dataset_len=n, batch_size=b, shuffle=True, drop_last=False, uneven="exact", distributed=False)
        o.load_state_dict(s2)
        return o
    check_resume_at_every_position(make, positions=[0, 1, 3, len(rest) - 1], check_next_epoch=False)


def test_state_end_of_epoch_resumes_next_epoch():
    o = ranks(10, 2, 2)[0]
    first = list(o)
    state = o.state_dict(len(first))
    assert state["epoch"] == 1 and state["segments"] == []
    o2 = ranks(10, 2, 2)[0]
    o2.load_state_dict(state)
    o.set_epoch(1)
    assert list(o2) == list(o)


def test_load_state_validates():
    o = make_order(dataset_len=10, batch_size=2, shuffle=True, drop_last=False, distributed=False)
    list(itertools.islice(iter(o), 1))
    good = o.state_dict(1)
    with pytest.raises(ValueError, match="expected state version 1 or 2, got 99"):
        o.load_state_dict({**good, "version": 99})
    with pytest.raises(ValueError, match="dataset of 12 samples, got one saved with 10 samples"):
        make_order(dataset_len=12, batch_size=2, shuffle=True, drop_last=False, distributed=False).load_state_dict(good)
    with pytest.raises(ValueError, match="more steps than its epoch had"):
        o.load_state_dict({**good, "segments": [{**good["segments"][0], "steps": 6}]})
    with pytest.raises(ValueError, match="user sampler"):
        make_order(dataset_len=10, batch_size=2, shuffle=False, drop_last=False,
                   sampler=range(10)).load_state_dict(good)
    with pytest.raises(ValueError, match="batches_consumed"):
        o.state_dict(99)
    o.load_state_dict(good)  # still loads after the failed attempts
    assert len(o) == 4


def _edited(state, path, value):
    state = json.loads(json.dumps(state))
    *parents, last = path
    target = state
    for key in parents:
        target = target[key]
    target[last] = value
    return state


@pytest.mark.parametrize("path,value", [
    (("order", "perm", "seed"), 2 ** 70), (("order", "perm", "seed"), True), (("order", "perm", "seed"), 1.5),
    (("order", "perm"), {"kind": "generator", "state": "xx"}),
    (("order", "segments", 0, "steps"), True), (("order", "segments", 0, "world_size"), True),
    (("order", "segments", 0, "batch_size"), True), (("order", "epoch"), False),
    (("version",), 2.0), (("order", "version"), 2.0), (("dataset", "len"), True),
])
def test_hand_edited_loader_state_is_refused_with_a_value_error_before_anything_is_applied(path, value):
    import fastload

    ds = TensorDataset(torch.arange(10))
    torch.manual_seed(0)
    loader = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    it = iter(loader)
    next(it), next(it)
    good = json.loads(json.dumps(loader.state_dict()))
    fresh = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    before = fresh.state_dict()
    with pytest.raises(ValueError, match="fastload.DataLoader.load_state_dict: expected"):
        fresh.load_state_dict(_edited(good, path, value))
    assert fresh.state_dict() == before
    fresh.load_state_dict(good)
    assert len(list(fresh)) == 2


def test_seeds_manual_seed_takes_are_accepted_in_a_state():
    o = make_order(dataset_len=10, batch_size=3, shuffle=True, drop_last=False, distributed=False)
    list(itertools.islice(iter(o), 1))
    state = o.state_dict(1)
    for seed in (2 ** 64 - 1, -2 ** 63, 0):
        o.load_state_dict(_edited(state, ("perm", "seed"), seed))
        assert len(list(o)) == 3


def test_refused_state_leaves_the_order_as_it_was():
    def make():
        o = make_order(dataset_len=10, batch_size=2, shuffle=True, drop_last=False, distributed=False)
        list(itertools.islice(iter(o), 2))
        return o
    torch.manual_seed(5)
    o = make()
    good = o.state_dict(2)
    torch.manual_seed(6)
    other = make()
    before = json.dumps(other.state_dict(2))
    # Each bad part comes after parts that are fine: nothing may be applied before it.
    bad_states = [
        {**good, "epoch": 4, "rng": "not base64 state"},
        {**good, "epoch": 4, "rng": "AAAA"},
        {**good, "epoch": 4, "segments": [{**good["segments"][0], "steps": 6}]},
        {**good, "epoch": 4, "segments": [{**good["segments"][0], "world_size": 11, "uneven": "exact"}]},
    ]
    for bad in bad_states:
        with pytest.raises(ValueError):
            other.load_state_dict(bad)
        assert json.dumps(other.state_dict(2)) == before


def test_version_1_state_without_rng_still_loads():
    torch.manual_seed(0)
    o = make_order(dataset_len=10, batch_size=3, shuffle=True, drop_last=False, distributed=False)
    reference = list(o)
    torch.manual_seed(0)
    o = make_order(dataset_len=10, batch_size=3, shuffle=True, drop_last=False, distributed=False)
    list(itertools.islice(iter(o), 1))
    state = o.state_dict(1)
    assert "rng" in state and state["version"] == ORDER_STATE_VERSION == 2
    old = {k: v for k, v in state.items() if k != "rng"}
    old["version"] = 1
    resumed = make_order(dataset_len=10, batch_size=3, shuffle=True, drop_last=False, distributed=False)
    resumed.load_state_dict(old)
    assert list(resumed) == reference[1:]


def test_epochs_after_a_resume_without_generator_follow_the_uninterrupted_run():
    # Several epochs on, and with the loader's base-seed draw between epochs (as under
    # torch's DataLoader iterator): the resumed order keeps drawing the saved run's seeds.
    def make(seed):
        torch.manual_seed(seed)
        o = make_order(dataset_len=9, batch_size=2, shuffle=True, drop_last=False, distributed=False)
        o.base_seed_draws = 1
        return o

    def epoch(o):
        torch.empty((), dtype=torch.int64).random_()  # the loader's base seed
        return list(o)
    ref = make(0)
    want = [epoch(ref) for _ in range(4)]
    first = make(0)
    epoch(first)
    torch.empty((), dtype=torch.int64).random_()
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict(3)))
    resumed = make(123)  # a new process whose global RNG is elsewhere
    resumed.load_state_dict(state)
    got = [epoch(resumed) for _ in range(3)]
    assert head + got[0] == want[1] and got[1:] == want[2:]
    # and a resume of the resumed run, at an epoch's end (the resumed run goes on first:
    # make() re-seeds the global RNG, which would make the resumed run draw from it)
    state = json.loads(json.dumps(resumed.state_dict(len(got[-1]))))
    resumed_next = epoch(resumed)
    again = make(77)
    again.load_state_dict(state)
    assert epoch(again) == resumed_next


def test_argument_errors_like_torch():
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        make_order(dataset_len=4, batch_size=2, shuffle=True, drop_last=False, sampler=range(4))
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        make_order(dataset_len=4, batch_size=2, shuffle=False, drop_last=False, batch_sampler=[[0]])
    with pytest.raises(ValueError, match="expected uneven in"):
        make_order(dataset_len=4, batch_size=2, shuffle=False, drop_last=False, uneven="even", distributed=False)
    with pytest.raises(ValueError, match="positive int batch_size"):
        make_order(dataset_len=4, batch_size=0, shuffle=False, drop_last=False, distributed=False)


def test_resolve_distributed(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_distributed("auto") == (0, 1)
    with pytest.raises(RuntimeError, match="distributed=True"):
        resolve_distributed(True)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert resolve_distributed("auto") == (2, 3) == resolve_distributed(True)
    assert resolve_distributed(False) == (0, 1)
    o = make_order(dataset_len=9, batch_size=2, shuffle=False, drop_last=False, uneven="exact")
    assert list(o) == [[2, 5], [8]]
    with pytest.raises(ValueError, match="distributed='auto', True or False"):
        resolve_distributed("yes")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("with_generator", [True, False])
def test_resume_helper_on_fastload_dataloader(with_generator, shuffle, num_workers):
    # The same helper on the loader itself (generic path, torch's DataLoader under our
    # order), the epoch after the resumed one included: without a generator too.
    import fastload

    ds = TensorDataset(torch.arange(13) * 10)

    def make():
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(4) if with_generator else None
        return fastload.DataLoader(ds, batch_size=3, shuffle=shuffle, generator=gen, distributed=False,
                                   num_workers=num_workers)
    positions = None if num_workers == 0 else [1, 3, 5]
    ref = check_resume_at_every_position(make, positions=positions)
    assert sorted(int(v) for b in ref for v in b[0]) == list(range(0, 130, 10))


@pytest.mark.parametrize("window", ["after_the_epoch", "after_iter_before_next"])
def test_state_between_epochs_without_generator_resumes_the_uninterrupted_runs_next_epochs(window):
    import fastload

    ds = TensorDataset(torch.arange(10))

    def make(seed):
        torch.manual_seed(seed)
        return fastload.DataLoader(ds, batch_size=4, shuffle=True)

    ref = make(0)
    want = [[b[0].tolist() for b in ref] for _ in range(4)]
    first = make(0)
    for _ in range(2):
        list(first)
    if window == "after_iter_before_next":
        it = iter(first)  # epoch 2 begun, nothing drawn yet
    state = json.loads(json.dumps(first.state_dict()))
    assert (state["epoch"], state["batches_consumed"]) == (2, 0)
    resumed = make(42)
    resumed.load_state_dict(state)
    assert [[b[0].tolist() for b in resumed] for _ in range(2)] == want[2:]


def test_epochs_after_a_resumed_one_follow_the_uninterrupted_run_with_persistent_workers():
    import fastload

    ds = TensorDataset(torch.arange(10))

    def make(seed):
        torch.manual_seed(seed)
        return fastload.DataLoader(ds, batch_size=3, shuffle=True, num_workers=1, persistent_workers=True)

    want = [[b[0].tolist() for b in loader] for loader in [make(0)] for _ in range(3)]
    first = make(0)
    head = [b[0].tolist() for b in first]  # epoch 0, then stop in epoch 1
    it = iter(first)
    head.append(next(it)[0].tolist())
    state = json.loads(json.dumps(first.state_dict()))
    del it, first
    resumed = make(99)
    resumed.load_state_dict(state)
    got = [[b[0].tolist() for b in resumed] for _ in range(2)]
    assert head[:4] == want[0] and [head[4]] + got[0] == want[1] and got[1] == want[2]


def _epochs_of(loader, n):
    return [[b[0].tolist() for b in loader] for _ in range(n)]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_loop_that_reseeds_the_global_rng_each_epoch_gets_the_uninterrupted_order_after_a_resume(num_workers):
    import fastload

    ds = TensorDataset(torch.arange(10))

    def make():
        return fastload.DataLoader(ds, batch_size=3, shuffle=True, num_workers=num_workers)

    def run(loader, start, stop=None):
        out = []
        for epoch in range(start, 3):
            torch.manual_seed(1000 + epoch)
            out.append([])
            for b in loader:
                out[-1].append(b[0].tolist())
                if stop == (epoch, len(out[-1])):
                    return out, json.loads(json.dumps(loader.state_dict()))
        return out, None

    want, _ = run(make(), 0)
    for stop in [(0, 4), (1, 2)]:  # at an epoch's end, and mid-epoch
        head, state = run(make(), 0, stop)
        torch.manual_seed(7)  # a new process
        resumed = make()
        resumed.load_state_dict(state)
        if stop[1] == 4:
            got, _ = run(resumed, stop[0] + 1)
            assert got == want[stop[0] + 1:]
        else:
            rest = [b[0].tolist() for b in resumed]  # the rest of the resumed epoch: no re-seed
            got, _ = run(resumed, stop[0] + 1)
            assert head[-1] + rest == want[stop[0]] and got == want[stop[0] + 1:]


def test_restoring_the_global_rng_with_the_checkpoint_gets_the_uninterrupted_order_after_a_resume():
    # As Accelerate's save_state/load_state: the loader's state and torch's RNG state are
    # checkpointed together, and the RNG is restored after load_state_dict.
    import fastload

    ds = TensorDataset(torch.arange(10))

    def epoch(loader):
        return [(b[0].tolist(), torch.rand(1).item()) for b in loader]  # the model draws too

    torch.manual_seed(0)
    ref = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    want = [epoch(ref) for _ in range(3)]
    torch.manual_seed(0)
    first = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    got = [epoch(first)]
    checkpoint = {"loader": json.loads(json.dumps(first.state_dict())), "rng": torch.get_rng_state()}
    torch.manual_seed(777)  # a new process
    resumed = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    resumed.load_state_dict(checkpoint["loader"])
    torch.set_rng_state(checkpoint["rng"])
    got += [epoch(resumed) for _ in range(2)]
    assert got == want


def test_drawing_from_the_global_rng_between_epochs_after_a_resume_shuffles_like_torch():
    # Nobody restores the RNG, but the loop draws from it: the order then follows the
    # global RNG, as torch's DataLoader does with the same RNG state.
    import fastload

    ds = TensorDataset(torch.arange(10))
    torch.manual_seed(0)
    first = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    list(first)
    state = json.loads(json.dumps(first.state_dict()))
    torch.manual_seed(5)  # a new process
    resumed = fastload.DataLoader(ds, batch_size=3, shuffle=True)
    resumed.load_state_dict(state)
    reference = torch.utils.data.DataLoader(ds, batch_size=3, shuffle=True)
    for _ in range(3):
        torch.rand(3)  # e.g. a random augmentation or dropout on the CPU
        rng = torch.get_rng_state()
        ours = _epochs_of(resumed, 1)
        torch.set_rng_state(rng)
        assert ours == _epochs_of(reference, 1)


# ---------------------------------------------------------------------------------------
# The loader's state: a refused load changes nothing; states of other datasets are refused


def _jpeg_folder(root, classes=2, per_class=4, seed=0):
    from jpeg_samples import write_image_folder

    write_image_folder(root, classes=classes, per_class=per_class, size=(24, 32), seed=seed)
    return str(root)


def _native_loader(root, seed):
    import fastload
    from fastload import ops

    dataset = fastload.ImageFolder(root, ops=[ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()])
    return fastload.DataLoader(dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(1),
                               seed=seed, num_workers=0)


def _images(loader):
    return [b[0] for b in loader]


def test_refused_state_leaves_the_loader_as_it_was(tmp_path):
    root = _jpeg_folder(tmp_path / "data")
    saver = _native_loader(root, seed=5)
    assert saver.path.startswith("native"), saver.path
    next(iter(saver))
    good = json.loads(json.dumps(saver.state_dict()))
    assert good["native_seed"] == 5 and good["batches_consumed"] == 1
    bad_states = [
        {**good, "order": {**good["order"], "segments": [{**good["order"]["segments"][0], "steps": 99}]}},
        {**good, "order": {**good["order"], "version": 99}},
        {**good, "dataset": {"len": good["dataset"]["len"], "keys": "0" * 16}},
        {**good, "dataset": {"len": 1000, "keys": None}},
        {**good, "dataset": "somewhere"},
        {**good, "native_seed": 2 ** 70},
    ]
    expected = _images(_native_loader(root, seed=7))
    for bad in bad_states:
        loader = _native_loader(root, seed=7)
        before = loader.state_dict()
        with pytest.raises(ValueError):
            loader.load_state_dict(bad)
        assert loader.state_dict() == before
        got = _images(loader)
        assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected)), (
            "a refused state changed what the loader yields")
    loader = _native_loader(root, seed=7)
    loader.load_state_dict(good)  # the good state still loads, with its augmentation seed
    assert loader.state_dict()["native_seed"] == 5


def test_state_of_another_dataset_of_the_same_length_is_refused(tmp_path):
    import fastload

    a = _jpeg_folder(tmp_path / "a", seed=0)
    b = tmp_path / "b"
    _jpeg_folder(b, seed=0)
    os.rename(b / "class_1", b / "class_9")  # same length, another last sample
    moved = tmp_path / "moved"
    os.rename(a, moved)  # the same data under another root still resumes
    saver = _native_loader(str(moved), seed=5)
    next(iter(saver))
    state = json.loads(json.dumps(saver.state_dict()))
    assert state["dataset"]["len"] == 8 and isinstance(state["dataset"]["keys"], str)
    with pytest.raises(ValueError, match=r"another dataset of the same length \(8 samples\).*class_9"):
        _native_loader(str(b), seed=5).load_state_dict(state)
    resumed = _native_loader(str(moved), seed=5)
    resumed.load_state_dict(state)
    assert len(list(resumed)) == len(resumed) - 1
    # Forcing it: without the fingerprint the state loads (as a state saved before it existed).
    forced = _native_loader(str(b), seed=5)
    forced.load_state_dict({k: v for k, v in state.items() if k != "dataset"})
    # A generic dataset: only its length is fingerprinted.
    ds = fastload.DataLoader(TensorDataset(torch.arange(6)), batch_size=2)
    assert ds.state_dict()["dataset"] == {"len": 6, "keys": None}
    # torchvision-style (path, label) samples are fingerprinted too.
    tv = pytest.importorskip("torchvision")
    tva = fastload.DataLoader(tv.datasets.ImageFolder(str(moved)), batch_size=2, collate_fn=list, accelerate=False)
    tvb = fastload.DataLoader(tv.datasets.ImageFolder(str(b)), batch_size=2, collate_fn=list, accelerate=False)
    with pytest.raises(ValueError, match="another dataset of the same length"):
        tvb.load_state_dict(tva.state_dict())


def test_state_of_other_tar_shards_of_the_same_length_is_refused(tmp_path):
    import fastload
    from fastload.datasets.write import write_shards

    gen = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 10, 12), dtype=torch.uint8, generator=gen) for _ in range(6)]
    for name, labels in (("a", [0, 1, 0, 1, 0, 1]), ("b", [0, 1, 0, 1, 0, 0])):
        (tmp_path / name).mkdir()
        write_shards(list(zip(images, labels)), str(tmp_path / name / "s-%02d.tar"), maxcount=4)

    def loader(name):
        ds = fastload.TarShards(str(tmp_path / name / "s-{00..01}.tar"), ops=[fastload.ops.RandomResizedCrop(8)],
                                cache_dir=str(tmp_path / f"cache-{name}"), progress=False)
        return fastload.DataLoader(ds, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0))
    saver = loader("a")
    next(iter(saver))
    state = saver.state_dict()
    with pytest.raises(ValueError, match=r"another dataset of the same length \(6 samples\).*s-01.tar:"):
        loader("b").load_state_dict(state)
    loader("a").load_state_dict(state)


def test_version_1_loader_state_without_fingerprint_still_loads():
    import fastload

    def make():
        return fastload.DataLoader(TensorDataset(torch.arange(10)), batch_size=3, shuffle=True,
                                   generator=torch.Generator().manual_seed(3))
    reference = [b[0].tolist() for b in make()]
    first = make()
    it = iter(first)
    next(it)
    state = first.state_dict()
    assert state["version"] == 2
    old = {k: v for k, v in state.items() if k != "dataset"}
    old["version"] = 1
    old["order"] = {k: v for k, v in old["order"].items() if k != "rng"}
    old["order"]["version"] = 1
    resumed = make()
    resumed.load_state_dict(old)
    assert [b[0].tolist() for b in resumed] == reference[1:]
    with pytest.raises(ValueError, match="expected version 1 or 2, got 3"):
        make().load_state_dict({**state, "version": 3})
