"""fastload-bench: generated data, process-tree memory, every contender end to end, the record.

No timing assertions: figures only have to exist and be positive. What is checked is
that the bench measures what it says: the same images in, the same pipeline out (the
baseline against a plain PIL reference, the other contenders against the baseline), the
memory of worker processes counted, failures turned into rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from fastload import _ext
from fastload.bench import contenders as registry
from fastload.bench import dataset as data
from fastload.bench import measure, recipe_suite, recipes, report, shapes
from fastload.bench.__main__ import main, parse_args
from fastload.bench.procfs import ProcessTree

MEAN = np.array(registry.IMAGENET_MEAN, np.float64)
STD = np.array(registry.IMAGENET_STD, np.float64)

# Per-sample mean of a normalised 224x224 image, against the torchvision baseline's.
# The torchvision-code contenders decode with the same PIL and resize with the same code:
# float32 rounding only.
SAME_CODE_TOL = 1e-4
# fastload's fused kernel follows torchvision's antialiased bilinear taps; it differs by
# a uint8 level on some pixels (a level is ~0.017 after normalisation), and the mean of
# 150k values averages that to ~1e-4.
FASTLOAD_TOL = 2e-3
# DALI resamples with its own filter and crops with its own rounding: a few 1e-3.
OTHER_RESAMPLER_TOL = 0.02

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, data.ensure_dataset(data.DatasetSpec(images=8, classes=2, seed=3), cache_dir=str(cache), processes=2)


def test_dataset_layout_determinism_and_cache(tiny, tmp_path):
    cache, ds = tiny
    assert ds.generated and ds.num_images == 8 and ds.classes == ["class000", "class001"]
    samples = data.list_samples(ds.root)
    assert len(samples) == 8 and [label for _, label in samples] == [0] * 4 + [1] * 4
    for path, _ in samples:
        with Image.open(path) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            assert 200 <= im.width <= 800 and 200 <= im.height <= 800
    assert ds.mean_bytes == pytest.approx(np.mean([os.path.getsize(p) for p, _ in samples]))

    again = data.ensure_dataset(data.DatasetSpec(images=8, classes=2, seed=3), cache_dir=str(cache))
    assert not again.generated and again.root == ds.root  # cache hit

    other = data.ensure_dataset(data.DatasetSpec(images=8, classes=2, seed=3), cache_dir=str(tmp_path), processes=1)
    for (a, _), (b, _) in zip(samples, data.list_samples(other.root), strict=True):
        assert open(a, "rb").read() == open(b, "rb").read()  # pure function of (seed, index)
    different = data.draw_image(4, 0)
    assert different.shape != data.draw_image(3, 0).shape or (different != data.draw_image(3, 0)).any()


def test_half_written_cache_is_rebuilt(tmp_path):
    spec = data.DatasetSpec(images=2, classes=1, seed=1)
    first = data.ensure_dataset(spec, cache_dir=str(tmp_path), processes=1)
    os.remove(os.path.join(os.path.dirname(first.root), data.MARKER))  # as if killed mid-way
    os.remove(data.file_path(first.root, spec, 1))
    second = data.ensure_dataset(spec, cache_dir=str(tmp_path), processes=1)
    assert second.generated and os.path.exists(data.file_path(second.root, spec, 1))


def test_image_sizes_are_imagenet_like():
    sizes = np.array([data.image_size(np.random.default_rng([0, i])) for i in range(3000)], float)
    width, height = sizes[:, 0], sizes[:, 1]
    assert 470 < width.mean() < 530 and 355 < height.mean() < 400
    assert 0.05 < (height > width).mean() < 0.2  # some portraits
    aspect = width / height
    assert aspect.min() >= 0.59 and aspect.max() <= 1.81 and width.max() <= 800 and width.min() >= 200


def test_generated_jpegs_are_imagenet_sized():
    # Quality-90 files of ~100 KB at ~500x375, as ImageNet's ~110 KB: the decode cost.
    sizes = [len(data.encode_jpeg(data.draw_image(0, i), 90)) for i in range(12)]
    assert 60e3 < np.mean(sizes) < 150e3


def test_shards_hold_every_sample_in_order(tiny):
    _, ds = tiny
    paths = data.ensure_shards(ds, shards=3)
    members = []
    for path in paths:
        with tarfile.open(path) as tar:
            members += [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    jpgs = [blob for name, blob in members if name.endswith(".jpg")]
    labels = [int(blob) for name, blob in members if name.endswith(".cls")]
    samples = data.list_samples(ds.root)
    assert labels == [label for _, label in samples]
    assert jpgs == [open(p, "rb").read() for p, _ in samples]
    assert data.ensure_shards(ds, shards=3) == paths  # cached


def test_process_tree_sums_worker_memory():
    # A parent holding 64 MiB forks two children that share it and add 64 MiB each:
    # RSS counts the shared block in all three (5 x 64 MiB), PSS splits it (3 x 64 MiB).
    block = 64 << 20
    script = (
        "import os, sys, time\n"
        f"block = bytearray(b'x' * {block})\n"
        "for _ in range(2):\n"
        "    if os.fork() == 0:\n"
        f"        mine = bytearray(b'y' * {block}); os.write(1, b'child\\n'); time.sleep(30); os._exit(0)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert [child.stdout.readline().strip() for _ in range(2)] == [b"child", b"child"]
        tree = ProcessTree(child.pid)
        assert len(tree.pids()) == 3 and tree.pids()[0] == child.pid
        assert tree.rss_bytes() >= 5 * block * 0.95
        assert 3 * block * 0.95 <= tree.pss_bytes() <= 4 * block
        assert tree.cpu_seconds() > 0
        assert ProcessTree(os.getpid()).pids()[0] == os.getpid()
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the children too
        child.wait()


def _pil_eval_reference(path: str) -> np.ndarray:
    """Resize(256) + CenterCrop(224) + normalize in plain PIL/numpy: float [3, 224, 224]."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        if w <= h:
            size = (256, int(256 * h / w))
        else:
            size = (int(256 * w / h), 256)
        im = im.resize(size, Image.BILINEAR)
        left, top = int(round((size[0] - 224) / 2.0)), int(round((size[1] - 224) / 2.0))
        im = im.crop((left, top, left + 224, top + 224))
    x = np.asarray(im, np.float64) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


def test_every_contender_runs_and_agrees(tiny, tmp_path, monkeypatch):
    cache, ds = tiny
    monkeypatch.setenv("FASTLOAD_CACHE", str(cache.parent / "unused"))  # --data: nothing generated
    out = tmp_path / "bench.json"
    code = main([
        "--data", ds.root, "--pipeline", "both", "--images", "4", "--batch-size", "2", "--workers", "1",
        "--shards", "2", "--decode-images", "4", "--json", str(out), "--no-progress", "--timeout", "240",
        "--suite", "main,decode", "--contenders", "all",
    ])
    assert code == 0
    record = json.loads(out.read_text())
    assert {"cpu_model", "cpu_count", "memory_gb", "versions", "date"} <= set(record["machine"])
    assert record["machine"]["versions"]["torch"] == torch.__version__.split("+")[0]
    rows = record["results"]
    assert [(r["contender"], r["pipeline"]) for r in rows] == [
        (c, p) for p in ("train", "eval") for c in registry.CONTENDERS
    ]
    for r in rows:
        if r["contender"].startswith("fastload") and _ext.has_ops():
            # fastload's own rows are never optional where the extension is built.
            assert registry.get(r["contender"]).unavailable() is None, r
        if registry.get(r["contender"]).unavailable():
            assert r["status"] == "unavailable" and r["reason"]
            continue
        assert r["status"] == "ok", r  # an available contender that fails is a bug here
        # 8 images are 4 batches per epoch: the window is one whole epoch after a warm-up epoch.
        assert r["images"] == 8 and r["images_per_s"] > 0 and r["first_batch_s"] > 0
        assert r["window"]["epoch_starts"] == 1 and r["window"]["warmup_batches"] == 4, r["window"]
        assert any(w.startswith("short window") for w in r["warnings"]), r["warnings"]
        assert r["peak_rss_mb"] > 50 and r["peak_pss_mb"] > 0 and r["path"]
        batch = r["first_batch"]
        assert batch["shape"] == [2, 3, 224, 224] and batch["dtype"] == "float32" and batch["finite"]
        assert batch["labels_shape"] == [2]
    base = {p: next(r for r in rows if r["contender"] == "baseline" and r["pipeline"] == p) for p in ("train", "eval")}
    assert base["train"]["ratio"] == pytest.approx(1.0)

    # Eval is deterministic and unshuffled: the first batch is the first two files.
    samples = data.list_samples(ds.root)
    reference = [_pil_eval_reference(path) for path, _ in samples[:2]]
    np.testing.assert_allclose(base["eval"]["first_batch"]["sample_means"], [x.mean() for x in reference], atol=SAME_CODE_TOL)
    np.testing.assert_allclose(base["eval"]["first_batch"]["sample_stds"], [x.std(ddof=1) for x in reference], atol=1e-3)
    for r in rows:
        if r["pipeline"] != "eval" or r["status"] != "ok":
            continue
        if r["contender"].startswith("fastload") and r["path"].startswith("native"):
            tol = FASTLOAD_TOL
        elif r["contender"] in ("fastload", "webdataset"):
            tol = SAME_CODE_TOL
        else:
            tol = OTHER_RESAMPLER_TOL
        np.testing.assert_allclose(r["first_batch"]["sample_means"], base["eval"]["first_batch"]["sample_means"], atol=tol, err_msg=r["contender"])
        np.testing.assert_allclose(r["first_batch"]["sample_stds"], base["eval"]["first_batch"]["sample_stds"], atol=tol, err_msg=r["contender"])
        assert r["first_batch"]["labels"] == [0, 0], r["contender"]

    table = report.format_table(rows)
    assert len(table.splitlines()) == 2 + len(rows) and "img/s" in table.splitlines()[0]

    decode = {r["method"]: r for r in record["decode"]}
    pil = decode["PIL open+convert"]
    assert pil["status"] == "ok" and pil["images"] == 4
    fastload_rows = [name for name in decode if name.startswith("fastload")]
    assert len(fastload_rows) == 3, sorted(decode)
    for name in fastload_rows:
        if _ext.has_ops():  # a decoder that fails must fail this test, not drop its row
            assert decode[name]["status"] == "ok" and decode[name]["images"] == 4, decode[name]
        else:
            assert decode[name]["status"] == "unavailable" and decode[name]["reason"], decode[name]
    # torchvision's decoder is an optional contender: absent, its row says why.
    tv = decode["torchvision.io.decode_jpeg"]
    assert tv["status"] == "ok" or (tv["status"] == "unavailable" and tv["reason"]), tv
    for name in ("torchvision.io.decode_jpeg", "fastload decode_jpeg full"):
        if decode[name]["status"] == "ok":  # a full decode has every pixel
            assert decode[name]["mean_pixels"] == pil["mean_pixels"], name
    if decode["fastload decode_jpeg crop window"]["status"] == "ok":
        assert decode["fastload decode_jpeg crop window"]["mean_pixels"] <= pil["mean_pixels"]
    assert "scaling" not in record


def test_scaling_compares_one_worker_with_many(monkeypatch):
    from fastload.bench import micro

    seen = []

    def fake_run(config, timeout, forward_stderr):
        seen.append((config.contender, config.workers))
        return {"status": "ok", "images_per_s": 100.0 * config.workers ** 0.9, "path": "p", "others_cpu_pct": 3.0}

    monkeypatch.setattr(measure, "run_in_subprocess", fake_run)
    rows = micro.scaling_benchmark(["baseline", "dali-cpu"], {"root": "/x", "pipeline": "eval"}, 2, 60, progress=False)
    available = registry.get("dali-cpu").unavailable() is None
    assert seen == [("baseline", 1), ("baseline", 2)] + ([("dali-cpu", 1), ("dali-cpu", 2)] if available else [])
    assert rows[0]["status"] == "ok" and rows[0]["speedup"] == pytest.approx(2 ** 0.9)
    assert rows[0]["one"] == 100.0 and rows[0]["pipeline"] == "eval"
    table = report.format_table(rows, micro.SCALING_COLUMNS)
    assert "1.87x" in table.splitlines()[2]

    # Repeats alternate 1 and N workers and keep the fastest run of each.
    seen.clear()
    speeds = iter([90.0, 150.0, 100.0, 120.0])
    monkeypatch.setattr(measure, "run_in_subprocess", lambda config, timeout, forward_stderr: (
        seen.append(config.workers) or {"status": "ok", "images_per_s": next(speeds), "path": "p", "others_cpu_pct": 0.0}))
    (row,) = micro.scaling_benchmark(["baseline"], {"root": "/x"}, 2, 60, progress=False, repeat=2)
    assert seen == [1, 2, 1, 2] and row["one"] == 100.0 and row["many"] == 150.0


def test_best_run_keeps_the_fastest_success():
    runs = [{"status": "ok", "images_per_s": 10.0}, {"status": "failed", "reason": "x"}, {"status": "ok", "images_per_s": 30.0}]
    best = report.best_run(runs)
    assert best["images_per_s"] == 30.0 and best["runs_images_per_s"] == [10.0, None, 30.0]
    assert report.best_run([{"status": "failed", "reason": "x"}])["status"] == "failed"


def test_a_failing_contender_is_a_row(tmp_path, monkeypatch):
    class Broken(registry.Contender):
        name = "broken"

        def dataset(self, config):
            return None

        def loader(self, dataset, config):
            raise RuntimeError("no loader today")

    monkeypatch.setitem(registry.CONTENDERS, "broken", Broken())
    result = measure.run_in_this_process(measure.MeasureConfig(contender="broken", root=str(tmp_path), progress=False))
    assert result["status"] == "failed" and result["reason"] == "RuntimeError: no loader today"

    # In a child process: a folder that is not an ImageFolder fails the baseline, no crash.
    result = measure.run_in_subprocess(
        measure.MeasureConfig(contender="baseline", root=str(tmp_path / "missing"), progress=False),
        timeout=120, forward_stderr=False,
    )
    assert result["status"] == "failed" and "FileNotFoundError" in result["reason"]


def test_a_stuck_contender_is_killed(tmp_path):
    result = measure.run_in_subprocess(
        measure.MeasureConfig(contender="baseline", root=str(tmp_path), progress=False),
        timeout=0.3, forward_stderr=False,
    )
    assert result["status"] == "failed" and result["reason"].startswith("timed out after")


def test_table_says_why_a_row_is_missing():
    rows = [
        {"contender": "baseline", "pipeline": "train", "status": "ok", "path": "torch (PIL)", "images_per_s": 200.0,
         "peak_rss_mb": 900.0, "peak_pss_mb": 500.0, "first_batch_s": 1.0, "cpu_ms_per_image": 9.0, "others_cpu_pct": 50.0},
        {"contender": "x", "pipeline": "train", "status": "ok", "path": "p", "images_per_s": 500.0},
        {"contender": "dali-cpu", "pipeline": "train", "status": "unavailable", "reason": "not installed"},
    ]
    report.add_ratios(rows)
    assert rows[1]["ratio"] == pytest.approx(2.5)
    lines = report.format_table(rows).splitlines()
    assert "unavailable: not installed" in lines[4] and "2.50x" in lines[3] and "noisy" in lines[2]


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--contenders", "nope"])
    assert "unknown contender 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--batch-size", "0"])


USER_MODULE = '''
import torch, torchvision
from torchvision import transforms as T

ROOT = {root!r}

def make():
    return torchvision.datasets.ImageFolder(ROOT, transform=T.Compose([
        T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)]))

class Dicts(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return {{"image": torch.full((3, 8, 8), float(i)), "label": i}}

def dicts():
    return Dicts()
'''


def test_bench_races_torch_and_fastload_on_the_users_own_dataset(tiny, tmp_path, monkeypatch):
    cache, ds = tiny
    (tmp_path / "user_data.py").write_text(USER_MODULE.format(root=ds.root))
    monkeypatch.chdir(tmp_path)  # the module imports from the current folder, in every contender's process
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "bench.json"
    for factory, shape in (("user_data:make", [2, 3, 32, 32]), ("user_data:dicts", [2, 3, 8, 8])):
        assert main(["--dataset", factory, "--images", "4", "--batch-size", "2", "--workers", "1", "--no-progress",
                     "--json", str(out), "--timeout", "240"]) == 0
        rows = json.loads(out.read_text())["results"]
        assert [(r["contender"], r["pipeline"]) for r in rows] == [("baseline", "dataset"), ("fastload", "dataset")]
        assert all(r["status"] == "ok" for r in rows), rows
        assert [r["first_batch"]["shape"] for r in rows] == [shape, shape]
    # A torchvision ImageFolder of known transforms runs natively; the dicts go generic.
    assert rows[1]["path"].startswith("generic"), rows[1]["path"]
    if _ext.has_ops():
        assert main(["--dataset", "user_data:make", "--images", "4", "--batch-size", "2", "--workers", "1",
                     "--no-progress", "--json", str(out), "--timeout", "240"]) == 0
        assert json.loads(out.read_text())["results"][1]["path"].startswith("native")


def test_contenders_with_their_own_pipeline_say_so_under_dataset(tiny, tmp_path, monkeypatch):
    cache, ds = tiny
    (tmp_path / "user_data.py").write_text(USER_MODULE.format(root=ds.root))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "bench.json"
    assert main(["--dataset", "user_data:dicts", "--contenders", "baseline,fastload-native", "--images", "2",
                 "--batch-size", "2", "--workers", "0", "--no-progress", "--json", str(out)]) == 0
    native = json.loads(out.read_text())["results"][1]
    assert native["status"] == "unavailable" and "its own pipeline" in native["reason"]


@pytest.mark.parametrize("factory, message", [("nocolon", "expected --dataset as module:function"),
                                              ("no_such_module_here:make", "cannot load --dataset")])
def test_a_bad_dataset_function_is_refused_with_the_fix(factory, message):
    with pytest.raises(ValueError, match=message):
        main(["--dataset", factory, "--no-progress"])


def test_default_table_fits_100_columns_and_lists_each_path():
    long_path = "native: torchvision ImageFolder [" + " -> ".join(["RandomResizedCrop"] * 8) + "], decode_on=cpu"
    rows = [{"contender": "fastload-native", "pipeline": "train", "status": "ok", "path": long_path,
             "images_per_s": 1234.5, "ratio": 5.12, "cpu_ms_per_image": 1.5, "peak_rss_mb": 812.0,
             "first_batch_s": 0.15, "others_cpu_pct": 12.0},
            {"contender": "dali-cpu", "pipeline": "train", "status": "unavailable", "reason": "not installed " * 12}]
    text = report.format_compact(rows)
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH, text
    assert "RandomResizedCrop], decode_on=cpu" in text.replace("\n      ", " ")
    table, paths = text.split("\npaths:\n")
    assert "| n/a " in table and "not installed" not in table  # the reason goes under the table
    assert "dali-cpu (train): unavailable: not installed" in paths


def test_plot_draws_every_contender(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"contender": name, "pipeline": "train", "status": "ok", "images_per_s": ips, "ratio": ips / 200,
             "cpu_ms_per_image": 8.0 / (ips / 200), "peak_rss_mb": 900.0} for name, ips in
            (("baseline", 200.0), ("fastload", 1000.0))]
    for name in ("bench.png", "bench.svg"):
        report.plot(rows, str(tmp_path / name))
        assert (tmp_path / name).stat().st_size > 1000
    assert "fastload (train)" in (tmp_path / "bench.svg").read_text()


def test_plot_draws_the_stage_breakdown_of_fastload_contenders(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"contender": "baseline", "pipeline": "train", "status": "ok", "images_per_s": 200.0},
            {"contender": "fastload", "pipeline": "train", "status": "ok", "images_per_s": 900.0,
             "stages_ms_per_image": {"read (engine)": 0.05, "decode (engine)": 0.9, "wait (loop)": 0.2}}]
    report.plot(rows, str(tmp_path / "bench.svg"))
    svg = (tmp_path / "bench.svg").read_text()
    assert "input stages" in svg and "decode (engine)" in svg and "wait (loop)" in svg


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(SystemExit, match="pip install matplotlib"):
        report.plot([{"contender": "baseline", "status": "ok", "images_per_s": 1.0}], str(tmp_path / "x.png"))


def test_progress_bars_stay_off_when_stderr_is_not_a_terminal(tiny, capfd):
    cache, ds = tiny
    assert main(["--data", ds.root, "--contenders", "baseline", "--pipeline", "eval", "--images", "2",
                 "--batch-size", "2", "--workers", "0", "--suite", "main"]) == 0
    err = capfd.readouterr().err
    assert "img/s]" not in err and "it/s]" not in err, err[-2000:]


def _in_this_process(config, timeout, forward_stderr):
    """measure.run_in_subprocess without the fresh interpreter (seconds instead of a
    minute: the process boundary itself is tested above)."""
    config.progress = False
    return {**measure.run_in_this_process(config), "peak_rss_mb": 0.0, "peak_pss_mb": 0.0,
            "workers": config.workers, "batch_size": config.batch_size}


def test_recipes_mode_races_torch_and_fastload_on_each_requested_recipe(tiny, tmp_path, monkeypatch, capsys):
    cache, ds = tiny
    monkeypatch.setattr(measure, "run_in_subprocess", _in_this_process)
    out = tmp_path / "recipes.json"
    # Batches of 1: random-split's 7 images make 7 batches, enough to time (4 needed).
    assert main(["--data", ds.root, "--recipes", "preset-eval,random-split", "--images", "2", "--batch-size", "1",
                 "--workers", "0", "--no-progress", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert "results" not in record and "decode" not in record  # --recipes alone: the recipes suite only
    rows = {r["recipe"]: r for r in record["recipes"]}
    assert list(rows) == ["preset-eval", "random-split"]
    for name, row in rows.items():
        assert row["kind"] in ("native", "hybrid", "generic") and row["path"].startswith(row["kind"]), row
        assert row["torch_images_per_s"] > 0 and row["fastload_images_per_s"] > 0 and row["ratio"] > 0
        assert row["torch_cpu_ms_per_image"] >= 0 and row["fastload_cpu_ms_per_image"] >= 0
    runs = {(r["recipe"], r["contender"]): r for r in record["recipe_runs"]}
    assert sorted(runs) == sorted((n, c) for n in rows for c in ("baseline", "fastload"))
    for name in rows:
        torch_run, fastload_run = runs[(name, "baseline")], runs[(name, "fastload")]
        assert torch_run["batch_size"] == fastload_run["batch_size"] == 1
        # The same dataset object in both loaders: same output shape and dtype.
        assert torch_run["first_batch"]["shape"] == fastload_run["first_batch"]["shape"] == [1, 3, 224, 224]
        assert torch_run["first_batch"]["dtype"] == fastload_run["first_batch"]["dtype"] == "float32"
    # Eval is unshuffled and deterministic: the same two images come out of both loaders.
    torch_eval, fastload_eval = runs[("preset-eval", "baseline")], runs[("preset-eval", "fastload")]
    assert torch_eval["first_batch"]["labels"] == fastload_eval["first_batch"]["labels"] == [0]
    tol = FASTLOAD_TOL if rows["preset-eval"]["kind"] == "native" else SAME_CODE_TOL
    np.testing.assert_allclose(fastload_eval["first_batch"]["sample_means"], torch_eval["first_batch"]["sample_means"],
                               atol=tol)
    table = capsys.readouterr().out.split("| recipe")[1]
    for name, row in rows.items():
        assert f"| {name}" in table and f"{name}: {row['path'][:20]}" in table.replace("\n      ", " ")
    assert recipe_suite.COLUMNS[1][0] in table and "CPU ratio" in table


def test_a_recipe_whose_module_is_missing_is_skipped_with_a_message(tmp_path, monkeypatch):
    absent = recipes.Recipe("needs-absent", "x", lambda root: None, needs=("no_such_module_for_fastload",))
    monkeypatch.setitem(recipes.RECIPES, absent.name, absent)
    monkeypatch.setattr(measure, "run_in_subprocess", lambda *a, **k: pytest.fail("a skipped recipe ran"))
    runs, rows = recipe_suite.run([absent.name], str(tmp_path), ["baseline", "fastload"], batch_size=2, workers=0,
                             images=2, warmup_batches=1, seed=0, repeat=1, timeout=10, progress=False,
                             say=lambda *a: None)
    assert [r["status"] for r in runs] == ["unavailable", "unavailable"]
    (row,) = rows
    assert row["status"] == "failed" and "no_such_module_for_fastload is not installed" in row["reason"]
    text = recipe_suite.format_table(rows)
    assert "| did not run " in text.splitlines()[2]
    assert text.splitlines()[-1] == "  needs-absent: unavailable: skipped: no_such_module_for_fastload is not installed"


def test_recipe_table_reports_a_generic_fastload_row_and_its_reason():
    path = "generic: the dataset is not one fastload converts (MyDataset overrides __getitem__)"
    runs = [{"recipe": "mine", "contender": "baseline", "status": "ok", "images_per_s": 100.0, "cpu_ms_per_image": 20.0},
            {"recipe": "mine", "contender": "fastload", "status": "ok", "images_per_s": 90.0, "cpu_ms_per_image": 21.0,
             "path": path}]
    (row,) = recipe_suite.table_rows(runs)
    assert row["kind"] == "generic" and row["target"] == "-" and row["ratio"] == pytest.approx(0.9)
    text = recipe_suite.format_table([row])
    assert "| generic " in text.splitlines()[2] and "overrides __getitem__" in text.replace("\n      ", " ")


def test_a_recipe_of_its_own_target_replaces_its_paths():
    """Dense outputs aim at 2x whatever path they take; other native rows at 3x."""
    runs = [{"recipe": name, "contender": contender, "status": "ok", "images_per_s": 10.0, "cpu_ms_per_image": 1.0,
             "path": "native: ..."} for name in ("segmentation-512-native", "dino-multicrop")
            for contender in ("baseline", "fastload")]
    assert [row["target"] for row in recipe_suite.table_rows(runs)] == [">= 2x", ">= 3x"]


def test_recipes_are_listed_and_unknown_ones_refused(capsys):
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(f"recipe {name} " in listed for name in recipes.RECIPES)
    with pytest.raises(SystemExit):
        main(["--recipes", "preset,nope"])
    assert "unknown recipe 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--recipes", "--dataset", "m:f"])


@pytest.mark.parametrize("name", [name for name in recipes.RECIPES if name not in shapes.GENERIC])
def test_every_recipe_runs_off_the_generic_path(name, tiny, capsys):
    import fastload
    if not _ext.has_ops():
        pytest.skip("the native extension is not built: every loader is generic")
    recipe = recipes.get(name)
    if recipe.unavailable():
        pytest.skip(recipe.unavailable())
    _, ds = tiny
    dataset = recipes.dataset(name, ds.root, fastload=True)
    verdict = fastload.explain(dataset).splitlines()[-1]
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=0, shuffle=recipe.train)
    try:
        assert recipe_suite.path_kind(loader.path) in ("native", "hybrid"), loader.path
        assert "generic" not in verdict and verdict.split(": ", 1)[1].startswith(recipe_suite.path_kind(loader.path)), verdict
    finally:
        getattr(loader, "close", lambda: None)()


# Each multi-view and segmentation recipe's sample, as both loaders batch it: (first
# element's structure, the first image tensor's shape per sample, the second element's).
VIEW_RECIPES = {
    "simclr-two-views": ([(3, 224, 224)] * 2, ()),
    "simclr-two-crop": ([(3, 224, 224)] * 2, ()),
    "simclr-two-crop-folder": ([(3, 224, 224)] * 2, ()),
    "dino-multicrop": ([(3, 224, 224)] * 2 + [(3, 96, 96)] * 8, ()),
    "segmentation-512": ((3, 512, 512), (1, 512, 512)),
    "segmentation-512-native": ((3, 512, 512), (1, 512, 512)),
}


def _shapes_of(value):
    if isinstance(value, (list, tuple)):
        return [tuple(v.shape[1:]) for v in value]
    return tuple(value.shape[1:])


@pytest.mark.parametrize("name", list(VIEW_RECIPES))
def test_view_and_segmentation_recipes_give_both_loaders_the_same_sample_structure(name, tiny):
    """Each recipe's dataset builds, and one batch of torch's DataLoader over it and one of
    fastload's (over `fastload_build`'s dataset where the recipe has one) have the recipe's
    structure, shapes and dtypes; the contenders' split takes the first view and the labels."""
    import fastload

    _, ds = tiny
    first, second = VIEW_RECIPES[name]
    batches = {}
    for side, make in (("torch", torch.utils.data.DataLoader), ("fastload", fastload.DataLoader)):
        dataset = recipes.dataset(name, ds.root, fastload=side == "fastload")
        loader = make(dataset, batch_size=2, num_workers=0, shuffle=True)
        batches[side] = batch = next(iter(loader))
        assert len(batch) == 2, (side, type(batch))
        assert _shapes_of(batch[0]) == first and tuple(batch[1].shape[1:]) == second, (side, getattr(loader, "path", ""))
        images, labels = registry.split_batch(batch)
        assert images.shape == (2, 3, *(first[0] if isinstance(first, list) else first)[1:]) and len(labels) == 2
        assert images.dtype == torch.float32 and torch.isfinite(images).all()
        getattr(loader, "close", lambda: None)()
    if name.startswith("segmentation"):
        for side, (_, masks) in batches.items():  # label maps: the classes and the ignore index, nothing else
            assert masks.dtype == torch.uint8, side
            assert set(masks.unique().tolist()) <= set(range(21)) | {255}, side
    else:
        assert batches["torch"][1].dtype == batches["fastload"][1].dtype == torch.int64


def test_generated_masks_are_label_maps_of_each_image_size(tiny):
    from fastload.bench import recipe_datasets

    _, ds = tiny
    pairs = recipe_datasets.ensure_masks(ds.root)
    assert [image for image, _ in pairs] == [p for p, _ in data.list_samples(ds.root)]
    for image, mask in pairs:
        with Image.open(image) as im, Image.open(mask) as m:
            assert m.format == "PNG" and m.mode == "L" and m.size == im.size
            labels = np.asarray(m)
        assert labels.max() == 255 and len(np.unique(labels)) > 2  # objects and their ignore outlines
    assert recipe_datasets.ensure_masks(ds.root) == pairs  # written once, found again


@pytest.mark.parametrize("name", shapes.GENERIC)
def test_the_generic_shapes_stay_generic_with_their_reason(name, tiny):
    """The rows that measure fastload against torch where fastload runs torch's DataLoader:
    generic, the reason in loader.path and in fastload.explain's verdict."""
    import fastload

    _, ds = tiny
    dataset = recipes.dataset(name, ds.root)
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=0, shuffle=True)
    assert recipe_suite.path_kind(loader.path) == "generic", loader.path
    assert fastload.explain(dataset).splitlines()[-1].endswith("generic path (1 blocker)")
    images, labels = next(iter(loader))
    assert images.dtype == torch.float32 and labels.tolist() == [int(x) for x in labels]


# -- the timed window -------------------------------------------------------------------
# A loader that keeps `depth` batches asked for ahead of the one handed out, as torch's
# DataLoader does (prefetch_factor x num_workers), and logs when each batch was asked for
# and taken; the bench's clock (the process tree's CPU, read at t0 and at the end) logs
# itself in the same list. No timing: only the order of events is checked.


class _PrefetchingLoader:
    def __init__(self, batches, depth, batch_size, log):
        self.batches, self.depth, self.batch_size, self.log, self.epochs = batches, depth, batch_size, log, 0

    def __len__(self):
        return self.batches

    def __iter__(self):
        return _PrefetchingEpoch(self)


class _PrefetchingEpoch:
    def __init__(self, loader):
        self.loader, self.epoch, self.asked, self.next_index = loader, loader.epochs, [], 0
        loader.epochs += 1
        self._top_up()  # like torch's iterator, asks for the first batches when it is made

    def _top_up(self):
        while len(self.asked) < self.loader.depth and self.next_index < self.loader.batches:
            key = (self.epoch, self.next_index)
            self.loader.log.append(("asked", key))
            self.asked.append(key)
            self.next_index += 1

    def __iter__(self):
        return self

    def __next__(self):
        if not self.asked:
            raise StopIteration
        key = self.asked.pop(0)
        self.loader.log.append(("taken", key))
        self._top_up()
        return torch.zeros(self.loader.batch_size, 1), torch.zeros(self.loader.batch_size, dtype=torch.int64)


class _Prefetching(registry.Contender):
    name = "prefetching"

    def __init__(self, epoch_length, log):
        self.epoch_length, self.log = epoch_length, log

    def dataset(self, config):
        return None

    def loader(self, dataset, config):  # torch's prefetch_factor (2) x num_workers in flight
        return _PrefetchingLoader(self.epoch_length, 2 * config.workers, config.batch_size, self.log)


def _measure_prefetching(monkeypatch, tmp_path, epoch_batches, **config):
    """(result, batches taken between the clock's reads, the log) of the fake contender."""
    log = []

    class ClockTree:
        def __init__(self, pid):
            pass

        def cpu_seconds(self):
            log.append(("clock", None))
            return 0.0

    monkeypatch.setitem(registry.CONTENDERS, "prefetching", _Prefetching(epoch_batches, log))
    monkeypatch.setattr(measure, "ProcessTree", ClockTree)
    result = measure.run_in_this_process(measure.MeasureConfig(
        contender="prefetching", root=str(tmp_path), progress=False, **{"workers": 2, "batch_size": 128, **config}))
    clocks = [i for i, (what, _) in enumerate(log) if what == "clock"]
    timed = [key for what, key in log[clocks[0]:clocks[-1]] if what == "taken"] if clocks else []
    return result, timed, log


def _asked_before_the_clock(log, timed):
    t0 = next(i for i, (what, _) in enumerate(log) if what == "clock")
    early = {key for what, key in log[:t0] if what == "asked"}
    return [key for key in timed if key in early]


def test_the_default_run_is_the_headline_and_all_asks_for_everything():
    args = parse_args(["--workers", "2"])
    assert args.contenders == ["baseline", "fastload", "dali-cpu"]
    assert args.pipeline == "train" and args.suite == ["main"] and args.batch_size == 64
    # The generated data is the fewest images whose epochs are not small data: no marked rows.
    plan = measure.plan_window(measure.MeasureConfig(contender="x", root="/x", workers=2, batch_size=64),
                               args.dataset_images // args.batch_size)
    assert args.dataset_images == 2560 and not plan.warnings and not plan.refused
    assert parse_args(["--workers", "2", "--dataset-images", "300"]).dataset_images == 300
    args = parse_args(["--contenders", "all", "--pipeline", "both", "--suite", "main,decode,scaling"])
    assert args.contenders == list(registry.CONTENDERS) and args.suite == ["main", "decode", "scaling"]
    # The user's own dataset races the contenders that can run it.
    args = parse_args(["--dataset", "mymodule:make"])
    assert args.contenders == [n for n, c in registry.CONTENDERS.items() if c.runs_user_dataset]


def test_the_default_window_is_many_prefetch_depths_long():
    # 2 workers: torch keeps 2 x 2 batches in flight. The window is 20 times that.
    args = parse_args(["--workers", "2", "--batch-size", "128"])
    assert args.images >= 20 * 4 * 128 and args.warmup_batches >= 4 + 1
    args = parse_args(["--workers", "8"])
    assert args.images >= 20 * 16 * args.batch_size
    plan = measure.plan_window(measure.MeasureConfig(contender="x", root="/x", workers=3, batch_size=64), 10**6)
    assert plan.timed_batches >= 20 * 6 and plan.warmup_batches >= 7 and not plan.warnings
    assert measure.MeasureConfig(contender="x", root="/x").images is None  # the minimum window, whatever workers


def test_batches_asked_for_before_the_clock_are_a_small_share_of_the_window(monkeypatch, tmp_path):
    # Large data: the window lies in the first epoch; what was in flight at t0 (the prefetch
    # depth, 4 batches) is at most 1/20 of what is timed, and no epoch starts in it.
    result, timed, log = _measure_prefetching(monkeypatch, tmp_path, epoch_batches=1000)
    assert result["status"] == "ok", result
    assert len(timed) >= 20 * 4 and result["images"] == 128 * len(timed)
    assert len(_asked_before_the_clock(log, timed)) <= len(timed) / 20
    assert {epoch for epoch, _ in timed} == {0} and result["window"]["epoch_starts"] == 0
    assert not result["warnings"]


def test_small_data_is_timed_in_whole_fresh_epochs_with_a_warning(monkeypatch, tmp_path):
    # 10 batches per epoch (>= 2 x 4, < 10 x 4): the warm-up is all of epoch 0; each timed
    # epoch starts after the clock, so no timed batch was asked for before it.
    result, timed, log = _measure_prefetching(monkeypatch, tmp_path, epoch_batches=10)
    assert result["status"] == "ok", result
    assert _asked_before_the_clock(log, timed) == []
    epochs = sorted({epoch for epoch, _ in timed})
    assert epochs[0] == 1 and len(timed) == 10 * len(epochs) and len(timed) >= 20 * 4
    assert result["window"]["epoch_starts"] == len(epochs) == result["window"]["whole_epochs"]
    assert any(w.startswith("small data") for w in result["warnings"]), result["warnings"]


def test_a_short_window_is_timed_with_a_warning(monkeypatch, tmp_path):
    result, timed, _ = _measure_prefetching(monkeypatch, tmp_path, epoch_batches=1000, images=256)
    assert result["status"] == "ok" and len(timed) == 2
    assert [w.split(":")[0] for w in result["warnings"]] == ["short window"]
    assert "--images 10240" in result["warnings"][0]


def test_data_whose_epoch_fits_in_the_prefetch_is_refused(monkeypatch, tmp_path, tiny, capsys):
    # 3 batches per epoch with 2 workers (4 in flight): nothing steady to time.
    result, timed, _ = _measure_prefetching(monkeypatch, tmp_path, epoch_batches=3)
    assert result["status"] == "refused" and timed == []
    assert "at least 1024 images" in result["reason"], result["reason"]
    # The command refuses before running anyone, and says how much data it needs.
    _, ds = tiny
    monkeypatch.setattr(measure, "run_in_subprocess", lambda *a, **k: pytest.fail("a refused run measured"))
    assert main(["--data", ds.root, "--batch-size", "4", "--workers", "2", "--contenders", "baseline",
                 "--pipeline", "eval", "--suite", "main", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "refused" in err and "at least 32 images" in err and "--data at a folder of at least 32" in err


def test_marked_rows_say_why_in_the_table_the_json_and_the_plot(tmp_path):
    warning = "small data: 15 batches of 128 per epoch"
    rows = [{"contender": name, "pipeline": "train", "status": "ok", "path": "p", "images_per_s": ips,
             "cpu_ms_per_image": 5.0, "peak_rss_mb": 900.0, "first_batch_s": 1.0, "others_cpu_pct": 1.0,
             "window": {"epoch_starts": 6}, "warnings": [warning]} for name, ips in
            (("baseline", 200.0), ("fastload", 1000.0))]
    rows.append({"contender": "dali-cpu", "pipeline": "train", "status": "ok", "path": "p", "images_per_s": 400.0,
                 "window": {"epoch_starts": 7}, "warnings": []})
    report.add_ratios(rows)
    assert rows[2]["warnings"] and rows[2]["warnings"][0].startswith("unlike windows: 7 epoch start(s)")
    table = report.format_compact(rows)
    assert "5.00x *" in table and "1.00x *" in table and "2.00x *" in table
    notes = report.format_warnings(rows)
    assert notes[0].startswith("* marked rows") and "baseline (train), fastload (train): small data" in notes[1]
    assert "dali-cpu (train): unlike windows" in notes[2]
    assert report.format_warnings([dict(rows[0], warnings=[])]) == []
    pytest.importorskip("matplotlib")
    report.plot(rows, str(tmp_path / "bench.svg"))
    svg = (tmp_path / "bench.svg").read_text()
    assert "small data" in svg and "(5.00x) *" in svg
