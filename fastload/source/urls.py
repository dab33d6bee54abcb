"""Where tar shards come from: brace patterns, and remote shards fetched once.

`expand_urls` turns WebDataset's conventions (brace patterns, "::"-separated lists) into
a flat list; `fetch_shard` gives a local path for each: local paths and file:// as they
are, http(s):// with urllib (fsspec's HTTP needs aiohttp), any other scheme through
fsspec; each downloaded once into `cache_dir/shards/` under a temporary name renamed
when complete, with a tqdm bar. The cache key is the URL (`cache_name`).

Example:
    >>> expand_urls("data/train-{000..002}.tar::extra.tar")
    ['data/train-000.tar', 'data/train-001.tar', 'data/train-002.tar', 'extra.tar']
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, List, Optional, Sequence, Union

from fastload.errors import TarShardError

DOWNLOAD_CHUNK = 1 << 20
DOWNLOAD_TIMEOUT_S = 60


def expand_urls(urls: Union[str, Sequence[str]]) -> List[str]:
    """Brace patterns and "::"-separated lists (WebDataset's conventions) to a flat list.

    An empty list gives no shards (a split or a rank with no files); a pattern that expands
    to nothing is a mistake (ValueError).

    Example:
        >>> expand_urls("data/train-{000..002}.tar::extra.tar")
        ['data/train-000.tar', 'data/train-001.tar', 'data/train-002.tar', 'extra.tar']
    """
    from braceexpand import braceexpand

    if isinstance(urls, (str, os.PathLike)):
        urls = [os.fspath(urls)]
    else:
        urls = list(urls)
        if not urls:
            return []
    out: List[str] = []
    for url in urls:
        url = os.fspath(url)
        for part in url.split("::"):
            if part:
                out.extend(braceexpand(part))
    if not out:
        raise ValueError(f"fastload.TarShards: expected at least one shard URL or path, got {urls!r}.")
    return out


def _scheme(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    # A Windows drive letter ("C:\\...") is not a scheme.
    return parsed.scheme.lower() if "://" in url and len(parsed.scheme) > 1 else ""



def cache_name(key: str, name: str) -> str:
    """The file name a cached download or index of `key` gets: a hash of the key, then the
    base name (readable in a listing, and two keys of one name never share a file)."""
    digest = hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{digest}-{os.path.basename(name) or 'shard'}"


def fetch_shard(url: str, cache_dir: str, progress: bool = True) -> str:
    """Local path of a shard: local paths and file:// as they are; others downloaded once.

    A download goes to a temporary file renamed into place when complete, so a cached
    file is always whole (the cache key is the URL: remove the file to refetch it).
    """
    scheme = _scheme(url)
    if scheme in ("", "file"):
        path = urllib.parse.unquote(urllib.parse.urlparse(url).path) if scheme == "file" else url
        if not os.path.isfile(path):
            raise TarShardError(
                f"fastload.TarShards: expected a tar shard at {url!r}, got no such file. "
                "Check the path or the brace pattern.", url, None, "no such file")
        return path

    def download(out) -> None:
        if scheme in ("http", "https"):
            _download_http(url, out, progress)
        else:
            _download_fsspec(url, out, progress)

    return cached_shard(cache_dir, cache_name(url, urllib.parse.urlparse(url).path), download)


def cached_shard(cache_dir: str, name: str, write: Callable[[Any], None]) -> str:
    """cache_dir/shards/name, written by write(binary file) the first time: into a
    temporary file renamed into place when complete, so a cached file is always whole."""
    target_dir = os.path.join(cache_dir, "shards")
    target = os.path.join(target_dir, name)
    if os.path.isfile(target):
        return target
    os.makedirs(target_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".partial-")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def _progress_bar(total: Optional[int], name: str, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"fastload: {name}",
                disable=not progress, leave=False)


def _copy(src, out, total: Optional[int], name: str, progress: bool) -> None:
    with _progress_bar(total, name, progress) as bar:
        while True:
            chunk = src.read(DOWNLOAD_CHUNK)
            if not chunk:
                break
            out.write(chunk)
            bar.update(len(chunk))


def _download_http(url: str, out, progress: bool) -> None:
    # urllib, not fsspec's HTTP filesystem: that one needs aiohttp, which is not a dependency.
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            _copy(response, out, total, os.path.basename(urllib.parse.urlparse(url).path), progress)
            if total is not None and out.tell() != total:
                raise OSError(f"got {out.tell()} of {total} bytes")
    except (urllib.error.URLError, OSError, ValueError) as e:
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        else:
            reason = getattr(e, "reason", None) or e
        raise TarShardError(
            f"fastload.TarShards: cannot download shard {url!r}: {reason}. Check the URL and that "
            "the server is reachable, or download the shards and pass local paths.",
            url, None, f"download failed: {reason}") from e


def _download_fsspec(url: str, out, progress: bool) -> None:
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url)
        try:
            total = int(fs.size(path))
        except Exception:  # some filesystems cannot say; the bar then has no total
            total = None
        with fs.open(path, "rb") as src:
            _copy(src, out, total, os.path.basename(path), progress)
    except ImportError as e:
        raise TarShardError(
            f"fastload.TarShards: cannot open shard {url!r}: {e}. Install the fsspec backend for "
            "this protocol (e.g. s3fs, gcsfs).", url, None, f"no fsspec backend: {e}") from e
    except (OSError, ValueError) as e:
        raise TarShardError(
            f"fastload.TarShards: cannot download shard {url!r}: {e}. Check the URL and your "
            "access to it.", url, None, f"download failed: {e}") from e
