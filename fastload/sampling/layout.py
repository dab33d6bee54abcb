"""The step layout of (the rest of) an epoch: how M samples become lockstep steps of W
ranks, and which indices each rank takes at each step (the model is in
fastload/sampling/order.py's docstring).

Example:
    >>> import numpy as np
    >>> steps = layout(5, world_size=2, batch_size=2, uneven="exact", drop_last=False)
    >>> steps.steps, [list(rank_batches(deal(np.arange(5), 0, steps), steps, r, 2)) for r in (0, 1)]
    (2, [[[0, 2], [3]], [[1], [4]]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Tuple

import numpy as np


@dataclass(frozen=True)
class Layout:
    """How M remaining samples become lockstep steps for W ranks.

    The dealt sequence is the remaining perm padded (uneven="pad") or truncated to `length`;
    the first `full_steps` steps take W * B samples each, then the steps in `tail` take the
    given totals (each a multiple of W, or between W and W * B for "exact").
    """

    length: int
    full_steps: int
    step_size: int  # W * B
    tail: Tuple[int, ...]

    @property
    def steps(self) -> int:
        return self.full_steps + len(self.tail)

    def consumed(self, steps: int) -> int:
        """Samples of the dealt sequence taken by the first `steps` steps."""
        full = min(steps, self.full_steps)
        return full * self.step_size + sum(self.tail[: max(0, steps - self.full_steps)])


def layout(remaining: int, world_size: int, batch_size: int, uneven: str, drop_last: bool) -> Layout:
    m, w, b = remaining, world_size, batch_size
    if uneven in ("pad", "drop"):
        # Every rank gets n samples, then batches them like torch's BatchSampler.
        n = -(-m // w) if uneven == "pad" else m // w
        tail = () if drop_last or n % b == 0 else (w * (n % b),)
        return Layout(n * w, n // b, w * b, tail)
    # "exact": every sample once, every rank the same number of non-empty batches.
    if drop_last:
        full = m // (w * b)
        return Layout(full * w * b, full, w * b, ())
    if m == 0:
        return Layout(0, 0, w * b, ())
    if m < w:
        raise ValueError(
            f"fastload.DataLoader: uneven='exact' needs at least one sample per rank, got "
            f"{m} samples for {w} ranks. Every rank must yield the same number of non-empty "
            "batches; use uneven='pad' (repeats samples) or 'drop', or fewer ranks (when "
            "resuming: the rest of the epoch is this small; resume it with fewer ranks, or "
            "start the next epoch with set_epoch)."
        )
    steps = -(-m // (w * b))
    last = m - (steps - 1) * w * b
    if last >= w:
        return Layout(m, steps - 1, w * b, (last,))
    if b == 1:
        raise ValueError(
            f"fastload.DataLoader: uneven='exact' with batch_size=1 needs a number of samples "
            f"divisible by the world size, got {m} samples for {w} ranks. Use batch_size >= 2, "
            "or uneven='pad' or 'drop'."
        )
    # The last step would leave some rank without a sample: move W - last samples from the
    # step before (which has W * B >= 2 W) so both steps give every rank 1..B samples.
    return Layout(m, steps - 2, w * b, (w * b - (w - last), w))


def rank_batches(seq: np.ndarray, layout: Layout, rank: int, world_size: int) -> Iterator[List[int]]:
    """Rank `rank`'s batches of the dealt sequence: chunk of each step, interleaved."""
    w = world_size
    if layout.full_steps:
        b = layout.step_size // w
        # chunk s = seq[s*W*B : (s+1)*W*B]; chunk[r::W] == chunk.reshape(B, W)[:, r]
        full = seq[: layout.full_steps * layout.step_size].reshape(layout.full_steps, b, w)[:, :, rank]
        for row in full:
            yield row.tolist()
    start = layout.full_steps * layout.step_size
    for total in layout.tail:
        yield seq[start + rank : start + total : w].tolist()
        start += total


def deal(perm: np.ndarray, start: int, layout: Layout) -> np.ndarray:
    """perm[start:] padded or cut to layout.length.

    Padding repeats the epoch's perm from *its* start (like DistributedSampler), not the
    rest's: so a resume with the same world size pads exactly as the uninterrupted run did.
    """
    rest = perm[start:]
    if layout.length <= len(rest):
        return rest[: layout.length]
    need = layout.length - len(rest)
    return np.concatenate([rest, np.tile(perm, -(-need // len(perm)))[:need]])
