"""A user's sampler or batch_sampler as a loader's order: its batches as they come, resumable.

The user's sampler always wins and is never sharded again (a DistributedSampler, or
Accelerate's BatchSamplerShard, already is). Its batches may have any size (torch's
BatchSampler, with a shorter last batch when drop_last=False, or batches of varying
size): both paths take them as they come.

Resume replays the epoch and skips the batches already consumed. The replay is exact when
the sampler's draws are a function of its epoch (DistributedSampler, Accelerate's
SeedableRandomSampler) or of a torch.Generator it holds as `generator` (torch's
RandomSampler, SubsetRandomSampler, WeightedRandomSampler with a generator): the state
keeps those generators' states from the start of the pass ("generators"), and a load
puts them back, so a resumed epoch, and the ones after it, draw what the uninterrupted
run drew. A sampler that draws from torch's global RNG (a RandomSampler without a
generator) replays with the global RNG as the new process has it.

Example:
    >>> import torch
    >>> from torch.utils.data import BatchSampler, RandomSampler
    >>> def order():
    ...     sampler = RandomSampler(range(6), generator=torch.Generator().manual_seed(0))
    ...     return UserOrder(dataset_len=6, batch_sampler=BatchSampler(sampler, 4, False))
    >>> run = order(); first = list(run); epoch = iter(run); head = next(epoch)
    >>> state = run.state_dict(batches_consumed=1)  # one batch of the second epoch consumed
    >>> resumed = order(); resumed.load_state_dict(state)
    >>> list(resumed) == list(epoch)
    True
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, List, Optional

import torch

from fastload.sampling.state import ORDER_STATE_VERSION, b64, check_common, check_rng_state, state_error, unb64

# How deep the walk through wrapping samplers goes (Accelerate's BatchSamplerShard wraps a
# BatchSampler that wraps a sampler: three levels).
_DEPTH = 4


def sampler_chain(batch_sampler: Any) -> List[Any]:
    """The batch_sampler and the samplers it wraps (`.batch_sampler`, `.sampler`), outermost
    first, each once."""
    chain: List[Any] = []
    level = [batch_sampler]
    for _ in range(_DEPTH):
        nested = []
        for obj in level:
            if obj is None or any(obj is seen for seen in chain):
                continue
            chain.append(obj)
            nested += [getattr(obj, "batch_sampler", None), getattr(obj, "sampler", None)]
        level = nested
    return chain


class UserOrder:
    """Wraps a user's sampler (batched like torch's BatchSampler) or batch_sampler.

    Args:
        dataset_len: the dataset's length (labels the state; checked on load).
        batch_sampler: yields each batch's list of indices; set_epoch (where it, or a
            sampler it wraps, has one) is forwarded by set_epoch.
    """

    def __init__(self, *, dataset_len: int, batch_sampler: Any):
        self.dataset_len = dataset_len
        self.batch_sampler = batch_sampler
        self._epoch = 0
        self._skip = 0
        self._started = False
        self._drawing = False  # a pass drew its first batch and is not exhausted or dropped
        self._at_start: Optional[List[str]] = None  # the generators' states when that pass began
        self._epoch_at_start = 0  # and its epoch (a sampler may count its own: Accelerate's Seedable one)

    def _epoch_target(self) -> Any:
        for obj in sampler_chain(self.batch_sampler):
            if callable(getattr(obj, "set_epoch", None)):
                return obj
        return None

    def _generators(self) -> List[torch.Generator]:
        """The torch.Generators the samplers draw from, outermost first, each once."""
        found: List[torch.Generator] = []
        for obj in sampler_chain(self.batch_sampler):
            g = getattr(obj, "generator", None)
            if isinstance(g, torch.Generator) and not any(g is seen for seen in found):
                found.append(g)
        return found

    @property
    def epoch(self) -> int:
        target = self._epoch_target()
        e = getattr(target, "epoch", None) if target is not None else None
        return e if isinstance(e, int) else self._epoch

    @property
    def sampler_epoch(self) -> Optional[int]:
        """The epoch the user's sampler keeps (an int `epoch` beside its set_epoch), else None."""
        target = self._epoch_target()
        e = getattr(target, "epoch", None) if target is not None else None
        return e if isinstance(e, int) and not isinstance(e, bool) else None

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._skip = 0
        self._started = False
        target = self._epoch_target()
        if target is not None:
            target.set_epoch(epoch)

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self._skip)

    def epoch_batches(self, dataset_len: Optional[int] = None) -> int:
        return len(self.batch_sampler)  # the user's sampler knows its dataset

    def __iter__(self) -> Iterator[List[int]]:
        if self._started:
            # No automatic epoch counting here: the user may drive sampler.set_epoch itself.
            self._skip = 0
        self._started = True
        skip = self._skip
        # Before the sampler's first draw: what a resume of this pass puts back.
        self._at_start = [b64(g.get_state()) for g in self._generators()]
        self._epoch_at_start = self.epoch
        self._drawing = True
        try:
            for batch in itertools.islice(iter(self.batch_sampler), skip, None):
                yield list(batch)
        finally:  # exhausted, or dropped (a `break`): the generators are where the next pass starts
            self._drawing = False

    def state_dict(self, batches_consumed: int) -> dict:
        if not isinstance(batches_consumed, int) or batches_consumed < 0:
            raise ValueError(f"fastload.DataLoader.state_dict: expected batches_consumed >= 0, got {batches_consumed!r}.")
        consumed = self._skip + batches_consumed
        epoch = self.epoch
        try:
            done = consumed >= len(self.batch_sampler)
        except TypeError:  # no __len__
            done = False
        state = {"version": ORDER_STATE_VERSION, "kind": "sampler", "dataset_len": self.dataset_len,
                 "epoch": epoch, "batches_consumed": 0 if done else consumed}
        if done and self._at_start is not None:
            # The epoch is complete: resume at the start of an epoch (the same number: user
            # samplers get no automatic epoch counting). The load replays the whole epoch's
            # draws from where they began, so the generators go on as the finished run's.
            state.update(generators=self._at_start, replay=self._epoch_at_start)
        elif (self._drawing or consumed) and self._at_start is not None:
            state["generators"] = self._at_start  # this pass's, replayed up to `consumed`
        else:  # the next pass starts where the generators are (after a load: put back there)
            state["generators"] = [b64(g.get_state()) for g in self._generators()]
        return state

    def check_state_dict(self, state: dict) -> None:
        check_common(state, self.dataset_len, "sampler")
        consumed = state.get("batches_consumed")
        if not isinstance(consumed, int) or isinstance(consumed, bool) or consumed < 0:
            raise state_error(f"expected a non-negative int batches_consumed, got {consumed!r}")
        replay = state.get("replay")
        if replay is not None and (type(replay) is not int or replay < 0):
            raise state_error(f"expected 'replay' to be None or the finished pass's epoch (an int >= 0), got {replay!r}")
        saved = state.get("generators")
        if saved is None:
            return  # a state of a fastload version before generator states: a plain replay
        if not isinstance(saved, list):
            raise state_error(f"expected 'generators' to be a list of generator states, got {str(saved)[:60]!r}")
        generators = self._generators()
        if len(saved) != len(generators):
            return  # a sampler that makes its generator when it first draws (not restored: see load)
        for value, g in zip(saved, generators):
            check_rng_state(value, "generators", torch.Generator(device=g.device))

    def load_state_dict(self, state: dict) -> None:
        self.check_state_dict(state)
        replay = state.get("replay")
        self.set_epoch(replay if type(replay) is int else state["epoch"])
        saved, generators = state.get("generators") or [], self._generators()
        if len(saved) == len(generators):
            # (A sampler without its generator yet, Accelerate's SeedableRandomSampler, seeds
            # the one it makes from its epoch: nothing to put back.)
            for value, g in zip(saved, generators):
                g.set_state(unb64(value))
        if type(replay) is int:
            for _ in self.batch_sampler:  # the finished epoch's draws, to its end
                pass
            self.set_epoch(state["epoch"])
        self._skip = state["batches_consumed"]
