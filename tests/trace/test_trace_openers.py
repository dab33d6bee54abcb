"""Datasets that open their images with OpenCV, torchvision.io or bytes read from the
file, traced (fastload/trace/openers.py): the common shapes run natively with torch's
batches; what the tracer cannot see through falls back naming the reason and the user's
file:line."""

from __future__ import annotations

import io
import pathlib

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader, Dataset

import fastload
from fastload.adapters import analyse
from jpeg_samples import encode, photo
from trace_helpers import EVAL_ATOL, MEAN, STD, assert_same_batches, eval_v1, line_of, needs_ops

torchvision = pytest.importorskip("torchvision")
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.io import ImageReadMode, decode_image, decode_jpeg, read_file, read_image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def root(make_image_folder):
    return make_image_folder(classes=3, per_class=4)


class Samples(Dataset):
    def __init__(self, root, transform):
        self.items = ImageFolder(root).samples
        self.transform = transform

    def __len__(self):
        return len(self.items)


# ---- torchvision.io ---------------------------------------------------------------------


class ReadImage(Samples):
    """read_image(path) (bound by name in this module), then v2 transforms."""

    def __getitem__(self, i):
        path, label = self.items[i]
        image = read_image(path)
        return self.transform(image), label


class DecodeJpeg(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(decode_jpeg(read_file(path), mode=ImageReadMode.RGB)), label


class DecodeImage(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(torchvision.io.decode_image(path, mode=ImageReadMode.RGB)), label


def v2_train():
    return v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


def v2_eval():
    return v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


@needs_ops
@pytest.mark.parametrize("cls", [ReadImage, DecodeJpeg, DecodeImage])
def test_torchvision_io_datasets_run_natively_with_torchs_batches(cls, root):
    kwargs = lambda: dict(batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(2))  # noqa: E731
    loader = fastload.DataLoader(cls(root, v2_train()), **kwargs())
    assert loader.path.startswith(f"native: traced {cls.__name__}.__getitem__ [RandomResizedCrop -> "), loader.path
    assert_same_batches(list(loader), list(TorchLoader(cls(root, v2_train()), **kwargs())))
    loader = fastload.DataLoader(cls(root, v2_eval()), batch_size=5)
    assert loader.path.startswith(f"native: traced {cls.__name__}.__getitem__ [Resize -> CenterCrop"), loader.path
    assert_same_batches(list(loader), list(TorchLoader(cls(root, v2_eval()), batch_size=5)), atol=EVAL_ATOL)


# ---- bytes read from the file ---------------------------------------------------------------


class ReadBytes(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        with open(path, "rb") as f:
            data = f.read()
        return self.transform(Image.open(io.BytesIO(data)).convert("RGB")), label


class PathBytes(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(Image.open(io.BytesIO(pathlib.Path(path).read_bytes())).convert("RGB")), label


@needs_ops
@pytest.mark.parametrize("cls", [ReadBytes, PathBytes])
def test_bytes_read_from_the_file_run_natively(cls, root):
    loader = fastload.DataLoader(cls(root, eval_v1()), batch_size=5)
    assert loader.path.startswith(f"native: traced {cls.__name__}.__getitem__ [Resize -> CenterCrop"), loader.path
    assert_same_batches(list(loader), list(TorchLoader(cls(root, eval_v1()), batch_size=5)), atol=EVAL_ATOL)


def test_other_files_opened_rb_in_getitem_are_read_for_real(root, tmp_path):
    sidecar = tmp_path / "meta.bin"
    sidecar.write_bytes(b"\x07")

    class WithSidecar(Samples):
        def __getitem__(self, i):
            path, label = self.items[i]
            with open(sidecar, "rb") as f:
                extra = f.read()[0]  # not an image file: real bytes
            with open(path, "rb") as f:
                head = f.read(2)  # a partial read of the image file: the real file
            return self.transform(Image.open(path).convert("RGB")), label + extra + head[0] - 0xFF

    dataset = WithSidecar(root, eval_v1())
    analysis = analyse(dataset)
    assert analysis.chain == "traced WithSidecar.__getitem__", analysis.reasons
    analysis.trace.prepare(range(len(dataset)))  # (each index traced as the loader reaches it)
    assert analysis.index.labels.tolist() == [label + 7 for _, label in ImageFolder(root).samples]


# ---- OpenCV ----------------------------------------------------------------------------------

try:
    import cv2
except ImportError:  # optional: the tests that need it skip
    cv2 = None
needs_cv2 = pytest.mark.skipif(cv2 is None, reason="opencv-python-headless is optional (make setup installs it)")


class OpenCV(Samples):
    """cv2.imread + cvtColor(BGR2RGB), then torchvision-free work on the array's shape."""

    def __getitem__(self, i):
        path, label = self.items[i]
        image = cv2.imread(path)
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        height, width = image.shape[:2]
        return self.transform(image=image)["image"], {"label": label, "size": (height, width)}


@needs_ops
@needs_cv2
def test_an_opencv_arrays_shape_is_read_from_the_files_header(root):
    A = pytest.importorskip("albumentations")
    from albumentations.pytorch import ToTensorV2

    make = lambda: OpenCV(root, A.Compose([A.RandomResizedCrop(size=(32, 32)), ToTensorV2()]))  # noqa: E731
    loader = fastload.DataLoader(make(), batch_size=5)
    assert loader.path.startswith("native: traced OpenCV.__getitem__"), loader.path
    for ours, theirs in zip(loader, TorchLoader(make(), batch_size=5), strict=True):
        assert ours[0].dtype == theirs[0].dtype == torch.uint8 and ours[0].shape == theirs[0].shape
        assert torch.equal(ours[1]["label"], theirs[1]["label"])
        assert all(torch.equal(a, b) for a, b in zip(ours[1]["size"], theirs[1]["size"]))


# ---- what falls back, and why -------------------------------------------------------------


def albu():
    A = pytest.importorskip("albumentations")
    from albumentations.pytorch import ToTensorV2

    return A.Compose([A.RandomResizedCrop(size=(32, 32)), A.HorizontalFlip(), A.Normalize(), ToTensorV2()])


class Bgr(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(image=cv2.imread(path))["image"], label


class Gray(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(image=cv2.imread(path, cv2.IMREAD_GRAYSCALE))["image"], label


class OtherCode(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(image=cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2HSV))["image"], label


class ArrayPixels(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        bright = image.mean() > 100
        return self.transform(image=image)["image"], label, bright


class ArraySliced(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)[8:, :]
        return self.transform(image=image)["image"], label


class PilToAlbumentations(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(image=Image.open(path).convert("RGB"))["image"], label


class ArrayToTorchvision(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)), label


class ArrayNotConverted(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(image=np.array(Image.open(path)))["image"], label


class WithMask(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        return self.transform(image=image, mask=np.zeros((4, 4), np.uint8))["image"], label


class ReturnsArray(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB), label


class GrayModeTensor(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(read_image(path, ImageReadMode.GRAY)), label


class TensorToToTensor(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(read_image(path, mode=ImageReadMode.RGB)), label


class BytesPeeked(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        with open(path, "rb") as f:
            data = f.read()
        is_jpeg = data[:2] == b"\xff\xd8"
        return self.transform(Image.open(io.BytesIO(data)).convert("RGB")), label, is_jpeg


class InMemory(Samples):
    """Bytes held in memory (not read from a file in the call): no path to follow."""

    def __init__(self, root, transform):
        super().__init__(root, transform)
        self.blobs = [open(path, "rb").read() for path, _ in self.items]

    def __getitem__(self, i):
        return self.transform(Image.open(io.BytesIO(self.blobs[i])).convert("RGB")), self.items[i][1]


FALLBACKS = [  # (dataset, transform, text of the reported line, reason)
    pytest.param(Bgr, albu, "self.transform(image=cv2.imread(path))",
                 "passes the BGR array of cv2.imread to Compose without cv2.cvtColor(image, cv2.COLOR_BGR2RGB)",
                 marks=needs_cv2, id="Bgr"),
    pytest.param(Gray, albu, "cv2.IMREAD_GRAYSCALE", "calls cv2.imread with flags=0", marks=needs_cv2, id="Gray"),
    pytest.param(OtherCode, albu, "cv2.COLOR_BGR2HSV", "calls cv2.cvtColor with code", marks=needs_cv2,
                 id="OtherCode"),
    pytest.param(ArrayPixels, albu, "image.mean()",
                 "uses the array of cv2.imread's .mean before a transform fastload maps", marks=needs_cv2,
                 id="ArrayPixels"),
    pytest.param(ArraySliced, albu, "[8:, :]", "indexes the array of cv2.imread ([...])", marks=needs_cv2,
                 id="ArraySliced"),
    pytest.param(PilToAlbumentations, albu, "image=Image.open(path)", "passes a PIL image to albumentations' Compose",
                 marks=needs_cv2, id="PilToAlbumentations"),
    pytest.param(ArrayToTorchvision, eval_v1, "self.transform(cv2.cvtColor", "passes a numpy array (cv2.imread's, "
                 "np.array(image)) to Compose", marks=needs_cv2, id="ArrayToTorchvision"),
    pytest.param(ArrayNotConverted, albu, "np.array(Image.open(path))", "calls np.array on the image without "
                 ".convert('RGB')", id="ArrayNotConverted"),
    pytest.param(WithMask, albu, "mask=np.zeros", "passes ndarray as the mask to Compose (followed: a mask file read",
                 marks=needs_cv2, id="WithMask"),
    pytest.param(ReturnsArray, albu, "def __getitem__", "returns the image itself", marks=needs_cv2,
                 id="ReturnsArray"),
    pytest.param(GrayModeTensor, v2_train, "ImageReadMode.GRAY", "calls read_image with mode=ImageReadMode.GRAY",
                 id="GrayModeTensor"),
    pytest.param(TensorToToTensor, eval_v1, "self.transform(read_image", "whose ToTensor takes PIL images",
                 id="TensorToToTensor"),
    pytest.param(BytesPeeked, eval_v1, 'data[:2] == b"\\xff\\xd8"', "indexes the bytes read from an image file",
                 id="BytesPeeked"),
    pytest.param(InMemory, eval_v1, "io.BytesIO(self.blobs[i])", "opens an image from a BytesIO", id="InMemory"),
]


@pytest.mark.parametrize("cls, transform, text, why", FALLBACKS)
def test_what_the_openers_cannot_see_through_falls_back_naming_the_line(cls, transform, text, why, root):
    reasons = analyse(cls(root, transform())).reasons
    assert reasons and reasons[0].startswith(f"{cls.__name__}.__getitem__ (traced, index 0): "), reasons
    assert why in reasons[0], reasons[0]
    assert line_of(cls.__getitem__, text) in reasons[0] or (text == "def __getitem__"), reasons[0]


@pytest.fixture(scope="module")
def odd_files(tmp_path_factory):
    """A file turned by EXIF (orientation 6) and a grayscale file."""
    folder = tmp_path_factory.mktemp("odd")
    turned, gray = folder / "turned.jpg", folder / "gray.jpg"
    turned.write_bytes(encode(photo(24, 40), exif_orientation=6))
    gray.write_bytes(encode(photo(24, 40), mode="L"))
    return str(turned), str(gray)


class OneFile(Dataset):
    def __init__(self, path, opener, transform):
        self.path, self.opener, self.transform = path, opener, transform

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return self.opener(self), i


@needs_cv2
def test_an_exif_turned_file_read_by_opencv_falls_back(odd_files):
    turned, _ = odd_files
    transform = albu()
    opener = lambda self: self.transform(image=cv2.cvtColor(cv2.imread(self.path), cv2.COLOR_BGR2RGB))["image"]  # noqa: E731
    reasons = analyse(OneFile(turned, opener, transform)).reasons
    assert "cv2.imread turns 'turned.jpg' by its EXIF orientation (6)" in reasons[0], reasons
    assert "cv2.IMREAD_IGNORE_ORIENTATION" in reasons[0]
    ignoring = lambda self: self.transform(image=cv2.cvtColor(  # noqa: E731
        cv2.imread(self.path, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION), cv2.COLOR_BGR2RGB))["image"]
    assert analyse(OneFile(turned, ignoring, transform)).chain == "traced OneFile.__getitem__"


def test_a_grayscale_file_read_unchanged_falls_back_and_rgb_mode_runs(odd_files):
    _, gray = odd_files
    unchanged = lambda self: self.transform(read_image(self.path))  # noqa: E731
    reasons = analyse(OneFile(gray, unchanged, v2_train())).reasons
    assert "passes a L tensor (ImageReadMode.UNCHANGED on a file of that many channels)" in reasons[0], reasons
    rgb = lambda self: self.transform(read_image(self.path, ImageReadMode.RGB))  # noqa: E731
    assert analyse(OneFile(gray, rgb, v2_train())).chain == "traced OneFile.__getitem__"


@needs_cv2
def test_tracing_leaves_the_openers_as_they_were(root):
    import builtins

    before = (builtins.open, io.open, io.BytesIO, cv2.imread, cv2.cvtColor, torchvision.io.read_image, read_image)
    analyse(ReadImage(root, v2_train()))
    analyse(Bgr(root, albu()))
    assert (builtins.open, io.open, io.BytesIO, cv2.imread, cv2.cvtColor, torchvision.io.read_image,
            read_image) == before
    assert globals()["read_image"] is torchvision.io.image.read_image


class ArrayCache(Samples):
    """Keeps each decoded array (a dict cache)."""

    def __init__(self, root, transform):
        super().__init__(root, transform)
        self.cache = {}

    def __getitem__(self, i):
        path, label = self.items[i]
        if i not in self.cache:
            self.cache[i] = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        return self.transform(image=self.cache[i])["image"], label


@needs_ops
@needs_cv2
def test_an_array_cache_falls_back_and_still_gives_torchs_batches(root):
    A = pytest.importorskip("albumentations")
    from albumentations.pytorch import ToTensorV2

    make = lambda: ArrayCache(root, A.Compose([A.CenterCrop(32, 32), ToTensorV2()]))  # noqa: E731
    dataset = make()
    loader = fastload.DataLoader(dataset, batch_size=5)
    assert loader.path.startswith("generic: ArrayCache.__getitem__ (traced, index 0): keeps what it opened "
                                  "(TracedArray) after __getitem__ returns (a cache? the tracer's stand-in was taken "
                                  "out of it)"), loader.path
    assert dataset.cache == {}  # (the generic path decodes index 0 again)
    for a, b in zip(loader, TorchLoader(make(), batch_size=5), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@needs_cv2
def test_a_missing_file_is_left_to_the_engine_as_for_image_open(root, tmp_path):
    missing = str(tmp_path / "gone.jpg")

    class Missing(Samples):
        def __getitem__(self, i):
            path, label = self.items[i]
            path = missing if i == 1 else path
            with open(path, "rb") as f:  # (the real open: raises here, as without the tracer)
                f.read(1)
            return self.transform(image=cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB))["image"], label

    reasons = analyse(Missing(root, albu())).reasons
    assert "(traced, index 1): raised FileNotFoundError" in reasons[0], reasons

    class MissingCv2(Samples):
        def __getitem__(self, i):
            path, label = self.items[i]
            image = cv2.imread(missing if i == 1 else path)  # cv2 gives None; the engine reports the file
            return self.transform(image=cv2.cvtColor(image, cv2.COLOR_BGR2RGB))["image"], label

    dataset = MissingCv2(root, albu())
    analysis = analyse(dataset)
    analysis.trace.prepare([1])  # (each index traced as the loader reaches it)
    assert analysis.chain == "traced MissingCv2.__getitem__" and analysis.index.source(1) == missing


class ReadRgb(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(image=cv2.imread(path, cv2.IMREAD_COLOR_RGB))["image"], label


class DecodeFileBytes(Samples):
    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(decode_image(read_file(path), ImageReadMode.RGB)), label


@needs_ops
@needs_cv2
@pytest.mark.skipif(cv2 is not None and not hasattr(cv2, "IMREAD_COLOR_RGB"), reason="OpenCV < 4.11")
def test_imread_color_rgb_needs_no_cvtcolor(root):
    A = pytest.importorskip("albumentations")
    from albumentations.pytorch import ToTensorV2

    make = lambda: ReadRgb(root, A.Compose([A.CenterCrop(32, 32), ToTensorV2()]))  # noqa: E731
    loader = fastload.DataLoader(make(), batch_size=4)
    assert loader.path.startswith("native: traced ReadRgb.__getitem__ [CenterCrop]"), loader.path
    for (images, labels), (want, want_labels) in zip(loader, TorchLoader(make(), batch_size=4), strict=True):
        assert images.shape == want.shape and torch.equal(labels, want_labels)


def test_decode_image_of_read_file_is_followed_to_the_path(root):
    dataset = DecodeFileBytes(root, v2_train())
    analysis = analyse(dataset)
    assert analysis.chain == "traced DecodeFileBytes.__getitem__", analysis.reasons
    analysis.trace.prepare(range(len(dataset)))  # (each index traced as the loader reaches it)
    assert [analysis.index.source(k) for k in range(len(analysis.index))] == [p for p, _ in ImageFolder(root).samples]
