"""Hugging Face `datasets.Dataset`s with an Image column on the native engine
(fastload/adapters/huggingface.py): every supported form gives torch's DataLoader's batches
(keys, dtypes, labels, pixels within the resize tolerance), what is not seen through falls
back naming why, resume is exact, DDP ranks see each sample once, broken image bytes in
the Arrow table fail or are skipped as on every native source."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import warnings

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader

import fastload
import jpeg_samples as js
from fastload import _ext
from resume_helpers import batches_equal, check_resume_at_every_position
from trace_helpers import assert_same_structure

datasets = pytest.importorskip("datasets", reason="the Hugging Face datasets package is not installed (optional)")
torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built")]

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# Native vs torchvision + PIL, same crop: two uint8 levels of resize rounding, through
# ToTensor and Normalize's 1/std (as tests/trace/test_trace.py).
EVAL_ATOL = 2.5 / 255 / min(STD)
CLASSES, PER_CLASS = 2, 5
N = CLASSES * PER_CLASS
NAMES = [f"class_{c}" for c in range(CLASSES)]


def eval_tf():
    return T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])


def train_tf():
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def keeps_columns(tf):
    """The common shape: a pixel_values column added, the image column deleted."""
    def fn(examples):
        examples["pixel_values"] = [tf(image.convert("RGB")) for image in examples["image"]]
        del examples["image"]
        return examples
    return fn


def new_dict(tf):
    """The other common shape: a new dict of the transformed columns only."""
    def fn(examples):
        return {"pixel_values": [tf(image) for image in examples["image"]], "labels": examples["label"]}
    return fn


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    paths = js.write_image_folder(folder / "data", classes=CLASSES, per_class=PER_CLASS, size=(40, 48))
    return str(folder), paths


def features():
    return datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})


def labels_of(paths):
    return [NAMES.index(os.path.basename(os.path.dirname(p))) for p in paths]


def embedded(paths, corrupt=()):
    images = []
    for i, p in enumerate(paths):
        data = open(p, "rb").read()
        images.append({"bytes": data[:data.index(b"\xff\xda") + 30] if i in corrupt else data, "path": None})
    return datasets.Dataset.from_dict({"image": images, "label": labels_of(paths)}, features=features())


# form -> dataset maker (root, paths) -> (dataset, where the images are in loader.path)
FORMS = {
    "imagefolder": lambda root, paths: (datasets.load_dataset(
        "imagefolder", data_dir=os.path.join(root, "data"), split="train",
        cache_dir=os.path.join(root, "cache")), f"{N} image files"),
    "from_dict_paths": lambda root, paths: (datasets.Dataset.from_dict(
        {"image": paths, "label": labels_of(paths)}).cast_column("image", datasets.Image()), f"{N} image files"),
    "load_from_disk": lambda root, paths: (saved(root, paths), "1 Arrow cache file"),
    "in_memory_bytes": lambda root, paths: (embedded(paths), "in-memory bytes written to a temporary file"),
    "shuffled_selection": lambda root, paths: (saved(root, paths).shuffle(seed=3).select(range(1, 8)),
                                               "1 Arrow cache file"),
}


def saved(root, paths):
    where = os.path.join(root, "saved")
    if not os.path.exists(where):
        embedded(paths).save_to_disk(where)
    return datasets.load_from_disk(where)


@pytest.mark.parametrize("shape", [keeps_columns, new_dict])
@pytest.mark.parametrize("form", list(FORMS))
def test_eval_transforms_run_natively_with_torchs_batches(form, shape, root):
    dataset, where = FORMS[form](*root)
    dataset = dataset.with_transform(shape(eval_tf()))
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith(f"native: Hugging Face Dataset ({where}; with_transform "
                                  f"{shape.__name__}.<locals>.fn) [Resize -> CenterCrop -> "), loader.path
    ours, theirs = list(loader), list(TorchLoader(dataset, batch_size=4))
    assert len(ours) == len(theirs) == (len(dataset) + 3) // 4
    label = "label" if shape is keeps_columns else "labels"
    for a, b in zip(ours, theirs):
        assert_same_structure(a, b)
        assert torch.equal(a[label], b[label])
        assert torch.allclose(a["pixel_values"], b["pixel_values"], atol=EVAL_ATOL), \
            (a["pixel_values"] - b["pixel_values"]).abs().max()


def test_set_transform_in_place_and_train_transforms_give_torchs_structure(root):
    dataset, _ = FORMS["load_from_disk"](*root)
    dataset.set_transform(keeps_columns(train_tf()))
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2,
                                 generator=torch.Generator().manual_seed(5))
    assert loader.path.startswith("native: Hugging Face Dataset (1 Arrow cache file; with_transform "
                                  "keeps_columns.<locals>.fn) [RandomResizedCrop -> RandomHorizontalFlip -> "), loader.path
    ours = list(loader)
    theirs = list(TorchLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5)))
    for a, b in zip(ours, theirs):
        assert_same_structure(a, b)
        assert torch.equal(a["label"], b["label"])  # the same samples in the same order


def test_the_index_points_at_each_images_bytes_in_the_arrow_cache_file(root):
    """Sample i is a run of bytes of the memory-mapped cache file: the very bytes stored."""
    from fastload.adapters import analyse

    dataset = FORMS["shuffled_selection"](*root)[0].with_transform(keeps_columns(eval_tf()))
    index = analyse(dataset).index
    assert set(index.files) == {dataset.cache_files[0]["filename"]}
    stored = dataset.with_format(None).cast_column("image", datasets.Image(decode=False))
    assert [index.read(i) for i in range(len(dataset))] == [row["image"]["bytes"] for row in stored]


def test_in_memory_bytes_go_to_one_temporary_file_removed_with_the_index(root):
    import gc

    from fastload.adapters import analyse

    _, paths = root
    analysis = analyse(embedded(paths).with_transform(keeps_columns(EVAL)))
    (temp,) = set(analysis.index.files)
    assert os.path.basename(temp).startswith("fastload-hf-")
    assert os.path.getsize(temp) == sum(os.path.getsize(p) for p in paths)
    assert [analysis.index.read(i) for i in range(N)] == [open(p, "rb").read() for p in paths]
    del analysis
    gc.collect()
    assert not os.path.exists(temp)


def test_with_format_torch_of_one_size_gives_uint8_chw_as_torch(tmp_path):
    paths = js.write_image_folder(tmp_path / "same", classes=2, per_class=3, size=(32, 40))
    photos = [js.encode(js.photo(30, 36, seed=i)) for i in range(6)]
    dataset = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in photos],
                                          "label": labels_of(paths)}, features=features()).with_format("torch")
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith("native: Hugging Face Dataset (in-memory bytes written to a temporary file; "
                                  "with_format('torch')) [CenterCrop]"), loader.path
    for a, b in zip(list(loader), list(TorchLoader(dataset, batch_size=4))):
        assert_same_structure(a, b)
        assert a["image"].dtype == torch.uint8 and a["image"].shape[1:] == (3, 30, 36)
        assert torch.equal(a["label"], b["label"])
        assert (a["image"].int() - b["image"].int()).abs().max() <= 2  # libjpeg-turbo builds: rounding only


def exif_rotated(tmp_path, *, padded=False, embed=False):
    """One JPEG with EXIF orientation 6; padded: a 6 KB comment segment first, so its EXIF
    and frame headers lie past the first read of a file's header."""
    import io

    from PIL import Image

    image = Image.fromarray(js.photo(30, 40))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    image.save(out, format="JPEG", exif=exif)
    data = out.getvalue()
    if padded:
        comment = b"x" * 6000
        data = data[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + data[2:]
    assert Image.open(io.BytesIO(data)).getexif()[0x0112] == 6
    path = str(tmp_path / "rotated.jpg")
    with open(path, "wb") as f:
        f.write(data)
    image = {"bytes": data, "path": None} if embed else path
    return datasets.Dataset.from_dict({"image": [image], "label": [0]}).cast_column("image", datasets.Image())


EVAL = eval_tf()


def random_draw(examples):
    examples["pixel_values"] = [EVAL(im.convert("RGB")) for im in examples["image"]]
    examples["noise"] = [random.random() for _ in examples["image"]]
    del examples["image"]
    return examples


def reads_pixels(examples):
    examples["pixel_values"] = [EVAL(im.point(lambda v: 255 - v)) for im in examples["image"]]
    del examples["image"]
    return examples


def keeps_image(examples):
    examples["pixel_values"] = [EVAL(im.convert("RGB")) for im in examples["image"]]
    return examples


def stacking(examples):
    """Hugging Face's image-classification examples' collate_fn."""
    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]),
            "labels": torch.tensor([e["label"] for e in examples])}


def casting(examples):
    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]).half(),
            "labels": torch.tensor([e["label"] for e in examples])}


def with_sizes(examples):
    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]),
            "sizes": torch.tensor([e["image"].size for e in examples])}


def with_mask(examples):
    pixels = torch.stack([e["pixel_values"] for e in examples])
    return {"pixel_values": pixels, "pixel_mask": torch.ones_like(pixels, dtype=torch.int64)}


def returns_images(examples):
    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]), "images": [e["image"] for e in examples]}


# name -> (dataset maker (root, paths, tmp_path), loader arguments, what the reason says)
FALLBACKS = {
    "no transform": (lambda r, p, t: saved(r, p), {}, "rows hold PIL images, which torch's default_collate"),
    "numpy format": (lambda r, p, t: saved(r, p).with_format("numpy"), {}, "format 'numpy' is not followed"),
    "image kept": (lambda r, p, t: saved(r, p).with_transform(keeps_image), {},
                   "rows keep the image column 'image' (PIL images), which torch's default_collate cannot batch"),
    "random draw": (lambda r, p, t: saved(r, p).with_transform(random_draw), {},
                    "draws random numbers outside the transforms (random)"),
    "pixels read": (lambda r, p, t: saved(r, p).with_transform(reads_pixels), {},
                    "reads the image's pixels before a transform fastload maps at " + __file__),
    "decode=False": (lambda r, p, t: saved(r, p).cast_column("image", datasets.Image(decode=False))
                     .with_transform(keeps_columns(eval_tf())), {}, "is Image(decode=False)"),
    "exif orientation": (lambda r, p, t: exif_rotated(t).with_transform(keeps_columns(eval_tf())), {},
                         "has EXIF orientation 6: datasets rotates it on decode"),
    "exif orientation past the first read": (lambda r, p, t: exif_rotated(t, padded=True).with_transform(
        keeps_columns(eval_tf())), {}, "has EXIF orientation 6: datasets rotates it on decode"),
    "exif orientation in Arrow bytes": (lambda r, p, t: exif_rotated(t, padded=True, embed=True).with_transform(
        keeps_columns(eval_tf())), {}, "has EXIF orientation 6: datasets rotates it on decode"),
    "torch format, sizes differ": (lambda r, p, t: saved(r, p).with_format("torch"), {},
                                   "sizes: torch's default_collate cannot stack them"),
    "collate_fn of lists": (lambda r, p, t: saved(r, p).with_transform(keeps_columns(eval_tf())),
                            dict(collate_fn=lambda rows: rows), "generic: custom collate_fn (<lambda> does not "
                            "return the images stacked as they are (0 stacks found"),
    "collate_fn casting": (lambda r, p, t: saved(r, p).with_transform(keeps_image), dict(collate_fn=casting),
                           "generic: custom collate_fn (casting does not return the images stacked"),
    "collate_fn using images": (lambda r, p, t: saved(r, p).with_transform(keeps_image),
                                dict(collate_fn=with_sizes), "generic: custom collate_fn (with_sizes raised "
                                "AttributeError on stand-in images"),
    "collate_fn mask from images": (lambda r, p, t: saved(r, p).with_transform(keeps_image),
                                    dict(collate_fn=with_mask), "generic: custom collate_fn (with_mask computes "
                                    "other outputs from the images)"),
    "collate_fn returning images": (lambda r, p, t: saved(r, p).with_transform(keeps_image),
                                    dict(collate_fn=returns_images), "generic: custom collate_fn (returns_images "
                                    "returns the PIL images of the rows)"),
    "a torchvision dataset's collate_fn": (lambda r, p, t: torchvision.datasets.ImageFolder(
        os.path.join(r, "data"), transform=EVAL), dict(collate_fn=stacking), "generic: custom collate_fn"),
    "inside a Subset": (lambda r, p, t: torch.utils.data.Subset(saved(r, p).with_transform(
        keeps_columns(eval_tf())), [0, 1]), {}, "inside a torch Subset/ConcatDataset"),
    "streaming": (lambda r, p, t: datasets.load_dataset("imagefolder", data_dir=os.path.join(r, "data"),
                                                        split="train", streaming=True), {},
                  "generic: a Hugging Face IterableDataset (streaming"),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_what_is_not_seen_through_falls_back_naming_why(name, root, tmp_path):
    make, kwargs, why = FALLBACKS[name]
    loader = fastload.DataLoader(make(*root, tmp_path), batch_size=4, **kwargs)
    assert loader.path.startswith("generic: ") and why in loader.path, loader.path


@pytest.mark.parametrize("transform", [keeps_image, keeps_columns(EVAL)])
def test_a_stacking_collate_fn_is_followed_with_the_image_column_kept_or_not(transform, root):
    dataset = saved(*root).with_transform(transform)
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=stacking, shuffle=True,
                                 generator=torch.Generator().manual_seed(1))
    assert loader.path.startswith("native: Hugging Face Dataset (1 Arrow cache file; with_transform ") and \
        loader.path.endswith("; collate_fn stacking followed"), loader.path
    ours = list(loader)
    theirs = list(TorchLoader(dataset, batch_size=4, collate_fn=stacking, shuffle=True,
                              generator=torch.Generator().manual_seed(1)))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert_same_structure(a, b)
        assert torch.equal(a["labels"], b["labels"])
        assert torch.allclose(a["pixel_values"], b["pixel_values"], atol=EVAL_ATOL)


def test_a_fallback_still_gives_torchs_batches(root):
    dataset = saved(*root).with_transform(random_draw)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith("generic: ")
    random.seed(0)
    torch.manual_seed(0)
    ours = list(loader)
    random.seed(0)
    torch.manual_seed(0)
    theirs = list(TorchLoader(dataset, batch_size=4))
    assert batches_equal(ours, theirs)


@pytest.mark.parametrize("form", ["load_from_disk", "imagefolder"])
def test_resume_mid_epoch_is_exact(form, root):
    dataset, _ = FORMS[form](*root)
    dataset = dataset.with_transform(new_dict(train_tf()))

    def make():
        return fastload.DataLoader(dataset, batch_size=3, shuffle=True, seed=11,
                                   generator=torch.Generator().manual_seed(2))

    assert make().path.startswith("native: ")
    check_resume_at_every_position(make)


def test_broken_image_bytes_raise_or_are_skipped_as_on_every_native_source(root, tmp_path):
    _, paths = root
    embedded(paths, corrupt=(3,)).save_to_disk(str(tmp_path / "broken"))
    dataset = datasets.load_from_disk(str(tmp_path / "broken")).with_transform(new_dict(eval_tf()))
    cache = dataset.cache_files[0]["filename"]
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith("native: ")
    with pytest.raises(fastload.DecodeError) as raised:
        list(loader)
    assert raised.value.index == 3 and raised.value.source == f"{cache}:row 3", (raised.value.index,
                                                                                raised.value.source)
    assert "on_error='skip'" in str(raised.value)

    skipping = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    with pytest.warns(UserWarning, match=r"skipped sample 3 \(.*:row 3\)"):
        got = list(skipping)
    clean = list(fastload.DataLoader(datasets.load_from_disk(str(tmp_path / "broken")).select(
        [0, 1, 2, 4, 4, 5, 6, 7, 8, 9]).with_transform(new_dict(eval_tf())), batch_size=4))
    assert batches_equal(got, clean)  # sample 3 replaced by the next readable one, 4
    assert [(r["sample"], r["source"]) for r in skipping.stats()["skipped_samples"]] == [(3, f"{cache}:row 3")]


DDP_SCRIPT = r'''
import datetime, json, os, sys
import torch, torch.distributed as dist
import datasets
from torchvision import transforms as T
import fastload

where, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
tf = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])
def fn(examples):
    return {"pixel_values": [tf(im.convert("RGB")) for im in examples["image"]], "row": examples["row"]}
dataset = datasets.load_from_disk(where).with_transform(fn)
loader = fastload.DataLoader(dataset, batch_size=3, shuffle=True, seed=1)
epochs = []
for epoch in range(2):
    loader.set_epoch(epoch)
    epochs.append([batch["row"].tolist() for batch in loader])
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"path": loader.path, "epochs": epochs}, f)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ddp_ranks_see_every_sample_exactly_once_per_epoch(root, tmp_path, world):
    _, paths = root
    rows = 18  # 1, 2 or 3 ranks x 3 per batch x whole batches: no padding
    photos = [open(paths[i % N], "rb").read() for i in range(rows)]
    datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in photos], "row": list(range(rows))},
                               features=datasets.Features({"image": datasets.Image(),
                                                           "row": datasets.Value("int64")})
                               ).save_to_disk(str(tmp_path / "ddp"))
    script = tmp_path / "ddp_hf.py"
    script.write_text(DDP_SCRIPT)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's fastload
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([here] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc_per_node={world}", str(script), str(tmp_path / "ddp"), str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish (a hang?): {(e.stderr or b'')[-3000:]!r}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(world)]
    assert all(r["path"].startswith("native: Hugging Face Dataset (1 Arrow cache file") for r in ranks), ranks
    for epoch in range(2):
        seen = [row for r in ranks for batch in r["epochs"][epoch] for row in batch]
        assert sorted(seen) == list(range(rows)), (epoch, seen)
        assert [len(r["epochs"][epoch]) for r in ranks] == [rows // (3 * world)] * world
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # set_epoch reshuffles


STREAMING_DDP_SCRIPT = r'''
import datetime, json, os, sys
import torch, torch.distributed as dist
import datasets
import fastload

where, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
stream = datasets.Dataset.from_dict({"row": list(range(20))}).to_iterable_dataset(num_shards=4)
loader = fastload.DataLoader(stream, batch_size=2)
rows = [r for batch in loader for r in batch["row"].tolist()]
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"path": loader.path, "rows": rows}, f)
dist.barrier()
dist.destroy_process_group()
'''


def test_a_streaming_dataset_is_split_between_the_ddp_ranks(tmp_path):
    script = tmp_path / "ddp_stream.py"
    script.write_text(STREAMING_DDP_SCRIPT)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's fastload
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([here] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert all("rank" in r["path"] and "split_dataset_by_node" in r["path"] for r in ranks), ranks[0]["path"]
    assert sorted(ranks[0]["rows"] + ranks[1]["rows"]) == list(range(20))  # each row on one rank, once
    assert ranks[0]["rows"] and ranks[1]["rows"]


def test_a_streaming_dataset_outside_ddp_is_left_whole():
    from fastload.adapters.huggingface import split_by_rank

    stream = datasets.Dataset.from_dict({"row": list(range(6))}).to_iterable_dataset()
    assert split_by_rank(stream, "auto") is stream
    loader = fastload.DataLoader(stream, batch_size=3)
    assert [r for b in loader for r in b["row"].tolist()] == list(range(6))


def rotated_bytes(height=30, width=40):
    """A JPEG of height x width pixels stored with EXIF orientation 6 (datasets turns it
    to width x height on decode)."""
    import io

    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    Image.fromarray(js.photo(height, width, seed=9)).save(out, format="JPEG", exif=exif)
    return out.getvalue()


# n = 40 rows: position 1 is not among the probes (traced as its batch comes), position 3 is.
@pytest.mark.parametrize("at", [1, 3])
def test_one_exif_rotated_row_is_made_by_datasets_and_the_rest_natively(root, tmp_path, at):
    _, paths = root
    rows = 40
    photos = [open(paths[i % N], "rb").read() for i in range(rows)]
    photos[at] = rotated_bytes()
    datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in photos],
                                "label": [i % CLASSES for i in range(rows)]}, features=features()
                               ).save_to_disk(str(tmp_path / "rotated"))
    dataset = datasets.load_from_disk(str(tmp_path / "rotated")).with_transform(keeps_columns(eval_tf()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = fastload.DataLoader(dataset, batch_size=8)
        assert loader.path.startswith("native: Hugging Face Dataset (1 Arrow cache file; "), loader.path
        ours = list(loader)
    said = [str(w.message) for w in caught if "EXIF orientation 6" in str(w.message)]
    assert len(said) == 1 and f"sample {at}: row {at} of the table" in said[0], [str(w.message) for w in caught]
    theirs = list(TorchLoader(dataset, batch_size=8))
    own = dataset[at]["pixel_values"]  # datasets rotates it on decode, then the transform
    for b, (a, t) in enumerate(zip(ours, theirs)):
        assert_same_structure(a, t)
        assert torch.equal(a["label"], t["label"])
        for k in range(len(a["label"])):
            if b * 8 + k == at:
                assert torch.equal(a["pixel_values"][k], own) and torch.equal(t["pixel_values"][k], own)
            else:
                assert torch.allclose(a["pixel_values"][k], t["pixel_values"][k], atol=EVAL_ATOL)
    from fastload.adapters import analyse

    trace = analyse(dataset).trace
    trace.prepare(range(rows))
    assert list(trace.fallbacks) == [at] and trace.traced == rows


def test_rows_are_traced_and_header_checked_as_the_loader_reaches_them(root, monkeypatch):
    """Construction reads a bounded number of headers and traces as many rows, whatever the
    length; the rest as their batches are submitted."""
    from fastload.adapters import huggingface_trace
    from fastload.trace import PROBES

    seen, heads = [], []
    header = huggingface_trace.image_header
    monkeypatch.setattr(huggingface_trace, "image_header", lambda *a: heads.append(1) or header(*a))

    def fn(examples):
        seen.extend(examples["label"])
        return keeps_columns(EVAL)(examples)

    rows = 3000
    dataset = saved(*root).select([i % N for i in range(rows)]).with_transform(fn)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith("native: "), loader.path
    assert len(seen) <= PROBES + 1 and len(heads) <= PROBES + 1, (len(seen), len(heads))
    it = iter(loader)
    first = next(it)
    assert len(seen) <= 2 * (PROBES + 1) and len(heads) <= 2 * (PROBES + 1), (len(seen), len(heads))
    torch_first = next(iter(TorchLoader(dataset, batch_size=4)))
    assert torch.equal(first["label"], torch_first["label"])
    assert torch.allclose(first["pixel_values"], torch_first["pixel_values"], atol=EVAL_ATOL)


def test_a_table_of_paths_is_located_without_python_per_row(tmp_path, monkeypatch):
    """Each distinct path is looked at once, in Arrow's kernels: absolute paths as they
    are, others made absolute as os.path.abspath makes them; remote ones refused."""
    from fastload.source import arrow

    made = []
    abspath = os.path.abspath
    monkeypatch.setattr(os.path, "abspath", lambda p: made.append(p) or abspath(p))
    rows = 5000
    paths = [f"/data/train/n{i % 10:03d}/{i:06d}.jpg" for i in range(rows)]
    table = datasets.Dataset.from_dict({"image": paths}).cast_column("image", datasets.Image()).data.table
    located = arrow.locate(table, "image")
    assert not set(made) & set(paths), len(made)  # (imports may call abspath on their own files)
    assert [located.files[i] for i in located.file_ids[[0, 1234, rows - 1]]] == [paths[0], paths[1234], paths[-1]]
    odd = ["/a/./b.jpg", "rel/c.jpg", "/d//e.jpg", "/a/./b.jpg", "/f/../g.jpg"]
    table = datasets.Dataset.from_dict({"image": odd}).cast_column("image", datasets.Image()).data.table
    located = arrow.locate(table, "image")
    assert [located.files[i] for i in located.file_ids] == [abspath(p) for p in odd]
    assert sorted(p for p in made if p in odd) == sorted(set(odd))  # once per distinct path
    table = datasets.Dataset.from_dict({"image": ["/a.jpg", "hf://x/b.jpg"]}).cast_column(
        "image", datasets.Image()).data.table
    with pytest.raises(arrow.NotLocated, match=r"row 1 is a remote image \('hf://x/b.jpg'"):
        arrow.locate(table, "image")
