"""Object storage through fsspec: byte ranges and object facts, retried with backoff.

`RemoteStore` is one fsspec filesystem (s3fs for s3://, gcsfs for gs://, any other
backend) opened with the ecosystem's own configuration: `storage_options` as fsspec and
s3fs take them, else the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_ENDPOINT_URL, AWS_PROFILE, ...). Every request is retried with exponential backoff
(RETRIES, BACKOFF_S); after the last try the error names the URL, the bytes asked for,
what failed and what to do. A missing object or a refused credential is not retried.

Requests are plain blocking calls (`fs.cat_file(path, start=, end=)`): callers run many
at once on threads (fastload/source/ranges.py), since network waits release the GIL
and s3fs multiplexes them on its own event loop.

Example:
    >>> store = RemoteStore("memory://bucket/a.tar")
    >>> store.fs.pipe_file("/bucket/a.tar", b"0123456789")
    >>> store.read("memory://bucket/a.tar", 2, 5)
    b'234'
"""

from __future__ import annotations

import os
import random
import threading
import time
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

from fastload.errors import TarShardError
from fastload.source.presigned import get_range

# Tries after the first, and the first wait (doubled each time, with up to 50% jitter):
# 0.25 + 0.5 + 1 + 2 s, about 4 s before a dead server is named.
RETRIES = 4
BACKOFF_S = 0.25
# Seconds a request may wait for each answer of the server (connecting, then each read)
# before it fails and is retried: a server that stops answering is named after
# (RETRIES + 1) * TIMEOUT_S plus the backoff, never a hang.
TIMEOUT_S = 30.0
# Environment variables for the defaults of `retries` and `timeout` (read when a store is
# opened): how a dataset that fastload builds itself (a webdataset pipeline's view) is set.
RETRIES_ENV = "FASTLOAD_REMOTE_RETRIES"
TIMEOUT_ENV = "FASTLOAD_REMOTE_TIMEOUT_S"
# Lifetime of a presigned URL (re-signed past half of it).
PRESIGN_S = 3600
# For s3:// when storage_options does not say: connecting fails after at most these
# seconds (botocore's own retries kept short so that fastload's decide how long a
# failure takes).
S3_CONNECT_TIMEOUT_S = 10


def request_settings(retries: Optional[int] = None, timeout: Optional[float] = None) -> Tuple[int, float]:
    """(retries, timeout) with None read from the environment (RETRIES_ENV, TIMEOUT_ENV),
    else RETRIES and TIMEOUT_S; ValueError naming the setting when one is not valid.

    Example:
        >>> request_settings(2, None)
        (2, 30.0)
    """
    if retries is None:
        retries = _env_number(RETRIES_ENV, RETRIES, int)
    if timeout is None:
        timeout = _env_number(TIMEOUT_ENV, TIMEOUT_S, float)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"fastload.TarShards: expected retries to be an int >= 0 (tries after the first), "
                         f"got {retries!r}.")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"fastload.TarShards: expected timeout to be a number of seconds > 0, got {timeout!r}.")
    return retries, float(timeout)


def _env_number(name: str, default: Any, kind: Any) -> Any:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"fastload: expected ${name} to be a number, got {text!r}.") from None


def is_remote(url: str) -> bool:
    """True for a URL with a scheme other than file:// (s3://, gs://, memory://, http://, ...)."""
    parsed = urllib.parse.urlparse(url)
    # A Windows drive letter ("C:\\...") is not a scheme.
    return "://" in url and len(parsed.scheme) > 1 and parsed.scheme.lower() != "file"


def protocol(url: str) -> str:
    """The URL's scheme, lower case ("s3", "gs", "memory", ...)."""
    return urllib.parse.urlparse(url).scheme.lower()


def _options(url: str, storage_options: Optional[Dict[str, Any]], timeout: float) -> Dict[str, Any]:
    options = dict(storage_options or {})
    if protocol(url) in ("s3", "s3a") and "config_kwargs" not in options:
        options["config_kwargs"] = {"connect_timeout": min(S3_CONNECT_TIMEOUT_S, timeout), "read_timeout": timeout,
                                    "retries": {"max_attempts": 2, "mode": "standard"}}
    return options


class RemoteStore:
    """One fsspec filesystem for the shards of one protocol, with retried range reads.

    Args:
        url: any URL of the filesystem (picks the protocol).
        storage_options: fsspec's keyword arguments for the filesystem (s3fs: key,
            secret, endpoint_url, client_kwargs, anon, ...); None: the environment.
        retries: tries after the first one for a failed or timed-out request (None:
            $FASTLOAD_REMOTE_RETRIES, else RETRIES).
        backoff_s: the first wait between tries (doubled each time).
        timeout: seconds a request waits for each answer of the server before it fails
            and is retried (None: $FASTLOAD_REMOTE_TIMEOUT_S, else TIMEOUT_S).
        presign: s3:// ranges by presigned URL and plain HTTP (False: every request
            through s3fs/botocore).

    Attributes:
        requests, bytes_read, retries_made: counters (all threads).
    """

    def __init__(self, url: str, storage_options: Optional[Dict[str, Any]] = None, *, retries: Optional[int] = None,
                 backoff_s: float = BACKOFF_S, timeout: Optional[float] = None, presign: bool = True):
        self.protocol = protocol(url)
        self.storage_options = dict(storage_options or {})
        self.retries, self.timeout = request_settings(retries, timeout)
        self.backoff_s = float(backoff_s)
        # s3:// ranges through presigned URLs (fastload/source/presigned.py); url -> (signed, when)
        self.presign = self.protocol in ("s3", "s3a") and presign
        self._presigned: Dict[str, Tuple[str, float]] = {}
        self.requests = self.bytes_read = self.retries_made = 0
        self._lock = threading.Lock()
        self._fs, self._pid = None, os.getpid()
        self.fs  # opened now: a missing backend is named before anything is read

    @property
    def fs(self) -> Any:
        if self._fs is None or self._pid != os.getpid():
            # A forked child (a DataLoader worker) opens its own: s3fs' event loop and
            # connections do not survive a fork.
            self._pid = os.getpid()
            self._fs = None
            import fsspec

            try:
                # A private instance (not fsspec's shared one): its retry setting is fastload's.
                options = dict(_options(self.protocol + "://", self.storage_options, self.timeout),
                               skip_instance_cache=True)
                self._fs = fsspec.filesystem(self.protocol, **options)
                if self.protocol in ("s3", "s3a") and hasattr(self._fs, "retries"):
                    self._fs.retries = 1  # s3fs' own retry loop: fastload's retries decide instead
            except ImportError as e:
                raise TarShardError(
                    f"fastload.TarShards: cannot open {self.protocol}:// URLs: {e}. Install the fsspec backend for "
                    "this protocol (s3fs for s3://, gcsfs for gs://).", self.protocol + "://", None,
                    f"no fsspec backend: {e}") from e
        return self._fs

    def __getstate__(self):
        # A filesystem object and a lock do not cross processes; the child opens its own.
        state = dict(self.__dict__)
        state["_fs"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def path(self, url: str) -> str:
        """The filesystem's path of a URL ("bucket/key" for s3://bucket/key)."""
        import fsspec.core

        # (A listing's names have no protocol: strip_protocol would read them as local paths.)
        return fsspec.core.strip_protocol(url) if "://" in url else url

    def _endpoint(self) -> str:
        endpoint = getattr(self.fs, "endpoint_url", None) or (
            getattr(self.fs, "client_kwargs", None) or {}).get("endpoint_url")
        return f" (endpoint {endpoint})" if endpoint else ""

    def _retried(self, what: str, url: str, call):
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return call()
            except (FileNotFoundError, PermissionError) as e:
                kind = "no such object" if isinstance(e, FileNotFoundError) else "access refused"
                raise TarShardError(
                    f"fastload.TarShards: cannot read {what} of {url!r}: {kind} ({e}). Check the URL or brace "
                    "pattern, and the credentials (storage_options=, or the AWS_* / cloud environment).",
                    url, None, kind) from e
            except (TarShardError, TypeError, AttributeError):
                raise  # not the network: another try would fail alike
            except Exception as e:  # network, timeout, server errors: all worth another try
                last = e
                if attempt == self.retries:
                    break
                with self._lock:
                    self.retries_made += 1
                time.sleep(delay * (1 + 0.5 * random.random()))
                delay *= 2
        raise TarShardError(
            f"fastload.TarShards: cannot read {what} of {url!r}{self._endpoint()} after {self.retries + 1} tries: "
            f"{type(last).__name__}: {last}. Check that the server is reachable and the network up, or pass "
            "on_error='skip' to leave the samples that cannot be read out.", url, None,
            f"read failed: {type(last).__name__}: {last}") from last

    def _signed(self, url: str, again: bool = False) -> Optional[str]:
        """A presigned URL of the object (s3:// only; None where the filesystem cannot sign),
        made again past half its lifetime or when `again`."""
        now = time.monotonic()
        with self._lock:
            signed = self._presigned.get(url)
        if signed is None or again or now - signed[1] > PRESIGN_S / 2:
            try:
                signed = (self.fs.sign(self.path(url), expiration=PRESIGN_S), now)
            except Exception:  # no credentials to sign with, a filesystem without sign: s3fs reads
                self.presign = False
                return None
            with self._lock:
                self._presigned[url] = signed
        return signed[0]

    def read(self, url: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object at url; TarShardError naming it after the retries.

        s3:// through a presigned URL and a plain HTTP range GET (fastload/source/presigned.py
        says why), other protocols through the filesystem's cat_file."""
        path = self.path(url)

        def call() -> bytes:
            signed = self._signed(url) if self.presign else None
            if signed is not None:
                try:
                    return get_range(signed, start, end, self.timeout)
                except PermissionError:  # an expired signature: once more with a fresh one
                    return get_range(self._signed(url, again=True) or signed, start, end, self.timeout)
            data = self.fs.cat_file(path, start=start, end=end)
            if len(data) != end - start:
                raise OSError(f"got {len(data)} bytes of {end - start}")
            return data

        data = self._retried(f"bytes {start}-{end}", url, call)
        with self._lock:
            self.requests += 1
            self.bytes_read += len(data)
        return data

    def write_file(self, path: str, url: str) -> None:
        """Uploads the local file `path` to `url` (whole, replacing it), retried as reads are."""
        self._retried("an upload", url, lambda: self.fs.put_file(path, self.path(url)))
        with self._lock:
            self.requests += 1

    def read_object(self, url: str) -> Optional[bytes]:
        """The whole object at url, or None when there is none (FileNotFoundError)."""
        path = self.path(url)

        def call() -> Optional[bytes]:
            try:
                return self.fs.cat_file(path)
            except FileNotFoundError:
                return None

        data = self._retried("the object", url, call)
        with self._lock:
            self.requests += 1
            self.bytes_read += len(data or b"")
        return data

    def identity(self, url: str) -> Dict[str, Any]:
        """{"size": bytes, "tag": the ETag (else the modification time)}: what a cached
        member index of the object must match."""
        path = self.path(url)
        info = self._retried("the object's size", url, lambda: self.fs.info(path))
        with self._lock:
            self.requests += 1
        return _identity_of(info)

    def identities(self, urls: List[str]) -> List[Optional[Dict[str, Any]]]:
        """identity() of many objects with one listing per folder where the filesystem
        lists (None for a URL the listing did not show: ask identity() for it)."""
        folders: Dict[str, List[Tuple[int, str]]] = {}
        for i, url in enumerate(urls):
            folders.setdefault(url.rsplit("/", 1)[0], []).append((i, self.path(url)))
        out: List[Optional[Dict[str, Any]]] = [None] * len(urls)
        for folder, members in folders.items():
            if len(members) < 2:
                continue
            try:
                self.fs.invalidate_cache(self.path(folder))
                listing = {self.path(e["name"]): e for e in self.fs.ls(self.path(folder), detail=True)}
                with self._lock:
                    self.requests += 1
            except Exception:  # no listing (permissions, a filesystem without folders): one by one
                continue
            for i, path in members:
                if path in listing and listing[path].get("type", "file") == "file":
                    out[i] = _identity_of(listing[path])
        return out


def _identity_of(info: Dict[str, Any]) -> Dict[str, Any]:
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("LastModified") \
        or info.get("mtime") or info.get("created")
    return {"size": int(info["size"]), "tag": str(tag) if tag is not None else None}
