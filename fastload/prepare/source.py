"""What preparation reads: any source fastload reads, as one flat SampleIndex.

An ImageFolder-layout directory, tar shards (a path, brace pattern or list ending in
.tar), fastload.ImageFolder / FileList / TarShards, or a torchvision ImageFolder /
DatasetFolder: all become a SampleIndex (where each sample's bytes are, its label) plus
each sample's name, so worker processes read bytes with SampleIndex.read and nothing
else crosses a process boundary.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, List, Sequence, Union

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
        digest = hashlib.sha256()
        index = self.index
        for i in range(len(index.files)):
            path = index.files[i]
            st = os.stat(path)
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
        for array in (index.file_ids, index.offsets, index.sizes, index.labels):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        digest.update(self.names.data.tobytes())
        return digest.hexdigest()


def as_source(src: Any) -> Source:
    """The Source of anything prepare accepts (see fastload.prepare.prepare's `src`).

    Raises:
        TypeError: a dataset whose samples' bytes cannot be found (e.g. a transformed
            torchvision dataset, or one that only yields decoded images).
        FileNotFoundError: a path that is neither a folder nor tar shards.
    """
    from fastload.source.base import NativeDataset

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
        from fastload.source.folder import ImageFolder

        source = as_source(ImageFolder(os.fspath(src)))
        return Source(source.index, source.names, f"ImageFolder({os.fspath(src)!r}, {len(source)} samples)")
    from fastload.source.tar import TarShards, expand_urls

    urls = expand_urls([os.fspath(s) for s in src] if isinstance(src, (list, tuple)) else os.fspath(src))
    if not all(u.endswith(".tar") or "://" in u for u in urls):
        raise FileNotFoundError(
            f"fastload.prepare: expected an image folder or tar shards (*.tar), got {src!r}. Check the path.")
    shards = TarShards(urls)
    source = as_source(shards)
    return Source(source.index, source.names, f"TarShards({urls[0]!r}..., {len(urls)} shards, {len(source)} samples)")
