"""A preparation whose destination is in object storage: made in a local staging folder,
then uploaded, the manifest last.

`fastload.prepare(src, "s3://bucket/prepared/train", storage_options=...)` writes and
resumes exactly as for a local folder, in `<cache_dir>/prepare/<hash of the URL>-<name>/`
(fastload's cache root, `default_cache_dir()`), then uploads every shard and its index
(an object of the same size already there is kept: an interrupted upload resumes), and
the manifest once they are all there, so a reader that finds the manifest finds its
shards. `fastload.TarShards("s3://bucket/prepared/train")` reads it back by range.

Example:
    >>> staging_folder("s3://bucket/prepared/train", "/tmp/cache").endswith("-train")
    True
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from fastload.source.manifest import MANIFEST_NAME
from fastload.source.remote import RemoteStore
from fastload.source.urls import cache_name


def staging_folder(url: str, cache_dir: str) -> str:
    """The local folder a preparation for `url` is made in (kept: a rerun resumes there)."""
    return os.path.join(cache_dir, "prepare", cache_name(url, url.rstrip("/")))


def upload(folder: str, url: str, names: List[str], storage_options: Optional[Dict[str, Any]] = None) -> int:
    """Uploads `names` (files of `folder`: shards and their indexes) to `url`/<name>, then
    the folder's manifest; returns how many files were sent (objects of the same size
    already there are kept). TarShardError names the object that could not be written."""
    url = url.rstrip("/")
    store = RemoteStore(url, storage_options)
    # Sizes of what is there: one listing (nothing there yet is an empty listing).
    there = {u: i for u, i in zip([f"{url}/{n}" for n in names], store.identities([f"{url}/{n}" for n in names]))
             if i is not None}
    sent = 0
    for name in names:
        target = f"{url}/{name}"
        if target in there and there[target]["size"] == os.path.getsize(os.path.join(folder, name)):
            continue
        store.write_file(os.path.join(folder, name), target)
        sent += 1
    store.write_file(os.path.join(folder, MANIFEST_NAME), f"{url}/{MANIFEST_NAME}")  # last: the shards are there
    return sent + 1
