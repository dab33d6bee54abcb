"""Sampling: the order of samples. One module, one job.

Seeded per-epoch order, split first across DDP ranks, then (by torch's DataLoader or
the native engine) across workers or threads; exact mid-epoch resume; elastic resume.

How an epoch's order is laid out (the model every function below shares):

- The epoch has a base permutation `perm` of range(N): torch's RandomSampler draw when not
  distributed (so the order equals torch.utils.data.DataLoader's), a permutation seeded by
  `seed + epoch` when distributed (so it equals DistributedSampler's), or range(N).
- The epoch is consumed in lockstep *steps*: at each step every rank takes one batch. Step s
  takes the next contiguous chunk of `perm` and deals it to the ranks interleaved (rank r gets
  chunk[r::W]). So after k steps, what the whole job consumed is a *prefix* of `perm`,
  whatever W was; that is what makes "one state describes the whole job" and elastic resume
  possible: the state is just (how the epoch's perm was drawn, how many steps at which
  (world_size, batch_size)), and the rest of the epoch is perm[consumed:], re-dealt to the
  new world.
- Every rank has the same number of steps in every `uneven` mode, so a collective per
  step never hangs.

Example:
    >>> order = make_order(dataset_len=10, batch_size=4, shuffle=False, drop_last=False,
    ...                    distributed=False)
    >>> list(order)
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    >>> state = order.state_dict(batches_consumed=1)
    >>> order.load_state_dict(state); list(order)
    [[4, 5, 6, 7], [8, 9]]
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Protocol, Union

import numpy as np
import torch

from fastload.sampling.distributed import UNEVEN_MODES, check_uneven, resolve_distributed
from fastload.sampling.layout import Layout, deal, layout, rank_batches
from fastload.sampling.rng import GlobalStream
from fastload.sampling.state import (ORDER_STATE_VERSION, b64, check_common, check_rng_state, is_seed, state_error,
                                     unb64)
from fastload.sampling.user_order import UserOrder

class IndexOrder(Protocol):
    """What a loader needs from sampling: the batches of one epoch, resumable."""

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order __iter__ yields (resets any resume point)."""

    @property
    def epoch(self) -> int: ...

    def __iter__(self) -> Iterator[List[int]]:
        """This rank's remaining batches of the current epoch (from the resume point)."""

    def __len__(self) -> int:
        """Batches this rank yields by __iter__ in the current epoch (after a resume: the rest)."""

    def epoch_batches(self, dataset_len: Optional[int] = None) -> int:
        """Batches this rank yields in a whole epoch (from its start) over `dataset_len`
        samples (default: the length the order was made for); what len(loader) reports."""

    def check_state_dict(self, state: dict) -> None:
        """Raises ValueError if `state` cannot be loaded; changes nothing."""

    def state_dict(self, batches_consumed: int) -> dict:
        """Plain-Python state after `batches_consumed` batches of the current __iter__."""

    def load_state_dict(self, state: dict) -> None:
        """Restores the epoch and resume point; the next __iter__ continues from it."""


# ---------------------------------------------------------------------------------------
# fastload's own order (no user sampler)


class Order:
    """The order when the user gave no sampler: torch's semantics on one process, a seeded
    global permutation dealt to ranks when distributed. See the module docstring.

    Without a generator, each shuffled epoch's seed comes from torch's global RNG, as in
    torch's RandomSampler. The state then keeps that RNG's state right after the draw
    ("rng"), and a resumed order draws its later epochs' seeds from a private copy of it:
    so the epochs after a resumed one are the ones the uninterrupted run drew (when nothing
    else drew from the global RNG between epochs, as in a plain training loop), whatever
    the new process's global RNG is. `base_seed_draws` is how many draws the loader makes
    from the global RNG before each epoch's shuffle (torch's iterator draws its workers'
    base seed first); the private copy replays them so its seeds stay the ones drawn there.

    The private copy is used only while nobody else touched the global RNG since the order
    (or its loader, see `begin_global_draws`) last left it: its state is noted after a load
    and after each epoch's draws, and if it differs at the next epoch's draw (the training
    loop re-seeded it, restored a checkpointed RNG state, or drew from it), the copy is
    dropped for good and the seeds come from the global RNG, exactly as torch draws them.
    """

    def __init__(self, *, dataset_len: int, batch_size: int, shuffle: bool, drop_last: bool,
                 generator: Optional[torch.Generator], rank: int, world_size: int,
                 distributed: bool, uneven: str, seed: Optional[int]):
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator
        self.rank = rank
        self.world_size = world_size
        # One process: torch's RandomSampler draw (same permutations as torch's DataLoader).
        # Distributed: every rank must compute the same permutation, so it comes from the seed.
        self.distributed = distributed
        self.uneven = uneven
        self.seed = 0 if seed is None else int(seed)
        self._epoch = 0
        self._history: List[Dict[str, Any]] = []  # segments consumed before this iteration
        self._perm_source: Optional[Dict[str, Any]] = None  # how this epoch's perm was drawn
        self._started = False  # an __iter__ began for (epoch, history) -> next one advances
        self.base_seed_draws = 0
        # Where shuffle seeds come from without a generator (fastload/sampling/rng.py).
        self._rng = GlobalStream()
        self._rng_after: Optional[str] = None  # the seeds' source right after this epoch's draw
        # Fail at construction on impossible configurations (e.g. "exact" with N < W).
        self._currentlayout()

    # -- epoch ----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"fastload.DataLoader.set_epoch: expected a non-negative int, got {epoch!r}.")
        self._epoch = epoch
        self._history = []
        self._perm_source = None
        self._rng_after = None
        self._started = False

    # -- layout ---------------------------------------------------------------------------
    def _start(self, history: Optional[List[Dict[str, Any]]] = None) -> int:
        """Samples of this epoch's perm already consumed by the history segments."""
        start = 0
        for seg in self._history if history is None else history:
            lay = layout(self.dataset_len - start, seg["world_size"], seg["batch_size"], seg["uneven"], seg["drop_last"])
            start += min(lay.consumed(seg["steps"]), self.dataset_len - start)
        return start

    def _currentlayout(self, history: Optional[List[Dict[str, Any]]] = None) -> Layout:
        return layout(self.dataset_len - self._start(history), self.world_size, self.batch_size, self.uneven,
                       self.drop_last)

    def __len__(self) -> int:
        return self._currentlayout().steps

    def epoch_batches(self, dataset_len: Optional[int] = None) -> int:
        n = self.dataset_len if dataset_len is None else dataset_len
        return layout(n, self.world_size, self.batch_size, self.uneven, self.drop_last).steps

    # -- the permutation -------------------------------------------------------------------
    def _draw_source(self) -> Dict[str, Any]:
        """Records what this epoch's permutation is drawn from, drawing like torch would."""
        if not self.shuffle:
            return {"kind": "sequential"}
        if self.distributed:
            return {"kind": "seed", "seed": self.seed + self._epoch}
        if self.generator is None:
            # torch's RandomSampler draws its seed from the global RNG at __iter__ (after a
            # resume: from the saved run's stream, where the loader's draws come first).
            seed, self._rng_after = self._rng.draw_seed(self.base_seed_draws)
            return {"kind": "seed", "seed": seed}
        return {"kind": "generator", "state": b64(self.generator.get_state())}

    # -- who else draws from the global RNG -------------------------------------------------
    def begin_global_draws(self) -> None:
        """A loader's iter() is about to draw from the global RNG (GlobalStream's)."""
        self._rng.begin_global_draws()

    def end_global_draws(self) -> None:
        """The loader's iter() drew what it draws (GlobalStream's)."""
        self._rng.end_global_draws()

    def _perm(self, source: Dict[str, Any]) -> np.ndarray:
        n = self.dataset_len
        kind = source["kind"]
        if kind == "sequential" or n == 0:
            return np.arange(n, dtype=np.int64)
        if kind == "seed":
            g = torch.Generator()
            g.manual_seed(source["seed"])
            return torch.randperm(n, generator=g).numpy()
        # "generator": replay from the saved state. In torch mode with the user's generator,
        # draw with *it*, so it ends in the same state as an uninterrupted run and later
        # epochs match too.
        g = self.generator if self._draws_from_user_generator() else torch.Generator()
        g.set_state(unb64(source["state"]))
        return torch.randperm(n, generator=g).numpy()

    def _draws_from_user_generator(self) -> bool:
        return (self.generator is not None and not self.distributed and self.dataset_len > 0
                and self._perm_source is not None and self._perm_source["kind"] == "generator")

    def _generator_after_epoch(self) -> str:
        """The user's generator state after this epoch: its two randperm draws (see __iter__)."""
        g = torch.Generator()
        g.set_state(unb64(self._perm_source["state"]))
        torch.randperm(self.dataset_len, generator=g)
        torch.randperm(self.dataset_len, generator=g)
        return b64(g.get_state())

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[List[int]]:
        # A generator: nothing happens until the first next(). torch's DataLoader iterator
        # calls iter(batch_sampler) *before* drawing its _base_seed from the same generator,
        # and its RandomSampler draws lazily too; drawing lazily keeps torch's draw order.
        # Its multi-process iterator also calls iter() twice per epoch and drops the first
        # iterator unstarted, so epochs are counted on the first next(), not on iter().
        if self._started:  # automatic epoch counting: a new pass is the next epoch
            self.set_epoch(self._epoch + 1)
        self._started = True
        self._rng.check_pass(self.base_seed_draws)
        layout = self._currentlayout()
        if self._perm_source is None:
            self._perm_source = self._draw_source()
        perm = self._perm(self._perm_source)
        batches = rank_batches(deal(perm, self._start(), layout), layout, self.rank, self.world_size)
        if not self._draws_from_user_generator():
            yield from batches
            return
        # torch's RandomSampler draws a second randperm from the generator when its iterator
        # is exhausted (its `randperm(n)[:num_samples % n]` line), which BatchSampler reaches
        # before the partial last batch, or on the next() after a full last batch. Do the
        # same, at the same moment, so the user's generator goes on exactly like torch's.
        drawn = False
        for i, batch in enumerate(batches):
            if i == layout.steps - 1 and layout.tail:
                torch.randperm(self.dataset_len, generator=self.generator)
                drawn = True
            yield batch
        if not drawn:
            torch.randperm(self.dataset_len, generator=self.generator)

    # -- resume ---------------------------------------------------------------------------
    def state_dict(self, batches_consumed: int) -> dict:
        """Plain-Python state after `batches_consumed` batches of the current __iter__.

        The same on every rank (nothing rank-specific is stored): load it on all ranks,
        with any world size.
        """
        layout = self._currentlayout()
        if not isinstance(batches_consumed, int) or not 0 <= batches_consumed <= layout.steps:
            raise ValueError(
                f"fastload.DataLoader.state_dict: expected 0 <= batches_consumed <= {layout.steps} "
                f"(this epoch's batches), got {batches_consumed!r}."
            )
        state: Dict[str, Any] = {
            "version": ORDER_STATE_VERSION,
            "kind": "order",
            "dataset_len": self.dataset_len,
            "epoch": self._epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "perm": dict(self._perm_source) if self._perm_source is not None else None,
            "segments": [dict(s) for s in self._history],
        }
        rng = self._rng_after if self._perm_source is not None else self._rng.state()
        if rng is not None:
            state["rng"] = rng
        if batches_consumed == layout.steps and self._started and self._perm_source is not None:
            # The epoch is complete: the state is "the next epoch, from its start", so a
            # resumed training loop does not get an empty epoch first.
            state.update(epoch=self._epoch + 1, perm=None, segments=[])
            if self._draws_from_user_generator():
                state["generator"] = self._generator_after_epoch()
            return state
        if batches_consumed:
            state["segments"].append({
                "world_size": self.world_size, "batch_size": self.batch_size, "steps": batches_consumed,
                "uneven": self.uneven, "drop_last": self.drop_last,
            })
        return state

    def check_state_dict(self, state: dict) -> None:
        check_common(state, self.dataset_len, "order")
        perm, segments = state.get("perm"), state.get("segments")
        if perm is not None and not (isinstance(perm, dict) and (
                perm.get("kind") == "sequential"
                or (perm.get("kind") == "seed" and is_seed(perm.get("seed")))
                or (perm.get("kind") == "generator" and isinstance(perm.get("state"), str)))):
            raise state_error(f"expected 'perm' to be None or a known permutation source (a seed is an int that "
                               f"torch.Generator.manual_seed takes), got {perm!r}")
        if perm is not None and perm["kind"] == "generator":
            user_device = self.generator is not None and not self.distributed
            check_rng_state(perm["state"], "perm", torch.Generator(device=self.generator.device) if user_device
                             else torch.Generator())
        if not isinstance(segments, list):
            raise state_error(f"expected 'segments' to be a list, got {segments!r}")
        if segments and perm is None:
            raise state_error("expected a permutation source for a partly consumed epoch, got perm=None")
        start = 0
        for seg in segments:
            ok = (isinstance(seg, dict) and all(type(seg.get(k)) is int and seg.get(k) > 0
                                                for k in ("world_size", "batch_size", "steps"))
                  and seg.get("uneven") in UNEVEN_MODES and isinstance(seg.get("drop_last"), bool))
            if not ok:
                raise state_error(f"expected segments of positive world_size/batch_size/steps, uneven, drop_last, got {seg!r}")
            lay = layout(self.dataset_len - start, seg["world_size"], seg["batch_size"], seg["uneven"], seg["drop_last"])
            if seg["steps"] > lay.steps:
                raise state_error(f"segment {seg!r} has more steps than its epoch had ({lay.steps})")
            start += min(lay.consumed(seg["steps"]), self.dataset_len - start)
        if "rng" in state:
            check_rng_state(state["rng"], "rng", torch.Generator())
        if "generator" in state and perm is None and self.generator is not None and not self.distributed:
            check_rng_state(state["generator"], "generator", torch.Generator(device=self.generator.device))
        self._currentlayout(segments)  # raises now if the rest cannot be dealt to this world

    def load_state_dict(self, state: dict) -> None:
        self.check_state_dict(state)  # all of it first: a refused state changes nothing
        perm, segments = state.get("perm"), state.get("segments")
        self._epoch = state["epoch"]
        self._history = [dict(s) for s in segments]
        self._perm_source = dict(perm) if perm is not None else None
        self._started = False
        if perm is None and "generator" in state and self.generator is not None and not self.distributed:
            # Saved at an epoch's end: the next epoch is drawn from where the generator was.
            self.generator.set_state(unb64(state["generator"]))
        rng = state.get("rng")
        if rng is not None and self.shuffle and self.generator is None and not self.distributed:
            self._rng.resume(rng)
            self._rng_after = rng if perm is not None else None
        else:
            # A state without it (version 1, or saved before any draw): the next epochs
            # draw from the global RNG, as torch does.
            self._rng.drop()
            self._rng_after = None


# ---------------------------------------------------------------------------------------


def make_order(
    *,
    dataset_len: int,
    batch_size: int,
    shuffle: bool,
    drop_last: bool,
    sampler: Optional[torch.utils.data.Sampler] = None,
    batch_sampler: Optional[torch.utils.data.Sampler] = None,
    generator: Optional[torch.Generator] = None,
    distributed: Union[bool, str] = "auto",
    uneven: str = "pad",
    seed: Optional[int] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> IndexOrder:
    """Builds the order a loader iterates.

    - A user's sampler or batch_sampler always wins (a DistributedSampler is not sharded
      again); resume then replays its epoch and skips what was consumed.
    - Not distributed: torch's own RandomSampler/SequentialSampler semantics (the same
      permutations as torch.utils.data.DataLoader for the same generator or global seed),
      with the epoch's seed recorded so the order can be replayed on resume.
    - Distributed: a global permutation seeded by (seed, epoch), split across ranks with
      equal batch counts per the `uneven` policy ("pad", "drop", "exact").

    Args:
        dataset_len: N, the number of samples.
        batch_size: samples per batch (per rank when distributed).
        shuffle, drop_last, sampler, batch_sampler, generator: as torch's DataLoader.
        distributed: "auto" | True | False, see resolve_distributed.
        uneven: what to do when N is not divisible across ranks: "pad" (repeat samples from
            the start, like DistributedSampler), "drop" (drop the remainder), "exact" (each
            sample once; the last batches of some ranks are smaller, never empty).
        seed: base seed of the distributed permutation (epoch e uses seed + e, like
            DistributedSampler); None means 0 so that every rank agrees.
        rank, world_size: override the detected rank/world (tests, simulations); given
            together, they make the order distributed when world_size > 1.

    Returns:
        An IndexOrder: iterating it yields this rank's batches (lists of int indices).

    Example:
        >>> a = make_order(dataset_len=5, batch_size=2, shuffle=False, drop_last=False,
        ...                uneven="exact", rank=0, world_size=2)
        >>> b = make_order(dataset_len=5, batch_size=2, shuffle=False, drop_last=False,
        ...                uneven="exact", rank=1, world_size=2)
        >>> list(a), list(b)
        ([[0, 2], [3]], [[1], [4]])
    """
    if not isinstance(dataset_len, int) or dataset_len < 0:
        raise ValueError(f"fastload.DataLoader: expected a dataset length >= 0, got {dataset_len!r}.")
    if batch_sampler is not None:
        # torch's own rule, so that fastload.DataLoader rejects what torch's rejects.
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "fastload.DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                "shuffle, sampler, and drop_last. Pass only batch_sampler, or none of it."
            )
        return UserOrder(dataset_len=dataset_len, batch_sampler=batch_sampler)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise ValueError(f"fastload.DataLoader: expected a positive int batch_size, got {batch_size!r}.")
    if sampler is not None:
        if shuffle:
            raise ValueError(
                "fastload.DataLoader: sampler option is mutually exclusive with shuffle. "
                "Shuffle in the sampler, or drop the sampler."
            )
        return UserOrder(dataset_len=dataset_len,
                          batch_sampler=torch.utils.data.BatchSampler(sampler, batch_size, drop_last))
    check_uneven(uneven)
    if (rank is None) != (world_size is None):
        raise ValueError("fastload.DataLoader: expected rank and world_size given together, got one of them.")
    if rank is None:
        rank, world_size = resolve_distributed(distributed)
    elif not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
        raise ValueError(f"fastload.DataLoader: expected 0 <= rank < world_size, got rank={rank!r} world_size={world_size!r}.")
    is_distributed = world_size > 1 or distributed is True
    return Order(dataset_len=dataset_len, batch_size=batch_size, shuffle=bool(shuffle), drop_last=bool(drop_last),
                  generator=generator, rank=rank, world_size=world_size, distributed=is_distributed,
                  uneven=uneven, seed=seed)
