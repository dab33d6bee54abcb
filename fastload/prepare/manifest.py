"""The manifest of a prepared dataset: every setting, the source, every shard, every skip.

`<dst>/fastload-manifest.json`, written last (atomically) when every shard is done:

    format, version        "fastload-prepared", 1
    settings               the encode settings (mode, max_side, quality, raw_fraction,
                           restart_rows, seed), samples_per_shard, name, on_error
    source                 description, samples, fingerprint (fastload.prepare.source)
    shards                 [{name, sha256, size, count, first_sample, kinds}] in order
    skipped                [{sample, source, reason}]: every sample left out (on_error="skip")
    exploit                what a loader may rely on: "segments" (JPEGs carry their
                           restart-segment index), "pixel_identical" (lossless mode)
    fastload               the version that wrote it
    digest                 sha256 of the canonical JSON of everything above

While a preparation runs, each finished shard's record is kept in
`<dst>/.fastload-prepare/<shard>.json` (with the settings and fingerprint it was made
under), so that an interrupted run resumes with the shards it finished, and it holds a
flock on `<dst>/.fastload-prepare.lock` (the file stays; loaders never read it).

A manifest whose digest does not match (edited), or whose shards do not match it (size,
count, and sha256 whenever the shard's tar index had to be rebuilt), is refused with a
ManifestError naming the file and the difference (fastload.TarShards checks it, with
fastload/source/manifest.py: the format, the reading and the checks; this module writes).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from fastload.prepare.writer import create_temp, remove_quietly
from fastload.source.manifest import FORMAT, MANIFEST_NAME, VERSION, digest_of

STATE_DIR = ".fastload-prepare"
LOCK_NAME = ".fastload-prepare.lock"


def write_json_atomic(path: str, record: Dict[str, Any]) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = create_temp(folder, ".fastload-tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def write_manifest(dst: str, record: Dict[str, Any]) -> str:
    """Writes the manifest (its digest added) atomically; returns its path."""
    record = dict(record, format=FORMAT, version=VERSION)
    record["digest"] = digest_of(record)
    path = os.path.join(dst, MANIFEST_NAME)
    write_json_atomic(path, record)
    return path
