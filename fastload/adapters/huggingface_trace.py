"""A Hugging Face dataset's rows traced as the loader reaches them: `HFLazyTrace`, on fastload.trace's `LazyTrace`.

The dataset's own formatting (`set_transform` / `with_transform`, columns, indices) runs
on a light copy whose image column holds row numbers, with lazy images in place of the
decoded ones; each row's header is read where its bytes are (fastload.source.arrow), so
the EXIF orientation that `datasets` applies is known without decoding.

Example (tests/adapters/test_hf_datasets.py runs the same)::

    from fastload.adapters import analyse

    ds = datasets.load_from_disk("train/").with_transform(transforms)  # 1.28M rows
    trace = analyse(ds).trace          # an HFLazyTrace: 16 rows read and traced
    trace.prepare(range(256))          # what the loader does before each batch
"""

from __future__ import annotations

import copy
import os
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from fastload import trace
from fastload.augment.split import MAX_DEPTH
from fastload.decode.header import HEAD_BYTES, Header, file_header, image_header
from fastload.source.arrow import Located, NotLocated
from fastload.source.index import SampleIndex
from fastload.trace import LazyTrace, collate

# Rows whose formatting (set_transform's function) is traced per call: bounds the lazy
# images alive at once, like a batch of torch's DataLoader.
TRACE_CHUNK = 64


class _Headers:
    """Each table row's image header, read where its bytes are: a pread of the Arrow cache
    (or temporary) file at the row's offset, or the image file of a path. The cache files
    stay open while the trace lives (one open per file, not per row)."""

    def __init__(self, located: Located):
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

    def __init__(self, located: Located):
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


class HFLazyTrace(LazyTrace):
    """A Hugging Face dataset's samples learnt as the loader reaches them
    (fastload.trace.LazyTrace, whose `prepare` / `ahead` / per-sample fallback
    it keeps): up front, the rows of `fastload.trace.PROBES` positions spread over the dataset
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

    Example (tests/adapters/test_hf_datasets.py runs the same)::

        from fastload.adapters import analyse

        ds = datasets.load_from_disk("train/").with_transform(transforms)  # 1.28M rows
        trace = analyse(ds).trace          # an HFLazyTrace: 16 rows read and traced
        trace.prepare(range(256))          # what the loader does before each batch
        trace.traced, trace.fallbacks      # (272, {7: 'row 7 of the table (...) has EXIF orientation 6: ...'})
    """

    kept: Optional[str] = None

    def __init__(self, dataset: Any, column: str, located: Located, rows: np.ndarray, index: SampleIndex,
                 name: str):
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
        probes = trace.probe_indexes(len(dataset))
        found = self._rows(probes, probing=True)
        falls = [(i, f) for i, f in found.items() if isinstance(f, _Fall)]
        traced = [f for _, f in falls if not f.header]
        if traced:
            raise NotLocated(traced[0].why)
        if 4 * len(falls) > len(probes):
            raise NotLocated(falls[0][1].why + (f" ({len(falls)} of the {len(probes)} rows probed)"
                                              if len(probes) > 1 else ""))
        samples = {i: (f.sample if isinstance(f, _Fall) else f) for i, f in found.items()}
        super().__init__(dataset, trace.Probe(samples), index=index)
        self.name = "Hugging Face Dataset"
        self._epochs = 0  # renew() calls so far
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

    # ---- the rows ----

    def _rows(self, positions: List[int], probing: bool) -> Dict[int, Any]:
        """position -> _Sample, or _Fall; NotLocated when the probes say generic."""
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
                        raise NotLocated(why)
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
        call, samples = trace.record(self._positions, tuple(chunk))
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
            raise NotLocated(f"with_format('torch', columns={columns!r}) leaves out the image column {column!r}")
        if fmt["output_all_columns"] and set(columns) != set(dataset.column_names):
            raise NotLocated("with_format('torch', output_all_columns=True) adds columns in python format")
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
                    raise NotLocated(f"row {int(self.rows[i])} is a {head[0]} image: with_format('torch') gives it "
                                   f"{head[0]} channels (the native pipeline makes RGB)")
            shapes = {(h[1], h[2]) for h in upright.values()}
            if len(shapes) != 1:
                raise NotLocated(f"images of {len(shapes)} sizes: torch's default_collate cannot stack them" if shapes
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


def _row_name(located: Located, r: int) -> str:
    name = _RowPath(located.files[int(located.file_ids[r])] + (f":row {r}" if located.in_table[r] else ""))
    name.row = r
    return name


def _source(located: Located, r: int) -> str:
    return located.files[int(located.file_ids[r])]
