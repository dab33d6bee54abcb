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
ManifestError naming the file and the difference (fastload.TarShards checks it).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Optional

from fastload.prepare.writer import create_temp, remove_quietly
from fastload.source.tar import TarShardError

MANIFEST_NAME = "fastload-manifest.json"
FORMAT = "fastload-prepared"
VERSION = 1
STATE_DIR = ".fastload-prepare"
LOCK_NAME = ".fastload-prepare.lock"


class ManifestError(TarShardError):
    """A prepared dataset whose manifest is unreadable, edited, or does not match its shards."""


def digest_of(record: Dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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


def read_manifest(path: str) -> Dict[str, Any]:
    """The manifest at `path` (a file, or the prepared folder), checked for edits.

    Raises:
        ManifestError: unreadable, not a fastload manifest, or its digest does not match.
    """
    if os.path.isdir(path):
        path = os.path.join(path, MANIFEST_NAME)
    fix = "Prepare the dataset again (fastload.prepare), or remove the manifest to read the shards unchecked."
    try:
        with open(path, "r", encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise ManifestError(f"fastload: cannot read the manifest {path!r}: {e}. {fix}", path, None,
                            f"unreadable manifest: {e}") from e
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("version") != VERSION:
        raise ManifestError(
            f"fastload: expected a {FORMAT} manifest of version {VERSION} in {path!r}, got "
            f"{(record.get('format'), record.get('version')) if isinstance(record, dict) else type(record).__name__}. "
            f"{fix}", path, None, "not a fastload manifest")
    if record.get("digest") != digest_of(record):
        raise ManifestError(
            f"fastload: the manifest {path!r} does not match its digest: it was edited after preparation. {fix}",
            path, None, "manifest digest mismatch")
    return record


def shard_record(manifest: Dict[str, Any], shard_name: str) -> Optional[Dict[str, Any]]:
    for shard in manifest.get("shards", []):
        if shard.get("name") == shard_name:
            return shard
    return None


def check_shard(manifest_path: str, manifest: Dict[str, Any], shard_path: str, samples: int,
                full: bool) -> None:
    """Refuses a shard that is not what the manifest recorded (size and sample count; the
    sha256 too when `full`: when the shard's tar index was rebuilt, i.e. the file changed).

    Raises:
        ManifestError: naming the shard, the manifest and the difference.
    """
    record = shard_record(manifest, os.path.basename(shard_path))
    if record is None:
        return
    fix = ("Prepare the dataset again (fastload.prepare resumes and redoes what is missing), or remove "
           f"{MANIFEST_NAME} to read the shards unchecked.")

    def refuse(what: str) -> None:
        raise ManifestError(f"fastload: shard {shard_path!r} does not match the manifest {manifest_path!r}: "
                            f"{what}. {fix}", shard_path, None, f"does not match the manifest: {what}")

    size = os.path.getsize(shard_path)
    if size != record.get("size"):
        refuse(f"expected {record.get('size')} bytes, got {size}")
    if samples != record.get("count"):
        refuse(f"expected {record.get('count')} samples, got {samples}")
    if full:
        from fastload.prepare.writer import file_sha256

        digest, _ = file_sha256(shard_path)
        if digest != record.get("sha256"):
            refuse(f"expected sha256 {record.get('sha256')}, got {digest}")
