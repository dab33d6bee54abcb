"""The global RNG's stream of shuffle seeds, replayed after a resume.

Without a generator, torch's RandomSampler draws each shuffled epoch's seed from torch's
global RNG. A resumed order keeps the saved run's global RNG state (its "rng") and draws
its later epochs' seeds from a private copy of it (`GlobalStream.resume`), so the epochs
after a resumed one are the ones the uninterrupted run drew, whatever the new process's
global RNG is. The copy is trusted only while nobody else touched the global RNG since
the order (or its loader, `begin_global_draws` / `end_global_draws`) last left it: if it
moved otherwise (the training loop re-seeded it, restored a checkpointed RNG state, or
drew from it), the copy is dropped for good and the seeds come from the global RNG,
exactly as torch draws them.

Example:
    >>> import torch
    >>> stream = GlobalStream()
    >>> torch.manual_seed(0); seed, after = stream.draw_seed(base_seed_draws=0)
    <torch._C.Generator object at ...>
    >>> stream.resume(after); torch.manual_seed(5)
    <torch._C.Generator object at ...>
    >>> stream.check_pass(0); stream.active
    False
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from fastload.sampling.state import b64, unb64


def _draw(generator: Optional[torch.Generator]) -> torch.Tensor:
    """One int64 draw, as torch's RandomSampler and DataLoader iterator make theirs."""
    return torch.empty((), dtype=torch.int64).random_(generator=generator)


class GlobalStream:
    """Where shuffle seeds come from without a generator: torch's global RNG, or (after a
    resume) a private copy of the saved run's global RNG stream."""

    def __init__(self) -> None:
        # After a resume: the saved run's global RNG stream, which draws the next epochs'
        # seeds (None: torch's global RNG, as torch does).
        self._stream: Optional[torch.Generator] = None
        # The global RNG's state when the order (or its loader) last left it, while there
        # is a stream; None inside the loader's own draws (begin/end_global_draws).
        self._global_left: Optional[torch.Tensor] = None

    @property
    def active(self) -> bool:
        """Whether seeds come from the saved run's stream (else from the global RNG)."""
        return self._stream is not None

    def draw_seed(self, base_seed_draws: int) -> Tuple[int, str]:
        """(an epoch's shuffle seed, the state of its source right after the draw). On the
        stream, the loader's `base_seed_draws` draws are replayed first, so its seeds stay
        the ones drawn there."""
        stream = self._stream
        if stream is not None:
            for _ in range(base_seed_draws):
                _draw(stream)
        seed = int(_draw(stream).item())
        return seed, b64(stream.get_state() if stream is not None else torch.get_rng_state())

    def state(self) -> Optional[str]:
        """The stream's state (base64), or None when seeds come from the global RNG."""
        return b64(self._stream.get_state()) if self._stream is not None else None

    def resume(self, rng: str) -> None:
        """Draws the next seeds from the saved run's stream `rng`, from now on."""
        self._stream = torch.Generator()
        self._stream.set_state(unb64(rng))
        self._global_left = torch.get_rng_state()

    def drop(self) -> None:
        """Seeds come from the global RNG from now on (someone else drives it: a re-seed
        per epoch, a restored RNG state), as torch would draw them."""
        self._stream, self._global_left = None, None

    def _untouched(self, draws: Tuple[int, ...]) -> bool:
        """Whether the global RNG is where it was left, or that many int64 draws on (the
        loader's own base-seed draws, which the stream replays)."""
        now = torch.get_rng_state()
        for n in sorted(set(draws)):
            g = torch.Generator()
            g.set_state(self._global_left)
            for _ in range(n):
                _draw(g)
            if torch.equal(g.get_state(), now):
                return True
        return False

    def check_pass(self, base_seed_draws: int) -> None:
        """A pass begins (outside a loader's iter(), which checks itself): the global RNG
        must be where it was left, give or take the loader's base-seed draws."""
        if self._stream is not None and self._global_left is not None:
            if self._untouched((0, base_seed_draws)):
                self._global_left = torch.get_rng_state()
            else:
                self.drop()

    def begin_global_draws(self) -> None:
        """A loader's iter() is about to draw from the global RNG (its base seed; with worker
        processes, the epoch's shuffle seed too): drops the stream if anyone touched the
        global RNG since it was left, and trusts it until end_global_draws."""
        if self._stream is not None and self._global_left is not None and not self._untouched((0,)):
            self.drop()
        self._global_left = None

    def end_global_draws(self) -> None:
        """The loader's iter() drew what it draws: the global RNG is left as it is now."""
        if self._stream is not None:
            self._global_left = torch.get_rng_state()
