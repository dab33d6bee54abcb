"""One shard, written atomically: a WebDataset tar at a temporary name, renamed when whole.

Members per sample, consecutive: `<key>.<ext>` (the image) and `<key>.cls` (the label),
key = the sample's number in the source (9 digits), so source order is kept and keys
never hold a dot. Headers are deterministic (mtime 0, uid/gid 0, mode 0644): the same
samples always give the same bytes, hence the same sha256 in the manifest.

A loader only ever sees whole shards: the tar is written to `<name>.tmp` in the same
folder, flushed, fsynced and then os.replace'd onto its name; an interrupted run leaves
at most a `.tmp` file, which no shard pattern (`*.tar`) matches and the next run removes.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import Iterable, Tuple

from fastload.source.manifest import file_sha256

TMP_SUFFIX = ".tmp"


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_shard(path: str, samples: Iterable[Tuple[str, str, bytes, int]]) -> Tuple[str, int, int]:
    """Writes (key, ext, image bytes, label) samples as the shard `path`, atomically.

    Returns:
        (sha256 hex of the shard, its size in bytes, samples written).
    """
    tmp = path + TMP_SUFFIX
    count = 0
    try:
        with open(tmp, "wb") as f:
            with tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                for key, ext, data, label in samples:
                    tar.addfile(_member(f"{key}.{ext}", len(data)), io.BytesIO(data))
                    text = str(int(label)).encode()
                    tar.addfile(_member(f"{key}.cls", len(text)), io.BytesIO(text))
                    count += 1
            f.flush()
            os.fsync(f.fileno())
        digest, size = file_sha256(tmp)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return digest, size, count


def create_temp(folder: str, prefix: str) -> Tuple[int, str]:
    """(fd, path) of a new file open for writing in `folder`, named `prefix` + random.

    What tempfile.mkstemp does, but with the mode of any new file (0o666 less the umask;
    mkstemp's 0600 would leave a shared dataset folder unreadable to other accounts).
    """
    while True:
        path = os.path.join(folder, prefix + os.urandom(6).hex())
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), path
        except FileExistsError:
            continue


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
