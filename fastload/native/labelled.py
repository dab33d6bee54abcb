"""LabelledRunner: a fully native runner whose batch labels go through Python (a
torchvision dataset's target_transform, collated); not a hybrid pipeline: every pixel
is the engine's.
"""

from __future__ import annotations

from typing import Any, Callable, List

import torch


class LabelledRunner:
    """A fully native runner whose batch labels go through Python: [images, labels(class
    indexes int64 [B])] (a torchvision dataset's target_transform, collated). Everything
    else is the wrapped runner's."""

    def __init__(self, runner: Any, labels: Callable[[torch.Tensor], Any]):
        self.runner, self._labels = runner, labels

    def result(self, ticket: int) -> List[Any]:
        images, labels = self.runner.result(ticket)
        labels = self._labels(labels.cpu())
        if getattr(self.runner, "pin_memory", False):
            from torch.utils.data._utils.pin_memory import pin_memory

            labels = pin_memory(labels)
        return [images, labels]

    def __getattr__(self, name: str) -> Any:
        runner = self.__dict__.get("runner")
        if runner is None:  # (not yet initialised: e.g. a copy being built)
            raise AttributeError(name)
        return getattr(runner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("runner", "_labels"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.runner, name, value)
