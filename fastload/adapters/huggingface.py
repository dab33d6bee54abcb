"""A Hugging Face `datasets.Dataset` with an `Image` column, seen as a sample index + one pipeline.

The engine reads each image's encoded bytes where the Arrow table keeps them, with no
Python per sample:

- bytes in the dataset's Arrow cache files (`load_from_disk`, `.map`, the Hub's Parquet
  converted on download, ...): the table is memory-mapped, so every image's bytes are a
  contiguous run of its file. The value buffer of the image struct's `bytes` child is
  located in the process's file mappings (/proc/self/maps: file and offset of the
  mapping), so sample i is (cache file, offset, size): read with one pread, the same as a
  tar member. Slices, `select`/`shuffle`/`filter` (the indices mapping `ds._indices`) and
  several cache files (a concatenation) all come out of the same table;
- images stored as paths (`{"bytes": None, "path": p}`: `load_dataset("imagefolder",
  data_dir=...)` on local files, `Dataset.from_dict({"image": paths}).cast_column("image",
  Image())`): the files themselves;
- bytes held in memory (an in-memory table: `Dataset.from_dict` of bytes, not saved):
  written once, in table order, to one temporary file (removed with the loader's sample
  index, or at exit), then read as a cache file.

What each sample becomes is learnt by running the dataset's own formatting under the
tracer (fastload/trace/): `set_transform(fn)` / `with_transform(fn)` get a
batch dict whose image column holds lazy images (no decode, no bytes copied; the
formatting is the dataset's own: its columns, `output_all_columns`, indices), the
transform fastload maps is intercepted where each image enters it, and the rest of each
row is kept exactly as `Dataset.__getitems__` hands it to torch's DataLoader (labels of
a ClassLabel as ints). `.with_format("torch")` (no transform) is the image as a uint8
[C, H, W] tensor: native when the images are RGB and of one size (else torch's
default_collate could not stack them either). Batches are rebuilt in that structure,
so `batch["pixel_values"]`, `batch["label"]` are what torch's DataLoader gives. A
collate_fn that stacks the transformed column is followed too (fastload/trace/collate.py): rows may
then keep their PIL image column, which the collate_fn leaves out.

Each image's header is read (fastload/decode/header.py: no decode for JPEG and PNG) to
know what `datasets` does on decode that the engine must do too: the EXIF orientation (datasets rotates the image, the engine does
not) and the mode (a 3-component JPEG or an RGB PNG is "RGB": a function may pass it to
a transform without `.convert("RGB")`, as it runs).

Not every row is read or traced when the loader is built (`HFLazyTrace`, on
fastload/trace/lazy.py's machinery): the rows of 16 positions spread over the
dataset have their header read and their formatting traced, and decide native or
generic; every other row's header and trace come just before the engine gets its batch
(~60 us per row, ~4% of the engine's CPU per ImageNet-sized image: benchmarks/hf_lazy.py).
A row whose image has an EXIF orientation other than 1, or whose later trace disagrees
with the probes', is made by the dataset's own `__getitem__` in Python (one UserWarning
names it; the rest stays native); when more than a quarter of the probed rows are
rotated the dataset goes generic, naming the row.

Not seen through (the generic path, the reason in `loader.path`): no or several Image
columns, an image inside a list or dict, `Image(decode=False)`, `Image(mode=...)` other
than "RGB", a row without an image, remote paths (hf://, https://), formats other than
python + transform and torch ("numpy", "pandas", ...), samples that still hold the PIL
image with torch's default_collate (it cannot batch them), a collate_fn that does more
than stack the images, whatever the tracer refuses in the
function (pixels read, RNG drawn, another transform per row, ...), and a Dataset inside
a torch Subset/ConcatDataset. A streaming `datasets.IterableDataset` has no index: its
order is its own (see `iterable_reason`).

Example (with `datasets` installed, an optional dependency; tests/adapters/test_hf_datasets.py
runs the same)::

    import datasets, fastload
    from torchvision import transforms as T

    ds = datasets.load_dataset("imagefolder", data_dir="train/", split="train")
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])

    def transforms(examples):
        examples["pixel_values"] = [tf(image.convert("RGB")) for image in examples["image"]]
        del examples["image"]
        return examples

    ds.set_transform(transforms)
    loader = fastload.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)
    loader.path  # 'native: Hugging Face Dataset (1000 image files; with_transform transforms) [...]'
    batch = next(iter(loader))  # {"label": int64 [64], "pixel_values": float32 [64, 3, 224, 224]}
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Iterator, List, Optional, Tuple

import numpy as np

from fastload import trace
from fastload.adapters.base import Adapter
from fastload.adapters.huggingface_trace import HFLazyTrace
from fastload.compat.conversion import Analysis
from fastload.source.arrow import NotLocated, locate, remove_quietly
from fastload.source.index import FlatStrings, SampleIndex

_FIX = ("use set_transform/with_transform with a function that maps each image (converted to RGB) through one "
        "torchvision transform, e.g. examples['pixel_values'] = [tf(im.convert('RGB')) for im in "
        "examples['image']]")
_FORMATS = "python with set_transform/with_transform, or with_format('torch')"


def is_hf_dataset(dataset: Any) -> bool:
    """A map-style `datasets.Dataset` (checked without importing `datasets`)."""
    module = sys.modules.get("datasets")
    cls = getattr(module, "Dataset", None) if module is not None else None
    return isinstance(cls, type) and isinstance(dataset, cls)


def _is_hf_iterable(dataset: Any) -> bool:
    module = sys.modules.get("datasets")
    cls = getattr(module, "IterableDataset", None) if module is not None else None
    return isinstance(cls, type) and isinstance(dataset, cls)


def iterable_reason(dataset: Any) -> Optional[str]:
    """The generic path's reason for a streaming `datasets.IterableDataset`, or None when
    `dataset` is not one."""
    if not _is_hf_iterable(dataset):
        return None
    split = getattr(dataset, "_distributed", None)
    where = f"; rank {split.rank} of {split.world_size}'s part (split_dataset_by_node)" if split else ""
    return (f"generic: a Hugging Face IterableDataset (streaming: no index of its images, the order is its own"
            f"{where}; load it map-style (streaming=False) to run natively)")


def split_by_rank(dataset: Any, distributed: Any) -> Any:
    """A streaming Hugging Face IterableDataset split between the DDP ranks, as fastload
    splits a map-style dataset: `datasets.distributed.split_dataset_by_node` with this
    process's rank and world size when the loader runs distributed (see
    fastload.sampling.distributed). Anything else, or one the user split already, comes back
    as it is. Torch's DataLoader would give every rank the whole stream; the ranks' parts
    may differ in length by a few samples (the dataset's own split), so end an epoch with
    a fixed number of steps under DDP."""
    if not _is_hf_iterable(dataset) or distributed is False or getattr(dataset, "_distributed", None):
        return dataset
    from fastload.sampling.distributed import resolve_distributed

    rank, world = resolve_distributed(distributed)
    if world <= 1:
        return dataset
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(dataset, rank=rank, world_size=world)


# ---- what datasets does on decode: the headers -----------------------------------------


def _image_columns(features: Any) -> Tuple[List[str], List[str]]:
    """(top-level Image columns, columns with an Image nested inside)."""
    from datasets import Image

    top, nested = [], []
    for name, feature in features.items():
        if isinstance(feature, Image):
            top.append(name)
        elif "Image(" in repr(feature):
            nested.append(name)
    return top, nested


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def analyse_hf(dataset: Any, *, wrapped: bool) -> Analysis:
    """The compat layer's view of a `datasets.Dataset`: an Analysis (index + pipeline
    + the rows' structure) when it runs natively, else an Analysis with the reason."""
    fmt = dataset.format
    how = {None: "no transform", "torch": "with_format('torch')"}.get(fmt["type"], f"format {fmt['type']!r}")
    if fmt["type"] == "custom":
        fn = fmt["format_kwargs"].get("transform")
        how = f"with_transform {_fn_name(fn)}"
    out = Analysis(f"Hugging Face Dataset ({how})")
    try:
        return _analyse(dataset, out, how, wrapped)
    except NotLocated as refusal:
        return out.refuse(str(refusal), _FIX)


def _analyse(dataset: Any, out: Analysis, how: str, wrapped: bool) -> Analysis:
    from fastload.compat.torchvision import flatten, split_transform

    if not trace.enabled():
        raise NotLocated(f"the tracer is off ({trace.TRACE_ENV}=0): the dataset's formatting is not traced")
    if wrapped:
        raise NotLocated("a Hugging Face Dataset inside a torch Subset/ConcatDataset (its rows are rebuilt only for the "
                       "loader's own dataset)")
    fmt = dataset.format
    if fmt["type"] not in ("custom", "torch"):
        if fmt["type"] is None:
            raise NotLocated("no set_transform/with_transform/with_format('torch'): rows hold PIL images, which "
                           "torch's default_collate cannot batch")
        raise NotLocated(f"format {fmt['type']!r} is not followed (followed: {_FORMATS})")
    top, nested = _image_columns(dataset.features)
    if nested:
        raise NotLocated(f"column {nested[0]!r} holds images inside a list or dict (followed: one Image column)")
    if len(top) != 1:
        raise NotLocated(f"{len(top)} Image columns (one is followed)" if top else "no Image column")
    column = top[0]
    feature = dataset.features[column]
    if not feature.decode:
        raise NotLocated(f"column {column!r} is Image(decode=False): rows hold bytes and paths, not images")
    if feature.mode not in (None, "RGB"):
        raise NotLocated(f"column {column!r} is Image(mode={feature.mode!r}) (the native pipeline makes RGB)")
    n = len(dataset)
    if n == 0:
        raise NotLocated("the dataset is empty")
    located = locate(dataset.data.table, column)
    out.chain = out.chain.replace("(", f"({located.where}; ", 1)
    # Sample i is table row rows[i] (an indices mapping: select, shuffle, filter, splits).
    rows = dataset._indices.column("indices").to_numpy().astype(np.int64) if dataset._indices is not None \
        else np.arange(n, dtype=np.int64)
    members = _RowNames(located.in_table, rows) if located.in_table[rows].any() else None
    index = SampleIndex(FlatStrings.from_list(located.files), located.file_ids[rows], located.offsets[rows],
                        located.sizes[rows], np.arange(n, dtype=np.int64), members)
    if located.temp is not None:  # removed with the index (the runner holds it while the loader lives)
        weakref.finalize(index, remove_quietly, located.temp)
    name = f"the transform {_fn_name(fmt['format_kwargs'].get('transform'))}" if fmt["type"] == "custom" else \
        "with_format('torch')"
    lazy = HFLazyTrace(dataset, column, located, rows, index, name)
    transform = lazy.first.transform
    analysis = Analysis(out.chain)
    analysis.transform = transform
    analysis.pipeline = split_transform(transform, to_run=True)
    analysis.wrappers = flatten(transform)[1]
    analysis.index = index
    analysis.rebuild = analysis.trace = lazy
    if lazy.kept_columns:
        names = ", ".join(repr(c) for c in sorted(lazy.kept_columns))
        lazy.kept = (f"{out.chain}: {name}: rows keep the image column {names} (PIL images), which torch's "
                     "default_collate cannot batch (delete it in the function, or pass a collate_fn that leaves it "
                     "out)")
    return analysis


class _RowNames(FlatStrings):
    """The index's member names ("row r" of the Arrow table, "" for an image file), made
    when a message asks for one: no string per sample is built up front."""

    def __init__(self, in_table: np.ndarray, rows: np.ndarray):
        super().__init__(np.zeros(0, np.uint8), np.zeros(2, np.int64))
        object.__setattr__(self, "in_table", in_table)
        object.__setattr__(self, "rows", rows)

    def __len__(self) -> int:
        return len(self.rows)

    def _at(self, j: int) -> str:
        r = int(self.rows[j])
        return f"row {r}" if self.in_table[r] else ""

    def __iter__(self) -> Iterator[str]:
        return (self._at(j) for j in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        return self.tolist() == (other.tolist() if isinstance(other, FlatStrings) else other)

    __hash__ = None  # type: ignore[assignment]


class HuggingFaceAdapter(Adapter):
    """A `datasets.Dataset` (its Arrow table and formatting), or a streaming
    `datasets.IterableDataset` (generic, split between the DDP ranks)."""

    name = "Hugging Face dataset"
    rows_through_collate = True

    def claims(self, dataset: Any) -> bool:
        return is_hf_dataset(dataset) or _is_hf_iterable(dataset)

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        if _is_hf_iterable(dataset):
            return Analysis(type(dataset).__name__).refuse(iterable_reason(dataset).removeprefix("generic: "))
        return analyse_hf(dataset, wrapped=wrapped)

    def for_ranks(self, dataset: Any, distributed: Any) -> Any:
        return split_by_rank(dataset, distributed)

    def generic_reason(self, dataset: Any) -> Optional[str]:
        return iterable_reason(dataset)
