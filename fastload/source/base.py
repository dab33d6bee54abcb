"""NativeDataset: the base of fastload's own datasets (ImageFolder, TarShards, FileList).

A native dataset is a SampleIndex (where the bytes are) plus a list of transforms (specs
from fastload.transforms: what to do to the pixels). fastload.DataLoader runs it on the
C++ engine, one call per batch. Indexed directly (`dataset[i]`, or in torch's DataLoader)
it decodes with PIL and applies the same transforms in plain PyTorch, with the same random
parameters: a slow but faithful twin.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from fastload.source.index import SampleIndex


def transforms_argument(transforms: Optional[Sequence[Any]], ops: Optional[Sequence[Any]], owner: str):
    """The transforms a dataset was given: `transforms=`, or the older keyword `ops=`
    (same meaning); both at once is refused, as neither could win silently.

    Raises:
        TypeError: both transforms and ops were passed.
    """
    if ops is None:
        return transforms
    if transforms is not None:
        raise TypeError(f"{owner}: expected transforms=[...] or ops=[...] (the older name of the same argument), "
                        "got both. Pass only transforms=.")
    return ops


def native_transforms(transforms: Optional[Sequence[Any]], owner: str = "fastload") -> List[Any]:
    """fastload.transforms specs for `transforms`: specs are kept, torchvision transforms
    (v1 or v2, Compose flattened) become their fastload equivalents, anything else is
    refused now rather than at the first batch.

    Raises:
        UnsupportedPipeline: a torchvision transform without a fastload equivalent.
        TypeError: a transform that is neither a fastload spec nor a torchvision transform.
    """
    from fastload.augment.specs import SPECS
    from fastload.errors import UnsupportedPipeline

    names = ", ".join(f"fastload.transforms.{spec.__name__}" for spec in SPECS)
    out: List[Any] = []
    for position, transform in enumerate(list(transforms or [])):
        if isinstance(transform, SPECS):
            out.append(transform)
        elif type(transform).__module__.startswith("torchvision."):
            from fastload.compat.torchvision import NotConvertible, convert_transform

            try:
                out.extend(convert_transform(transform))
            except NotConvertible as error:
                raise UnsupportedPipeline(
                    f"{owner}: transforms[{position}] is the torchvision transform {transform!r}, which fastload "
                    f"cannot run ({error}). Use fastload's transforms ({names}), or keep this transform in a "
                    "torchvision.datasets.ImageFolder(root, transform=...): fastload.DataLoader runs that "
                    "on its generic path.") from None
        else:
            raise TypeError(f"{owner}: expected transforms made of fastload's transforms ({names}) or torchvision "
                            f"transforms they map to, got {transform!r} at transforms[{position}].")
    return out


class NativeDataset(torch.utils.data.Dataset):
    """Base class: subclasses build `self.index` and call `super().__init__(index, transforms)`.

    Args:
        index: where each sample's bytes are, and its label.
        transforms: specs from fastload.transforms (RandomResizedCrop, Normalize, ...);
            torchvision transforms with a fastload equivalent are converted to them.
        seed: the base of every random parameter (crop, flip): parameters are a pure
            function of (seed, epoch, sample index). The loader overrides it with its own.
        ops: the older name of `transforms` (same meaning; pass one of the two).

    Attributes:
        transforms: the list of fastload.transforms specs (unlike a torchvision dataset's
            `transforms`, which is one callable); `ops` reads the same list.

    Example:
        >>> from fastload import transforms as T
        >>> index = SampleIndex.from_files(["a.jpg"], [0])
        >>> NativeDataset(index, [T.CenterCrop(8)]).transforms == NativeDataset(index, ops=[T.CenterCrop(8)]).ops
        True
    """

    def __init__(self, index: SampleIndex, transforms: Optional[Sequence[Any]] = None, seed: int = 0, *,
                 ops: Optional[Sequence[Any]] = None):
        owner = f"fastload.{type(self).__name__}"
        self.index = index
        self.transforms = native_transforms(transforms_argument(transforms, ops, owner), owner)
        self.seed = seed
        self.epoch = 0

    @property
    def ops(self) -> List[Any]:
        """The older name of `transforms` (read-only)."""
        return self.transforms

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
        return apply_ops_reference(self.transforms, image, seed=self.seed, epoch=self.epoch, index=i), int(self.index.labels[i])
