"""Seeded fuzz of the colour ops (csrc/augment/color*.h): random sizes (1 pixel, thin,
row-strided views), channels, dtypes, orders and factors from the edges of their ranges,
erase boxes and values, hostile arguments. The property, per case: the result equals the
plain-PyTorch twin (fastload.augment.color) and stays in range, or the call raises a clean
ValueError; never a crash. Under ASan/UBSan an out-of-bounds access fails here too.

Bounded: FASTLOAD_FUZZ_CASES cases per test (default 150, a few seconds), the seed fixed
(FASTLOAD_FUZZ_SEED to vary it); a failing case prints its number and inputs.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from fastload import _ext
from fastload.augment import color

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "150"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20261201"))
EDGE_BLEND = [0.0, 1e-30, 0.5, 1.0, 1.0000001, 2.0, 255.0, 1e6, 3.4e38]
EDGE_HUE = [-0.5, -0.4999, -1e-9, 0.0, 1 / 255, 0.5]
# The float twin differs from the op only by float32 rounding (the op sums the contrast
# mean in double, torch in float32).
FLOAT_TOL = 1e-5


def fuzz_image(rng, dtype):
    kind = rng.integers(0, 4)
    if kind == 0:
        height, width = 1, 1
    elif kind == 1:
        height, width = (1, int(rng.integers(1, 200))) if rng.random() < 0.5 else (int(rng.integers(1, 200)), 1)
    else:
        height, width = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    channels = int(rng.choice([1, 3]))
    pad = int(rng.integers(1, 3)) if rng.random() < 0.3 else 0
    if dtype == torch.uint8:
        full = torch.from_numpy(rng.integers(0, 256, (height, width + pad, channels), dtype=np.uint8))
    else:
        full = torch.from_numpy(rng.random((height, width + pad, channels), dtype=np.float32))
    return full[:, :width] if pad else full


def fuzz_factor(rng, op):
    if op == 3:
        return float(np.float32(EDGE_HUE[rng.integers(0, len(EDGE_HUE))] if rng.random() < 0.4
                                else rng.uniform(-0.5, 0.5)))
    return float(np.float32(EDGE_BLEND[rng.integers(0, len(EDGE_BLEND))] if rng.random() < 0.4
                            else rng.uniform(0, 3)))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_color_jitter_fuzz_matches_twin_and_stays_in_range(dtype, fuzz_trace):
    rng = np.random.default_rng(SEED)
    for case in range(CASES):
        image = fuzz_image(rng, dtype)
        order = [int(v) for v in rng.permutation(4)]
        factors = [fuzz_factor(rng, op) if rng.random() < 0.8 else math.nan for op in range(4)]
        text = f"case {case}: shape {tuple(image.shape)} stride {image.stride()} order {order} factors {factors}"
        fuzz_trace(text)
        got = torch.ops.fastload.color_jitter(image, order, factors)
        want = color.color_jitter(image.contiguous(), order, factors)
        assert got.shape == image.shape and got.dtype == dtype, text
        if dtype == torch.uint8:
            assert torch.equal(got, want), text
        else:
            assert bool(((got >= 0) & (got <= 1)).all()), text
            # Each blend scales an earlier rounding difference by up to its factor.
            gain = math.prod(max(1.0, f) for f in factors[:3] if not math.isnan(f))
            torch.testing.assert_close(got, want, rtol=0, atol=FLOAT_TOL * gain, msg=text)


def test_grayscale_fuzz_matches_twin(fuzz_trace):
    rng = np.random.default_rng(SEED + 1)
    for case in range(CASES):
        dtype = torch.uint8 if rng.random() < 0.5 else torch.float32
        image = fuzz_image(rng, dtype)
        channels = int(rng.choice([1, 3]))
        text = f"case {case}: shape {tuple(image.shape)} dtype {dtype} -> {channels}"
        fuzz_trace(text)
        got = torch.ops.fastload.rgb_to_grayscale(image, channels)
        twin = color.pil_grayscale if dtype == torch.uint8 else color.tensor_grayscale
        torch.testing.assert_close(got, twin(image.contiguous(), channels), rtol=FLOAT_TOL, atol=FLOAT_TOL, msg=text)


def test_erasing_fuzz_boxes_fit_and_erase_matches_twin(fuzz_trace):
    rng = np.random.default_rng(SEED + 2)
    for case in range(CASES):
        height, width = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        scale = sorted(rng.uniform(0, 1, 2).tolist())
        ratio = sorted(np.exp(rng.uniform(-5, 5, 2)).tolist())
        p = float(rng.choice([0.0, 1.0, rng.random()]))
        text = f"case {case}: {height}x{width} p={p} scale={scale} ratio={ratio}"
        fuzz_trace(text)
        spec = color.RandomErasing(p=p, scale=scale, ratio=ratio, value="random" if rng.random() < 0.5 else 0.5)
        boxes = spec.params(torch.arange(8), SEED, case, height, width)
        top, left, h, w = boxes.unbind(1)
        assert bool(((top >= 0) & (left >= 0) & (top + h <= height) & (left + w <= width)).all()), text
        assert bool(((h < height) & (w < width)).all()), text
        image = torch.randn(height, width, 3)
        fill = spec.fill(3)
        for index, box in enumerate(boxes.tolist()):
            got = torch.ops.fastload.erase(image, box, fill, SEED, case, index)
            assert torch.equal(got, color.erase(image, box, fill, SEED, case, index)), f"{text} box {box}"
            assert bool(torch.isfinite(got).all()), text


def test_hostile_arguments_raise_clean_errors(fuzz_trace):
    rng = np.random.default_rng(SEED + 3)
    fl = torch.ops.fastload
    image = torch.zeros(5, 6, 3)
    bad_calls = [
        lambda: fl.erase(image, [4, 0, 2, 1], [0.0], 0, 0, 0),
        lambda: fl.erase(image, [-1, 0, 1, 1], [0.0], 0, 0, 0),
        lambda: fl.erase(image, [0, 0, 1, 2**40], [0.0], 0, 0, 0),
        lambda: fl.erase(image, [0, 0, 1, 1], [0.0, 1.0], 0, 0, 0),
        lambda: fl.erase(image.to(torch.uint8), [0, 0, 1, 1], [0.0], 0, 0, 0),
        lambda: fl.color_jitter(image, [0, 0, 1, 2], [1.0] * 4),
        lambda: fl.color_jitter(image, [0, 1, 2, 7], [1.0] * 4),
        lambda: fl.color_jitter(image, [0, 1, 2], [1.0] * 3),
        lambda: fl.adjust_hue(image, 0.6),
        lambda: fl.adjust_brightness(image, -1.0),
        lambda: fl.adjust_contrast(image, math.inf),
        lambda: fl.adjust_saturation(torch.zeros(5, 6, 4), 1.0),
        lambda: fl.adjust_saturation(torch.zeros(5, 6), 1.0),
        lambda: fl.adjust_saturation(torch.zeros(5, 6, 3, dtype=torch.float64), 1.0),
        lambda: fl.rgb_to_grayscale(image, 2),
        lambda: fl.color_jitter_params(torch.arange(3), 0, 0, [0.5, 1.5] * 3),
        lambda: fl.color_jitter_params(torch.arange(3), 0, 0, [1.5, 0.5] * 4),
        lambda: fl.color_jitter_params(torch.arange(3.0), 0, 0, [0.5, 1.5] * 4),
        lambda: fl.random_erasing_params(torch.arange(3), 0, 0, 0, 5, 0.5, [0.1, 0.2], [0.5, 2.0]),
        lambda: fl.random_erasing_params(torch.arange(3), 0, 0, 5, 5, 0.5, [0.1, 0.2], [-0.5, 2.0]),
    ]
    for case in rng.permutation(len(bad_calls)):
        fuzz_trace(f"bad call {case}")
        with pytest.raises(ValueError):
            bad_calls[case]()
