"""fastload-bench --suite prepared: every row with its size, PSNR and ratios; cached shards.

No timing assertions: figures only have to exist and be positive; what is checked is
that each contender ran on the data it names (the path), that lossless shards have the
original's pixels (PSNR inf) and resized ones do not, and that a second run neither
prepares again nor forgets when and how fast the shards were made.
"""

from __future__ import annotations

import json
import math
import os

import pytest

import fastload
from fastload import _ext
from fastload.bench import prepared
from fastload.bench.__main__ import main

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="the native extension is not built")

ARGV = ["--suite", "prepared", "--dataset-images", "4", "--classes", "2", "--images", "2", "--batch-size", "1",
        "--workers", "0", "--prepared-modes", "lossless,64q90", "--psnr-images", "2", "--no-progress",
        "--timeout", "200"]
LABELS = ["torch+PIL original", "fastload original", "fastload lossless", "fastload 64q90", "ffcv (own .beton)"]


def _run(tmp_path, name):
    out = tmp_path / f"{name}.json"
    assert main(ARGV + ["--json", str(out)]) == 0
    return json.loads(out.read_text())["prepared"]


@pytest.mark.timeout(300)
def test_prepared_suite_has_every_row_and_a_second_run_reuses_the_shards(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    first = _run(tmp_path, "first")
    table = capsys.readouterr().out
    rows = {r["label"]: r for r in first["rows"]}
    assert list(rows) == LABELS
    original_bytes = first["original_bytes"]
    assert original_bytes > 0
    for label in LABELS[:4]:
        r = rows[label]
        assert r["status"] == "ok", r
        assert r["images"] == 4 and r["images_per_s"] > 0 and r["cpu_ms_per_image"] >= 0 and r["first_batch_s"] > 0
        assert r["size_bytes"] > 0 and r["size_ratio"] == pytest.approx(r["size_bytes"] / original_bytes)
        assert r["vs_torch"] > 0 and r["vs_original"] > 0
        assert r["first_batch"]["shape"] == [1, 3, 224, 224] and r["first_batch"]["dtype"] == "float32"
        assert label in table
    assert rows["torch+PIL original"]["vs_torch"] == pytest.approx(1.0)
    assert rows["fastload original"]["vs_original"] == pytest.approx(1.0)
    assert rows["torch+PIL original"]["path"] == "torch (PIL)"
    assert rows["fastload original"]["path"].startswith("native: ImageFolder")
    for label in ("fastload lossless", "fastload 64q90"):
        assert rows[label]["path"].startswith("native: TarShards"), rows[label]
        assert rows[label]["prep_s_per_1000"] > 0 and rows[label]["prepared_at"]
        assert set(rows[label]["psnr_db"]) == {"whole", "25%", "8%"}
    assert all(math.isinf(v) for v in rows["fastload lossless"]["psnr_db"].values())  # the same pixels
    assert all(0 < v < math.inf for v in rows["fastload 64q90"]["psnr_db"].values())
    assert rows["fastload 64q90"]["size_ratio"] < 0.5  # 64 px on the long side
    assert rows["fastload original"]["psnr_db"] is None and rows["fastload original"]["size_ratio"] == 1.0
    ffcv = rows["ffcv (own .beton)"]
    assert ffcv["status"] == "unavailable" and "ffcv" in ffcv["reason"]
    assert "inf/inf/inf" in table and "ffcv (own .beton): unavailable" in table
    infos = {i["mode"]: i for i in first["prepared"]}
    assert not any(i["cached"] for i in infos.values())
    stamps = {s: os.stat(s).st_mtime_ns for i in infos.values() for s in i["shards"]}

    # The second run: no preparation, no measurement needed to see it (both stubbed).
    def no_prepare(*args, **kwargs):
        raise AssertionError("fastload.prepare ran again on shards the first run made")

    def fake_measure(config, timeout, forward_stderr):
        return {"contender": config.contender, "pipeline": "train", "status": "ok", "path": "stub",
                "images": 2, "images_per_s": 10.0, "cpu_ms_per_image": 1.0, "first_batch_s": 0.1}

    monkeypatch.setattr(fastload.prepare, "prepare", no_prepare)
    monkeypatch.setattr(prepared, "run_in_subprocess", fake_measure)
    second = _run(tmp_path, "second")
    again = {i["mode"]: i for i in second["prepared"]}
    assert all(i["cached"] for i in again.values())
    for mode, info in infos.items():
        assert again[mode]["folder"] == info["folder"] and again[mode]["shards"] == info["shards"]
        # The preparation time is the one measured when the shards were made.
        assert again[mode]["prep_s_per_1000"] == info["prep_s_per_1000"]
        assert again[mode]["prepared_at"] == info["prepared_at"]
        assert again[mode]["psnr"] == info["psnr"]
    assert {s: os.stat(s).st_mtime_ns for s in stamps} == stamps
    assert [r["label"] for r in second["rows"]] == LABELS


def test_prepared_modes_are_parsed_or_refused_with_the_form(capsys):
    modes = prepared.parse_modes("lossless, 512q90,q75,384")
    assert [(m.name, m.options()) for m in modes] == [
        ("lossless", {}), ("512q90", {"max_side": 512, "quality": 90}), ("q75", {"quality": 75}),
        ("384", {"max_side": 384, "quality": 90})]
    for bad in ("512x90", "q0", "lossless,lossless", ","):
        with pytest.raises(SystemExit):
            main(["--suite", "prepared", "--prepared-modes", bad])
        assert "--prepared-modes" in capsys.readouterr().err


def test_a_shard_cache_without_its_timing_record_is_finished_not_trusted(tmp_path, monkeypatch):
    """Shards made by a run that stopped before writing their preparation time are kept
    (fastload.prepare resumes them) and the record is written then."""
    from fastload.bench import dataset as data
    from fastload.prepare.source import as_source

    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    ds = data.ensure_dataset(data.DatasetSpec(images=3, classes=1, seed=5), processes=1)
    fingerprint = as_source(ds.root).fingerprint()
    mode = prepared.Mode("lossless")
    made = prepared.ensure_prepared(ds.root, mode, fingerprint, True, workers=0)
    os.remove(made["timing_path"])
    again = prepared.ensure_prepared(ds.root, mode, fingerprint, True, workers=0)
    assert not again["cached"] and again["shards"] == made["shards"] and os.path.exists(again["timing_path"])
    assert again["prep_s_per_1000"] is None  # nothing was prepared: no time to report
    assert prepared.ensure_prepared(ds.root, mode, fingerprint, True, workers=0)["cached"]


def test_psnr_cells_read_whole_then_25_then_8_percent_whatever_the_stored_order():
    row = {"label": "fastload 384q90", "status": "ok", "psnr_db": {"25%": 33.2, "8%": 32.0, "whole": 38.4}}
    assert prepared._display(row)["psnr"] == "38.4/33.2/32.0"


def test_a_mode_that_cannot_be_prepared_is_a_row_not_a_crash(tmp_path, monkeypatch, capsys):
    from fastload.bench import dataset as data

    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    ds = data.ensure_dataset(data.DatasetSpec(images=2, classes=1, seed=6), processes=1)

    def broken(root, mode, *args, **kwargs):
        raise OSError(f"disk full while writing {mode.name}")

    def fake_measure(config, timeout, forward_stderr):
        return {"contender": config.contender, "pipeline": "train", "status": "ok", "path": "stub",
                "images": 2, "images_per_s": 10.0, "cpu_ms_per_image": 1.0, "first_batch_s": 0.1}

    monkeypatch.setattr(prepared, "ensure_prepared", broken)
    monkeypatch.setattr(prepared, "run_in_subprocess", fake_measure)
    out = tmp_path / "out.json"
    assert main(["--suite", "prepared", "--data", ds.root, "--prepared-modes", "lossless,q75", "--no-progress",
                 "--json", str(out)]) == 0
    rows = {r["label"]: r for r in json.loads(out.read_text())["prepared"]["rows"]}
    assert list(rows) == ["torch+PIL original", "fastload original", "fastload lossless", "fastload q75",
                          "ffcv (own .beton)"]
    for label in ("fastload lossless", "fastload q75"):
        assert rows[label]["status"] == "failed" and "disk full while writing" in rows[label]["reason"]
    assert "fastload q75: failed: preparation failed: OSError: disk full while writing q75" in capsys.readouterr().out
