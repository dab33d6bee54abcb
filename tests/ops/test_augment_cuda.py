"""fastload::crop_resize_flip_normalize(_batch) on CUDA
(csrc/augment/crop_resize_flip_normalize_cuda.cu): CUDA kernel vs the CPU kernel vs
fastload/reference.py over dtypes, layouts, odd sizes, padding and poisoned outputs.

Needs a GPU and a CUDA build: skipped otherwise. Run on a lent GPU with
`python -m pytest tests/ops/test_augment_cuda.py -q -p no:cacheprovider`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from fastload import _ext, ops, reference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_crop_resize_flip_normalize import (  # noqa: E402
    CASES,
    DTYPES,
    assert_matches,
    batch_inputs,
    make_image,
    make_out,
    normalisation,
    poisons,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not (_ext.has_ops() and _ext.has_cuda_ops()), reason="fastload._C built without CUDA"),
]

# The CUDA kernel sums the 2-D tap window directly (w_y * w_x * pixel), the CPU kernel
# separably: the same math in another float32 order, so the CPU tolerances vs the
# reference (assert_matches) hold between the two kernels as well.


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_single_image_cuda_matches_cpu_and_reference(case, dtype):
    _, height, width, box, size = case
    for channels in (3, 1):
        image = make_image(height, width, channels, seed=height * width)
        scale, mean, std = normalisation(dtype, channels)
        want = {flip: reference.crop_resize_flip_normalize(image, box, size, flip, scale, mean, std, dtype)
                for flip in (False, True)}
        for channels_last in (False, True):
            for flip in (False, True):
                args = (box, size, flip, scale, mean, std, dtype, channels_last)
                cpu = ops.crop_resize_flip_normalize(image, *args)
                gpu = ops.crop_resize_flip_normalize(image.cuda(), *args)
                assert gpu.is_cuda and gpu.stride() == cpu.stride()
                assert_matches(gpu.cpu(), cpu, dtype)
                assert_matches(gpu.cpu(), want[flip], dtype)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("channels", [3, 1])
def test_batch_cuda_matches_cpu_and_writes_every_element(channels, dtype, layout):
    """One launch over packed variable-size images (padded rows, a 1x1 image, boxes
    beyond and outside the image, mixed flips); out poisoned twice."""
    images, packed, shapes, boxes, flips = batch_inputs(channels)
    size = [19, 23]
    scale, mean, std = normalisation(dtype, channels)
    mean_t, std_t = torch.tensor(mean), torch.tensor(std)
    cpu_out = torch.empty(len(images), channels, *size, dtype=dtype)
    ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, scale, mean_t, std_t, cpu_out)
    for poison in poisons(dtype):
        host_out, host_holder = make_out(len(images), channels, size, dtype, layout, poison)
        if layout == "strided":
            out = host_holder.cuda()[::2, :, 1 : 1 + size[0], 2 : 2 + size[1]]
        else:
            out = host_out.cuda()  # keeps channels_last strides
        assert out.stride() == host_out.stride()
        ops.crop_resize_flip_normalize_batch(packed.cuda(), shapes.cuda(), boxes.cuda(), flips.cuda(), scale,
                                             mean_t.cuda(), std_t.cuda(), out)
        result = out.cpu()
        if dtype != torch.uint8:
            assert not result.isnan().any()
        assert_matches(result, cpu_out, dtype)
        for i, image in enumerate(images):
            want = reference.crop_resize_flip_normalize(image, boxes[i].tolist(), size, bool(flips[i]), scale, mean,
                                                        std, dtype)
            assert_matches(result[i], want, dtype)


def test_batch_cuda_writes_nothing_outside_out():
    images, packed, shapes, boxes, flips = batch_inputs(3)
    holder = torch.full((10, 3, 22, 28), -3.0, device="cuda")
    out = holder[::2, :, 1:20, 2:25]
    ops.crop_resize_flip_normalize_batch(packed.cuda(), shapes.cuda(), boxes.cuda(), flips.cuda(), 1.0,
                                         torch.zeros(3, device="cuda"), torch.ones(3, device="cuda"), out)
    mask = torch.ones_like(holder, dtype=torch.bool)
    mask[::2, :, 1:20, 2:25] = False
    assert (holder[mask] == -3.0).all()


def test_batch_cuda_zero_and_one_and_current_stream():
    images, packed, shapes, boxes, flips = batch_inputs(3, n=1)
    mean, std = torch.zeros(3, device="cuda"), torch.ones(3, device="cuda")
    empty = torch.empty(0, 3, 8, 8, device="cuda")
    ops.crop_resize_flip_normalize_batch(packed[:0].cuda(), shapes[:0].cuda(), boxes[:0].cuda(), flips[:0].cuda(),
                                         1.0, mean, std, empty)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the kernel runs on the current (side) stream
        one = torch.full((1, 3, 8, 8), float("nan"), device="cuda")
        ops.crop_resize_flip_normalize_batch(packed.cuda(), shapes.cuda(), boxes.cuda(), flips.cuda(), 1.0, mean,
                                             std, one)
    stream.synchronize()
    assert torch.equal(one[0].cpu().isnan(), torch.zeros(3, 8, 8, dtype=torch.bool))
    want = ops.crop_resize_flip_normalize(images[0], boxes[0].tolist(), [8, 8], True, 1.0)
    assert_matches(one[0].cpu(), want, torch.float32)


def test_batch_cuda_large_batch_and_strong_downscale():
    """More samples than one grid z-slice would need is not the point (65535); this checks
    many samples with taps > 16 per axis (the kernel's loop, not a fixed window)."""
    gen = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (300 + i, 280 - i, 3), dtype=torch.uint8, generator=gen) for i in range(16)]
    packed = torch.cat([im.flatten() for im in images])
    offsets = torch.tensor([0] + [im.numel() for im in images[:-1]]).cumsum(0)
    shapes = torch.tensor([[int(o), im.shape[0], im.shape[1], im.shape[1] * 3] for o, im in zip(offsets, images)])
    boxes = torch.tensor([[0, 0, im.shape[0], im.shape[1]] for im in images], dtype=torch.float32)
    flips = torch.arange(16) % 2 == 0
    mean, std = torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.25, 0.3])
    cpu = torch.empty(16, 3, 9, 11)
    ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, flips, 1 / 255, mean, std, cpu)
    gpu = torch.empty(16, 3, 9, 11, device="cuda")
    ops.crop_resize_flip_normalize_batch(packed.cuda(), shapes.cuda(), boxes.cuda(), flips.cuda(), 1 / 255,
                                         mean.cuda(), std.cuda(), gpu)
    assert_matches(gpu.cpu(), cpu, torch.float32)


def test_batch_cuda_rejects_mixed_devices():
    _, packed, shapes, boxes, flips = batch_inputs(3, n=2)
    out = torch.empty(2, 3, 4, 4, device="cuda")
    with pytest.raises(ValueError, match="crop_resize_flip_normalize_batch: expected every tensor on cuda"):
        ops.crop_resize_flip_normalize_batch(packed, shapes.cuda(), boxes.cuda(), flips.cuda(), 1.0,
                                             torch.zeros(3, device="cuda"), torch.ones(3, device="cuda"), out)


def run_batch_op_in_a_subprocess(shape, box):
    """One sample of 100 packed bytes with this (offset, height, width, row_stride) and box
    through the CUDA batch op, in a subprocess: a device-side assert poisons the CUDA context."""
    script = (
        "import torch; from fastload import ops\n"
        "packed = torch.zeros(100, dtype=torch.uint8, device='cuda')\n"
        f"shapes = torch.tensor([{list(shape)}], device='cuda')\n"
        f"boxes = torch.tensor([{[float(v) for v in box]}], device='cuda')\n"
        "out = torch.empty(1, 3, 4, 4, device='cuda')\n"
        "ops.crop_resize_flip_normalize_batch(packed, shapes, boxes, torch.zeros(1, dtype=torch.bool, device='cuda'),"
        " 1.0, torch.zeros(3, device='cuda'), torch.ones(3, device='cuda'), out)\n"
        "torch.cuda.synchronize()\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_batch_cuda_out_of_range_sample_raises_device_assert():
    """shapes live on the device, so the kernel checks them (a sync would cost the
    pipeline): an image outside the buffer is a device-side assert, never a silent read."""
    result = run_batch_op_in_a_subprocess((90, 10, 10, 30), (0, 0, 10, 10))
    assert result.returncode != 0
    assert "device-side assert" in result.stderr or "CUDA error" in result.stderr


@pytest.mark.parametrize("shape", [(0, 2, 4, 2**63 - 1), (0, 3, 4, 2**62), (2**63 - 1, 1, 1, 3), (2**62, 2, 1, 2**62)])
def test_batch_cuda_shapes_that_wrap_past_2_to_the_63_are_a_device_assert_not_a_wild_read(shape):
    """The kernel's check is the CPU op's function (checked int64 arithmetic): a bound
    that wraps around must trip the assert, not pass and read far outside the buffer."""
    result = run_batch_op_in_a_subprocess(shape, (0, 0, 1, 1))
    assert result.returncode != 0
    assert "device-side assert" in result.stderr, result.stderr[-2000:]
    assert "illegal memory access" not in result.stderr


def test_cuda_taps_of_an_image_wider_than_2_to_the_24_stay_inside_it():
    """The shared tap math clamps on integers: float(width) rounds up above 2^24, and a
    float clamp let the last column read the pixel past the image (255 here)."""
    width = 2**24 + 3
    row = torch.zeros(1, width + 1, 3, dtype=torch.uint8, device="cuda")
    row[0, width] = 255
    for box, size in (([0.0, width - 120.0, 1.0, 120.0], [1, 4]), ([0.0, width - 5.0, 1.0, 5.0], [1, 5])):
        out = ops.crop_resize_flip_normalize(row[:, :width], box, size, scale=1.0)
        assert torch.equal(out.cpu(), torch.zeros(3, *size)), out


@pytest.mark.parametrize("box", [[0, 0, 1e39, 4], [0, 0, 1e-46, 4], [0, float("inf"), 4, 4]])
def test_cuda_box_is_checked_as_the_float32_values_the_kernel_gets(box):
    image = torch.zeros(4, 4, 3, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match=r"^fastload\.crop_resize_flip_normalize: expected a box"):
        ops.crop_resize_flip_normalize(image, box, [2, 2])


def test_opcheck_cuda():
    image = make_image(21, 17).cuda()
    torch.library.opcheck(
        torch.ops.fastload.crop_resize_flip_normalize.default,
        (image, [1.5, 2.0, 15.0, 12.0], [9, 7], True, 1 / 255, [0.4] * 3, [0.2] * 3, torch.bfloat16, True),
    )
    _, packed, shapes, boxes, flips = batch_inputs(3, n=4)
    out = torch.empty(4, 3, 11, 13, dtype=torch.float16, device="cuda").contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(
        torch.ops.fastload.crop_resize_flip_normalize_batch.default,
        (packed.cuda(), shapes.cuda(), boxes.cuda(), flips.cuda(), 1 / 255, torch.full((3,), 0.4, device="cuda"),
         torch.full((3,), 0.2, device="cuda"), out),
    )
