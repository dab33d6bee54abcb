"""What preparation reads: any source fastload reads, as one flat SampleIndex.

An ImageFolder-layout directory, tar shards (a path, brace pattern or list ending in
.tar), fastload.ImageFolder / FileList / TarShards, or a torchvision ImageFolder /
DatasetFolder: all become a SampleIndex (where each sample's bytes are, its label) plus
each sample's name, so worker processes read bytes with Source.read and nothing else
crosses a process boundary.

A file that cannot be opened (a dangling or looping symbolic link, no permission) is a
bad sample like a corrupt image, not a crash: the fingerprint records it, and reading it
raises UnreadableSample with a short reason, which prepare raises or lists under on_error.
"""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple, Union

import numpy as np

from fastload.source.index import FlatStrings, SampleIndex


@dataclass(frozen=True)
class Source:
    """The samples to prepare, in order.

    Attributes:
        index: where each sample's encoded bytes are, and its label.
        names: each sample's file or member name (its extension says the format).
        description: what was given, for the manifest and messages.
    """

    index: SampleIndex
    names: FlatStrings
    description: str

    def __len__(self) -> int:
        return len(self.index)

    def fingerprint(self) -> str:
        """A hash of what the source holds: every file's path, size and mtime, and every
        sample's place and label. A changed, added or removed file changes it."""
        return self.stat_files()[0]

    def stat_files(self) -> Tuple[str, List[Tuple[int, str]]]:
        """(the fingerprint, [(sample, reason)] for every file that cannot be stat'ed).

        An unreadable file enters the fingerprint as its path and errno, so the same
        broken link gives the same fingerprint (and a resumed run keeps its shards);
        `sample` is the first sample the file holds.
        """
        digest = hashlib.sha256()
        index = self.index
        failed: List[Tuple[int, str]] = []  # (file, reason)
        for i in range(len(index.files)):
            path = index.files[i]
            try:
                st = os.stat(path)
                line = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n"
            except OSError as error:
                line = f"{path}\0unreadable\0{error.errno}\n"
                failed.append((i, unreadable_reason(path, error, "cannot open")))
            digest.update(line.encode("utf-8", "surrogateescape"))
        for array in (index.file_ids, index.offsets, index.sizes, index.labels):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        digest.update(self.names.data.tobytes())
        unreadable: List[Tuple[int, str]] = []
        if failed:
            files, first = np.unique(index.file_ids, return_index=True)
            first_sample = dict(zip(files.tolist(), first.tolist()))
            unreadable = [(first_sample[f], reason) for f, reason in failed if f in first_sample]
        return digest.hexdigest(), unreadable

    def read(self, i: int) -> bytes:
        """The encoded bytes of sample i (SampleIndex.read's read: the whole file, or
        `size` bytes at `offset` of a shard).

        Raises:
            UnreadableSample: the file cannot be opened or read, or ends before the sample's
                last byte; `reason` says which, without the sample's name.
        """
        index = self.index
        path = index.files[int(index.file_ids[i])]
        size, offset = int(index.sizes[i]), int(index.offsets[i])
        try:
            f = open(path, "rb")
        except OSError as error:
            raise UnreadableSample(unreadable_reason(path, error, "cannot open")) from error
        with f:
            try:
                data = f.read() if size < 0 else os.pread(f.fileno(), size, offset)
            except OSError as error:
                raise UnreadableSample(unreadable_reason(path, error, "cannot read")) from error
        if 0 <= size != len(data):
            raise UnreadableSample(f"expected {size} bytes at offset {offset}, the file ends after {len(data)} "
                             "(truncated?)")
        return data


class UnreadableSample(Exception):
    """A sample whose bytes cannot be read; `reason` says why (for messages and the manifest)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def unreadable_reason(path: str, error: OSError, what: str) -> str:
    """Why `path` cannot be opened, in words: the system's, and what a link points at."""
    reason = f"{what}: {error.strerror or error}"
    if error.errno == errno.ELOOP:
        return reason + " (a symbolic link that leads back to itself, directly or through others)"
    if error.errno == errno.ENOENT and os.path.islink(path):
        try:
            return reason + f" (a symbolic link to {os.readlink(path)!r}, which does not exist)"
        except OSError:
            pass
    return reason


def as_source(src: Any) -> Source:
    """The Source of anything prepare accepts (see fastload.prepare.prepare's `src`).

    Raises:
        TypeError: a dataset whose samples' bytes cannot be found (e.g. a transformed
            torchvision dataset, or one that only yields decoded images).
        FileNotFoundError: a path that is neither a folder nor tar shards.
    """
    from fastload.datasets.base import NativeDataset

    if isinstance(src, (str, os.PathLike)) or (isinstance(src, (list, tuple)) and src and
                                               all(isinstance(s, (str, os.PathLike)) for s in src)):
        return _path_source(src)
    if isinstance(src, NativeDataset):
        index = src.index
        if index.members is not None:
            names = index.members
        else:
            names = FlatStrings.from_list([index.files[int(f)] for f in index.file_ids])
        return Source(index, names, f"{type(src).__name__}({len(index)} samples)")
    samples = getattr(src, "samples", None)
    if isinstance(samples, list) and all(isinstance(s, tuple) and len(s) >= 2 and isinstance(s[0], str)
                                         for s in samples[:1]):
        if getattr(src, "transform", None) is not None:
            # The transform changes pixels prepare never sees: preparing the files would
            # silently drop it. Training transforms belong to the loader.
            raise TypeError(
                f"fastload.prepare: expected a torchvision ImageFolder without a transform, got one with "
                f"{src.transform!r}. Prepare the untransformed dataset and pass the transforms to "
                "fastload.TarShards.")
        target_transform = getattr(src, "target_transform", None)
        paths = [s[0] for s in samples]
        labels = [int(target_transform(s[1]) if target_transform else s[1]) for s in samples]
        root = getattr(src, "root", "")
        return Source(SampleIndex.from_files(paths, labels), FlatStrings.from_list(paths),
                      f"{type(src).__name__}({root!r}, {len(paths)} samples)")
    raise TypeError(
        f"fastload.prepare: expected an image folder, tar shards, a fastload ImageFolder/FileList/TarShards "
        f"or a torchvision ImageFolder, got {type(src).__name__}. Write other datasets with "
        "fastload.write_shards first.")


def _path_source(src: Union[str, os.PathLike, Sequence[Any]]) -> Source:
    if isinstance(src, (str, os.PathLike)) and os.path.isdir(src):
        from fastload.datasets.folder import ImageFolder

        source = as_source(ImageFolder(os.fspath(src)))
        return Source(source.index, source.names, f"ImageFolder({os.fspath(src)!r}, {len(source)} samples)")
    from fastload.datasets.tar import TarShards
    from fastload.source.urls import expand_urls

    urls = expand_urls([os.fspath(s) for s in src] if isinstance(src, (list, tuple)) else os.fspath(src))
    if not all(u.endswith(".tar") or "://" in u for u in urls):
        raise FileNotFoundError(
            f"fastload.prepare: expected an image folder or tar shards (*.tar), got {src!r}. Check the path.")
    shards = TarShards(urls)
    source = as_source(shards)
    return Source(source.index, source.names, f"TarShards({urls[0]!r}..., {len(urls)} shards, {len(source)} samples)")
