"""fastload.transforms: the public name of the transform specs, and the datasets'
`transforms=` argument (with `ops=`, its older name, kept working)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
import torchvision

import fastload
from fastload import transforms as T
from fastload.datasets.base import NativeDataset
from fastload.source.index import SampleIndex
from jpeg_samples import noise_jpeg

SPEC_NAMES = ("RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "Normalize", "ToDtype",
              "RandomCrop", "ColorJitter", "Grayscale", "RandomGrayscale", "GaussianBlur", "RandomErasing",
              "TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _train():
    return [T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
            T.Normalize(MEAN, STD)]


@pytest.fixture(scope="module")
def cat_dog_folder(tmp_path_factory):
    """An ImageFolder: 2 classes of 2 small JPEGs."""
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        os.makedirs(root / name)
        for i in range(2):
            (root / name / f"{i}.jpg").write_bytes(noise_jpeg(rng, 12 + i, 14))
    return str(root)


@pytest.fixture(scope="module")
def shard(cat_dog_folder, tmp_path_factory):
    """A tar shard of the folder's images, one (jpg, cls) pair per sample."""
    path = str(tmp_path_factory.mktemp("shard") / "s.tar")
    ds = fastload.ImageFolder(cat_dog_folder)
    with tarfile.open(path, "w") as tf:
        for i in range(len(ds)):
            for name, data in ((f"{i:04d}.jpg", ds.index.read(i)), (f"{i:04d}.cls", str(ds.targets[i]).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def _same_samples(a, b):
    assert len(a) == len(b) and a.targets == b.targets
    for i in range(len(a)):
        (x, y), (want_x, want_y) = a[i], b[i]
        assert torch.equal(x, want_x) and y == want_y


def _builders(cat_dog_folder, shard, tmp_path):
    paths = [os.path.join(cat_dog_folder, c, f) for c in ("cat", "dog") for f in ("0.jpg", "1.jpg")]
    cache = str(tmp_path / "cache")
    return {
        "ImageFolder": lambda **kw: fastload.ImageFolder(cat_dog_folder, seed=3, **kw),
        "FileList": lambda **kw: fastload.FileList(paths, [0, 0, 1, 1], seed=3, **kw),
        "TarShards": lambda **kw: fastload.TarShards(shard, cache_dir=cache, seed=3, progress=False, **kw),
    }


@pytest.mark.parametrize("kind", ["ImageFolder", "FileList", "TarShards"])
def test_transforms_and_ops_keywords_give_the_same_dataset(cat_dog_folder, shard, tmp_path, kind):
    build = _builders(cat_dog_folder, shard, tmp_path)[kind]
    new, old = build(transforms=_train()), build(ops=_train())
    assert new.transforms == old.transforms == _train()
    assert new.ops is new.transforms and old.ops is old.transforms  # the older name reads the same list
    _same_samples(new, old)
    if kind != "FileList":  # FileList has no repr of its own
        assert "transforms=[RandomResizedCrop(" in repr(new)


@pytest.mark.parametrize("kind", ["ImageFolder", "FileList", "TarShards"])
def test_transforms_and_ops_at_once_are_refused(cat_dog_folder, shard, tmp_path, kind):
    build = _builders(cat_dog_folder, shard, tmp_path)[kind]
    with pytest.raises(TypeError, match=rf"fastload\.{kind}: expected transforms=\[\.\.\.\] or ops=\[\.\.\.\] .*got both"):
        build(transforms=_train(), ops=_train())
    with pytest.raises(TypeError, match="got both"):  # an empty list is a choice too
        build(transforms=[], ops=[])


def test_tar_shards_refuse_both_keywords_before_fetching(tmp_path):
    # The argument error comes first, not the missing shard's (nor a download or an index).
    with pytest.raises(TypeError, match="got both"):
        fastload.TarShards(str(tmp_path / "missing.tar"), transforms=[], ops=[], cache_dir=str(tmp_path))


def test_older_positional_use_keeps_working(cat_dog_folder, shard, tmp_path):
    # Where ops= was the second (third for FileList) positional argument, transforms= is now.
    by_keyword = fastload.ImageFolder(cat_dog_folder, transforms=_train(), seed=3)
    _same_samples(fastload.ImageFolder(cat_dog_folder, _train(), seed=3), by_keyword)
    paths = [by_keyword.index.files[i] for i in range(len(by_keyword))]
    assert fastload.FileList(paths, [0, 0, 1, 1], _train(), 3).transforms == _train()
    assert fastload.TarShards(shard, _train(), cache_dir=str(tmp_path), progress=False).ops == _train()
    index = SampleIndex.from_files(paths, [0, 0, 1, 1])
    dataset = NativeDataset(index, _train(), 3)
    assert dataset.transforms == _train() and dataset.seed == 3


def test_dataset_ops_is_a_read_only_alias(cat_dog_folder):
    dataset = fastload.ImageFolder(cat_dog_folder, transforms=[T.CenterCrop(4)])
    with pytest.raises(AttributeError):
        dataset.ops = []
    assert dataset.ops == [T.CenterCrop(4)]


def test_transforms_are_the_specs_fastload_ops_exports():
    assert sorted(T.__all__) == sorted(SPEC_NAMES)
    for name in SPEC_NAMES:
        assert getattr(fastload.transforms, name) is getattr(fastload.ops, name)
    assert "transforms" in fastload.__all__ and "transforms" in dir(fastload)


def test_import_fastload_leaves_transforms_to_first_use():
    code = ("import sys, fastload; before = 'fastload.transforms' in sys.modules; "
            "fastload.transforms.Resize; print(before, 'fastload.transforms' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_messages_name_transforms(cat_dog_folder):
    # Grayscale first: no native prefix to run, so no Python tail either.
    with pytest.raises(fastload.UnsupportedPipeline, match=r"fastload\.ImageFolder: transforms\[0\] is the torchvision "
                                                           r"transform Grayscale.*fastload\.transforms\.Resize"):
        fastload.ImageFolder(cat_dog_folder, transforms=[torchvision.transforms.Grayscale(), T.CenterCrop(8)])
    with pytest.raises(TypeError, match=r"expected transforms made of fastload's transforms .* at transforms\[0\]"):
        fastload.FileList([], transforms=[lambda image: image])


def test_torchvision_transforms_convert_under_either_keyword(cat_dog_folder):
    tv = torchvision.transforms.Compose([torchvision.transforms.Resize(10), torchvision.transforms.CenterCrop(8)])
    assert fastload.ImageFolder(cat_dog_folder, transforms=[tv]).transforms == [T.Resize(10), T.CenterCrop(8)]
    assert fastload.ImageFolder(cat_dog_folder, ops=[tv]).transforms == [T.Resize(10), T.CenterCrop(8)]
