"""fastload.prepare: prepared shards (fastload/prepare/) and the engine's block-skipping
decode of them (csrc/engine/sample.cpp, csrc/decode/decode_segments.cpp).

References: the original files, decoded by the same decoder (fastload.ops.decode_jpeg,
itself tested against PIL) or loaded by the same loader: lossless preparation must give
exactly the same pixels and the same batches.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jpeg_samples as js  # noqa: E402

import fastload  # noqa: E402
from fastload import _ext  # noqa: E402
from fastload import ops  # noqa: E402
from fastload import transforms as T  # noqa: E402
from fastload.prepare import ManifestError, read_segments  # noqa: E402
from fastload.prepare import segments as seg  # noqa: E402

_ext.require_ops()

# Every chroma sampling PIL writes, gray, odd sizes, progressive (transcoded to baseline),
# a file with its own restart markers, CMYK.
SAMPLES = [("rgb420", js.photo(97, 131, 1), dict(subsampling="4:2:0")),
           ("rgb422", js.photo(61, 83, 2), dict(subsampling="4:2:2")),
           ("rgb444", js.photo(45, 77, 3), dict(subsampling="4:4:4")),
           ("gray", js.photo(53, 39, 4)[..., 1], {}),
           ("progressive", js.photo(70, 90, 5), dict(progressive=True)),
           ("restarts", js.photo(66, 50, 6), dict(restart_blocks=3)),
           ("cmyk", js.photo_cmyk(41, 29, 7), dict(subsampling="4:4:4")),
           ("tall", js.photo(250, 40, 8), dict(subsampling="4:2:0"))]


def jpeg_folder(root) -> str:
    """An ImageFolder tree: the samples above in class_0, two of them and a PNG in class_1."""
    for c in range(2):
        os.makedirs(os.path.join(root, f"class_{c}"), exist_ok=True)
    for name, pixels, options in SAMPLES:
        with open(os.path.join(root, "class_0", f"{name}.jpg"), "wb") as f:
            f.write(js.encode(pixels, **options))
    for i in range(2):
        with open(os.path.join(root, "class_1", f"img{i}.jpg"), "wb") as f:
            f.write(js.encode(js.photo(120 + 9 * i, 160, 20 + i)))
    Image.fromarray(js.photo(33, 47, 30)).save(os.path.join(root, "class_1", "z.png"))
    return str(root)


@pytest.fixture(scope="module")
def jpeg_kinds_folder(tmp_path_factory):
    return jpeg_folder(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def prepared(jpeg_kinds_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    return fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=4, num_workers=0)


def decode(data: bytes, window=()) -> torch.Tensor:
    return ops.decode_jpeg(js.as_tensor(data), list(window))


def test_lossless_shards_decode_to_the_original_pixels(jpeg_kinds_folder, prepared):
    original = fastload.ImageFolder(jpeg_kinds_folder)
    shards = fastload.TarShards(prepared.root)
    assert len(shards) == len(original) and shards.targets == original.targets
    assert prepared.manifest["kinds"] == {"prepared": len(SAMPLES) + 2, "as_is": 1}
    for i in range(len(original)):
        before, after = original.index.read(i), shards.index.read(i)
        if before[:2] != b"\xff\xd8":  # the PNG: stored as it is, as a .png member
            assert after == before and shards.index.members[i].endswith(".png")
            continue
        segments = read_segments(after)
        assert segments is not None, original.index.source(i)
        assert torch.equal(decode(after), decode(before)), original.index.source(i)
        jpeg = js.as_tensor(after)
        height, width = decode(before).shape[:2]
        for window in ([0, 0, 1, width], [height - 1, 0, 1, width], [height // 3, width // 4, 9, 7],
                       [0, width - 1, height, 1]):
            assert torch.equal(ops.decode_jpeg_rows(jpeg, torch.from_numpy(segments), window),
                               decode(before, window)), (original.index.source(i), window)


def test_prepared_shards_are_plain_webdataset_tars(prepared):
    import webdataset as wds

    samples = list(wds.WebDataset(prepared.shards, shardshuffle=False))
    assert len(samples) == sum(s["count"] for s in prepared.manifest["shards"])
    assert all(("jpg" in s or "png" in s) and "cls" in s for s in samples)
    assert [s["__key__"] for s in samples] == [f"{i:09d}" for i in range(len(samples))]


def test_embedded_segment_index_survives_a_stripped_reprepare():
    data = js.encode(js.photo(40, 48, 0))
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data))
    once = seg.embed_segments(jpeg.numpy().tobytes(), segments.numpy())
    again = fastload.prepare.encode.encode(once, "x.jpg", 0, fastload.prepare.encode.EncodeSettings())
    assert again.data.count(seg.IDENT) == 1 and torch.equal(decode(again.data), decode(data))


def loader_batches(dataset, seed=0):
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed))
    return loader, [(images.clone(), labels.clone()) for images, labels in loader]


@pytest.mark.parametrize("pipeline", [
    [T.RandomResizedCrop(24, scale=(0.05, 0.3)), T.RandomHorizontalFlip()],
    [T.Resize(40), T.CenterCrop(32)],
], ids=["small-crops", "centre"])
def test_loader_on_lossless_shards_gives_the_original_folders_batches(jpeg_kinds_folder, prepared, pipeline):
    original_loader, original = loader_batches(fastload.ImageFolder(jpeg_kinds_folder, transforms=pipeline, seed=7))
    shards_loader, shards = loader_batches(fastload.TarShards(prepared.root, transforms=pipeline, seed=7))
    assert shards_loader.path.startswith("native") and original_loader.path.startswith("native")
    assert len(original) == len(shards)
    for (a, la), (b, lb) in zip(original, shards):
        assert torch.equal(la, lb) and torch.equal(a, b)


def test_engine_decodes_prepared_jpegs_through_their_segment_index(tmp_path):
    # An index whose rows are wrong is refused by the engine (it is read and checked):
    # proof that the engine takes the segment path, not the plain decode.
    data = js.encode(js.photo(96, 64, 3))
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data))
    broken = segments.numpy().copy()
    broken[1, 1] += 1  # segment 1's MCU row
    (tmp_path / "good.jpg").write_bytes(seg.embed_segments(jpeg.numpy().tobytes(), segments.numpy()))
    (tmp_path / "bad.jpg").write_bytes(seg.embed_segments(jpeg.numpy().tobytes(), broken))
    pipeline = [T.CenterCrop(16)]
    good = fastload.FileList([str(tmp_path / "good.jpg")], transforms=pipeline)
    images, _ = next(iter(fastload.DataLoader(good, batch_size=1)))
    assert torch.equal(images, next(iter(fastload.DataLoader(
        fastload.FileList([str(tmp_path / "good.jpg")], transforms=pipeline), batch_size=1)))[0])
    bad = fastload.FileList([str(tmp_path / "bad.jpg")], transforms=pipeline)
    with pytest.raises(fastload.DecodeError, match="segments that match.*prepare the dataset again"):
        next(iter(fastload.DataLoader(bad, batch_size=1)))


def test_engine_refuses_a_malformed_segment_index_marker(tmp_path):
    data = js.encode(js.photo(40, 48, 0))
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data))
    prepared = seg.embed_segments(jpeg.numpy().tobytes(), segments.numpy())
    at = prepared.index(seg.IDENT) + len(seg.IDENT)
    (tmp_path / "v3.jpg").write_bytes(prepared[:at] + bytes([3]) + prepared[at + 1:])  # an unknown version
    dataset = fastload.FileList([str(tmp_path / "v3.jpg")], transforms=[T.CenterCrop(16)])
    with pytest.raises(fastload.DecodeError, match="segment index marker .* version 2 or 1.*version 3"):
        next(iter(fastload.DataLoader(dataset, batch_size=1)))


def test_interrupted_preparation_keeps_finished_shards_and_redoes_the_rest(jpeg_kinds_folder, tmp_path, monkeypatch):
    from fastload.prepare import run

    real = run.enc.encode

    def interrupted(data, name, sample, settings):
        if sample == 5:
            raise KeyboardInterrupt
        return real(data, name, sample, settings)

    monkeypatch.setattr(run.enc, "encode", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=2, num_workers=0)
    names = sorted(os.listdir(out))
    # Shards 0 and 1 are whole; shard 2 (samples 4, 5) was never renamed into place.
    assert [n for n in names if n.endswith(".tar")] == ["shard-000000.tar", "shard-000001.tar"]
    assert not [n for n in names if n.endswith(".tmp")] and "fastload-manifest.json" not in names
    kept = {n: os.stat(out / n).st_ino for n in ("shard-000000.tar", "shard-000001.tar")}
    with pytest.raises(fastload.TarShardError, match="without one"):
        fastload.TarShards(str(out))  # no manifest yet: not a prepared dataset

    monkeypatch.setattr(run.enc, "encode", real)
    resumed = fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=2, num_workers=0)
    assert resumed.redone == len(resumed.shards) - 2
    assert {n: os.stat(out / n).st_ino for n in kept} == kept
    fresh = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "fresh"), samples_per_shard=2, num_workers=0)
    assert [s["sha256"] for s in resumed.manifest["shards"]] == [s["sha256"] for s in fresh.manifest["shards"]]


def test_parallel_preparation_writes_the_same_shards(jpeg_kinds_folder, prepared, tmp_path):
    parallel = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "p"), samples_per_shard=4, num_workers=2)
    assert [s["sha256"] for s in parallel.manifest["shards"]] == [s["sha256"] for s in prepared.manifest["shards"]]


def test_corrupt_sources_raise_or_are_skipped_and_listed(tmp_path):
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    good = js.encode(js.photo(40, 40, 0))
    (src / "a.jpg").write_bytes(good)
    (src / "b.jpg").write_bytes(good[: len(good) // 2])  # truncated
    (src / "c.jpg").write_bytes(b"not an image")
    (src / "d.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    with pytest.raises(fastload.DecodeError, match="b.jpg"):
        fastload.prepare(str(tmp_path / "src"), str(tmp_path / "raise"), num_workers=0)
    assert not [n for n in os.listdir(tmp_path / "raise") if n.endswith((".tar", ".tmp"))]
    out = fastload.prepare(str(tmp_path / "src"), str(tmp_path / "skip"), num_workers=0, on_error="skip")
    assert [os.path.basename(s["source"]) for s in out.manifest["skipped"]] == ["b.jpg", "c.jpg", "d.png"]
    assert all(s["reason"] for s in out.manifest["skipped"])
    assert out.manifest["shards"][0]["count"] == 1 and len(fastload.TarShards(out.root)) == 1


def test_tampered_manifest_or_shard_is_refused(jpeg_kinds_folder, tmp_path):
    out = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out"), samples_per_shard=4, num_workers=0)
    manifest_path = os.path.join(out.root, "fastload-manifest.json")
    record = json.load(open(manifest_path))
    record["shards"][0]["count"] += 1
    json.dump(record, open(manifest_path, "w"))
    with pytest.raises(ManifestError, match="edited after preparation"):
        fastload.TarShards(out.root)

    out = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out2"), samples_per_shard=4, num_workers=0)
    shard = out.shards[1]
    with tarfile.open(shard) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    with open(shard, "r+b") as f:  # one byte of an image changed, same size
        f.seek(member.offset_data + member.size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x55]))
    with pytest.raises(ManifestError, match="shard-000001.tar.*expected sha256"):
        fastload.TarShards(out.root)
    shard = out.shards[0]
    with open(shard, "ab") as f:  # still a valid tar (zero blocks after its end), but not as recorded
        f.write(bytes(1024))
    with pytest.raises(ManifestError, match="shard-000000.tar.*expected .* bytes"):
        fastload.TarShards(out.shards)


def test_resize_mode_bounds_the_longer_side_and_stores_raw_pixels(jpeg_kinds_folder, tmp_path):
    out = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out"), max_side=64, quality=85, raw_fraction=0.3,
                           samples_per_shard=4, num_workers=0)
    original, shards = fastload.ImageFolder(jpeg_kinds_folder), fastload.TarShards(out.root)
    assert out.manifest["settings"]["max_side"] == 64 and not out.manifest["exploit"]["pixel_identical"]
    kinds = out.manifest["kinds"]
    assert kinds["raw"] == sum(shards.index.members[i].endswith(".ppm") for i in range(len(shards))) >= 2
    assert kinds["prepared"] == len(shards) - kinds["raw"]
    for i in range(len(original)):
        w0, h0 = Image.open(io.BytesIO(original.index.read(i))).size
        data = shards.index.read(i)
        w, h = Image.open(io.BytesIO(data)).size
        if max(w0, h0) <= 64:
            assert (w, h) == (w0, h0)  # never upscaled
        else:
            assert max(w, h) == 64 and abs(w / h - w0 / h0) < 0.05
        if data[:2] == b"\xff\xd8":
            assert read_segments(data) is not None
    images, _ = next(iter(fastload.DataLoader(fastload.TarShards(out.root, transforms=[T.CenterCrop(16)]),
                                              batch_size=len(shards))))
    assert images.shape == (len(shards), 3, 16, 16)


def test_another_preparation_in_the_destination_is_refused_without_overwrite(jpeg_kinds_folder, tmp_path):
    fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out"), samples_per_shard=4, num_workers=0)
    with pytest.raises(ValueError, match="overwrite=True"):
        fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out"), samples_per_shard=3, num_workers=0)
    again = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out"), samples_per_shard=3, num_workers=0,
                             overwrite=True)
    assert again.redone == len(again.shards) and len(fastload.TarShards(again.root)) == len(SAMPLES) + 3


def test_prepare_command_line(jpeg_kinds_folder, tmp_path, capsys):
    from fastload.prepare.cli import main

    assert main([jpeg_kinds_folder, str(tmp_path / "out"), "--workers", "0", "--samples-per-shard", "5"]) == 0
    assert "samples in 3 shards" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere"), str(tmp_path / "x"), "--workers", "0"]) == 1
    assert "expected an image folder or tar shards" in capsys.readouterr().err


def test_broken_symlinks_raise_naming_the_file_or_are_skipped_and_listed(tmp_path):
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    good = js.encode(js.photo(40, 40, 0))
    (src / "a.jpg").write_bytes(good)
    (src / "b.jpg").write_bytes(good[: len(good) // 2])  # truncated: the record every skip has
    os.symlink("missing.jpg", src / "dangling.jpg")
    os.symlink("loop.jpg", src / "loop.jpg")  # ELOOP
    (src / "z.jpg").write_bytes(good)
    with pytest.raises(fastload.DecodeError, match=r"sample 2, .*dangling\.jpg: .*'missing\.jpg', which does not "
                                                   r"exist\)\. Fix or remove the file, or pass on_error='skip'"):
        fastload.prepare(str(tmp_path / "src"), str(tmp_path / "raise"), num_workers=0)
    assert not [n for n in os.listdir(tmp_path / "raise") if n.endswith((".tar", ".tmp"))]
    os.unlink(src / "dangling.jpg")
    with pytest.raises(fastload.DecodeError, match=r"loop\.jpg: .*leads back to itself"):
        fastload.prepare(str(tmp_path / "src"), str(tmp_path / "raise"), num_workers=0)
    os.symlink("missing.jpg", src / "dangling.jpg")

    out = fastload.prepare(str(tmp_path / "src"), str(tmp_path / "skip"), num_workers=0, on_error="skip")
    skipped = out.manifest["skipped"]
    assert [os.path.basename(s["source"]) for s in skipped] == ["b.jpg", "dangling.jpg", "loop.jpg"]
    assert all(set(s) == {"sample", "source", "reason"} and s["reason"] for s in skipped)
    shards = fastload.TarShards(out.root)
    assert len(shards) == 2 and shards.index.read(0) == shards.index.read(1)
    images, _ = next(iter(fastload.DataLoader(fastload.TarShards(out.root, transforms=[T.CenterCrop(16)]),
                                              batch_size=2)))
    assert images.shape == (2, 3, 16, 16)
    again = fastload.prepare(str(tmp_path / "src"), str(tmp_path / "skip"), num_workers=0, on_error="skip")
    assert again.redone == 0  # the same broken links: the same source, the shards kept


# A preparation that takes a while (0.5 s per image), run as its own process; each image
# it starts appends the worker's pid to the file argv[3].
SLOW_PREPARE = """
import os, sys, time
import fastload
from fastload.prepare import run

real = run.enc.encode

def slow(data, name, sample, settings):
    with open(sys.argv[3], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(0.5)
    return real(data, name, sample, settings)

run.enc.encode = slow
fastload.prepare(sys.argv[1], sys.argv[2], samples_per_shard=4, num_workers=2, progress=False)
"""
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def slow_prepare(src, dst, pids) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SLOW_PREPARE, str(src), str(dst), str(pids)], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)


def wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_second_preparation_into_the_same_folder_is_refused_while_the_first_runs(jpeg_kinds_folder, prepared, tmp_path,
                                                                                 capsys):
    from fastload.prepare.cli import main

    out, pids = tmp_path / "out", tmp_path / "pids"
    first = slow_prepare(jpeg_kinds_folder, out, pids)
    try:
        wait_for(lambda: pids.exists() or first.poll() is not None, "the first preparation to start on images")
        assert first.poll() is None, first.stderr.read()
        with pytest.raises(fastload.errors.FolderInUse,
                           match=rf"another preparation \(process {first.pid}\) is writing into .*out'\. "
                                 "Wait for it to finish, or choose another output folder"):
            fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=4, num_workers=0)
        assert main([jpeg_kinds_folder, str(out), "--workers", "0", "--samples-per-shard", "4"]) == 1
        assert f"another preparation (process {first.pid}) is writing into" in capsys.readouterr().err
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        first.kill()
        first.wait()
    manifest = fastload.prepare.read_manifest(str(out))
    assert [s["sha256"] for s in manifest["shards"]] == [s["sha256"] for s in prepared.manifest["shards"]]
    assert len(fastload.TarShards(str(out))) == len(fastload.TarShards(prepared.root))
    # The lock file stays, and neither a rerun, a loader nor overwrite minds it.
    assert os.path.exists(out / ".fastload-prepare.lock")
    assert fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=4, num_workers=0).redone == 0
    assert fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=3, num_workers=0, overwrite=True).redone == 4


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie writes nothing
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with their parent on Linux only")
def test_killed_preparation_leaves_no_lock_and_no_worker_behind(jpeg_kinds_folder, prepared, tmp_path):
    out, pids = tmp_path / "out", tmp_path / "pids"
    first = slow_prepare(jpeg_kinds_folder, out, pids)
    try:
        workers = set()

        def both_workers_busy() -> bool:
            workers.update(int(p) for p in pids.read_text().split()) if pids.exists() else None
            return len(workers) == 2 or first.poll() is not None

        wait_for(both_workers_busy, "both workers to start on images")
        assert first.poll() is None, first.stderr.read()
        os.kill(first.pid, signal.SIGKILL)  # the preparing process only, as the OOM killer would
        first.wait()
        # Its workers go with it: left alone they would hold the lock, or write the shard
        # they were on while the next run writes the same one.
        wait_for(lambda: not any(_running(p) for p in workers), "the killed run's workers to end", timeout=10)
    finally:
        first.kill()
        first.wait()
    again = fastload.prepare(jpeg_kinds_folder, str(out), samples_per_shard=4, num_workers=0)
    assert [s["sha256"] for s in again.manifest["shards"]] == [s["sha256"] for s in prepared.manifest["shards"]]
    assert len(fastload.TarShards(again.root)) == len(fastload.TarShards(prepared.root))


def test_prepared_files_follow_the_umask(jpeg_kinds_folder, tmp_path):
    before = os.umask(0o022)
    try:
        out = fastload.prepare(jpeg_kinds_folder, str(tmp_path / "out"), samples_per_shard=4, num_workers=0)
    finally:
        os.umask(before)
    files = [os.path.join(d, f) for d, _, names in os.walk(out.root) for f in names]
    assert {os.path.basename(f) for f in files} >= {"fastload-manifest.json", "shard-000000.tar",
                                                    "shard-000000.tar.idx.json"}
    assert {os.path.relpath(f, out.root): oct(os.stat(f).st_mode & 0o777) for f in files} == {
        os.path.relpath(f, out.root): "0o644" for f in files}


def test_bad_image_message_gives_the_advice_once_naming_the_callers_option(tmp_path, capsys):
    from fastload.prepare.cli import main

    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    good = js.encode(js.photo(40, 40, 0))
    (src / "a.jpg").write_bytes(good[: len(good) // 2])
    with pytest.raises(fastload.DecodeError) as raised:
        fastload.prepare(str(tmp_path / "src"), str(tmp_path / "api"), num_workers=0)
    message = str(raised.value)
    assert "a.jpg" in message and message.count("Fix or remove the file") == 1
    assert message.count("on_error='skip'") == 1 and "loader" not in message and ".." not in message
    assert main([str(tmp_path / "src"), str(tmp_path / "cli"), "--workers", "0"]) == 1
    printed = capsys.readouterr().err
    assert "a.jpg" in printed and printed.count("Fix or remove the file") == 1
    assert printed.count("--on-error skip") == 1 and "on_error=" not in printed and ".." not in printed
    # A worker process's error reaches the caller with its message.
    (src / "b.jpg").write_bytes(good)
    with pytest.raises(fastload.DecodeError, match="a.jpg: .*pass on_error='skip' to leave such files out"):
        fastload.prepare(str(tmp_path / "src"), str(tmp_path / "pool"), num_workers=2, samples_per_shard=1)


def test_help_explains_seed_samples_per_shard_and_raw_fraction(capsys):
    from fastload.prepare.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--seed S which images --raw-fraction picks" in text
    assert "--samples-per-shard N images per shard" in text and "at least 64" in text
    assert "--raw-fraction F share of images (0..1) stored as raw pixels" in text


def test_default_samples_per_shard_gives_every_worker_a_shard(tmp_path):
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    for i in range(130):
        (src / f"{i:03d}.jpg").write_bytes(js.encode(js.photo(16, 16, i)))
    out = fastload.prepare(str(tmp_path / "src"), str(tmp_path / "out"), num_workers=2)
    assert out.manifest["settings"]["samples_per_shard"] == 65 and [s["count"] for s in out.manifest["shards"]] == [
        65, 65]
    given = fastload.prepare(str(tmp_path / "src"), str(tmp_path / "given"), num_workers=2, samples_per_shard=100)
    assert [s["count"] for s in given.manifest["shards"]] == [100, 30]
    # Resuming with another worker count keeps the plan of the run it resumes.
    os.unlink(out.shards[1])
    os.unlink(os.path.join(out.root, "fastload-manifest.json"))
    resumed = fastload.prepare(str(tmp_path / "src"), out.root, num_workers=0)
    assert resumed.redone == 1 and resumed.manifest == out.manifest

    from fastload.prepare.run import _default_samples_per_shard

    assert [_default_samples_per_shard(n, w) for n, w in [(130, 2), (500, 2), (100, 8), (10 ** 6, 16),
                                                          (1000, 1), (1000, 0), (5, 4)]] == [
        65, 250, 64, 1000, 1000, 1000, 64]


# ---- column tiles ------------------------------------------------------------------

# (h, v) of each component for every chroma sampling a prepared file can have.
SAMPLINGS = {"444": [(1, 1)] * 3, "422": [(2, 1), (1, 1), (1, 1)], "420": [(2, 2), (1, 1), (1, 1)],
             "440": [(1, 2), (1, 1), (1, 1)], "411": [(4, 1), (1, 1), (1, 1)], "gray": [(1, 1)],
             "cmyk": [(1, 1)] * 4}


def sampled(kind: str, height: int, width: int, seed: int = 0) -> bytes:
    if kind == "gray":
        return js.encode_sampled(js.photo(height, width, seed)[..., 1], SAMPLINGS[kind])
    if kind == "cmyk":
        return js.encode_sampled(js.photo_cmyk(height, width, seed), SAMPLINGS[kind])
    return js.encode_sampled(js.photo(height, width, seed), SAMPLINGS[kind])


def mcu_width(kind: str) -> int:
    return 8 * max(h for h, _ in SAMPLINGS[kind]) if kind not in ("gray",) else 8


def tiles_per_row(segments: torch.Tensor) -> int:
    rows = segments[:-1, 1].tolist()
    return rows.count(0)


def scaled_box(window, d):
    top, left, h, w = window
    return slice(top // d, -(-(top + h) // d)), slice(left // d, -(-(left + w) // d))


def check_windows(original: bytes, jpeg, segments, windows, scales=(1, 2, 4, 8), channels=3):
    for d in scales:
        full = ops.decode_jpeg(js.as_tensor(original), [], d, channels).numpy()
        for window in windows:
            got = ops.decode_jpeg_rows(jpeg, segments, window, d, channels).numpy()
            ys, xs = scaled_box(window, d)
            np.testing.assert_array_equal(got, full[ys, xs], err_msg=f"window {window} at 1/{d}")


def edge_windows(h: int, w: int, rng: np.random.Generator, count: int = 12):
    """Windows touching each edge and corner, 1-pixel ones, and random ones."""
    out = [[0, 0, h, w], [0, 0, 1, 1], [h - 1, w - 1, 1, 1], [0, w - 1, h, 1], [h - 1, 0, 1, w],
           [0, 0, min(h, 9), min(w, 9)], [max(0, h - 9), max(0, w - 9), min(h, 9), min(w, 9)]]
    for _ in range(count):
        top, left = int(rng.integers(h)), int(rng.integers(w))
        out.append([top, left, int(rng.integers(1, h - top + 1)), int(rng.integers(1, w - left + 1))])
    return out


@pytest.mark.parametrize("kind", list(SAMPLINGS))
def test_transcoder_cuts_rows_into_column_tiles_that_divide_them(kind):
    mw = mcu_width(kind)
    data = sampled(kind, 40, 16 * mw - 3, seed=1)  # 16 MCUs a row: tiles of a divisor
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data), -1)
    k = 16 // tiles_per_row(segments)
    assert tiles_per_row(segments) > 1 and 16 % k == 0 and 32 <= k * mw <= 128
    assert torch.equal(ops.decode_jpeg(jpeg), ops.decode_jpeg(js.as_tensor(data)))
    # A prime number of MCUs per row has no divisor in range: one-MCU tiles where an MCU
    # is 16 pixels or wider, else whole rows (as restart_rows=1).
    prime = sampled(kind, 40, 13 * mw, seed=2)
    jpeg13, segments13 = ops.transcode_jpeg(js.as_tensor(prime), -1)
    if mw >= 16:
        assert tiles_per_row(segments13) == 13
        check_windows(prime, jpeg13, segments13, edge_windows(40, 13 * mw, np.random.default_rng(13)), scales=(1, 2))
    else:
        assert tiles_per_row(segments13) == 1
        assert torch.equal(segments13, ops.transcode_jpeg(js.as_tensor(prime), 1)[1])


@pytest.mark.parametrize("kind", list(SAMPLINGS))
@pytest.mark.parametrize("size", ["6mcus", "1px", "1mcu", "10mcus_short"])
def test_tiled_windows_equal_the_originals_at_every_edge_and_scale(kind, size):
    mw = mcu_width(kind)
    h, w = {"6mcus": (37, 6 * mw - mw // 2),  # a partial last MCU
            "1px": (1, 1), "1mcu": (29, mw), "10mcus_short": (5, 10 * mw)}[size]
    data = sampled(kind, h, w, seed=h + w)
    mcus = -(-w // mw)
    # The narrowest tiles (2 MCUs) where they divide the row, else the transcoder's choice.
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data), -2 if mcus % 2 == 0 and mcus > 2 else -1)
    assert tiles_per_row(segments) == (mcus // 2 if mcus % 2 == 0 and mcus > 2 else 1)
    check_windows(data, jpeg, segments, edge_windows(h, w, np.random.default_rng(h * 1000 + w)))
    check_windows(data, jpeg, segments, edge_windows(h, w, np.random.default_rng(w), 4), channels=1)


@pytest.mark.parametrize("kind", ["420", "422", "444", "411"])
def test_every_small_window_of_a_tiled_file_equals_the_original(kind):
    mw = mcu_width(kind)
    h, w = 19, 6 * mw - 5  # 6 MCUs: 3 tiles of 2, the last one partial
    data = sampled(kind, h, w, seed=5)
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data), -2)
    assert tiles_per_row(segments) == 3
    windows = [[top, left, hh, ww] for top, hh in ((0, 1), (15, 4)) for left in range(w) for ww in (1, 2, 9)
               if top + hh <= h and left + ww <= w]
    check_windows(data, jpeg, segments, windows)


def test_tiled_window_reads_only_the_tiles_it_needs():
    # Corrupt data in a tile outside the window (and outside its upsampling context)
    # is never read: the window decodes exactly; a window over that tile fails.
    data = sampled("420", 32, 128, seed=9)  # 8 MCUs a row
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data), -2)  # 4 tiles of 32 pixels
    assert tiles_per_row(segments) == 4
    broken = jpeg.clone()
    start, end = int(segments[3, 0]), int(segments[4, 0]) - 2  # row 0, last tile
    broken[start:end] = 0xFF  # no valid entropy data, a run of fill bytes
    window = [0, 2, 16, 60]
    expected = ops.decode_jpeg(js.as_tensor(data), window)
    assert torch.equal(ops.decode_jpeg_rows(broken, segments, window), expected)
    with pytest.raises(RuntimeError, match="fastload.decode_jpeg_rows: "):
        ops.decode_jpeg_rows(broken, segments, [0, 100, 16, 20])


def embedded(data: bytes, restart_rows: int = -1) -> bytes:
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data), restart_rows)
    return seg.embed_segments(jpeg.numpy().tobytes(), segments.numpy())


def engine_decode(tmp_path, data: bytes, name: str = "x.jpg"):
    (tmp_path / name).write_bytes(data)
    dataset = fastload.FileList([str(tmp_path / name)], transforms=[T.CenterCrop(16)])
    return next(iter(fastload.DataLoader(dataset, batch_size=1)))[0]


def test_engine_decodes_tiled_prepared_files_and_version_1_files(tmp_path):
    data = js.encode(js.photo(40, 256, 3))
    reference = engine_decode(tmp_path, data, "original.jpg")
    tiled = embedded(data)
    assert tiles_per_row(torch.from_numpy(read_segments(tiled))) == 4
    assert torch.equal(engine_decode(tmp_path, tiled, "tiled.jpg"), reference)
    # A version 1 index (whole rows, (u32 offset, u32 row) pairs), as files prepared
    # before column tiles carry it, still decodes.
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(data), 1)
    pairs = segments.numpy().copy()
    length = 2 + len(seg.IDENT) + 1 + 8 * len(pairs)
    pairs[:, 0] += 2 + length
    raw = jpeg.numpy().tobytes()
    at = 2 + 2 + ((raw[4] << 8) | raw[5])  # after the JFIF APP0
    v1 = raw[:at] + bytes([0xFF, 0xEF, length >> 8, length & 0xFF]) + seg.IDENT + b"\x01" + \
        pairs.astype(">u4").tobytes() + raw[at:]
    assert np.array_equal(read_segments(v1), pairs)
    assert torch.equal(engine_decode(tmp_path, v1, "v1.jpg"), reference)


def _index_field(data: bytes, at: int, value: bytes) -> bytes:
    """data with the bytes at offset `at` of the FLSEG body (after the version) replaced."""
    start = data.index(seg.IDENT) + len(seg.IDENT) + 1 + at
    return data[:start] + value + data[start + len(value):]


@pytest.mark.parametrize("case, match", [
    ("interval", "layout of a restart every 3 MCUs in rows of 16 MCUs for a file whose header says 4 and 16"),
    ("mcus_per_row", "rows of 17 MCUs"),
    ("column", "tile column 2 in entry 1 .1 expected"),
    ("first_offset", "first offset of 4294967295 outside"),
    ("offset", "offset 4294967295 in row 2"),
    ("row", "MCU row 7 in row 5"),
    ("length", "version 2 body of 11 bytes"),
    ("version", "version 9 .this fastload reads versions 1 and 2"),
    ("empty", "an empty one"),
    ("count", "segments for a file of 3 MCU rows with 4 tiles per MCU row"),
], ids=lambda x: x if " " not in x else "")
def test_hostile_segment_index_is_refused_naming_the_field(tmp_path, case, match):
    jpeg, segments = ops.transcode_jpeg(js.as_tensor(js.encode(js.photo(40, 256, 3))), -1)
    jpeg, segments = jpeg.numpy().tobytes(), segments.numpy()
    good = seg.embed_segments(jpeg, segments)  # 3 MCU rows of 16 MCUs, tiles of 4
    ident = good.index(seg.IDENT)
    body = ident + len(seg.IDENT)
    length = (good[ident - 2] << 8) | good[ident - 1]
    bad = {
        "interval": lambda: _index_field(good, 0, b"\x00\x03"),
        "mcus_per_row": lambda: _index_field(good, 2, b"\x00\x11"),
        "column": lambda: _index_field(good, 4 + 8 + 6, b"\x00\x02"),
        "first_offset": lambda: _index_field(good, 4, b"\xff\xff\xff\xff"),
        "offset": lambda: _index_field(good, 4 + 2 * 8, b"\xff\xff\xff\xff"),
        "row": lambda: _index_field(good, 4 + 5 * 8 + 4, b"\x00\x07"),
        # The marker shortened to a body that is no whole number of entries.
        "length": lambda: good[:ident - 2] + bytes([0, 2 + len(seg.IDENT) + 12]) + good[ident:body + 12] +
        good[ident - 2 + length:],
        "version": lambda: good[:body] + b"\x09" + good[body + 1:],
        "empty": lambda: good[:ident - 2] + bytes([0, 2 + len(seg.IDENT)]) + good[ident:body] +
        good[ident - 2 + length:],
        # One entry fewer (the last tile of the last row dropped, the end entry kept).
        "count": lambda: seg.embed_segments(jpeg, np.delete(segments, -2, axis=0)),
    }[case]()
    with pytest.raises(fastload.DecodeError, match=match):
        engine_decode(tmp_path, bad)
