"""Sampling: the order of samples. One module, one job.

Seeded per-epoch order, split first across DDP ranks, then (by torch's DataLoader or
the native engine) across workers or threads; exact mid-epoch resume; elastic resume.

THIS FILE IS AN API STUB (the contract between loader.py and sampling). Every function
below raises NotImplementedError until implemented.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Protocol, Tuple, Union

import torch

STATE_VERSION = 1
UNEVEN_MODES = ("pad", "drop", "exact")


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

    def state_dict(self, batches_consumed: int) -> dict:
        """Plain-Python state after `batches_consumed` batches of the current __iter__."""

    def load_state_dict(self, state: dict) -> None:
        """Restores the epoch and resume point; the next __iter__ continues from it."""


def resolve_distributed(distributed: Union[bool, str] = "auto") -> Tuple[int, int]:
    """(rank, world_size): torch.distributed when initialised, else RANK/WORLD_SIZE from
    torchrun when distributed="auto"; True requires one of them; False gives (0, 1)."""
    raise NotImplementedError


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
) -> IndexOrder:
    """Builds the order a loader iterates.

    - A user's sampler or batch_sampler always wins (a DistributedSampler is not sharded
      again); resume then replays its epoch and skips what was consumed.
    - Not distributed: torch's own RandomSampler/SequentialSampler semantics (the same
      permutations as torch.utils.data.DataLoader for the same generator or global seed),
      with the epoch's seed recorded so the order can be replayed on resume.
    - Distributed: a global permutation seeded by (seed, epoch), split across ranks with
      equal batch counts per the `uneven` policy ("pad", "drop", "exact").
    """
    raise NotImplementedError
