"""A prepared folder's manifest as a reader sees it: its format, its checks.

fastload.prepare writes `<dst>/fastload-manifest.json` last, when every shard is done
(fastload/prepare/manifest.py has the fields and the write side); fastload.TarShards
reads it here: `read_manifest` refuses an unreadable or edited one (its digest), and
`check_shard` a shard that does not match its record (size, sample count, and sha256
whenever the shard's tar index had to be rebuilt). Both raise ManifestError, naming the
file and the difference.

Example:
    >>> digest_of({"a": 1, "digest": "ignored"}) == digest_of({"a": 1})
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Optional, Tuple

from fastload.errors import TarShardError

MANIFEST_NAME = "fastload-manifest.json"
FORMAT = "fastload-prepared"
VERSION = 1


class ManifestError(TarShardError):
    """A prepared dataset whose manifest is unreadable, edited, or does not match its shards."""


def digest_of(record: Dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_manifest(path: str) -> Dict[str, Any]:
    """The manifest at `path` (a file, or the prepared folder), checked for edits.

    Raises:
        ManifestError: unreadable, not a fastload manifest, or its digest does not match.
    """
    if os.path.isdir(path):
        path = os.path.join(path, MANIFEST_NAME)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ManifestError(f"fastload: cannot read the manifest {path!r}: {e}. {_FIX}", path, None,
                            f"unreadable manifest: {e}") from e
    return parse_manifest(text, path)


_FIX = "Prepare the dataset again (fastload.prepare), or remove the manifest to read the shards unchecked."


def parse_manifest(text: str, path: str) -> Dict[str, Any]:
    """The manifest in `text` (read from `path`, a file or a URL), checked as read_manifest does."""
    fix = _FIX
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as e:
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
        digest, _ = file_sha256(shard_path)
        if digest != record.get("sha256"):
            refuse(f"expected sha256 {record.get('sha256')}, got {digest}")


def file_sha256(path: str) -> Tuple[str, int]:
    """(sha256 hex, size) of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size
