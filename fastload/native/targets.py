"""TargetsRunner: a native runner whose samples carry per-sample targets made in Python
each batch (a detection dataset's boxes, from the geometry the engine drew), batched by
the user's collate_fn. Every pixel is the engine's."""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch

from fastload.native.labelled import LabelledRunner


class TargetsRunner(LabelledRunner):
    """Batches `make(images, samples, epoch, plan)`: the engine's images [B, C, H, W], the
    samples they hold (int64 [B]: the index's labels are the sample numbers, so a
    replacement under on_error="skip" is named), the batch's epoch and the runner's plan
    (its seed the loader's). Everything else is the wrapped runner's."""

    def __init__(self, runner: Any, make: Callable[[torch.Tensor, torch.Tensor, int, Any], Any]):
        super().__init__(runner, make)
        object.__setattr__(self, "_epochs", {})

    def submit(self, indices: Any, epoch: int) -> int:
        ticket = self.runner.submit(indices, epoch)
        self._epochs[ticket] = epoch
        return ticket

    def discard(self, ticket: int) -> None:
        self._epochs.pop(ticket, None)
        self.runner.discard(ticket)

    def result(self, ticket: int) -> Any:
        epoch = self._epochs.pop(ticket)
        images, samples = self.runner.result(ticket)
        batch = self._labels(images, samples.cpu(), epoch, self.runner.plan)
        if getattr(self.runner, "pin_memory", False):
            from torch.utils.data._utils.pin_memory import pin_memory

            batch = pin_memory(batch)  # (the images are pinned already: kept as they are)
        return batch

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        return self.runner.stats(reset=reset)
