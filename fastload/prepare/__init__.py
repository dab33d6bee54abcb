"""fastload.prepare: one-time preparation of a dataset into shards fastload reads faster.

`fastload.prepare(src, dst, ...)` (this module is callable: it is the function
fastload.prepare.prepare) and the `fastload-prepare` command. Modules, one job each:

| module | job |
| --- | --- |
| `source.py` | any source fastload reads as one flat SampleIndex, and its fingerprint |
| `encode.py` | one image in its prepared form (lossless transcode, resize + re-encode, raw) |
| `segments.py` | the restart-segment index a prepared JPEG carries in its header |
| `writer.py` | one shard, written atomically, deterministic bytes |
| `manifest.py` | the manifest written: settings, source fingerprint, shards, skipped (read and checked by fastload/source/manifest.py) |
| `run.py` | the plan of shards, the worker processes, resume, the progress bar |
| `cli.py` | `fastload-prepare` |
"""

from __future__ import annotations

import sys
import types

from fastload.errors import FolderInUse
from fastload.prepare.run import Prepared, prepare
from fastload.prepare.segments import read_segments
from fastload.source.manifest import MANIFEST_NAME, ManifestError, read_manifest

__all__ = ["prepare", "Prepared", "ManifestError", "FolderInUse", "read_manifest", "read_segments",
           "MANIFEST_NAME"]


class _CallableModule(types.ModuleType):
    """Lets `fastload.prepare(src, dst)` call the function while `fastload.prepare` stays
    the package (importing a submodule sets the package as fastload's attribute)."""

    def __call__(self, *args, **kwargs) -> Prepared:
        return prepare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
