"""A segmentation dataset of the user's own class (an image file and a mask file per
sample, both through one joint transform call: torchvision v2 with a tv_tensors.Mask,
albumentations' image= and mask=) traced and run on the engine as an image and a mask
that follows its geometry (fastload/trace/masks.py, masked.py), checked against torch's
DataLoader over the same object: deterministic transforms give the same masks exactly and
images to resize rounding; random ones give masks cut at the image's own window, with
torch's statistics; what the engine cannot express falls back with the user's file:line."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload import _ext
from fastload.trace import probe_indexes
from jpeg_samples import encode, photo

torchvision = pytest.importorskip("torchvision")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = [pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built"), pytest.mark.timeout(300)]

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
EVAL_ATOL = 2.5 / 255 / min(STD)  # as tests/trace/test_trace.py: two uint8 levels of resize rounding
# Image sizes (h, w); the masks are the images' size. Resized to 18 x 26, torch's float32
# nearest and OpenCV's double one pick other rows of 28, 14 and 44 and other columns of 50 and 60.
SIZES = [(40, 50), (37, 45), (28, 60), (14, 50), (52, 33), (44, 44)]


def labels_of(h, w, seed):
    """Random labels in [0, 251) (255 is RandomCrop's fill): a window of a few pixels is
    found at one place only, so a mask tells where it was cut."""
    return np.random.default_rng(seed).integers(0, 251, size=(h, w)).astype(np.uint8)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(image JPEG, L PNG mask, P PNG mask) per sample, the masks of the image's size."""
    root = tmp_path_factory.mktemp("masks")
    out = []
    for i, (h, w) in enumerate(SIZES):
        image = root / f"{i}.jpg"
        image.write_bytes(encode(photo(h, w, seed=i), quality=95))
        labels = labels_of(h, w, i)
        Image.fromarray(labels, "L").save(root / f"{i}_l.png")
        palette = Image.fromarray(labels, "P")
        palette.putpalette([(k * 37) % 256 for k in range(768)])  # colours that are not the indexes
        palette.save(root / f"{i}_p.png")
        out.append((str(image), str(root / f"{i}_l.png"), str(root / f"{i}_p.png")))
    return out


class V2Pairs(Dataset):
    """torchvision's v2 segmentation shape: (image, tv_tensors.Mask(Image.open(mask)))."""

    def __init__(self, files, transforms, n=None):
        self.files, self.transforms, self.n = files, transforms, n or len(files)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        path, mask_path, _ = self.files[i % len(self.files)]
        image = Image.open(path).convert("RGB")
        mask = tv_tensors.Mask(Image.open(mask_path))
        image, mask = self.transforms(image, mask)
        return image, mask


class V2Dict(V2Pairs):
    """A palette PNG through np.array, a dict sample, the mask made int64 [H, W] after."""

    def __getitem__(self, i):
        path, _, mask_path = self.files[i % len(self.files)]
        image = Image.open(path).convert("RGB")
        mask = tv_tensors.Mask(torch.from_numpy(np.array(Image.open(mask_path))))
        image, mask = self.transforms(image, mask)
        return {"image": image, "mask": torch.as_tensor(np.array(mask), dtype=torch.int64), "index": i}


def loaders(dataset, batch_size=4, workers=0):
    ours = fastload.DataLoader(dataset, batch_size=batch_size, num_workers=workers, seed=3)
    theirs = TorchLoader(dataset, batch_size=batch_size, num_workers=workers)
    return ours, theirs


def structure(batch):
    if isinstance(batch, torch.Tensor):
        return ("tensor", tuple(batch.shape), batch.dtype)
    if isinstance(batch, dict):
        return {k: structure(v) for k, v in batch.items()}
    return (type(batch).__name__, [structure(b) for b in batch])


def assert_same(ours, theirs, path="batch"):
    """Images to resize rounding, masks and labels exactly."""
    if isinstance(theirs, dict):
        for k in theirs:
            assert_same(ours[k], theirs[k], f"{path}[{k!r}]")
        return
    if isinstance(theirs, torch.Tensor):
        assert type(ours) is torch.Tensor and ours.dtype == theirs.dtype and ours.shape == theirs.shape, path
        if theirs.dtype.is_floating_point:
            torch.testing.assert_close(ours, theirs, atol=EVAL_ATOL, rtol=0, msg=path)
        else:
            assert torch.equal(ours, theirs), (path, (ours != theirs).sum())
        return
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert_same(a, b, f"{path}[{k}]")


def like_torch(dataset, in_path, epochs=2, **kwargs):
    """fastload's batches are torch's over `epochs` epochs; the loader's path says native."""
    ours, theirs = loaders(dataset, **kwargs)
    assert ours.path.startswith("native: traced"), ours.path
    assert in_path in ours.path, ours.path
    for _ in range(epochs):
        got, want = list(ours), list(theirs)
        assert [structure(b) for b in got] == [structure(b) for b in want]
        for a, b in zip(got, want):
            assert_same(a, b)
    return ours


# ---- deterministic transforms: torch's batches ---------------------------------------------


DETERMINISTIC = v2.Compose([v2.Resize(30), v2.CenterCrop((24, 28)), v2.RandomHorizontalFlip(p=1.0), v2.ToImage(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


@pytest.mark.parametrize("workers", [0, 2])
def test_v2_image_and_tv_mask_run_natively_as_torch_gives_them(files, workers):
    dataset = V2Pairs(files, DETERMINISTIC, n=10)
    loader = like_torch(dataset, "mask of view 0 (tensor nearest, uint8)", workers=workers)
    assert "[Resize -> CenterCrop -> RandomHorizontalFlip -> ToDtype -> Normalize]" in loader.path
    explained = fastload.explain(dataset)
    assert "verdict: native path" in explained and "'mask'" not in explained, explained
    assert "sample: " in explained and "-> (image, mask)" in explained, explained


def test_a_palette_mask_made_int64_in_a_dict_sample(files):
    dataset = V2Dict(files, DETERMINISTIC, n=9)
    like_torch(dataset, "mask of view 0 (tensor nearest, int64)", batch_size=3)


# torchvision's segmentation reference (v2): one ToDtype with a dtype per tv_tensor type.
PER_TYPE = {
    "image": v2.Compose([v2.ToImage(), v2.Resize(30), v2.CenterCrop((24, 28)), v2.RandomVerticalFlip(p=1.0),
                         v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                                    scale=True), v2.Normalize(MEAN, STD)]),
    "tensor": v2.Compose([v2.Resize(30), v2.CenterCrop((24, 28)), v2.PILToTensor(),
                          v2.ToDtype({torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                                     scale=True), v2.Normalize(MEAN, STD)]),
}


@pytest.mark.parametrize("key", list(PER_TYPE))
def test_a_dtype_per_tv_tensor_type_makes_the_mask_int64(files, key):
    like_torch(V2Pairs(files, PER_TYPE[key]), "mask of view 0 (tensor nearest, int64)", epochs=1)


class V2Sample(V2Pairs):
    """The sample given to v2 as one dict, returned as the transform returns it."""

    def __getitem__(self, i):
        path, mask_path, _ = self.files[i % len(self.files)]
        sample = {"image": Image.open(path).convert("RGB"), "mask": tv_tensors.Mask(Image.open(mask_path)), "index": i}
        return self.transforms(sample)


def test_the_sample_given_to_v2_as_one_dict(files):
    like_torch(V2Sample(files, DETERMINISTIC), "mask of view 0 (tensor nearest, uint8)", epochs=1)


class V2Squeezed(V2Pairs):
    def __getitem__(self, i):
        image, mask = super().__getitem__(i)
        return image, mask.squeeze(0).long(), i % 3


def test_squeeze_and_long_on_the_mask_and_a_label(files):
    like_torch(V2Squeezed(files, DETERMINISTIC), "mask of view 0 (tensor nearest, int64)")


# ---- random transforms: the mask is cut where the image is ------------------------------


def window_of(mask, source, fill):
    """(top, left, flipped) of the window of `source` (padded with `fill`) that `mask` is,
    tried where one of its labels sits in `source`."""
    h, w = mask.shape
    pad = max(h, w)
    padded = np.pad(source, pad, constant_values=fill)
    y0, x0 = np.argwhere(mask != fill)[0]
    for flipped in (False, True):
        want = mask[:, ::-1] if flipped else mask
        x = w - 1 - x0 if flipped else x0
        for r, c in np.argwhere(source == mask[y0, x0]):
            top, left = int(r - y0), int(c - x)
            window = padded[top + pad:top + pad + h, left + pad:left + pad + w]
            if window.shape == want.shape and np.array_equal(window, want):
                return top, left, flipped
    return None


def check_windows(images, masks, sources, fill=255):
    """Each mask is a window of its source mask, and its image the same window of the
    source image (uint8 values of the same decode); returns the windows."""
    windows = []
    for image, mask, (path, mask_path) in zip(images, masks, sources):
        labels = np.array(Image.open(mask_path))
        found = window_of(mask.numpy(), labels, fill)
        assert found is not None, f"the mask of {path} is no window of its labels"
        top, left, flipped = found
        decoded = np.array(Image.open(path).convert("RGB"))
        h, w = mask.shape
        padded = np.pad(decoded, ((h, h), (w, w), (0, 0)))
        window = padded[top + h:top + 2 * h, left + w:left + 2 * w]
        window = window[:, ::-1] if flipped else window
        ours = image.permute(1, 2, 0).numpy().astype(np.int16)
        inside = labels_window_inside(labels.shape, top, left, h, w, flipped)
        assert np.abs(ours - window.astype(np.int16))[inside].max(initial=0) <= 2, path
        windows.append(found)
    return windows


def labels_window_inside(shape, top, left, h, w, flipped):
    rows = (np.arange(top, top + h) >= 0) & (np.arange(top, top + h) < shape[0])
    cols = (np.arange(left, left + w) >= 0) & (np.arange(left, left + w) < shape[1])
    cols = cols[::-1] if flipped else cols
    return rows[:, None] & cols[None, :]


RANDOM = v2.Compose([v2.RandomCrop(30, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0}),
                     v2.RandomHorizontalFlip(), v2.ToImage()])


class V2Squeezed255(V2Pairs):
    def __getitem__(self, i):
        image, mask = super().__getitem__(i)
        return image, mask.squeeze(0)


def test_random_crops_cut_the_mask_where_the_image_is_with_torchs_statistics(files):
    dataset = V2Squeezed255(files, RANDOM, n=48)
    ours, theirs = loaders(dataset, batch_size=8)
    assert ours.path.startswith("native: traced") and "mask of view 0 (tensor nearest, uint8)" in ours.path, ours.path
    windows = {"ours": [], "theirs": []}
    for epoch in range(2):
        for who, loader in (("ours", ours), ("theirs", theirs)):
            for k, (images, masks) in enumerate(loader):
                sources = [files[(8 * k + j) % len(files)][:2] for j in range(len(images))]
                windows[who] += check_windows(images, masks, sources)
                # pad_if_needed: the images narrower or lower than 30 are padded, the mask with 255
                assert (masks == 255).any() or all(min(s) >= 30 for s in SIZES)
    for who, found in windows.items():
        assert 0.25 < np.mean([w[2] for w in found]) < 0.75, (who, np.mean([w[2] for w in found]))
    # torch's crop offsets: the same samples (each file 16 times over the 2 epochs), drawn
    # uniformly within each file's margin (<= 22 pixels): the offsets' mean (its spread
    # between runs ~0.9 pixel) and their spread within each file (~8 % between runs) agree
    for axis in (0, 1):
        offsets = {who: np.array([w[axis] for w in found], dtype=float).reshape(-1, len(files))
                   for who, found in windows.items()}  # [draws, file]
        spread = {who: np.sqrt(((o - o.mean(0)) ** 2).mean()) for who, o in offsets.items()}
        assert abs(offsets["ours"].mean() - offsets["theirs"].mean()) < 4.0, (axis, offsets)
        assert 0.6 < spread["ours"] / spread["theirs"] < 1.6, (axis, spread)


# ---- albumentations: OpenCV's nearest --------------------------------------------------------


A = pytest.importorskip("albumentations", reason="albumentations is optional (make setup installs it)")
cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is optional (make setup installs it)")
from albumentations.pytorch import ToTensorV2  # noqa: E402


class AlbuPairs(Dataset):
    """The OpenCV + albumentations segmentation shape: imread, BGR -> RGB, imread(mask, 0)."""

    def __init__(self, files, transform, pil=False):
        self.files, self.transform, self.pil = files, transform, pil

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, mask_l, mask_p = self.files[i]
        if self.pil:
            image = np.array(Image.open(path).convert("RGB"))
            mask = np.array(Image.open(mask_p))
        else:
            image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
            mask = cv2.imread(mask_l, cv2.IMREAD_GRAYSCALE)
        out = self.transform(image=image, mask=mask)
        return out["image"], out["mask"].long()


def test_albumentations_masks_are_opencvs_inter_nearest_exactly(files):
    transform = A.Compose([A.Resize(18, 26), A.HorizontalFlip(p=1.0), A.Normalize(MEAN, STD), ToTensorV2()])
    for pil in (False, True):
        dataset = AlbuPairs(files, transform, pil=pil)
        ours, theirs = loaders(dataset, batch_size=3)
        assert ours.path.startswith("native: traced AlbuPairs.__getitem__ [Resize -> RandomHorizontalFlip"), ours.path
        assert "mask of view 0 (cv2 nearest, int64)" in ours.path, ours.path
        for epoch in range(2):
            for (images, masks), (want_images, want_masks) in zip(ours, theirs):
                assert masks.dtype == want_masks.dtype == torch.int64 and torch.equal(masks, want_masks)
                # (OpenCV's INTER_LINEAR in fixed point, the engine's bilinear in float: a level)
                torch.testing.assert_close(images, want_images, atol=1.5 / 255 / min(STD), rtol=0)
    # torch's nearest would pick other pixels of the 14 x 50 sample: the test tells the rules apart
    labels = np.array(Image.open(files[3][1]))
    by_torch = torch.nn.functional.interpolate(torch.from_numpy(labels)[None, None], size=(18, 26))[0, 0]
    assert not torch.equal(by_torch, torch.from_numpy(cv2.resize(labels, (26, 18), interpolation=cv2.INTER_NEAREST)))


def test_albumentations_random_crop_cuts_the_mask_where_the_image_is(files):
    transform = A.Compose([A.RandomCrop(14, 20), A.HorizontalFlip(), ToTensorV2()])
    dataset = AlbuPairs(files * 4, transform)
    loader = fastload.DataLoader(dataset, batch_size=6, seed=5)
    assert loader.path.startswith("native: traced") and "mask of view 0 (cv2 nearest, int64)" in loader.path
    flips = []
    for k, (images, masks) in enumerate(loader):
        sources = [files[(6 * k + j) % len(files)][:2] for j in range(len(images))]
        flips += [w[2] for w in check_windows(images, masks.to(torch.uint8), sources)]
    assert 0.2 < np.mean(flips) < 0.8


# ---- what falls back ------------------------------------------------------------------------


class Thresholded(V2Pairs):
    def __getitem__(self, i):
        path, mask_path, _ = self.files[i % len(self.files)]
        labels = np.array(Image.open(mask_path)) > 100  # computed from the pixels: not a file the engine reads
        return self.transforms(Image.open(path).convert("RGB"), tv_tensors.Mask(torch.from_numpy(labels)))


class PILMask(V2Pairs):
    def __getitem__(self, i):
        path, mask_path, _ = self.files[i % len(self.files)]
        return self.transforms(Image.open(path).convert("RGB"), Image.open(mask_path))


class PlainTensor(V2Pairs):
    def __getitem__(self, i):
        path, mask_path, _ = self.files[i % len(self.files)]
        return self.transforms(Image.open(path).convert("RGB"), torch.from_numpy(np.array(Image.open(mask_path))))


ROTATING = v2.Compose([v2.RandomRotation(10), v2.ToImage()])


@pytest.mark.parametrize("cls, transform, why", [
    (Thresholded, DETERMINISTIC, "computes with the mask"),
    (PILMask, DETERMINISTIC, "as a PIL image"),
    (PlainTensor, DETERMINISTIC, "as a plain tensor"),
    (V2Pairs, ROTATING, "passes the mask to RandomRotation (its mask has no native twin"),
], ids=["computed", "pil", "plain-tensor", "rotation"])
def test_what_the_engine_cannot_express_falls_back_with_the_users_line(files, cls, transform, why):
    dataset = cls(files, transform)
    loader = fastload.DataLoader(dataset, batch_size=1)  # (a plain tensor mask keeps its size: no batches of 2)
    assert loader.path.startswith("generic:"), loader.path
    assert why in loader.path and "test_trace_masks.py:" in loader.path, loader.path
    for ours, theirs in zip(loader, TorchLoader(dataset, batch_size=1)):  # torch's path runs it
        assert structure(ours) == structure(theirs)


class OneDisagrees(V2Pairs):
    """Index 4 (not a probe) takes another transform: it falls back alone, through its own __getitem__."""

    def __init__(self, files, transforms, other):
        super().__init__(files, transforms, n=40)
        self.other = other

    def __getitem__(self, i):
        if i == 4:
            path, mask_path, _ = self.files[i % len(self.files)]
            return self.other(Image.open(path).convert("RGB"), tv_tensors.Mask(Image.open(mask_path)))
        return super().__getitem__(i)


def test_a_sample_that_disagrees_falls_back_alone_with_its_mask(files):
    other = v2.Compose([v2.CenterCrop((24, 28)), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                        v2.Normalize(MEAN, STD)])
    dataset = OneDisagrees(files, DETERMINISTIC, other)
    assert 4 not in probe_indexes(len(dataset))
    for workers in (0, 2):  # (made in this process, then by a worker process)
        with pytest.warns(UserWarning, match="index 4"):
            like_torch(dataset, "mask of view 0", epochs=1, workers=workers)


def test_resume_mid_epoch_with_random_masks(files):
    from resume_helpers import check_resume_at_every_position

    dataset = V2Squeezed255(files, RANDOM, n=8)

    def make():
        torch.manual_seed(0)  # the order from torch's global generator, as a new process seeds it
        return fastload.DataLoader(dataset, batch_size=2, shuffle=True, distributed=False)

    assert make().path.startswith("native: traced")
    check_resume_at_every_position(make)


def test_a_bad_mask_file_is_skipped_with_its_image(files, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)  # a PNG signature, then nothing readable
    broken = list(files)
    broken[2] = (files[2][0], str(bad), files[2][2])
    dataset = V2Pairs(broken, DETERMINISTIC)
    loader = fastload.DataLoader(dataset, batch_size=6, on_error="skip")
    assert loader.path.startswith("native: traced"), loader.path
    with pytest.warns(UserWarning, match="skipped sample 2"):
        [(images, masks)] = list(loader)
    assert images.shape == (6, 3, 24, 28) and masks.shape == (6, 1, 24, 28)
    want = list(TorchLoader(V2Pairs(files, DETERMINISTIC), batch_size=6))[0]
    assert torch.equal(masks[3], want[1][3]) and torch.equal(masks[2], want[1][3])  # its replacement: the next one


# ---- inside Subset / random_split / ConcatDataset ------------------------------------------


def shuffled(seed):
    return dict(batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed))


def wrapped_like_torch(wrapped, chain, workers=0, epochs=2):
    """fastload's batches over a wrapper are torch's over the same object, shuffled by
    one seeded generator each, over `epochs` epochs; the path says native, masks included."""
    ours = fastload.DataLoader(wrapped, num_workers=workers, seed=3, **shuffled(5))
    assert ours.path.startswith(f"native: {chain}") and "mask of view 0" in ours.path, ours.path
    theirs = TorchLoader(wrapped, num_workers=workers, **shuffled(5))
    for _ in range(epochs):
        got, want = list(ours), list(theirs)
        assert [structure(b) for b in got] == [structure(b) for b in want]
        for a, b in zip(got, want, strict=True):
            assert_same(a, b)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_random_split_of_a_segmentation_dataset_is_native_and_equals_torchs(files, workers):
    train, val = torch.utils.data.random_split(V2Pairs(files, DETERMINISTIC, n=30), [20, 10],
                                               generator=torch.Generator().manual_seed(4))
    for part in (train, val):
        wrapped_like_torch(part, "Subset -> traced V2Pairs.__getitem__", workers)


class Reversed(V2Dict):
    """The files in the other order: another part's masks differ at each index."""

    def __init__(self, files, transforms, n=None):
        super().__init__(files[::-1], transforms, n)


def test_a_concat_of_two_segmentation_datasets_nested_in_a_subset_is_native(files):
    both = torch.utils.data.ConcatDataset([V2Dict(files, DETERMINISTIC, n=9), Reversed(files, DETERMINISTIC, n=7)])
    wrapped_like_torch(both, "ConcatDataset(traced V2Dict.__getitem__, traced Reversed.__getitem__)")
    nested = torch.utils.data.Subset(both, [15, 3, 9, 0, 12, 8, 1, 14, 6])
    wrapped_like_torch(nested, "Subset -> ConcatDataset(")


def test_a_fallback_inside_a_concat_part_is_its_own_getitems_named_by_both_indexes(files):
    other = v2.Compose([v2.CenterCrop((24, 28)), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                        v2.Normalize(MEAN, STD)])
    both = torch.utils.data.ConcatDataset([V2Pairs(files, DETERMINISTIC, n=10),
                                           OneDisagrees(files, DETERMINISTIC, other)])
    for workers in (0, 2):  # (made in this process, then by a worker process)
        with pytest.warns(UserWarning, match=r"index 4 of OneDisagrees, index 14 of the ConcatDataset"):
            wrapped_like_torch(both, "ConcatDataset(", workers, epochs=1)


class ImageOnly(V2Pairs):
    """A plain part: the image and an int label, no mask."""

    def __getitem__(self, i):
        path, _, _ = self.files[i % len(self.files)]
        return self.transforms(Image.open(path).convert("RGB")), i % 3


def test_a_concat_mixing_a_masked_part_with_a_plain_one_is_refused_naming_the_part(files):
    for parts, why in [([ImageOnly(files, DETERMINISTIC), V2Pairs(files, DETERMINISTIC)],
                        "part 1 (traced V2Pairs.__getitem__) reads a mask file per sample, part 0 does not"),
                       ([V2Pairs(files, DETERMINISTIC), ImageOnly(files, DETERMINISTIC)],
                        "part 1 (traced ImageOnly.__getitem__) reads no mask file per sample, part 0 does")]:
        loader = fastload.DataLoader(torch.utils.data.ConcatDataset(parts), batch_size=2)
        assert loader.path.startswith("generic: ") and why in loader.path, loader.path
