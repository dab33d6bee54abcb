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
tracer (fastload/compat/trace.py): `set_transform(fn)` / `with_transform(fn)` get a
batch dict whose image column holds lazy images (no decode, no bytes copied; the
formatting is the dataset's own: its columns, `output_all_columns`, indices), the
transform fastload maps is intercepted where each image enters it, and the rest of each
row is kept exactly as `Dataset.__getitems__` hands it to torch's DataLoader (labels of
a ClassLabel as ints). `.with_format("torch")` (no transform) is the image as a uint8
[C, H, W] tensor: native when the images are RGB and of one size (else torch's
default_collate could not stack them either). Batches are rebuilt in that structure,
so `batch["pixel_values"]`, `batch["label"]` are what torch's DataLoader gives. A
collate_fn that stacks the transformed column is followed too (fastload/compat/collate.py): rows may
then keep their PIL image column, which the collate_fn leaves out.

Each image's header is read (fastload/decode/header.py: no decode for JPEG and PNG) to
know what `datasets` does on decode that the engine must do too: the EXIF orientation (datasets rotates the image, the engine does
not) and the mode (a 3-component JPEG or an RGB PNG is "RGB": a function may pass it to
a transform without `.convert("RGB")`, as it runs).

Not every row is read or traced when the loader is built (`HFLazyTrace`, on
fastload/compat/trace_lazy.py's machinery): the rows of 16 positions spread over the
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

Example (with `datasets` installed, an optional dependency; tests/test_hf_datasets.py
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

import atexit
import bisect
import copy
import os
import sys
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np

from fastload.augment.split import MAX_DEPTH
from fastload.compat import collate, trace
from fastload.compat.datasets import Analysis
from fastload.decode.header import HEAD_BYTES, Header, file_header, image_header
from fastload.source.index import FlatStrings, SampleIndex

# Rows whose formatting (set_transform's function) is traced per call: bounds the lazy
# images alive at once, like a batch of torch's DataLoader.
TRACE_CHUNK = 64
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


# ---- where each image's bytes are ------------------------------------------------------


class _Mappings:
    """The process's file mappings (/proc/self/maps), to turn an address in a
    memory-mapped Arrow buffer into (file, offset)."""

    def __init__(self) -> None:
        self.starts: List[int] = []
        self.rows: List[Tuple[int, int, int, str]] = []  # (start, end, file offset, path)
        try:
            with open("/proc/self/maps") as f:
                lines = f.read().splitlines()
        except OSError:  # not Linux: no file-mapped buffer is found, tables count as in memory
            lines = []
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/") or parts[5].endswith(" (deleted)"):
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            self.rows.append((start, end, int(parts[2], 16), parts[5]))
        self.rows.sort()
        self.starts = [r[0] for r in self.rows]

    def find(self, address: int, size: int) -> Optional[Tuple[str, int]]:
        """(path, file offset) of [address, address + size) when one file mapping holds it."""
        k = bisect.bisect_right(self.starts, address) - 1
        if k < 0:
            return None
        start, end, offset, path = self.rows[k]
        if address + size > end:
            return None
        return path, offset + address - start


class _TempBytes:
    """One temporary file holding the image bytes of in-memory tables (written once per
    analysis; removed when its sample index is freed, or at exit)."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="fastload-hf-", suffix=".bin")
        self.file = os.fdopen(fd, "wb")
        self.size = 0
        atexit.register(_remove, self.path)

    def append(self, data: memoryview) -> int:
        at = self.size
        self.file.write(data)
        self.size += len(data)
        return at

    def close(self) -> None:
        self.file.close()


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


@dataclass
class _Located:
    """Per row of the dataset's table: where its image bytes are."""

    files: List[str]
    file_ids: np.ndarray  # int64 [rows]
    offsets: np.ndarray  # int64 [rows]
    sizes: np.ndarray  # int64 [rows] (-1: the whole file)
    in_table: np.ndarray  # bool [rows]: bytes in the table (else a path)
    where: str  # "1 Arrow cache file", "10 image files", ...
    temp: Optional[str] = None  # the temporary file of in-memory bytes


class _Refusal(Exception):
    pass


def _locate(table: Any, column: str) -> _Located:
    """Where each row's image bytes are (table: the pyarrow Table of the dataset's data)."""
    holder: List[_TempBytes] = []
    try:
        return _locate_rows(table, column, holder)
    except BaseException:
        for temp in holder:  # refused: the temporary file goes now, not at exit
            temp.close()
            _remove(temp.path)
        raise


def _locate_rows(table: Any, column: str, holder: List["_TempBytes"]) -> _Located:
    import pyarrow as pa

    files: Dict[str, int] = {}
    n = table.num_rows
    file_ids = np.zeros(n, np.int64)
    offsets = np.zeros(n, np.int64)
    sizes = np.full(n, -1, np.int64)
    in_table = np.zeros(n, bool)
    mappings, temp = None, None
    kinds = set()
    row = 0
    for chunk in table.column(column).chunks:
        m = len(chunk)
        if m == 0:
            continue
        if chunk.null_count:
            bad = row + int(np.flatnonzero(chunk.is_null().to_numpy(zero_copy_only=False))[0])
            raise _Refusal(f"row {bad} of the table has no image (None)")
        data, paths = chunk.field("bytes"), chunk.field("path")
        has_bytes = ~data.is_null().to_numpy(zero_copy_only=False)
        if has_bytes.any():
            kind = data.type
            wide = pa.types.is_large_binary(kind)
            if not (wide or pa.types.is_binary(kind)):
                raise _Refusal(f"the image bytes are of Arrow type {kind} (binary expected)")
            bounds = _bounds(data, m)
            first, last = int(bounds[0]), int(bounds[-1])
            values = data.buffers()[2]
            address = (values.address if values is not None else 0) + first
            if mappings is None:
                mappings = _Mappings()
            found = mappings.find(address, last - first) if last > first else None
            if found is None:  # in memory: written once to a temporary file
                if temp is None:
                    temp = _TempBytes()
                    holder.append(temp)
                view = memoryview(values)[first:last] if values is not None else memoryview(b"")
                found = (temp.path, temp.append(view))
                kinds.add("memory")
            else:
                kinds.add("arrow")
            path, base = found
            fid = files.setdefault(path, len(files))
            rows = np.flatnonzero(has_bytes)
            file_ids[row + rows] = fid
            offsets[row + rows] = base + bounds[rows] - first
            sizes[row + rows] = bounds[rows + 1] - bounds[rows]
            in_table[row + rows] = True
        missing = np.flatnonzero(~has_bytes)
        if missing.size:
            _paths_of(paths, missing, row, files, file_ids)
            kinds.add("path")
        row += m
    if temp is not None:
        temp.close()
    parts = []
    if "arrow" in kinds:
        arrow = len(set(np.unique(file_ids[in_table]).tolist()) - ({files[temp.path]} if temp else set()))
        parts.append(f"{arrow} Arrow cache file{'s' if arrow != 1 else ''}")
    if "memory" in kinds:
        parts.append("in-memory bytes written to a temporary file")
    if "path" in kinds:
        paths_n = len(np.unique(file_ids[~in_table]))
        parts.append(f"{paths_n} image file{'s' if paths_n != 1 else ''}")
    names = [""] * len(files)
    for path, fid in files.items():
        names[fid] = path
    return _Located(names, file_ids, offsets, sizes, in_table, " + ".join(parts) or "no images",
                    temp.path if temp is not None else None)


def _paths_of(paths: Any, rows: np.ndarray, row: int, files: Dict[str, int], file_ids: np.ndarray) -> None:
    """file_ids[row + rows] of the image files named at `rows` of a chunk's path field
    (Arrow strings), checked and made absolute in Arrow's kernels and once per distinct
    path: a table of ImageNet's 1.28M paths costs no Python per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    named = paths if len(rows) == len(paths) else paths.take(pa.array(rows))
    if named.null_count:
        k = int(np.flatnonzero(named.is_null().to_numpy(zero_copy_only=False))[0])
        raise _Refusal(f"row {row + int(rows[k])} of the table has neither image bytes nor a path")
    remote = pc.or_(pc.match_substring(named, "://"), pc.match_substring(named, "::"))
    if pc.any(remote).as_py():
        k = int(np.flatnonzero(remote.to_numpy(zero_copy_only=False))[0])
        raise _Refusal(f"row {row + int(rows[k])} is a remote image ({named[k].as_py()!r}; fastload reads local "
                       "files)")
    encoded = pc.dictionary_encode(named)
    distinct = encoded.dictionary.to_pylist()
    # os.path.abspath, where it would change a path (relative, or with "." / ".." / "//" parts)
    plain = pc.and_(pc.starts_with(encoded.dictionary, "/"), pc.invert(pc.or_(
        pc.match_substring_regex(encoded.dictionary, r"//|/\./|/\.\./|/\.{1,2}$"),
        pc.ends_with(encoded.dictionary, "/")))).to_numpy(zero_copy_only=False)
    if not files and plain.all():  # the common table (imagefolder's): one dict made at C speed
        files.update(zip(distinct, range(len(distinct))))
        ids = np.arange(len(distinct), dtype=np.int64)
    else:
        ids = np.fromiter((files.setdefault(p if ok else os.path.abspath(p), len(files))
                           for p, ok in zip(distinct, plain)), dtype=np.int64, count=len(distinct))
    file_ids[row + rows] = ids[encoded.indices.to_numpy(zero_copy_only=False)]


# ---- what datasets does on decode: the headers -----------------------------------------


class _Headers:
    """Each table row's image header, read where its bytes are: a pread of the Arrow cache
    (or temporary) file at the row's offset, or the image file of a path. The cache files
    stay open while the trace lives (one open per file, not per row)."""

    def __init__(self, located: _Located):
        self.located = located
        self._fds: Dict[int, int] = {}

    def __call__(self, r: int) -> Optional[Header]:
        located = self.located
        fid = int(located.file_ids[r])
        if not located.in_table[r]:
            return file_header(located.files[fid])
        fd = self._fds.get(fid)
        if fd is None:
            try:
                fd = self._fds[fid] = os.open(located.files[fid], os.O_RDONLY)
            except OSError:
                return None  # (the engine's read names the missing file)
        base, size = int(located.offsets[r]), int(located.sizes[r])
        head = os.pread(fd, min(HEAD_BYTES, size), base)

        def read(offset: int, n: int) -> bytes:
            n = max(0, min(n, size - offset))
            if offset + n <= len(head):
                return head[offset:offset + n]
            return os.pread(fd, n, base + offset)

        return image_header(read, size, head)

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


def _bounds(data: Any, m: int) -> Optional[np.ndarray]:
    """The value offsets (int64 [m + 1]) of a binary array of m rows, into its value buffer."""
    import pyarrow as pa

    if m == 0 or data.buffers()[1] is None:
        return None
    wide = pa.types.is_large_binary(data.type)
    bounds = np.frombuffer(data.buffers()[1], dtype=np.int64 if wide else np.int32)
    return bounds[data.offset:data.offset + m + 1].astype(np.int64)


# ---- the dataset's formatting, traced ---------------------------------------------------


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


def _lazy_feature(image_feature: Any, images: Any) -> Any:
    """An Image feature whose decode_example returns the row's traced image (the light
    table's path field holds the row number)."""
    from datasets import Image

    @dataclass
    class LazyImage(Image):
        def decode_example(self, value: dict, token_per_repo_id: Any = None) -> Any:
            call = trace.active_call()
            row = int(value["path"])
            if call is None:  # (formatting outside a trace: nothing to stand for)
                raise RuntimeError("fastload: a lazy image decoded outside a trace")
            path, mode = images[row]
            return trace.TracedImage(call, path, mode)

    return LazyImage(mode=image_feature.mode, decode=True, id=image_feature.id)


class _RowPath(str):
    """The traced image's path: a readable name for messages, and the table row."""

    row: int


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _flat_row(sample: Dict[str, Any]) -> Optional[Tuple[Dict[str, Any], Any, List[Tuple[Any, ...]], List[str]]]:
    """(template, output, [where], kept image columns) of a row whose columns are plain
    values, one transform output and the image columns kept; None for any other row
    (_outputs_in and trace.templated walk it)."""
    template: Dict[str, Any] = {}
    out, at, kept = None, None, []
    plain, output, image = trace.PLAIN_LEAVES, trace.TracedOutput, trace.TracedImage
    for column, value in sample.items():
        kind = type(value)
        if kind in plain:
            template[column] = value
        elif kind is output and out is None:
            out, at = value, (column,)
            template[column] = trace.SLOT
        elif kind is image:
            kept.append(column)
            template[column] = collate.KEPT
        else:
            return None
    return (template, out, [at], kept) if out is not None else None


def _outputs_in(sample: Any, outputs: List[Any], depth: int = 0) -> List[Any]:
    """The traced outputs inside one row (a dict of columns, at any depth). type(), not
    isinstance: a traced image asked for its __class__ outside a trace turns real."""
    kind = type(sample)
    if kind is trace.TracedOutput:
        return [sample]
    if depth > MAX_DEPTH:
        return []
    if kind is dict:
        return [o for v in sample.values() for o in _outputs_in(v, outputs, depth + 1)]
    if kind is list or kind is tuple:
        return [o for v in sample for o in _outputs_in(v, outputs, depth + 1)]
    return []


def _light(dataset: Any, column: str, images: Any) -> Any:
    """A copy of the dataset whose image column holds row numbers (no bytes), decoded to
    traced images: the dataset's own formatting then runs without reading an image."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from datasets.table import InMemoryTable

    table = dataset.data.table
    n = table.num_rows
    struct_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = pa.StructArray.from_arrays([pa.nulls(n, pa.binary()), pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())],
                                      fields=list(struct_type))
    light_table = table.set_column(table.column_names.index(column), column, rows)
    light = copy.copy(dataset)
    light._data = InMemoryTable(light_table)
    light._info = dataset.info.copy()
    light._info.features[column] = _lazy_feature(dataset.features[column], images)
    return light


def analyse_hf(dataset: Any, *, wrapped: bool) -> Analysis:
    """The compat layer's view of a `datasets.Dataset`: a TracedAnalysis (index + pipeline
    + the rows' structure) when it runs natively, else an Analysis with the reason."""
    fmt = dataset.format
    how = {None: "no transform", "torch": "with_format('torch')"}.get(fmt["type"], f"format {fmt['type']!r}")
    if fmt["type"] == "custom":
        fn = fmt["format_kwargs"].get("transform")
        how = f"with_transform {_fn_name(fn)}"
    out = Analysis(f"Hugging Face Dataset ({how})")
    try:
        return _analyse(dataset, out, how, wrapped)
    except _Refusal as refusal:
        return out.refuse(str(refusal), _FIX)


def _analyse(dataset: Any, out: Analysis, how: str, wrapped: bool) -> Analysis:
    from fastload.compat.torchvision import flatten, split_transform

    if not trace.enabled():
        raise _Refusal(f"the tracer is off ({trace.TRACE_ENV}=0): the dataset's formatting is not traced")
    if wrapped:
        raise _Refusal("a Hugging Face Dataset inside a torch Subset/ConcatDataset (its rows are rebuilt only for the "
                       "loader's own dataset)")
    fmt = dataset.format
    if fmt["type"] not in ("custom", "torch"):
        if fmt["type"] is None:
            raise _Refusal("no set_transform/with_transform/with_format('torch'): rows hold PIL images, which "
                           "torch's default_collate cannot batch")
        raise _Refusal(f"format {fmt['type']!r} is not followed (followed: {_FORMATS})")
    top, nested = _image_columns(dataset.features)
    if nested:
        raise _Refusal(f"column {nested[0]!r} holds images inside a list or dict (followed: one Image column)")
    if len(top) != 1:
        raise _Refusal(f"{len(top)} Image columns (one is followed)" if top else "no Image column")
    column = top[0]
    feature = dataset.features[column]
    if not feature.decode:
        raise _Refusal(f"column {column!r} is Image(decode=False): rows hold bytes and paths, not images")
    if feature.mode not in (None, "RGB"):
        raise _Refusal(f"column {column!r} is Image(mode={feature.mode!r}) (the native pipeline makes RGB)")
    n = len(dataset)
    if n == 0:
        raise _Refusal("the dataset is empty")
    located = _locate(dataset.data.table, column)
    out.chain = out.chain.replace("(", f"({located.where}; ", 1)
    # Sample i is table row rows[i] (an indices mapping: select, shuffle, filter, splits).
    rows = dataset._indices.column("indices").to_numpy().astype(np.int64) if dataset._indices is not None \
        else np.arange(n, dtype=np.int64)
    members = _RowNames(located.in_table, rows) if located.in_table[rows].any() else None
    index = SampleIndex(FlatStrings.from_list(located.files), located.file_ids[rows], located.offsets[rows],
                        located.sizes[rows], np.arange(n, dtype=np.int64), members)
    if located.temp is not None:  # removed with the index (the runner holds it while the loader lives)
        weakref.finalize(index, _remove, located.temp)
    name = f"the transform {_fn_name(fmt['format_kwargs'].get('transform'))}" if fmt["type"] == "custom" else \
        "with_format('torch')"
    lazy = HFLazyTrace(dataset, column, located, rows, index, name)
    transform = lazy.first.transform
    analysis = trace.TracedAnalysis(out.chain)
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


class _Fall(NamedTuple):
    """A sample the engine cannot make as the dataset would: why, and whether it is
    what `datasets` does on decode (an EXIF orientation: `header`, a per-sample fallback
    even among the probes) rather than a trace that disagrees (the probes: generic)."""

    why: str
    header: bool = False
    sample: Any = None  # its trace, when it traced


class _Images:
    """What the light table's lazy images stand for: table row -> (name, mode); the modes
    of the rows being traced, from their headers just read."""

    def __init__(self, located: _Located):
        self.located = located
        self.modes: Dict[int, Optional[str]] = {}

    def __getitem__(self, r: int) -> Tuple[str, Optional[str]]:
        return _row_name(self.located, r), self.modes.get(r)


class _Positions:
    """What the tracer calls: the light dataset's rows at some positions, through
    `Dataset.__getitems__` (what torch's DataLoader calls)."""

    def __init__(self, light: Any):
        self.light = light

    def __getitem__(self, positions: Tuple[int, ...]) -> Any:
        return self.light.__getitems__(list(positions))


def _lazy_trace_base() -> Any:
    from fastload.compat.trace_lazy import LazyTrace

    return LazyTrace


class HFLazyTrace(_lazy_trace_base()):  # type: ignore[misc]
    """A Hugging Face dataset's samples learnt as the loader reaches them
    (fastload.compat.trace_lazy.LazyTrace, whose `prepare` / `ahead` / per-sample fallback
    it keeps): up front, the rows of `trace_lazy.PROBES` positions spread over the dataset
    have their image header read (EXIF orientation, mode, size) and the dataset's own
    formatting traced (decide native or generic; learn the transform and the row's
    structure); every other sample's header and trace come just before the engine gets its
    batch, TRACE_CHUNK rows per `Dataset.__getitems__` call. The sample index is complete
    from the start (the Arrow offsets, vectorised): tracing fills only the rows' templates.

    A sample whose image has an EXIF orientation other than 1 (`datasets` rotates it, the
    engine does not), or whose later trace disagrees with the probes', is made by the
    dataset's own `__getitem__` in Python (one UserWarning names the first; `fallbacks`
    lists them all), the rest natively. When more than a quarter of the probes are rotated,
    the dataset goes generic (most samples would run in Python on the loader's thread).

    Attributes:
        kept_columns: columns whose rows keep the PIL image (`kept`: why torch's
            default_collate cannot batch them, else None).
        first: position 0's trace (transform object, template, where the image sits).

    Example (tests/test_hf_datasets.py runs the same)::

        from fastload.compat.datasets import analyse

        ds = datasets.load_from_disk("train/").with_transform(transforms)  # 1.28M rows
        trace = analyse(ds).trace          # an HFLazyTrace: 16 rows read and traced
        trace.prepare(range(256))          # what the loader does before each batch
        trace.traced, trace.fallbacks      # (272, {7: 'row 7 of the table (...) has EXIF orientation 6: ...'})
    """

    kept: Optional[str] = None

    def __init__(self, dataset: Any, column: str, located: _Located, rows: np.ndarray, index: SampleIndex,
                 name: str):
        from fastload.compat import trace_lazy

        self.column, self.located, self.rows, self.what = column, located, rows, name
        self.rgb = dataset.features[column].mode == "RGB"
        self.kept_columns: set = set()
        self._headers = _Headers(located)
        weakref.finalize(self, self._headers.close)
        self._transform: Any = None  # set by the first row traced (position 0)
        self._slot_at: Any = None
        self._keys: Any = None
        self._size: Optional[Tuple[int, int]] = None  # with_format('torch'): the images' one size
        self.torch = dataset.format["type"] == "torch"
        if self.torch:
            self._torch_setup(dataset)
        else:
            self._images = _Images(located)
            self._positions = _Positions(_light(dataset, column, self._images))
        probes = trace_lazy.probe_indexes(len(dataset))
        found = self._rows(probes, probing=True)
        falls = [(i, f) for i, f in found.items() if isinstance(f, _Fall)]
        traced = [f for _, f in falls if not f.header]
        if traced:
            raise _Refusal(traced[0].why)
        if 4 * len(falls) > len(probes):
            raise _Refusal(falls[0][1].why + (f" ({len(falls)} of the {len(probes)} rows probed)"
                                              if len(probes) > 1 else ""))
        samples = {i: (f.sample if isinstance(f, _Fall) else f) for i, f in found.items()}
        self._start(dataset, trace_lazy.Probe(samples))
        self.name = "Hugging Face Dataset"
        self.index = index
        for i, f in found.items():
            if isinstance(f, _Fall):
                self._fall_back(i, f.why)
            else:
                self._keep(i, f)

    def _point_at_placeholder(self, i: int) -> None:
        """(The file table is the Arrow files', fixed: the engine makes row 0's image in
        the slot of a row made by __getitem__.)"""
        index = self.index
        index.file_ids[i], index.offsets[i], index.sizes[i] = index.file_ids[0], index.offsets[0], index.sizes[0]

    def renew(self, keep: bool = False) -> bool:
        """True for the first epoch (the loader was just built from this analysis) and, with
        `keep`, while the length is the same; else False: the table, its format and the
        transform may change in place between epochs, so each later epoch is analysed anew
        (16 rows read and traced; the sample index vectorised), as cheap as the loader's
        construction."""
        first, self._epochs = self._epochs == 0, self._epochs + 1
        return first or (keep and self.n == len(self.dataset()))

    # ---- LazyTrace's hooks ----

    def _trace(self, todo: List[int]) -> None:
        for i, f in self._rows(todo, probing=False).items():
            if isinstance(f, _Fall):
                self._fall_back(i, f.why)
            else:
                self._keep(i, f)

    def _keep(self, i: int, sample: Any) -> None:
        self.templates[i] = sample.template  # type: ignore[index]
        self.done[i] = True

    def _fallback_warning(self, i: int, why: str) -> str:
        return (f"fastload: Hugging Face Dataset, sample {i}: {why}; this sample (and any other the engine cannot "
                "make as the dataset does) is made by the dataset's own __getitem__ in Python, the rest natively.")

    def trace_all(self, chunk: int = 4096) -> None:
        """Traces every sample not traced yet (a worker process copies the templates)."""
        for start in range(0, self.n, chunk):
            self.prepare(range(start, min(self.n, start + chunk)))

    # ---- the rows ----

    def _rows(self, positions: List[int], probing: bool) -> Dict[int, Any]:
        """position -> _Sample, or _Fall; _Refusal when the probes say generic."""
        import gc

        heads = {i: self._headers(int(self.rows[i])) for i in positions}
        collecting = gc.isenabled()
        gc.disable()  # (as LazyTrace._trace: the collections a trace triggers walk every object)
        try:
            found = self._torch_rows(positions, heads, probing) if self.torch else \
                self._traced_rows(positions, heads, probing)
        finally:
            if collecting:
                gc.enable()
        for i, head in heads.items():
            if head is not None and head.orientation != 1 and not isinstance(found[i], _Fall):
                r = int(self.rows[i])
                found[i] = _Fall(f"row {r} of the table ({_source(self.located, r)}) has EXIF orientation {head.orientation}: "
                                 "datasets rotates it on decode, the native engine does not", True, found[i])
        return found

    def _traced_rows(self, positions: List[int], heads: Dict[int, Any], probing: bool) -> Dict[int, Any]:
        images = self._images
        images.modes = {int(self.rows[i]): ("RGB" if self.rgb or head is None or head[0] == "RGB" else None)
                        for i, head in heads.items()}
        found: Dict[int, Any] = {}
        before = trace.global_rng_state()
        try:
            with trace.tracing_patches():
                for start in range(0, len(positions), TRACE_CHUNK):
                    found.update(self._chunk(positions[start:start + TRACE_CHUNK], probing))
                moved = trace.global_rng_moved(before)
                if moved:
                    why = f"{self.what} draws random numbers outside the transforms ({', '.join(moved)})"
                    if probing:
                        raise _Refusal(why)
                    for i in positions:  # which of them drew: each traced again from the same state
                        trace.global_rng_restore(before)
                        self._chunk([i], probing)
                        if trace.global_rng_moved(before):
                            found[i] = _Fall(why)
        finally:
            trace.global_rng_restore(before)
            images.modes = {}
        return found

    def _chunk(self, chunk: List[int], probing: bool) -> Dict[int, Any]:
        """position -> _Sample or _Fall for the rows of one __getitems__ call; a problem
        of the call as a whole (an exception, ...) is looked for row by row."""
        call, samples = trace.trace_call(self._positions, tuple(chunk))
        problem = None
        if call.problem is not None:
            problem = f"{self.what} (traced, row {chunk[0]}): {call.problem.why} at {call.problem.where}"
        elif not isinstance(samples, list) or len(samples) != len(chunk):
            problem = (f"{self.what} returns {len(samples) if isinstance(samples, list) else samples!r} rows for a "
                       f"batch of {len(chunk)} (one output row per input row is followed)")
        elif len({id(out.image) for out in call.outputs}) != len(call.outputs):
            problem = f"{self.what} passes one image to two transform calls"
        if problem is not None:
            del call, samples
            if len(chunk) > 1:
                found: Dict[int, Any] = {}
                for i in chunk:
                    found.update(self._chunk([i], probing))
                return found
            return {chunk[0]: _Fall(problem)}
        found = {i: self._row(i, sample, call) for i, sample in zip(chunk, samples)}
        call.outputs.clear()  # (each output refers to the call: no cycle left for the collector)
        return found

    def _row(self, i: int, sample: Any, call: Any) -> Any:
        name = self.what
        flat = _flat_row(sample) if type(sample) is dict else None
        if flat is not None:  # the common row: columns of plain values, the output in one of them
            template, out, found, kept = flat
        else:
            outs = _outputs_in(sample, call.outputs)
            if len(outs) != 1:
                return _Fall(f"{name}: row {i} holds {len(outs)} transform outputs (one image per row, through one "
                             "transform call, is followed)")
            out = outs[0]
            kept = []
            if type(sample) is dict:  # the image column left in the row: a collate_fn may drop it
                kept = [c for c, v in sample.items() if type(v) is trace.TracedImage]
                sample = {c: (collate.KEPT if c in kept else v) for c, v in sample.items()}
            found = []
            try:
                template = trace.templated(sample, out, found, ())
            except trace.TraceRefused as refused:
                return _Fall(f"{name}: row {i} {refused.why}; torch's default_collate cannot batch PIL images "
                             "either (delete the image column in the function, or return only the transformed "
                             "columns)")
            if len(found) != 1:
                return _Fall(f"{name}: row {i} returns the transform's output {len(found)} times")
        keys = (list(template), kept) if type(template) is dict else None
        if self._transform is None:  # position 0, the first traced
            self._transform, self._slot_at, self._keys = out.transform, found[0], keys
        elif out.transform is not self._transform:
            return _Fall(f"{name}: row {i} passes its image to another transform object than row 0's "
                         f"({type(out.transform).__name__})")
        elif found[0] != self._slot_at:
            return _Fall(f"{name}: row {i} returns the image in another place than row 0")
        elif keys != self._keys:
            return _Fall(f"{name}: row {i} returns the columns {keys[0] if keys else type(template).__name__} "
                         f"(image column kept: {keys[1] if keys else []}), row 0 {self._keys[0] if self._keys else ''} "
                         f"(kept: {self._keys[1] if self._keys else []})")
        path = trace.traced_image_state(out.image)[1]
        if path.row != self.rows[i]:
            return _Fall(f"{name}: row {i} returns table row {path.row}'s image, not its own (row {int(self.rows[i])})")
        if kept:
            self.kept_columns.update(kept)
        return trace.TracedSample(path, out.transform, template, found[0])

    # ---- with_format('torch') ----

    def _torch_setup(self, dataset: Any) -> None:
        fmt = dataset.format
        column = self.column
        columns = fmt["columns"] if fmt["columns"] is not None else list(dataset.column_names)
        if column not in columns:
            raise _Refusal(f"with_format('torch', columns={columns!r}) leaves out the image column {column!r}")
        if fmt["output_all_columns"] and set(columns) != set(dataset.column_names):
            raise _Refusal("with_format('torch', output_all_columns=True) adds columns in python format")
        rest = [c for c in columns if c != column]
        others = dataset.select_columns(rest) if rest else None
        if others is not None:
            others.set_format("torch", columns=rest)
        self._columns, self._others = columns, others

    def _torch_rows(self, positions: List[int], heads: Dict[int, Any], probing: bool) -> Dict[int, Any]:
        """with_format('torch') without a transform: each row's image is a uint8 [C, H, W]
        tensor of the file as it is (native when RGB and of the probes' one size: torch's
        default_collate could not stack others either); the other columns as the torch
        formatter gives them."""
        upright = {i: h for i, h in heads.items() if h is not None and h[3] in (None, 1)}
        if probing:
            for i, head in upright.items():
                if head[0] != "RGB":
                    raise _Refusal(f"row {int(self.rows[i])} is a {head[0]} image: with_format('torch') gives it "
                                   f"{head[0]} channels (the native pipeline makes RGB)")
            shapes = {(h[1], h[2]) for h in upright.values()}
            if len(shapes) != 1:
                raise _Refusal(f"images of {len(shapes)} sizes: torch's default_collate cannot stack them" if shapes
                               else "no image could be read")
            from torchvision import transforms as T

            self._size = next(iter(shapes))
            self._transform = T.Compose([T.CenterCrop(self._size), T.PILToTensor()])
        column, found = self.column, {}
        for start in range(0, len(positions), TRACE_CHUNK):
            chunk = positions[start:start + TRACE_CHUNK]
            got = self._others.__getitems__(list(chunk)) if self._others is not None else [{} for _ in chunk]
            for i, row in zip(chunk, got):
                r = int(self.rows[i])
                template = {c: (trace.SLOT if c == column else row[c]) for c in self._columns}
                found[i] = trace.TracedSample(_row_name(self.located, r), self._transform, template, (column,))
                head = upright.get(i)
                if head is not None and (head[0] != "RGB" or (head[1], head[2]) != self._size):
                    found[i] = _Fall(f"row {r} is a {head[0]} image of {head[1]}x{head[2]}, the others RGB of "
                                     f"{self._size[0]}x{self._size[1]}: torch's default_collate cannot stack them")
        return found


def _row_name(located: _Located, r: int) -> str:
    name = _RowPath(located.files[int(located.file_ids[r])] + (f":row {r}" if located.in_table[r] else ""))
    name.row = r
    return name


def _source(located: _Located, r: int) -> str:
    return located.files[int(located.file_ids[r])]


