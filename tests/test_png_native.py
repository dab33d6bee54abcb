"""PNG images on the native path: the engine decodes them in C++ (libpng, in its thread
pool) instead of PIL, with the batches the PIL path gives (PNG is lossless, so the
pipeline's output equals the reference pipeline run on PIL's decode); mixed JPEG / PNG
folders; fastload.ImageFolder and torchvision's ImageFolder; corrupt PNGs go through the
error policy like corrupt JPEGs."""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
import jpeg_samples as js
import png_samples as ps
from fastload import _ext, ops
from fastload.augment.pipeline import apply_ops_reference
from fastload.augment.plan import build_plan
from fastload.decode.pil import decode_to_tensor
from fastload.errors import DecodeError
from fastload.native import NativeRunner

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

pytestmark = [pytest.mark.skipif(not _ext.has_png(), reason="fastload._C is not built with libpng"),
              pytest.mark.filterwarnings("ignore:Palette images with Transparency"), pytest.mark.timeout(300)]

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TRAIN = [ops.RandomResizedCrop(24), ops.RandomHorizontalFlip(), ops.Normalize(MEAN, STD)]
EVAL = [ops.Resize(30), ops.CenterCrop(24), ops.Normalize(MEAN, STD)]
# Kernel vs reference on the same decoded pixels, both float32: only the summation order
# differs (as tests/test_native.py).
FLOAT_ATOL = 1e-4
# Native vs torchvision + PIL, same crop: two uint8 levels of resize rounding, through
# ToTensor and Normalize's 1/std (as tests/test_trace.py).
EVAL_ATOL = 2.5 / 255 / min(STD)

# (file name, PNG bytes): every colour type, 16-bit, sub-8-bit, Adam7, a tall image whose
# crops need only some of its rows, 1-pixel-wide and 1x1 images.
PNG_KINDS = {
    "rgb.png": ps.encode(ps.photo(45, 61, seed=1), ps.RGB),
    "rgba16.png": ps.encode(np.concatenate([ps.photo(40, 33, seed=2), ps.photo(40, 33, seed=3)[..., :1]], -1)
                            .astype(np.uint16) * 257 + 3, ps.RGBA, 16),
    "palette4_adam7.png": ps.encode(np.random.default_rng(4).integers(0, 16, (37, 50), dtype=np.uint8), ps.PALETTE,
                                    4, palette=np.random.default_rng(5).integers(0, 256, (12, 3)), interlace=True),
    "gray1.png": ps.encode(np.random.default_rng(6).integers(0, 2, (31, 29), dtype=np.uint8), ps.GRAY, 1),
    "gray16.png": ps.encode(np.random.default_rng(7).integers(0, 600, (30, 42), dtype=np.uint16), ps.GRAY, 16),
    "graya_adam7.png": ps.encode(np.concatenate([ps.photo(33, 47, seed=8)[..., :1]] * 2, -1), ps.GRAY_ALPHA,
                                 interlace=True),
    "tall.png": ps.encode(ps.photo(300, 40, seed=9), ps.RGB, filters=(4, 1)),
    "thin.png": ps.encode(ps.photo(25, 1, seed=10), ps.RGB),
    "dot.png": ps.encode(ps.photo(1, 1, seed=11), ps.RGB),
}


def _write(root, files):
    for i, (name, data) in enumerate(sorted(files.items())):
        folder = root / f"class{i % 2}"
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes(data)
    return str(root)


@pytest.fixture(scope="module")
def png_folder(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("png"), PNG_KINDS)


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory):
    """PNGs, JPEGs and one BMP (which PIL still decodes)."""
    files = dict(PNG_KINDS)
    for i, size in enumerate([(40, 52), (61, 33), (48, 48)]):
        files[f"photo{i}.jpg"] = js.encode(js.photo(*size, seed=i), quality=90)
    buffer = io.BytesIO()
    Image.fromarray(ps.photo(26, 38, seed=12)).save(buffer, "BMP")
    files["old.bmp"] = buffer.getvalue()
    return _write(tmp_path_factory.mktemp("mixed"), files)


def run(dataset, indices, *, epoch=0, **plan_options):
    plan = build_plan(dataset.ops, seed=dataset.seed, **plan_options)
    runner = NativeRunner(dataset.index, plan, num_threads=2)
    try:
        return runner.result(runner.submit(indices, epoch)), runner.stats()
    finally:
        runner.close()


@pytest.mark.parametrize("pipeline", [TRAIN, EVAL], ids=["train", "eval"])
def test_png_folder_decodes_in_the_engine_with_the_pil_paths_batches(png_folder, pipeline):
    dataset = fastload.ImageFolder(png_folder, ops=pipeline, seed=5)
    indices = list(range(len(dataset)))
    for epoch in (0, 1):
        (images, labels), stats = run(dataset, indices, epoch=epoch)
        assert stats["pil_fallback"] == 0 and stats["images"] == len(indices)
        assert labels.tolist() == dataset.targets
        dataset.set_epoch(epoch)
        for i in indices:  # the reference: PIL's decode, then the reference pipeline with the same draws
            expected, _ = dataset[i]
            torch.testing.assert_close(images[i], expected, atol=FLOAT_ATOL, rtol=0,
                                       msg=lambda m: f"{dataset.index.source(i)}: {m}")


def test_grayscale_plan_decodes_pngs_as_pils_convert_l(png_folder):
    dataset = fastload.ImageFolder(png_folder, ops=[ops.RandomResizedCrop(20), ops.Normalize((0.5,), (0.25,))],
                                   seed=2)
    indices = list(range(len(dataset)))
    (images, _), stats = run(dataset, indices, epoch=3, channels=1)
    assert images.shape == (len(indices), 1, 20, 20) and stats["pil_fallback"] == 0
    for i in indices:
        gray = decode_to_tensor(dataset.index.read(i), channels=1)  # PIL's convert("L")
        expected = apply_ops_reference(dataset.ops, gray, seed=2, epoch=3, index=i)
        torch.testing.assert_close(images[i], expected, atol=FLOAT_ATOL, rtol=0)


def test_mixed_jpeg_png_folder_decodes_natively_and_other_formats_through_pil(mixed_folder):
    dataset = fastload.ImageFolder(mixed_folder, ops=TRAIN, seed=1)
    indices = list(range(len(dataset)))
    (images, labels), stats = run(dataset, indices, epoch=2, dct_scaling=False)
    assert stats["pil_fallback"] == 1  # the BMP
    dataset.set_epoch(2)
    for i in indices:
        torch.testing.assert_close(images[i], dataset[i][0], atol=FLOAT_ATOL, rtol=0)


def _torch_loader(dataset, **kwargs):
    return torch.utils.data.DataLoader(dataset, **kwargs)


def test_torchvision_imagefolder_of_pngs_runs_native_with_torchs_batches(mixed_folder):
    transform = T.Compose([T.Resize(30), T.CenterCrop(24), T.ToTensor(), T.Normalize(MEAN, STD)])
    make = lambda: torchvision.datasets.ImageFolder(mixed_folder, transform=transform)  # noqa: E731
    loader = fastload.DataLoader(make(), batch_size=5)
    assert loader.path.startswith("native: torchvision ImageFolder"), loader.path
    ours, theirs = list(loader), list(_torch_loader(make(), batch_size=5))
    assert len(ours) == len(theirs)
    for (images, labels), (want_images, want_labels) in zip(ours, theirs):
        assert torch.equal(labels, want_labels)
        assert torch.allclose(images, want_images, atol=EVAL_ATOL), (images - want_images).abs().max()
    assert loader.stats()["native"]["pil_fallback"] == 1  # the BMP only


def test_torchvision_train_pipeline_on_pngs_is_native(png_folder):
    transform = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    loader = fastload.DataLoader(torchvision.datasets.ImageFolder(png_folder, transform=transform), batch_size=4,
                                 shuffle=True, generator=torch.Generator().manual_seed(0))
    assert loader.path.startswith("native: torchvision ImageFolder [RandomResizedCrop"), loader.path
    batches = list(loader)
    assert sum(len(labels) for _, labels in batches) == len(PNG_KINDS)
    native = loader.stats()["native"]
    assert native["pil_fallback"] == 0 and native["images"] == len(PNG_KINDS)


def _damaged(root):
    """4 good PNGs (one class each, so a label is its index) and 2 bad ones at 1 and 4."""
    good = [ps.encode(ps.photo(20 + i, 30, seed=i), ps.RGB) for i in range(6)]
    bad_crc = bytearray(good[1])
    bad_crc[-14] ^= 0xFF  # IDAT's CRC
    good[1] = bytes(bad_crc)
    good[4] = good[4][:len(good[4]) // 2]  # truncated in its image data
    for i, data in enumerate(good):
        (root / f"c{i}").mkdir()
        (root / f"c{i}" / "x.png").write_bytes(data)
    return str(root)


def test_a_corrupt_png_raises_naming_the_file(tmp_path):
    dataset = fastload.ImageFolder(_damaged(tmp_path), ops=EVAL)
    loader = fastload.DataLoader(dataset, batch_size=6)
    with pytest.raises(DecodeError, match=r"expected a decodable PNG, got corrupt, truncated or unsupported data "
                                          r"\(libpng: IDAT: CRC error\)") as error:
        list(loader)
    assert error.value.index == 1 and error.value.source.endswith(os.path.join("c1", "x.png"))


def test_corrupt_pngs_are_skipped_and_counted_like_corrupt_jpegs(tmp_path):
    dataset = fastload.ImageFolder(_damaged(tmp_path), ops=EVAL)
    loader = fastload.DataLoader(dataset, batch_size=3, on_error="skip")
    with pytest.warns(UserWarning, match="on_error='skip' skipped sample"):
        batches = list(loader)
    # Each bad sample replaced by the next readable one, in its slot.
    assert [labels.tolist() for _, labels in batches] == [[0, 2, 2], [3, 5, 5]]
    stats = loader.stats()
    assert stats["native"]["skipped"] == 2 and stats["native"]["pil_fallback"] == 0
    skipped = {entry["sample"]: entry for entry in stats["skipped_samples"]}
    assert sorted(skipped) == [1, 4]
    assert "CRC error" in skipped[1]["reason"] and "unexpected end of file" in skipped[4]["reason"]


def test_a_png_over_the_pixel_limit_is_refused_from_its_header(tmp_path):
    (tmp_path / "c").mkdir()
    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    (tmp_path / "c" / "bomb.png").write_bytes(ps.SIGNATURE + ps.chunk(b"IHDR", ihdr) + ps.chunk(b"IEND", b""))
    dataset = fastload.ImageFolder(str(tmp_path), ops=EVAL)
    with pytest.raises(DecodeError, match=r"expected at most 178956970 pixels, got a 30000x30000 image"):
        run(dataset, [0])
