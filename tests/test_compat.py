"""The compat layer (fastload.compat): wrapped torchvision datasets and wrapped transform
pipelines seen through to the native pipeline, every blocker named at once, and
fastload.explain."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import ConcatDataset, Dataset, Subset, random_split

import fastload
from fastload import _ext
from fastload.augment import autoaugment, specs
from fastload.compat.conversion import Conversion
from fastload.adapters import convert as convert_dataset, convert_native as convert_dataset_native
from fastload.compat.torchvision import NotConvertible, split_transform

torchvision = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
from torchvision.datasets import DatasetFolder, ImageFolder  # noqa: E402
from torchvision.datasets.folder import default_loader  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def root(make_image_folder):
    return make_image_folder(classes=3, per_class=3, size=(16, 20))


@pytest.fixture(scope="module")
def other_root(make_image_folder):
    return make_image_folder(classes=2, per_class=2, size=(20, 16), seed=1)


def train(api=v2):
    to_float = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)] if api is v2 else [T.ToTensor()]
    return api.Compose([api.RandomResizedCrop(16), api.RandomHorizontalFlip(), *to_float, api.Normalize(MEAN, STD)])


TRAIN_SPECS = (specs.RandomResizedCrop(16), specs.RandomHorizontalFlip(0.5), specs.ToDtype(torch.float32, scale=True),
               specs.Normalize(MEAN, STD))


def samples_of(dataset):
    """(path, label) of every sample, computed the way torch's wrappers index."""
    if isinstance(dataset, Subset):
        inner = samples_of(dataset.dataset)
        return [inner[int(i)] for i in dataset.indices]
    if isinstance(dataset, ConcatDataset):
        return [s for part in dataset.datasets for s in samples_of(part)]
    return [(path, label) for path, label in dataset.samples]


def index_samples(index):
    return [(index.source(i), int(index.labels[i])) for i in range(len(index))]


def assert_converts_to_its_samples(dataset):
    conversion = convert_dataset(dataset)
    assert isinstance(conversion, Conversion)
    assert index_samples(conversion.index) == samples_of(dataset)
    assert len(conversion.index) == len(dataset)
    return conversion


# ---- datasets people wrap -------------------------------------------------------------------


def test_plain_imagefolder_converts_to_its_samples_and_native_specs(root):
    conversion = assert_converts_to_its_samples(ImageFolder(root, transform=train()))
    assert conversion.pipeline.native == TRAIN_SPECS and conversion.pipeline.tail == ()
    assert conversion.origin == "torchvision ImageFolder"
    index, native = convert_dataset_native(ImageFolder(root, transform=train()))
    assert native == list(TRAIN_SPECS) and len(index) == 9


def test_subset_index_is_the_wrapped_index_at_its_indices(root):
    base = ImageFolder(root, transform=train())
    for indices in ([4, 0, 8, 8, -1], torch.tensor([2, 3]), np.array([5, 1]), range(2, 6), []):
        conversion = assert_converts_to_its_samples(Subset(base, indices))
        assert conversion.origin == "Subset -> torchvision ImageFolder"
        assert conversion.pipeline.native == TRAIN_SPECS


def test_random_split_parts_convert_to_their_samples(root):
    parts = random_split(ImageFolder(root, transform=train()), [6, 3], generator=torch.Generator().manual_seed(1))
    for part in parts:
        assert_converts_to_its_samples(part)


def test_nested_subsets_and_concats_compose_their_indices(root):
    transform = train()
    a, b = ImageFolder(root, transform=transform), ImageFolder(root, transform=transform)
    nested = Subset(ConcatDataset([Subset(Subset(a, [8, 1, 2, 5]), [3, 0]), b]), [10, 0, 1, 2])
    conversion = assert_converts_to_its_samples(nested)
    assert conversion.origin == "Subset -> ConcatDataset(Subset -> Subset -> torchvision ImageFolder, torchvision ImageFolder)"


def test_concat_of_parts_with_one_pipeline_concatenates_their_indexes(root, other_root):
    transform = train()
    assert_converts_to_its_samples(ConcatDataset([ImageFolder(root, transform=transform), Subset(
        ImageFolder(other_root, transform=transform), [2, 1]), ImageFolder(other_root, transform=transform)]))
    # Equal native specs made from different (but equal) transform objects are one pipeline.
    assert_converts_to_its_samples(ConcatDataset([ImageFolder(root, transform=train()), ImageFolder(root, transform=train())]))


def test_concat_of_parts_with_different_pipelines_is_refused_with_the_reason(root):
    mixed = ConcatDataset([ImageFolder(root, transform=train()),
                           ImageFolder(root, transform=v2.Compose([v2.Resize(8), v2.CenterCrop(8), v2.ToImage()]))])
    with pytest.raises(NotConvertible, match=r"part 1 has other transforms than part 0 \(Resize -> CenterCrop vs "
                                             r"RandomResizedCrop -> RandomHorizontalFlip -> ToDtype -> Normalize\)"):
        convert_dataset(mixed)
    labels = ConcatDataset([ImageFolder(root, transform=train()), ImageFolder(root, transform=train(),
                                                                              target_transform=float)])
    with pytest.raises(NotConvertible, match="part 1 has other transforms.*target_transform float"):
        convert_dataset(labels)


def one_hot(label):
    return torch.nn.functional.one_hot(torch.tensor(label), 3)


def test_target_transform_is_kept_and_applied_to_each_label_in_python(root):
    dataset = ImageFolder(root, transform=train(), target_transform=one_hot)
    conversion = assert_converts_to_its_samples(Subset(dataset, [8, 0, 4]))
    assert conversion.target_transform is one_hot
    labels = conversion.collate_labels(torch.as_tensor(conversion.index.labels))
    reference = torch.utils.data.default_collate([one_hot(dataset.samples[i][1]) for i in (8, 0, 4)])
    assert torch.equal(labels, reference)
    # Without a Python label path the loader cannot run it natively: the reason says so.
    with pytest.raises(NotConvertible, match="target_transform one_hot"):
        convert_dataset_native(dataset)


class FolderKeepingGetitem(DatasetFolder):
    """A DatasetFolder subclass as torchvision's ImageNet is one: own scan, default __getitem__."""

    def __init__(self, root, transform=None):
        super().__init__(root, loader=default_loader, extensions=(".jpg",), transform=transform)


class ImageFolderKeepingGetitem(ImageFolder):
    def find_classes(self, directory):
        classes, mapping = super().find_classes(directory)
        return classes, {name: len(classes) - 1 - i for name, i in mapping.items()}  # reversed labels


def test_datasetfolder_subclasses_with_the_default_getitem_and_loader_convert(root):
    assert_converts_to_its_samples(FolderKeepingGetitem(root, transform=train()))
    conversion = assert_converts_to_its_samples(ImageFolderKeepingGetitem(root, transform=train(T)))
    assert conversion.origin == "torchvision ImageFolderKeepingGetitem"
    assert int(conversion.index.labels[0]) == 2


def test_torchvision_imagenet_converts_to_its_samples(tmp_path):
    # ImageNet's own layout, as its first construction leaves it: meta.bin + train/<wnid>/.
    import jpeg_samples as js
    from torchvision.datasets import ImageNet

    js.write_image_folder(tmp_path / "train", classes=2, per_class=2, size=(16, 20))
    wnids = sorted(p.name for p in (tmp_path / "train").iterdir())
    torch.save(({wnid: (f"name {wnid}",) for wnid in wnids}, []), tmp_path / "meta.bin")
    conversion = assert_converts_to_its_samples(ImageNet(str(tmp_path), split="train", transform=train()))
    assert conversion.origin == "torchvision ImageNet" and conversion.pipeline.native == TRAIN_SPECS


class OverridesGetitem(ImageFolder):
    def __getitem__(self, i):
        image, label = super().__getitem__(i)
        return image, label + 1


class OwnDataset(Dataset):
    """samples + transform, but its own __getitem__: not recognisable safely."""

    def __init__(self, root):
        self.samples = ImageFolder(root).samples
        self.transform = train()

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return self.transform(default_loader(path)), label


def test_datasets_that_run_their_own_code_are_refused_naming_the_class(root, monkeypatch):
    monkeypatch.setenv("FASTLOAD_TRACE", "0")  # the compat layer alone (traced: tests/trace/test_trace.py)
    with pytest.raises(NotConvertible, match="OverridesGetitem overrides DatasetFolder's __getitem__"):
        convert_dataset(OverridesGetitem(root, transform=train()))
    with pytest.raises(NotConvertible, match="OwnDataset is a Dataset of its own with samples and transform, but its "
                                             "__getitem__ is its own"):
        convert_dataset(OwnDataset(root))
    with pytest.raises(NotConvertible, match="custom loader"):
        convert_dataset(ImageFolder(root, transform=train(), loader=lambda path: default_loader(path).rotate(90)))
    with pytest.raises(NotConvertible, match=r"^Subset -> TensorDataset: TensorDataset is not a torchvision dataset"):
        convert_dataset(Subset(torch.utils.data.TensorDataset(torch.arange(3)), [0]))


def test_a_fastload_dataset_inside_a_wrapper_is_refused_not_renumbered(root):
    native = fastload.FileList([path for path, _ in ImageFolder(root).samples], transforms=list(TRAIN_SPECS))
    with pytest.raises(NotConvertible, match=r"^Subset -> fastload FileList: a fastload FileList inside a wrapper"):
        convert_dataset(Subset(native, [0, 1]))
    assert "verdict: native path" in fastload.explain(native)


def test_subset_indices_out_of_range_are_refused(root):
    with pytest.raises(NotConvertible, match=r"Subset.indices hold 9, out of range for the 9 samples"):
        convert_dataset(Subset(ImageFolder(root, transform=train()), [0, 9]))
    with pytest.raises(NotConvertible, match="not a flat list of integers"):
        convert_dataset(Subset(ImageFolder(root, transform=train()), [0.5]))


# ---- transform objects that wrap a pipeline -------------------------------------------------


class ClassificationPresetTrain:
    """The structure of torchvision's references/classification/presets.py training preset:
    a Compose in self.transforms, __call__ returning self.transforms(img)."""

    def __init__(self, *, crop_size, mean=MEAN, std=STD, hflip_prob=0.5, auto_augment_policy=None, use_v2=False):
        api = v2 if use_v2 else T
        transforms = [api.RandomResizedCrop(crop_size, antialias=True)]
        if hflip_prob > 0:
            transforms.append(api.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy == "ta_wide":
            transforms.append(api.TrivialAugmentWide())
        elif auto_augment_policy == "imagenet":
            transforms.append(api.AutoAugment())
        transforms.append(api.PILToTensor())
        transforms.append(v2.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float))
        transforms.append(api.Normalize(mean=mean, std=std))
        if use_v2:
            transforms.append(v2.ToPureTensor())
        self.transforms = api.Compose(transforms)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    """The structure of the reference scripts' evaluation preset."""

    def __init__(self, *, crop_size, resize_size=256, mean=MEAN, std=STD):
        self.transforms = T.Compose([T.Resize(resize_size), T.CenterCrop(crop_size), T.PILToTensor(),
                                     T.ConvertImageDtype(torch.float), T.Normalize(mean=mean, std=std)])

    def __call__(self, image):
        """A docstring and another argument name change nothing."""
        return self.transforms(image)


@pytest.mark.parametrize("use_v2", [False, True])
def test_reference_presets_are_opened_into_their_transforms(root, use_v2):
    conversion = assert_converts_to_its_samples(ImageFolder(root, transform=ClassificationPresetTrain(
        crop_size=16, use_v2=use_v2)))
    assert conversion.pipeline.native == TRAIN_SPECS and conversion.pipeline.tail == ()
    assert split_transform(ClassificationPresetEval(crop_size=8, resize_size=10)).native == (
        specs.Resize(10), specs.CenterCrop(8), specs.ToDtype(torch.float32, scale=True), specs.Normalize(MEAN, STD))


def test_a_pipeline_with_a_non_native_augmentation_splits_into_native_prefix_and_tail():
    pipeline = split_transform(T.Compose([T.RandomResizedCrop(16, antialias=True), T.RandomHorizontalFlip(0.5),
                                          T.RandomRotation(15), T.PILToTensor(), T.ConvertImageDtype(torch.float),
                                          T.Normalize(mean=MEAN, std=STD)]))
    assert pipeline.native == TRAIN_SPECS[:2]
    assert [type(t).__name__ for t in pipeline.tail] == ["RandomRotation", "PILToTensor", "ConvertImageDtype",
                                                         "Normalize"]
    assert len(pipeline.blockers) == 1 and pipeline.blockers[0].startswith("RandomRotation(")


@pytest.mark.parametrize("use_v2", [False, True])
def test_a_preset_with_autoaugment_is_native(use_v2):
    pipeline = split_transform(ClassificationPresetTrain(crop_size=16, auto_augment_policy="imagenet", use_v2=use_v2))
    assert pipeline.tail == () and pipeline.native[:2] == TRAIN_SPECS[:2]
    assert pipeline.native[2] == autoaugment.AutoAugment(v2=use_v2) and pipeline.native[3:] == TRAIN_SPECS[2:]


@pytest.mark.parametrize("use_v2", [False, True])
def test_a_preset_with_trivial_augment_wide_is_native(use_v2):
    pipeline = split_transform(ClassificationPresetTrain(crop_size=16, auto_augment_policy="ta_wide", use_v2=use_v2))
    assert pipeline.tail == () and pipeline.native[:2] == TRAIN_SPECS[:2]
    assert pipeline.native[2] == autoaugment.TrivialAugmentWide(v2=use_v2) and pipeline.native[3:] == TRAIN_SPECS[2:]


class FlipsAfter(ClassificationPresetTrain):
    def __call__(self, img):
        return self.transforms(img).flip(-1)


class ExtraArguments(ClassificationPresetTrain):
    def __call__(self, img, *rest):
        return self.transforms(img)


class TransformsProperty:
    """An instance attribute `transforms` that a property of the same name shadows."""

    def __init__(self):
        self.__dict__["transforms"] = ClassificationPresetTrain(crop_size=16).transforms

    @property
    def transforms(self):
        return T.Compose([T.Grayscale(3), self.__dict__["transforms"]])

    def __call__(self, img):
        return self.transforms(img)


class Intercepts(ClassificationPresetTrain):
    def __getattribute__(self, name):
        value = object.__getattribute__(self, name)
        return T.Compose([T.Grayscale(3), value]) if name == "transforms" else value


@pytest.mark.parametrize("lookalike", [FlipsAfter, ExtraArguments, TransformsProperty, Intercepts])
def test_preset_lookalikes_whose_call_does_more_are_not_opened(lookalike):
    preset = lookalike() if lookalike is TransformsProperty else lookalike(crop_size=16)
    pipeline = split_transform(preset)
    assert pipeline.native == () and pipeline.tail == (preset,)
    assert "cannot prove that calling it is exactly calling them" in pipeline.blockers[0]


def test_nn_sequential_of_transforms_is_opened_unless_hooked():
    sequential = torch.nn.Sequential(T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD))
    assert split_transform(sequential).native == (TRAIN_SPECS[0], TRAIN_SPECS[1], TRAIN_SPECS[3])
    handle = sequential.register_forward_hook(lambda module, args, out: out * 0)
    try:
        pipeline = split_transform(sequential)
        assert pipeline.tail == (sequential,) and "has forward hooks" in pipeline.blockers[0]
    finally:
        handle.remove()


# Stand-ins for timm.data.transforms (timm is not installed here): same module, class
# names and the attributes timm's __call__ reads.
class RandomResizedCropAndInterpolation:
    __module__ = "timm.data.transforms"

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation="bilinear"):
        self.size = (size, size)
        modes = {"bilinear": T.InterpolationMode.BILINEAR, "bicubic": T.InterpolationMode.BICUBIC}
        self.interpolation = tuple(modes.values()) if interpolation == "random" else modes[interpolation]
        self.scale, self.ratio = scale, ratio


class MaybeToTensor(T.ToTensor):
    __module__ = "timm.data.transforms"


class ResizeKeepRatio:
    __module__ = "timm.data.transforms"


def timm_train(interpolation="bilinear", color_jitter=True):
    """The shape of timm's create_transform(is_training=True) output: a torchvision Compose."""
    return T.Compose([RandomResizedCropAndInterpolation(16, interpolation=interpolation), T.RandomHorizontalFlip(),
                      *([T.ColorJitter(0.4, 0.4, 0.4)] if color_jitter else []), MaybeToTensor(),
                      T.Normalize(torch.tensor(MEAN), torch.tensor(STD))])


def test_timm_create_transform_output_maps_its_classes():
    native = split_transform(timm_train(color_jitter=False)).native
    assert native[:3] == TRAIN_SPECS[:3] and native[3].mean == pytest.approx(MEAN) and native[3].std == pytest.approx(STD)
    pipeline = split_transform(timm_train())  # its ColorJitter is torchvision's: native too
    assert pipeline.native[:2] == TRAIN_SPECS[:2] and type(pipeline.native[2]).__name__ == "ColorJitter"
    assert pipeline.tail == () and pipeline.blockers == ()
    random = split_transform(timm_train(interpolation="random"))
    assert random.native == () and "random interpolation" in random.blockers[0]
    keep_ratio = split_transform(T.Compose([ResizeKeepRatio(), T.CenterCrop(8)]))
    assert keep_ratio.blockers == ("{!r}: timm's ResizeKeepRatio has no native equivalent".format(keep_ratio.tail[0]),)


def test_interpolations_the_engine_lacks_are_refused_naming_the_mode():
    for transform in (T.Resize(8, interpolation=T.InterpolationMode.LANCZOS),
                      v2.RandomResizedCrop(8, interpolation=v2.InterpolationMode.BOX),
                      T.Resize(8, interpolation=T.InterpolationMode.HAMMING)):
        assert split_transform(transform).blockers == (
            f"{transform!r}: uses {transform.interpolation} interpolation (native: bilinear, bicubic, nearest only)",)


def test_bicubic_and_nearest_resizes_convert_with_their_mode():
    converted = [split_transform(t).native[0] for t in (
        T.Resize(8, interpolation=T.InterpolationMode.BICUBIC),
        v2.RandomResizedCrop(8, interpolation=v2.InterpolationMode.NEAREST),
        RandomResizedCropAndInterpolation(8, interpolation="bicubic"))]
    assert [spec.interpolation for spec in converted] == ["bicubic", "nearest", "bicubic"]
    assert split_transform(T.RandomVerticalFlip(0.3)).native == (specs.RandomVerticalFlip(0.3),)


# ---- every blocker at once, explain ---------------------------------------------------------


def blocked(root):
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomInvert(1.0), v2.RandomHorizontalFlip(), v2.RandomPosterize(4),
                            v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    return Subset(ImageFolder(root, transform=transform, target_transform=one_hot), [3, 1])


def test_every_blocker_is_named_at_once(root, monkeypatch):
    monkeypatch.setenv("FASTLOAD_TRACE", "0")  # the compat layer alone (traced: tests/trace/test_trace.py)
    with pytest.raises(NotConvertible) as error:
        convert_dataset_native(blocked(root))
    message = str(error.value)
    assert message.startswith("Subset -> torchvision ImageFolder: RandomInvert(")
    assert "RandomPosterize(" in message and "target_transform one_hot" in message
    # A dataset reason and transform blockers together.
    own = ImageFolder(root, transform=blocked(root).dataset.transform, loader=lambda p: default_loader(p))
    with pytest.raises(NotConvertible) as error:
        convert_dataset(ConcatDataset([own]))
    assert "custom loader" in str(error.value) and "RandomInvert(" in str(error.value) and "RandomPosterize(" in str(error.value)


@needs_ops
def test_loader_path_names_every_blocker_in_one_line(root, monkeypatch):
    monkeypatch.setenv("FASTLOAD_TRACE", "0")  # the compat layer alone (traced: tests/trace/test_trace.py)
    path = fastload.DataLoader(blocked(root), batch_size=2).path
    assert path.startswith("hybrid: native [RandomResizedCrop] + python [RandomInvert -> ") and "\n" not in path
    assert "RandomInvert(" in path and "RandomPosterize(" in path and "target_transform one_hot" in path
    # A dataset reason sends it to the generic path, still naming every blocker.
    own = ImageFolder(root, transform=blocked(root).dataset.transform, target_transform=one_hot,
                      loader=lambda p: default_loader(p))
    path = fastload.DataLoader(own, batch_size=2).path
    assert path.startswith("generic: ImageFolder has a custom loader"), path
    assert "RandomInvert(" in path and "RandomPosterize(" in path and "target_transform one_hot" in path


@needs_ops
def test_a_subset_of_a_convertible_imagefolder_runs_natively_with_its_labels(root):
    dataset = Subset(ImageFolder(root, transform=train()), [8, 0, 4, 3, 7])
    loader = fastload.DataLoader(dataset, batch_size=2)
    assert loader.path.startswith("native: "), loader.path
    labels = torch.cat([labels for _, labels in loader]).tolist()
    assert labels == [label for _, label in samples_of(dataset)]


def test_explain_reports_the_chain_prefix_tail_blockers_and_fixes(root, capsys):
    report = fastload.explain(blocked(root))
    assert capsys.readouterr().out == ""  # returned, not printed: a REPL shows it once
    lines = report.splitlines()
    assert lines[0] == "fastload.explain: Subset -> torchvision ImageFolder, 2 samples"
    assert "  transform wrappers opened: Compose" in lines
    assert any(line.startswith("  native prefix: RandomResizedCrop(size=(16, 16)") for line in lines)
    assert any(line.startswith("  python tail:   RandomInvert(") and "RandomPosterize(" in line for line in lines)
    blockers = [line for line in lines if line.startswith("    - ")]
    assert [b.split("(")[0] for b in blockers] == ["    - RandomInvert", "    - RandomPosterize"]
    assert sum(line.strip().startswith("change: drop it") for line in lines) == 2
    assert any("target_transform one_hot applied in Python" in line for line in lines)
    assert lines[-1] == "  verdict: hybrid path: native prefix, then Python per sample (3 blockers to a fully native path)"


def test_explain_of_a_native_and_of_an_unrecognised_dataset(root, monkeypatch):
    monkeypatch.setenv("FASTLOAD_TRACE", "0")  # the compat layer alone (traced: tests/trace/test_trace.py)
    report = fastload.explain(Subset(ImageFolder(root, transform=train()), [1, 2]))
    assert report.splitlines()[-1] == "  verdict: native path"
    report = fastload.explain(OwnDataset(root))
    assert "dataset: not convertible" in report and "change: subclass torchvision.datasets.DatasetFolder" in report
    assert report.splitlines()[-1].startswith("  verdict: generic path")
    # No transform: PIL images, which the engine does not make.
    report = fastload.explain(ImageFolder(root))
    assert "do not fuse into one plan: no crop or resize" in report
    assert report.splitlines()[-1] == "  verdict: generic path (1 blocker)"
