"""Where each image's bytes are in a Hugging Face dataset's Arrow table: (file, offset, size) per row.

A table memory-mapped from Arrow cache files keeps each image's bytes at an address of a
file mapping; /proc/self/maps turns the address into (file, offset), so slices,
concatenated cache files and replayed tables need no special case, and a table whose
buffers are not file-mapped is recognised as in memory (its bytes written once to a
temporary file, deleted at exit). A table of paths gives the image files themselves.

Example:
    >>> import pyarrow as pa
    >>> table = pa.table({"image": [{"bytes": None, "path": "/data/a.jpg"}]})
    >>> located = locate(table, "image")
    >>> located.files[located.file_ids[0]], located.sizes.tolist(), located.where
    ('/data/a.jpg', [-1], '1 image file')
"""

from __future__ import annotations

import atexit
import bisect
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


# ---- where each image's bytes are ------------------------------------------------------


class Mappings:
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


class TempBytes:
    """One temporary file holding the image bytes of in-memory tables (written once per
    analysis; removed when its sample index is freed, or at exit)."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="fastload-hf-", suffix=".bin")
        self.file = os.fdopen(fd, "wb")
        self.size = 0
        atexit.register(remove_quietly, self.path)

    def append(self, data: memoryview) -> int:
        at = self.size
        self.file.write(data)
        self.size += len(data)
        return at

    def close(self) -> None:
        self.file.close()


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


@dataclass
class Located:
    """Per row of the dataset's table: where its image bytes are."""

    files: List[str]
    file_ids: np.ndarray  # int64 [rows]
    offsets: np.ndarray  # int64 [rows]
    sizes: np.ndarray  # int64 [rows] (-1: the whole file)
    in_table: np.ndarray  # bool [rows]: bytes in the table (else a path)
    where: str  # "1 Arrow cache file", "10 image files", ...
    temp: Optional[str] = None  # the temporary file of in-memory bytes


class NotLocated(Exception):
    pass


def locate(table: Any, column: str) -> Located:
    """Where each row's image bytes are (table: the pyarrow Table of the dataset's data)."""
    holder: List[TempBytes] = []
    try:
        return locate_rows(table, column, holder)
    except BaseException:
        for temp in holder:  # refused: the temporary file goes now, not at exit
            temp.close()
            remove_quietly(temp.path)
        raise


def locate_rows(table: Any, column: str, holder: List["TempBytes"]) -> Located:
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
            raise NotLocated(f"row {bad} of the table has no image (None)")
        data, paths = chunk.field("bytes"), chunk.field("path")
        has_bytes = ~data.is_null().to_numpy(zero_copy_only=False)
        if has_bytes.any():
            kind = data.type
            wide = pa.types.is_large_binary(kind)
            if not (wide or pa.types.is_binary(kind)):
                raise NotLocated(f"the image bytes are of Arrow type {kind} (binary expected)")
            bounds = bounds_of(data, m)
            first, last = int(bounds[0]), int(bounds[-1])
            values = data.buffers()[2]
            address = (values.address if values is not None else 0) + first
            if mappings is None:
                mappings = Mappings()
            found = mappings.find(address, last - first) if last > first else None
            if found is None:  # in memory: written once to a temporary file
                if temp is None:
                    temp = TempBytes()
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
            paths_of(paths, missing, row, files, file_ids)
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
    return Located(names, file_ids, offsets, sizes, in_table, " + ".join(parts) or "no images",
                    temp.path if temp is not None else None)


def paths_of(paths: Any, rows: np.ndarray, row: int, files: Dict[str, int], file_ids: np.ndarray) -> None:
    """file_ids[row + rows] of the image files named at `rows` of a chunk's path field
    (Arrow strings), checked and made absolute in Arrow's kernels and once per distinct
    path: a table of ImageNet's 1.28M paths costs no Python per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    named = paths if len(rows) == len(paths) else paths.take(pa.array(rows))
    if named.null_count:
        k = int(np.flatnonzero(named.is_null().to_numpy(zero_copy_only=False))[0])
        raise NotLocated(f"row {row + int(rows[k])} of the table has neither image bytes nor a path")
    remote = pc.or_(pc.match_substring(named, "://"), pc.match_substring(named, "::"))
    if pc.any(remote).as_py():
        k = int(np.flatnonzero(remote.to_numpy(zero_copy_only=False))[0])
        raise NotLocated(f"row {row + int(rows[k])} is a remote image ({named[k].as_py()!r}; fastload reads local "
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


def bounds_of(data: Any, m: int) -> Optional[np.ndarray]:
    """The value offsets (int64 [m + 1]) of a binary array of m rows, into its value buffer."""
    import pyarrow as pa

    if m == 0 or data.buffers()[1] is None:
        return None
    wide = pa.types.is_large_binary(data.type)
    bounds = np.frombuffer(data.buffers()[1], dtype=np.int64 if wide else np.int32)
    return bounds[data.offset:data.offset + m + 1].astype(np.int64)
