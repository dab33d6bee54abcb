"""Several outputs per sample on the engine: image views from one decode, masks that follow
a view's geometry.

Views are checked against the plain-PyTorch twin (the image decoded whole once, each
view's drawn geometry applied by fastload.reference), against the single-view pipeline
for the same draws, and their draws' statistics against torchvision's samplers. Masks are
checked exactly against torchvision's own functionals (v1 on PIL masks, v2 on
tv_tensors.Mask) for the engine's drawn geometry.
"""

import io
import os

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
from fastload import _ext
from fastload import transforms as T
from fastload.errors import DecodeError
from jpeg_samples import encode, photo

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="needs fastload._C")
torchvision = pytest.importorskip("torchvision")
from torchvision.transforms import functional as F1  # noqa: E402
from torchvision.transforms.v2 import functional as F2  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GLOBAL = [T.RandomResizedCrop(40, scale=(0.4, 1.0)), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
LOCAL = [T.RandomResizedCrop(16, scale=(0.05, 0.4)), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
# Kernel vs reference, both float32 from the same decoded pixels: only summation order
# differs (~1e-6 relative); normalised values span ~[-2.2, 2.7] (as tests/test_native.py).
FLOAT_ATOL = 1e-4
SIZES = [(60, 80), (97, 131), (120, 90), (64, 64), (75, 200), (200, 75)]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Image JPEGs and their .npy masks (labels 0..20 in blocks, same sizes)."""
    root = tmp_path_factory.mktemp("pairs")
    images, masks = [], []
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate(SIZES):
        image = root / f"img{i}.jpg"
        image.write_bytes(encode(photo(h, w, i), quality=90))
        labels = rng.integers(0, 21, size=((h + 3) // 4, (w + 3) // 4)).astype(np.uint8)
        labels = np.repeat(np.repeat(labels, 4, 0), 4, 1)[:h, :w]
        labels[::7, ::5] = 255  # single pixels: a resize that picks other sources shows
        np.save(root / f"img{i}.npy", labels)
        images.append(str(image))
        masks.append(str(root / f"img{i}.npy"))
    return images, masks


def run_loader(dataset, *, batch_size=None, epoch=0, **kwargs):
    loader = fastload.DataLoader(dataset, batch_size=batch_size or len(dataset), num_workers=2, **kwargs)
    loader.set_epoch(epoch)
    batches = list(loader)
    return loader, batches


def test_view_zero_draws_as_the_single_view_pipeline(pairs):
    images, _ = pairs
    single = fastload.FileList(images, transforms=GLOBAL, seed=3)
    several = fastload.FileList(images, views=[GLOBAL, GLOBAL, LOCAL], seed=3)
    # (DCT scaling off: a shared decode may serve view 0 at a finer scale than it alone needs)
    _, [[alone, _]] = run_loader(single, epoch=1, dct_scaling=False)
    loader, [[views, labels]] = run_loader(several, epoch=1, dct_scaling=False)
    assert loader.path.startswith("native:") and "view 2" in loader.path, loader.path
    assert [tuple(v.shape) for v in views] == [(6, 3, 40, 40), (6, 3, 40, 40), (6, 3, 16, 16)]
    assert torch.equal(views[0], alone)
    assert not torch.equal(views[0], views[1])  # the same transforms, their own draws


def test_each_view_is_the_single_view_pipeline_with_its_draws(pairs):
    """View v equals the single-view pipeline seeded view_seed(seed, v): the shared decode
    (union window, one DCT scale) changes no pixel when no view scales."""
    from fastload._contract import view_seed

    images, _ = pairs
    several = fastload.FileList(images, views=[GLOBAL, LOCAL, LOCAL], seed=9)
    _, [[views, _]] = run_loader(several, epoch=2, dct_scaling=False)
    for v, specs in enumerate([GLOBAL, LOCAL, LOCAL]):
        alone = fastload.FileList(images, transforms=specs, seed=view_seed(9, v))
        _, [[want, _]] = run_loader(alone, epoch=2, dct_scaling=False)
        assert torch.equal(views[v], want), f"view {v}"


def test_views_match_the_plain_pytorch_reference(pairs):
    """Each view vs the image decoded whole once, the view's drawn geometry applied with
    fastload.reference (dataset[i], the twin)."""
    images, _ = pairs
    jitter = [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
              T.RandomGrayscale(0.2)]
    dataset = fastload.FileList(images, views=[GLOBAL, LOCAL, jitter], seed=5)
    _, [[views, _]] = run_loader(dataset, epoch=3, dct_scaling=False)
    dataset.set_epoch(3)
    for i in range(len(dataset)):
        want, label = dataset[i]
        assert label == 0 and len(want) == 3
        torch.testing.assert_close(views[0][i], want[0], atol=FLOAT_ATOL, rtol=0, msg=f"sample {i} view 0")
        torch.testing.assert_close(views[1][i], want[1], atol=FLOAT_ATOL, rtol=0, msg=f"sample {i} view 1")
        # uint8 colour view: the fused pass's rounding may differ from the twin's by one level
        diff = (views[2][i].int() - want[2].int()).abs()
        assert diff.max() <= 1, f"sample {i} view 2: max diff {diff.max()}"


def test_dct_scaled_shared_decode_stays_close(tmp_path):
    """Large images: one decode at the scale the views share (the local crops' need bounds
    the global ones'), every view within the PSNR floor of the full-decode twin."""
    paths = []
    for i in range(3):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(encode(photo(600 + 40 * i, 800, i), quality=90))
        paths.append(str(path))
    views = [[T.RandomResizedCrop(64, scale=(0.5, 1.0))], [T.RandomResizedCrop(32, scale=(0.2, 0.5))]]
    dataset = fastload.FileList(paths, views=views, seed=1)
    _, [[scaled, _]] = run_loader(dataset)
    _, [[exact, _]] = run_loader(dataset, dct_scaling=False)
    assert not torch.equal(scaled[0], exact[0])  # scaling happened
    for v in range(2):
        for i in range(3):
            mse = torch.mean((scaled[v][i].double() - exact[v][i].double()) ** 2).item()
            assert 10 * np.log10(255.0 ** 2 / mse) >= 35.0, (v, i)


def test_view_draws_follow_torchvision_statistics():
    """Per view: RandomResizedCrop's area fraction and aspect, and the flip, have
    torchvision's distribution (its own sampler, same count); views are independent."""
    from fastload._contract import region_of
    from fastload.augment.plan import build_plan
    from fastload.augment.views import Outputs, build_view_plans

    specs = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]
    plans = build_view_plans(Outputs.of_views([specs, specs]), build_plan(specs, seed=7))
    h, w, n = 300, 400, 3000
    draws = []
    for v in range(2):
        plan = plans.seeded(v)
        rows = [region_of(plan, h, w, 0, i) for i in range(n)]
        draws.append((np.array([b[2] * b[3] / (h * w) for b, _, _, _ in rows]),
                      np.array([np.log(b[3] / b[2]) for b, _, _, _ in rows]),
                      np.array([f for _, _, f, _ in rows], dtype=float)))
    torch.manual_seed(0)
    theirs = [torchvision.transforms.RandomResizedCrop.get_params(torch.empty(3, h, w), (0.08, 1.0), (3 / 4, 4 / 3))
              for _ in range(n)]
    area = np.array([t[2] * t[3] / (h * w) for t in theirs])
    aspect = np.array([np.log(t[3] / t[2]) for t in theirs])
    for v, (ours_area, ours_aspect, flips) in enumerate(draws):
        # means within 4 standard errors of torchvision's, spreads within 10 %
        assert abs(ours_area.mean() - area.mean()) < 4 * area.std() / np.sqrt(n / 2), v
        assert abs(ours_aspect.mean() - aspect.mean()) < 4 * aspect.std() / np.sqrt(n / 2), v
        assert abs(ours_area.std() / area.std() - 1) < 0.1 and abs(ours_aspect.std() / aspect.std() - 1) < 0.1, v
        assert abs(flips.mean() - 0.5) < 4 * 0.5 / np.sqrt(n), v
    assert abs(np.corrcoef(draws[0][0], draws[1][0])[0, 1]) < 0.1  # independent views
    assert abs(np.corrcoef(draws[0][2], draws[1][2])[0, 1]) < 0.1


def test_view_jitter_draws_follow_torchvision_statistics():
    """ColorJitter(0.4, 0.4, 0.4, 0.1) under RandomApply(p=0.8), per view: how often it runs
    and the brightness factor's spread are torchvision's; the views draw independently."""
    from fastload import _ops
    from fastload.augment.views import Outputs, build_view_plans
    from fastload.augment.plan import build_plan, jitter_nan_ranges

    specs = [T.RandomResizedCrop(32), T.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8)]
    plans = build_view_plans(Outputs.of_views([specs, specs]), build_plan(specs, seed=11))
    n = 3000
    brightness = []
    for v in range(2):
        plan = plans.seeded(v)
        _, factors = _ops.color_jitter_params(torch.arange(n), plan.seed, 0, jitter_nan_ranges(plan.jitter),
                                              plan.jitter_p)
        ran = ~torch.isnan(factors[:, 0])
        assert abs(ran.float().mean().item() - 0.8) < 4 * np.sqrt(0.16 / n), v
        torch.manual_seed(v)
        theirs = torch.tensor([torchvision.transforms.ColorJitter.get_params([0.6, 1.4], None, None, None)[1]
                               for _ in range(n)])
        ours = factors[ran, 0].double()
        assert abs(ours.mean().item() - theirs.mean().item()) < 4 * theirs.std().item() / np.sqrt(ran.sum().item())
        assert abs(ours.std().item() / theirs.std().item() - 1) < 0.1
        brightness.append(factors[:, 0])
    both = ~torch.isnan(brightness[0]) & ~torch.isnan(brightness[1])
    assert abs(np.corrcoef(brightness[0][both].numpy(), brightness[1][both].numpy())[0, 1]) < 0.1


def _v1_mask(labels, geometry, box, flip, out, fill):
    """torchvision v1 on a PIL mask (NEAREST) for a drawn geometry."""
    pil = Image.fromarray(labels)
    top, left, height, width = (int(round(x)) for x in box)
    if geometry == "rrc":
        result = F1.resized_crop(pil, top, left, height, width, [out, out], F1.InterpolationMode.NEAREST)
    elif geometry == "resize":
        result = F1.center_crop(F1.resize(pil, out[0], F1.InterpolationMode.NEAREST), out[1])
    else:  # RandomCrop(out, padding=pad, fill)
        pad = -min(top, left, 0) + out
        padded = F1.pad(pil, pad, fill=fill)
        result = F1.crop(padded, top + pad, left + pad, out, out)
    result = F1.hflip(result) if flip else result
    return torch.from_numpy(np.array(result))


def _v2_mask(labels, geometry, box, flip, out, fill):
    """torchvision v2 on a tv_tensors.Mask for a drawn geometry."""
    mask = tv_tensors.Mask(torch.from_numpy(labels)[None])
    top, left, height, width = (int(round(x)) for x in box)
    if geometry == "rrc":
        result = F2.resized_crop(mask, top, left, height, width, [out, out])
    elif geometry == "resize":
        result = F2.center_crop(F2.resize(mask, out[0]), out[1])
    else:
        pad = -min(top, left, 0) + out
        result = F2.crop(F2.pad(mask, [pad], fill=fill), top + pad, left + pad, out, out)
    result = F2.horizontal_flip(result) if flip else result
    return result.as_subclass(torch.Tensor)[0]


def _cv2_mask(labels, geometry, box, flip, out, fill):
    """OpenCV's INTER_NEAREST (albumentations' mask resize) for a drawn geometry; crops and
    pads as torchvision's (no resampling in them)."""
    cv2 = pytest.importorskip("cv2")
    top, left, height, width = (int(round(x)) for x in box)
    if geometry == "rrc":
        crop = np.ascontiguousarray(labels[top:top + height, left:left + width])
        return torch.from_numpy(_flipped(cv2.resize(crop, (out, out), interpolation=cv2.INTER_NEAREST), flip))
    if geometry == "resize":
        size = F2.resize(tv_tensors.Mask(torch.from_numpy(labels)[None]), out[0]).shape[-2:]  # (its size rule)
        resized = cv2.resize(labels, (size[1], size[0]), interpolation=cv2.INTER_NEAREST)
        result = F2.center_crop(tv_tensors.Mask(torch.from_numpy(resized)[None]), out[1]).as_subclass(torch.Tensor)[0]
        return torch.from_numpy(_flipped(result.numpy(), flip))
    return _v2_mask(labels, geometry, box, flip, out, fill)


def _flipped(array, flip):
    return np.ascontiguousarray(array[:, ::-1]) if flip else array


@pytest.mark.parametrize("sampling", ["pil", "tensor", "cv2"])
@pytest.mark.parametrize("geometry", ["rrc", "resize", "crop"])
def test_masks_equal_torchvision_exactly(pairs, sampling, geometry):
    from fastload._contract import region_of

    images, masks = pairs
    specs = {"rrc": [T.RandomResizedCrop(33), T.RandomHorizontalFlip()],
             "resize": [T.Resize(50), T.CenterCrop(56), T.RandomHorizontalFlip()],
             "crop": [T.RandomCrop(70, padding=8, pad_if_needed=True), T.RandomHorizontalFlip()]}[geometry]
    out = {"rrc": 33, "resize": (50, 56), "crop": 70}[geometry]
    mask = fastload.Mask(fill=255, dtype=torch.uint8, sampling=sampling)
    dataset = fastload.SegmentationDataset(images, masks, specs + [T.Normalize(MEAN, STD)], mask=mask, seed=4)
    loader, [[image_batch, mask_batch]] = run_loader(dataset, epoch=1, dct_scaling=False)
    assert "mask of view 0" in loader.path and image_batch.dtype == torch.float32
    plan = dataset.view_plans().seeded(0)
    reference = {"pil": _v1_mask, "tensor": _v2_mask, "cv2": _cv2_mask}[sampling]
    for i, path in enumerate(masks):
        labels = np.load(path)
        box, _, flip, _ = region_of(plan, *labels.shape, 1, i)
        want = reference(labels, geometry, box, flip, out, 255)
        assert mask_batch.dtype == torch.uint8 and torch.equal(mask_batch[i], want), f"sample {i}"
    dataset.set_epoch(1)
    for i in range(len(dataset)):  # the twin (PIL / torch) agrees with the engine too
        twin_image, twin_mask = dataset[i]
        assert torch.equal(twin_mask, mask_batch[i])
        torch.testing.assert_close(twin_image, image_batch[i], atol=FLOAT_ATOL, rtol=0)


def test_pil_tensor_and_cv2_nearest_pick_different_pixels(pairs):
    """The three samplings are not the same rule (so each test above checks its own)."""
    images, masks = pairs
    outs = []
    for sampling in ("pil", "tensor", "cv2"):
        dataset = fastload.SegmentationDataset(images, masks, [T.Resize(39), T.CenterCrop(39)],
                                               mask=fastload.Mask(sampling=sampling))
        outs.append(run_loader(dataset)[1][0][1])
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])
    assert not torch.equal(outs[1], outs[2])  # torch's float32 rule and OpenCV's double one


def test_mask_follows_a_later_view_with_int64_and_channel_dim(pairs):
    images, masks = pairs
    from fastload.augment.views import Outputs

    outputs = Outputs.of_views([GLOBAL, LOCAL], [fastload.Mask(follows=1, channel_dim=True)])
    index = fastload.FileList(images).index
    mask_index = fastload.FileList(masks).index
    dataset = fastload.NativeDataset(index, seed=2, outputs=outputs, mask_index=mask_index)
    _, [[outs, labels]] = run_loader(dataset)
    assert [tuple(o.shape) for o in outs] == [(6, 3, 40, 40), (6, 3, 16, 16), (6, 1, 16, 16)]
    assert outs[2].dtype == torch.int64 and labels.tolist() == [0] * 6
    for i in range(len(dataset)):
        twin, _ = dataset[i]
        assert torch.equal(twin[2], outs[2][i])


def test_resume_mid_epoch_with_views(pairs):
    from resume_helpers import check_resume_at_every_position

    images, _ = pairs
    dataset = fastload.FileList(images, views=[GLOBAL, LOCAL], seed=1)
    def make():
        torch.manual_seed(0)  # the order from torch's global generator, as a new process seeds it
        return fastload.DataLoader(dataset, batch_size=2, shuffle=True, distributed=False)

    check_resume_at_every_position(make)


def test_ddp_ranks_split_views_by_sample(pairs, monkeypatch):
    """Each rank's views are the single-process views of its samples (draws follow the
    sample index, not the rank); the ranks together see every sample once."""
    images, _ = pairs
    dataset = fastload.FileList(images, views=[GLOBAL, LOCAL], seed=6)
    _, [[whole, _]] = run_loader(dataset, distributed=False, seed=2)
    key = {whole[0][i].flatten()[:32].numpy().tobytes(): i for i in range(len(images))}
    seen = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        loader = fastload.DataLoader(dataset, batch_size=3, shuffle=True, seed=2, distributed=True)
        assert loader.path.startswith("native:"), loader.path
        for views, _ in loader:
            for row in range(len(views[0])):
                i = key[views[0][row].flatten()[:32].numpy().tobytes()]
                assert torch.equal(views[1][row], whole[1][i])
                seen.append(i)
    assert sorted(seen) == list(range(len(images)))


def test_skip_replaces_a_bad_sample_in_every_output(pairs, tmp_path):
    images, masks = pairs
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    wrong_size = tmp_path / "wrong.npy"
    np.save(wrong_size, np.zeros((5, 5), np.uint8))
    dataset = fastload.SegmentationDataset([images[0], str(bad), images[2], images[3]],
                                           [masks[0], masks[1], str(wrong_size), masks[3]],
                                           [T.RandomResizedCrop(20)], seed=1)
    with pytest.raises(DecodeError, match="bad.jpg"):
        run_loader(dataset)
    loader, [[image_batch, mask_batch]] = run_loader(dataset, on_error="skip")
    assert loader.stats()["skipped"] == 2
    reasons = " ".join(s["reason"] for s in loader.stats()["skipped_samples"])
    assert "wrong.npy" in reasons and "5x5" in reasons
    # slots 1 and 2 hold sample 3, image and mask alike
    assert torch.equal(image_batch[1], image_batch[3]) and torch.equal(mask_batch[1], mask_batch[3])
    assert torch.equal(mask_batch[2], mask_batch[3])


def test_mask_formats(pairs, tmp_path):
    """A PNG label map decodes natively as np.array(Image.open(path)) gives it (mode L, and
    mode P: the palette's indexes, not its colours); a grayscale JPEG mask as its luma (as
    PIL's); a colour PNG is refused, naming the file."""
    images, masks = pairs
    labels = np.load(masks[0])
    gray = tmp_path / "m.jpg"
    Image.fromarray(labels).save(gray, "JPEG", quality=100)
    mode_l = tmp_path / "l.png"
    Image.fromarray(labels).save(mode_l, "PNG")
    mode_p = tmp_path / "p.png"
    palette = Image.fromarray(labels, mode="P")
    palette.putpalette([(3 * k) % 256 for k in range(768)])  # colours unlike the indexes
    palette.save(mode_p, "PNG")
    for path in (gray, mode_l, mode_p):
        ds = fastload.SegmentationDataset([images[0]], [str(path)], [T.CenterCrop(24)],
                                          mask=fastload.Mask(dtype=torch.uint8))
        loader, [[_, mask_batch]] = run_loader(ds)
        assert loader.path.startswith("native:"), loader.path
        assert torch.equal(mask_batch[0], ds[0][1]), path
    for path in (mode_l, mode_p):
        want = torch.from_numpy(np.array(Image.open(path))[18:42, 28:52])
        ds = fastload.SegmentationDataset([images[0]], [str(path)], [T.CenterCrop(24)])
        _, [[_, mask_batch]] = run_loader(ds)
        assert torch.equal(mask_batch[0], want.long()), path
    colour = tmp_path / "rgb.png"
    Image.fromarray(np.stack([labels] * 3, -1)).save(colour, "PNG")
    ds = fastload.SegmentationDataset([images[0]], [str(colour)], [T.CenterCrop(24)])
    with pytest.raises(DecodeError, match="rgb.png"):
        run_loader(ds)


def test_bad_arguments_are_named(pairs):
    images, masks = pairs
    with pytest.raises(TypeError, match="views="):
        fastload.FileList(images, transforms=GLOBAL, views=[GLOBAL])
    with pytest.raises(TypeError, match=r"views\[1\]"):
        fastload.FileList(images, views=[GLOBAL, [T.RandomResizedCrop(8), lambda x: x]])
    with pytest.raises(ValueError, match="follows=2"):
        from fastload.augment.views import Outputs

        Outputs.of_views([GLOBAL, LOCAL], [fastload.Mask(follows=2)])
    with pytest.raises(ValueError, match="fill"):
        fastload.Mask(fill=300)
    with pytest.raises(ValueError, match="one mask per image"):
        fastload.SegmentationDataset(images, masks[:2])


def test_engine_checks_view_outputs(pairs):
    from fastload.augment.plan import build_plan

    images, _ = pairs
    core = _ext.require_ops()
    index = fastload.FileList(images).index
    engine = core.BatchEngine(1)
    engine.set_index(torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                     torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes))
    engine.set_plan(build_plan(GLOBAL))
    engine.set_views([build_plan(LOCAL)], [core.MaskSpec(follows=1, fill=3)])
    out = torch.empty(2, 3, 40, 40)
    with pytest.raises(ValueError, match="expected 1 view outputs and 1 mask outputs"):
        engine.submit(torch.tensor([0, 1]), out, 0)
    with pytest.raises(ValueError, match="set_mask_index"):
        engine.submit(torch.tensor([0, 1]), out, 0, views=[torch.empty(2, 3, 16, 16)],
                      masks=[torch.empty(2, 16, 16, dtype=torch.uint8)])
    engine.set_mask_index(torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                          torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets),
                          torch.from_numpy(index.sizes))
    with pytest.raises(ValueError, match=r"mask 0 as uint8 or int64 \[2, 16, 16\]"):
        engine.submit(torch.tensor([0, 1]), out, 0, views=[torch.empty(2, 3, 16, 16)],
                      masks=[torch.empty(2, 40, 40, dtype=torch.uint8)])
    with pytest.raises(ValueError, match="follow an image view"):
        engine.set_views([], [core.MaskSpec(follows=1)])
    engine.close()


def test_tar_shards_take_views(make_image_folder, tmp_path):
    """TarShards(views=...): the members read once, each view as the same views of a folder."""
    pytest.importorskip("webdataset")
    folder = make_image_folder(classes=2, per_class=3, size=(48, 64))
    shards = fastload.write_shards(folder, str(tmp_path / "train-%06d.tar"))
    tar = fastload.TarShards(shards, views=[GLOBAL, LOCAL], seed=2)
    files = fastload.ImageFolder(folder, views=[GLOBAL, LOCAL], seed=2)
    _, [[tar_views, tar_labels]] = run_loader(tar)
    _, [[folder_views, folder_labels]] = run_loader(files)
    assert torch.equal(tar_labels, folder_labels)
    for a, b in zip(tar_views, folder_views):
        assert torch.equal(a, b)
