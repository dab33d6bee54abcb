"""Seeded fuzz of the augment kernel (csrc/augment) and the batch engine (csrc/engine).

Inputs a caller could pass, the hostile ones included: boxes of size 0, negative, huge,
NaN or infinite; 1-pixel and very thin images; every output dtype; NCHW, channels_last
and strided outputs; packed-batch shapes with offsets and strides near 2^63; engine
plans that are invalid or extreme (ratios 1e-3 .. 1e3, tiny scales, Resize with
max_size), bad sample indices, bad output tensors, corrupt files. The property, for
every case: the result equals fastload.reference's, or the call raises a clean
ValueError / RuntimeError (or the engine reports a per-sample status); never a crash,
never a silent wrong value. Run under ASan/UBSan, an out-of-bounds access fails here too.

Bounded: FASTLOAD_FUZZ_CASES cases per test (default 150, a few seconds), the seed fixed
(FASTLOAD_FUZZ_SEED to vary it); a failing case prints its number and inputs.
"""

from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest
import torch

from fastload import _ext, reference
from fastload import ops

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "150"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20261201"))
DTYPES = [torch.uint8, torch.float32, torch.float16, torch.bfloat16]
INT_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
# Values from the edges of float32 and int64, mixed into the fuzzed inputs.
EXTREME_FLOATS = [0.0, -0.0, -1.0, 1e-30, 1e-45, 1e30, 3.4e38, -3.4e38, 1e39, float("nan"), float("inf"),
                  float("-inf"), 0.5, 2**24 + 1.0]
# (offset, height, width, row_stride) whose bound offset + (height - 1) * row_stride +
# width * C wraps around in int64 arithmetic.
WRAPPING_SHAPES = [(0, 2, 4, INT64_MAX), (0, 3, 4, 2**62), (INT64_MAX, 1, 1, 3), (2**62, 2, 1, 2**62),
                   (0, 2**31 - 1, 4, 2**33), (INT64_MAX - 2, 1, 1, 3)]
EXTREME_INTS = [0, -1, 1, 2, INT_MAX, INT_MAX + 1, 2**32, 2**62, INT64_MAX, INT64_MAX - 2, -(2**63), -(2**62)]


def f32(value: float) -> float:
    with np.errstate(over="ignore"):  # 1e39 -> inf, as the ops' float conversion
        return float(np.float32(value))


def fuzz_image(rng, channels):
    """uint8 [H, W, C]: mostly tiny, often 1 pixel or 1 pixel thin, sometimes a row-strided view."""
    kind = rng.integers(0, 4)
    if kind == 0:
        height, width = 1, 1
    elif kind == 1:
        height, width = (1, int(rng.integers(1, 300))) if rng.random() < 0.5 else (int(rng.integers(1, 300)), 1)
    else:
        height, width = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    pad = int(rng.integers(0, 3)) if rng.random() < 0.3 else 0
    full = torch.from_numpy(rng.integers(0, 256, (height, width + pad, channels), dtype=np.uint8))
    return full[:, :width] if pad else full


def fuzz_box(rng, height, width):
    """[top, left, box_height, box_width]: plausible, or built from extreme values."""
    box = [rng.uniform(-2, height), rng.uniform(-2, width), rng.uniform(0.01, 2 * height + 1),
           rng.uniform(0.01, 2 * width + 1)]
    for k in range(4):
        if rng.random() < 0.15:
            box[k] = EXTREME_FLOATS[rng.integers(0, len(EXTREME_FLOATS))]
    return [float(v) for v in box]


def box_ok(box):
    values = [f32(v) for v in box]  # the ops take the box as float32
    return all(math.isfinite(v) for v in values) and values[2] > 0 and values[3] > 0


def assert_close_to_reference(out, want, case):
    assert out.shape == want.shape and out.dtype == want.dtype, case
    if out.numel() == 0:
        return
    if out.dtype == torch.uint8:
        assert (out.int() - want.int()).abs().max().item() <= 1, case
        return
    out64, want64 = out.double(), want.double()
    assert torch.isfinite(out64).all() or not torch.isfinite(want64).all(), case
    if out.dtype == torch.float32:
        span = max(1.0, want64.abs().max().item())
        torch.testing.assert_close(out64, want64, rtol=0, atol=1e-4 * span, msg=lambda m: f"{case}: {m}")
    else:  # both round to the 16-bit format last: one unit in the last place apart at most
        rtol = 2.0**-10 if out.dtype == torch.float16 else 2.0**-7
        span = max(1.0, want64.abs().max().item())
        torch.testing.assert_close(out64, want64, rtol=rtol, atol=rtol * span * 1e-2 + 1e-6,
                                   msg=lambda m: f"{case}: {m}")


def fuzz_normalisation(rng, channels, dtype):
    if dtype == torch.uint8 and rng.random() < 0.7:
        return 1.0, [0.0] * channels, [1.0] * channels
    scale = float(rng.choice([1.0, 1 / 255, rng.uniform(-3, 3)]))
    mean = [float(rng.uniform(-2, 2)) for _ in range(channels)]
    std = [float(rng.choice([1.0, 0.2, rng.uniform(0.05, 3)])) for _ in range(channels)]
    if rng.random() < 0.05:
        std[0] = float(rng.choice([0.0, float("nan"), float("inf")]))  # refused
    return scale, mean, std


def test_kernel_single_op_fuzz():
    rng = np.random.default_rng(SEED)
    for case in range(CASES):
        channels = int(rng.choice([1, 3]))
        image = fuzz_image(rng, channels)
        height, width = image.shape[:2]
        box = fuzz_box(rng, height, width)
        size = [int(rng.integers(0, 7)), int(rng.integers(0, 7))]
        dtype = DTYPES[rng.integers(0, len(DTYPES))]
        flip, channels_last = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        scale, mean, std = fuzz_normalisation(rng, channels, dtype)
        info = dict(case=case, shape=tuple(image.shape), box=box, size=size, dtype=dtype, scale=scale, mean=mean,
                    std=std)
        valid = box_ok(box) and all(s != 0 and math.isfinite(s) for s in map(f32, std))
        args = (image, box, size, flip, scale, mean, std, dtype, channels_last)
        if not valid:
            with pytest.raises(ValueError, match="^fastload\\.crop_resize_flip_normalize: expected"):
                ops.crop_resize_flip_normalize(*args)
            continue
        out = ops.crop_resize_flip_normalize(*args)
        assert_close_to_reference(out, reference.crop_resize_flip_normalize(*args), info)


def batch_image_ok(shape, channels, numel):
    offset, height, width, row_stride = shape
    return (offset >= 0 and 0 < height <= INT_MAX and width > 0 and width * channels <= INT_MAX
            and row_stride >= width * channels and offset + (height - 1) * row_stride + width * channels <= numel)


def fuzz_out(rng, n, channels, size, dtype):
    """An output batch as NCHW, channels_last or a strided slice of a bigger one."""
    layout = rng.integers(0, 3)
    if layout == 0:
        return torch.empty(n, channels, *size, dtype=dtype)
    if layout == 1:
        return torch.empty(n, channels, *size, dtype=dtype).contiguous(memory_format=torch.channels_last)
    return torch.empty(2 * n, channels, size[0], size[1] + 1, dtype=dtype)[::2, :, :, 1:]


def test_kernel_batch_op_fuzz():
    rng = np.random.default_rng(SEED + 1)
    for case in range(CASES):
        channels = int(rng.choice([1, 3]))
        n = int(rng.integers(0, 5))
        images = [fuzz_image(rng, channels).contiguous() for _ in range(n)]
        lengths = [im.numel() for im in images]
        packed = torch.cat([torch.zeros(3, dtype=torch.uint8)] + [im.flatten() for im in images])
        shapes, boxes = [], []
        offset = 3
        for im, length in zip(images, lengths):
            shape = [offset, im.shape[0], im.shape[1], im.shape[1] * channels]
            offset += length
            if rng.random() < 0.1:  # a hostile field
                shape[rng.integers(0, 4)] = EXTREME_INTS[rng.integers(0, len(EXTREME_INTS))]
            elif rng.random() < 0.05:  # sums and products that wrap past 2^63 unless checked
                shape = list(WRAPPING_SHAPES[rng.integers(0, len(WRAPPING_SHAPES))])
            shapes.append(shape)
            boxes.append(fuzz_box(rng, im.shape[0], im.shape[1]))
        size = (int(rng.integers(0, 6)), int(rng.integers(0, 6)))
        dtype = DTYPES[rng.integers(0, len(DTYPES))]
        scale, mean, std = fuzz_normalisation(rng, channels, dtype)
        shapes_t = torch.tensor(shapes, dtype=torch.int64).reshape(n, 4)
        boxes_t = torch.tensor(boxes, dtype=torch.float32).reshape(n, 4)
        flips = torch.from_numpy(rng.random(n) < 0.5)
        out = fuzz_out(rng, n, channels, size, dtype)
        info = dict(case=case, shapes=shapes, boxes=boxes, size=size, dtype=dtype, numel=packed.numel())
        args = (packed, shapes_t, boxes_t, flips, scale, torch.tensor(mean), torch.tensor(std), out)
        valid = (all(batch_image_ok(s, channels, packed.numel()) for s in shapes) and all(map(box_ok, boxes))
                 and all(s != 0 and math.isfinite(s) for s in map(f32, std)))
        if not valid:
            out.fill_(7)
            with pytest.raises(ValueError, match="^fastload\\.crop_resize_flip_normalize_batch: expected"):
                ops.crop_resize_flip_normalize_batch(*args)
            assert (out == 7).all(), info  # validated before anything is written
            continue
        ops.crop_resize_flip_normalize_batch(*args)
        want = reference.crop_resize_flip_normalize_batch(packed, shapes_t, boxes_t, flips, scale,
                                                          torch.tensor(mean), torch.tensor(std), out.clone())
        assert_close_to_reference(out, want, info)


# ---- the engine ---------------------------------------------------------------------------


def fuzz_plan(rng):
    from fastload.augment import specs
    from fastload.augment.plan import build_plan

    geometry = []
    kind = rng.integers(0, 4)
    out = (int(rng.integers(1, 7)), int(rng.integers(1, 7)))
    if kind == 0:
        low = float(rng.choice([0.0, 1e-4, rng.uniform(0, 1)]))
        ratio = sorted(float(np.exp(rng.uniform(-7, 7))) for _ in range(2))
        geometry = [specs.RandomResizedCrop(out, scale=(low, float(rng.uniform(low, 1.0))), ratio=tuple(ratio))]
    elif kind == 1:
        short = int(rng.integers(1, 12))
        max_size = int(short + rng.integers(1, 20)) if rng.random() < 0.5 else None
        geometry = [specs.Resize(short, max_size=max_size), specs.CenterCrop(out)]
    elif kind == 2:
        geometry = [specs.Resize((int(rng.integers(1, 30)), int(rng.integers(1, 30)))), specs.CenterCrop(out)]
    else:
        geometry = [specs.CenterCrop(out)]
    tail = []
    if rng.random() < 0.5:
        tail.append(specs.RandomHorizontalFlip(float(rng.choice([0.0, 0.5, 1.0]))))
    if rng.random() < 0.5:
        tail.append(specs.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
    elif rng.random() < 0.5:
        tail.append(specs.ToDtype(DTYPES[rng.integers(0, len(DTYPES))], scale=bool(rng.random() < 0.5)))
    plan = build_plan(geometry + tail, seed=int(rng.integers(0, 2**31)))
    plan.channels = int(rng.choice([1, 3]))
    plan.mean, plan.std = plan.mean[:plan.channels], plan.std[:plan.channels]
    return plan


BAD_PLANS = [  # changes to a valid plan that set_plan must refuse
    {"out_height": 0}, {"out_width": -3}, {"channels": 2}, {"ratio_min": 0.0}, {"ratio_min": float("nan")},
    {"scale_min": -0.5}, {"scale_max": float("inf")}, {"mean": [0.0, 0.0]}, {"std": []},
    {"resize_height": 5, "resize_width": -1}, {"resize_short": 10, "max_size": 10},
    {"scale_min": 0.9, "scale_max": 0.1}, {"ratio_min": 2.0, "ratio_max": 1.0},
]


def expected_sample(plan, image, epoch, sample):
    """(status, output) the engine must give for a predecoded image: the reference kernel
    on the clamp region rounded outwards (csrc/augment/geometry.cpp sampling_view at scale 1)."""
    height, width = image.shape[:2]
    try:
        box, clamp, flip = _ext.require_ops().region_of(plan, height, width, epoch, sample)
    except ValueError:
        return 4, None  # no pixels to sample: a per-sample status, as torchvision fails
    r0 = min(max(0, math.floor(clamp[0] + 1e-6)), height - 1)
    c0 = min(max(0, math.floor(clamp[1] + 1e-6)), width - 1)
    r1 = max(min(height, math.ceil(clamp[0] + clamp[2] - 1e-6)), r0 + 1)
    c1 = max(min(width, math.ceil(clamp[1] + clamp[3] - 1e-6)), c0 + 1)
    rel = [box[0] - r0, box[1] - c0, box[2], box[3]]
    return 0, reference.crop_resize_flip_normalize(image[r0:r1, c0:c1], rel, list(plan.out_size), flip,
                                                   plan.value_scale, plan.mean, plan.std, plan.dtype)


def test_engine_fuzz_predecoded_batches():
    rng = np.random.default_rng(SEED + 2)
    module = _ext.require_ops()
    engine = module.BatchEngine(2)
    try:
        for case in range(max(1, CASES // 3)):
            plan = fuzz_plan(rng)
            if rng.random() < 0.15:  # a plan the engine must refuse, the old one kept
                for name, value in BAD_PLANS[rng.integers(0, len(BAD_PLANS))].items():
                    setattr(plan, name, value)
                with pytest.raises((ValueError, RuntimeError)):
                    engine.set_plan(plan)
                continue
            engine.set_plan(plan)
            n = int(rng.integers(1, 6))
            images = [fuzz_image(rng, plan.channels).contiguous() for _ in range(n)]
            samples = torch.from_numpy(rng.integers(-5, 10**6, n))  # no index: any sample id
            out = fuzz_out(rng, n, plan.channels, plan.out_size, plan.dtype)
            epoch = int(rng.integers(0, 5))
            status, messages = engine.wait(engine.submit(samples, out, epoch, dict(enumerate(images))))
            for slot in range(n):
                want_status, want = expected_sample(plan, images[slot], epoch, int(samples[slot]))
                info = dict(case=case, slot=slot, plan=repr(plan), shape=tuple(images[slot].shape),
                            message=messages[slot])
                assert int(status[slot]) == want_status, info
                if want_status == 4:
                    assert messages[slot].startswith("fastload."), info
                else:
                    assert_close_to_reference(out[slot], want, info)
    finally:
        engine.close()


def test_engine_fuzz_files_bad_indices_and_outputs(tmp_path):
    """Files (JPEGs of thin and 1-pixel sizes, a truncated one, a text file) through
    the reading and decoding path; sample indices and outputs that must be refused."""
    import io

    from PIL import Image

    import fastload

    rng = np.random.default_rng(SEED + 3)
    (tmp_path / "c").mkdir()
    sizes = [(1, 1), (1, 40), (40, 1), (9, 17), (17, 9), (23, 5), (64, 48)]
    for i, (h, w) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / "c" / f"{i}.jpg",
                                                                              quality=90)
    good = (tmp_path / "c" / "6.jpg").read_bytes()
    (tmp_path / "c" / "7_truncated.jpg").write_bytes(good[: len(good) // 2])
    (tmp_path / "c" / "8_text.jpg").write_bytes(b"not an image at all")
    # The same folder with the whole file under the truncated one's name (same indices):
    # a truncated file may decode only where its window's rows are all in the file.
    index = fastload.ImageFolder(str(tmp_path), ops=[fastload.ops.CenterCrop(2)]).index
    whole_root = tmp_path / "whole"  # made after the index: not a class of it
    shutil.copytree(tmp_path / "c", whole_root / "c")
    (whole_root / "c" / "7_truncated.jpg").write_bytes(good)
    whole_index = fastload.ImageFolder(str(whole_root), ops=[fastload.ops.CenterCrop(2)]).index
    module = _ext.require_ops()
    engine, whole_engine = module.BatchEngine(2), module.BatchEngine(1)
    for e, i in ((engine, index), (whole_engine, whole_index)):
        e.set_index(torch.from_numpy(i.files.data), torch.from_numpy(i.files.offsets),
                    torch.from_numpy(i.file_ids), torch.from_numpy(i.offsets), torch.from_numpy(i.sizes))
    count = len(index)
    try:
        for case in range(max(1, CASES // 5)):
            plan = fuzz_plan(rng)
            plan.dct_scaling = bool(rng.random() < 0.5)
            engine.set_plan(plan)
            whole_engine.set_plan(plan)
            n = int(rng.integers(1, 6))
            if rng.random() < 0.2:  # out of range: refused before anything runs
                bad = torch.from_numpy(rng.integers(0, count, n))
                bad[rng.integers(0, n)] = int(rng.choice([-1, count, 2**40, -(2**63)]))
                with pytest.raises(ValueError, match="expected sample indices in"):
                    engine.submit(bad, fuzz_out(rng, n, plan.channels, plan.out_size, plan.dtype), 0)
                continue
            if rng.random() < 0.15:  # wrong shape, device or dtype, or overlapping elements
                n = max(n, 2)
                wrong = [torch.empty(n + 1, plan.channels, *plan.out_size, dtype=plan.dtype),
                         torch.empty(n, plan.channels, *plan.out_size, dtype=torch.float64),
                         torch.empty(1, plan.channels, *plan.out_size, dtype=plan.dtype).expand(n, -1, -1, -1)]
                with pytest.raises(ValueError, match="BatchEngine.submit: expected"):
                    engine.submit(torch.zeros(n, dtype=torch.int64), wrong[rng.integers(0, len(wrong))], 0)
                continue
            samples = torch.from_numpy(rng.integers(0, count, n))
            out = fuzz_out(rng, n, plan.channels, plan.out_size, plan.dtype)
            epoch = int(rng.integers(0, 3))
            status, messages = engine.wait(engine.submit(samples, out, epoch))
            for slot in range(n):
                name = os.path.basename(index.source(int(samples[slot])))
                info = dict(case=case, name=name, status=int(status[slot]), message=messages[slot],
                            plan=repr(plan))
                if "truncated" in name:  # its header is whole: the geometry may fail first
                    assert int(status[slot]) in (0, 1, 4), info
                    if int(status[slot]) == 0:  # the window ends above the cut: the whole file's pixels
                        whole = torch.empty_like(out[slot:slot + 1], memory_format=torch.contiguous_format)
                        whole_status, _ = whole_engine.wait(whole_engine.submit(samples[slot:slot + 1], whole, epoch))
                        assert int(whole_status[0]) == 0 and torch.equal(whole, out[slot:slot + 1]), info
                elif "text" in name:
                    assert int(status[slot]) == 2, info  # not a JPEG: Python's PIL fallback takes it
                else:
                    assert int(status[slot]) in (0, 4), info
                    if int(status[slot]) == 0 and plan.dtype.is_floating_point:
                        assert torch.isfinite(out[slot].float()).all(), info
    finally:
        engine.close()
        whole_engine.close()
