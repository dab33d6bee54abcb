"""Detection boxes: fastload.augment.boxes against torchvision v2, and fastload.DetectionDataset.

The box geometry (crop, resize, pad, flips, clamp, sanitize) is compared with torchvision
v2's own functional ops on tv_tensors.BoundingBoxes applied with the same parameters, over
the three formats, float and integer boxes, odd sizes, boxes partly and fully outside the
crop and outside the image; then with the parameters the engine draws (`_C.regions_of`) fed
to v2's ops. The dataset's samples and loader batches are compared with the same reference
per sample (boxes within 1e-4 px, labels equal, images at the library's PSNR floor).
"""

from __future__ import annotations

import pytest
import torch

tv_tensors = pytest.importorskip("torchvision.tv_tensors")
F = pytest.importorskip("torchvision.transforms.v2.functional")
v2 = pytest.importorskip("torchvision.transforms.v2")

from fastload.augment import boxes as B  # noqa: E402

FORMATS = ("XYXY", "XYWH", "CXCYWH")
# Float32 box arithmetic of the same steps: equal to v2's up to reordered roundings.
TOLERANCE_PX = 1e-4


def random_boxes(generator: torch.Generator, n: int, canvas, fmt: str, *, outside: float = 0.0,
                 dtype=torch.float32) -> torch.Tensor:
    """n XYXY boxes in a (height, width) canvas (`outside`: how far past it they may
    reach, as a fraction), converted to fmt by torchvision."""
    height, width = canvas
    lo = torch.tensor([-outside * width, -outside * height])
    span = torch.tensor([width * (1 + 2 * outside), height * (1 + 2 * outside)])
    a = lo + torch.rand(n, 2, generator=generator) * span
    b = lo + torch.rand(n, 2, generator=generator) * span
    xyxy = torch.cat([torch.minimum(a, b), torch.maximum(a, b)], dim=1)
    if not dtype.is_floating_point:
        xyxy = xyxy.round()
    out = F.convert_bounding_box_format(xyxy, old_format=tv_tensors.BoundingBoxFormat.XYXY,
                                        new_format=getattr(tv_tensors.BoundingBoxFormat, fmt))
    return out.to(dtype)


def bounding(tensor: torch.Tensor, fmt: str, canvas, clamping_mode="soft"):
    return tv_tensors.BoundingBoxes(tensor, format=fmt, canvas_size=tuple(canvas), clamping_mode=clamping_mode)


def flipped(boxes, flip, flip_v):
    if flip:
        boxes = F.horizontal_flip(boxes)
    if flip_v:
        boxes = F.vertical_flip(boxes)
    return boxes


def assert_boxes(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    diff = (ours.double() - theirs.as_subclass(torch.Tensor).double()).abs()
    assert diff.numel() == 0 or diff.max().item() <= (TOLERANCE_PX if ours.is_floating_point() else 0), diff.max()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("clamping_mode", ["soft", None])
def test_resized_crop_matches_v2(fmt, dtype, clamping_mode):
    g = torch.Generator().manual_seed(1)
    for case in range(40):
        height, width = (int(v) for v in torch.randint(5, 90, (2,), generator=g))
        out = (int(torch.randint(3, 40, (), generator=g)), int(torch.randint(3, 40, (), generator=g)))
        h, w = int(torch.randint(1, height + 1, (), generator=g)), int(torch.randint(1, width + 1, (), generator=g))
        top, left = int(torch.randint(0, height - h + 1, (), generator=g)), int(torch.randint(0, width - w + 1, (), generator=g))
        flip, flip_v = bool(case % 2), bool(case % 3 == 0)
        boxes = random_boxes(g, 7, (height, width), fmt, outside=0.2 if case % 4 == 0 else 0.0, dtype=dtype)
        ref = F.resized_crop(bounding(boxes, fmt, (height, width), clamping_mode), top, left, h, w, list(out))
        ref = flipped(ref, flip, flip_v)
        steps = B.Steps.resized_crop(torch.tensor([[top, left, h, w]], dtype=torch.float32), out,
                                     torch.tensor([[flip, flip_v]]))
        ours = B.move(boxes, fmt, steps, torch.zeros(len(boxes), dtype=torch.int64), clamping_mode)
        assert_boxes(ours, ref)
        assert tuple(ref.canvas_size) == steps.out_size


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("center_crop", [True, False])
def test_resize_center_crop_matches_v2(fmt, center_crop):
    from torchvision.transforms.v2.functional._geometry import (_center_crop_compute_crop_anchor,
                                                                 _compute_resized_output_size)

    g = torch.Generator().manual_seed(2)
    for case in range(40):
        height, width = (int(v) for v in torch.randint(3, 80, (2,), generator=g))
        size = [int(torch.randint(4, 50, (), generator=g))] if case % 2 else \
            [int(torch.randint(4, 50, (), generator=g)), int(torch.randint(4, 50, (), generator=g))]
        new_h, new_w = _compute_resized_output_size((height, width), size=size)
        crop = (int(torch.randint(2, 60, (), generator=g)), int(torch.randint(2, 60, (), generator=g))) \
            if center_crop else (new_h, new_w)
        top, left = _center_crop_compute_crop_anchor(*crop, new_h, new_w)
        boxes = random_boxes(g, 6, (height, width), fmt, outside=0.1 if case % 3 == 0 else 0.0)
        ref = F.resize(bounding(boxes, fmt, (height, width)), size)
        if center_crop:
            ref = F.center_crop(ref, list(crop))
        ref = flipped(ref, case % 2 == 0, False)
        steps = B.Steps.resize_center_crop(torch.tensor([[height, width]]), torch.tensor([[new_h, new_w, top, left]]),
                                           crop, torch.tensor([[case % 2 == 0, False]]), center_crop=center_crop)
        assert_boxes(B.move(boxes, fmt, steps, torch.zeros(len(boxes), dtype=torch.int64)), ref)


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_crop_with_padding_matches_v2(fmt):
    g = torch.Generator().manual_seed(3)
    for case in range(60):
        height, width = (int(v) for v in torch.randint(3, 40, (2,), generator=g))
        pads = [int(v) for v in torch.randint(0, 6, (4,), generator=g)] if case % 3 else [0, 0, 0, 0]
        pad_if_needed = case % 2 == 0
        out = (int(torch.randint(2, 50, (), generator=g)), int(torch.randint(2, 50, (), generator=g)))
        pt, pl, pb, pr = pads
        ph, pw = height + pt + pb, width + pl + pr
        if pad_if_needed:
            dh, dw = max(out[0] - ph, 0), max(out[1] - pw, 0)
            pt, pb, pl, pr, ph, pw = pt + dh, pb + dh, pl + dw, pr + dw, ph + 2 * dh, pw + 2 * dw
        if ph < out[0] or pw < out[1]:
            continue
        i, j = int(torch.randint(0, ph - out[0] + 1, (), generator=g)), int(torch.randint(0, pw - out[1] + 1, (), generator=g))
        boxes = random_boxes(g, 6, (height, width), fmt, outside=0.1 if case % 4 == 0 else 0.0)
        ref = bounding(boxes, fmt, (height, width))
        if any((pl, pt, pr, pb)):
            ref = F.pad(ref, [pl, pt, pr, pb])
        if ph > out[0] or pw > out[1]:
            ref = F.crop(ref, i, j, *out)
        ref = flipped(ref, False, case % 5 == 0)
        # The engine's region: the crop's top-left in the image's own coordinates.
        engine_box = torch.tensor([[i - pt, j - pl, out[0], out[1]]], dtype=torch.float32)
        steps = B.Steps.random_crop(torch.tensor([[height, width]]), engine_box, pads, pad_if_needed, out,
                                    torch.tensor([[False, case % 5 == 0]]))
        assert_boxes(B.move(boxes, fmt, steps, torch.zeros(len(boxes), dtype=torch.int64)), ref)


@pytest.mark.parametrize("fmt", FORMATS)
def test_padding_to_the_output_size_clamps_without_a_crop(fmt):
    # padding=2 makes a 10x12 image the 14x16 output exactly: v2 pads (and clamps to the
    # padded canvas) but does not crop.
    boxes = torch.tensor([[-3.0, -2.0, 20.0, 9.0], [1.0, 2.0, 11.0, 9.5]])
    boxes = F.convert_bounding_box_format(boxes, old_format=tv_tensors.BoundingBoxFormat.XYXY,
                                          new_format=getattr(tv_tensors.BoundingBoxFormat, fmt))
    ref = F.pad(bounding(boxes, fmt, (10, 12)), [2, 2, 2, 2])
    steps = B.Steps.random_crop(torch.tensor([[10, 12]]), torch.tensor([[-2.0, -2.0, 14.0, 16.0]]), [2, 2, 2, 2],
                                False, (14, 16), torch.zeros(1, 2, dtype=torch.bool))
    assert not steps.cropped.any() and steps.padded.all()
    assert_boxes(B.move(boxes, fmt, steps, torch.zeros(2, dtype=torch.int64)), ref)


@pytest.mark.parametrize("fmt", FORMATS)
def test_batched_rows_take_their_own_steps(fmt):
    g = torch.Generator().manual_seed(4)
    windows = torch.tensor([[0, 0, 20, 30], [5, 7, 11, 13], [2, 9, 30, 17]], dtype=torch.float32)
    flips = torch.tensor([[True, False], [False, True], [True, True]])
    steps = B.Steps.resized_crop(windows, (16, 24), flips)
    per_sample = [random_boxes(g, n, (40, 40), fmt, outside=0.1) for n in (3, 0, 5)]
    rows = torch.cat([torch.full((len(b),), k) for k, b in enumerate(per_sample)])
    ours = B.move(torch.cat(per_sample), fmt, steps, rows).split([len(b) for b in per_sample])
    for k, boxes in enumerate(per_sample):
        top, left, h, w = (int(v) for v in windows[k])
        ref = flipped(F.resized_crop(bounding(boxes, fmt, (40, 40)), top, left, h, w, [16, 24]), *flips[k].tolist())
        assert_boxes(ours[k], ref)


@pytest.mark.parametrize("fmt", FORMATS)
def test_sanitize_and_clamp_match_v2(fmt):
    g = torch.Generator().manual_seed(5)
    canvas = (31, 45)
    boxes = random_boxes(g, 50, canvas, fmt, outside=0.3)
    boxes[:5] = boxes[:5] * torch.tensor([1.0, 1.0, 0.0, 0.0]) if fmt != "XYXY" else boxes[:5]  # degenerate ones
    labels = torch.arange(50)
    for min_size, min_area in ((1.0, 1.0), (3.5, 20.0)):
        ref = v2.SanitizeBoundingBoxes(min_size=min_size, min_area=min_area)(
            {"boxes": bounding(boxes, fmt, canvas), "labels": labels})
        keep = B.sanitize_mask(boxes, fmt, canvas, min_size, min_area)
        assert_boxes(boxes[keep], ref["boxes"])
        assert torch.equal(labels[keep], ref["labels"])
        assert 0 < int(keep.sum()) < 50
    assert_boxes(B.clamp_to(boxes, fmt, canvas), v2.ClampBoundingBoxes()(bounding(boxes, fmt, canvas)))


def test_format_names_and_refusals():
    assert B.format_name(tv_tensors.BoundingBoxFormat.CXCYWH) == "CXCYWH"
    assert B.format_name("xywh") == "XYWH"
    with pytest.raises(ValueError, match="rotated boxes are not supported"):
        B.format_name(tv_tensors.BoundingBoxFormat.XYWHR)
    with pytest.raises(ValueError, match=r"expected boxes of shape \[N, 4\], got \[4\]"):
        B.move(torch.zeros(4), "XYXY", B.Steps.make(1, (4, 4)), torch.zeros(1, dtype=torch.int64))


def _v2_of_region(boxes, fmt, size, spec_list, plan, epoch, index):
    """v2's ops on tv_tensors.BoundingBoxes with the parameters the engine drew for this sample."""
    from fastload import transforms as T
    from fastload._contract import region_of

    height, width = size
    box, _, flip, flip_v = region_of(plan, height, width, epoch, index)
    top, left, h, w = (int(round(v)) for v in box)
    ref = bounding(boxes, fmt, size)
    first = spec_list[0]
    if isinstance(first, T.RandomResizedCrop):
        ref = F.resized_crop(ref, top, left, h, w, list(plan.out_size))
    elif isinstance(first, T.RandomCrop):
        pt, pl, pb, pr = plan.pad_top, plan.pad_left, plan.pad_bottom, plan.pad_right
        ph, pw = height + pt + pb, width + pl + pr
        if plan.pad_if_needed:
            dh, dw = max(plan.out_height - ph, 0), max(plan.out_width - pw, 0)
            pt, pb, pl, pr, ph, pw = pt + dh, pb + dh, pl + dw, pr + dw, ph + 2 * dh, pw + 2 * dw
        if any((pt, pl, pb, pr)):
            ref = F.pad(ref, [pl, pt, pr, pb])
        if (ph, pw) != tuple(plan.out_size):
            ref = F.crop(ref, top + pt, left + pl, *plan.out_size)
    else:
        for spec in spec_list:
            if isinstance(spec, T.Resize):
                ref = F.resize(ref, list(spec.size) if isinstance(spec.size, (tuple, list)) else [spec.size])
            elif isinstance(spec, T.CenterCrop):
                ref = F.center_crop(ref, list(spec.size))
    return flipped(ref, flip, flip_v)


ENGINE_PIPELINES = {
    "random_resized_crop": lambda T: [T.RandomResizedCrop((17, 23), scale=(0.05, 1.0)), T.RandomHorizontalFlip(),
                                      T.RandomVerticalFlip()],
    "resize_center_crop": lambda T: [T.Resize(19), T.CenterCrop((25, 13)), T.RandomHorizontalFlip()],
    "resize_fixed": lambda T: [T.Resize((21, 15)), T.RandomVerticalFlip()],
    "center_crop": lambda T: [T.CenterCrop(30)],
    "random_crop_padding": lambda T: [T.RandomCrop((29, 31), padding=(1, 2, 3, 4), pad_if_needed=True),
                                      T.RandomHorizontalFlip()],
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("pipeline", sorted(ENGINE_PIPELINES))
def test_engine_drawn_geometry_matches_v2(fmt, pipeline):
    pytest.importorskip("fastload._C")
    from fastload import transforms as T
    from fastload.augment.plan import build_plan

    specs = ENGINE_PIPELINES[pipeline](T)
    plan = build_plan(specs, seed=11)
    g = torch.Generator().manual_seed(6)
    sizes = torch.randint(9, 70, (24, 2), generator=g)
    samples = torch.arange(100, 124)
    per_sample = [random_boxes(g, int(n), tuple(s.tolist()), fmt, outside=0.15 if k % 3 == 0 else 0.0)
                  for k, (s, n) in enumerate(zip(sizes, torch.randint(0, 6, (24,), generator=g)))]
    rows = torch.cat([torch.full((len(b),), k) for k, b in enumerate(per_sample)])
    steps = B.steps_of(plan, sizes, samples, 3, center_crop=any(isinstance(s, T.CenterCrop) for s in specs))
    ours = B.move(torch.cat(per_sample), fmt, steps, rows).split([len(b) for b in per_sample])
    for k, boxes in enumerate(per_sample):
        ref = _v2_of_region(boxes, fmt, tuple(sizes[k].tolist()), specs, plan, 3, int(samples[k]))
        assert tuple(ref.canvas_size) == steps.out_size
        assert_boxes(ours[k], ref)


# ---------------------------------------------------------------- fastload.DetectionDataset

# Engine vs PIL (v2 on a PIL image) with the same crop: a level or two of resize rounding.
MIN_PSNR_DB = 35.0
SIZES = [(41, 57), (48, 33), (63, 64), (37, 45), (52, 71), (45, 39), (60, 49), (39, 62)]


def psnr(a, b):
    import math

    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


@pytest.fixture(scope="module")
def detection_files(tmp_path_factory):
    """8 photo-like JPEGs of odd sizes and, per format, their targets: 0 to 6 boxes each,
    some reaching out of the image, labels and a per-box iscrowd."""
    from PIL import Image

    from jpeg_samples import photo

    root = tmp_path_factory.mktemp("detection")
    g = torch.Generator().manual_seed(7)
    paths, xyxy = [], []
    for k, (h, w) in enumerate(SIZES):
        path = str(root / f"{k}.jpg")
        Image.fromarray(photo(h, w, seed=k)).save(path, quality=95)
        paths.append(path)
        xyxy.append(random_boxes(g, k % 7, (h, w), "XYXY", outside=0.1 if k % 2 else 0.0))

    def targets(fmt: str, *, dtype=torch.float32):
        out = []
        for k, boxes in enumerate(xyxy):
            boxes = F.convert_bounding_box_format(boxes, old_format=tv_tensors.BoundingBoxFormat.XYXY,
                                                  new_format=getattr(tv_tensors.BoundingBoxFormat, fmt)).to(dtype)
            out.append({"boxes": bounding(boxes, fmt, SIZES[k]), "labels": torch.arange(len(boxes)) + 10 * k,
                        "iscrowd": torch.zeros(len(boxes), dtype=torch.int64), "image_id": k})
        return out

    return paths, targets


def copies_with_one_damaged(paths, folder):
    """Copies of the first four images, the second truncated to 100 bytes (a damaged JPEG:
    under on_error="skip" the next readable sample takes its slot)."""
    import shutil

    copies = []
    for k, path in enumerate(paths[:4]):
        copies.append(str(folder / f"{k}.jpg"))
        shutil.copy(path, copies[-1])
    with open(copies[1], "r+b") as f:
        f.truncate(100)
    return copies


def detection_collate(batch):
    return tuple(zip(*batch))


def v2_reference(path, target, plan, epoch, index, *, sanitize=True):
    """v2's functional ops on the PIL image and its target with the engine's drawn region."""
    from PIL import Image

    from fastload._contract import region_of

    image = Image.open(path).convert("RGB")
    box, _, flip, flip_v = region_of(plan, image.height, image.width, epoch, index)
    top, left, h, w = (int(round(v)) for v in box)
    sample = (F.to_image(image), dict(target))
    sample = F.resized_crop(sample[0], top, left, h, w, list(plan.out_size), antialias=True), \
        {**sample[1], "boxes": F.resized_crop(sample[1]["boxes"], top, left, h, w, list(plan.out_size))}
    if flip:
        sample = F.horizontal_flip(sample[0]), {**sample[1], "boxes": F.horizontal_flip(sample[1]["boxes"])}
    if flip_v:
        sample = F.vertical_flip(sample[0]), {**sample[1], "boxes": F.vertical_flip(sample[1]["boxes"])}
    return v2.SanitizeBoundingBoxes()(*sample) if sanitize else sample


def assert_target(ours, theirs):
    assert list(ours) == list(theirs)
    assert isinstance(ours["boxes"], tv_tensors.BoundingBoxes)
    assert ours["boxes"].format == theirs["boxes"].format
    assert tuple(ours["boxes"].canvas_size) == tuple(theirs["boxes"].canvas_size)
    assert_boxes(ours["boxes"].as_subclass(torch.Tensor), theirs["boxes"])
    for key in ours:
        if key != "boxes":
            assert (torch.equal(ours[key], theirs[key]) if isinstance(ours[key], torch.Tensor)
                    else ours[key] == theirs[key]), key


RANDOM = lambda: v2.Compose([v2.ToImage(), v2.RandomResizedCrop((29, 35), scale=(0.1, 1.0)),  # noqa: E731
                             v2.RandomHorizontalFlip(), v2.RandomVerticalFlip(), v2.SanitizeBoundingBoxes()])


@pytest.mark.parametrize("fmt", FORMATS)
def test_detection_samples_match_v2_on_drawn_regions(detection_files, fmt):
    pytest.importorskip("fastload._C")
    import fastload
    from fastload.augment.plan import build_plan

    paths, targets = detection_files
    ds = fastload.DetectionDataset(paths, targets(fmt), RANDOM(), seed=5)
    plan = build_plan(ds.transforms, seed=5)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            image, target = ds[i]
            ref_image, ref_target = v2_reference(paths[i], targets(fmt)[i], plan, epoch, i)
            assert psnr(image, ref_image) >= MIN_PSNR_DB
            assert_target(target, ref_target)


@pytest.mark.parametrize("fmt", FORMATS)
def test_detection_loader_batches_match_the_samples(detection_files, fmt):
    pytest.importorskip("fastload._C")
    import fastload

    paths, targets = detection_files
    ds = fastload.DetectionDataset(paths, targets(fmt), RANDOM(), seed=5)
    loader = fastload.DataLoader(ds, batch_size=3, collate_fn=detection_collate)
    assert loader.path.startswith("native: DetectionDataset") and "collate_fn detection_collate followed" in \
        loader.path, loader.path
    kept = 0
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        ds.set_epoch(epoch)
        seen = 0
        for images, batch_targets in loader:
            assert type(images) is tuple and type(batch_targets) is tuple and len(images) == len(batch_targets)
            for image, target in zip(images, batch_targets):
                want_image, want_target = ds[seen]
                assert image.shape == (3, 29, 35) and image.dtype == torch.uint8
                assert psnr(image, want_image) >= MIN_PSNR_DB
                assert_target(target, want_target)
                kept += len(target["boxes"])
                seen += 1
        assert seen == len(ds)
    assert kept > 0


def test_detection_deterministic_pipeline_matches_v2(detection_files):
    pytest.importorskip("fastload._C")
    import fastload
    from PIL import Image

    paths, targets = detection_files
    transforms = v2.Compose([v2.Resize(30), v2.CenterCrop((33, 27)), v2.ToImage(), v2.ClampBoundingBoxes(),
                             v2.ConvertBoundingBoxFormat("CXCYWH"), v2.SanitizeBoundingBoxes(min_size=2)])
    ds = fastload.DetectionDataset(paths, targets("XYWH"), transforms)
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=detection_collate)
    assert loader.path.startswith("native:"), loader.path
    ours = [s for images, batch in loader for s in zip(images, batch)]
    for i, (image, target) in enumerate(ours):
        ref_image, ref_target = transforms(Image.open(paths[i]).convert("RGB"), dict(targets("XYWH")[i]))
        assert psnr(image, ref_image) >= MIN_PSNR_DB
        assert_target(target, ref_target)


def test_detection_default_collate_stacks_like_torch(detection_files):
    pytest.importorskip("fastload._C")
    import fastload

    paths, targets = detection_files
    same = [{"boxes": bounding(torch.tensor([[1.0, 2.0, 20.0, 25.0]]), "XYXY", size), "labels": torch.tensor([k])}
            for k, size in enumerate(SIZES)]
    transforms = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()])
    ds = fastload.DetectionDataset(paths, same, transforms)
    images, batch = next(iter(fastload.DataLoader(ds, batch_size=4)))
    theirs_images, theirs = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert images.shape == theirs_images.shape == (4, 3, 24, 24)
    assert all(psnr(a, b) >= MIN_PSNR_DB for a, b in zip(images, theirs_images))
    assert_boxes(batch["boxes"], theirs["boxes"])
    assert torch.equal(batch["labels"], theirs["labels"])


def test_a_loader_dtype_leaves_the_boxes_float32(detection_files):
    """dtype=torch.bfloat16 (AMP) converts the images only: a box edge at x = 1000 in
    bfloat16 moves by up to 4 px."""
    pytest.importorskip("fastload._C")
    import fastload

    paths, targets = detection_files
    transforms = v2.Compose([v2.Resize((24, 28)), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    ds = fastload.DetectionDataset(paths, targets("XYXY"), transforms)
    loader = fastload.DataLoader(ds, batch_size=4, dtype=torch.bfloat16, collate_fn=lambda b: tuple(zip(*b)))
    images, batch_targets = next(iter(loader))
    assert all(image.dtype == torch.bfloat16 for image in images)
    for target, (_, want) in zip(batch_targets, (ds[k] for k in range(4))):
        assert isinstance(target["boxes"], tv_tensors.BoundingBoxes) and target["boxes"].dtype == torch.float32
        assert_boxes(target["boxes"], want["boxes"])


def test_detection_refusals_name_the_reason(detection_files):
    import fastload

    paths, targets = detection_files
    with pytest.raises(fastload.UnsupportedPipeline, match="gives a different size per image.*one output size.*"
                                                           "or each image its own size"):
        fastload.DetectionDataset(paths, targets("XYXY"), v2.Compose([v2.Resize(30), v2.GaussianBlur(3)]))
    with pytest.raises(fastload.UnsupportedPipeline, match="TrivialAugmentWide moves boxes"):
        fastload.DetectionDataset(paths, targets("XYXY"), [v2.RandomResizedCrop(16), v2.TrivialAugmentWide()])
    with pytest.raises(fastload.UnsupportedPipeline, match=r"SanitizeBoundingBoxes.* comes before the geometric"):
        fastload.DetectionDataset(paths, targets("XYXY"), [v2.SanitizeBoundingBoxes(), v2.RandomResizedCrop(16)])
    with pytest.raises(ValueError, match="expected one target per image, got 1 targets for 8 images"):
        fastload.DetectionDataset(paths, targets("XYXY")[:1], [v2.RandomResizedCrop(16)])
    wrong = targets("XYXY")
    wrong[2] = {"boxes": bounding(torch.zeros(1, 4), "XYXY", (10, 10)), "labels": torch.tensor([1])}
    ds = fastload.DetectionDataset(paths, wrong, [v2.RandomResizedCrop(16)])
    with pytest.raises(ValueError, match=r"sample 2 .*2\.jpg\): the boxes' canvas_size \(10, 10\) is not the image's"):
        ds[2]


def test_detection_skip_gives_the_replacement_its_own_targets(detection_files, tmp_path):
    pytest.importorskip("fastload._C")
    import warnings

    import fastload

    paths, targets = detection_files
    copies = copies_with_one_damaged(paths, tmp_path)
    ds = fastload.DetectionDataset(copies, targets("XYXY")[:4], [v2.CenterCrop((30, 30))])
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=detection_collate, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        images, batch = next(iter(loader))
    ids = [t["image_id"] for t in batch]
    assert ids == [0, 2, 2, 3]
    ds.set_epoch(0)
    for k, i in enumerate(ids):
        assert_target(batch[k], ds[i][1])
        assert psnr(images[k], ds[i][0]) >= MIN_PSNR_DB


def test_detection_loader_resumes_exactly(detection_files):
    pytest.importorskip("fastload._C")
    import fastload
    from resume_helpers import check_resume_at_every_position

    paths, targets = detection_files

    def make():
        ds = fastload.DetectionDataset(paths, targets("CXCYWH"), RANDOM(), seed=3)
        return fastload.DataLoader(ds, batch_size=3, shuffle=True, collate_fn=detection_collate,
                                   generator=torch.Generator().manual_seed(0))

    check_resume_at_every_position(make)
