"""Detection images of their own sizes (torchvision's detection references): fastload.DetectionDataset
with the references' "hflip" pipeline and a shorter-side Resize(max_size=...), batched as a tuple of
[C, H_i, W_i] images by `lambda b: tuple(zip(*b))`.

Each sample is compared with torchvision v2 applied to PIL's decode with the flip the engine drew
(images at the library's PSNR floor, boxes within 1e-4 px, labels equal); loader batches with torch's
DataLoader over the same dataset object (num_workers 0 and 2, two epochs); the draws' flip rate; torch's
default_collate error; resume; on_error="skip"; files whose size the pipeline cannot take.
"""

from __future__ import annotations

import pytest
import torch

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
F = pytest.importorskip("torchvision.transforms.v2.functional")
pytest.importorskip("fastload._C")

from test_boxes import (MIN_PSNR_DB, SIZES, assert_target, copies_with_one_damaged, detection_collate,  # noqa: E402,F401
                        detection_files, psnr)

import fastload  # noqa: E402


def hflip():
    """The references' "hflip" policy (torchvision references/detection/presets.py)."""
    return v2.Compose([v2.RandomHorizontalFlip(0.5), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
                       v2.SanitizeBoundingBoxes()])


def shorter_side():
    return v2.Compose([v2.ToImage(), v2.Resize(40, max_size=60), v2.RandomHorizontalFlip(0.5),
                       v2.ToDtype(torch.float, scale=True), v2.ClampBoundingBoxes(), v2.SanitizeBoundingBoxes()])


PIPELINES = {"hflip": hflip, "resize_max_size": shorter_side}


def v2_with_draw(path, target, plan, epoch, index, resize):
    """v2's functional ops on PIL's decode, with the flip the engine drew for (epoch, index)."""
    from PIL import Image

    from fastload._contract import region_of

    image = Image.open(path).convert("RGB")
    _, _, flip, _ = region_of(plan, image.height, image.width, epoch, index)
    sample = (F.to_image(image), dict(target))
    if resize:
        sample = (F.resize(sample[0], 40, max_size=60, antialias=True),
                  {**sample[1], "boxes": F.resize(sample[1]["boxes"], 40, max_size=60)})
    if flip:
        sample = F.horizontal_flip(sample[0]), {**sample[1], "boxes": F.horizontal_flip(sample[1]["boxes"])}
    if resize:
        sample = sample[0], {**sample[1], "boxes": F.clamp_bounding_boxes(sample[1]["boxes"])}
    image, target = v2.SanitizeBoundingBoxes()(*sample)
    return F.to_dtype(image, torch.float, scale=True), target, flip


@pytest.mark.parametrize("name", PIPELINES)
def test_own_size_samples_match_v2_with_the_drawn_flips(detection_files, name):
    paths, targets = detection_files
    ds = fastload.DetectionDataset(paths, targets("XYXY"), PIPELINES[name](), seed=4)
    assert ds.own_size
    plan, flips = ds.plan(), []
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            image, target = ds[i]
            want_image, want_target, flip = v2_with_draw(paths[i], targets("XYXY")[i], plan, epoch, i,
                                                         name != "hflip")
            flips.append(flip)
            assert image.shape == want_image.shape and image.dtype == torch.float32
            assert psnr(image * 255, want_image * 255) >= MIN_PSNR_DB
            assert_target(target, want_target)
    assert 0 < sum(flips) < len(flips)  # both ways drawn


def test_own_size_flip_rate_is_the_transforms_p():
    from fastload._contract import regions_of

    ds_plan = fastload.DetectionDataset(["x.jpg"], [{"boxes": torch.zeros(0, 4)}], hflip()).plan()
    n = 4000
    _, _, flips = regions_of(ds_plan, torch.tensor([[30, 40]] * n), torch.arange(n), 0)
    rate = flips[:, 0].float().mean().item()
    assert abs(rate - 0.5) < 4 * (0.25 / n) ** 0.5  # four standard deviations
    _, _, again = regions_of(ds_plan, torch.tensor([[30, 40]] * n), torch.arange(n), 1)
    assert 0.3 < (again[:, 0] == flips[:, 0]).float().mean().item() < 0.7  # epochs draw anew


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", PIPELINES)
def test_own_size_loader_matches_torch_dataloader(detection_files, name, num_workers):
    paths, targets = detection_files
    ds = fastload.DetectionDataset(paths, targets("XYWH"), PIPELINES[name](), seed=2)
    ours = fastload.DataLoader(ds, batch_size=3, collate_fn=detection_collate, num_workers=num_workers)
    assert ours.path.startswith("native: DetectionDataset") and "own size" in ours.path, ours.path
    theirs = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=detection_collate, num_workers=num_workers)
    sizes, plan = set(), ds.plan()
    for epoch in (0, 1):
        ours.set_epoch(epoch)
        ds.set_epoch(epoch)
        got, want = list(ours), list(theirs)
        assert len(got) == len(want) == 3
        i = 0
        for (images, batch), (want_images, want_batch) in zip(got, want):
            assert type(images) is tuple and len(images) == len(want_images)
            for image, want_image, target, want_target in zip(images, want_images, batch, want_batch):
                assert image.shape == want_image.shape
                sizes.add(tuple(image.shape))
                assert psnr(image * 255, want_image * 255) >= MIN_PSNR_DB
                assert_target(target, want_target)
                # and v2 itself on PIL's decode, with the engine's draw for (epoch, i)
                v2_image, v2_target, _ = v2_with_draw(paths[i], targets("XYWH")[i], plan, epoch, i, name != "hflip")
                assert psnr(image * 255, v2_image * 255) >= MIN_PSNR_DB
                assert_target(target, v2_target)
                i += 1
    assert len(sizes) > 4  # images of their own sizes
    stats = ours.stats()
    assert stats["samples"] == 2 * len(ds) and set(stats["native"]["stages_s"]) == {"read", "decode", "augment"}
    if name == "hflip":
        assert sizes == {(3, h, w) for h, w in SIZES}


def test_own_size_default_collate_raises_as_torch(detection_files):
    paths, targets = detection_files
    ds = fastload.DetectionDataset(paths, targets("XYXY"), hflip())
    with pytest.raises(RuntimeError) as theirs:
        next(iter(torch.utils.data.DataLoader(ds, batch_size=3)))
    with pytest.raises(type(theirs.value)) as ours:
        next(iter(fastload.DataLoader(ds, batch_size=3)))
    assert "stack expects each tensor to be equal size" in str(ours.value)


def test_own_size_loader_resumes_exactly(detection_files):
    from resume_helpers import check_resume_at_every_position

    paths, targets = detection_files

    def make():
        ds = fastload.DetectionDataset(paths, targets("CXCYWH"), shorter_side(), seed=3)
        return fastload.DataLoader(ds, batch_size=3, shuffle=True, collate_fn=detection_collate,
                                   generator=torch.Generator().manual_seed(0))

    check_resume_at_every_position(make)


def test_own_size_skip_gives_the_replacement_its_own_targets(detection_files, tmp_path):
    import warnings

    paths, targets = detection_files
    copies = copies_with_one_damaged(paths, tmp_path)
    ds = fastload.DetectionDataset(copies, targets("XYXY")[:4], hflip())
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=detection_collate, on_error="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        images, batch = next(iter(loader))
    assert [t["image_id"] for t in batch] == [0, 2, 2, 3]
    assert loader.stats()["skipped"] == 1 and any(copies[1] in str(w.message) for w in caught)
    for k, i in enumerate([0, 2, 2, 3]):
        want_image, want_target = ds[i]
        assert torch.equal(images[k], want_image)
        assert_target(batch[k], want_target)
    with pytest.raises(fastload.DecodeError, match="1.jpg"):
        next(iter(fastload.DataLoader(ds, batch_size=4, collate_fn=detection_collate)))


def _png(path, height, width):
    from PIL import Image

    Image.new("RGB", (width, height), (10, 200, 30)).save(path)
    return str(path)


def test_own_size_hostile_sizes_name_the_file(tmp_path):
    import struct
    import zlib

    one = _png(tmp_path / "one.png", 1, 1)
    thin = _png(tmp_path / "thin.png", 1, 3000)  # Resize(40, max_size=60): 0 pixels high
    huge = _png(tmp_path / "huge.png", 4, 4)
    data = bytearray(open(huge, "rb").read())  # IHDR saying 100000 x 100000, CRC fixed
    data[16:24] = struct.pack(">II", 100000, 100000)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    open(huge, "wb").write(bytes(data))
    box = {"boxes": torch.tensor([[0.0, 0.0, 1.0, 1.0]]), "labels": torch.tensor([1])}
    ok = fastload.DetectionDataset([one], [box], shorter_side())
    (images, batch), = fastload.DataLoader(ok, batch_size=1, collate_fn=detection_collate)
    assert images[0].shape == (3, 40, 40) and batch[0]["boxes"].canvas_size == (40, 40)
    for bad in (thin, huge):
        ds = fastload.DetectionDataset([one, bad], [box, box], shorter_side())
        loader = fastload.DataLoader(ds, batch_size=2, collate_fn=detection_collate)
        with pytest.raises(fastload.DecodeError, match=bad.rsplit("/", 1)[1]):
            next(iter(loader))


def test_own_size_refusals_name_the_reason(detection_files):
    paths, targets = detection_files
    with pytest.raises(fastload.UnsupportedPipeline, match="own size"):
        fastload.DetectionDataset(paths, targets("XYXY"), [v2.RandomHorizontalFlip(), v2.GaussianBlur(3)])
    with pytest.raises(fastload.UnsupportedPipeline, match="own size"):
        fastload.DetectionDataset(paths, targets("XYXY"), [v2.Resize(30), v2.Resize(40, max_size=50)])


# ---- a user's own v2 detection dataset, traced ----------------------------------------


class UserDetection(torch.utils.data.Dataset):
    """A detection dataset as users write it for torchvision v2 (PIL image, dict target)."""

    def __init__(self, paths, targets, transforms):
        self.paths, self.targets, self.transforms = paths, targets, transforms

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        return self.transforms(Image.open(self.paths[i]).convert("RGB"), dict(self.targets[i]))


def flip_always(name):
    """The pipeline with a certain flip: torch's own draws and the engine's agree."""
    transforms = PIPELINES[name]()
    return v2.Compose([v2.RandomHorizontalFlip(1.0) if isinstance(t, v2.RandomHorizontalFlip) else t
                       for t in transforms.transforms])


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", PIPELINES)
def test_traced_own_size_runs_natively_as_torch_over_two_epochs(detection_files, name, num_workers):
    paths, targets = detection_files
    ds = UserDetection(paths, targets("XYXY"), flip_always(name))
    loader = fastload.DataLoader(ds, batch_size=3, collate_fn=detection_collate, num_workers=num_workers)
    assert loader.path.startswith("native: traced UserDetection.__getitem__") and "own size" in loader.path, \
        loader.path
    explained = fastload.explain(ds)
    assert "each image keeps its own size" in explained and "verdict: native path" in explained, explained
    torch_loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=detection_collate,
                                               num_workers=num_workers)
    for epoch in range(2):
        loader.set_epoch(epoch)
        ours = [s for images, batch in loader for s in zip(images, batch)]
        theirs = [s for images, batch in torch_loader for s in zip(images, batch)]
        assert len(ours) == len(theirs) == len(ds)
        for (image, target), (want_image, want_target) in zip(ours, theirs):
            assert image.shape == want_image.shape and image.dtype == want_image.dtype == torch.float32
            assert psnr(image * 255, want_image * 255) >= MIN_PSNR_DB
            assert_target(target, want_target)


@pytest.mark.parametrize("name", PIPELINES)
def test_traced_own_size_random_flips_take_the_engines_draws(detection_files, name):
    paths, targets = detection_files
    ds = UserDetection(paths, targets("XYXY"), PIPELINES[name]())
    loader = fastload.DataLoader(ds, batch_size=3, collate_fn=detection_collate, seed=7)
    # fastload's own DetectionDataset of the same files, seed and transforms: its samples are
    # v2's ops on the engine's draws (test_own_size_samples_match_v2_with_the_drawn_flips)
    twin = fastload.DetectionDataset(paths, targets("XYXY"), PIPELINES[name](), seed=7)
    for epoch in range(2):
        loader.set_epoch(epoch)
        twin.set_epoch(epoch)
        ours = [s for images, batch in loader for s in zip(images, batch)]
        for i, (image, target) in enumerate(ours):
            want_image, want_target = twin[i]
            assert torch.equal(image, want_image)
            assert_target(target, want_target)


def test_traced_own_size_default_collate_raises_as_torch(detection_files):
    paths, targets = detection_files
    ds = UserDetection(paths, targets("XYXY"), hflip())
    with pytest.raises(RuntimeError) as theirs:
        next(iter(torch.utils.data.DataLoader(ds, batch_size=3)))
    loader = fastload.DataLoader(ds, batch_size=3)
    with pytest.raises(type(theirs.value), match="stack expects each tensor to be equal size"):
        next(iter(loader))
    assert loader.path.startswith("native:"), loader.path


def test_traced_own_size_loader_resumes_exactly(detection_files):
    from resume_helpers import check_resume_at_every_position

    paths, targets = detection_files

    def make():
        ds = UserDetection(paths, targets("XYXY"), shorter_side())
        return fastload.DataLoader(ds, batch_size=3, shuffle=True, collate_fn=detection_collate, seed=1,
                                   generator=torch.Generator().manual_seed(0))

    check_resume_at_every_position(make)


def lying_headers(monkeypatch, path, size):
    """fastload.decode.header.file_header saying `size` (height, width) for `path`."""
    from fastload.decode import header

    real = header.file_header

    def lying(p, *args, **kwargs):
        found = real(p, *args, **kwargs)
        return found._replace(height=size[0], width=size[1]) if p == path else found

    monkeypatch.setattr(header, "file_header", lying)


@pytest.mark.parametrize("traced", [False, True])
def test_own_size_header_lying_about_the_size_names_the_file(tmp_path, monkeypatch, traced):
    one = _png(tmp_path / "one.png", 1, 1)
    lying_headers(monkeypatch, one, (2, 1))
    box = {"boxes": tv_tensors.BoundingBoxes([[0.0, 0.0, 1.0, 1.0]], format="XYXY", canvas_size=(2, 1)),
           "labels": torch.tensor([1])}
    ds = UserDetection([one], [box], shorter_side()) if traced else \
        fastload.DetectionDataset([one], [box], shorter_side())
    loader = fastload.DataLoader(ds, batch_size=1, collate_fn=detection_collate)
    assert loader.path.startswith("native:"), loader.path
    with pytest.raises(fastload.DecodeError, match="one.png.*inconsistent"):
        next(iter(loader))


def test_own_size_colour_and_normalise_take_the_engines_draws(detection_files):
    """ColorJitter, Grayscale and Normalize on images of their own sizes: each sample against
    the plain-PyTorch twin of the same pipeline with a Resize((H, W)) to the image's own size
    (an identity resample), whose draws are the engine's for (seed, epoch, index) too."""
    from fastload.augment import specs
    from fastload.augment.pipeline import apply_ops_reference
    from fastload.decode.pil import decode_to_tensor

    paths, targets = detection_files
    transforms = v2.Compose([v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.RandomGrayscale(0.3),
                             v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                             v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    ds = fastload.DetectionDataset(paths, targets("XYXY"), transforms, seed=11)
    assert ds.own_size and ds.plan().has_color()
    loader = fastload.DataLoader(ds, batch_size=4, collate_fn=detection_collate, num_workers=2)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        images = [image for batch, _ in loader for image in batch]
        for i, image in enumerate(images):
            decoded = decode_to_tensor(open(paths[i], "rb").read())
            twin = apply_ops_reference([specs.Resize(tuple(decoded.shape[:2]))] + list(ds.transforms), decoded,
                                       seed=11, epoch=epoch, index=i)
            assert image.shape == twin.shape
            assert (image - twin).abs().max().item() < 0.05  # a level of uint8 rounding, normalised


@pytest.mark.parametrize("dct_scaling", [True, False])
def test_own_size_downscaled_jpegs_decode_at_a_reduced_dct_scale(tmp_path, dct_scaling):
    """Images 4 to 5 times larger than their output: the runner decodes them at 1/4 (the
    engine's choice, fastload._C.dct_scale_denom) unless dct_scaling=False; both against v2
    on PIL's full decode at the PSNR floor."""
    from PIL import Image

    from fastload._contract import dct_scale_denom
    from jpeg_samples import photo

    paths, targets = [], []
    for k, (h, w) in enumerate([(200, 260), (237, 181), (190, 301)]):
        paths.append(str(tmp_path / f"{k}.jpg"))
        Image.fromarray(photo(h, w, seed=k)).save(paths[-1], quality=95)
        targets.append({"boxes": tv_tensors.BoundingBoxes([[10.0, 20.0, 150.0, 170.0]], format="XYXY",
                                                          canvas_size=(h, w)), "labels": torch.tensor([k])})
    ds = fastload.DetectionDataset(paths, targets, shorter_side(), seed=5)
    assert dct_scale_denom(200, 260, 40, 52) == 4
    loader = fastload.DataLoader(ds, batch_size=3, collate_fn=detection_collate, dct_scaling=dct_scaling)
    plan = ds.plan()
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        (images, batch), = loader
        for i, (image, target) in enumerate(zip(images, batch)):
            want_image, want_target, _ = v2_with_draw(paths[i], targets[i], plan, epoch, i, True)
            assert image.shape == want_image.shape
            assert psnr(image * 255, want_image * 255) >= MIN_PSNR_DB
            assert_target(target, want_target)
    stages = loader.stats()["native"]["stages_s"]
    assert stages["decode"] > 0


@pytest.mark.parametrize("wrap", ["subset", "concat"])
def test_traced_own_size_inside_subset_and_concat_equals_torch(detection_files, wrap):
    paths, targets = detection_files
    ds = UserDetection(paths, targets("XYXY"), flip_always("resize_max_size"))
    if wrap == "subset":
        wrapped = torch.utils.data.Subset(ds, [5, 0, 7, 2, 3])
    else:
        wrapped = torch.utils.data.ConcatDataset([ds, UserDetection(paths[:3], targets("XYXY")[:3], ds.transforms)])
    loader = fastload.DataLoader(wrapped, batch_size=3, collate_fn=detection_collate)
    assert loader.path.startswith("native:") and "own size" in loader.path, loader.path
    ours = [s for images, batch in loader for s in zip(images, batch)]
    theirs = [s for images, batch in torch.utils.data.DataLoader(wrapped, batch_size=3, collate_fn=detection_collate)
              for s in zip(images, batch)]
    assert len(ours) == len(theirs) == len(wrapped)
    for (image, target), (want_image, want_target) in zip(ours, theirs):
        assert image.shape == want_image.shape
        assert psnr(image * 255, want_image * 255) >= MIN_PSNR_DB
        assert_target(target, want_target)
