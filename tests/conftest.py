"""Shared test configuration: tests/ on sys.path for the helper modules, the `cuda` mark
skipped where no GPU is visible (GPU tests run in scripts/gpu_check.sh), and the image
folders the tests read.

Image folders: `make_image_folder(classes, per_class, size, seed)` writes a torchvision
ImageFolder tree of jpeg_samples.write_image_folder's photos once per distinct argument
set in a session; `image_folder` is the common small one. Tests only read them (a test
that adds or damages files writes its own folder under tmp_path).
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from jpeg_samples import write_image_folder  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.sh on one)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def make_image_folder(tmp_path_factory):
    """A function (classes=2, per_class=3, size=(48, 64), seed=0) -> the path of an
    ImageFolder tree root/class_<c>/img_<i>.jpg, image sizes within +-25 % of `size`
    (height, width). The same arguments give the same folder, written once a session."""
    made = {}

    def make(classes: int = 2, per_class: int = 3, size=(48, 64), seed: int = 0) -> str:
        key = (classes, per_class, tuple(size), seed)
        if key not in made:
            root = tmp_path_factory.mktemp(f"images_{classes}x{per_class}_{size[0]}x{size[1]}_seed{seed}")
            write_image_folder(root, classes=classes, per_class=per_class, size=size, seed=seed)
            made[key] = str(root)
        return made[key]

    return make


@pytest.fixture(scope="session")
def image_folder(make_image_folder):
    """The common small ImageFolder: 2 classes x 4 JPEGs of about 40x52 pixels (8 samples)."""
    return make_image_folder(classes=2, per_class=4, size=(40, 52))
