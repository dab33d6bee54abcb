"""prepare(): a source to prepared WebDataset shards, in parallel, resumable.

The plan is fixed by the source and `samples_per_shard`: shard s holds samples
[s * n, (s + 1) * n) (less those skipped). Each shard is one task for a worker process;
a worker reads its samples' bytes (SampleIndex.read), encodes them (encode.py), writes
the shard atomically (writer.py), builds its tar index (TarShards' `.idx.json`, so a
loader opens it without a scan) and records it in the state folder. The manifest is
written last. Re-running after an interruption keeps every shard whose record matches
the settings and source fingerprint (and whose file still has the recorded size) and
redoes the rest.

One run at a time per output folder: a run holds an exclusive flock on
`<dst>/.fastload-prepare.lock` from start to end (another is refused with FolderInUse
at once). The kernel drops the lock when the process dies, and the workers die with it
(Linux), so a killed run leaves no stale lock and no process writing into the folder.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Union

from fastload.errors import DecodeError, ErrorPolicy, FolderInUse
from fastload.prepare import encode as enc
from fastload.prepare import manifest as mf
from fastload.prepare import writer
from fastload.prepare.source import Source, UnreadableSample, as_source
from fastload.source.manifest import MANIFEST_NAME, read_manifest
from fastload.source.ranges import ranged
from fastload.source.tar_index import INDEX_SUFFIX, default_cache_dir

try:
    import fcntl
except ImportError:  # Windows: no flock; there, run one preparation per folder at a time
    fcntl = None

# The default samples per shard: at most DEFAULT_SAMPLES_PER_SHARD (a shard is the unit
# of work and of resume), fewer so that every worker gets a shard (with one shard, other
# workers idle and the progress bar jumps from 0 to 100 %), but not below
# MIN_DEFAULT_SAMPLES_PER_SHARD (each shard costs a file, a tar index and a state record).
DEFAULT_SAMPLES_PER_SHARD = 1000
MIN_DEFAULT_SAMPLES_PER_SHARD = 64
DEFAULT_QUALITY = 90


class PrepareDecodeError(DecodeError):
    """A sample fastload.prepare cannot read or decode (a DecodeError: index, source, reason).

    Its advice names the option that skips such samples where prepare was called from:
    `skip_option` is on_error='skip' for the Python API, --on-error skip for the command.
    """

    def __init__(self, reason: str, index: Optional[int] = None, source: Optional[str] = None,
                 skip_option: str = "on_error='skip'"):
        super().__init__(reason, index, source)
        self.skip_option = skip_option
        where = ", ".join(p for p in (f"sample {index}" if index is not None else None, source) if p)
        self.args = (f"fastload.prepare: cannot prepare {where or 'a sample'}: {reason.rstrip('.')}. Fix or "
                     f"remove the file, or pass {skip_option} to leave such files out (each is listed in the "
                     "manifest's \"skipped\").",)

    def __reduce__(self):  # keeps the fields (and the message) through a worker process's pickling
        return (type(self), (self.reason, self.index, self.source, self.skip_option))


@dataclass(frozen=True)
class Prepared:
    """What prepare() made.

    Attributes:
        root: the output folder.
        shards: paths of the shards, in sample order (pass them to fastload.TarShards,
            or pass `root`).
        manifest: the manifest record (see fastload.prepare.manifest).
        skipped: samples left out under on_error="skip" ([{sample, source, reason}]).
        redone: how many shards this call wrote (the rest were kept from an earlier run).
    """

    root: str
    shards: List[str]
    manifest: Dict[str, Any]
    skipped: List[Dict[str, Any]]
    redone: int


def prepare(src: Any, dst: Union[str, os.PathLike], *, max_side: Optional[int] = None,
            quality: Optional[int] = None, raw_fraction: float = 0.0,
            samples_per_shard: Optional[int] = None, name: str = "shard",
            num_workers: Optional[int] = None, on_error: Union[str, ErrorPolicy] = "raise", seed: int = 0,
            progress: Optional[bool] = None, overwrite: bool = False,
            storage_options: Optional[Dict[str, Any]] = None) -> Prepared:
    """Prepares a dataset once into WebDataset tar shards that fastload reads faster.

    Modes: lossless (the default): every JPEG is transcoded in the DCT domain (the same
    pixels, optimised Huffman tables, a restart marker every MCU row) and carries its
    restart-segment index, so that the loader entropy-decodes only the rows a crop
    needs; other images are stored as they are. With `max_side` and/or `quality`:
    images are downscaled (antialiased) to at most `max_side` on their longer side and
    re-encoded at `quality` (default 90), FFCV-style; `raw_fraction` of them are stored
    as raw uint8 pixels (PPM) instead.

    Args:
        src: an ImageFolder-layout folder, tar shards (path, brace pattern or list of
            .tar), fastload.ImageFolder / FileList / TarShards, or a torchvision
            ImageFolder without transform.
        dst: the output folder: `<name>-000000.tar` ..., their `.idx.json` tar indexes,
            and `fastload-manifest.json`. A URL of object storage (s3://, gs://, any
            fsspec URL but http(s)) is prepared in a local staging folder under
            fastload's cache (fastload/prepare/upload.py) and uploaded, the manifest
            last; `TarShards(dst)` reads it back by range.
        max_side, quality, raw_fraction: the resize mode (see above).
        samples_per_shard: samples per shard (the unit of parallel work and of resume).
            Default: 1000, or fewer so that every worker process gets a shard
            (ceil(samples / workers)), but at least 64; a resumed run keeps the value
            of the run it resumes.
        name: the shards' file name prefix.
        num_workers: worker processes (default: the CPUs this process may use; 0: in
            this process).
        on_error: "raise": a corrupt or truncated image, or a file that cannot be
            opened (e.g. a broken symbolic link), stops preparation with a DecodeError
            naming it. "skip": it is left out and listed in the manifest's `skipped`
            (never dropped silently).
        seed: which images raw_fraction picks.
        progress: a tqdm bar on stderr (default: only when stderr is a terminal).
        overwrite: replace a preparation with other settings or of another source in
            `dst` (otherwise refused).
        storage_options: for a `dst` in object storage, fsspec's options of its
            filesystem (as TarShards takes them; None: the environment).

    Returns:
        Prepared: the shards' paths, the manifest, the skipped samples.

    Raises:
        DecodeError: a bad image under on_error="raise".
        ValueError: bad arguments, or `dst` holds another preparation (without overwrite).
        FolderInUse: another preparation is writing into `dst` now.

    Example:
        >>> out = fastload.prepare("data/train", "prepared/train", num_workers=8)   # doctest: +SKIP
        >>> ds = fastload.TarShards("prepared/train", transforms=[T.RandomResizedCrop(224)])  # doctest: +SKIP
    """
    from fastload import _ext

    _ext.require_ops()  # before any image: a missing build is not a corrupt dataset
    policy = ErrorPolicy(on_error, owner="fastload.prepare")
    settings = _settings(max_side, quality, raw_fraction, seed)
    if samples_per_shard is not None and (not isinstance(samples_per_shard, int) or samples_per_shard < 1):
        raise ValueError(f"fastload.prepare: expected samples_per_shard >= 1 or None, got {samples_per_shard!r}.")
    if not name or "/" in name or os.sep in name:
        raise ValueError(f"fastload.prepare: expected a file name prefix without '/', got {name!r}.")
    workers = _workers(num_workers)
    source = as_source(src)
    dst = os.fspath(dst)
    if ranged(dst):
        from fastload.prepare.upload import staging_folder, upload

        folder = staging_folder(dst, default_cache_dir())
        os.makedirs(folder, exist_ok=True)
        with _locked(folder):
            done = _prepare(source, folder, settings, samples_per_shard, name, workers, policy, progress, overwrite)
        names = [n for s in done.shards for n in (os.path.basename(s), os.path.basename(s) + INDEX_SUFFIX)]
        upload(folder, dst, names, storage_options)
        url = dst.rstrip("/")
        return Prepared(url, [f"{url}/{os.path.basename(s)}" for s in done.shards], done.manifest, done.skipped,
                        done.redone)
    os.makedirs(dst, exist_ok=True)
    with _locked(dst):
        return _prepare(source, dst, settings, samples_per_shard, name, workers, policy, progress, overwrite)


def _prepare(source: Source, dst: str, settings: enc.EncodeSettings, samples_per_shard: Optional[int], name: str,
             workers: int, policy: ErrorPolicy, progress: Optional[bool], overwrite: bool) -> Prepared:
    """prepare() once its arguments are checked and `dst` is locked."""
    os.makedirs(os.path.join(dst, mf.STATE_DIR), exist_ok=True)
    fingerprint, unreadable = source.stat_files()
    if unreadable and not policy.skips:  # before any work; under "skip" the shard's read lists it
        sample, reason = unreadable[0]
        raise PrepareDecodeError(reason, sample, source.index.source(sample))
    n = len(source)
    job = {"settings": settings.as_dict(), "samples_per_shard": samples_per_shard, "name": name,
           "on_error": policy.mode, "fingerprint": fingerprint}
    if samples_per_shard is None:
        samples_per_shard = _earlier_plan(dst, job) or _default_samples_per_shard(n, workers)
        job["samples_per_shard"] = samples_per_shard
    _check_previous(dst, job, overwrite)

    count = max(1, -(-n // samples_per_shard))
    tasks = [(s, f"{name}-{s:06d}.tar", s * samples_per_shard, min(n, (s + 1) * samples_per_shard))
             for s in range(count)]
    for entry in os.listdir(dst):  # what an interrupted run left half-written
        if entry.endswith(writer.TMP_SUFFIX):
            writer.remove_quietly(os.path.join(dst, entry))
    records: Dict[int, Dict[str, Any]] = {}
    todo = []
    for task in tasks:
        record = _finished(dst, task, job)
        if record is not None:
            records[task[0]] = record
        else:
            todo.append(task)

    show = sys.stderr.isatty() if progress is None else bool(progress)
    from tqdm.auto import tqdm

    with tqdm(total=n, initial=sum(r["end"] - r["first_sample"] for r in records.values()), unit="img",
              desc="fastload.prepare", disable=not show, file=sys.stderr) as bar:
        if workers == 0 or len(todo) <= 1:
            _init_worker(source, settings, policy.mode, dst, job)
            for task in todo:
                records[task[0]] = _run_task(task)
                bar.update(task[3] - task[2])
        else:
            context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                                  else None)
            with concurrent.futures.ProcessPoolExecutor(
                    max_workers=min(workers, len(todo)), mp_context=context, initializer=_init_pool_worker,
                    initargs=(os.getpid(), source, settings, policy.mode, dst, job)) as pool:
                futures = {pool.submit(_run_task, task): task for task in todo}
                try:
                    for future in concurrent.futures.as_completed(futures):
                        task = futures[future]
                        records[task[0]] = future.result()
                        bar.update(task[3] - task[2])
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise

    shards = [records[t[0]] for t in tasks]
    skipped = [s for r in shards for s in r["skipped"]]
    kinds: Dict[str, int] = {}
    for r in shards:
        for kind, k in r["kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + k
    import fastload

    manifest = {
        "settings": {**settings.as_dict(), "samples_per_shard": samples_per_shard, "name": name,
                     "on_error": policy.mode},
        "source": {"description": source.description, "samples": n, "fingerprint": fingerprint},
        "shards": [{k: r[k] for k in ("name", "sha256", "size", "count", "first_sample", "kinds")} for r in shards],
        "skipped": skipped,
        "kinds": kinds,
        "exploit": {"segments": kinds.get("prepared", 0) > 0, "pixel_identical": settings.mode == "lossless"},
        "fastload": fastload.__version__,
    }
    mf.write_manifest(dst, manifest)
    return Prepared(dst, [os.path.join(dst, r["name"]) for r in shards], read_manifest(dst), skipped,
                    len(todo))


def _settings(max_side, quality, raw_fraction, seed) -> enc.EncodeSettings:
    if max_side is not None and (not isinstance(max_side, int) or max_side < 1):
        raise ValueError(f"fastload.prepare: expected max_side an int >= 1 or None, got {max_side!r}.")
    if quality is not None and (not isinstance(quality, int) or not 1 <= quality <= 100):
        raise ValueError(f"fastload.prepare: expected quality an int in 1..100 or None, got {quality!r}.")
    if not 0.0 <= float(raw_fraction) <= 1.0:
        raise ValueError(f"fastload.prepare: expected raw_fraction in [0, 1], got {raw_fraction!r}.")
    resize = max_side is not None or quality is not None
    if raw_fraction and not resize:
        raise ValueError("fastload.prepare: raw_fraction applies to the resize mode; pass max_side (and quality) "
                         "too, or leave raw_fraction at 0 for lossless shards.")
    if not resize:
        return enc.EncodeSettings(seed=int(seed))
    return enc.EncodeSettings(mode="resize", max_side=max_side,
                              quality=DEFAULT_QUALITY if quality is None else quality,
                              raw_fraction=float(raw_fraction), seed=int(seed))


def _workers(num_workers: Optional[int]) -> int:
    if num_workers is None:
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:
            return os.cpu_count() or 1
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"fastload.prepare: expected num_workers >= 0 or None, got {num_workers!r}.")
    return num_workers


def _default_samples_per_shard(samples: int, workers: int) -> int:
    """Up to DEFAULT_SAMPLES_PER_SHARD, fewer so that each of `workers` processes gets a
    shard, at least MIN_DEFAULT_SAMPLES_PER_SHARD (see their comment)."""
    per_worker = -(-samples // max(1, workers))
    return min(DEFAULT_SAMPLES_PER_SHARD, max(MIN_DEFAULT_SAMPLES_PER_SHARD, per_worker))


def _earlier_plan(dst: str, job: Dict[str, Any]) -> Optional[int]:
    """The samples_per_shard of an earlier run in `dst` of the same job (settings, name,
    on_error, source), if any: the default depends on the worker count, and resuming with
    other workers must keep the shards already written."""
    import json

    state = os.path.join(dst, mf.STATE_DIR)
    for entry in sorted(os.listdir(state)):
        try:
            with open(os.path.join(state, entry), encoding="utf-8") as f:
                earlier = json.load(f).get("job")
            if earlier == dict(job, samples_per_shard=earlier.get("samples_per_shard")):
                value = earlier["samples_per_shard"]
                if isinstance(value, int) and value >= 1:
                    return value
        except (OSError, ValueError, AttributeError, KeyError):
            continue
    return None


@contextlib.contextmanager
def _locked(dst: str) -> Iterator[None]:
    """Holds an exclusive lock on the output folder `dst` while the block runs.

    Two runs writing into one folder would write the same `.tmp` files and record sizes
    read mid-write. The lock is a non-blocking flock on `<dst>/.fastload-prepare.lock`,
    which holds the owner's pid for the message. The file stays (removing it would let a
    third run lock a new file while a second still waits on the old one); the lock itself
    goes with the process that held it, however it ended.

    Raises:
        FolderInUse: another process holds the lock.
    """
    path = os.path.join(dst, mf.LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                who = f" (process {owner})" if owner.isdigit() else ""
                raise FolderInUse(
                    f"fastload.prepare: another preparation{who} is writing into {dst!r}. Wait for it to finish, "
                    "or choose another output folder.") from None
            except OSError as error:  # a file system without flock (some network mounts)
                warnings.warn(f"fastload.prepare: cannot lock {path!r} ({error.strerror or error}); nothing stops "
                              "another preparation from writing into the same folder at the same time.",
                              stacklevel=3)
            else:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)


def _state_path(dst: str, shard_name: str) -> str:
    return os.path.join(dst, mf.STATE_DIR, shard_name + ".json")


def _check_previous(dst: str, job: Dict[str, Any], overwrite: bool) -> None:
    """Refuses (or, with overwrite, clears) a folder holding another preparation."""
    others = []
    state = os.path.join(dst, mf.STATE_DIR)
    for entry in sorted(os.listdir(state)):
        try:
            import json

            with open(os.path.join(state, entry), encoding="utf-8") as f:
                if json.load(f).get("job") != job:
                    others.append(entry)
        except (OSError, ValueError, AttributeError):
            others.append(entry)
    if not others:
        return
    if not overwrite:
        raise ValueError(
            f"fastload.prepare: {dst!r} holds shards prepared with other settings or from another source "
            f"(e.g. {others[0][:-5]!r}). Pass overwrite=True (--overwrite) to replace them, or choose another folder.")
    for entry in others:
        shard = entry[:-len(".json")]
        for path in (os.path.join(state, entry), os.path.join(dst, shard), os.path.join(dst, shard + ".idx.json")):
            writer.remove_quietly(path)
    writer.remove_quietly(os.path.join(dst, MANIFEST_NAME))


def _finished(dst: str, task, job: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The record of a shard an earlier run finished, if its file is still as recorded."""
    import json

    _, shard_name, first, end = task
    try:
        with open(_state_path(dst, shard_name), encoding="utf-8") as f:
            record = json.load(f)
        if (record.get("job") == job and record.get("first_sample") == first and record.get("end") == end
                and os.path.getsize(os.path.join(dst, shard_name)) == record.get("size")):
            return record
    except (OSError, ValueError, AttributeError):
        pass
    return None


# ---- worker side (one process per CPU; the source arrives once, at start) -------------

_WORKER: Dict[str, Any] = {}


def _init_worker(source: Source, settings: enc.EncodeSettings, on_error: str, dst: str, job) -> None:
    _WORKER.update(source=source, settings=settings, policy=ErrorPolicy(on_error), dst=dst, job=job)


def _init_pool_worker(parent: int, *args) -> None:
    _die_with_parent(parent)
    _init_worker(*args)


def _die_with_parent(parent: int) -> None:
    """Asks the kernel to end this worker when the preparing process `parent` dies.

    A pool worker outlives a killed parent (it waits on its queue forever), holding the
    folder's lock (inherited by fork) and finishing the shard it was writing while the
    next run writes the same one. Linux only (prctl PR_SET_PDEATHSIG).
    """
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _run_task(task) -> Dict[str, Any]:
    """Prepares one shard; returns (and records in the state folder) its record."""
    shard_id, shard_name, first, end = task
    source: Source = _WORKER["source"]
    settings: enc.EncodeSettings = _WORKER["settings"]
    policy: ErrorPolicy = _WORKER["policy"]
    dst: str = _WORKER["dst"]
    skipped: List[Dict[str, Any]] = []
    kinds: Dict[str, int] = {}

    def samples():
        for i in range(first, end):
            try:
                data = source.read(i)
                encoded = enc.encode(data, source.names[i], i, settings)
            except (UnreadableSample, enc.EncodeError, OSError, EOFError) as error:  # OSError, EOFError: PIL's
                reason = getattr(error, "reason", None) or str(error)
                policy.handle(PrepareDecodeError(reason, i, source.index.source(i)))
                skipped.append({"sample": i, "source": source.index.source(i), "reason": reason})
                continue
            kinds[encoded.kind] = kinds.get(encoded.kind, 0) + 1
            yield f"{i:09d}", encoded.ext, encoded.data, int(source.index.labels[i])

    path = os.path.join(dst, shard_name)
    digest, size, count = writer.write_shard(path, samples())
    from fastload.source.tar_index import default_cache_dir, load_index

    load_index(path, default_cache_dir())  # the tar index beside the shard: opening it needs no scan
    record = {"name": shard_name, "sha256": digest, "size": size, "count": count, "first_sample": first,
              "end": end, "kinds": kinds, "skipped": skipped, "job": _WORKER["job"]}
    mf.write_json_atomic(_state_path(dst, shard_name), record)
    return record
