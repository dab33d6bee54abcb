"""TarShards: WebDataset tar shards as a random-access native dataset.

A shard is a plain tar whose members are grouped into samples by key: the member name up
to the first dot of its file name, directory included (`train/n01/abc.jpg` and
`train/n01/abc.cls` are sample `train/n01/abc`). Each sample has one image (jpg, jpeg, png,
webp) and one label (cls: an integer as text; json: an integer, or an object with "label"
or "cls"; txt: an integer as text); other members are ignored.

Instead of streaming shards through a shuffle buffer, each shard's member index is built
once and cached (fastload/source/tar_index.py; fastload/source/remote_index.py for shards in
object storage), http(s) shards are downloaded once (fastload/source/urls.py), and shards
in object storage are read by range into a bounded cache (fastload/source/ranges.py).
With it, every image is a (file, offset, size) triple in a
SampleIndex: the C++ engine reads it with one pread, and shuffling is global. This
module groups members into samples, parses the labels, applies the skip policy and checks
shards against a fastload.prepare manifest (fastload/source/manifest.py).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import warnings
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from fastload.augment.split import transforms_repr
from fastload.datasets.base import NativeDataset, transforms_argument
from fastload.errors import ErrorPolicy, TarShardError
from fastload.source.index import FlatStrings, SampleIndex
from fastload.source.manifest import MANIFEST_NAME, check_shard, parse_manifest, read_manifest
from fastload.source.tar_index import LABEL_EXTS, default_cache_dir, load_index, split_key
from fastload.source.ranges import DEFAULT_CONCURRENCY, RemoteReads, open_reads, ranged
from fastload.source.remote import RemoteStore, request_settings
from fastload.source.remote_index import remote_indexes
from fastload.source.urls import cache_name, expand_urls, fetch_shard

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")  # preference order when a key has several
# Also read as images, after those: ppm (raw pixels, fastload.prepare's raw_fraction) and
# the formats fastload.prepare stores as they are.
PREPARED_IMAGE_EXTS = ("ppm", "bmp", "tiff", "gif")
# Labels are stored as int64 and used as class indices (torch's cross-entropy wants >= 0).
MAX_LABEL = (1 << 63) - 1


class Skipped(NamedTuple):
    """A sample (or part of a shard) left out with on_error="skip"."""

    shard: str
    member: Optional[str]
    reason: str



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


def _prepared_shards(urls: Union[str, Sequence[str]], storage_options: Optional[Dict[str, Any]] = None,
                     **settings: Any) -> Union[str, Sequence[str]]:
    """A folder written by fastload.prepare stands for its shards, in the manifest's order
    (a remote one too: a URL that names no .tar and holds a manifest)."""
    if isinstance(urls, str) and ranged(urls) and not urls.endswith(".tar") and "{" not in urls and "::" not in urls:
        folder = urls.rstrip("/")
        text = RemoteStore(folder, storage_options, **settings).read_object(f"{folder}/{MANIFEST_NAME}")
        if text is None:
            raise TarShardError(
                f"fastload.TarShards: expected tar shards, or a folder written by fastload.prepare (with "
                f"{MANIFEST_NAME}), got {urls!r} without one. Pass the shards' URLs or a brace pattern.",
                urls, None, "a folder without a manifest")
        manifest = parse_manifest(text.decode("utf-8", "replace"), f"{folder}/{MANIFEST_NAME}")
        return [f"{folder}/{shard['name']}" for shard in manifest["shards"]]
    if isinstance(urls, (str, os.PathLike)) and os.path.isdir(urls):
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
        manifest_path = os.path.join(folder, MANIFEST_NAME)
        manifests[folder] = (manifest_path, read_manifest(manifest_path)) if os.path.isfile(manifest_path) else None
    if manifests[folder] is not None:
        check_shard(*manifests[folder], path, samples, full=rebuilt)


class TarShards(NativeDataset):
    """WebDataset-layout tar shards, random-access, on fastload's native pipeline.

    Args:
        urls: a path or URL, a brace pattern ("train-{0000..0127}.tar"), "::"-separated
            lists of them, or a list. Local paths, file://, http(s):// (downloaded whole
            into `cache_dir/shards/`) and any fsspec URL (s3://, gs://, memory://, ... with
            its backend installed), read by range requests: each shard's member index
            once (cached; `<shard>.idx.json` beside it when there is one, else a walk of
            its tar headers by range reads), then each batch's members, coalesced, many
            requests in flight, retried with backoff, into a bounded cache. A folder written by
            fastload.prepare stands for its shards (its manifest lists them); shards beside
            such a manifest are checked against it (size, sample count, and sha256 when a
            shard changed since it was indexed), and refused with a ManifestError if not
            as recorded.
        transforms: a list of specs from fastload.transforms (torchvision transforms
            with an equivalent are converted), or a torchvision Compose (v1 or v2) or one
            transform; applied to every image.
        cache_dir: fastload's cache folder (default: $FASTLOAD_CACHE, else
            $XDG_CACHE_HOME/fastload, else ~/.cache/fastload). http(s) shards are
            downloaded into `cache_dir/shards/`, members of shards read by range go to
            `cache_dir/members/`, their indexes to `cache_dir/index/`. Each local shard's member index is read from
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
        progress: show a tqdm bar while downloading, and while indexing shards read by
            range once that takes over a second (then a warning after a long walk of
            shards without an index says how to skip it next time).
        ops: the older name of `transforms` (same meaning; pass one of the two).
        storage_options: for shards read by range, fsspec's options of their filesystem
            (s3fs: key, secret, endpoint_url, client_kwargs, anon, ...). None: the
            environment, as boto3 and s3fs read it (AWS_ACCESS_KEY_ID,
            AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_PROFILE, ...), and fsspec's
            own configuration (`FSSPEC_S3='{"endpoint_url": ...}'`, ~/.config/fsspec/),
            which is also how a webdataset pipeline's shards get theirs.
        cache_limit: bytes of members the range cache (`cache_dir/members/`, a sparse
            file per shard, shared by loaders and ranks on the machine) may hold, least
            recently used evicted past it (never those of a batch in flight). None: a
            quarter of the free disk there. 0: no disk cache (members kept in memory only
            until their batch is made).
        concurrency: range requests in flight at once.
        retries: for shards read by range, tries after the first for a request that
            failed or timed out, with backoff doubling from 0.25 s (None:
            $FASTLOAD_REMOTE_RETRIES, else 4). After the last, TarShardError names the URL,
            the bytes and the endpoint; the loader's on_error="skip" replaces the batch's
            unread samples instead (counted in loader.stats()["skipped"]).
        timeout: for shards read by range, seconds a request waits for each answer of
            the server before it fails and is retried (None: $FASTLOAD_REMOTE_TIMEOUT_S,
            else 30): a server that stops answering is named, never waited for forever.
        views: in place of `transforms`, one transform list per view of each image
            (NativeDataset's `views`): samples `([view_0, ...], label)`, all views from one
            read and one decode.

    Attributes:
        shards: the local path of every shard (downloaded copies for http(s) ones; the
            URL of a shard read by range).
        remote: the RemoteReads of the shards read by range (None without any):
            `remote.stats()` counts requests, bytes read, retries, cache hits and size.
        sample_shards: int64 [N], the shard (position in `urls`) of each sample.
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
                 progress: bool = True, ops: Optional[Sequence[Any]] = None,
                 storage_options: Optional[Dict[str, Any]] = None, cache_limit: Optional[int] = None,
                 concurrency: int = DEFAULT_CONCURRENCY, retries: Optional[int] = None,
                 timeout: Optional[float] = None, views: Optional[Sequence[Any]] = None):
        # Both checked before any shard is fetched or indexed.
        self.error_policy = ErrorPolicy(on_error, owner="fastload.TarShards")
        transforms = transforms_argument(transforms, ops, "fastload.TarShards")
        self.on_error = self.error_policy.mode  # the plain string, as given
        request_settings(retries, timeout)  # checked before anything is read
        self.urls = expand_urls(_prepared_shards(urls, storage_options, retries=retries, timeout=timeout))
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else default_cache_dir()
        self.skipped: List[Skipped] = []
        self.index_status: List[str] = []
        self.duplicates: List[int] = []
        by_range = [url for url in self.urls if ranged(url)]
        # Remote shards read by range: their indexes first (cached, beside them, or a walk of
        # their headers), many shards at once.
        self.remote: Optional[RemoteReads] = None
        remote_records: Dict[str, Any] = {}
        if by_range:
            self.remote = open_reads(by_range, self.cache_dir, storage_options=storage_options,
                                     cache_limit=cache_limit, concurrency=concurrency, retries=retries,
                                     timeout=timeout)
            if not self.remote.keep:
                # The private memory folder goes with the dataset (pickled copies share it).
                weakref.finalize(self, shutil.rmtree, self.remote.cache.root, True)
            remote_records = dict(zip(by_range, remote_indexes(self.remote.store, by_range, self.cache_dir,
                                                                  progress=progress)))
        self.shards = [url if url in remote_records else fetch_shard(url, self.cache_dir, progress)
                       for url in self.urls]

        file_ids: List[np.ndarray] = [np.zeros(0, dtype=np.int64)]  # the empty dataset's arrays
        offsets: List[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        sizes: List[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        labels: List[int] = []
        members: List[str] = []
        keys: List[str] = []
        manifests: Dict[str, Any] = {}
        files = list(self.shards)  # what the engine reads: the shards, or remote ones' cache files
        for shard_id, (url, path) in enumerate(zip(self.urls, self.shards)):
            if url in remote_records:
                record, status = remote_records[url]
            else:
                record, status = load_index(path, self.cache_dir)
            self.index_status.append(status)
            rows, shard_members, shard_keys, shard_labels = self._samples_of(url, record)
            if url in remote_records:
                # The engine reads the shard's cache file, at the members' own offsets; the
                # key names the object's version, so a replaced shard never meets old bytes.
                key = cache_name(f"{url}#{record['remote_identity'].get('tag')}", url)
                files[shard_id] = self.remote.add_shard(key, url, record["shard_size"], dict(rows))
            else:
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
        # The shard of each sample (the index's file_ids say which file the engine reads).
        self.sample_shards = np.concatenate(file_ids)
        index = SampleIndex(
            files=FlatStrings.from_list(files), file_ids=self.sample_shards,
            offsets=np.concatenate(offsets), sizes=np.concatenate(sizes),
            labels=np.asarray(labels, dtype=np.int64), members=FlatStrings.from_list(members), remote=self.remote)
        self.keys = FlatStrings.from_list(keys)
        super().__init__(index, transforms, seed, views=views)

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
            key, ext = split_key(name)
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
        self._grouped(url, record, groups, keys)
        return rows, members, keys, labels

    def _grouped(self, url: str, record: Dict[str, Any], groups: Dict[str, Dict[str, int]], keys: List[str]) -> None:
        """Called once per shard as its index is read: its image and label members by key
        (key -> {ext: member number in record["names"]}) and the keys kept as samples. A
        view of the same shards (fastload.datasets.webdataset) checks its samples here, in
        the pass that reads the index."""

    def __repr__(self) -> str:
        superseded = f"{sum(self.duplicates)} superseded duplicates, " if any(self.duplicates) else ""
        return (f"fastload.TarShards({len(self.urls)} shards, {len(self)} samples, "
                f"{len(self.skipped)} skipped, {superseded}transforms={transforms_repr(self.transforms, self.tail)})")
