"""The loaders fastload-bench races: one small class each, in one registry.

Every contender produces the same thing from the same folder: batches of
`batch_size` float32 images [B, 3, 224, 224] normalised with ImageNet's mean/std, and
int64 labels [B], with the same number of workers (processes or threads), shuffling for
the train pipeline and full batches only (drop_last). A contender splits its set-up in
two so the bench can time what a user waits for:

- `dataset(config)`: untimed; index the data (scan the folder, list the shards).
- `loader(dataset, config)`: timed with the first batch ("time to first batch").

The batches come one epoch at a time (`epoch(loader, config, epoch)`, a generator that
starts the epoch on its first next()): the bench times whole epochs of small data, each
started after its clock, and counts the epoch starts inside its window.

To add one, subclass Contender, fill in these methods and decorate it with @register.

Example:
    >>> from fastload.bench.contenders import CONTENDERS
    >>> list(CONTENDERS)[:2]
    ['baseline', 'fastload']
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import itertools
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP = 224
RESIZE = 256  # eval: shorter side, then centre crop CROP
PIPELINES = ("train", "eval")


@dataclasses.dataclass
class RunConfig:
    """What one measurement runs: the same for every contender of a table."""

    root: str
    pipeline: str = "train"
    batch_size: int = 128
    workers: int = 2
    seed: int = 0
    shards: List[str] = dataclasses.field(default_factory=list)  # tar shards of root (webdataset)
    dataset_factory: Optional[str] = None  # "module:function" returning the user's Dataset (--dataset)
    recipe: Optional[str] = None  # a training recipe of fastload.bench.recipes (--recipes)

    @property
    def train(self) -> bool:
        return self.pipeline == "train"


class Contender:
    """Base class. Subclasses set `name`, `summary` and implement dataset() and loader()."""

    name = ""
    summary = ""
    needs_shards = False  # the parent makes tar shards of the folder first
    runs_user_dataset = False  # can race on the user's own Dataset (--dataset module:factory) and the recipes

    def unavailable(self) -> Optional[str]:
        """None when this contender can run here, else why not (cheap: no heavy import)."""
        return None

    def dataset(self, config: RunConfig) -> Any:
        raise NotImplementedError

    def loader(self, dataset: Any, config: RunConfig) -> Any:
        raise NotImplementedError

    def epoch(self, loader: Any, config: RunConfig, epoch: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """(images, labels) batches of one epoch. A generator: the loader starts the epoch
        (iter(loader), which primes its prefetch) on the first next(), not before."""
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        for batch in loader:
            yield split_batch(batch)

    def epoch_batches(self, loader: Any, config: RunConfig) -> Optional[int]:
        """Batches per epoch, None when the loader cannot say (no len())."""
        try:
            return int(len(loader))
        except (TypeError, NotImplementedError):
            return None

    def batches(self, loader: Any, config: RunConfig) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """(images, labels) batches, epoch after epoch, without end."""
        for epoch in itertools.count():
            yield from self.epoch(loader, config, epoch)

    def path(self, loader: Any) -> str:
        """Which code path ran (the "path" column)."""
        return "-"


CONTENDERS: Dict[str, Contender] = {}


def register(cls):
    CONTENDERS[cls.name] = cls()
    return cls


def get(name: str) -> Contender:
    if name not in CONTENDERS:
        raise ValueError(
            f"fastload.bench: expected a contender among {', '.join(CONTENDERS)}, got {name!r}. "
            "`fastload-bench --list` shows them."
        )
    return CONTENDERS[name]


def _first_tensor(value: Any) -> Optional[torch.Tensor]:
    """The first tensor of a collated value, depth first through lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple, dict)):
        for item in (value.values() if isinstance(value, dict) else value):
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def split_batch(batch: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) of a collated batch of any shape: (images, labels, ...) tuples and
    lists, dicts (their first two tensors), a bare tensor (no labels: an empty tensor). The
    images of a multi-view batch (((v1, v2), labels), ([crops], labels)) are its first view:
    one row per sample; the labels of a segmentation batch (image, mask) are its masks.

    Example:
        >>> views = [[torch.zeros(4, 3, 8, 8), torch.zeros(4, 3, 8, 8)], torch.arange(4)]
        >>> [tuple(t.shape) for t in split_batch(views)]
        [(4, 3, 8, 8), (4,)]
    """
    if isinstance(batch, torch.Tensor):
        return batch, torch.empty(0, dtype=torch.int64)
    values = list(batch.values()) if isinstance(batch, dict) else list(batch)
    firsts = [_first_tensor(v) for v in values]
    tensors = [t for t in firsts if t is not None]
    if not tensors:
        raise TypeError(f"fastload.bench: expected batches holding tensors, got {type(batch).__name__} of "
                        f"{[type(v).__name__ for v in values]}")
    return tensors[0], tensors[1] if len(tensors) > 1 else torch.empty(0, dtype=torch.int64)


def user_dataset(factory: str) -> Any:
    """The Dataset that `factory` ("module:function", importable from the current folder or
    PYTHONPATH) returns when called without arguments."""
    module_name, _, function_name = factory.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"fastload.bench: expected --dataset as module:function (e.g. mydata:make_train), "
                         f"got {factory!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"fastload.bench: cannot load --dataset {factory!r}: {error}. The module must import "
                         "from the current folder or PYTHONPATH and define that function.") from None
    dataset = function()
    if not hasattr(dataset, "__getitem__") and not hasattr(dataset, "__iter__"):
        raise TypeError(f"fastload.bench: --dataset {factory!r} returned {type(dataset).__name__}, not a Dataset")
    return dataset


def _missing(module: str) -> Optional[str]:
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"not installed ({module} does not import)"


def torchvision_transform(pipeline: str):
    """The torchvision v2 pipeline of the baseline (PIL in, float32 [3, 224, 224] out)."""
    from torchvision.transforms import v2

    if pipeline == "train":
        geometry = [v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip()]
    else:
        geometry = [v2.Resize(RESIZE, antialias=True), v2.CenterCrop(CROP)]
    return v2.Compose(
        geometry
        + [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )


def loader_kwargs(config: RunConfig) -> dict:
    """The DataLoader arguments every torch-style contender gets."""
    return dict(
        batch_size=config.batch_size,
        shuffle=config.train,
        num_workers=config.workers,
        drop_last=True,
        # Users keep workers across epochs; without it a dataset smaller than --images
        # would re-pay worker start-up inside the timed window.
        persistent_workers=config.workers > 0,
    )


@register
class Baseline(Contender):
    name = "baseline"
    summary = "torch DataLoader + torchvision ImageFolder + v2 transforms (PIL decode)"
    runs_user_dataset = True

    def unavailable(self):
        return _missing("torchvision")

    def dataset(self, config):
        if config.dataset_factory:
            return user_dataset(config.dataset_factory)
        if config.recipe:
            from fastload.bench import recipes

            return recipes.dataset(config.recipe, config.root, fastload=self.name != "baseline")
        import torchvision

        return torchvision.datasets.ImageFolder(config.root, transform=torchvision_transform(config.pipeline))

    def loader(self, dataset, config):
        generator = torch.Generator().manual_seed(config.seed)
        return torch.utils.data.DataLoader(dataset, generator=generator, **loader_kwargs(config))

    def path(self, loader):
        return "torch (PIL)"


@register
class FastloadDropIn(Baseline):
    """The baseline's exact code with one import changed: fastload picks its path."""

    name = "fastload"
    summary = "fastload.DataLoader on the same torchvision ImageFolder + transforms (no code change)"

    def loader(self, dataset, config):
        import fastload

        generator = torch.Generator().manual_seed(config.seed)
        return fastload.DataLoader(dataset, generator=generator, **loader_kwargs(config))

    def path(self, loader):
        import fastload

        if fastload.DataLoader is torch.utils.data.DataLoader:
            return "generic (fastload.DataLoader is torch's: stub)"
        return str(getattr(loader, "path", "generic? (loader has no .path)"))


def _native_missing(*names: str) -> Optional[str]:
    """Why fastload's explicit native API cannot run yet (None when it can).

    `names` are attributes of fastload (datasets) that must exist besides the transforms and
    a DataLoader of fastload's own (until it lands, fastload.DataLoader is torch's and a
    native dataset would run its slow per-sample PyTorch twin: not worth timing).
    """
    try:
        import fastload
        from fastload import transforms

        missing = [n for n in names if not hasattr(fastload, n)]
        missing += [
            f"transforms.{n}"
            for n in ("RandomResizedCrop", "RandomHorizontalFlip", "Resize", "CenterCrop", "Normalize")
            if not hasattr(transforms, n)
        ]
    except Exception as error:  # noqa: BLE001 -- a half-written module: say so in the row
        return f"not available yet (import failed: {type(error).__name__}: {error})"[:200]
    if missing:
        return f"not available yet (fastload has no {', '.join(missing)})"
    if fastload.DataLoader is torch.utils.data.DataLoader:
        return "not available yet (fastload.DataLoader is still torch's: no native path)"
    return None


def _native_transforms(config: RunConfig) -> list:
    from fastload import transforms as T

    if config.train:
        geometry = [T.RandomResizedCrop(CROP), T.RandomHorizontalFlip()]
    else:
        geometry = [T.Resize(RESIZE), T.CenterCrop(CROP)]
    # Normalize alone makes float32 in [0, 1] first, as ToTensor would.
    return geometry + [T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def _native_loader(dataset, config: RunConfig):
    import fastload

    kwargs = loader_kwargs(config)
    parameters = inspect.signature(fastload.DataLoader).parameters
    if "dtype" in parameters:  # float32 output like every other contender
        kwargs["dtype"] = torch.float32
    if "seed" in parameters:
        kwargs["seed"] = config.seed
    return fastload.DataLoader(dataset, **kwargs)


@register
class FastloadNative(Contender):
    name = "fastload-native"
    summary = "fastload.ImageFolder(root, transforms=[...]) + fastload.DataLoader (explicit native API)"

    def unavailable(self):
        return _native_missing("ImageFolder")

    def dataset(self, config):
        import fastload

        return fastload.ImageFolder(config.root, transforms=_native_transforms(config))

    def loader(self, dataset, config):
        return _native_loader(dataset, config)

    def path(self, loader):
        return str(getattr(loader, "path", "native? (loader has no .path)"))


@register
class FastloadTar(FastloadNative):
    name = "fastload-tar"
    summary = "fastload.TarShards(shards, transforms=[...]) + fastload.DataLoader (WebDataset tar layout)"
    needs_shards = True

    def unavailable(self):
        return _native_missing("TarShards")

    def dataset(self, config):
        import fastload

        return fastload.TarShards(list(config.shards), transforms=_native_transforms(config))


@register
class DaliCpu(Contender):
    name = "dali-cpu"
    summary = "NVIDIA DALI CPU-only pipeline (device_id=None): ROI decode + resize + crop_mirror_normalize"

    def unavailable(self):
        return _missing("nvidia.dali")

    def dataset(self, config):
        return config.root  # DALI's reader scans the folder itself, inside the timed build

    def loader(self, root, config):
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        mean = [m * 255 for m in IMAGENET_MEAN]
        std = [s * 255 for s in IMAGENET_STD]

        @pipeline_def(batch_size=config.batch_size, num_threads=max(1, config.workers), device_id=None, seed=config.seed + 1)
        def pipeline():
            jpegs, labels = fn.readers.file(file_root=root, random_shuffle=config.train, name="Reader")
            if config.train:
                images = fn.decoders.image_random_crop(
                    jpegs, device="cpu", output_type=types.RGB,
                    random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10,
                )
                images = fn.resize(images, resize_x=CROP, resize_y=CROP)
                mirror = fn.random.coin_flip(probability=0.5)
                crop = None
            else:
                images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
                images = fn.resize(images, resize_shorter=RESIZE)
                mirror, crop = 0, (CROP, CROP)
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", crop=crop, mean=mean, std=std, mirror=mirror
            )
            return images, labels

        pipe = pipeline()
        pipe.build()
        return DALIGenericIterator(
            pipe, ["images", "labels"], reader_name="Reader",
            last_batch_policy=LastBatchPolicy.DROP, auto_reset=True,
        )

    def epoch(self, loader, config, epoch):
        for outputs in loader:  # auto_reset: the next `for` is the next epoch
            yield outputs[0]["images"], outputs[0]["labels"].view(-1).long()

    def path(self, loader):
        import nvidia.dali

        return f"DALI {nvidia.dali.__version__} CPU"


@register
class WebDatasetLoader(Contender):
    name = "webdataset"
    summary = "webdataset tar shards + torch DataLoader + the same v2 transforms (PIL decode)"
    needs_shards = True

    def unavailable(self):
        return _missing("webdataset") or _missing("torchvision")

    def dataset(self, config):
        import webdataset as wds

        return (
            wds.WebDataset(
                config.shards,
                shardshuffle=len(config.shards) if config.train else False,
                workersplitter=wds.split_by_worker,
                nodesplitter=None,
                seed=config.seed,
            )
            .decode("pil")
            .to_tuple("jpg", "cls")
            .map_tuple(torchvision_transform(config.pipeline), int)
            .batched(config.batch_size, partial=False)
        )

    def loader(self, dataset, config):
        return torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=config.workers, persistent_workers=config.workers > 0
        )

    def epoch(self, loader, config, epoch):
        for images, labels in loader:
            yield images, torch.as_tensor(labels)

    def path(self, loader):
        import webdataset

        return f"webdataset {getattr(webdataset, '__version__', '')} (PIL)".replace("  ", " ")


@register
class WebLoaderContender(WebDatasetLoader):
    """The webdataset contender's pipeline through wds.WebLoader (its DataLoader wrapper)."""

    name = "webdataset-webloader"
    summary = "the webdataset contender's pipeline through wds.WebLoader (batch_size=None)"

    def loader(self, dataset, config):
        import webdataset as wds

        return wds.WebLoader(dataset, batch_size=None, num_workers=config.workers,
                             persistent_workers=config.workers > 0)

    def path(self, loader):
        return "wds.WebLoader " + super().path(loader)


@register
class FastloadWebDataset(WebDatasetLoader):
    """The webdataset contender's pipeline, unchanged, through fastload.DataLoader: its
    stages are read back and run on the tar-shard engine (fastload/datasets/webdataset.py)."""

    name = "fastload-webdataset"
    summary = "the webdataset contender's pipeline, unchanged, through fastload.DataLoader (batch_size=None)"

    def unavailable(self):
        return super().unavailable() or _native_missing("TarShards")

    def loader(self, dataset, config):
        import fastload

        return fastload.DataLoader(dataset, batch_size=None, num_workers=config.workers, seed=config.seed)

    def path(self, loader):
        return str(getattr(loader, "path", "generic? (loader has no .path)"))
