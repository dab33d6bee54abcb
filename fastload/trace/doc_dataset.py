"""The dataset of the tracer's docstring examples: a class of the user's own, as the tracer meets one.

Written once here so that each example shows only what it is about (lazy.py, views.py,
dataset.py and the package's contract use it). `Photos.__getitem__` is the common shape
of a user's dataset: it opens an image with PIL, converts it to RGB, applies its
transform and returns `(image, label)`:

    def __getitem__(self, i):
        self.calls += 1
        return self.transform(Image.open(self.path).convert("RGB")), i % 10

Each `Photos` writes its one 8 x 8 JPEG (`path`) into a new temporary folder; `calls`
counts its `__getitem__` calls (the tracer's own calls at construction are undone).

Example:
    >>> from torchvision import transforms as T
    >>> photos = Photos(T.Compose([T.CenterCrop(4), T.ToTensor()]), length=12)
    >>> image, label = photos[11]
    >>> len(photos), tuple(image.shape), label, photos.calls
    (12, (3, 4, 4), 1, 1)
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

import torch


class Photos(torch.utils.data.Dataset):
    """`length` samples of one JPEG: `(transform(image), i % 10)`."""

    def __init__(self, transform: Callable[[Any], Any], length: int = 1000):
        from PIL import Image

        self.path = os.path.join(tempfile.mkdtemp(), "a.jpg")
        Image.new("RGB", (8, 8)).save(self.path)
        self.transform, self.length, self.calls = transform, length, 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        self.calls += 1
        return self.transform(Image.open(self.path).convert("RGB")), i % 10
