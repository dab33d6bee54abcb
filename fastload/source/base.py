"""NativeDataset: the base of fastload's own datasets (ImageFolder, TarShards, FileList).

A native dataset is a SampleIndex (where the bytes are) plus a list of ops (what to do to
the pixels). fastload.DataLoader runs it on the C++ engine, one call per batch. Indexed
directly (`dataset[i]`, or in torch's DataLoader) it decodes with PIL and applies the same
ops in plain PyTorch, with the same random parameters: a slow but faithful twin.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import torch

from fastload.source.index import SampleIndex


class NativeDataset(torch.utils.data.Dataset):
    """Base class: subclasses build `self.index` and call `super().__init__(index, ops)`.

    Args:
        index: where each sample's bytes are, and its label.
        ops: transform specs from fastload.ops (RandomResizedCrop, Normalize, ...).
        seed: the base of every random parameter (crop, flip): parameters are a pure
            function of (seed, epoch, sample index). The loader overrides it with its own.
    """

    def __init__(self, index: SampleIndex, ops: Optional[Sequence[Any]] = None, seed: int = 0):
        self.index = index
        self.ops = list(ops or [])
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.index)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def targets(self):
        """Labels of every sample, like torchvision's ImageFolder.targets."""
        return self.index.labels.tolist()

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        from fastload.augment.pipeline import apply_ops_reference
        from fastload.decode.pil import decode_to_tensor

        if i < 0:
            i += len(self)
        image = decode_to_tensor(self.index.read(i), index=i, source=self.index.source(i))
        return apply_ops_reference(self.ops, image, seed=self.seed, epoch=self.epoch, index=i), int(self.index.labels[i])
