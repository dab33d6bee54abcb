"""Image + mask file pairs as a native dataset: segmentation on the engine.

Each sample is an image file and a mask file (a single-channel uint8 label map of the
same size). The mask goes through the image's geometry (crop, resize, flips,
RandomCrop's padding with its own fill), nearest-neighbour, without colour ops or
normalisation; the image through all of its transforms. Both come from one engine call
per batch: `[images [B, C, H, W], masks [B, H, W]]`.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple

from fastload.augment.split import transforms_repr
from fastload.augment.views import Mask, Outputs
from fastload.datasets.base import NativeDataset, native_transforms
from fastload.source.index import SampleIndex


def pair_folders(images: str, masks: str, image_suffix: str = ".jpg",
                 mask_suffix: str = ".png") -> Tuple[List[str], List[str]]:
    """(image paths, mask paths) of two folders, paired by file name stem, sorted: every
    `<stem><image_suffix>` of `images` with `<stem><mask_suffix>` of `masks`.

    Raises:
        FileNotFoundError: an image without its mask, or no image at all.
    """
    names = sorted(n for n in os.listdir(images) if n.lower().endswith(image_suffix.lower()))
    if not names:
        raise FileNotFoundError(f"fastload.SegmentationDataset: found no {image_suffix} file in {images}.")
    image_paths, mask_paths, missing = [], [], []
    for name in names:
        mask = os.path.join(masks, name[:len(name) - len(image_suffix)] + mask_suffix)
        if not os.path.exists(mask):
            missing.append(mask)
        image_paths.append(os.path.join(images, name))
        mask_paths.append(mask)
    if missing:
        raise FileNotFoundError(f"fastload.SegmentationDataset: expected a mask for every image, {len(missing)} "
                                f"missing: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}.")
    return image_paths, mask_paths


class SegmentationDataset(NativeDataset):
    """(image, mask) file pairs on fastload's native pipeline.

    Args:
        images: image file paths (JPEG natively; other formats through PIL).
        masks: one mask file per image, of the image's size: a .npy uint8 [H, W] array or
            a grayscale JPEG natively (8-bit L or P PNGs once the engine decodes PNG; the
            dataset's own `dataset[i]` reads them through PIL already).
        transforms: the image's transforms (fastload.transforms, or torchvision
            transforms with a native equivalent); the mask follows their geometry.
        mask: how the mask comes out (fastload.augment.views.Mask: RandomCrop's fill, e.g.
            255; dtype int64 or uint8; "pil", "tensor" or "cv2" nearest; [B, H, W] or
            [B, 1, H, W]).
        seed: base of the random augmentation parameters (the loader overrides it).

    Attributes:
        index, mask_index: where each image's and each mask's bytes are.

    Example:
        >>> import fastload
        >>> from fastload import transforms as T
        >>> ds = fastload.SegmentationDataset(["a.jpg"], ["a.npy"], [T.RandomResizedCrop(64),
        ...     T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)], mask=fastload.Mask(fill=255))
        >>> len(ds), ds.outputs.masks[0].fill
        (1, 255)
        >>> loader = fastload.DataLoader(ds, batch_size=16, shuffle=True)   # [images, masks] batches
    """

    def __init__(self, images: Sequence[str], masks: Sequence[str], transforms: Optional[Sequence[Any]] = None, *,
                 mask: Optional[Mask] = None, seed: int = 0):
        owner = f"fastload.{type(self).__name__}"
        images = [os.fspath(p) for p in images]
        masks = [os.fspath(p) for p in masks]
        if len(images) != len(masks):
            raise ValueError(f"{owner}: expected one mask per image, got {len(masks)} masks for {len(images)} images.")
        mask = Mask() if mask is None else mask
        if mask.follows != 0:
            raise ValueError(f"{owner}: the mask follows the one image view (follows=0), got {mask.follows}.")
        outputs = Outputs.segmentation(native_transforms(transforms, owner), mask)
        labels = [0] * len(images)
        super().__init__(SampleIndex.from_files(images, labels), seed=seed, outputs=outputs,
                         mask_index=SampleIndex.from_files(masks, labels))

    @classmethod
    def from_folders(cls, images: str, masks: str, transforms: Optional[Sequence[Any]] = None, *,
                     image_suffix: str = ".jpg", mask_suffix: str = ".npy", mask: Optional[Mask] = None,
                     seed: int = 0) -> "SegmentationDataset":
        """Pairs `images/<stem><image_suffix>` with `masks/<stem><mask_suffix>` (pair_folders)."""
        image_paths, mask_paths = pair_folders(images, masks, image_suffix, mask_suffix)
        return cls(image_paths, mask_paths, transforms, mask=mask, seed=seed)

    def __repr__(self) -> str:
        return (f"fastload.SegmentationDataset({len(self)} pairs, transforms={transforms_repr(self.transforms, ())}, "
                f"mask={self.outputs.masks[0]!r})")
