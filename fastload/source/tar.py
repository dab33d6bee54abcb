"""WebDataset tar shards as a random-access native dataset.

A shard is a plain tar whose members are grouped into samples by key: the member name up
to the first dot of its file name, directory included (`train/n01/abc.jpg` and
`train/n01/abc.cls` are sample `train/n01/abc`). Each sample has one image (jpg, jpeg, png,
webp) and one label (cls: an integer as text; json: an integer, or an object with "label"
or "cls"; txt: an integer as text); other members are ignored.

Instead of streaming shards through a shuffle buffer, an index of (offset, size) of every
member is built once per shard by walking the tar headers, cached (beside the shard, or in
cache_dir when that is read-only or the shard is remote) and validated against the shard's
size, mtime, ctime, inode and a hash of a few of its blocks; a stale or corrupt index is
rebuilt, never trusted. With it, every image is a (shard, offset, size) triple in a
SampleIndex: the C++ engine reads it with one pread, and shuffling is global. Remote
shards (http(s)://, or any fsspec URL) are downloaded once into cache_dir, with a tqdm
progress bar, then read locally.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from fastload.errors import ErrorPolicy
from fastload.source.base import NativeDataset, transforms_argument, transforms_repr
from fastload.source.index import FlatStrings, SampleIndex

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")  # preference order when a key has several
# Also read as images, after those: ppm (raw pixels, fastload.prepare's raw_fraction) and
# the formats fastload.prepare stores as they are.
PREPARED_IMAGE_EXTS = ("ppm", "bmp", "tiff", "gif")
# Preference order when a key has several; the first that holds an integer label wins
# (a txt member is often a caption, a json member often metadata without a label).
LABEL_EXTS = ("cls", "json", "txt")
INDEX_FORMAT = "fastload-tar-index"
# 2: the shard's inode, ctime and a fingerprint of sampled header blocks are checked too.
INDEX_VERSION = 2
INDEX_SUFFIX = ".idx.json"
# Label members are read while indexing and their text kept in the index; anything longer
# than this is not a label (a caption, a whole metadata record) and is refused.
MAX_LABEL_BYTES = 64 * 1024
# Extended headers (GNU long names, pax records) are read whole while indexing; real ones
# hold a path and a few numbers, so anything larger is a corrupt or hostile size field.
MAX_EXTENDED_BYTES = 1 << 20
# Labels are stored as int64 and used as class indices (torch's cross-entropy wants >= 0).
MAX_LABEL = (1 << 63) - 1
# Member header blocks hashed into the index's fingerprint (plus the first and last blocks).
FINGERPRINT_MEMBERS = 16
DOWNLOAD_CHUNK = 1 << 20
DOWNLOAD_TIMEOUT_S = 60


class TarShardError(ValueError):
    """A shard or one of its members is unusable.

    Attributes:
        shard: the shard's URL or path.
        member: the member name inside the shard, or None for the whole shard.
        reason: what is wrong.
    """

    def __init__(self, message: str, shard: str, member: Optional[str] = None, reason: str = ""):
        super().__init__(message)
        self.shard, self.member, self.reason = shard, member, reason or message

    def __reduce__(self):
        return (TarShardError, (str(self), self.shard, self.member, self.reason))


class Skipped(NamedTuple):
    """A sample (or part of a shard) left out with on_error="skip"."""

    shard: str
    member: Optional[str]
    reason: str


def default_cache_dir() -> str:
    """$FASTLOAD_CACHE, else $XDG_CACHE_HOME/fastload, else ~/.cache/fastload."""
    if os.environ.get("FASTLOAD_CACHE"):
        return os.environ["FASTLOAD_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastload")


# ---------------------------------------------------------------------------------------
# URLs


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


def _cache_name(key: str, name: str) -> str:
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
    target_dir = os.path.join(cache_dir, "shards")
    target = os.path.join(target_dir, _cache_name(url, urllib.parse.urlparse(url).path))
    if os.path.isfile(target):
        return target
    os.makedirs(target_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".download-")
    try:
        with os.fdopen(fd, "wb") as out:
            if scheme in ("http", "https"):
                _download_http(url, out, progress)
            else:
                _download_fsspec(url, out, progress)
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


# ---------------------------------------------------------------------------------------
# The member index of one shard


def scan_shard(path: str) -> Dict[str, Any]:
    """Walks the tar headers of one shard: every regular member's name, data offset, size.

    Returns the index record (plain JSON data): names, offsets, sizes, the text of label
    members, and `problems` ([member or None, reason]) for a truncated or unreadable tar.
    """
    st = os.stat(path)
    try:
        walk = _walk_headers(path, st.st_size)
    except _Unsupported:  # an unusual tar (sparse files, global pax paths): the slow, general walk
        walk = _walk_tarfile(path, st.st_size)
    names, offsets, sizes, labels_text, problems = walk
    return {
        "format": INDEX_FORMAT, "version": INDEX_VERSION, **_identity(st),
        "fingerprint": _fingerprint(path, offsets), "names": names, "offsets": offsets, "sizes": sizes,
        "labels_text": labels_text, "problems": problems,
    }


def _identity(st: os.stat_result) -> Dict[str, int]:
    """What a cached index must match of its shard's stat.

    Size and mtime alone miss a shard rewritten with its mtime restored (tar -x, rsync,
    touch -r): a rewrite in place changes the ctime, which no one can set back, and a new
    file put in its place has a new inode. A copied shard (new inode) is indexed again.
    """
    return {"shard_size": st.st_size, "shard_mtime_ns": st.st_mtime_ns, "shard_ctime_ns": st.st_ctime_ns,
            "shard_inode": st.st_ino}


def _fingerprint(path: str, offsets: Sequence[int]) -> str:
    """A hash of a few blocks of the shard, for where ctime says nothing (some file systems).

    The first block, the last 1024 bytes (the end-of-archive marker) and, for up to
    FINGERPRINT_MEMBERS members spread over the shard, the header block just before the
    member's data and its first data block: a renamed, resized, moved or relabelled
    sampled member changes it. About 20 small preads per shard.
    """
    n = len(offsets)
    picks = sorted({i * (n - 1) // (FINGERPRINT_MEMBERS - 1) for i in range(FINGERPRINT_MEMBERS)}) if n else []
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        digest.update(os.pread(fd, 512, 0))
        for i in picks:
            digest.update(os.pread(fd, 1024, max(0, int(offsets[i]) - 512)))
        digest.update(os.pread(fd, 1024, max(0, size - 1024)))
    finally:
        os.close(fd)
    return digest.hexdigest()


class _Walk:
    """What a header walk collects."""

    def __init__(self):
        self.names: List[str] = []
        self.offsets: List[int] = []
        self.sizes: List[int] = []
        self.labels_text: Dict[str, str] = {}
        self.problems: List[List[Optional[str]]] = []
        self.last: Optional[str] = None

    def member(self, name: str, offset: int, size: int, shard_size: int, read) -> bool:
        """Records one regular member; False when it is cut (the walk stops)."""
        if size < 0 or offset < 0:
            self.problems.append([name, f"unreadable tar header {self.where()}: a member of {size} bytes "
                                        f"at byte {offset}"])
            return False
        if offset + size > shard_size:
            self.problems.append([name, f"truncated: the member needs bytes up to {offset + size}, "
                                        f"the shard has {shard_size}"])
            return False
        if _split_key(name)[1] in LABEL_EXTS:
            if size > MAX_LABEL_BYTES:
                self.problems.append([name, f"a label member of {size} bytes (at most {MAX_LABEL_BYTES})"])
                return True
            self.labels_text[str(len(self.names))] = read(offset, size).decode("utf-8", "replace")
        self.names.append(name)
        self.offsets.append(offset)
        self.sizes.append(size)
        self.last = name
        return True

    def where(self) -> str:
        return f"after member {self.last!r}" if self.last else "at its start"

    def result(self):
        return self.names, self.offsets, self.sizes, self.labels_text, self.problems


class _Unsupported(Exception):
    """A tar feature the fast walk leaves to tarfile."""


_REGULAR = (b"0", b"\0", b"7")
_EXTENDED = (b"L", b"K", b"x", b"X", b"g")  # X: Solaris' pax header, read like x (as tarfile does)
_OCTAL_DIGITS = frozenset(b"01234567")


def _octal(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256; ValueError when neither."""
    if field[:1] and field[0] & 0x80:  # GNU base-256 (sizes of 8 GiB and more)
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip(b" ")
    # int(text, 8) alone would also take a sign, "0o" and underscores.
    if not _OCTAL_DIGITS.issuperset(text):
        raise ValueError(f"a non-octal number field {text[:12]!r}")
    return int(text, 8) if text else 0


def _pax_size(text: str) -> int:
    # pax sizes are decimal; a sign or anything else would move the walk backwards or nowhere.
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ValueError(f"a pax size {text[:40]!r} (expected a non-negative decimal number)")
    return int(text)


def _walk_headers(path: str, shard_size: int):
    """The fast header walk: one pread per header, ~10x quicker than tarfile.

    Follows what tarfile reads (ustar prefix, GNU long names, pax path/size records) and
    raises _Unsupported for anything else; the result is checked against tarfile in tests.
    Every size is checked before it is used (non-negative, inside the shard, extended
    headers at most MAX_EXTENDED_BYTES), so the walk always moves forward and never reads
    more than the shard holds: a hostile header ends the walk with a problem, nothing else.
    """
    walk = _Walk()
    fd = os.open(path, os.O_RDONLY)
    read = lambda offset, size: os.pread(fd, size, offset)  # noqa: E731
    try:
        pos = 0
        long_name: Optional[str] = None
        pax: Dict[str, str] = {}
        pax_at = 0  # where the pax header of the next member is
        pending = False  # an extended header (L, x) waits for its member
        while True:
            header = read(pos, 512)
            if len(header) < 512:
                if pending:
                    walk.problems.append([walk.last, f"truncated {walk.where()}: an extended header "
                                                     "without its member"])
                elif pos == 0:
                    walk.problems.append([None, "truncated or unreadable tar at its start: "
                                                + ("empty file" if not header else "truncated header")])
                else:
                    walk.problems.append([walk.last, f"truncated {walk.where()}: the shard ends at byte "
                                                     f"{shard_size} without the tar end-of-archive marker"])
                break
            if header.count(0) == 512:
                if pending:
                    walk.problems.append([walk.last, f"truncated {walk.where()}: an extended header "
                                                     "without its member"])
                else:
                    tail = read(pos, 1024)
                    if pos == 0 and (len(tail) < 1024 or tail.count(0) != 1024):
                        walk.problems.append([None, "truncated or unreadable tar at its start: empty header"])
                    elif len(tail) < 1024 or tail.count(0) != 1024:
                        walk.problems.append([walk.last, f"truncated {walk.where()}: the shard ends at byte "
                                                         f"{shard_size} without the tar end-of-archive marker"])
                break
            try:
                checksum = _octal(header[148:156])
                size = _octal(header[124:136])
            except ValueError:
                checksum = size = -1
            unsigned = sum(header[:148]) + 256 + sum(header[156:])  # the field counts as 8 spaces
            if (checksum != unsigned and checksum != unsigned - 256 * sum(b > 127 for b in header)) or size < 0:
                if pos == 0:
                    walk.problems.append([None, "truncated or unreadable tar at its start: bad checksum "
                                                "(not a tar file?)"])
                else:
                    walk.problems.append([walk.last, f"unreadable tar header at byte {pos} {walk.where()}"])
                break
            kind = header[156:157]
            data = pos + 512
            if kind in _EXTENDED:  # their payload is read whole: bounded first
                if size > MAX_EXTENDED_BYTES:
                    walk.problems.append([walk.last, f"unreadable tar header at byte {pos} {walk.where()}: "
                                                     f"an extended header of {size} bytes (at most "
                                                     f"{MAX_EXTENDED_BYTES})"])
                    break
                payload = read(data, size)
                if len(payload) < size:
                    walk.problems.append([walk.last, f"truncated {walk.where()}: an extended header "
                                                     "without its member"])
                    break
                try:
                    records = _parse_pax(payload) if kind in (b"x", b"X", b"g") else {}
                except ValueError as e:
                    walk.problems.append([walk.last, f"unreadable tar header at byte {pos} {walk.where()}: {e}"])
                    break
                pos = data + (size + 511) // 512 * 512
                if kind == b"L":  # GNU long name of the next member
                    long_name = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                elif kind in (b"x", b"X"):  # pax records of the next member
                    pax, pax_at = records, data - 512
                elif kind == b"g" and set(records) & {"path", "size"}:
                    raise _Unsupported("global pax path/size")
                pending = pending or kind in (b"L", b"x", b"X", b"K")
                continue
            name = header[0:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            prefix = header[345:500].split(b"\0", 1)[0]
            if prefix and header[257:263] == b"ustar\0":  # POSIX: the name is prefix/name
                name = prefix.decode("utf-8", "surrogateescape") + "/" + name
            if long_name is not None:
                name = long_name
            if "path" in pax:
                name = pax["path"]
            if "size" in pax:
                try:
                    size = _pax_size(pax["size"])
                except ValueError as e:
                    walk.problems.append([name, f"unreadable tar header at byte {pax_at} {walk.where()}: {e}"])
                    break
            pos = data + (size + 511) // 512 * 512  # size >= 0: always forward
            long_name, pax, pending = None, {}, False
            if data + size > shard_size and kind not in _REGULAR:  # (members say it themselves)
                walk.problems.append([name, f"truncated: the member needs bytes up to {data + size}, "
                                            f"the shard has {shard_size}"])
                break
            if kind in _REGULAR:
                if name.endswith("/") and kind == b"\0":
                    continue  # an old-style directory
                if "\0" in name:  # only a pax path can hold one; no file system takes it
                    walk.problems.append([name, "a member name with a NUL byte"])
                    continue
                if not walk.member(name, data, size, shard_size, read):
                    break
            elif kind == b"S":
                raise _Unsupported("GNU sparse member")
            # Links, directories and unknown types (skipped by their size, as tarfile does)
            # are not samples.
    finally:
        os.close(fd)
    return walk.result()


def _parse_pax(buf: bytes) -> Dict[str, str]:
    """The records ("<length> <key>=<value>\\n") of a pax header; ValueError when malformed."""
    records: Dict[str, str] = {}
    pos = 0
    while pos < len(buf) and buf[pos] != 0:
        space = buf.find(b" ", pos, pos + 21)
        digits = buf[pos:space]
        if space < 0 or not digits.isdigit():
            raise ValueError(f"a pax record without its length at byte {pos} of the header")
        length = int(digits)
        end = pos + length
        if end > len(buf) or length < len(digits) + 3 or buf[end - 1] != 0x0A:
            raise ValueError(f"a pax record of a bad length ({length}) at byte {pos} of the header")
        key, eq, value = buf[space + 1:end - 1].partition(b"=")
        if not eq or not key:
            raise ValueError(f"a pax record without 'key=' at byte {pos} of the header")
        if key == b"hdrcharset":
            raise _Unsupported("pax hdrcharset")
        records[key.decode("utf-8")] = value.decode("utf-8", "surrogateescape")
        pos = end
    return records


class _BoundedReads:
    """A file for tarfile whose reads beyond MAX_EXTENDED_BYTES and seeks outside the shard
    are refused (tarfile.ReadError).

    tarfile reads an extended header's whole payload (and, for a negative size, the rest
    of the file) in one call, and seeks wherever a size field points; while walking
    headers nothing legitimate is that large or leaves the file.
    """

    def __init__(self, f, size: int):
        self._f, self._size = f, size

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > MAX_EXTENDED_BYTES:
            raise tarfile.ReadError(f"a header announcing {n} bytes")
        return self._f.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0 and not 0 <= offset <= self._size:
            raise tarfile.ReadError(f"a header moving to byte {offset} of a {self._size}-byte shard")
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()


def _walk_tarfile(path: str, shard_size: int):
    """The general walk (Python's tarfile): every format tarfile reads.

    Bounded like the fast walk: reads are capped, and a member that does not move the walk
    forward, or has a negative size, ends it with a problem.
    """
    walk = _Walk()
    with open(path, "rb") as f:
        def read(offset, size):
            f.seek(offset)
            return f.read(size)
        previous = -1
        try:
            with tarfile.open(fileobj=_BoundedReads(f, shard_size), mode="r:") as tf:
                for m in tf:
                    if m.offset <= previous or m.size < 0 or m.offset_data < m.offset:
                        walk.problems.append([m.name, f"unreadable tar header at byte {m.offset} "
                                                      f"{walk.where()}: a size of {m.size}"])
                        break
                    previous = m.offset
                    if m.isreg() and not walk.member(m.name, m.offset_data, m.size, shard_size, read):
                        break
                else:
                    _check_end_of_archive(f, tf.offset, shard_size, walk.last, walk.problems)
        except (tarfile.TarError, EOFError, ValueError, OverflowError, RecursionError) as e:
            walk.problems.append([walk.last, f"truncated or unreadable tar {walk.where()}: {e}"])
    return walk.result()


def _check_end_of_archive(f, offset: int, size: int, last: Optional[str], problems: list) -> None:
    # tarfile stops silently at a short or garbled header past the first member; a whole
    # tar ends with two zero blocks, so anything else there means the shard was cut.
    f.seek(offset)
    tail = f.read(1024)
    where = f"after member {last!r}" if last else "at its start"
    if len(tail) < 1024:
        problems.append([last, f"truncated {where}: the shard ends at byte {size} without the tar "
                               "end-of-archive marker"])
    elif tail.count(0) != len(tail):
        problems.append([last, f"unreadable tar header at byte {offset} {where}"])


def _split_key(name: str) -> Tuple[str, str]:
    """("dir/abc", "jpg") for "dir/abc.jpg": key up to the first dot of the file name."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:].lower()


def _valid_index(record: Any, st: os.stat_result, path: str) -> bool:
    try:
        if not (isinstance(record, dict) and record.get("format") == INDEX_FORMAT
                and record.get("version") == INDEX_VERSION
                and all(record.get(k) == v for k, v in _identity(st).items())):
            return False
        names, offsets, sizes = record["names"], record["offsets"], record["sizes"]
        if not (isinstance(names, list) and isinstance(offsets, list) and isinstance(sizes, list)
                and len(names) == len(offsets) == len(sizes)):
            return False
        if not all(isinstance(n, str) for n in names):
            return False
        off = np.asarray(offsets, dtype=np.int64)
        siz = np.asarray(sizes, dtype=np.int64)
        if len(off) and (off.min() < 512 or siz.min() < 0 or (off + siz).max() > st.st_size):
            return False
        labels = record["labels_text"]
        if not (isinstance(labels, dict) and all(isinstance(v, str) and k.isdigit() and int(k) < len(names)
                                                 for k, v in labels.items())):
            return False
        problems = record["problems"]
        if not (isinstance(problems, list) and all(isinstance(p, list) and len(p) == 2 for p in problems)):
            return False
        return record["fingerprint"] == _fingerprint(path, offsets)
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return False


def _index_paths(path: str, cache_dir: str) -> List[str]:
    """Where the index of a shard may live: beside it, then in the cache."""
    return [path + INDEX_SUFFIX,
            os.path.join(cache_dir, "index", _cache_name(os.path.realpath(path), path) + INDEX_SUFFIX)]


def load_index(path: str, cache_dir: str) -> Tuple[Dict[str, Any], str]:
    """(index record, "cached" | "built") for one local shard.

    A cached index is used only if it parses, matches the shard's size, mtime, ctime and
    inode and the fingerprint of a few of its blocks, and is self-consistent; otherwise the
    shard is scanned again and the index rewritten (beside the shard if its folder is
    writable, else in cache_dir).
    """
    st = os.stat(path)
    candidates = _index_paths(path, cache_dir)
    for candidate in candidates:
        try:
            with open(candidate, "r", encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError, RecursionError):
            continue
        if _valid_index(record, st, path):
            return record, "cached"
    record = scan_shard(path)
    for candidate in candidates:
        if _write_atomic(candidate, record):
            break
    return record, "built"


def _write_atomic(target: str, record: Dict[str, Any]) -> bool:
    folder = os.path.dirname(target) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        # Not mkstemp: its 0600 would hide the index from other accounts reading a shared
        # folder; O_CREAT's mode is 0o666 less the umask, as for the shard beside it.
        tmp = os.path.join(folder, ".fastload-idx-" + os.urandom(6).hex())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:  # read-only folder: try the next place
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, separators=(",", ":"))
        os.replace(tmp, target)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def _parse_label(text: str, ext: str) -> int:
    """The class index a label member holds; ValueError saying why when there is none."""
    if ext == "json":
        try:
            value = json.loads(text)
        except RecursionError:
            raise ValueError("a JSON label nested too deeply") from None
        if isinstance(value, dict):
            for field in ("label", "cls"):
                if field in value:
                    value = value[field]
                    break
            else:
                raise ValueError('a JSON object without "label" or "cls"')
        if isinstance(value, bool) or not isinstance(value, int):
            stripped = value.strip() if isinstance(value, str) else ""
            if stripped.lstrip("-").isascii() and stripped.lstrip("-").isdigit():
                return _class_index(int(stripped))
            raise ValueError(f"a non-integer label {_short(value)}")
        return _class_index(value)
    stripped = text.strip()
    try:
        value = int(stripped)
    except ValueError:
        raise ValueError(f"a non-integer label {_short(stripped)}") from None
    return _class_index(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 42 else text[:40] + "..."


def _class_index(value: int) -> int:
    # Labels are class indices in an int64 tensor: torch's cross-entropy rejects negatives
    # (other than its ignore_index, which a dataset should not hold) deep inside training.
    if value < 0:
        raise ValueError(f"a negative label {value} (class indices are >= 0, as torch's cross-entropy expects)")
    if value > MAX_LABEL:
        raise ValueError(f"a label {_short(value)} beyond int64 (class indices are < 2**63)")
    return value


# ---------------------------------------------------------------------------------------


def _prepared_shards(urls: Union[str, Sequence[str]]) -> Union[str, Sequence[str]]:
    """A folder written by fastload.prepare stands for its shards, in the manifest's order."""
    if isinstance(urls, (str, os.PathLike)) and os.path.isdir(urls):
        from fastload.prepare.manifest import MANIFEST_NAME, read_manifest

        folder = os.fspath(urls)
        if not os.path.isfile(os.path.join(folder, MANIFEST_NAME)):
            raise TarShardError(
                f"fastload.TarShards: expected tar shards, or a folder written by fastload.prepare (with "
                f"{MANIFEST_NAME}), got the folder {folder!r} without one. Pass the shards' paths or a brace "
                "pattern.", folder, None, "a folder without a manifest")
        return [os.path.join(folder, shard["name"]) for shard in read_manifest(folder)["shards"]]
    return urls


def _check_manifest(path: str, samples: int, rebuilt: bool, manifests: Dict[str, Any]) -> None:
    """Refuses a shard that a fastload.prepare manifest beside it describes otherwise.

    Size and sample count always; the sha256 too when the shard's tar index had to be
    rebuilt (the shard changed since it was indexed), so an unchanged shard costs no read.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in manifests:
        from fastload.prepare.manifest import MANIFEST_NAME, read_manifest

        manifest_path = os.path.join(folder, MANIFEST_NAME)
        manifests[folder] = (manifest_path, read_manifest(manifest_path)) if os.path.isfile(manifest_path) else None
    if manifests[folder] is not None:
        from fastload.prepare.manifest import check_shard

        check_shard(*manifests[folder], path, samples, full=rebuilt)


class TarShards(NativeDataset):
    """WebDataset-layout tar shards, random-access, on fastload's native pipeline.

    Args:
        urls: a path or URL, a brace pattern ("train-{0000..0127}.tar"), "::"-separated
            lists of them, or a list. Local paths, file://, http(s):// and any fsspec URL
            (memory://, s3://, ... with its backend installed). A folder written by
            fastload.prepare stands for its shards (its manifest lists them); shards beside
            such a manifest are checked against it (size, sample count, and sha256 when a
            shard changed since it was indexed), and refused with a ManifestError if not
            as recorded.
        transforms: a list of specs from fastload.transforms (torchvision transforms
            with an equivalent are converted), or a torchvision Compose (v1 or v2) or one
            transform; applied to every image.
        cache_dir: fastload's cache folder (default: $FASTLOAD_CACHE, else
            $XDG_CACHE_HOME/fastload, else ~/.cache/fastload). Remote shards are
            downloaded into `cache_dir/shards/`. Each shard's member index is read from
            and written to `<shard>.idx.json` beside the shard (where fastload.prepare
            writes it) when the shard's folder is writable; when it is read-only, to
            `cache_dir/index/<hash of the shard's real path>-<shard name>.idx.json`, so
            shards of the same name in other folders never share an index. Either index
            is used only while it matches the shard (size, mtime, ctime, inode and a
            hash of a few blocks), else rebuilt.
        on_error: "raise": a truncated shard, an image without a label (or the reverse),
            a bad label raise TarShardError naming the shard and member. "skip": such
            samples are left out and listed in `skipped`. An ErrorPolicy is taken as its
            choice; `dataset.on_error` is then the choice's string.
        seed: base of the random augmentation parameters (the loader overrides it).
        progress: show a tqdm bar while downloading.
        ops: the older name of `transforms` (same meaning; pass one of the two).

    Attributes:
        shards: the local path of every shard (downloaded copies for remote ones).
        urls: the expanded URLs, in the same order.
        keys: the sample keys, e.g. "train/n01/abc": a read-only sequence of str
            (FlatStrings: indexing, slicing, len, iteration as on a list; stored flat).
        classes: the classes, as torchvision's ImageFolder.classes, so that
            `len(dataset.classes)` is the number of outputs a classifier needs. The
            shards' labels are class indices (integers), and neither the shards nor
            fastload.prepare's manifest record class names, so `classes` is the list
            of ints `[0, 1, ..., largest label]` (`classes[label] == label`; an index
            that no sample has is still listed, as a class with no sample in this
            split); [] for an empty dataset.
        class_to_idx: {class: index} for `classes` (here each int maps to itself).
        targets: every sample's label, a list of ints (as torchvision's ImageFolder).
        index: the SampleIndex (shard, offset, size, label per sample) the engine reads.
        skipped: a list of Skipped(shard, member, reason) left out by on_error="skip".
        index_status: "cached" or "built" per shard, for this construction.
        duplicates: per shard, how many image or label members were superseded by a later
            member of the same name. As `tar -x` does, the last copy wins (an appended correction
            replaces the original); a UserWarning says so once per shard that has any.

    An empty list of shards, or shards without a single sample, give an empty dataset
    (len 0, as torch's loaders expect for a split or rank with no files); the latter warns.

    Example:
        >>> import fastload
        >>> from fastload import transforms as T
        >>> ds = fastload.TarShards("shards/train-{0000..0127}.tar",
        ...                         transforms=[T.RandomResizedCrop(224), T.RandomHorizontalFlip()])  # doctest: +SKIP
        >>> image, label = ds[0]   # image: float32 [3, 224, 224]; label: int    # doctest: +SKIP
        >>> num_classes = len(ds.classes)                                        # doctest: +SKIP
    """

    def __init__(self, urls: Union[str, Sequence[str]], transforms: Optional[Sequence[Any]] = None, *,
                 cache_dir: Optional[str] = None, on_error: Union[str, ErrorPolicy] = "raise", seed: int = 0,
                 progress: bool = True, ops: Optional[Sequence[Any]] = None):
        # Both checked before any shard is fetched or indexed.
        self.error_policy = ErrorPolicy(on_error, owner="fastload.TarShards")
        transforms = transforms_argument(transforms, ops, "fastload.TarShards")
        self.on_error = self.error_policy.mode  # the plain string, as given
        self.urls = expand_urls(_prepared_shards(urls))
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else default_cache_dir()
        self.skipped: List[Skipped] = []
        self.index_status: List[str] = []
        self.duplicates: List[int] = []
        self.shards = [fetch_shard(url, self.cache_dir, progress) for url in self.urls]

        file_ids: List[np.ndarray] = [np.zeros(0, dtype=np.int64)]  # the empty dataset's arrays
        offsets: List[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        sizes: List[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        labels: List[int] = []
        members: List[str] = []
        keys: List[str] = []
        manifests: Dict[str, Any] = {}
        for shard_id, (url, path) in enumerate(zip(self.urls, self.shards)):
            record, status = load_index(path, self.cache_dir)
            self.index_status.append(status)
            rows, shard_members, shard_keys, shard_labels = self._samples_of(url, record)
            _check_manifest(path, len(rows), status == "built", manifests)
            file_ids.append(np.full(len(rows), shard_id, dtype=np.int64))
            offsets.append(np.asarray([r[0] for r in rows], dtype=np.int64))
            sizes.append(np.asarray([r[1] for r in rows], dtype=np.int64))
            labels.extend(shard_labels)
            members.extend(shard_members)
            keys.extend(shard_keys)
        if not labels and self.urls:
            warnings.warn(
                f"fastload.TarShards: expected samples (an image and a label per key) in "
                f"{len(self.urls)} shard(s), got none ({len(self.skipped)} skipped): the dataset is "
                f"empty. Check the shards' layout: image {'/'.join(IMAGE_EXTS)} + label "
                f"{'/'.join(LABEL_EXTS)}.", UserWarning, stacklevel=2)
        index = SampleIndex(
            files=FlatStrings.from_list(self.shards), file_ids=np.concatenate(file_ids),
            offsets=np.concatenate(offsets), sizes=np.concatenate(sizes),
            labels=np.asarray(labels, dtype=np.int64), members=FlatStrings.from_list(members))
        self.keys = FlatStrings.from_list(keys)
        super().__init__(index, transforms, seed)

    @functools.cached_property
    def classes(self) -> List[int]:
        """[0, 1, ..., largest label] (see the class's docstring); [] when empty."""
        labels = self.index.labels
        return list(range(int(labels.max()) + 1)) if len(labels) else []

    @functools.cached_property
    def class_to_idx(self) -> Dict[int, int]:
        """{class: index} for `classes`: each label maps to itself."""
        return {c: c for c in self.classes}

    def _problem(self, url: str, member: Optional[str], reason: str, fix: str) -> None:
        where = f"member {member!r} of shard {url!r}" if member else f"shard {url!r}"
        self.error_policy.handle(TarShardError(f"fastload.TarShards: {where}: {reason}. {fix}", url, member, reason))
        self.skipped.append(Skipped(url, member, reason))

    def _samples_of(self, url: str, record: Dict[str, Any]):
        """Groups one shard's members into samples: ([(offset, size)], members, keys, labels)."""
        skip_fix = "Pass on_error='skip' to leave such samples out."
        for member, reason in record["problems"]:
            self._problem(url, member, reason, "Re-create or re-download the shard, or " + skip_fix[0].lower() + skip_fix[1:])
        names, offs, sizs, texts = record["names"], record["offsets"], record["sizes"], record["labels_text"]
        groups: Dict[str, Dict[str, int]] = {}  # samples in the order their keys first appear
        superseded: Dict[str, int] = {}
        for i, name in enumerate(names):
            key, ext = _split_key(name)
            if ext in IMAGE_EXTS or ext in PREPARED_IMAGE_EXTS or ext in LABEL_EXTS:
                exts = groups.setdefault(key, {})
                if ext in exts:
                    superseded[name] = superseded.get(name, 0) + 1
                exts[ext] = i  # the last copy wins, as tar -x leaves it
        self.duplicates.append(sum(superseded.values()))
        if superseded:
            example = next(iter(superseded))
            warnings.warn(
                f"fastload.TarShards: shard {url!r}: {sum(superseded.values())} member(s) superseded by "
                f"a later member of the same name (e.g. {example!r}); the last copy of each is used, as "
                "tar -x would. Rewrite the shard without the stale copies to silence this.",
                UserWarning, stacklevel=3)
        rows, members, keys, labels = [], [], [], []
        for key, exts in groups.items():
            image = next((exts[e] for e in IMAGE_EXTS + PREPARED_IMAGE_EXTS if e in exts), None)
            label_ext = next((e for e in LABEL_EXTS if e in exts), None)
            if image is None:
                self._problem(url, names[exts[label_ext]],
                              f"a label without an image (expected {key}.{'/'.join(IMAGE_EXTS)})", skip_fix)
                continue
            if label_ext is None:
                self._problem(url, names[image],
                              f"an image without a label (expected {key}.{'/'.join(LABEL_EXTS)})", skip_fix)
                continue
            label, first_error = None, None
            for ext in (e for e in LABEL_EXTS if e in exts):
                try:
                    label = _parse_label(texts[str(exts[ext])], ext)
                    break
                except (ValueError, KeyError) as e:
                    first_error = first_error or (exts[ext], e)
            if label is None:
                self._problem(url, names[first_error[0]], f"expected an integer label, got {first_error[1]}", skip_fix)
                continue
            rows.append((offs[image], sizs[image]))
            members.append(names[image])
            keys.append(key)
            labels.append(label)
        return rows, members, keys, labels

    def __repr__(self) -> str:
        superseded = f"{sum(self.duplicates)} superseded duplicates, " if any(self.duplicates) else ""
        return (f"fastload.TarShards({len(self.urls)} shards, {len(self)} samples, "
                f"{len(self.skipped)} skipped, {superseded}transforms={transforms_repr(self.transforms, self.tail)})")
