"""webdataset pipelines on fastload's tar-shard engine (fastload/datasets/webdataset.py).

Every mapped stage end to end against the same pipeline iterated by torch's DataLoader
(structure, dtypes, labels; pixels equal for deterministic transforms without resampling),
every unmapped stage on the generic path with its reason, the order (a global shuffle,
deterministic per seed and epoch, exact resume), hostile shards as fastload.TarShards
treats them, and 2 DDP ranks under torchrun.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2

import fastload
from fastload._ext import has_ops

wds = pytest.importorskip("webdataset")

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
SHARDS, PER_SHARD = 3, 7
N = SHARDS * PER_SHARD
EVAL = T.Compose([T.CenterCrop(24), T.ToTensor()])  # no resampling: pixels equal to PIL's


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*shardshuffle.*")
        yield


def _jpeg(rng, height, width):
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_shards(folder, shards=SHARDS, per_shard=PER_SHARD, extra=None):
    """shards of per_shard samples: jpg (sizes vary per shard) + cls (= index % 5) [+ extra members]."""
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    n = 0
    for s in range(shards):
        with wds.TarWriter(os.path.join(folder, f"s-{s}.tar")) as w:
            for _ in range(per_shard):
                sample = {"__key__": f"k{n:04d}", "jpg": _jpeg(rng, 30 + 2 * s, 36 + s), "cls": n % 5}
                sample.update(extra(n) if extra else {})
                w.write(sample)
                n += 1
    return os.path.join(folder, "s-{0..%d}.tar" % (shards - 1))


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    return write_shards(str(tmp_path_factory.mktemp("wds")))


def torch_batches(ds, **kw):
    return list(torch.utils.data.DataLoader(ds, **kw))


def fast(ds, **kw):
    return fastload.DataLoader(ds, **kw)


# The engine scales uint8 by a multiply, ToTensor divides: the same pixel level within
# one float32 rounding step (a level is 1/255, 65,000 times larger).
SAME_LEVEL = 1e-6


def assert_same(got, want, atol=SAME_LEVEL):
    """Same structure, types, dtypes, shapes; values equal (tensors within atol)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, atol=atol, rtol=0)
        else:
            assert torch.equal(got, want), (got, want)
    elif isinstance(want, dict):
        assert set(got) == set(want), (sorted(got), sorted(want))
        for k in want:
            assert_same(got[k], want[k], atol)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b, atol)
    else:
        assert got == want


def assert_epoch_same(loader, want, atol=SAME_LEVEL):
    got = list(loader)
    assert len(got) == len(want)
    if not isinstance(loader.dataset, torch.utils.data.IterableDataset):  # (torch: no len() for those)
        assert len(loader) == len(want)
    for a, b in zip(got, want):
        assert_same(a, b, atol)


needs_ops = pytest.mark.skipif(not has_ops(), reason="fastload._C not built")


# ---- mapped stages, against torch's DataLoader over the same pipeline --------------------


@needs_ops
def test_user_pipeline_runs_natively_with_torch_values(urls):
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL, int)
    loader = fast(ds, batch_size=8)
    assert loader.path.startswith("native: webdataset pipeline [decode('pil') -> to_tuple -> map_tuple] "
                                  "[CenterCrop -> ToDtype]"), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=8))


@needs_ops
def test_resize_and_normalize_within_a_level(urls):
    tf = T.Compose([T.Resize(28), T.CenterCrop(24), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg;png", "cls").map_tuple(tf, int)
    loader = fast(ds, batch_size=5, drop_last=True)
    assert loader.path.startswith("native:"), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=5, drop_last=True), atol=2.5 / 255 / 0.25)


@needs_ops
def test_dict_samples_rebuilt_with_key_url_and_local_path(urls):
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").map_dict(jpg=EVAL)
    loader = fast(ds, batch_size=4)
    assert loader.path.startswith("native:"), loader.path
    want = torch_batches(ds, batch_size=4)
    assert set(want[0]) == {"__key__", "__url__", "__local_path__", "jpg", "cls"}
    assert_epoch_same(loader, want)


@needs_ops
def test_rename_keep_false_and_label_function(urls):
    ds = (wds.WebDataset(urls, shardshuffle=False).decode("pil")
          .rename(image="jpg;png", label="cls", keep=False).map_dict(image=EVAL, label=lambda c: c * 10))
    loader = fast(ds, batch_size=4)
    assert loader.path.startswith("native:"), loader.path
    want = torch_batches(ds, batch_size=4)
    assert set(want[0]) == {"image", "label"} and want[0]["label"].tolist() == [0, 10, 20, 30]
    assert_epoch_same(loader, want)


@needs_ops
def test_rename_keep_true_then_to_tuple_with_key(urls):
    ds = (wds.WebDataset(urls, shardshuffle=False).decode("pil").rename(image="jpg")
          .to_tuple("image", "cls", "__key__").map_tuple(EVAL))
    loader = fast(ds, batch_size=6)
    assert loader.path.startswith("native:"), loader.path
    want = torch_batches(ds, batch_size=6)
    assert want[0][2][:2] == ("k0000", "k0001")
    assert_epoch_same(loader, want)


@pytest.mark.parametrize("mode,tf", [("torchrgb8", v2.CenterCrop(24)), ("torchrgb", v2.CenterCrop(24)),
                                     ("pil", v2.Compose([v2.PILToTensor(), v2.CenterCrop(24)]))])
def test_tensor_decodes(urls, mode, tf):
    ds = wds.WebDataset(urls, shardshuffle=False).decode(mode).to_tuple("jpg", "cls").map_tuple(tf, int)
    loader = fast(ds, batch_size=7)
    # (ToTensor before CenterCrop does not fuse: the view then runs on the generic path, still mapped)
    assert loader.path.startswith("generic: CenterCrop") if mode == "torchrgb" else \
        not loader.path.startswith("generic"), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=7))


def test_python_tail_runs_hybrid_with_the_pipeline_structure(urls):
    # RandomPerspective has no native equivalent: the engine crops, Python runs the rest on PIL images.
    tf = T.Compose([T.CenterCrop(24), T.RandomPerspective(p=0.0), T.ToTensor()])
    ds = (wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "__key__")
          .map_tuple(tf, lambda c: c + 100))
    loader = fast(ds, batch_size=4)
    assert loader.path.startswith("hybrid: native [CenterCrop] + python [RandomPerspective -> ToTensor]"), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=4))


def test_decode_with_handlers_and_extension_handlers(urls):
    ds = (wds.WebDataset(urls, shardshuffle=False)
          .decode(wds.imagehandler("pil"), wds.handle_extension("txt", lambda b: b.decode()))
          .to_tuple("jpg", "cls").map_tuple(EVAL, int))
    loader = fast(ds, batch_size=7)
    assert not loader.path.startswith("generic"), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=7))


def test_batched_in_the_pipeline_is_the_batch_size(urls):
    for partial in (True, False):
        ds = (wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
              .map_tuple(EVAL, int).batched(8, partial=partial))
        loader = fast(ds, batch_size=None)
        assert not loader.path.startswith("generic"), loader.path
        want = torch_batches(ds, batch_size=None)
        assert len(want) == (3 if partial else 2)
        assert_epoch_same(loader, want)


def test_data_pipeline_form(urls):
    ds = wds.DataPipeline(wds.SimpleShardList(urls), wds.split_by_worker, wds.tarfile_to_samples(),
                          wds.decode("pil"), wds.to_tuple("jpg", "cls"), wds.map_tuple(EVAL, None))
    loader = fast(ds, batch_size=7)
    assert not loader.path.startswith("generic"), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=7))


def test_select_on_the_label(urls):
    ds = (wds.WebDataset(urls, shardshuffle=False).select(lambda s: s["cls"] % 2 == 0).decode("pil")
          .to_tuple("jpg", "cls").map_tuple(EVAL, int))
    # (select runs on the raw sample in webdataset: its .cls is bytes there)
    ds_bytes = (wds.WebDataset(urls, shardshuffle=False).decode("pil").select(lambda s: s["cls"] % 2 == 0)
                .to_tuple("jpg", "cls").map_tuple(EVAL, int))
    loader = fast(ds_bytes, batch_size=4)
    assert not loader.path.startswith("generic"), loader.path
    assert_epoch_same(loader, torch_batches(ds_bytes, batch_size=4))
    assert fast(ds, batch_size=4).path.startswith("generic: webdataset pipeline stage select")


def test_pipe_url(urls, tmp_path):
    first = urls.replace("{0..2}", "0")
    ds = (wds.WebDataset(f"pipe:cat {first}", shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "__url__")
          .map_tuple(EVAL, int))
    loader = fastload.DataLoader(ds, batch_size=7)
    assert not loader.path.startswith("generic"), loader.path
    os.environ["FASTLOAD_CACHE"] = str(tmp_path)
    try:
        assert_epoch_same(loader, torch_batches(ds, batch_size=7))
    finally:
        del os.environ["FASTLOAD_CACHE"]


def test_with_epoch_and_repeat_lengths(urls):
    base = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL, int)
    loader = fast(base.repeat(2), batch_size=6)
    labels = torch.cat([b[1] for b in loader])
    assert labels.tolist() == [i % 5 for i in range(N)] * 2
    loader = fast(base.with_epoch(30), batch_size=6)
    assert len(loader) == 5 and torch.cat([b[1] for b in loader]).tolist() == [i % N % 5 for i in range(30)]
    short = fast(base.with_epoch(10), batch_size=6)
    assert short.path.startswith("generic: webdataset pipeline: with_epoch(10) is 10 samples per epoch over 1 rank"), \
        short.path


# ---- the order -------------------------------------------------------------------------


def _keys(loader):
    return [k for batch in loader for k in batch[2]]


def _shuffled():
    return lambda urls: (wds.WebDataset(urls, shardshuffle=100).shuffle(1000).decode("pil")
                         .to_tuple("jpg", "cls", "__key__").map_tuple(EVAL, int))


def _seeded(make, urls, **kw):
    torch.manual_seed(3)  # one process: the order is torch's RandomSampler's (its generator or global seed)
    return fast(make(urls), batch_size=5, **kw)


def test_global_shuffle_deterministic(urls):
    make = _shuffled()
    a = _seeded(make, urls)
    assert a.path.startswith("native: webdataset pipeline [shardshuffle(100) -> shuffle(1000) -> decode('pil')"), \
        a.path
    epoch0, epoch1 = _keys(a), _keys(a)
    b = _seeded(make, urls)
    assert [epoch0, epoch1] == [_keys(b), _keys(b)]
    assert sorted(epoch0) == sorted(epoch1) == [f"k{i:04d}" for i in range(N)]
    assert epoch0 != sorted(epoch0) and epoch1 != epoch0
    # Generator given: the loader's permutation, as torch's DataLoader draws it for that generator.
    g = lambda: torch.Generator().manual_seed(9)  # noqa: E731
    assert _keys(fast(make(urls), batch_size=5, generator=g())) == _keys(fast(make(urls), batch_size=5, generator=g()))
    unshuffled = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "__key__")
    assert _keys(fast(unshuffled.map_tuple(EVAL, int), batch_size=5)) == sorted(epoch0)


def test_resume_mid_epoch(urls):
    from resume_helpers import check_resume_at_every_position

    make = _shuffled()
    check_resume_at_every_position(lambda: _seeded(make, urls), positions=[0, 2, 4, 5])


# ---- what stays generic, and why ---------------------------------------------------------


def _lambda_map(urls):  # computes with the label: not seen through
    return wds.WebDataset(urls, shardshuffle=False).decode("pil").map(lambda s: (EVAL(s["jpg"]), s["cls"] + 1))


@pytest.mark.parametrize("build,expected", [
    (_lambda_map, "generic: webdataset pipeline stage map (test_webdataset.py:"),
    (lambda u: wds.WebDataset(u, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").slice(5),
     "generic: webdataset pipeline stage islice ("),
    (lambda u: wds.WebDataset(u, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls"),
     "generic: webdataset pipeline stage decode ("),
    (lambda u: wds.WebDataset(u, shardshuffle=False).decode("pil").to_tuple("jpg", "json"),
     "generic: webdataset pipeline stage to_tuple ("),
    (lambda u: wds.WebDataset(u, shardshuffle=False).rsample(0.5).decode("pil").to_tuple("jpg", "cls"),
     "generic: webdataset pipeline stage rsample ("),
    (lambda u: wds.WebDataset(u, resampled=True).decode("pil").to_tuple("jpg", "cls"),
     "generic: webdataset pipeline stage ResampledShards ("),
    (lambda u: wds.WebDataset(u, shardshuffle=False, handler=wds.warn_and_continue).decode("pil").to_tuple("jpg"),
     "generic: webdataset pipeline stage tar_file_expander ("),
    (lambda u: wds.WebLoader(wds.WebDataset(u, shardshuffle=False).to_tuple("jpg", "cls"), batch_size=None),
     "generic: a wds.WebLoader is a loader itself"),
])
def test_unmapped_stage_falls_back_with_its_reason(urls, build, expected):
    loader = fast(build(urls), batch_size=4)
    assert loader.path.startswith(expected), loader.path
    assert "is not mapped" in loader.path or "WebLoader" in loader.path


def test_fallback_still_iterates_as_torch_does(urls):
    ds = _lambda_map(urls)
    loader = fast(ds, batch_size=4)
    assert loader.path.startswith("generic: webdataset pipeline stage map")
    assert_epoch_same(loader, torch_batches(ds, batch_size=4))


@pytest.mark.parametrize("build", [
    lambda u: wds.WebDataset(u, shardshuffle=False).decode("pil").map(lambda s: (EVAL(s["jpg"]), s["cls"])),
    lambda u: wds.WebDataset(u, shardshuffle=False).decode("pil").map(lambda s: {"x": EVAL(s["jpg"]), "y": s["cls"]}),
    lambda u: wds.WebDataset(u, shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "__key__")
    .map(lambda t: [t[2], EVAL(t[0]), t[1]]),
], ids=["dict-to-tuple", "dict-to-dict", "tuple-to-list"])
def test_map_of_a_user_function_seen_through(urls, build):
    ds = build(urls)
    loader = fast(ds, batch_size=4)
    assert loader.path.startswith("native: webdataset pipeline [decode('pil') -> "), loader.path
    assert_epoch_same(loader, torch_batches(ds, batch_size=4))


def test_map_reasons_name_what_the_function_does(urls):
    base = wds.WebDataset(urls, shardshuffle=False).decode("pil")
    crop = fast(base.map(lambda s: (EVAL(s["jpg"].crop((0, 0, 8, 8))), s["cls"])), batch_size=4).path
    assert "uses the image's .crop before a transform" in crop and "test_webdataset.py:" in crop, crop
    draws = fast(base.map(lambda s: (EVAL(s["jpg"]), s["cls"], torch.rand(()))), batch_size=4).path
    assert "draws random numbers outside the transforms (torch)" in draws, draws
    label = fast(base.map(lambda s: (EVAL(s["jpg"]), s["cls"] * 2)), batch_size=4).path
    assert "the function uses the field 'cls'" in label, label


def test_select_reading_the_image_falls_back(urls):
    ds = (wds.WebDataset(urls, shardshuffle=False).decode("pil").select(lambda s: s["jpg"].size[0] > 10)
          .to_tuple("jpg", "cls").map_tuple(EVAL, int))
    path = fast(ds, batch_size=4).path
    assert path.startswith("generic: webdataset pipeline stage select (test_webdataset.py:") and "'jpg'" in path


def test_a_stage_the_walk_cannot_read_is_a_reason_not_a_crash(urls):
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").rename(image=3).to_tuple("image", "cls")
    path = fast(ds, batch_size=4).path
    assert path.startswith("generic: webdataset pipeline: fastload could not read its stages (AttributeError"), path


def test_loader_batch_size_with_batched_falls_back(urls):
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL).batched(4)
    assert "batches of batches" in fast(ds, batch_size=4).path


def test_members_the_index_does_not_keep(tmp_path):
    urls = write_shards(str(tmp_path), extra=lambda n: {"json": json.dumps({"n": n}).encode()})
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").map_dict(jpg=EVAL)
    path = fast(ds, batch_size=4).path
    assert path.startswith("generic: webdataset pipeline: sample 'k0000' holds .json members"), path
    tupled = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL)
    assert not fast(tupled, batch_size=4).path.startswith("generic")


def test_each_shard_index_is_read_once_and_members_checked_in_that_pass(urls, tmp_path, monkeypatch):
    import fastload.datasets.tar as tar
    import fastload.source.tar_index as tar_index

    read = []
    load_index = tar_index.load_index

    def counting(path, cache_dir):
        read.append(path)
        return load_index(path, cache_dir)

    monkeypatch.setattr(tar_index, "load_index", counting)
    monkeypatch.setattr(tar, "load_index", counting)
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL, int)
    loader = fast(ds, batch_size=4)
    assert loader.path.startswith("native: webdataset pipeline"), loader.path
    assert len(read) == len(set(read)) == SHARDS, read
    assert [len(b[1]) for b in loader] == [4] * (N // 4) + [N % 4]
    # A sample of the last shard labelled by .json only: named as the pipeline names its shard.
    folder = str(tmp_path)
    write_shards(folder, shards=2)
    with wds.TarWriter(os.path.join(folder, "s-2.tar")) as w:
        w.write({"__key__": "late", "jpg": _jpeg(np.random.default_rng(2), 30, 30), "json": b"3"})
    late = os.path.join(folder, "s-{0..2}.tar")
    path = fast(wds.WebDataset(late, shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
                .map_tuple(EVAL, int), batch_size=4).path
    assert path.startswith(f"generic: webdataset pipeline: sample 'late' of {os.path.join(folder, 's-2.tar')!r} "
                           "has no .cls member"), path


def test_accelerate_false_keeps_the_pipeline():
    ds = wds.WebDataset("none-{0..1}.tar", shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
    loader = fast(ds, batch_size=4, accelerate=False)
    assert loader.dataset is ds and loader.path == "generic: IterableDataset (order left to the dataset and torch)"


# ---- hostile shards: as fastload.TarShards -------------------------------------------------


def _hostile(tmp_path):
    folder = str(tmp_path)
    write_shards(folder, shards=2)
    with open(os.path.join(folder, "s-1.tar"), "r+b") as f:  # cut inside the second shard's last members
        f.truncate(os.path.getsize(f.name) - 1500)
    rng = np.random.default_rng(1)
    with wds.TarWriter(os.path.join(folder, "s-2.tar")) as w:
        good = _jpeg(rng, 30, 30)
        w.write({"__key__": "bad", "jpg": good[:200] + b"\0" * 50, "cls": 1})
        w.write({"__key__": "good", "jpg": good, "cls": 2})
    return os.path.join(folder, "s-{0..2}.tar")


def test_hostile_shards_raise_as_tarshards(tmp_path):
    urls = _hostile(tmp_path)
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL, int)
    with pytest.raises(Exception) as wds_error:
        fast(ds, batch_size=4)
    with pytest.raises(Exception) as tar_error:
        fastload.TarShards(urls, transforms=EVAL)
    assert type(wds_error.value) is type(tar_error.value) and "truncated" in str(wds_error.value)


@needs_ops
def test_hostile_shards_skip_as_tarshards(tmp_path):
    urls = _hostile(tmp_path)
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(EVAL, int)
    with pytest.warns(UserWarning):
        loader = fast(ds, batch_size=4, on_error="skip")
        reference = fast(fastload.TarShards(urls, transforms=EVAL, on_error="skip"), batch_size=4, on_error="skip")
        got, want = list(loader), list(reference)
    assert loader.path.startswith("native:")
    assert [b[1].tolist() for b in got] == [b[1].tolist() for b in want]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, want))
    assert loader.stats()["skipped"] == reference.stats()["skipped"] == 1


# ---- DDP: 1, 2 and 3 ranks under torchrun ---------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ddp_ranks_see_every_sample_once(urls, tmp_path, world):
    script = os.path.join(HERE, "ddp", "run_webdataset.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", script,
           "--urls", urls, "--work", str(tmp_path)]
    # The ranks import the fastload this test imports (not another installed copy).
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastload.__file__)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.load(open(os.path.join(str(tmp_path), f"rank{r}.json"))) for r in range(world)]
    assert all(r["path"].startswith("native:") or r["path"].startswith("hybrid:") for r in ranks), ranks[0]["path"]
    for epoch in range(2):
        seen = [k for r in ranks for k in r["keys"][epoch]]
        assert sorted(seen) == [f"k{i:04d}" for i in range(N)], "every sample exactly once per epoch"
        assert len({len(r["batches"][epoch]) for r in ranks}) == 1, "equal batch counts on every rank"
    assert ranks[0]["keys"][0] != ranks[0]["keys"][1]
