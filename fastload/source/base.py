"""NativeDataset: the base of fastload's own datasets (ImageFolder, TarShards, FileList).

A native dataset is a SampleIndex (where the bytes are) plus a list of ops (what to do to
the pixels). fastload.DataLoader runs it on the C++ engine, one call per batch. Indexed
directly (`dataset[i]`, or in torch's DataLoader) it decodes with PIL and applies the same
ops in plain PyTorch, with the same random parameters: a slow but faithful twin.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from fastload.source.index import SampleIndex


def native_ops(ops: Optional[Sequence[Any]], owner: str = "fastload") -> List[Any]:
    """fastload.ops specs for `ops`: specs are kept, torchvision transforms (v1 or v2,
    Compose flattened) become their fastload equivalents, anything else is refused now
    rather than at the first batch.

    Raises:
        UnsupportedPipeline: a torchvision transform without a fastload equivalent.
        TypeError: an op that is neither a fastload spec nor a torchvision transform.
    """
    from fastload.augment.plan import UnsupportedPipeline
    from fastload.augment.specs import SPECS

    names = ", ".join(f"fastload.ops.{spec.__name__}" for spec in SPECS)
    out: List[Any] = []
    for position, op in enumerate(list(ops or [])):
        if isinstance(op, SPECS):
            out.append(op)
        elif type(op).__module__.startswith("torchvision."):
            from fastload.compat.torchvision import NotConvertible, convert_transform

            try:
                out.extend(convert_transform(op))
            except NotConvertible as error:
                raise UnsupportedPipeline(
                    f"{owner}: ops[{position}] is the torchvision transform {op!r}, which fastload cannot "
                    f"run ({error}). Use fastload's ops ({names}), or keep this transform in a "
                    "torchvision.datasets.ImageFolder(root, transform=...): fastload.DataLoader runs that "
                    "on its generic path.") from None
        else:
            raise TypeError(f"{owner}: expected ops made of fastload's ops ({names}) or torchvision transforms "
                            f"they map to, got {op!r} at ops[{position}].")
    return out


class NativeDataset(torch.utils.data.Dataset):
    """Base class: subclasses build `self.index` and call `super().__init__(index, ops)`.

    Args:
        index: where each sample's bytes are, and its label.
        ops: transform specs from fastload.ops (RandomResizedCrop, Normalize, ...);
            torchvision transforms with a fastload equivalent are converted to it.
        seed: the base of every random parameter (crop, flip): parameters are a pure
            function of (seed, epoch, sample index). The loader overrides it with its own.
    """

    def __init__(self, index: SampleIndex, ops: Optional[Sequence[Any]] = None, seed: int = 0):
        self.index = index
        self.ops = native_ops(ops, f"fastload.{type(self).__name__}")
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
