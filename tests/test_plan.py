"""Fusing transform specs (fastload's own, and torchvision's) into one native plan."""

import pytest
import torch

from fastload.augment import specs
from fastload import _ext
from fastload.augment.plan import UnsupportedPipeline, build_plan

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

from fastload.compat.torchvision import NotConvertible, convert_transform  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def test_train_pipeline():
    plan = build_plan([specs.RandomResizedCrop(224), specs.RandomHorizontalFlip(), specs.Normalize(MEAN, STD)])
    assert plan.geometry == _ext.require_ops().Geometry.RANDOM_RESIZED_CROP and plan.out_size == (224, 224)
    assert plan.flip_p == 0.5 and plan.value_scale == pytest.approx(1 / 255)
    assert plan.mean == pytest.approx(MEAN) and plan.std == pytest.approx(STD) and plan.dtype == torch.float32


def test_eval_pipeline_and_dtypes():
    plan = build_plan([specs.Resize(256), specs.CenterCrop(224)])
    assert plan.geometry == _ext.require_ops().Geometry.RESIZE_CENTER_CROP and plan.resize_short == 256 and plan.out_size == (224, 224)
    assert plan.dtype == torch.uint8 and plan.value_scale == 1.0
    plan = build_plan([specs.Resize((100, 50)), specs.ToDtype(torch.bfloat16, scale=True)])
    assert (plan.resize_height, plan.resize_width) == (100, 50) and plan.out_size == (100, 50)
    assert plan.dtype == torch.bfloat16 and plan.value_scale == pytest.approx(1 / 255)
    plan = build_plan([specs.CenterCrop(8), specs.ToDtype(torch.float32, scale=False)])
    assert plan.value_scale == 1.0 and plan.dtype == torch.float32
    assert build_plan([specs.CenterCrop(8), specs.Normalize(MEAN, STD)], dtype=torch.float16).dtype == torch.float16


@pytest.mark.parametrize("ops,reason", [
    ([specs.Resize(256)], "different size per image"),
    ([], "no crop or resize"),
    ([specs.RandomResizedCrop(8), specs.CenterCrop(4)], "does not fuse"),
    ([specs.Normalize(MEAN, STD), specs.CenterCrop(4)], "pads in normalised space"),
    ([specs.CenterCrop(4), specs.RandomHorizontalFlip(), specs.RandomHorizontalFlip()], "two random flips"),
    ([specs.CenterCrop(4), "Grayscale()"], "no native equivalent"),
])
def test_unsupported_pipelines_say_why(ops, reason):
    with pytest.raises(UnsupportedPipeline, match=reason):
        build_plan(ops)


def test_spec_validation():
    with pytest.raises(ValueError, match="RandomResizedCrop: expected scale and ratio"):
        specs.RandomResizedCrop(8, scale=(1.0, 0.5))
    with pytest.raises(ValueError, match="expected a positive int"):
        specs.CenterCrop(0)
    with pytest.raises(ValueError, match="ToDtype"):
        specs.ToDtype(torch.int32)


@pytest.mark.parametrize("tv", [T, v2])
def test_torchvision_train_transforms_convert(tv):
    to_float = [tv.ToTensor()] if tv is T else [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    transform = tv.Compose([tv.RandomResizedCrop(224), tv.RandomHorizontalFlip(), *to_float, tv.Normalize(MEAN, STD)])
    plan = build_plan(convert_transform(transform))
    assert plan.geometry == _ext.require_ops().Geometry.RANDOM_RESIZED_CROP and plan.flip_p == 0.5 and plan.dtype == torch.float32
    assert plan.value_scale == pytest.approx(1 / 255) and plan.mean == pytest.approx(MEAN)


def test_torchvision_eval_and_uint8_transforms_convert():
    plan = build_plan(convert_transform(T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])))
    assert plan.geometry == _ext.require_ops().Geometry.RESIZE_CENTER_CROP and plan.resize_short == 256 and plan.dtype == torch.uint8
    plan = build_plan(convert_transform(T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor(),
                                                   T.ConvertImageDtype(torch.float32)])))
    assert plan.dtype == torch.float32 and plan.value_scale == pytest.approx(1 / 255)


@pytest.mark.parametrize("transform,reason", [
    (T.RandomRotation(10), "no native equivalent"),
    (T.Grayscale(), "makes one channel of the loader's three"),
    (T.Resize(10, interpolation=T.InterpolationMode.LANCZOS), "interpolation"),
    (v2.Resize(10, antialias=False), "antialias=False"),
    (v2.ToDtype({tv_tensors.Mask: torch.int64}), "gives the image no dtype"),
    (v2.ToDtype({tv_tensors.Image: torch.float32, torch.Tensor: torch.float16}), "to different dtypes"),
])
def test_torchvision_unknown_transforms_say_why(transform, reason):
    with pytest.raises(NotConvertible, match=reason):
        convert_transform(transform)


# ---- the engine's geometry on extreme images and boxes ------------------------------------

import io  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import fastload  # noqa: E402
from fastload import ops, reference  # noqa: E402
from fastload.errors import DecodeError  # noqa: E402

needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")


def test_resize_max_size_not_above_the_size_is_refused_like_torchvision():
    """torchvision refuses it on the first image, in these words; a plan refuses it once."""
    with pytest.raises(ValueError, match=r"max_size = 5 must be strictly greater than the requested size for "
                                         r"the smaller edge size = \[1000\]"):
        specs.Resize(1000, max_size=5)
    with pytest.raises(ValueError, match="max_size = 256 must be strictly greater"):
        specs.Resize(256, max_size=256)
    with pytest.raises(ValueError, match="max_size should only be passed if size specifies the length of the "
                                         "smaller edge"):
        specs.Resize((20, 30), max_size=40)
    assert specs.Resize(256, max_size=257).max_size == 257
    with pytest.raises(ValueError, match="max_size = 5 must be strictly greater"):  # torchvision's own words
        T.Resize(1000, max_size=5)(torch.zeros(3, 8, 8))


def smooth_jpeg(height, width, seed=0, colour=None):
    """JPEG bytes of a smooth RGB image (or a solid colour): DCT scaling keeps it close."""
    rng = np.random.default_rng(seed)
    if colour is not None:
        array = np.broadcast_to(np.array(colour, np.uint8), (height, width, 3))
    else:
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        phase = rng.uniform(0, 6, 3)
        array = np.stack([128 + 90 * np.sin(x / (width + 3) * 2 + y / (height + 3) + p) for p in phase], -1)
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array).astype(np.uint8)).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def make_folder(root, jpegs):
    (root / "c").mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(jpegs):
        (root / "c" / f"{i:03d}.jpg").write_bytes(data)
    return str(root)


def scale_denom(box_height, box_width, out_height, out_width):
    """The engine's DCT scale (csrc/decode/decode_jpeg.h choose_scale_denom)."""
    return _ext.require_ops().dct_scale_denom(int(box_height), int(box_width), out_height, out_width)


def window_reference(data, plan, epoch, index):
    """What the engine must compute, from a full decode at the engine's DCT scale 1/d:
    scaled pixel k holds full-resolution pixels [k d, k d + d), so a box maps by 1/d;
    the clamp region rounded outwards is the view whose taps the kernel clamps to."""
    height, width = ops.jpeg_header(data)[:2]
    (top, left, box_h, box_w), (c_top, c_left, c_h, c_w), flip = _ext.require_ops().region_of(
        plan, height, width, epoch, index)
    out_h, out_w = plan.out_size
    d = 1 if not plan.dct_scaling else scale_denom(box_h, box_w, out_h, out_w)
    scaled = ops.decode_jpeg(data, scale_denom=d)
    assert scaled.shape[:2] == (-(-height // d), -(-width // d))  # libjpeg: ceil(h / d) rows
    r0 = min(max(0, math.floor(c_top / d + 1e-6)), scaled.shape[0] - 1)
    c0 = min(max(0, math.floor(c_left / d + 1e-6)), scaled.shape[1] - 1)
    r1 = max(min(scaled.shape[0], math.ceil((c_top + c_h) / d - 1e-6)), r0 + 1)
    c1 = max(min(scaled.shape[1], math.ceil((c_left + c_w) / d - 1e-6)), c0 + 1)
    box = [top / d - r0, left / d - c0, box_h / d, box_w / d]
    return reference.crop_resize_flip_normalize(scaled[r0:r1, c0:c1], box, [out_h, out_w], flip, scale=1.0,
                                                dtype=torch.uint8)


TINY_SIZES = [(1, 1), (1, 2), (2, 1), (3, 5), (8, 8), (9, 17), (17, 9), (16, 16), (15, 31), (33, 7)]


@needs_ops
@pytest.mark.parametrize("decode_on", ["cpu", "cpu+gpu"])
@pytest.mark.parametrize("pipeline", [
    [specs.RandomResizedCrop(1)],
    [specs.RandomResizedCrop(1, scale=(1e-4, 1e-3))],  # too small: torchvision's central fallback
    [specs.RandomResizedCrop(1, scale=(0.005, 0.02))],  # crops of a few pixels anywhere
    [specs.RandomResizedCrop((2, 3), scale=(1e-3, 1.0), ratio=(0.2, 5.0))],
    [specs.RandomResizedCrop(5, scale=(0.5, 1.0))],  # upscaling tiny crops
    [specs.CenterCrop(3)],
    [specs.Resize((2, 7)), specs.CenterCrop(3)],
    [specs.Resize(4), specs.CenterCrop((5, 2))],  # crops larger than the resized image: padding
])
def test_dct_scaled_windows_of_tiny_images_map_every_box_inside_the_decoded_pixels(tmp_path, pipeline, decode_on):
    """Crop boxes map onto DCT-scaled windows by exactly 1/d (libjpeg's ceil(h / d) rows
    hold the image's h / d): every output equals the kernel on the full decode at that
    scale, so no view starts past the buffer or reads an earlier image's pixels. A big
    image first, in the same worker, leaves stale pixels a misplaced view would read."""
    jpegs = [smooth_jpeg(300, 260, seed=99, colour=(250, 10, 130))]
    jpegs += [smooth_jpeg(h, w, seed=i) for i, (h, w) in enumerate(TINY_SIZES)]
    root = make_folder(tmp_path, jpegs)
    dataset = fastload.ImageFolder(root, ops=pipeline)
    plan = build_plan(pipeline, seed=3)
    runner = fastload.native.NativeRunner(dataset.index, plan, num_threads=1, decode_on=decode_on, device="cpu")
    try:
        for epoch in range(4):
            indices = list(range(len(jpegs)))
            images, _ = runner.result(runner.submit(indices, epoch))
            for i in indices:
                want = window_reference(torch.frombuffer(bytearray(jpegs[i]), dtype=torch.uint8), plan, epoch, i)
                diff = (images[i].int() - want.int()).abs().max().item()
                assert diff <= 1, (i, epoch, images[i], want)
    finally:
        runner.close()


@needs_ops
@pytest.mark.parametrize("size, ratio", [((1000, 2), (1e-3, 1e-3)), ((2, 1000), (1e3, 1e3)), ((17, 9), (0.9, 1.1))])
def test_extreme_ratios_stay_close_to_a_full_decode_crop_and_resize(tmp_path, size, ratio):
    """The DCT-scaled window path vs the plain reference: full decode, crop, resize."""
    jpegs = [smooth_jpeg(*size, seed=s) for s in range(3)]
    root = make_folder(tmp_path, jpegs)
    pipeline = [specs.RandomResizedCrop((3, 2), scale=(0.05, 1.0), ratio=ratio)]
    dataset = fastload.ImageFolder(root, ops=pipeline)
    plan = build_plan(pipeline, seed=5)
    runner = fastload.native.NativeRunner(dataset.index, plan, num_threads=1)
    try:
        images, _ = runner.result(runner.submit([0, 1, 2], 0))
    finally:
        runner.close()
    for i, data in enumerate(jpegs):
        full = ops.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        box, _, flip = _ext.require_ops().region_of(plan, *size, 0, i)
        top, left, h, w = (int(v) for v in box)
        crop = full[top:top + h, left:left + w]
        want = reference.crop_resize_flip_normalize(crop, [0, 0, h, w], [3, 2], flip, scale=1.0, dtype=torch.uint8)
        assert (images[i].int() - want.int()).abs().max().item() <= 12, (i, images[i], want)


def _cpu_stand_in_for_nvjpeg(datas, channels, device):
    """ops.decode_jpeg_cuda's contract (whole images), decoded on the CPU."""
    return [ops.decode_jpeg(d, channels=channels) for d in datas], torch.zeros(len(datas), dtype=torch.bool)


@needs_ops
@pytest.mark.parametrize("decode_on", ["cpu", "cpu+gpu", "gpu"])
@pytest.mark.parametrize("pipeline, size, message", [
    ([specs.Resize(256, max_size=300), specs.CenterCrop(8)], (3, 2000), "fastload.Resize: expected a resized image"),
    ([specs.Resize(256, max_size=300), specs.CenterCrop(8)], (2000, 3), "got 300x0 for a 2000x3 image"),
    # Ratios the 40x40 images of the batch meet (1x40 and 40x1 crops), the thin one not.
    ([specs.RandomResizedCrop(4, ratio=(50, 50))], (17, 9), "RandomResizedCrop: expected a crop .* got 0x9 "
                                                            "for a 17x9 image with ratio \\(50, 50\\)"),
    ([specs.RandomResizedCrop(4, ratio=(0.02, 0.02))], (9, 17), "got 9x0 for a 9x17 image"),
])
def test_degenerate_geometry_is_an_error_through_the_policy_never_zeros(tmp_path, pipeline, size, message,
                                                                        decode_on):
    """torchvision fails on these images (a 0-pixel resize or crop): under "raise" the
    loader raises naming the sample, under "skip" the sample is replaced, never a batch
    of zeros; and the other samples of the batch are unaffected."""
    jpegs = [smooth_jpeg(40, 40, seed=0), smooth_jpeg(*size, seed=1), smooth_jpeg(40, 40, seed=2)]
    root = make_folder(tmp_path, jpegs)
    dataset = fastload.ImageFolder(root, ops=pipeline)
    plan = build_plan(pipeline, seed=1)
    runner = fastload.native.NativeRunner(dataset.index, plan, num_threads=2, decode_on=decode_on, device="cpu")
    if decode_on == "gpu":
        runner.producer.decoder.batch_decode = _cpu_stand_in_for_nvjpeg  # the nvJPEG mode's device step, on the CPU
    try:
        with pytest.raises(DecodeError, match=message) as raised:
            runner.result(runner.submit([0, 1, 2], 0))
        assert raised.value.index == 1 and "001.jpg" in raised.value.source
        runner.on_error = "skip"
        images, _ = runner.result(runner.submit([0, 1, 2], 0))
        assert runner.stats()["skipped"] == 1
        assert torch.equal(images[1], images[2])  # replaced by the next readable sample
        assert images[0].float().std() > 0 and images[2].float().std() > 0
    finally:
        runner.close()
    with pytest.raises(ValueError, match=message):  # the geometry Python asks for says it too
        _ext.require_ops().region_of(plan, *size, 0, 1)


@needs_ops
def test_regions_of_refuses_image_sizes_past_the_int_range():
    # 2^32 + 5 rows must not be planned as 5 (an int64 -> int truncation).
    plan = build_plan([specs.Resize(8), specs.CenterCrop(4)])
    with pytest.raises(ValueError, match=r"fastload\.regions_of: expected image sizes in \[1, 2\^31\), got 4294967301x100"):
        _ext.require_ops().regions_of(plan, torch.tensor([[2**32 + 5, 100]]), torch.tensor([0]), 0)


@needs_ops
def test_resize_of_a_1x9000000_image_is_not_zeros():
    """Resize(256) of a 1 x 9,000,000 image is 256 x 2,304,000,000: past the int range,
    computed in int64. The centre crop lies on the boundary of a 50 and a 250 half."""
    width = 9_000_000
    image = torch.full((1, width, 3), 50, dtype=torch.uint8)
    image[:, width // 2:] = 250
    plan = build_plan([specs.Resize(256), specs.CenterCrop(8)])
    engine = _ext.require_ops().BatchEngine(1)
    engine.set_plan(plan)
    out = torch.zeros(1, 3, 8, 8, dtype=torch.uint8)
    status, messages = engine.wait(engine.submit(torch.tensor([0]), out, 0, {0: image}))
    engine.close()
    assert status.tolist() == [0], messages
    # torchvision's value there: the two halves' pixels, interpolated at their boundary.
    assert out.min() >= 140 and out.max() <= 160, out
    assert (out == out[:, :, :1]).all()  # every row the same (a 1-row source)


@needs_ops
@pytest.mark.parametrize("decode_on", ["cpu", "cpu+gpu"])
def test_one_pixel_crops_on_every_edge_of_thin_images_match_the_scaled_decode(tmp_path, decode_on):
    """1x1 crops of 17x9 and 9x17 JPEGs (DCT scale 1/8: 3x2 and 2x3 scaled pixels, the
    last ones partial) drawn at every edge, through one worker, vs the reference."""
    jpegs = [smooth_jpeg(17, 9, seed=1)] * 40 + [smooth_jpeg(9, 17, seed=2)] * 40
    root = make_folder(tmp_path, jpegs)
    pipeline = [specs.RandomResizedCrop(1, scale=(1 / 153, 2 / 153))]  # 1 or 2 of the 153 pixels
    dataset = fastload.ImageFolder(root, ops=pipeline)
    plan = build_plan(pipeline, seed=11)
    runner = fastload.native.NativeRunner(dataset.index, plan, num_threads=1, decode_on=decode_on, device="cpu")
    edges = set()
    try:
        for epoch in range(2):
            images, _ = runner.result(runner.submit(list(range(len(jpegs))), epoch))
            for i, data in enumerate(jpegs):
                height, width = (17, 9) if i < 40 else (9, 17)
                (top, left, _, _), _, _ = _ext.require_ops().region_of(plan, height, width, epoch, i)
                edges |= {(i < 40, edge) for edge, on in (("top", top == 0), ("left", left == 0),
                                                          ("bottom", top == height - 1),
                                                          ("right", left == width - 1)) if on}
                want = window_reference(torch.frombuffer(bytearray(data), dtype=torch.uint8), plan, epoch, i)
                assert (images[i].int() - want.int()).abs().max().item() <= 1, (i, epoch, images[i], want)
    finally:
        runner.close()
    assert len(edges) == 8, edges  # every edge of both images was drawn


# ---- the typed plan: one definition, in C++ ------------------------------------------------

import copy  # noqa: E402
import pickle  # noqa: E402


def plan_fields():
    """Every field _C.Plan binds (its read-write properties)."""
    core = _ext.require_ops().Plan
    return sorted(name for name, value in vars(core).items() if isinstance(value, property))


@needs_ops
def test_a_mistyped_plan_field_raises_attribute_error_at_the_assignment():
    from fastload.augment.plan import Plan

    plan = build_plan([specs.CenterCrop(4)])
    with pytest.raises(AttributeError, match="out_hieght"):
        plan.out_hieght = 5
    with pytest.raises(AttributeError, match="dct_scalling"):
        Plan(dct_scalling=False)
    with pytest.raises(AttributeError):
        _ext.require_ops().Plan().exactt = True
    plan.out_height = 5  # the real field
    assert plan.out_size == (5, 4) and isinstance(plan, Plan) and isinstance(plan, _ext.require_ops().Plan)


@needs_ops
def test_a_plan_survives_pickle_and_deepcopy_with_every_field():
    core = _ext.require_ops()
    plan = build_plan([specs.RandomResizedCrop(9), specs.Normalize(MEAN, STD)], dtype=torch.bfloat16, seed=41)
    changed = dict(geometry=core.Geometry.RESIZE_CENTER_CROP, out_height=17, out_width=19, scale_min=0.25,
                   scale_max=0.75, ratio_min=0.5, ratio_max=2.5, resize_short=33, resize_height=-1,
                   resize_width=-1, max_size=70, interpolation=core.Interpolation.BICUBIC, flip_p=0.25, flip_v_p=0.75,
                   value_scale=0.5, mean=[0.25], std=[2.0], channels=1,
                   dct_scaling=False, max_pixels=12345, seed=2**40 + 3, pad_top=1, pad_left=2, pad_bottom=3,
                   pad_right=4, pad_if_needed=True, jitter=[0.5, 1.5, 0.25, 1.75, 0.0, 2.0, -0.25, 0.5],
                   jitter_p=0.625, grayscale_p=0.125, erase_p=0.375, erase_scale_min=0.0625, erase_scale_max=0.5,
                   padding_mode=2, pad_fill=[7.0], blur_kernel_x=5, blur_kernel_y=3, blur_sigma_min=0.5,
                   blur_sigma_max=1.5, blur_p=0.375, augment_ops=[0, 5, 10], augment_magnitudes=[0.0, 9.0, 4.0],
                   augment_num_ops=2, augment_magnitude_bin=0, augment_fill=[3.0], augment_bilinear=True,
                   augmix_ops=[1, 13], augmix_magnitudes=[0.5, 0.0], augmix_severity=1, augmix_width=2,
                   augmix_depth=2, augmix_alpha=0.5, augmix_bilinear=False, augment_policy_ops=[2, 0, 1, 1],
                   augment_policy_probs=[0.25, 1.0, 0.0, 0.5], augment_policy_bins=[-1, 0, 0, -1],
                   erase_ratio_min=0.5, erase_ratio_max=2.0, erase_value=[0.5], erase_random=2)
    assert sorted(changed) == plan_fields()  # a new field must be added here too
    for name, value in changed.items():
        setattr(plan, name, value)
    for again in (pickle.loads(pickle.dumps(plan)), copy.deepcopy(plan), copy.copy(plan)):
        assert type(again) is type(plan) and again == plan and again is not plan
        for name, value in changed.items():
            assert getattr(again, name) == value, name
        assert again.dtype == torch.bfloat16 and again.description == plan.description
    text = repr(plan)
    assert text.startswith("Plan(geometry=") and "max_pixels=12345" in text and "dtype=torch.bfloat16" in text


@needs_ops
def test_plan_validate_refuses_what_the_engine_cannot_run():
    plan = build_plan([specs.CenterCrop(4)])
    plan.validate()
    plan.resize_height = 5
    with pytest.raises(ValueError, match=r"^fastload\.Plan\.validate: expected both or neither of resize_height"):
        plan.validate()
    engine = _ext.require_ops().BatchEngine(1)
    try:
        with pytest.raises(ValueError, match=r"^fastload\.BatchEngine\.set_plan: expected both or neither"):
            engine.set_plan(plan)
    finally:
        engine.close()


@needs_ops
def test_status_values_are_what_the_engine_writes(tmp_path):
    from fastload.source.index import SampleIndex

    core = _ext.require_ops()
    (tmp_path / "a.jpg").write_bytes(smooth_jpeg(8, 8))
    (tmp_path / "b.jpg").write_bytes(b"plain text, not an image")
    (tmp_path / "c.jpg").write_bytes(smooth_jpeg(8, 8)[:40])  # the header cut short
    index = SampleIndex.from_files([str(tmp_path / n) for n in ("a.jpg", "b.jpg", "c.jpg", "missing.jpg")], [0] * 4)
    engine = core.BatchEngine(2)
    engine.set_index(torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                     torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes))
    plan = build_plan([specs.CenterCrop(4)])
    try:
        engine.set_plan(plan)
        status, messages = engine.wait(engine.submit(torch.arange(4), torch.zeros(4, 3, 4, 4, dtype=torch.uint8), 0))
        assert [core.Status(int(s)) for s in status] == [
            core.Status.OK, core.Status.NOT_JPEG, core.Status.DECODE_ERROR, core.Status.READ_ERROR], messages
        plan = build_plan([specs.Resize(256, max_size=300), specs.CenterCrop(8)])  # no pixels for a 3x2000 image
        engine.set_plan(plan)
        thin = torch.zeros(3, 2000, 3, dtype=torch.uint8)
        status, messages = engine.wait(engine.submit(torch.tensor([0]), torch.zeros(1, 3, 8, 8), 0, {0: thin}))
        assert int(status[0]) == core.Status.BAD_GEOMETRY, messages
    finally:
        engine.close()
    assert [int(s) for s in (core.Status.OK, core.Status.DECODE_ERROR, core.Status.NOT_JPEG, core.Status.READ_ERROR,
                             core.Status.BAD_GEOMETRY)] == [0, 1, 2, 3, 4]


def sampling_view_by_hand(box, clamp, size, d=1, origin=(0, 0)):
    """The clamp region in decoded pixels (scale 1/d, decoded pixel (0, 0) at `origin` of
    the scaled image), rounded outwards past 1e-6, kept non-empty and inside; the box
    relative to it."""
    height, width = size
    edges = []
    for start, length, extent, o in ((clamp[0], clamp[2], height, origin[0]), (clamp[1], clamp[3], width, origin[1])):
        first = min(max(0, math.floor(start / d - o + 1e-6)), extent - 1)
        end = min(max(first + 1, math.ceil((start + length) / d - o - 1e-6)), extent)
        edges.append((first, end))
    (r0, r1), (c0, c1) = edges
    rel = [box[0] / d - origin[0] - r0, box[1] / d - origin[1] - c0, box[2] / d, box[3] / d]
    return [r0, c0, r1 - r0, c1 - c0], rel


SAMPLING_CASES = [  # (box, clamp, decoded size, d, origin)
    ([0, 0, 10, 10], [0, 0, 10, 10], (10, 10), 1, (0, 0)),  # the whole image
    ([2, 3, 4, 5], [2, 3, 4, 5], (10, 10), 1, (0, 0)),  # a RandomResizedCrop: clamp == box
    ([-3, -2, 16, 14], [0, 0, 10, 10], (10, 10), 1, (0, 0)),  # CenterCrop larger than the image: padding
    ([0.5, 0.25, 1, 1], [0.5, 0.25, 1, 1], (1, 1), 1, (0, 0)),  # a 1-pixel image
    ([9.5, 9.5, 3, 3], [9.5, 9.5, 3, 3], (10, 10), 1, (0, 0)),  # starting on the last pixel, ending outside
    ([12, 14, 2, 2], [12, 14, 2, 2], (10, 10), 1, (0, 0)),  # wholly outside: the last pixel, never empty
    ([0, 0, 3, 3], [0, 0, 3, 3], (10, 10), 1, (0, 0)),
    ([8, 4, 16, 24], [8, 4, 16, 24], (9, 13), 2, (0, 0)),  # DCT scale 1/2
    ([17, 9, 1, 1], [17, 9, 1, 1], (3, 2), 8, (0, 0)),  # 1/8 of a 17x9 image: its last, partial, pixels
    ([40, 24, 64, 48], [40, 24, 64, 48], (9, 7), 4, (10, 6)),  # a window decoded at 1/4, starting at (10, 6)
    ([2.000001, 2, 4, 4], [2.0000001, 2, 4, 4], (10, 10), 1, (0, 0)),  # an edge within 1e-6 of a pixel
]


@needs_ops
@pytest.mark.parametrize("box, clamp, size, d, origin", SAMPLING_CASES)
def test_sampling_views_match_the_clamp_arithmetic_by_hand(box, clamp, size, d, origin):
    core = _ext.require_ops()
    views, relative = core.sampling_views(torch.tensor([box], dtype=torch.float32),
                                          torch.tensor([clamp], dtype=torch.float32), torch.tensor([size]),
                                          scale_denom=d, origins=torch.tensor([origin]))
    # By hand from the float32 values the engine gets.
    f32 = lambda values: torch.tensor(values, dtype=torch.float32).tolist()  # noqa: E731
    want_view, want_rel = sampling_view_by_hand(f32(box), f32(clamp), size, d, origin)
    assert views[0].tolist() == want_view
    assert relative[0].tolist() == pytest.approx(f32(want_rel), abs=0, rel=1e-7)
    top, left, height, width = want_view
    assert 0 <= top < size[0] and 0 <= left < size[1] and height >= 1 and width >= 1
    assert top + height <= size[0] and left + width <= size[1]


@needs_ops
def test_sampling_views_refuse_boxes_without_pixels_naming_the_row():
    core = _ext.require_ops()
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 0.0, 2.0]])
    with pytest.raises(ValueError, match=r"fastload\.sampling_views: expected a finite crop box .*\(row 1\)"):
        core.sampling_views(boxes, torch.tensor([[0.0, 0.0, 4.0, 4.0]] * 2), torch.tensor([[4, 4]] * 2))
    with pytest.raises(ValueError, match=r"fastload\.sampling_views: expected a finite clamp region .*\(row 0\)"):
        core.sampling_views(boxes[:1], torch.tensor([[0.0, 0.0, float("nan"), 4.0]]), torch.tensor([[4, 4]]))


# ---- interpolation and the vertical flip ----------------------------------------------------


def test_interpolation_is_one_plan_field_from_names_torchvision_modes_and_pil_ints():
    """The spec stores the name; the plan holds fastload._C.Interpolation."""
    Interpolation = _ext.require_ops().Interpolation
    for value, name in [("bicubic", "BICUBIC"), (T.InterpolationMode.BICUBIC, "BICUBIC"), (3, "BICUBIC"),
                        ("NEAREST", "NEAREST"), (0, "NEAREST"), (T.InterpolationMode.BILINEAR, "BILINEAR")]:
        plan = build_plan([specs.RandomResizedCrop(8, interpolation=value)])
        assert plan.interpolation == getattr(Interpolation, name), value
        plan = build_plan([specs.Resize(10, interpolation=value), specs.CenterCrop(8)])
        assert plan.interpolation == getattr(Interpolation, name), value
    assert build_plan([specs.CenterCrop(8)]).interpolation == Interpolation.BILINEAR
    assert specs.Resize(10, interpolation=T.InterpolationMode.BICUBIC).interpolation == "bicubic"


def test_antialias_false_is_the_plain_bilinear_filter():
    Interpolation = _ext.require_ops().Interpolation
    plan = build_plan([specs.RandomResizedCrop(8, antialias=False)])
    assert plan.interpolation == Interpolation.BILINEAR_NO_ANTIALIAS
    plan = build_plan([specs.Resize(10, antialias=False), specs.CenterCrop(8)])
    assert plan.interpolation == Interpolation.BILINEAR_NO_ANTIALIAS
    # Nearest never antialiases; the flag changes nothing.
    assert build_plan([specs.Resize((8, 8), interpolation="nearest", antialias=False)]).interpolation == \
        Interpolation.NEAREST
    # Not a torchvision interpolation name: specs do not take it, the ops do.
    assert "bilinear_no_antialias" not in specs.native_interpolations()
    with pytest.raises(ValueError, match="expected interpolation in"):
        specs.Resize(10, interpolation="bilinear_no_antialias")


def test_interpolation_validation_follows_torchvision():
    with pytest.raises(TypeError, match="Argument interpolation should be a InterpolationMode or a corresponding "
                                        "Pillow integer constant"):
        specs.Resize(10, interpolation=2.0)
    with pytest.raises(ValueError, match=r"RandomResizedCrop: expected a Pillow resampling constant \[0, 1, 2, 3, "
                                         r"4, 5\], got 9"):
        specs.RandomResizedCrop(8, interpolation=9)
    with pytest.raises(ValueError, match="Resize: expected interpolation in .*'lanczos'.*, got 'cubic'"):
        specs.Resize(10, interpolation="cubic")


@pytest.mark.parametrize("ops,reason", [
    ([specs.Resize(10, interpolation="bicubic"), specs.Resize((8, 8))],
     r"resizes with different interpolations \(bicubic and bilinear\) do not fuse: the fused pass resamples once"),
    ([specs.RandomResizedCrop(8, interpolation="nearest"), specs.Resize((8, 8), interpolation="bicubic")],
     r"different interpolations \(bicubic and nearest\)"),
    ([specs.Resize((8, 8), interpolation=T.InterpolationMode.LANCZOS)],
     r"Resize\(interpolation='lanczos'\) has no native filter \(native: bilinear, bicubic, nearest\)"),
    ([specs.CenterCrop(4), specs.RandomVerticalFlip(), specs.RandomVerticalFlip(0.3)],
     "two random vertical flips"),
    ([specs.Resize((8, 8), interpolation="bicubic", antialias=False)],
     r"Resize\(interpolation='bicubic', antialias=False\) has no native filter"),
    ([specs.Resize(10, antialias=False), specs.Resize((8, 8))],
     r"different interpolations \(bilinear and bilinear_no_antialias\)"),
])
def test_pipelines_with_two_filters_or_flips_are_refused_with_the_reason(ops, reason):
    with pytest.raises(UnsupportedPipeline, match=reason):
        build_plan(ops)


def test_vertical_flip_fuses_beside_the_horizontal_one():
    plan = build_plan([specs.RandomResizedCrop(8), specs.RandomVerticalFlip(0.25), specs.RandomHorizontalFlip(0.75)])
    assert (plan.flip_p, plan.flip_v_p) == (0.75, 0.25)
    with pytest.raises(ValueError, match="RandomVerticalFlip: expected 0 <= p <= 1, got 1.5"):
        specs.RandomVerticalFlip(1.5)


@needs_ops
def test_vertical_flips_are_drawn_on_their_own_stream():
    """flip_v ~ Bernoulli(p) from (seed, epoch, index), independent of the horizontal flip
    and of the crop: adding the vertical flip moves neither."""
    core = _ext.require_ops()
    sizes = torch.tensor([[50, 60]]).expand(4000, 2)
    samples = torch.arange(4000)
    base = build_plan([specs.RandomResizedCrop(8), specs.RandomHorizontalFlip()], seed=7)
    both = build_plan([specs.RandomResizedCrop(8), specs.RandomHorizontalFlip(), specs.RandomVerticalFlip(0.3)],
                      seed=7)
    boxes, _, flips = core.regions_of(base, sizes, samples, 0)
    boxes_v, _, flips_v = core.regions_of(both, sizes, samples, 0, vertical=True)
    assert flips_v.shape == (4000, 2)
    assert torch.equal(boxes, boxes_v) and torch.equal(flips, flips_v[:, 0])
    vertical = flips_v[:, 1].float()
    assert abs(vertical.mean().item() - 0.3) < 0.03
    assert abs(torch.corrcoef(torch.stack([vertical, flips.float()]))[0, 1].item()) < 0.05
    assert torch.equal(flips_v, core.regions_of(both, sizes, samples, 0, vertical=True)[2])
    assert not torch.equal(flips_v, core.regions_of(both, sizes, samples, 1, vertical=True)[2])
    box, clamp, flip, flip_v = core.region_of(both, 50, 60, 0, 5, vertical=True)
    assert (flip, flip_v) == (bool(flips_v[5, 0]), bool(flips_v[5, 1]))


@needs_ops
def test_callers_that_ignore_the_vertical_flip_are_refused():
    """region_of without vertical=True would drop the top-bottom flip without a word."""
    core = _ext.require_ops()
    plan = build_plan([specs.CenterCrop(8), specs.RandomVerticalFlip()])
    with pytest.raises(ValueError, match=r"fastload\.region_of: expected vertical=True for a plan that flips "
                                         r"top-bottom \(flip_v_p = 0\.5\)"):
        core.region_of(plan, 10, 10, 0, 0)
    with pytest.raises(ValueError, match=r"fastload\.regions_of: expected vertical=True"):
        core.regions_of(plan, torch.tensor([[10, 10]]), torch.tensor([0]), 0)
    assert len(core.region_of(build_plan([specs.CenterCrop(8)]), 10, 10, 0, 0)) == 3


def noisy_jpeg(height, width, seed=0):
    """JPEG bytes of a noisy RGB image: a tap missing from a decode window shows."""
    rng = np.random.default_rng(seed)
    array = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


@needs_ops
@pytest.mark.parametrize("pipeline", [
    # Downscaling by 5 inside the image: bicubic's taps reach 2 * 5 px from each centre,
    # past a window sized for bilinear's 5.
    [specs.Resize(60, interpolation="bicubic"), specs.CenterCrop(40), specs.RandomVerticalFlip()],
    [specs.RandomResizedCrop(24, scale=(0.3, 1.0), interpolation="bicubic"), specs.RandomVerticalFlip(),
     specs.RandomHorizontalFlip()],
    [specs.Resize(60, interpolation="nearest"), specs.CenterCrop(40), specs.RandomVerticalFlip()],
], ids=["resize_bicubic", "random_resized_crop_bicubic", "resize_nearest"])
def test_engine_with_bicubic_equals_the_single_image_op_on_the_decoded_image(tmp_path, pipeline):
    """The engine decodes a window around the box as wide as the filter's support, then
    resamples with the plan's interpolation and flips: the single-image op on the full
    decode, over the same view, gives the same values (float rounding of the box offset
    apart)."""
    pipeline = pipeline + [specs.ToDtype(torch.float32, scale=True)]
    jpegs = [noisy_jpeg(300, 320 + 8 * i, seed=i) for i in range(4)]
    root = make_folder(tmp_path, jpegs)
    dataset = fastload.ImageFolder(root, ops=pipeline)
    plan = build_plan(pipeline, seed=11, dct_scaling=False)
    core = _ext.require_ops()
    name = plan.interpolation.name.lower()
    runner = fastload.native.NativeRunner(dataset.index, plan, num_threads=1, device="cpu")
    flipped = 0
    try:
        for epoch in range(2):
            images, _ = runner.result(runner.submit(list(range(len(jpegs))), epoch))
            for i, data in enumerate(jpegs):
                full = ops.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
                box, clamp, flip, flip_v = core.region_of(plan, full.shape[0], full.shape[1], epoch, i, vertical=True)
                views, relative = core.sampling_views(torch.tensor([box]), torch.tensor([clamp]),
                                                      torch.tensor([list(full.shape[:2])]))
                top, left, height, width = views[0].tolist()
                want = ops.crop_resize_flip_normalize(full[top:top + height, left:left + width], relative[0].tolist(),
                                                      list(plan.out_size), flip, plan.value_scale, flip_v=flip_v,
                                                      interpolation=name)
                torch.testing.assert_close(images[i], want, rtol=0, atol=1e-4)
                flipped += flip_v
    finally:
        runner.close()
    assert flipped > 0  # the vertical flip was exercised


@needs_ops
def test_crops_smaller_than_a_dct_block_decode_at_full_scale():
    """A 1x1 crop decoded at scale 1/8 would read an 8x8 block's average, not its pixel."""
    denom = _ext.require_ops().dct_scale_denom
    assert denom(1, 1, 1, 1) == 1
    assert denom(7, 30, 1, 1) == 4  # the largest scale with a whole scaled pixel on both axes
    assert denom(800, 900, 100, 100) == 8 and denom(300, 300, 224, 224) == 1
