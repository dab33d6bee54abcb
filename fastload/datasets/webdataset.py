"""A webdataset pipeline, read back stage by stage, run on fastload's tar-shard engine.

`fastload.DataLoader(wds.WebDataset(urls, ...).shuffle(1000).decode("pil")
.to_tuple("jpg", "cls").map_tuple(transform, int), batch_size=64)` is an IterableDataset:
left as it is, torch's machinery iterates it (one Python sample at a time). Its stage list
(`DataPipeline.pipeline`) says exactly what it does, so it is read back, never guessed:
each stage is a webdataset object (a shard list, an opener), one of its functions
(`split_by_node`, `split_by_worker`, ...) or a `FilterFunction` holding the function of a
`pipelinefilter` (`_shuffle`, `_decode`, `_to_tuple`, ...) with its arguments (`.f`,
`.args`, `.kw`). A pipeline built only of the stages below becomes `WebDatasetSamples`, a
map-style dataset over the same shards (fastload.TarShards' member index) whose sample i
is what the pipeline yields for that member, and whose compat analysis is a SampleIndex +
one transform pipeline: the engine, the order, resume, DDP and stats run it unchanged.

Mapped stages:

- shards: a brace pattern, a list, "::"-lists; local paths, file://, http(s):// and
  fsspec URLs as fastload.TarShards reads them (remote ones are downloaded once into its
  cache); `pipe:<command>` runs the command once and caches its output the same way;
- `shardshuffle=`, `shuffle(n)`, `detshuffle`: a global shuffle of every sample through
  the member index (at least as random as a buffer of n: any sample can come next), drawn
  as the loader draws any order: torch's RandomSampler on one process (`torch.manual_seed`
  or `generator=`), (seed, epoch) under DDP; resumable mid-epoch;
- `split_by_node` / `single_node_only` / `split_by_worker` (`nodesplitter=`,
  `workersplitter=`): the loader's own DDP split (equal batch counts on every rank, no
  uneven-epoch hangs; `distributed=` and `uneven=` decide); engine threads, not worker
  processes, read the shards;
- `decode("pil" | "pilrgb" | "torchrgb8" | "torchrgb" | "torch")`, `decode()` with
  `wds.imagehandler(...)` and handlers of other extensions: the image as webdataset's
  ImageHandler makes it (the tensor modes: torchvision's PILToTensor / ToTensor first),
  `.cls` as int;
- `to_tuple`, `rename`, `map_dict`, `map_tuple` (the image's transform: what
  fastload.compat.torchvision maps natively, the rest as a Python tail; a label's function
  runs per sample in Python; `int` on an int label is left out);
- `map(f)` of the user's own function, seen through once with fastload's tracer
  (fastload/trace/): f runs on stand-ins, the image a traced image (a transform
  fastload maps is intercepted where the image enters it), every other field a stand-in
  that may only be passed on; f must return a flat tuple, list or dict of those (the
  image's transform output among them) and draw no random numbers outside the
  transforms. A function that computes with a field (`s["cls"] + 1`), reads the image
  (`.crop`, `.size`), or returns anything else is not followed, and the reason says what
  it did and where;
- `select(predicate)` over the label and key fields: evaluated once per sample when the
  loader is built;
- `batched(n)` last: the batch size (the loader's batch_size must be None, as with
  wds.WebLoader), `partial=False` is drop_last;
- `with_epoch(n)` (n items of the pipeline per process and epoch: samples, or batches
  after `batched`) and `repeat(k)`: an epoch of that many samples per rank, the member
  index repeated; shorter than one pass over the shards is not mapped (the loader's epoch
  always covers the whole index).

Fields: the image (jpg, jpeg, png, webp, ppm, bmp, tiff, gif, as TarShards reads them),
`cls` (an int), `__key__`, `__url__`, `__local_path__`. A sample holding other members in
a dict output, or a field fastload's index does not keep (json, txt, ...), is not mapped.
Anything else (an unknown stage, a map function that computes with a field, a predicate
that reads the image, a field the index does not keep) leaves the pipeline on the generic
path, `loader.path` naming the stage and where it was built ("generic: webdataset pipeline
stage map (train.py:42) is not mapped: ...").

`wds.WebLoader` is a loader itself (a torch DataLoader in its first stage): pass the
dataset it wraps to fastload.DataLoader in its place (`fastload.DataLoader(ds,
batch_size=None)` for a pipeline ending in `batched(n)`).

Example:
    >>> import webdataset as wds
    >>> reason = not_mapped(wds.DataPipeline(wds.SimpleShardList(["a.tar"]), wds.tarfile_to_samples(),
    ...                                       wds.slice(10)))
    >>> reason.split(": ")[0]
    'webdataset pipeline stage islice (itertools) is not mapped'
"""

from __future__ import annotations

import hashlib
import subprocess
import urllib.parse
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload import trace
from fastload.compat.conversion import AnalysedSource, Analysis
from fastload.datasets.tar import TarShards
from fastload.datasets.webdataset_fields import DECODES, FIX, Field, NotMapped, Recipe, is_pipeline
from fastload.datasets.webdataset_recipe import not_mapped, output_fields, read_recipe
from fastload.source.index import FlatStrings, SampleIndex

def _local_shards(urls: Sequence[str], cache_dir: str) -> List[str]:
    """The URLs as TarShards takes them: a `pipe:` command's output cached once."""
    out = []
    for url in urls:
        if url.startswith("pipe:"):
            out.append(_piped(url, cache_dir))
        else:
            out.append(url)
    return out


def _piped(url: str, cache_dir: str) -> str:
    """Runs `pipe:<command>` once; its output, a tar, is cached under cache_dir/shards
    (keyed by the command: remove the file to run it again)."""
    from fastload.source.urls import cached_shard

    command = url[len("pipe:"):]

    def run(out) -> None:
        done = subprocess.run(command, shell=True, stdout=out, stderr=subprocess.PIPE)
        if done.returncode != 0:
            raise OSError(f"fastload: the shard command {command!r} exited with {done.returncode}: "
                          f"{done.stderr.decode('utf-8', 'replace')[-500:]}. Check the command (webdataset's pipe: URL).")

    return cached_shard(cache_dir, hashlib.sha1(url.encode("utf-8", "surrogateescape")).hexdigest()[:16] + "-pipe.tar",
                        run)


# ---- the map-style view -------------------------------------------------------------------




def _apply(fns: Sequence[Any], value: Any) -> Any:
    for f in fns:
        value = f(value)
    return value


def _label_fns(fns: Sequence[Any]) -> Tuple[Any, ...]:
    # int() of an int label is the label: dropped, so the index's labels stay the batch's.
    return tuple(f for f in fns if f is not int)


class WebDatasetSamples(AnalysedSource, torch.utils.data.Dataset):
    """A webdataset pipeline as a map-style dataset over the same shards.

    Sample i is what the pipeline yields for the i-th sample of its shards (fastload's
    member index, fastload.TarShards): the image decoded as the pipeline's decode() does,
    its transforms applied, the label an int from `.cls`, in the pipeline's structure
    (tuple or dict). fastload.DataLoader builds it from a pipeline it maps
    (`from_pipeline`) and runs it natively through its compat analysis; indexed directly,
    or on the generic path, it runs the pipeline's own callables per sample.

    Attributes:
        pipeline: the user's webdataset pipeline.
        recipe: what fastload read from its stages.
        shards: the fastload.TarShards holding the member index.
        rows: per sample of this view, its row in `shards.index` (a with_epoch longer
            than one pass repeats rows).

    Example:
        >>> import webdataset as wds                                            # doctest: +SKIP
        >>> ds = wds.WebDataset("train-{0..9}.tar", shardshuffle=100).decode("pil").to_tuple("jpg", "cls")  # doctest: +SKIP
        >>> view = WebDatasetSamples.from_pipeline(ds)                           # doctest: +SKIP
        >>> image, label = view[0]                                               # doctest: +SKIP
    """

    def __init__(self, pipeline: Any, recipe: Recipe, shards: Any, rows: np.ndarray, members: Dict[str, Any]):
        self.pipeline, self.recipe, self.shards = pipeline, recipe, shards
        self.rows = rows
        self._members = members  # per image row: {"ext": image ext}

    @classmethod
    def from_pipeline(cls, pipeline: Any, *, on_error: str = "raise", world_size: int = 1,
                      cache_dir: Optional[str] = None, recipe: Optional[Recipe] = None) -> "WebDatasetSamples":
        """The view of `pipeline` (its `recipe` when already read); NotMapped when a stage or
        the shards' content is not mapped. A shard that cannot be read raises as
        fastload.TarShards does (on_error). Each shard's index is read once: its samples'
        members are checked as TarShards groups them (_checked_shards)."""
        from fastload.source.tar_index import default_cache_dir

        recipe = recipe if recipe is not None else read_recipe(pipeline)
        cache = cache_dir or default_cache_dir()
        urls = _local_shards(recipe.urls, cache)
        shards = _checked_shards(urls, recipe, cache_dir=cache, on_error=on_error, progress=False)
        shards.urls = list(recipe.urls)  # as the pipeline names them (its __url__)
        exts = shards.exts
        rows = _keep(shards, recipe, shards.raw_labels)
        n = len(rows)
        if recipe.repeat_passes is not None:
            rows = np.tile(rows, recipe.repeat_passes)
        elif recipe.epoch_items is not None:
            per_item = recipe.batch[0] if recipe.batch else 1
            total = recipe.epoch_items * per_item * max(1, world_size)
            if total < n:
                raise NotMapped(f"webdataset pipeline: with_epoch({recipe.epoch_items}) is "
                                f"{total} samples per epoch over {max(1, world_size)} rank(s), fewer than the "
                                f"shards' {n}: fastload's epochs each cover the whole index (drop with_epoch and "
                                "use the loader's epochs, or keep it on the generic path)")
            rows = np.resize(rows, total)
        return cls(pipeline, recipe, shards, rows.astype(np.int64), {"ext": exts})

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return (f"WebDatasetSamples({len(self.shards.urls)} shards, {len(self)} samples, "
                f"stages={' -> '.join(self.recipe.stages)})")

    # -- one sample, as the pipeline makes it (the generic path, and the reference) ----------
    def _value(self, f: Field, row: int, image: Callable[[], Any]) -> Any:
        kind = f.kind
        if kind == "image":
            value = image()
            return value if value is trace.SLOT else _apply(f.fns, value)  # the slot: the engine applied them
        if kind == "cls":
            return _apply(f.fns, int(self.shards.index.labels[row]))
        if kind == "__key__":
            return _apply(f.fns, self.shards.keys[row])
        url = self.shards.urls[int(self.shards.sample_shards[row])]
        if kind == "__url__":
            return _apply(f.fns, url)
        return _apply(f.fns, _local_path(url))

    def _structure(self, row: int, image: Callable[[], Any]) -> Any:
        recipe = self.recipe
        if recipe.tuple_fields is not None:
            return tuple(self._value(f, row, image) for f in recipe.tuple_fields)
        return {k: self._value(f, row, image) for k, f in self._dict_fields().items()}

    def _dict_fields(self) -> Dict[str, Field]:
        if not self.recipe.dict_rest:
            return self.recipe.dict_fields
        out = {"__key__": Field(("__key__",)), "__url__": Field(("__url__",))}
        out.update({"__local_path__": Field(("__local_path__",))} if self._has_local_path() else {})
        image_ext = self._members["ext"][0] if len(self._members["ext"]) else "jpg"
        out[image_ext] = Field((image_ext,))
        out["cls"] = Field(("cls",))
        out = {k: f for k, f in out.items() if k not in self.recipe.removed}
        out.update(self.recipe.dict_fields)
        return out

    def _has_local_path(self) -> bool:
        return bool(self.shards.urls) and _local_path(self.shards.urls[0]) is not None

    def __getitem__(self, i: int) -> Any:
        row = int(self.rows[i])

        def image() -> Any:
            from webdataset import autodecode

            data = self.shards.index.read(row)
            ext = self._members["ext"][row]
            return autodecode.ImageHandler(self.recipe.decode)("." + ext, data)

        return self._structure(row, image)

    # -- the compat analysis (the native and hybrid paths) ---------------------------------
    def image_transform(self) -> Any:
        """The image's transforms as one callable (webdataset's tensor decodes: torchvision's
        PILToTensor / ToTensor first), or None."""
        image = next(f for f in output_fields(self.recipe) if f.kind == "image") \
            if any(f.kind == "image" for f in output_fields(self.recipe)) else None
        first = DECODES.get(self.recipe.decode or "", "")
        fns: List[Any] = list(image.fns) if image is not None else []
        if first:
            from torchvision import transforms as T

            fns.insert(0, getattr(T, first)())
        if not fns:
            return None
        if len(fns) == 1:
            return fns[0]
        from torchvision import transforms as T

        return T.Compose(fns)

    def analysis(self, wrapped: bool = False) -> Analysis:
        from fastload.compat.torchvision import flatten, split_transform

        out = Analysis(f"webdataset pipeline [{' -> '.join(self.recipe.stages)}]")
        if wrapped:
            return out.refuse("a webdataset pipeline inside a Subset or ConcatDataset",
                              "pass the pipeline to fastload.DataLoader itself")
        fields_ = list(output_fields(self.recipe)) if self.recipe.tuple_fields is not None \
            else list(self._dict_fields().values())
        images = [f for f in fields_ if f.kind == "image"]
        if len(images) != 1:
            return out.refuse(f"{len(images)} images per sample (the engine makes one)", FIX)
        transform = self.image_transform()
        if transform is None:
            return out.refuse("the image reaches the batch as a PIL image (no transform makes a tensor)", FIX)
        out.transform = transform
        out.pipeline = split_transform(transform, to_run=True)
        out.wrappers = flatten(transform)[1]
        index = self.shards.index
        take = lambda a: a[self.rows]  # noqa: E731
        members = _take_strings(index.members, self.rows) if index.members is not None else None
        simple = self.recipe.tuple_fields is not None and len(fields_) == 2 and fields_[0].kind == "image" \
            and fields_[1].kind == "cls" and not _label_fns(fields_[1].fns)
        labels = take(index.labels) if simple else np.arange(len(self.rows), dtype=np.int64)
        out.index = SampleIndex(index.files, take(index.file_ids), take(index.offsets), take(index.sizes),
                                labels.astype(np.int64), members, remote=index.remote)
        if not simple:
            out.rebuild = self._rebuild
        return out

    def _rebuild(self, images: Any, rows: torch.Tensor) -> Any:
        """The batch of view samples `rows` (int64 [B]) as torch's default_collate makes it
        from the pipeline's samples, `images` (the engine's batch) in the image's place."""
        return trace.collated([self._structure(int(self.rows[r]), lambda: trace.SLOT) for r in rows.tolist()], images)


def _local_path(url: str) -> Optional[str]:
    parsed = urllib.parse.urlparse(url)
    return parsed.path if parsed.scheme in ("", "file") and not url.startswith("pipe:") else None


def _take_strings(strings: FlatStrings, rows: np.ndarray) -> FlatStrings:
    """strings[rows] as FlatStrings, without a Python string per row."""
    if len(rows) == len(strings) and np.array_equal(rows, np.arange(len(strings))):
        return strings
    starts, ends = strings.offsets[rows], strings.offsets[rows + 1]
    lengths = ends - starts
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # byte k of the result is byte k - offsets[j] + starts[j] of the source, j its string
    at = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    return FlatStrings(strings.data[at], offsets)


def _checked_shards(urls: List[str], recipe: Recipe, **kwargs: Any) -> Any:
    """fastload.TarShards over `urls` whose index pass also checks each sample's members
    for the pipeline (each shard's index read once): `exts` (per sample of the index, its
    image's extension) and `raw_labels` (its .cls text, when select() predicates need it)
    on the result; NotMapped when a sample's members say the pipeline would see it
    otherwise (another image first among to_tuple's alternatives, no .cls, members of a
    dict output the index does not keep)."""
    return _CheckedShards(urls, recipe, **kwargs)


class _CheckedShards(TarShards):
    """fastload.TarShards checking each shard's samples for a webdataset pipeline as its
    index is read (see _checked_shards)."""

    def __init__(self, urls: List[str], recipe: Recipe, **kwargs: Any):
        self.recipe = recipe
        self.exts: List[str] = []
        self.raw_labels: List[bytes] = []
        super().__init__(urls, **kwargs)

    def _grouped(self, url: str, record: Dict[str, Any], groups: Dict[str, Dict[str, int]], keys: List[str]) -> None:
        shard = self.recipe.urls[len(self.index_status) - 1]  # (this shard's status was just appended)
        _check_shard(self.recipe, shard, record, groups, keys, self.exts, self.raw_labels)


def _check_shard(recipe: Recipe, url: str, record: Dict[str, Any], groups: Dict[str, Dict[str, int]],
                 keys: List[str], exts: List[str], raw_labels: List[bytes]) -> None:
    """Checks the samples `keys` of one shard (their image and label members grouped by
    TarShards: `groups`), appending each one's image extension and .cls text."""
    from fastload.datasets.tar import IMAGE_EXTS, PREPARED_IMAGE_EXTS
    from fastload.source.tar_index import LABEL_EXTS, split_key

    image_fields = [f for f in recipe.fields() if f.kind == "image"]
    dict_rest = recipe.tuple_fields is None and recipe.dict_rest
    grouped = set(IMAGE_EXTS + PREPARED_IMAGE_EXTS + LABEL_EXTS)
    if dict_rest or any(a not in grouped for f in image_fields for a in f.source):
        # Members TarShards does not group matter here: every member of every key.
        everything: Dict[str, Dict[str, int]] = {}
        for i, name in enumerate(record["names"]):
            key, ext = split_key(name)
            everything.setdefault(key, {})[ext] = i
        groups = everything
    order = IMAGE_EXTS + PREPARED_IMAGE_EXTS  # TarShards' choice of a key's image
    texts, predicates = record["labels_text"], bool(recipe.predicates)
    sources = [f.source for f in image_fields]
    for key in keys:  # (plain loops: a generator per sample would cost more than the checks)
        present = groups[key]
        for ext in order:
            if ext in present:
                break
        if "cls" not in present:
            raise NotMapped(f"webdataset pipeline: sample {key!r} of {url!r} has no .cls member "
                             "(its label comes from another member; the pipeline's .cls field would be missing)")
        for source in sources:
            first = None
            for alternative in source:
                if alternative in present:
                    first = alternative
                    break
            if first != ext:
                f = image_fields[sources.index(source)]
                raise NotMapped(f"webdataset pipeline: sample {key!r} of {url!r}: the field "
                                 f"{';'.join(f.source)!r} is its .{first} member, fastload's index reads .{ext}")
        if dict_rest:
            extra = sorted(set(present) - {ext, "cls"})
            if extra:
                raise NotMapped(f"webdataset pipeline: sample {key!r} holds .{', .'.join(extra)} members, which "
                                 "a dict sample carries and fastload's index does not keep (select the fields "
                                 "with to_tuple(...) or rename(..., keep=False))")
        exts.append(ext)
        if predicates:
            raw_labels.append(texts.get(str(present["cls"]), "").encode("utf-8"))


def _keep(shards: Any, recipe: Recipe, raw_labels: List[bytes]) -> np.ndarray:
    """The index rows the pipeline's select() predicates keep (all without one)."""
    n = len(shards.index)
    if not recipe.predicates:
        return np.arange(n, dtype=np.int64)
    keep = []
    for row in range(n):
        url = shards.urls[int(shards.sample_shards[row])]
        fields_ = {"__key__": shards.keys[row], "__url__": url}
        if (local := _local_path(url)) is not None:
            fields_["__local_path__"] = local
        ok = True
        for predicate, where, decoded in recipe.predicates:
            # As the predicate sees the sample there: .cls decoded to an int after decode(), else its bytes.
            sample = _PredicateSample({**fields_, "cls": int(shards.index.labels[row]) if decoded else raw_labels[row]})
            ok = ok and _predicate(predicate, where, sample)
        if ok:
            keep.append(row)
    return np.asarray(keep, dtype=np.int64)


class _PredicateSample(dict):
    """A sample for select(): the label and key fields; the image is not read."""

    def __missing__(self, key: str) -> Any:
        raise NotMapped(f"select(predicate) reads the sample's {key!r} (fastload evaluates predicates on "
                        f"{', '.join(sorted(self))} when the loader is built)")


def _predicate(p: Any, where: str, sample: Dict[str, Any]) -> bool:
    try:
        return bool(p(sample))
    except NotMapped as why:
        raise NotMapped(f"webdataset pipeline stage select ({where}) is not mapped: {why}") from None
    except Exception as error:  # noqa: BLE001 - the pipeline raises it itself, on the generic path
        raise NotMapped(f"webdataset pipeline stage select ({where}) is not mapped: the predicate raised "
                        f"{type(error).__name__}: {error}") from None


# ---- the loader's hook ----------------------------------------------------------------------

_REASONS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def adopt(dataset: Any, *, batch_size: Optional[int], shuffle: Optional[bool], drop_last: bool, on_error: str,
          accelerate: Any, distributed: Any = "auto") -> Optional[Tuple[WebDatasetSamples, Optional[int], bool, bool]]:
    """(view, batch_size, shuffle, drop_last) the loader uses in place of a webdataset
    pipeline it maps, else None (the pipeline stays as it is; `generic_reason` says why).

    With batched(n) in the pipeline the loader's batch_size must be None (as with
    wds.WebLoader): n becomes the batch size and partial=False drop_last. shuffle is the
    pipeline's (a shard or sample shuffle) unless the loader was given one.
    """
    if not is_pipeline(dataset) or accelerate is False:
        return None
    try:
        recipe = read_recipe(dataset)
        if recipe.batch is not None and batch_size is not None:
            raise NotMapped(f"webdataset pipeline: batched({recipe.batch[0]}) in the pipeline and "
                            f"batch_size={batch_size} in the loader (batches of batches); pass batch_size=None")
        if recipe.batch is None and batch_size is None:
            raise NotMapped("webdataset pipeline without batched(n) and batch_size=None (samples one by one)")
        from fastload.sampling.distributed import resolve_distributed

        world = resolve_distributed(distributed)[1]
        view = WebDatasetSamples.from_pipeline(dataset, on_error=on_error, world_size=world, recipe=recipe)
    except NotMapped as why:
        _REASONS[dataset] = str(why)
        return None
    if recipe.batch is not None:
        batch_size, drop_last = recipe.batch[0], not recipe.batch[1]
    return view, batch_size, (recipe.shuffle if shuffle is None else bool(shuffle)), drop_last


def generic_reason(dataset: Any) -> Optional[str]:
    """"generic: <why>" for a webdataset pipeline fastload did not map, else None."""
    if not is_pipeline(dataset):
        return None
    why = _REASONS.get(dataset) or not_mapped(dataset)
    if why is None:
        return None
    return f"generic: {why}"
