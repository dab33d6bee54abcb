"""The one shared check of exact resume: save/load at every position of an epoch.

Works for anything resumable: a fastload.DataLoader (`state_dict()`), or a sampling order
(`state_dict(batches_consumed)`). For every position k of an epoch, it builds a fresh
object as a new process would, consumes k batches, saves the state (through JSON, so it
must be plain data), loads it into another fresh object and checks that exactly the rest
of the epoch comes out, batch for batch, bit for bit; then (optionally) that the next
epoch equals the uninterrupted run's next epoch, also when the order is drawn from torch's
global RNG (no generator: `make` seeds it as a new process would, and the resumed object
must go on with the uninterrupted run's draws). A state saved after the last batch of an
epoch resumes at the start of the next epoch. For loaders (state_dict() without
arguments), len() must stay the whole epoch's batch count after a load, as torch's.

Example (in a test):
    from resume_helpers import check_resume_at_every_position
    check_resume_at_every_position(lambda: make_order(dataset_len=10, batch_size=3,
                                   shuffle=True, drop_last=False, distributed=False))
"""

from __future__ import annotations

import inspect
import itertools
import json
from typing import Any, Callable, List, Optional

import torch


def batches_equal(a: Any, b: Any) -> bool:
    """Exact equality of nested batches: tensors (dtype, shape, bits), lists, tuples, dicts."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(batches_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(batches_equal(a[k], b[k]) for k in a)
    return a == b


def default_state_of(obj: Any, batches_consumed: int) -> dict:
    """obj.state_dict(batches_consumed) for sampling orders, obj.state_dict() for loaders."""
    params = inspect.signature(obj.state_dict).parameters
    return obj.state_dict(batches_consumed) if params else obj.state_dict()


def check_resume_at_every_position(
    make: Callable[[], Any],
    *,
    state_of: Callable[[Any, int], dict] = default_state_of,
    equal: Callable[[Any, Any], bool] = batches_equal,
    check_next_epoch: bool = True,
    positions: Optional[List[int]] = None,
    max_state_bytes: Optional[int] = None,
) -> List[Any]:
    """Checks save/load at every position k of one epoch; returns the reference epoch.

    Args:
        make: builds a fresh resumable object in the state a new process would have
            (same arguments, same seeds; it may call torch.manual_seed).
        state_of: (object, batches consumed so far) -> its state.
        equal: compares two batches exactly.
        check_next_epoch: also check that the epoch after the resumed one equals the
            uninterrupted run's second epoch (needs `make` to be deterministic).
        positions: the k to check (default: every k in 0..len(epoch)).
        max_state_bytes: if given, the JSON state must be at most this long.
    """
    ref_obj = make()
    reference = list(ref_obj)
    ref_next = list(ref_obj) if check_next_epoch else None
    for k in positions if positions is not None else range(len(reference) + 1):
        obj = make()
        it = iter(obj)
        head = list(itertools.islice(it, k))
        assert len(head) == k, f"position {k}: the epoch ended after {len(head)} batches"
        for i, (got, want) in enumerate(zip(head, reference)):
            assert equal(got, want), f"position {k}: batch {i} differs from the uninterrupted run before any resume"
        text = json.dumps(state_of(obj, k))  # plain data only: fails on tensors, numpy, ...
        if max_state_bytes is not None:
            assert len(text) <= max_state_bytes, f"position {k}: state is {len(text)} bytes > {max_state_bytes}"
        del it, obj  # the interrupted run is gone, as in a crash
        resumed = make()
        resumed.load_state_dict(json.loads(text))
        if _is_loader(resumed):
            # Training loops size an epoch with len(loader): the whole epoch, not the rest.
            assert len(resumed) == len(reference), (
                f"position {k}: len() after load_state_dict is {len(resumed)}, expected the whole epoch's "
                f"{len(reference)}")
        rest = list(resumed)
        if k == len(reference):
            # A state saved after the last batch resumes at the start of the next epoch
            # (a resumed training loop must not get an empty epoch first).
            if check_next_epoch:
                assert _equal_list(rest, ref_next, equal), (
                    f"position {k} (end of epoch): the resumed run's first epoch differs from "
                    "the uninterrupted run's next epoch")
            continue
        assert len(rest) == len(reference) - k, (
            f"position {k}: resumed run gave {len(rest)} batches, expected {len(reference) - k}")
        for i, (got, want) in enumerate(zip(rest, reference[k:])):
            assert equal(got, want), f"position {k}: resumed batch {k + i} differs from the uninterrupted run"
        if check_next_epoch:
            assert _equal_list(list(resumed), ref_next, equal), (
                f"position {k}: the epoch after the resumed one differs from the uninterrupted run's")
    return reference


def _is_loader(obj: Any) -> bool:
    return hasattr(obj, "__len__") and not inspect.signature(obj.state_dict).parameters


def _equal_list(a: List[Any], b: List[Any], equal: Callable[[Any, Any], bool]) -> bool:
    return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
