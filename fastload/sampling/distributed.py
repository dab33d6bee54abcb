"""The distributed setting: which rank this process is, of how many, and the uneven policy.

Example:
    >>> resolve_distributed(False), check_uneven("pad")
    ((0, 1), 'pad')
"""

from __future__ import annotations

import os
from typing import Any, Tuple, Union

import torch

UNEVEN_MODES = ("pad", "drop", "exact")


def check_distributed(distributed: Any) -> Union[str, bool]:
    """distributed, if it is "auto", True or False (else ValueError): the one check."""
    if distributed not in ("auto", True, False) or (isinstance(distributed, (int, float))
                                                    and not isinstance(distributed, bool)):
        raise ValueError(f"fastload.DataLoader: expected distributed='auto', True or False, got {distributed!r}.")
    return distributed


def check_uneven(uneven: Any) -> str:
    """uneven, if it is one of UNEVEN_MODES (else ValueError): the one check."""
    if not isinstance(uneven, str) or uneven not in UNEVEN_MODES:
        raise ValueError(f"fastload.DataLoader: expected uneven in {UNEVEN_MODES}, got {uneven!r}.")
    return uneven


def resolve_distributed(distributed: Union[bool, str] = "auto") -> Tuple[int, int]:
    """(rank, world_size): torch.distributed when initialised, else RANK/WORLD_SIZE from
    torchrun when distributed="auto"; True requires one of them; False gives (0, 1).

    Example:
        >>> resolve_distributed(False)
        (0, 1)
    """
    if check_distributed(distributed) is False:
        return 0, 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        try:
            rank_i, world_i = int(rank), int(world)
        except ValueError:
            raise ValueError(
                f"fastload.DataLoader: expected integer RANK and WORLD_SIZE environment "
                f"variables, got RANK={rank!r} WORLD_SIZE={world!r}. Launch with torchrun."
            ) from None
        if not 0 <= rank_i < world_i:
            raise ValueError(
                f"fastload.DataLoader: expected 0 <= RANK < WORLD_SIZE, got RANK={rank_i} "
                f"WORLD_SIZE={world_i}. Launch with torchrun."
            )
        return rank_i, world_i
    if distributed is True:
        raise RuntimeError(
            "fastload.DataLoader: expected torch.distributed to be initialised or RANK/WORLD_SIZE "
            "to be set (torchrun) with distributed=True, got neither. Launch with torchrun, call "
            "torch.distributed.init_process_group() first, or pass distributed='auto'."
        )
    return 0, 1
