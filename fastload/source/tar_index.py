"""The member index of one tar shard: a walk over its headers, cached and validated.

A shard's members are found once by walking its tar headers (a pread per header, about 3x
Python's tarfile; tarfile itself for unusual archives), and the index (every regular
member's name, data offset and size, the text of label members, the problems met) is
cached as `<shard>.idx.json` beside the shard, or under `cache_dir/index/` when that
folder is read-only. A cached index is used only if the shard's size, mtime, ctime,
inode and a fingerprint of a few of its blocks match and the record is self-consistent;
otherwise the shard is walked again. `default_cache_dir()` is fastload's cache root.

Example:
    >>> split_key("train/n01/abc.JPG")
    ('train/n01/abc', 'jpg')
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fastload.source.urls import cache_name

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
# Member header blocks hashed into the index's fingerprint (plus the first and last blocks).
FINGERPRINT_MEMBERS = 16


def default_cache_dir() -> str:
    """$FASTLOAD_CACHE, else $XDG_CACHE_HOME/fastload, else ~/.cache/fastload."""
    if os.environ.get("FASTLOAD_CACHE"):
        return os.environ["FASTLOAD_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastload")



def scan_shard(path: str) -> Dict[str, Any]:
    """Walks the tar headers of one shard: every regular member's name, data offset, size.

    Returns the index record (plain JSON data): names, offsets, sizes, the text of label
    members, and `problems` ([member or None, reason]) for a truncated or unreadable tar.
    """
    st = os.stat(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        record = scan_reads(lambda offset, size: os.pread(fd, size, offset), st.st_size,
                            lambda: open(path, "rb"))
    finally:
        os.close(fd)
    return {"format": INDEX_FORMAT, "version": INDEX_VERSION, **_identity(st), **record}


def scan_reads(read: Callable[[int, int], bytes], shard_size: int, open_file: Callable[[], Any],
               with_fingerprint: bool = True) -> Dict[str, Any]:
    """The walk of scan_shard over any storage: `read(offset, size)` returns those bytes
    (fewer at the end), `open_file()` a seekable binary file (for tarfile, on unusual
    archives). Returns the record's walk fields: fingerprint, names, offsets, sizes,
    labels_text, problems (the caller adds format, version and the shard's identity). The
    fingerprint is "" with_fingerprint=False (where the storage's own tag says what changed).

    Example:
        >>> import io, tarfile
        >>> buf = io.BytesIO()
        >>> with tarfile.open(fileobj=buf, mode="w") as tf:
        ...     info = tarfile.TarInfo("a.cls"); info.size = 1
        ...     tf.addfile(info, io.BytesIO(b"3"))
        >>> data = buf.getvalue()
        >>> record = scan_reads(lambda o, n: data[o:o + n], len(data), lambda: io.BytesIO(data))
        >>> record["names"], record["offsets"], record["labels_text"]
        (['a.cls'], [512], {'0': '3'})
    """
    try:
        walk = walk_headers(read, shard_size)
    except _Unsupported:  # an unusual tar (sparse files, global pax paths): the slow, general walk
        with open_file() as f:
            walk = _walk_tarfile(f, shard_size)
    names, offsets, sizes, labels_text, problems = walk
    digest = fingerprint(read, shard_size, offsets) if with_fingerprint else ""
    return {"fingerprint": digest, "names": names, "offsets": offsets,
            "sizes": sizes, "labels_text": labels_text, "problems": problems}


def _identity(st: os.stat_result) -> Dict[str, int]:
    """What a cached index must match of its shard's stat.

    Size and mtime alone miss a shard rewritten with its mtime restored (tar -x, rsync,
    touch -r): a rewrite in place changes the ctime, which no one can set back, and a new
    file put in its place has a new inode. A copied shard (new inode) is indexed again.
    """
    return {"shard_size": st.st_size, "shard_mtime_ns": st.st_mtime_ns, "shard_ctime_ns": st.st_ctime_ns,
            "shard_inode": st.st_ino}


def fingerprint_blocks(shard_size: int, offsets: Sequence[int]) -> List[Tuple[int, int]]:
    """The (offset, size) blocks a fingerprint hashes, in order (see `fingerprint`)."""
    n = len(offsets)
    picks = sorted({i * (n - 1) // (FINGERPRINT_MEMBERS - 1) for i in range(FINGERPRINT_MEMBERS)}) if n else []
    return ([(0, 512)] + [(max(0, int(offsets[i]) - 512), 1024) for i in picks]
            + [(max(0, shard_size - 1024), 1024)])


def fingerprint(read: Callable[[int, int], bytes], shard_size: int, offsets: Sequence[int]) -> str:
    """A hash of a few blocks of the shard, for where ctime says nothing (some file systems).

    The first block, the last 1024 bytes (the end-of-archive marker) and, for up to
    FINGERPRINT_MEMBERS members spread over the shard, the header block just before the
    member's data and its first data block: a renamed, resized, moved or relabelled
    sampled member changes it. About 20 small reads per shard (`read(offset, size)`).
    """
    digest = hashlib.sha256()
    for offset, size in fingerprint_blocks(shard_size, offsets):
        digest.update(read(offset, size))
    return digest.hexdigest()


def _fingerprint(path: str, offsets: Sequence[int]) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return fingerprint(lambda offset, size: os.pread(fd, size, offset), os.fstat(fd).st_size, offsets)
    finally:
        os.close(fd)


class _Walk:
    """What a header walk collects."""

    def __init__(self):
        self.names: List[str] = []
        self.offsets: List[int] = []
        self.sizes: List[int] = []
        self.labels_text: Dict[str, str] = {}
        self.problems: List[List[Optional[str]]] = []
        self.last: Optional[str] = None
        # (where a header group begins, members recorded before it), each group: a member,
        # a directory, a link, with its extended headers (fast walk only)
        self.entries: List[Tuple[int, int]] = []

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
        if split_key(name)[1] in LABEL_EXTS:
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


def checksum_ok(header: bytes) -> bool:
    """True when a 512-byte tar header's checksum field matches its bytes (the unsigned
    sum, or the signed one some old tars wrote)."""
    try:
        checksum = _octal(header[148:156])
    except ValueError:
        return False
    unsigned = sum(header[:148]) + 256 + sum(header[156:])  # the field counts as 8 spaces
    return checksum == unsigned or checksum == unsigned - 256 * sum(b > 127 for b in header)


def _pax_size(text: str) -> int:
    # pax sizes are decimal; a sign or anything else would move the walk backwards or nowhere.
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ValueError(f"a pax size {text[:40]!r} (expected a non-negative decimal number)")
    return int(text)


def walk_headers(read: Callable[[int, int], bytes], shard_size: int):
    """The fast header walk: one read per header, ~10x quicker than tarfile.

    Follows what tarfile reads (ustar prefix, GNU long names, pax path/size records) and
    raises _Unsupported for anything else; the result is checked against tarfile in tests.
    Every size is checked before it is used (non-negative, inside the shard, extended
    headers at most MAX_EXTENDED_BYTES), so the walk always moves forward and never reads
    more than the shard holds: a hostile header ends the walk with a problem, nothing else.
    """
    return _walk(read, shard_size)[0].result()


def walk_span(read: Callable[[int, int], bytes], shard_size: int, start: int,
              stop: Optional[int]) -> Optional[Tuple[Tuple[Any, ...], int, Dict[int, int]]]:
    """The fast walk of the headers from `start` on, up to the first entry at or past
    `stop` (None: the end of the archive), for walks of several spans of one shard at
    once: (walk_headers' result for the span, where it stopped, {entry: members before
    it} where an entry is where a header group begins: a member's, a directory's, with
    its extended headers), or None when
    the span holds what only a walk from the start reads right (a problem, whose message
    names the member before it; an unusual archive). `start` must be a header's offset;
    the first member of a span that starts between an extended header and its member may
    be read without it: the caller keeps a span's members from the entry where the span
    before it stopped.

    Example:
        >>> import io, tarfile
        >>> buf = io.BytesIO()
        >>> with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        ...     for name in ("a.cls", "b.cls"):
        ...         info = tarfile.TarInfo(name); info.size = 1; tf.addfile(info, io.BytesIO(b"3"))
        >>> data = buf.getvalue()
        >>> (names, offsets, *_), end, entries = walk_span(lambda o, n: data[o:o + n], len(data), 1024, None)
        >>> names, offsets, entries
        (['b.cls'], [1536], {1024: 0, 2048: 1})
    """
    try:
        walk, pos = _walk(read, shard_size, start, stop)
    except _Unsupported:
        return None
    if walk.problems:
        return None
    return walk.result(), pos, dict(walk.entries)


def _walk(read: Callable[[int, int], bytes], shard_size: int, start: int = 0, stop: Optional[int] = None):
    """walk_headers from the header at `start` until the first entry (a header not
    preceded by an extended one) at or past `stop` (None: the end of the archive):
    (the _Walk, where it stopped)."""
    walk = _Walk()
    pos = start
    long_name: Optional[str] = None
    pax: Dict[str, str] = {}
    pax_at = 0  # where the pax header of the next member is
    pending = False  # an extended header (L, x) waits for its member
    while stop is None or pos < stop or pending:
        if not pending:
            walk.entries.append((pos, len(walk.names)))
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
            size = _octal(header[124:136])
        except ValueError:
            size = -1
        if not checksum_ok(header) or size < 0:
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
    return walk, pos


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


def _walk_tarfile(f, shard_size: int):
    """The general walk (Python's tarfile): every format tarfile reads.

    Bounded like the fast walk: reads are capped, and a member that does not move the walk
    forward, or has a negative size, ends it with a problem.
    """
    walk = _Walk()

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


def split_key(name: str) -> Tuple[str, str]:
    """("dir/abc", "jpg") for "dir/abc.jpg": key up to the first dot of the file name."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:].lower()


def _valid_index(record: Any, st: os.stat_result, path: str) -> bool:
    try:
        if not (consistent_index(record, st.st_size)
                and all(record.get(k) == v for k, v in _identity(st).items())):
            return False
        return record["fingerprint"] == _fingerprint(path, record["offsets"])
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return False


def consistent_index(record: Any, shard_size: int) -> bool:
    """True when `record` is an index record of this format and version whose members all
    lie inside a shard of `shard_size` bytes, with well-formed labels and problems (not
    whether it matches the shard: the caller checks its identity and fingerprint)."""
    try:
        if not (isinstance(record, dict) and record.get("format") == INDEX_FORMAT
                and record.get("version") == INDEX_VERSION and record.get("shard_size") == shard_size):
            return False
        names, offsets, sizes = record["names"], record["offsets"], record["sizes"]
        if not (isinstance(names, list) and isinstance(offsets, list) and isinstance(sizes, list)
                and len(names) == len(offsets) == len(sizes)):
            return False
        if not all(isinstance(n, str) for n in names):
            return False
        off = np.asarray(offsets, dtype=np.int64)
        siz = np.asarray(sizes, dtype=np.int64)
        if len(off) and (off.min() < 512 or siz.min() < 0 or (off + siz).max() > shard_size):
            return False
        labels = record["labels_text"]
        if not (isinstance(labels, dict) and all(isinstance(v, str) and k.isdigit() and int(k) < len(names)
                                                 for k, v in labels.items())):
            return False
        problems = record["problems"]
        if not (isinstance(problems, list) and all(isinstance(p, list) and len(p) == 2 for p in problems)):
            return False
        return isinstance(record.get("fingerprint"), str)
    except (KeyError, TypeError, ValueError, OverflowError):
        return False


def _index_paths(path: str, cache_dir: str) -> List[str]:
    """Where the index of a shard may live: beside it, then in the cache."""
    return [path + INDEX_SUFFIX,
            os.path.join(cache_dir, "index", cache_name(os.path.realpath(path), path) + INDEX_SUFFIX)]


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
        if write_index(candidate, record):
            break
    return record, "built"


def write_index(target: str, record: Dict[str, Any]) -> bool:
    """Writes an index record to `target` atomically (temporary file + rename); False when
    the folder is not writable."""
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
