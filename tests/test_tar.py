"""fastload.TarShards and fastload.write_shards: index, cache, URLs, bad input."""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import pickle
import socket
import tarfile
import threading

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms.functional import center_crop

import fastload
from fastload.errors import SKIP_HINT, ErrorPolicy
from fastload.datasets.tar import TarShardError, TarShards
from fastload.source import tar_index as tarmod
from fastload.source.urls import expand_urls
from fastload.datasets.write import write_shards
from jpeg_samples import noise_jpeg

CLASSES = ("cat", "dog", "eel")


@pytest.fixture(scope="module")
def folder_with_png(tmp_path_factory):
    """An ImageFolder: 3 classes, 12 small JPEGs of different sizes, one PNG (13 images)."""
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for c, name in enumerate(CLASSES):
        os.makedirs(root / name)
        for i in range(3 + c):
            (root / name / f"{i:03d}.jpg").write_bytes(noise_jpeg(rng, 8 + i, 10 + 2 * c))
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)).save(buf, format="PNG")
    (root / "dog" / "zzz.png").write_bytes(buf.getvalue())
    return str(root)


@pytest.fixture
def shards(folder_with_png, tmp_path):
    paths = write_shards(folder_with_png, str(tmp_path / "train-%04d.tar"), maxcount=4)
    return tmp_path, paths


def _files_of(folder_with_png):
    ds = fastload.ImageFolder(folder_with_png)
    return [ds.index.files[i] for i in range(len(ds))], ds.targets


def _tar(path, members):
    """A tar with the given (name, bytes) members, in order."""
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def test_write_then_read_matches_the_folder(folder_with_png, shards):
    tmp, paths = shards
    assert [os.path.basename(p) for p in paths] == [f"train-{i:04d}.tar" for i in range(4)]
    ds = TarShards(str(tmp / "train-{0000..0003}.tar"), cache_dir=str(tmp / "cache"))
    files, targets = _files_of(folder_with_png)
    assert len(ds) == len(files) == 13
    assert ds.targets == targets
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            assert ds.index.read(i) == f.read()  # the member's bytes are the file's, as-is
    assert ds.index.members[7] == "000000007.png" and ds.index.members[0] == "000000000.jpg"
    assert ds.index.source(7) == f"{paths[1]}:000000007.png"
    assert ds.keys[5] == "000000005"


def test_getitem_decodes_members_like_pil(folder_with_png, shards):
    pytest.importorskip("fastload.reference")  # the generic path's op reference
    tmp, paths = shards
    ds = TarShards(paths, cache_dir=str(tmp / "cache"), ops=[fastload.ops.CenterCrop(5)])
    files, targets = _files_of(folder_with_png)
    for i in (0, 7, 12):
        image, label = ds[i]
        want = center_crop(torch.from_numpy(np.asarray(Image.open(files[i]).convert("RGB")).copy()).permute(2, 0, 1), 5)
        assert label == targets[i]
        assert torch.equal(image, want)


def test_expand_urls():
    assert expand_urls("a/s-{00..02}.tar") == ["a/s-00.tar", "a/s-01.tar", "a/s-02.tar"]
    assert expand_urls(["x.tar", "y-{1,3}.tar::z.tar"]) == ["x.tar", "y-1.tar", "y-3.tar", "z.tar"]
    assert expand_urls([]) == []  # a split or rank with no files
    with pytest.raises(ValueError, match="at least one shard"):
        expand_urls("::")


def test_keys_group_by_name_up_to_first_dot_with_dirs(tmp_path):
    path = _tar(tmp_path / "s.tar", [
        ("a/001.jpg", b"A1"), ("a/001.cls", b"3"), ("b/001.jpg", b"B1"), ("b/001.json", b'{"label": 4}'),
        ("b/001.txt", b"caption, not a label"), ("c/x.y.jpg", b"ignored"), ("c/x.y.cls", b"1"),
        ("d/2.jpeg", b"D2"), ("d/2.txt", b" 7\n"), ("e/3.png", b"E3"), ("e/3.json", b"5"), ("notes.md", b"#"),
    ])
    ds = TarShards(path, cache_dir=str(tmp_path / "c"))
    # c/x.y.jpg is key "c/x" with field "y.jpg" (WebDataset's rule): not an image field.
    assert ds.keys.tolist() == ["a/001", "b/001", "d/2", "e/3"]
    assert ds.targets == [3, 4, 7, 5]  # b/001: the json label; its txt is a caption
    assert [ds.index.read(i) for i in range(4)] == [b"A1", b"B1", b"D2", b"E3"]
    assert ds.index.members.tolist() == ["a/001.jpg", "b/001.jpg", "d/2.jpeg", "e/3.png"]
    assert ds.skipped == []


def test_index_cached_beside_the_shard_and_revalidated(shards):
    tmp, paths = shards
    cache = str(tmp / "cache")
    first = TarShards(paths, cache_dir=cache)
    assert first.index_status == ["built"] * 4
    idx = paths[1] + ".idx.json"
    assert os.path.isfile(idx)
    second = TarShards(paths, cache_dir=cache)
    assert second.index_status == ["cached"] * 4
    assert np.array_equal(second.index.offsets, first.index.offsets)

    # Stale: the shard changed (mtime) -> rebuilt, never trusted.
    st = os.stat(paths[1])
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert TarShards(paths, cache_dir=cache).index_status == ["cached", "built", "cached", "cached"]
    assert TarShards(paths, cache_dir=cache).index_status == ["cached"] * 4

    # Corrupt: not JSON, then valid JSON with impossible offsets -> rebuilt.
    with open(idx, "w") as f:
        f.write('{"format": "fastload-tar-index", "vers')
    assert TarShards(paths, cache_dir=cache).index_status[1] == "built"
    record = json.load(open(idx))
    record["offsets"][0] = record["shard_size"] + 1
    json.dump(record, open(idx, "w"))
    ds = TarShards(paths, cache_dir=cache)
    assert ds.index_status[1] == "built"
    assert np.array_equal(ds.index.offsets, first.index.offsets)


def test_index_goes_to_cache_dir_when_shard_folder_is_read_only(shards, monkeypatch):
    tmp, paths = shards
    cache = str(tmp / "cache")
    write = tarmod.write_index
    # Running as root, chmod cannot make a folder read-only: refuse writes outside the cache.
    monkeypatch.setattr(tarmod, "write_index", lambda target, rec: target.startswith(cache) and write(target, rec))
    ds = TarShards(paths, cache_dir=cache)
    assert ds.index_status == ["built"] * 4
    assert not any(os.path.exists(p + ".idx.json") for p in paths)
    assert len(os.listdir(os.path.join(cache, "index"))) == 4
    assert TarShards(paths, cache_dir=cache).index_status == ["cached"] * 4


def test_file_and_memory_urls(shards):
    fsspec = pytest.importorskip("fsspec")
    tmp, paths = shards
    cache = str(tmp / "cache")
    local = TarShards(paths, cache_dir=cache)
    via_file = TarShards([f"file://{p}" for p in paths], cache_dir=cache)
    assert via_file.shards == paths  # read in place, not copied
    fs = fsspec.filesystem("memory")
    for p in paths:
        fs.pipe(f"/fastload-test/{os.path.basename(p)}", open(p, "rb").read())
    try:
        mem = TarShards("memory://fastload-test/train-{0000..0003}.tar", cache_dir=cache, progress=False)
        # fsspec URLs are read by range (tests/test_s3.py), not copied into cache/shards.
        assert mem.shards == mem.urls and mem.remote is not None
        assert mem.targets == local.targets
        assert [mem.index.read(i) for i in range(len(mem))] == [local.index.read(i) for i in range(len(local))]
    finally:
        fs.rm("/fastload-test", recursive=True)
    assert not os.path.exists(os.path.join(cache, "shards"))
    assert mem.index.read(1) == local.index.read(1)  # from the range cache, the object gone


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_http_url_downloaded_once_into_cache(shards):
    tmp, paths = shards
    cache = str(tmp / "cache")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(tmp)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/train-{{0000..0003}}.tar"
    try:
        ds = TarShards(url, cache_dir=cache, progress=False)
        with pytest.raises(TarShardError, match=r"cannot download shard 'http://127\.0\.0\.1:\d+/nope\.tar': HTTP 404"):
            TarShards(url.replace("train-{0000..0003}", "nope"), cache_dir=cache, progress=False)
    finally:
        server.shutdown()
        server.server_close()
    assert [ds.index.read(i) for i in range(len(ds))] == [TarShards(paths, cache_dir=cache).index.read(i) for i in range(len(ds))]
    again = TarShards(url, cache_dir=cache, progress=False)  # server gone: served from the cache
    assert again.shards == ds.shards and again.index_status == ["cached"] * 4
    assert not [f for f in os.listdir(os.path.join(cache, "shards")) if f.startswith(".download")]


def test_unreachable_url_and_missing_path(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TarShardError, match=rf"cannot download shard 'http://127\.0\.0\.1:{port}/a\.tar'") as err:
        TarShards(f"http://127.0.0.1:{port}/a.tar", cache_dir=str(tmp_path), progress=False)
    assert err.value.shard == f"http://127.0.0.1:{port}/a.tar"
    with pytest.raises(TarShardError, match=r"expected a tar shard at '.*missing-1\.tar', got no such file"):
        TarShards(str(tmp_path / "missing-{1..3}.tar"), cache_dir=str(tmp_path))


def test_truncated_tar(shards):
    tmp, paths = shards
    data = open(paths[0], "rb").read()
    ds = TarShards(paths[0], cache_dir=str(tmp / "c"))
    cut_in = ds.index.members[2]  # cut inside the third image's bytes
    cut = int(ds.index.offsets[2]) + 5
    bad = tmp / "bad.tar"
    bad.write_bytes(data[:cut])
    with pytest.raises(TarShardError, match=rf"member '{cut_in}' of shard '.*bad\.tar': truncated") as err:
        TarShards(str(bad), cache_dir=str(tmp / "c"))
    assert err.value.member == cut_in
    skip = TarShards(str(bad), cache_dir=str(tmp / "c"), on_error="skip")
    assert len(skip) == 2 and skip.targets == ds.targets[:2]
    # webdataset writes a sample's members sorted (cls before jpg): sample 2's label is
    # whole, its image cut, so the label is left alone too.
    assert [(s.member, s.reason.split(":")[0]) for s in skip.skipped] == [
        (cut_in, "truncated"), ("000000002.cls", "a label without an image (expected 000000002.jpg/jpeg/png/webp)")]

    # Cut between members (where the headers of sample 1's image start): no end-of-archive marker.
    with tarfile.open(paths[0]) as tf:
        header = tf.getmember("000000001.jpg").offset
    bad.write_bytes(data[:header])
    with pytest.raises(TarShardError, match=r"truncated after member '000000001\.cls': the shard ends at "
                                            "byte .* without the tar end-of-archive marker"):
        TarShards(str(bad), cache_dir=str(tmp / "c2"))
    # Cut inside the headers (webdataset writes a pax header before each member's own).
    bad.write_bytes(data[:header + 100])
    with pytest.raises(TarShardError, match=r"truncated after member '000000001\.cls'"):
        TarShards(str(bad), cache_dir=str(tmp / "c3"))
    bad.write_bytes(data[:header + 512])
    with pytest.raises(TarShardError, match=r"truncated after member '000000001\.cls': an extended header without its member"):
        TarShards(str(bad), cache_dir=str(tmp / "c3"))
    # Garbage where a header should be.
    bad.write_bytes(data[:header] + b"\x01" * 2048)
    with pytest.raises(TarShardError, match=rf"unreadable tar header at byte {header} after member '000000001\.cls'"):
        TarShards(str(bad), cache_dir=str(tmp / "c5"))
    # Not a tar at all.
    bad.write_bytes(b"<html>not a tar</html>" * 40)
    with pytest.raises(TarShardError, match="truncated or unreadable tar at its start"):
        TarShards(str(bad), cache_dir=str(tmp / "c4"))


def test_missing_label_or_image_and_bad_labels(tmp_path):
    path = _tar(tmp_path / "s.tar", [
        ("k1.jpg", b"1"), ("k1.cls", b"0"), ("k2.jpg", b"2"), ("k3.cls", b"5"), ("k4.jpg", b"4"),
        ("k4.cls", b"dog"), ("k5.jpg", b"5"), ("k5.json", b'{"name": "x"}'), ("k6.jpg", b"6"), ("k6.cls", b"1"),
    ])
    with pytest.raises(TarShardError, match=r"member 'k2\.jpg' of shard '.*s\.tar': an image without a label") as err:
        TarShards(path, cache_dir=str(tmp_path))
    assert "on_error='skip'" in str(err.value)
    ds = TarShards(path, cache_dir=str(tmp_path), on_error="skip")
    assert ds.keys.tolist() == ["k1", "k6"] and ds.targets == [0, 1]
    assert [(s.member, s.reason.split(" (")[0]) for s in ds.skipped] == [
        ("k2.jpg", "an image without a label"), ("k3.cls", "a label without an image"),
        ("k4.cls", "expected an integer label, got a non-integer label 'dog'"),
        ("k5.json", 'expected an integer label, got a JSON object without "label" or "cls"'),
    ]
    assert all(s.shard == path for s in ds.skipped)
    stats = fastload.DataLoader(ds, batch_size=2).stats()
    assert stats["skipped_at_index"] == 4 and "(+4 at index time)" in str(stats)
    with pytest.warns(UserWarning, match=r"got none \(1 skipped\): the dataset is empty"):
        empty = TarShards(_tar(tmp_path / "e.tar", [("a.jpg", b"x")]), cache_dir=str(tmp_path), on_error="skip")
    assert len(empty) == 0 and len(empty.skipped) == 1


def test_tar_on_error_goes_through_the_error_policy(tmp_path):
    path = _tar(tmp_path / "s.tar", [("k1.jpg", b"1"), ("k1.cls", b"0"), ("k2.jpg", b"2")])
    with pytest.raises(ValueError, match=r"^fastload\.TarShards: expected on_error='raise' or 'skip', got 'ignore'\.$"):
        TarShards(path, cache_dir=str(tmp_path), on_error="ignore")
    ds = TarShards(path, cache_dir=str(tmp_path), on_error=ErrorPolicy("skip", owner="test"))
    # on_error reads as the string it stands for, whatever was passed.
    assert type(ds.on_error) is str and ds.on_error == "skip" and ds.error_policy.skips
    assert len(ds) == 1 and [s.member for s in ds.skipped] == ["k2.jpg"]
    assert "1 skipped" in repr(ds) and "ErrorPolicy" not in repr(ds)
    assert pickle.loads(pickle.dumps(ds)).on_error == "skip"


def test_write_shards_from_datasets(tmp_path, folder_with_png):
    # uint8 tensors, encoded losslessly as PNG: the pixels come back exactly.
    images = [torch.randint(0, 256, (3, 4 + i, 5), dtype=torch.uint8) for i in range(5)]
    paths = write_shards([(im, torch.tensor(i % 2)) for i, im in enumerate(images)],
                         str(tmp_path / "t-%02d.tar"), maxcount=2, image_format="png")
    assert len(paths) == 3
    ds = TarShards(paths, cache_dir=str(tmp_path))
    assert ds.targets == [0, 1, 0, 1, 0]
    for i, im in enumerate(images):
        pixels = torch.from_numpy(np.asarray(Image.open(io.BytesIO(ds.index.read(i)))).copy()).permute(2, 0, 1)
        assert torch.equal(pixels, im)
    # A torchvision ImageFolder without transform: bytes copied, labels kept.
    torchvision = pytest.importorskip("torchvision")
    tv = torchvision.datasets.ImageFolder(folder_with_png)
    ds2 = TarShards(write_shards(tv, str(tmp_path / "tv-%02d.tar")), cache_dir=str(tmp_path))
    assert ds2.targets == tv.targets
    assert ds2.index.read(3) == open(tv.samples[3][0], "rb").read()
    # A native dataset: bytes copied (also from shards to shards).
    ds3 = TarShards(write_shards(ds2, str(tmp_path / "re-%02d.tar"), maxsize=2000), cache_dir=str(tmp_path))
    assert len(ds3.shards) > 1 and ds3.targets == tv.targets
    assert [ds3.index.read(i) for i in range(len(ds3))] == [ds2.index.read(i) for i in range(len(ds2))]
    with pytest.raises(ValueError, match="printf field"):
        write_shards(folder_with_png, str(tmp_path / "x.tar"))


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_fast_header_walk_equals_tarfile(tmp_path, fmt, shards):
    # Long names (ustar prefix, GNU 'L' records, pax 'path'), non-ASCII names, directories,
    # links, empty members, and sizes at block boundaries.
    deep = "d" * 60 + "/" + "e" * 60  # > 100 characters: needs prefix / long name / pax
    members = [(f"{deep}/k{i}.{ext}", bytes([i]) * n) for i, (ext, n) in
               enumerate([("jpg", 512), ("cls", 1), ("jpg", 0), ("cls", 2), ("png", 1025), ("json", 10)])]
    if fmt != tarfile.USTAR_FORMAT:
        members += [("très/ünïcode-" + "x" * 120 + ".jpg", b"u" * 700), ("très/ünïcode-" + "x" * 120 + ".cls", b"3")]
    path = tmp_path / "f.tar"
    with tarfile.open(path, "w", format=fmt) as tf:
        d = tarfile.TarInfo("adir")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("alink.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "target.jpg"
        tf.addfile(link)
    size = os.path.getsize(path)
    data = path.read_bytes()
    fast = tarmod.walk_headers(lambda offset, n: data[offset:offset + n], size)
    with open(path, "rb") as f:
        slow = tarmod._walk_tarfile(f, size)
    assert fast == slow
    assert fast[0] == [m[0] for m in members] and fast[4] == []
    with tarfile.open(path) as tf:
        for name, data in members:
            m = tf.getmember(name)
            assert open(path, "rb").read()[m.offset_data:m.offset_data + m.size] == data
    tmp, paths = shards  # webdataset's writer (pax headers)
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
            f.seek(0)
            assert tarmod.walk_headers(lambda offset, n: data[offset:offset + n], len(data)) == \
                tarmod._walk_tarfile(f, len(data))


# ---------------------------------------------------------------------------------------
# Hostile and malformed shards, built block by block (tarfile refuses to write most of them).


def raw_header(name: bytes, size: int = 0, kind: bytes = b"0", size_field: bytes = None) -> bytes:
    """One 512-byte ustar header with a valid checksum; size_field replaces the size bytes."""
    h = bytearray(512)
    h[0:len(name[:100])] = name[:100]
    h[100:108], h[108:116], h[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    h[124:136] = size_field if size_field is not None else b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[156:157] = kind
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def raw_member(name: bytes, data: bytes, **kw) -> bytes:
    """A header and its data padded to whole blocks."""
    return raw_header(name, len(data), **kw) + data + b"\0" * (-len(data) % 512)


def pax_record(key: bytes, value: bytes) -> bytes:
    """One well-formed pax record: "<length> key=value\\n", the length counting itself."""
    body = b" " + key + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def pax_header(payload: bytes) -> bytes:
    """An 'x' header carrying the given raw records."""
    return raw_member(b"PaxHeaders/x", payload, kind=b"x")


END = b"\0" * 1024
GOOD = raw_member(b"a.jpg", b"A") + raw_member(b"a.cls", b"1")  # one whole sample


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", [b"-1536", b"-512", b"abc", b"+5", b"1_0", b" 7", b"9" * 30, b""])
def test_pax_negative_or_non_decimal_size_is_refused_not_looped(tmp_path, value):
    path = _write(tmp_path, "s.tar", GOOD + pax_header(pax_record(b"size", value))
                  + raw_member(b"b.jpg", b"B" * 600) + raw_member(b"b.cls", b"2") + END)
    with pytest.raises(TarShardError, match=r"member 'b\.jpg' of shard '.*s\.tar': unreadable tar header at "
                                            r"byte 2048 after member 'a\.cls': a pax size .* \(expected a "
                                            "non-negative decimal number\\)") as err:
        TarShards(path, cache_dir=str(tmp_path / "c"))
    assert err.value.member == "b.jpg"
    ds = TarShards(path, cache_dir=str(tmp_path / "c"), on_error="skip")
    assert ds.keys.tolist() == ["a"] and ds.targets == [1]
    assert [s.member for s in ds.skipped] == ["b.jpg"]


def _base256(value: int) -> bytes:
    """A 12-byte GNU base-256 number field (negative: two's complement with 0xff lead)."""
    return ((1 << 95) | value).to_bytes(12, "big") if value >= 0 else (value % (1 << 96)).to_bytes(12, "big")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", [b"L", b"x", b"K", b"0", b"5"])
@pytest.mark.parametrize("size_field", [_base256(1 << 62), _base256((1 << 88) - 1), _base256(-1536), b"0000000012x\0",
                                        b"-0000001000\0", b"0o000000017\0"], ids=["2^62", "2^88-1", "neg", "nonoctal",
                                                                                   "sign", "prefix"])
def test_hostile_header_size_is_refused_without_allocating(tmp_path, kind, size_field):
    path = _write(tmp_path, "s.tar", GOOD + raw_header(b"././@LongLink" if kind == b"L" else b"b.jpg", kind=kind,
                                                       size_field=size_field) + b"B" * 1024 + END)
    with pytest.raises(TarShardError, match=r"shard '.*s\.tar': (unreadable tar header at byte 2048 after member "
                                            r"'a\.cls'|truncated)"):
        TarShards(path, cache_dir=str(tmp_path / "c"))
    ds = TarShards(path, cache_dir=str(tmp_path / "c"), on_error="skip")
    assert ds.keys.tolist() == ["a"] and len(ds.skipped) == 1


def test_gnu_long_name_of_2_62_bytes_is_a_tar_shard_error(tmp_path):
    path = _write(tmp_path, "s.tar", GOOD + raw_header(b"././@LongLink", kind=b"L", size_field=_base256(1 << 62))
                  + raw_member(b"b.jpg", b"B") + END)
    with pytest.raises(TarShardError, match=r"unreadable tar header at byte 2048 after member 'a\.cls': an "
                                            r"extended header of 4611686018427387904 bytes \(at most 1048576\)"):
        TarShards(path, cache_dir=str(tmp_path / "c"))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("payload, reason", [
    (b"30 path=missing-newline.jpg!", "bad length"),
    (b"99 path=b.jpg\n", "bad length"),
    (b"4 path=b.jpg\n", "bad length"),
    (b"-5 path=b.jpg\n", "without its length"),
    (b"x5 path=b.jpg\n", "without its length"),
    (b"15 path_b.jpg!\n", "without 'key='"),
    (b"12345678901234567890123 a=b\n", "without its length"),
])
def test_malformed_pax_record_is_refused(tmp_path, payload, reason):
    path = _write(tmp_path, "s.tar", GOOD + pax_header(payload) + raw_member(b"b.jpg", b"B") + END)
    with pytest.raises(TarShardError, match=rf"unreadable tar header at byte 2048 after member 'a\.cls': a pax "
                                            rf"record .*{reason}"):
        TarShards(path, cache_dir=str(tmp_path / "c"))
    assert TarShards(path, cache_dir=str(tmp_path / "c"), on_error="skip").keys.tolist() == ["a"]


def test_pax_path_with_nul_is_refused_and_the_walk_goes_on(tmp_path):
    path = _write(tmp_path, "s.tar", GOOD + pax_header(pax_record(b"path", b"b\0evil.jpg"))
                  + raw_member(b"b.jpg", b"B") + raw_member(b"c.jpg", b"C") + raw_member(b"c.cls", b"3") + END)
    with pytest.raises(TarShardError, match=r"member 'b\\x00evil\.jpg' of shard .*: a member name with a NUL byte"):
        TarShards(path, cache_dir=str(tmp_path / "c"))
    ds = TarShards(path, cache_dir=str(tmp_path / "c"), on_error="skip")
    assert ds.keys.tolist() == ["a", "c"] and [s.member for s in ds.skipped] == ["b\0evil.jpg"]


@pytest.mark.parametrize("text, reason", [
    (b"99999999999999999999", r"a label 99999999999999999999 beyond int64"),
    (b"-3", r"a negative label -3 \(class indices are >= 0, as torch's cross-entropy expects\)"),
    (b'{"label": -1}', r"a negative label -1"),
    (b'{"cls": "-7"}', r"a negative label -7"),
    (b"[" * 60_000, r"a JSON label nested too deeply"),  # within MAX_LABEL_BYTES
    (b'{"label": ' * 6_000, r"a JSON label nested too deeply"),
    (b"1" * 5000, r"a non-integer label"),
])
def test_out_of_range_or_pathological_labels_are_tar_shard_errors(tmp_path, text, reason):
    ext = b"json" if text[:1] in b"[{" else b"cls"
    path = _tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1"), ("b.jpg", b"B"), ("b." + ext.decode(), text)])
    with pytest.raises(TarShardError, match=rf"member 'b\.{ext.decode()}' of shard '.*s\.tar': expected an integer "
                                            rf"label, got {reason}") as err:
        TarShards(path, cache_dir=str(tmp_path / "c"))
    assert err.value.shard == path and err.value.member == "b." + ext.decode()
    ds = TarShards(path, cache_dir=str(tmp_path / "c"), on_error="skip")
    assert ds.keys.tolist() == ["a"] and [s.member for s in ds.skipped] == ["b." + ext.decode()]
    big = _tar(tmp_path / "big.tar", [("a.jpg", b"A"), ("a.cls", str((1 << 63) - 1).encode())])
    assert TarShards(big, cache_dir=str(tmp_path / "c")).targets == [(1 << 63) - 1]


def test_duplicate_member_last_copy_wins_and_is_counted(tmp_path):
    path = _tar(tmp_path / "s.tar", [("a.jpg", b"A-old"), ("a.cls", b"1"), ("b.jpg", b"B"), ("b.cls", b"2"),
                                     ("a.cls", b"5"), ("a.jpg", b"A-new"), ("a.cls", b"6")])
    with pytest.warns(UserWarning, match=r"shard '.*s\.tar': 3 member\(s\) superseded by a later member of the "
                                         r"same name \(e\.g\. 'a\.cls'\); the last copy of each is used"):
        ds = TarShards(path, cache_dir=str(tmp_path / "c"))
    assert ds.keys.tolist() == ["a", "b"] and ds.targets == [6, 2]
    assert ds.index.read(0) == b"A-new"
    assert ds.duplicates == [3]
    assert "3 superseded duplicates" in repr(ds)
    with tarfile.open(path) as tf:  # what tar -x leaves on disk
        assert tf.extractfile(tf.getmember("a.cls")).read() == b"6"
    clean = _tar(tmp_path / "t.tar", [("a.jpg", b"A"), ("a.cls", b"1")])
    with pytest.warns(UserWarning, match="superseded"):
        assert TarShards([clean, path], cache_dir=str(tmp_path / "c")).duplicates == [0, 3]


def _rewrite_in_place(path, at: int, new: bytes):
    """Overwrites bytes of the shard and puts its mtime back (as rsync, tar -x, touch -r can)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


def _data_offset(path, member):
    with tarfile.open(path) as tf:
        return tf.getmember(member).offset_data


def test_cached_index_is_rebuilt_when_shard_is_rewritten_with_its_mtime_restored(tmp_path):
    path = _tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1"), ("b.jpg", b"B"), ("b.cls", b"2")])
    cache = str(tmp_path / "c")
    assert TarShards(path, cache_dir=cache).targets == [1, 2]
    assert TarShards(path, cache_dir=cache).index_status == ["cached"]
    _rewrite_in_place(path, _data_offset(path, "a.cls"), b"7")  # ctime changes, size and mtime do not
    ds = TarShards(path, cache_dir=cache)
    assert ds.index_status == ["built"] and ds.targets == [7, 2]

    # Replaced by another file (new inode) of the same size, mtime set back.
    st = os.stat(path)
    other = _tar(tmp_path / "o.tar", [("a.jpg", b"A"), ("a.cls", b"3"), ("b.jpg", b"B"), ("b.cls", b"2")])
    os.replace(other, path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size
    ds = TarShards(path, cache_dir=cache)
    assert ds.index_status == ["built"] and ds.targets == [3, 2]


def test_cached_index_fingerprint_catches_a_rewrite_where_ctime_and_inode_say_nothing(tmp_path, monkeypatch):
    # Some file systems keep no meaningful ctime/inode (FAT: ctime is the creation time).
    monkeypatch.setattr(tarmod, "_identity", lambda st: {"shard_size": st.st_size, "shard_mtime_ns": st.st_mtime_ns})
    path = _tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1"), ("b.jpg", b"B"), ("b.cls", b"2")])
    cache = str(tmp_path / "c")
    assert TarShards(path, cache_dir=cache).targets == [1, 2]
    assert TarShards(path, cache_dir=cache).index_status == ["cached"]
    # a.cls renamed to a.txt in its header (checksum fixed): same size, same mtime.
    data = bytearray(open(path, "rb").read())
    at = data.index(b"a.cls\0")
    data[at:at + 5] = b"a.txt"
    data[at + 148:at + 156] = b" " * 8
    data[at + 148:at + 156] = b"%06o\0 " % sum(data[at:at + 512])
    _rewrite_in_place(path, at, bytes(data[at:at + 512]))
    ds = TarShards(path, cache_dir=cache)
    assert ds.index_status == ["built"] and ds.index.members.tolist() == ["a.jpg", "b.jpg"]


def test_old_index_format_version_is_rebuilt_not_misread(tmp_path):
    path = _tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1")])
    st = os.stat(path)
    old = {"format": "fastload-tar-index", "version": 1, "shard_size": st.st_size, "shard_mtime_ns": st.st_mtime_ns,
           "names": ["a.jpg", "a.cls"], "offsets": [512, 1536], "sizes": [1, 1], "labels_text": {"1": "4"},
           "problems": []}
    json.dump(old, open(path + ".idx.json", "w"))
    ds = TarShards(path, cache_dir=str(tmp_path / "c"))
    assert ds.index_status == ["built"] and ds.targets == [1]
    assert json.load(open(path + ".idx.json"))["version"] == tarmod.INDEX_VERSION > 1


def test_empty_shard_list_or_shards_without_samples_give_an_empty_dataset(tmp_path):
    empty = TarShards([], cache_dir=str(tmp_path / "c"))
    assert len(empty) == 0 and empty.shards == [] and empty.targets == [] and empty.duplicates == []
    no_members = _write(tmp_path, "none.tar", END)
    with pytest.warns(UserWarning, match=r"in 1 shard\(s\), got none \(0 skipped\): the dataset is empty"):
        ds = TarShards(no_members, cache_dir=str(tmp_path / "c"))
    assert len(ds) == 0 and ds.index_status == ["built"]
    with pytest.warns(UserWarning, match="the dataset is empty"):
        assert len(TarShards(no_members, cache_dir=str(tmp_path / "c"))) == 0  # and from its cached index
    for dataset in (empty, ds):
        loader = fastload.DataLoader(dataset, batch_size=4)
        assert len(loader) == 0
        assert list(loader) == []
        assert list(torch.utils.data.DataLoader(dataset, batch_size=4)) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("hostile", [
    pax_header(pax_record(b"size", b"-1536")) + raw_member(b"b.jpg", b"B"),
    raw_header(b"././@LongLink", kind=b"L", size_field=_base256(1 << 62)) + raw_member(b"b.jpg", b"B"),
    raw_header(b"b.jpg", kind=b"S", size_field=_base256(1 << 62)),
    raw_header(b"b.jpg", kind=b"5", size_field=_base256(-1536)),
    pax_header(b"x" * 600) + raw_member(b"b.jpg", b"B"),
], ids=["pax-negative", "gnu-2^62", "sparse-2^62", "negative", "garbage-pax"])
@pytest.mark.filterwarnings("ignore:.*superseded", "ignore:.*the dataset is empty")
def test_tarfile_walk_of_unusual_shards_is_bounded_too(tmp_path, hostile):
    # A global pax path sends the shard to tarfile's walk, which reads whatever size a
    # header announces and seeks wherever it points.
    glob = raw_member(b"pax_global_header", pax_record(b"path", b"g.jpg"), kind=b"g")
    path = _write(tmp_path, "s.tar", glob + GOOD + hostile + GOOD.replace(b"a.", b"c.") + END)
    with pytest.raises(TarShardError, match=r"shard '.*s\.tar': (truncated|unreadable)"):
        TarShards(path, cache_dir=str(tmp_path / "c"))
    ds = TarShards(path, cache_dir=str(tmp_path / "c"), on_error="skip")
    assert len(ds.skipped) >= 1 and all(ds.index.read(i) for i in range(len(ds)))


def _engine_error(dataset):
    """The DecodeError the native loader raises for the dataset's first sample."""
    loader = fastload.DataLoader(dataset, batch_size=1)
    assert loader.path.startswith("native"), loader.path
    with pytest.raises(fastload.DecodeError) as err:
        next(iter(loader))
    return err.value


def test_python_read_says_what_the_engine_read_says(tmp_path, folder_with_png):
    # A missing file: the same OSError subclass as before, with the engine's words.
    missing = str(tmp_path / "gone.jpg")
    ds = fastload.FileList([missing], transforms=[fastload.transforms.CenterCrop(4)])
    with pytest.raises(FileNotFoundError) as err:
        ds.index.read(0)
    assert err.value.errno == 2
    assert str(err.value) == (f"fastload: cannot read sample 0, {missing}: cannot open: No such file or directory. "
                              f"Fix or remove the file, or {SKIP_HINT}.")
    engine = _engine_error(ds)
    assert engine.source == missing and engine.reason == "cannot open: No such file or directory"

    # A shard cut after it was indexed: the member's bytes end early.
    path = write_shards(folder_with_png, str(tmp_path / "s-%02d.tar"))[0]
    ds = TarShards(path, transforms=[fastload.transforms.CenterCrop(4)], cache_dir=str(tmp_path / "c"))
    offset, size = int(ds.index.offsets[0]), int(ds.index.sizes[0])
    with open(path, "r+b") as f:
        f.truncate(offset + 3)
    with pytest.raises(EOFError) as err:
        ds.index.read(0)
    what = f"expected {size} bytes at offset {offset}, file ends after 3 (truncated?)"
    assert str(err.value) == f"fastload: cannot read sample 0, {ds.index.source(0)}: {what}. Fix or remove the file, or {SKIP_HINT}."
    engine = _engine_error(ds)
    assert engine.source == ds.index.source(0) and engine.reason == what


def test_transforms_accept_a_torchvision_compose_or_one_transform(folder_with_png, shards):
    import torchvision.transforms as v1
    from torchvision.transforms import v2

    tmp, paths = shards
    cache = str(tmp / "cache")
    listed = TarShards(paths, transforms=[v2.RandomResizedCrop(6), v2.RandomHorizontalFlip(), v2.ToImage(),
                                          v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.2] * 3)],
                       cache_dir=cache)
    composed = TarShards(paths, transforms=v2.Compose([
        v2.RandomResizedCrop(6), v2.Compose([v2.RandomHorizontalFlip(), v2.ToImage()]),  # nested: opened too
        v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.2] * 3)]), cache_dir=cache)
    assert composed.transforms == listed.transforms and composed.tail == ()
    image, label = composed[3]
    assert torch.equal(image, listed[3][0]) and image.shape == (3, 6, 6) and label == listed[3][1]
    loader = fastload.DataLoader(composed, batch_size=5)
    assert loader.path.startswith("native"), loader.path
    assert next(iter(loader))[0].shape == (5, 3, 6, 6)

    v1_composed = TarShards(paths, transforms=v1.Compose([v1.CenterCrop(4), v1.ToTensor()]), cache_dir=cache)
    assert v1_composed.transforms == TarShards(paths, transforms=[v1.CenterCrop(4), v1.ToTensor()],
                                               cache_dir=cache).transforms
    one = [fastload.transforms.CenterCrop(4)]
    assert TarShards(paths, transforms=v2.CenterCrop(4), cache_dir=cache).transforms == one
    assert TarShards(paths, transforms=fastload.transforms.CenterCrop(4), cache_dir=cache).transforms == one
    assert TarShards(paths, ops=v2.Compose([v2.CenterCrop(4)]), cache_dir=cache).transforms == one
    # The other native datasets take them alike (the shared NativeDataset).
    assert fastload.ImageFolder(folder_with_png, transforms=v2.Compose([v2.CenterCrop(4)])).transforms == one
    files, targets = _files_of(folder_with_png)
    assert fastload.FileList(files, targets, v1.Compose([v1.CenterCrop(4)])).transforms == one


def test_classes_and_class_to_idx_from_integer_labels(folder_with_png, shards, tmp_path):
    tmp, paths = shards
    ds = TarShards(paths, cache_dir=str(tmp / "cache"))
    assert ds.classes == [0, 1, 2] and len(ds.classes) == len(CLASSES)
    assert ds.class_to_idx == {0: 0, 1: 1, 2: 2}
    assert len(ds.classes) == int(ds.index.labels.max()) + 1
    # Labels are class indices: a class without a sample here is still one of the classes.
    sparse = TarShards(_tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"3"), ("b.jpg", b"B"), ("b.cls", b"1")]),
                       cache_dir=str(tmp_path / "c"))
    assert sparse.classes == [0, 1, 2, 3] and sparse.class_to_idx[3] == 3
    assert all(sparse.classes[t] == t for t in sparse.targets)
    empty = TarShards([], cache_dir=str(tmp_path / "c"))
    assert empty.classes == [] and empty.class_to_idx == {}
    assert pickle.loads(pickle.dumps(ds)).classes == [0, 1, 2]


def test_keys_slice_index_and_iterate_like_a_list_of_str(shards):
    tmp, paths = shards
    ds = TarShards(paths, cache_dir=str(tmp / "cache"))
    want = [f"{i:09d}" for i in range(13)]
    assert ds.keys[:3] == want[:3] and all(type(k) is str for k in ds.keys[:3])
    assert ds.keys[-1] == want[-1] and ds.keys[np.int64(2)] == want[2]
    assert ds.keys[::-4] == want[::-4] and ds.keys[20:] == []
    assert len(ds.keys) == 13 and list(ds.keys) == want and ds.keys.tolist() == want
    assert want[5] in ds.keys and "nope" not in ds.keys and ds.keys.index(want[7]) == 7
    assert ds.keys == want and list(reversed(ds.keys)) == want[::-1]
    with pytest.raises(IndexError):
        ds.keys[13]
    with pytest.raises(IndexError):
        ds.keys[-14]
    with pytest.raises(TypeError):
        ds.keys["0"]
    assert pickle.loads(pickle.dumps(ds.keys)) == want


def test_index_cache_root_is_fastload_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "fl"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tarmod.default_cache_dir() == str(tmp_path / "fl")
    assert TarShards([]).cache_dir == str(tmp_path / "fl")
    monkeypatch.delenv("FASTLOAD_CACHE")
    assert tarmod.default_cache_dir() == os.path.join(str(tmp_path / "xdg"), "fastload")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tarmod.default_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "fastload")


def test_read_only_shard_folder_indexes_into_the_cache_without_collisions(tmp_path, monkeypatch):
    """Two read-only folders holding shards of the same name: each gets its own index in
    fastload's cache, none is written beside the shards, and both are reused."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("FASTLOAD_CACHE", str(cache))
    folders = [tmp_path / "a", tmp_path / "b"]
    for label, folder_with_png in enumerate(folders):
        folder_with_png.mkdir()
        _tar(folder_with_png / "train-0000.tar", [("x.jpg", b"X" * (label + 1)), ("x.cls", str(label + 5).encode())])
    for folder_with_png in folders:
        os.chmod(folder_with_png, 0o555)
    try:
        if any(os.access(folder_with_png, os.W_OK) for folder_with_png in folders):
            pytest.skip("chmod does not make a folder read-only here (running as root)")
        shards = [str(folder_with_png / "train-0000.tar") for folder_with_png in folders]
        first = [TarShards(shard) for shard in shards]
        assert [ds.index_status for ds in first] == [["built"], ["built"]]
        assert [ds.targets for ds in first] == [[5], [6]]
        assert not any(os.path.exists(shard + ".idx.json") for shard in shards)
        assert len(os.listdir(cache / "index")) == 2
        again = [TarShards(shard) for shard in shards]
        assert [ds.index_status for ds in again] == [["cached"], ["cached"]]
        assert [ds.targets for ds in again] == [[5], [6]] and [ds.index.read(0) for ds in again] == [b"X", b"XX"]
    finally:
        for folder_with_png in folders:
            os.chmod(folder_with_png, 0o755)
