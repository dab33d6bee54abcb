"""The detection recipe's dataset: images and boxes, torchvision v2 on PIL in `__getitem__`.

`DetectionFolder(root)` is a fastload.DetectionDataset over a bench folder's images, each
with a few boxes (drawn once from the image's number, inside the image) and their labels,
whose `__getitem__` is what a torchvision detection dataset does: PIL.Image.open, then
the v2 Compose on (image, target). torch's DataLoader runs that; fastload's DataLoader
runs the same transforms on the engine, the boxes from its drawn geometry. Every image
keeps its number of boxes (ClampBoundingBoxes, no SanitizeBoundingBoxes), so that torch's
default collate batches the targets for both loaders.

Example:
    >>> DetectionFolder.BOXES
    4
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch

from fastload.datasets.detection import DetectionDataset

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class DetectionFolder(DetectionDataset):
    """A detection dataset over an ImageFolder tree (module doc)."""

    BOXES = 4  # per image

    def __init__(self, root: str, size: int = 224, seed: int = 0):
        import torchvision
        from torchvision import tv_tensors
        from torchvision.transforms import v2

        from fastload.decode.header import file_header

        paths = [path for path, _ in torchvision.datasets.ImageFolder(root).samples]
        targets = []
        for k, path in enumerate(paths):
            header = file_header(path)
            height, width = (header.height, header.width) if header is not None else (1, 1)
            g = torch.Generator().manual_seed(k)
            corners = torch.rand(self.BOXES, 2, 2, generator=g) * torch.tensor([float(width), float(height)])
            boxes = torch.cat([corners.min(1).values, corners.max(1).values], dim=1)
            targets.append({"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(height, width)),
                            "labels": torch.randint(1, 91, (self.BOXES,), generator=g)})
        self.v2_transforms = v2.Compose([
            v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD), v2.ClampBoundingBoxes()])
        super().__init__(paths, targets, self.v2_transforms, seed=seed)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, Dict[str, Any]]:
        import PIL.Image

        with PIL.Image.open(self.index.source(i)) as image:
            image = image.convert("RGB")
        return self.v2_transforms(image, dict(self.targets[i]))
