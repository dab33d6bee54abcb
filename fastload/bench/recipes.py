"""Training recipes as users write them: torch's DataLoader against fastload.DataLoader on each.

Each recipe builds one dataset object exactly as a training script would (a torchvision
ImageFolder with the script's transform, a random_split of one, timm's create_transform),
then the `baseline` contender (torch.utils.data.DataLoader) and the `fastload` contender
(fastload.DataLoader, no other change) run on that same object: same files, batch, workers,
output dtype. The row of each recipe says which path fastload's loader took (`loader.path`:
native, hybrid or generic with its reason), so a recipe that falls back is shown, not hidden.

| recipe | transform (train recipes shuffle; eval ones do not) |
|---|---|
| preset | torchvision reference ClassificationPresetTrain(crop_size=224): RandomResizedCrop bilinear, flip 0.5 |
| preset-ta-wide-erase | the same + TrivialAugmentWide, RandomErasing(0.1) |
| preset-ra | the same + RandAugment |
| preset-augmix | the same + AugMix |
| preset-augmix-v2 | the same, v2 transforms (the reference script's --use-v2) |
| preset-autoaugment | the same + AutoAugment(IMAGENET) |
| preset-eval | ClassificationPresetEval(crop_size=224, resize_size=256): Resize bilinear, CenterCrop |
| timm-train | timm.data.create_transform(224, is_training=True) |
| timm-eval | timm.data.create_transform(224, interpolation="bicubic") |
| imagenet-example | pytorch/examples imagenet: RandomResizedCrop, flip, ColorJitter(0.4, 0.4, 0.4), ToTensor, Normalize |
| random-split | random_split(ImageFolder(train transform), [0.8, 0.2]), the 80% Subset |
| bicubic-rrc | RandomResizedCrop(224, BICUBIC), flip, ToTensor, Normalize |
| hf-imagefolder | Hugging Face `load_dataset("imagefolder", data_dir=...)` + `set_transform` of RandomResizedCrop, flip, ToTensor, Normalize |
| hf-arrow | the same images as bytes in a saved dataset's Arrow file (`save_to_disk` / `load_from_disk`), same transform |
| detection | fastload.DetectionDataset (4 boxes per image) whose __getitem__ is torchvision v2 on (PIL image, target): RRC(224), flip, ToImage, ToDtype, Normalize, ClampBoundingBoxes |
| shape-own, shape-csv, shape-dict, shape-loader, shape-wrapper | the user's own Dataset shapes (fastload/bench/shapes.py), RRC(224), flip, ToTensor, Normalize |
| shape-numpy, shape-random, shape-npy | shapes that stay generic (pixels read with numpy, `random` drawn in __getitem__, np.load arrays): fastload runs torch's DataLoader, expected within noise of 1.0x |
| simclr-two-views, simclr-two-crop, simclr-two-crop-folder, dino-multicrop | several views of one image (fastload/bench/recipe_datasets.py): SimCLR's pair from a class of the user's own, SupContrast's TwoCropTransform (in such a class; in ImageFolder, as its script does), DINO's 2 + 8 crops; a sample counts as one image |
| segmentation-512, segmentation-512-native | image + PNG mask pairs, v2 joint RandomResizedCrop(512), flip, ToDtype, Normalize, in a class of the user's own; -native: torch on that class, fastload on fastload.SegmentationDataset of the same files and geometry |

A recipe with `fastload_build` gives fastload's loader that dataset instead of the shared
one: fastload's own API doing the same work, raced against the user's class on torch.
The multi-view and segmentation recipes make the 3.0x (views) and 2.0x (dense) goals' rows.

Example:
    >>> from fastload.bench.recipes import RECIPES
    >>> RECIPES["preset-eval"].train, "timm" in RECIPES["timm-train"].needs
    (False, True)
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# The recipes' own defaults (the reference scripts' batch per GPU is 32-256; 64 is in the
# middle), used unless --batch-size / --workers are given.
BATCH_SIZE = 64
WORKERS = 2


class ClassificationPresetTrain:
    """torchvision's references/classification/presets.py training preset (backend "pil"; v1
    transforms, or v2 with use_v2=True as the reference script's --use-v2 gives)."""

    def __init__(self, *, crop_size, mean=MEAN, std=STD, interpolation=None, hflip_prob=0.5,
                 auto_augment_policy=None, ra_magnitude=9, augmix_severity=3, random_erase_prob=0.0,
                 use_v2=False):
        if use_v2:
            from torchvision.transforms import v2 as T
        else:
            from torchvision import transforms as T

        interpolation = T.InterpolationMode.BILINEAR if interpolation is None else interpolation
        transforms = [T.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True)]
        if hflip_prob > 0:
            transforms.append(T.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy is not None:
            if auto_augment_policy == "ra":
                transforms.append(T.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
            elif auto_augment_policy == "ta_wide":
                transforms.append(T.TrivialAugmentWide(interpolation=interpolation))
            elif auto_augment_policy == "augmix":
                transforms.append(T.AugMix(interpolation=interpolation, severity=augmix_severity))
            else:
                policy = T.AutoAugmentPolicy(auto_augment_policy)
                transforms.append(T.AutoAugment(policy=policy, interpolation=interpolation))
        transforms += [T.PILToTensor(), T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float),
                       T.Normalize(mean=mean, std=std)]
        if random_erase_prob > 0:
            transforms.append(T.RandomErasing(p=random_erase_prob))
        if use_v2:
            transforms.append(T.ToPureTensor())
        self.transforms = T.Compose(transforms)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    """torchvision's references/classification/presets.py evaluation preset (backend "pil", v1)."""

    def __init__(self, *, crop_size, resize_size=256, mean=MEAN, std=STD, interpolation=None):
        from torchvision import transforms as T

        interpolation = T.InterpolationMode.BILINEAR if interpolation is None else interpolation
        self.transforms = T.Compose([
            T.Resize(resize_size, interpolation=interpolation, antialias=True),
            T.CenterCrop(crop_size),
            T.PILToTensor(),
            T.ConvertImageDtype(torch.float),
            T.Normalize(mean=mean, std=std),
        ])

    def __call__(self, img):
        return self.transforms(img)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One training script's dataset: `build(root)` returns the object both loaders get."""

    name: str
    summary: str
    build: Callable[[str], Any]
    train: bool = True  # shuffled, as the script's training loader is
    needs: Tuple[str, ...] = ("torchvision",)  # modules that must import
    # fastload's loader gets fastload_build(root) instead of build(root): its own API on the same files.
    fastload_build: Optional[Callable[[str], Any]] = None
    # The fastload row's goal (x torch) when it runs native or hybrid, if not its path's (recipe_suite.TARGETS).
    target: Optional[float] = None

    def unavailable(self) -> Optional[str]:
        """None when the recipe can run here, else why not (no import: a spec look-up)."""
        for module in self.needs:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                extra = " (pip install timm, or the bench extra: pip install 'fastload[bench]')" if module == "timm" else ""
                return f"skipped: {module} is not installed{extra}"
        return None


def _image_folder(root: str, transform: Any) -> Any:
    import torchvision

    return torchvision.datasets.ImageFolder(root, transform=transform)


def _preset(**options: Any) -> Callable[[str], Any]:
    return lambda root: _image_folder(root, ClassificationPresetTrain(crop_size=224, **options))


def _preset_eval(root: str) -> Any:
    return _image_folder(root, ClassificationPresetEval(crop_size=224, resize_size=256))


def _timm(**options: Any) -> Callable[[str], Any]:
    def build(root: str) -> Any:
        import timm.data

        return _image_folder(root, timm.data.create_transform(224, **options))

    return build


def imagenet_example_transform() -> Any:
    """pytorch/examples imagenet/main.py's training transform, with ColorJitter(0.4, 0.4, 0.4)
    as many copies of it add."""
    from torchvision import transforms as T

    return T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4),
        T.ToTensor(), T.Normalize(MEAN, STD),
    ])


def _imagenet_example(root: str) -> Any:
    return _image_folder(root, imagenet_example_transform())


def _simclr_colour(root: str) -> Any:
    # SimCLR / MoCo v2's colour distortion (strength 0.5, without their blur), one view.
    return _image_folder(root, _views.simclr_transform())


def _simclr_blur(root: str) -> Any:
    from torchvision import transforms as T

    # SimCLR's augmentation with its blur: a kernel of ~10% of the side, applied to half the images.
    return _image_folder(root, T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(0.2),
        T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))], p=0.5), T.ToTensor(), T.Normalize(MEAN, STD),
    ]))


def _random_split(root: str) -> Any:
    from torchvision import transforms as T

    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    # Both parts are Subsets of the one ImageFolder, with its (training) transform.
    train, _ = torch.utils.data.random_split(_image_folder(root, transform), [0.8, 0.2],
                                             generator=torch.Generator().manual_seed(0))
    return train


def _bicubic_rrc(root: str) -> Any:
    from torchvision import transforms as T

    return _image_folder(root, T.Compose([
        T.RandomResizedCrop(224, interpolation=T.InterpolationMode.BICUBIC), T.RandomHorizontalFlip(),
        T.ToTensor(), T.Normalize(MEAN, STD),
    ]))


def _hf_transform(train: bool = True) -> Callable[[Any], Any]:
    """The Hugging Face image-classification examples' set_transform function: each image
    converted to RGB through the torchvision transform, the image column replaced."""
    from torchvision import transforms as T

    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])

    def transforms(examples):
        return {"pixel_values": [transform(image.convert("RGB")) for image in examples["image"]],
                "label": examples["label"]}

    return transforms


def _hf_imagefolder(root: str) -> Any:
    import datasets

    dataset = datasets.load_dataset("imagefolder", data_dir=root, split="train")
    dataset.set_transform(_hf_transform())
    return dataset


def _hf_arrow(root: str) -> Any:
    """The folder's images embedded in a saved dataset (written once, beside the folder)."""
    import os

    import datasets

    where = os.path.join(os.path.dirname(os.path.abspath(root)), os.path.basename(os.path.abspath(root)) + "-hf-arrow")
    if not os.path.exists(os.path.join(where, "dataset_info.json")):
        folder = datasets.load_dataset("imagefolder", data_dir=root, split="train")
        folder.cast_column("image", datasets.Image(decode=False)).map(
            lambda row: {"image": {"bytes": open(row["image"]["path"], "rb").read(), "path": None}},
            features=folder.cast_column("image", datasets.Image(decode=False)).features,
        ).cast_column("image", datasets.Image()).save_to_disk(where)
    dataset = datasets.load_from_disk(where)
    dataset.set_transform(_hf_transform())
    return dataset


_TIMM = ("torchvision", "timm")
_HF = ("torchvision", "datasets")

from fastload.bench import recipe_datasets as _views  # noqa: E402  (multi-view and segmentation datasets)
from fastload.bench import shapes as _shapes  # noqa: E402  (the user-dataset shapes)

RECIPES: Dict[str, Recipe] = {r.name: r for r in [
    Recipe("preset", "torchvision reference ClassificationPresetTrain(crop_size=224): RandomResizedCrop bilinear, "
           "hflip 0.5, PILToTensor, ConvertImageDtype, Normalize", _preset()),
    Recipe("preset-ta-wide-erase", "the preset with auto_augment_policy='ta_wide', random_erase_prob=0.1",
           _preset(auto_augment_policy="ta_wide", random_erase_prob=0.1)),
    Recipe("preset-ra", "the preset with auto_augment_policy='ra' (RandAugment)", _preset(auto_augment_policy="ra")),
    Recipe("preset-augmix", "the preset with auto_augment_policy='augmix'", _preset(auto_augment_policy="augmix")),
    Recipe("preset-augmix-v2", "the preset with auto_augment_policy='augmix', use_v2=True (v2 transforms)",
           _preset(auto_augment_policy="augmix", use_v2=True)),
    Recipe("preset-autoaugment", "the preset with auto_augment_policy='imagenet' (AutoAugment)",
           _preset(auto_augment_policy="imagenet")),
    Recipe("preset-eval", "torchvision reference ClassificationPresetEval(crop_size=224, resize_size=256): Resize "
           "bilinear, CenterCrop", _preset_eval, train=False),
    Recipe("timm-train", "timm.data.create_transform(224, is_training=True)", _timm(is_training=True), needs=_TIMM),
    Recipe("timm-eval", "timm.data.create_transform(224, interpolation='bicubic')", _timm(interpolation="bicubic"),
           train=False, needs=_TIMM),
    Recipe("imagenet-example", "pytorch/examples imagenet: RandomResizedCrop(224), RandomHorizontalFlip, "
           "ColorJitter(0.4, 0.4, 0.4), ToTensor, Normalize", _imagenet_example),
    Recipe("simclr-colour", "SimCLR's colour distortion: RandomResizedCrop(224), RandomHorizontalFlip, "
           "RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), RandomGrayscale(0.2), ToTensor, Normalize",
           _simclr_colour),
    Recipe("simclr-blur", "SimCLR's augmentation: simclr-colour, then RandomApply([GaussianBlur(23, (0.1, 2.0))], "
           "p=0.5)", _simclr_blur),
    Recipe("random-split", "torch.utils.data.random_split(ImageFolder(train transform), [0.8, 0.2]): the 80% Subset",
           _random_split),
    Recipe("bicubic-rrc", "RandomResizedCrop(224, interpolation=BICUBIC), RandomHorizontalFlip, ToTensor, Normalize",
           _bicubic_rrc),
    Recipe("hf-imagefolder", "Hugging Face load_dataset('imagefolder', data_dir=...) + set_transform(RandomResizedCrop"
           "(224), RandomHorizontalFlip, ToTensor, Normalize)", _hf_imagefolder, needs=_HF),
    Recipe("hf-arrow", "the same images as bytes in a saved dataset's Arrow file (save_to_disk/load_from_disk), the "
           "same set_transform", _hf_arrow, needs=_HF),
    Recipe("detection", "fastload.DetectionDataset of 4 boxes per image, __getitem__ torchvision v2 on (PIL image, "
           "target): RandomResizedCrop(224), hflip, ToImage, ToDtype, Normalize, ClampBoundingBoxes",
           lambda root: importlib.import_module("fastload.bench.detection").DetectionFolder(root)),
    # Datasets of the user's own shape around the same files (fastload traces them): fastload/bench/shapes.py
    *[Recipe(name, _shapes.SUMMARIES[name] + ("" if name in _shapes.GENERIC else "; RRC(224), flip, ToTensor, "
                                                                                   "Normalize"), build)
      for name, build in _shapes.SHAPES.items()],
    # Several views per image and segmentation: fastload/bench/recipe_datasets.py
    Recipe("simclr-two-views", "a Dataset of the user's own: one image, SimCLR's Compose (simclr-colour's) called "
           "twice, ((v1, v2), label)", _views.simclr_two_views),
    Recipe("simclr-two-crop", "shape-own's class with SupContrast's TwoCropTransform(simclr-colour's Compose): "
           "([v1, v2], label)", _views.simclr_two_crop),
    Recipe("simclr-two-crop-folder", "SupContrast's main_supcon.py: ImageFolder(root, transform=TwoCropTransform("
           "simclr-colour's Compose))", _views.simclr_two_crop_folder),
    Recipe("dino-multicrop", "shape-own's class with DINO's DataAugmentationDINO(): 2 global RRC(224, scale 0.4-1) "
           "+ 8 local RRC(96, scale 0.05-0.4), bicubic, flip, ColorJitter p=0.8, grayscale 0.2 (no blur, no "
           "solarisation), (10 tensors, label)", _views.dino_multicrop),
    Recipe("segmentation-512", "a Dataset of the user's own: image + PNG mask (tv_tensors.Mask), v2 "
           "RandomResizedCrop(512), flip, ToImage, ToDtype(image float32), Normalize, (image, mask)",
           _views.segmentation, target=2.0),
    Recipe("segmentation-512-native", "torch: segmentation-512's class; fastload: fastload.SegmentationDataset of "
           "the same files, RandomResizedCrop(512), flip, Normalize, Mask(uint8, tensor nearest)",
           _views.segmentation, fastload_build=_views.segmentation_native, target=2.0),
]}


def get(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"fastload.bench: unknown recipe {name!r}: expected one of {', '.join(RECIPES)} "
                         "(`fastload-bench --list` shows them)")
    return RECIPES[name]


def dataset(name: str, root: str, fastload: bool = False) -> Any:
    """The dataset object recipe `name` builds on the ImageFolder-layout folder `root` (for
    fastload's loader: its `fastload_build`'s, where it has one)."""
    recipe = get(name)
    return (recipe.fastload_build if fastload and recipe.fastload_build else recipe.build)(root)


def parse_names(value: Optional[str]) -> List[str]:
    """The recipes of `--recipes [NAMES]` (every one for "all" or no value)."""
    if not value or value == "all":
        return list(RECIPES)
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        get(name)
    return names


def listing() -> List[str]:
    """Lines of `fastload-bench --list` for the recipes."""
    return [f"recipe {name:21} {recipe.unavailable() or 'available'}: {recipe.summary}"
            for name, recipe in RECIPES.items()]
