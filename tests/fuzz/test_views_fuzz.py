"""Seeded, bounded fuzz of the engine's several outputs per sample: image views from one
decode and masks from a second file, driven as fastload.native.NativeRunner drives them.

Each case draws images (tiny to a few hundred pixels, some mutated or truncated), 1 to 4
image views with random geometry (RandomResizedCrop with extreme scales and ratios,
Resize + CenterCrop larger than the image, RandomCrop with padding), dtypes and sizes, and
masks (.npy, some with a wrong size, a mutated or truncated header, another dtype;
grayscale JPEG) following random views, with either nearest rule and any fill.

Properties:
  * nothing crashes or hangs (under `make sanitize`: nothing reads or writes out of
    bounds, no undefined behaviour);
  * a sample gives the same outputs (every view and mask) or the same status in any
    batch and with any thread count as alone;
  * a mask whose file is good equals the plain-PyTorch twin
    (fastload.augment.views.mask_reference) for the engine's drawn geometry;
  * bad mask files fail their sample with a message naming the mask file.

Case i is rebuilt by `make_case(SEED, i, root)` (FASTLOAD_FUZZ_SEED varies SEED). FASTLOAD_FUZZ_CASES sets the number of
cases (default: a few seconds on one core with the normal build).
"""

from __future__ import annotations

import io
import os
import random
import sys
from typing import List

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jpeg_samples as js  # noqa: E402

from fastload import _ext  # noqa: E402
from fastload import transforms as T  # noqa: E402
from fastload.augment.plan import build_plan  # noqa: E402
from fastload.augment.views import Mask, Outputs, build_view_plans, mask_reference  # noqa: E402
from fastload.source.index import SampleIndex  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

DEFAULT_CASES = 100
CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES") or DEFAULT_CASES)
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20261206"))


def random_view(rng: random.Random) -> list:
    kind = rng.choice(["rrc", "resize", "crop"])
    size = rng.choice([1, 3, 8, 17, 32])
    if kind == "rrc":
        low = rng.choice([0.0, 0.01, 0.3])
        ops = [T.RandomResizedCrop(size, scale=(low, rng.choice([low, 1.0])),
                                   ratio=rng.choice([(3 / 4, 4 / 3), (0.1, 10.0), (1.0, 1.0)]))]
    elif kind == "resize":
        ops = [T.Resize(rng.choice([1, 9, 40])), T.CenterCrop(size)]
    else:
        ops = [T.RandomCrop(size, padding=rng.choice([0, 2, 9]), pad_if_needed=True)]
    if rng.random() < 0.5:
        ops.append(T.RandomHorizontalFlip())
    if rng.random() < 0.3:
        ops.append(T.RandomVerticalFlip())
    if rng.random() < 0.5:
        ops.append(T.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.25)))
    return ops


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def make_case(seed: int, case: int, root: str):
    """(image paths, mask paths, Outputs, good mask arrays or None) of case `case`."""
    rng = random.Random(seed * 1000 + case)
    n = rng.randint(1, 6)
    images, masks, arrays = [], [], []
    for i in range(n):
        h, w = rng.choice([1, 2, 7, 33, 120]), rng.choice([1, 3, 16, 45, 200])
        data = js.encode(js.photo(h, w, case + i), quality=rng.choice([50, 95]))
        if rng.random() < 0.15:
            data = data[:rng.randint(0, len(data))]
        image = os.path.join(root, f"c{case}_{i}.jpg")
        with open(image, "wb") as f:
            f.write(data)
        labels = np.random.default_rng(case * 10 + i).integers(0, 256, (h, w)).astype(np.uint8)
        kind = rng.random()
        good = None
        if kind < 0.6:
            mask_data, good = npy_bytes(labels), labels
        elif kind < 0.7:
            mask_data = npy_bytes(labels[:, :max(1, w - 1)] if w > 1 else labels[:1, :1].repeat(2, 0))
        elif kind < 0.8:
            raw = bytearray(npy_bytes(labels))
            for _ in range(rng.randint(1, 6)):
                raw[rng.randrange(min(len(raw), 80))] = rng.randrange(256)
            mask_data = bytes(raw[:rng.randint(0, len(raw))] if rng.random() < 0.5 else raw)
        elif kind < 0.9:
            mask_data = npy_bytes(labels.astype(np.int16))
        else:
            buffer = io.BytesIO()
            from PIL import Image

            Image.fromarray(labels).save(buffer, "JPEG", quality=90)
            mask_data = buffer.getvalue()
        mask = os.path.join(root, f"c{case}_{i}.mask")
        with open(mask, "wb") as f:
            f.write(mask_data)
        images.append(image)
        masks.append(mask)
        arrays.append(good)
    views = [random_view(rng) for _ in range(rng.randint(1, 4))]
    mask_specs = [Mask(follows=rng.randrange(len(views)), fill=rng.choice([0, 7, 255]),
                       dtype=rng.choice([torch.uint8, torch.int64]), sampling=rng.choice(["pil", "tensor", "cv2"]),
                       channel_dim=rng.random() < 0.3) for _ in range(rng.randint(0, 2))]
    return images, masks, Outputs.of_views(views, mask_specs), arrays


def run(runner_views, images, masks, samples: List[int], threads: int):
    from fastload.native import NativeRunner

    index = SampleIndex.from_files(images, [0] * len(images))
    runner = NativeRunner(index, runner_views.plans[0], num_threads=threads, views=runner_views,
                          mask_index=SampleIndex.from_files(masks, [0] * len(masks)))
    try:
        samples_t = torch.tensor(samples, dtype=torch.int64)
        status, messages, out = runner.producer.collect(runner.producer.submit(samples_t, 1))
        return status, messages, [o.clone() for o in out]
    finally:
        runner.close()


@pytest.mark.parametrize("case", range(CASES))
def test_views_and_masks_are_per_sample_and_match_the_twin(tmp_path, fuzz_trace, case):
    fuzz_trace(f"case {case}")
    images, masks, outputs, arrays = make_case(SEED, case, str(tmp_path))
    first = build_plan(outputs.views[0], seed=case)
    views = build_view_plans(outputs, first)
    order = list(range(len(images))) * 2
    random.Random(case).shuffle(order)
    status, messages, out = run(views, images, masks, order, threads=2)
    k = views.image_views
    for slot, sample in enumerate(order):
        alone_status, alone_messages, alone = run(views, images, masks, [sample], threads=1)
        assert int(status[slot]) == int(alone_status[0]), (sample, messages[slot], alone_messages[0])
        if int(status[slot]) != 0:
            assert messages[slot], sample
            continue
        for o, a in zip(out, alone):
            assert torch.equal(o[slot], a[0]), sample
        for m, spec in enumerate(outputs.masks):
            if arrays[sample] is None:
                continue  # a lossy JPEG mask: its labels are the decoder's
            want = mask_reference(arrays[sample], views.seeded(spec.follows), spec, epoch=1, index=sample)
            assert torch.equal(out[k + m][slot], want), (sample, m)
    for slot, sample in enumerate(order):
        if int(status[slot]) != 0 and arrays[sample] is None and "mask" in messages[slot]:
            assert os.path.basename(masks[sample]) in messages[slot]


def test_npy_headers_fuzzed_never_crash(tmp_path, fuzz_trace):
    """Mutated .npy headers of every version: a clean error or the array, never a crash."""
    rng = random.Random(SEED)
    image = tmp_path / "i.jpg"
    image.write_bytes(js.encode(js.photo(5, 6, 0)))
    labels = np.arange(30, dtype=np.uint8).reshape(5, 6)
    outputs = Outputs.of_views([[T.CenterCrop(4)]], [Mask(dtype=torch.uint8)])
    views = build_view_plans(outputs, build_plan(outputs.views[0]))
    for trial in range(CASES * 5):
        fuzz_trace(f"npy trial {trial}")
        raw = bytearray(npy_bytes(labels))
        if rng.random() < 0.3:  # versions 2 and 3 have a 4-byte header length
            raw[6] = rng.choice([2, 3])
            raw[8:10] = bytes([rng.randrange(256), rng.randrange(256)])
            raw[10:10] = bytes(2)
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        mask = tmp_path / f"m{trial}.npy"
        mask.write_bytes(bytes(raw))
        status, messages, out = run(views, [str(image)], [str(mask)], [0], threads=1)
        if int(status[0]) != 0:
            assert "mask" in messages[0] or "m" in messages[0]
