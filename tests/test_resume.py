"""fastload.resume.Cursor: the epoch/position state machine, tested directly as a table.

Each row is a sequence of events on a cursor, as a loader drives it, and what must follow:
the (epoch, batches_consumed) that state_dict() names, what the next pass on the same
cursor yields, and what a fresh cursor (a new process) yields after loading that state.
"What a pass yields" is written (epoch, skip): that epoch's batches, from batch `skip` on.

The order is a distributed one (rank 0 of 2), so every epoch has its own permutation that
a fresh order reproduces from the epoch alone: 16 samples, 2 per batch, 4 batches per epoch.
"""

from __future__ import annotations

import copy
import json
from typing import Any, List, Optional

import pytest

from fastload.resume import Cursor
from fastload.sampling.order import make_order

N, BATCH, RANKS = 16, 2, 2
PER_EPOCH = N // RANKS // BATCH  # 4


def make_cursor(dataset: Optional[list] = None) -> Cursor:
    order = make_order(dataset_len=N, batch_size=BATCH, shuffle=True, drop_last=False, seed=5,
                       rank=0, world_size=RANKS)
    return Cursor(order, list(range(N)) if dataset is None else dataset)


def epoch_batches(epoch: int) -> List[List[int]]:
    order = make_order(dataset_len=N, batch_size=BATCH, shuffle=True, drop_last=False, seed=5,
                       rank=0, world_size=RANKS)
    order.set_epoch(epoch)
    return list(order)


class Driver:
    """Drives a cursor as fastload.DataLoader does (begin at iter(), batches() as the feed,
    `delivered` set as __next__ returns, `finished` at StopIteration)."""

    def __init__(self):
        self.cursor = make_cursor()
        self.batches: Any = None
        self.saved: Optional[dict] = None

    def next(self) -> Optional[List[int]]:
        try:
            batch = next(self.batches)
        except StopIteration:
            self.cursor.current.finished = True
            return None
        self.cursor.current.delivered += 1
        return batch

    def run(self, event: Any) -> None:
        name, *args = event if isinstance(event, tuple) else (event,)
        if name == "iter":
            self.cursor.begin()
            self.batches = self.cursor.batches()
        elif name == "next":
            for _ in range(args[0] if args else 1):
                assert self.next() is not None, "the pass ended early"
        elif name == "break":
            self.batches = None  # the loop left the pass; the cursor keeps it
        elif name == "finish":
            while self.next() is not None:
                pass
        elif name == "set_epoch":
            self.cursor.set_epoch(args[0])
        elif name == "state_dict":
            self.saved = json.loads(json.dumps(self.cursor.state_dict()))
        elif name == "load_state_dict":  # the state saved last in the row, else one at (0, 2)
            self.cursor.load_state_dict(copy.deepcopy(self.saved or saved_state("iter", ("next", 2))))
        elif name == "refused":  # a state that passes every check but the last one
            before = self.cursor.state_dict()
            bad = saved_state("iter", ("next", 3), "break", ("set_epoch", 3), "iter", ("next", 2))
            bad["order"]["segments"][0]["steps"] = 99  # more batches than the epoch has
            with pytest.raises(ValueError, match="more steps than its epoch had"):
                self.cursor.load_state_dict(bad)
            assert self.cursor.state_dict() == before
        else:
            raise AssertionError(f"unknown event {event!r}")

    def next_pass(self) -> List[List[int]]:
        self.run("iter")
        out = []
        while (batch := self.next()) is not None:
            out.append(batch)
        return out


def saved_state(*events: Any) -> dict:
    driver = Driver()
    for event in events:
        driver.run(event)
    return json.loads(json.dumps(driver.cursor.state_dict()))


def yielded(epoch: int, skip: int) -> List[List[int]]:
    return epoch_batches(epoch)[skip:]


# (events) -> (state: (epoch, batches_consumed), next pass on this cursor, pass after a resume)
TRANSITIONS = {
    "fresh cursor": ((), (0, 0), (0, 0), (0, 0)),
    "iter() called, nothing drawn yet": (("iter",), (0, 0), (1, 0), (0, 0)),
    "mid-epoch": (("iter", ("next", 2)), (0, 2), (1, 0), (0, 2)),
    "mid-epoch, loop broken": (("iter", "next", "break"), (0, 1), (1, 0), (0, 1)),
    "exactly at the end (no StopIteration yet)": (("iter", ("next", PER_EPOCH)), (1, 0), (1, 0), (1, 0)),
    "after a finished epoch": (("iter", "finish"), (1, 0), (1, 0), (1, 0)),
    "two finished epochs": (("iter", "finish", "iter", "finish"), (2, 0), (2, 0), (2, 0)),
    "iter() after a finished epoch, nothing drawn": (("iter", "finish", "iter"), (1, 0), (2, 0), (1, 0)),
    "set_epoch before iterating": ((("set_epoch", 3),), (3, 0), (3, 0), (3, 0)),
    "set_epoch repeats a finished epoch": (("iter", "finish", ("set_epoch", 0)), (0, 0), (0, 0), (0, 0)),
    "set_epoch at the end, before StopIteration": (("iter", ("next", PER_EPOCH), ("set_epoch", 3)),
                                                   (3, 0), (3, 0), (3, 0)),
    # A pass in its epoch's middle may go on (set_epoch takes effect at the next iter()):
    # the state keeps naming its position.
    "set_epoch in a pass's middle": (("iter", "next", ("set_epoch", 3)), (0, 1), (3, 0), (0, 1)),
    "set_epoch in a pass's middle, which goes on": (("iter", "next", ("set_epoch", 3), "next"),
                                                    (0, 2), (3, 0), (0, 2)),
    "set_epoch after iter(), nothing drawn": (("iter", ("set_epoch", 3)), (0, 0), (3, 0), (0, 0)),
    "set_epoch twice": ((("set_epoch", 3), ("set_epoch", 6)), (6, 0), (6, 0), (6, 0)),
    "set_epoch repeats a finished epoch, then iter()": (("iter", "finish", ("set_epoch", 0), "iter"),
                                                        (0, 0), (1, 0), (0, 0)),
    "set_epoch, then mid-epoch": ((("set_epoch", 3), "iter", "next"), (3, 1), (4, 0), (3, 1)),
    "load, then state_dict before iterating": (("load_state_dict",), (0, 2), (0, 2), (0, 2)),
    "load, iter() called, nothing drawn yet": (("load_state_dict", "iter"), (0, 2), (1, 0), (0, 2)),
    "load, then one more batch": (("load_state_dict", "iter", "next"), (0, 3), (1, 0), (0, 3)),
    "load, then to the end": (("load_state_dict", "iter", "finish"), (1, 0), (1, 0), (1, 0)),
    "load a state saved at the end": (("iter", ("next", PER_EPOCH), "state_dict", ("set_epoch", 7),
                                       "load_state_dict"), (1, 0), (1, 0), (1, 0)),
    "load into a cursor mid-pass": (("iter", "next", "state_dict", "next", "load_state_dict"),
                                    (0, 1), (0, 1), (0, 1)),
    "set_epoch before a loaded state": ((("set_epoch", 4), "load_state_dict"), (0, 2), (0, 2), (0, 2)),
    "set_epoch of the loaded epoch after it": (("load_state_dict", ("set_epoch", 0)), (0, 2), (0, 2), (0, 2)),
    "set_epoch of another epoch after a loaded state": (("load_state_dict", ("set_epoch", 5)),
                                                        (5, 0), (5, 0), (5, 0)),
    "load after set_epoch of another epoch": (("load_state_dict", ("set_epoch", 5), "load_state_dict"),
                                              (0, 2), (0, 2), (0, 2)),
    "a refused state, mid-epoch": (("iter", "next", "refused"), (0, 1), (1, 0), (0, 1)),
    "a refused state after a load": (("load_state_dict", "refused"), (0, 2), (0, 2), (0, 2)),
    "a refused state before iterating": (("refused",), (0, 0), (0, 0), (0, 0)),
}


@pytest.mark.parametrize("events,state,next_pass,resumed", TRANSITIONS.values(), ids=TRANSITIONS.keys())
def test_cursor_transitions(events, state, next_pass, resumed):
    driver = Driver()
    for event in events:
        driver.run(event)
    saved = json.loads(json.dumps(driver.cursor.state_dict()))  # plain data
    assert (saved["epoch"], saved["batches_consumed"]) == state
    assert driver.cursor.state_dict() == saved  # state_dict() changes nothing

    fresh = make_cursor()
    fresh.load_state_dict(saved)
    assert fresh.state_dict() == saved  # load then save before iterating: the same state
    assert _driving(fresh).next_pass() == yielded(*resumed)

    assert driver.next_pass() == yielded(*next_pass)


def _driving(cursor: Cursor) -> Driver:
    driver = Driver()
    driver.cursor = cursor
    return driver


def test_every_epoch_of_the_table_differs():
    # Otherwise a row could pass with the wrong epoch.
    assert len({json.dumps(epoch_batches(e)) for e in range(8)}) == 8


# ---------------------------------------------------------------------------------------
# Following a dataset's length (one process only)


def single_process_cursor(dataset: list) -> Cursor:
    order = make_order(dataset_len=len(dataset), batch_size=BATCH, shuffle=False, drop_last=False,
                       distributed=False)
    return Cursor(order, dataset)


# (events, with "grow" appending 4 samples) -> (batches the epoch counts, the next pass's batches)
GROWTH = {
    "grows before the first pass": (("grow",), 6, 6),
    "grows between epochs": (("iter", "finish", "grow"), 6, 6),
    "grows mid-epoch: the running epoch keeps its length": (("iter", "next", "grow"), 4, 6),
    "grows while a resume waits: the resumed epoch keeps its length": (("iter", "next", "save_load", "grow"), 4, 3),
}


@pytest.mark.parametrize("events,epoch_batches_now,next_pass", GROWTH.values(), ids=GROWTH.keys())
def test_cursor_follows_a_growing_dataset_only_between_epochs(events, epoch_batches_now, next_pass):
    dataset = list(range(8))
    driver = _driving(single_process_cursor(dataset))
    for event in events:
        if event == "grow":
            dataset.extend(range(8, 12))
        elif event == "save_load":
            state = driver.cursor.state_dict()
            driver.cursor = single_process_cursor(dataset)
            driver.cursor.load_state_dict(state)
        else:
            driver.run(event)
    assert driver.cursor.epoch_batches() == epoch_batches_now
    assert len(driver.next_pass()) == next_pass


def test_cursor_refuses_a_state_saved_over_a_dataset_of_another_length():
    cursor = make_cursor()
    state = saved_state("iter", "next")
    state["dataset"]["len"] = N + 1
    with pytest.raises(ValueError, match=f"saved over a dataset of {N + 1} samples, this loader's has {N}"):
        cursor.load_state_dict(state)
    assert cursor.state_dict() == saved_state()


# ---------------------------------------------------------------------------------------
# Through fastload.DataLoader


@pytest.mark.parametrize("with_generator", [True, False])
@pytest.mark.parametrize("before", ["after_a_finished_epoch", "after_a_load"])
def test_a_state_saved_between_set_epoch_and_iter_loads_and_resumes_the_selected_epoch(with_generator, before):
    import torch

    from fastload import DataLoader

    def make():
        torch.manual_seed(11)
        generator = torch.Generator().manual_seed(3) if with_generator else None
        return DataLoader(torch.utils.data.TensorDataset(torch.arange(10)), batch_size=3, shuffle=True,
                          generator=generator)

    mid_epoch = make()
    next(iter(mid_epoch))
    mid_state = mid_epoch.state_dict()

    def first_epoch(loader):
        if before == "after_a_finished_epoch":
            list(loader)
        else:
            loader.load_state_dict(mid_state)

    reference = make()
    first_epoch(reference)
    reference.set_epoch(4)
    want = [b[0].tolist() for b in reference]

    loader = make()
    first_epoch(loader)
    loader.set_epoch(4)
    state = json.loads(json.dumps(loader.state_dict()))
    assert (state["epoch"], state["batches_consumed"]) == (4, 0)
    resumed = make()
    resumed.load_state_dict(state)
    got = [b[0].tolist() for b in resumed]
    assert got == want and len(got) == 4  # the epoch's shuffle is drawn as the run drew it
