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
# The fastload rows' goals on a quiet machine, by the path they take.
TARGETS = {"native": 3.0, "hybrid": 2.0}


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
    from torchvision import transforms as T

    # SimCLR / MoCo v2's colour distortion (strength 0.5, without their blur).
    return _image_folder(root, T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(0.2),
        T.ToTensor(), T.Normalize(MEAN, STD),
    ]))


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
]}


def get(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"fastload.bench: unknown recipe {name!r}: expected one of {', '.join(RECIPES)} "
                         "(`fastload-bench --list` shows them)")
    return RECIPES[name]


def dataset(name: str, root: str) -> Any:
    """The dataset object recipe `name` builds on the ImageFolder-layout folder `root`."""
    return get(name).build(root)


def path_kind(path: str) -> str:
    """"native", "hybrid" or "generic": the first word of a `loader.path`."""
    kind = path.split(":", 1)[0].strip()
    return kind if kind in ("native", "hybrid", "generic") else "generic"


# The recipe table: figures of both loaders on one line per recipe.
COLUMNS = [
    ("recipe", "recipe"),
    ("fastload path", "kind"),
    ("torch img/s", "torch_images_per_s"),
    ("fastload img/s", "fastload_images_per_s"),
    ("ratio", "ratio"),
    ("target", "target"),
    ("torch CPU ms/img", "torch_cpu_ms_per_image"),
    ("fastload CPU ms/img", "fastload_cpu_ms_per_image"),
    ("CPU ratio", "cpu_ratio"),
    ("others %", "others_cpu_pct"),
]


def table_rows(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per recipe from the best runs of its two contenders (rows of measure with
    a "recipe" key): img/s and CPU ms/img of both, fastload's path and the ratios (torch's
    CPU time over fastload's: above 1, fastload spends less).

    Example:
        >>> runs = [{"recipe": "preset", "contender": "baseline", "status": "ok", "images_per_s": 100.0,
        ...          "cpu_ms_per_image": 20.0},
        ...         {"recipe": "preset", "contender": "fastload", "status": "ok", "images_per_s": 300.0,
        ...          "cpu_ms_per_image": 5.0, "path": "native: torchvision ImageFolder [...]"}]
        >>> row = table_rows(runs)[0]
        >>> row["kind"], row["ratio"], row["cpu_ratio"], row["target"]
        ('native', 3.0, 4.0, '>= 3x')
    """
    rows: Dict[str, Dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(r["recipe"], {"recipe": r["recipe"], "status": "ok"})
        side = "torch" if r["contender"] == "baseline" else "fastload"
        if r.get("status") != "ok":
            row.setdefault("problems", []).append((side, f"{r.get('status', 'failed')}: {r.get('reason', '')}"))
            continue
        row[f"{side}_images_per_s"] = r["images_per_s"]
        row[f"{side}_cpu_ms_per_image"] = r["cpu_ms_per_image"]
        row[f"{side}_others_cpu_pct"] = r.get("others_cpu_pct")
        if side == "fastload":
            row["path"] = r.get("path", "")
            row["kind"] = path_kind(row["path"])
            row["target"] = f">= {TARGETS[row['kind']]:.0f}x" if row["kind"] in TARGETS else "-"
    for row in rows.values():
        if row.get("torch_images_per_s") and row.get("fastload_images_per_s"):
            row["ratio"] = row["fastload_images_per_s"] / row["torch_images_per_s"]
        if row.get("torch_cpu_ms_per_image") and row.get("fastload_cpu_ms_per_image"):
            row["cpu_ratio"] = row["torch_cpu_ms_per_image"] / row["fastload_cpu_ms_per_image"]
        others = [row.get(f"{side}_others_cpu_pct") for side in ("torch", "fastload")]
        if any(v is not None for v in others):  # the busier of the two runs: how far to trust the ratio
            row["others_cpu_pct"] = max(v for v in others if v is not None)
        problems = row.pop("problems", [])
        if len({text for _, text in problems}) == 1 and len(problems) > 1:  # a skipped recipe: one reason
            row["problems"] = [problems[0][1]]
        else:
            row["problems"] = [f"{side}: {text}" for side, text in problems]
        if "kind" not in row:  # fastload did not run: the reason stands in the path column
            row["status"] = "failed"
            row["reason"] = "; ".join(row["problems"]) or "no run"
    return list(rows.values())


def format_table(rows: List[Dict[str, Any]]) -> str:
    """The recipe table, then each recipe's fastload path (why, for a generic one) and any
    contender that did not run."""
    import textwrap

    from fastload.bench import report

    body = []
    for r in rows:
        cells = []
        for _, key in COLUMNS:
            value = r.get(key)
            if key == "recipe":
                cells.append(str(value))
            elif key == "kind" and value is None:
                cells.append("did not run")
            elif key in ("ratio", "cpu_ratio"):
                cells.append("-" if value is None else f"{value:.2f}x")
            elif key.endswith("images_per_s"):
                cells.append(report.format_value("images_per_s", value))
            else:
                cells.append(report.format_value(key, value))
        body.append(cells)
    header = [title for title, _ in COLUMNS]
    widths = [max(len(x) for x in column) for column in zip(header, *body)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    lines = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(b) for b in body]
    lines.append("fastload paths:")
    for r in rows:
        what = r.get("path") or r.get("reason", "")
        lines.append(textwrap.fill(f"{r['recipe']}: {what}", report.WIDTH, initial_indent="  ",
                                   subsequent_indent="      "))
        for problem in (r.get("problems") or []) if r.get("kind") else []:
            lines.append(textwrap.fill(f"{r['recipe']}: {problem}", report.WIDTH, initial_indent="  ",
                                       subsequent_indent="      "))
    return "\n".join(lines)


def parse_names(value: Optional[str]) -> List[str]:
    """The recipes of `--recipes [NAMES]` (every one for "all" or no value)."""
    if not value or value == "all":
        return list(RECIPES)
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        get(name)
    return names


def run(names: List[str], root: str, contenders: List[str], *, batch_size: int, workers: int, images: int,
        warmup_batches: int, seed: int, repeat: int, timeout: float, progress: bool,
        say: Callable[[str], None] = print) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Measures every recipe with each contender, each run in a fresh process (start-up and
    the first `warmup_batches` batches excluded, as in the main suite), round-robin over
    recipes and contenders `repeat` times.

    Returns:
        (runs: the best run of each (recipe, contender), rows: table_rows of them).
    """
    from fastload.bench import report
    from fastload.bench.measure import MeasureConfig, run_in_subprocess

    runs: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for round_ in range(repeat):
        if repeat > 1:
            say(f"recipes, round {round_ + 1} of {repeat}")
        for name in names:
            recipe = get(name)
            for contender in contenders:
                reason = recipe.unavailable()
                if reason:
                    result = {"contender": contender, "status": "unavailable", "reason": reason}
                else:
                    config = MeasureConfig(
                        contender=contender, root=root, pipeline="train" if recipe.train else "eval",
                        batch_size=batch_size, workers=workers, images=images, warmup_batches=warmup_batches,
                        seed=seed, progress=progress, recipe=name,
                    )
                    result = run_in_subprocess(config, timeout=timeout, forward_stderr=True)
                result["recipe"] = name
                runs.setdefault((name, contender), []).append(result)
                if result.get("status") == "ok":
                    say(f"  {name} / {contender}: {result['images_per_s']:.0f} img/s, "
                        f"{result['cpu_ms_per_image']:.2f} CPU ms/img"
                        + (f", {path_kind(result.get('path', ''))} path" if contender != "baseline" else ""))
                else:
                    say(f"  {name} / {contender}: {result.get('status')}: {result.get('reason')}")
    best = [report.best_run(r) for r in runs.values()]
    return best, table_rows(best)


def listing() -> List[str]:
    """Lines of `fastload-bench --list` for the recipes."""
    return [f"recipe {name:21} {recipe.unavailable() or 'available'}: {recipe.summary}"
            for name, recipe in RECIPES.items()]


def run_suite(args: Any, root: str, say: Callable[[str], None] = print) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The recipes suite of `fastload-bench` (parsed arguments `args`): measures, prints the
    table and returns (the best run of each recipe and contender, the table's rows)."""
    from fastload.bench import contenders as registry

    # Only the contenders that take any Dataset object: a recipe is its dataset object.
    contenders = [c for c in args.contenders if registry.get(c).runs_user_dataset]
    if not contenders:
        say("\nrecipes: none of --contenders takes a Dataset object (baseline, fastload do): nothing to race")
        return [], []
    say(f"\nrecipes: {', '.join(args.recipes)}; {', '.join(contenders)}")
    runs, rows = run(
        args.recipes, root, contenders, batch_size=args.recipe_batch_size, workers=args.recipe_workers,
        images=args.images, warmup_batches=args.warmup_batches, seed=args.seed, repeat=args.repeat,
        timeout=args.timeout, progress=args.progress, say=say,
    )
    say()
    say(f"recipes: the dataset object of each script, torch.utils.data.DataLoader vs fastload.DataLoader on it; "
        f"batch {args.recipe_batch_size}, {args.recipe_workers} workers, {args.images} timed images after "
        f"{args.warmup_batches} warm-up batch(es) (start-up excluded)"
        + (f"; best of {args.repeat} runs" if args.repeat > 1 else "")
        + "; CPU ratio: torch's CPU ms/img over fastload's; target: fully native >= 3x, hybrid >= 2x")
    say(format_table(rows))
    return runs, rows
