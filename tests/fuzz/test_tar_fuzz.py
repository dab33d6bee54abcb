"""Hostile tar shards through fastload.TarShards: the header walk (ustar, GNU long names
and links, pax records, the tarfile fallback) and member parsing (keys, labels).

Each case is a small valid shard with hostile headers inserted (negative, huge and
non-numeric sizes in every size field, malformed pax records, NUL in paths, odd member
types), bytes flipped in its headers (checksum repaired or not), hostile labels,
duplicate members, or a truncation. The property, for every case:

- construction either succeeds or raises TarShardError (on_error="raise"); with
  on_error="skip" it always succeeds, and what "raise" refused shows in `skipped`;
- a second construction (from the cached index) gives the same samples;
- every sample's bytes read back whole, every label is an int64 class index (>= 0);
- no case hangs (a per-case timer), raises any other exception, or allocates more than
  MEMORY_LIMIT (tracemalloc's peak).

The cases run in one child process (the per-case timer is its own SIGALRM, and a crash
there fails the test instead of the session). Seeded and deterministic: a failure names
its case, and `make_case(random.Random(case_seed(seed, i)))` rebuilds it.
FASTLOAD_FUZZ_CASES (default 150, a few seconds) and FASTLOAD_FUZZ_SEED make a long run:
    FASTLOAD_FUZZ_CASES=100000 python -m pytest tests/fuzz/test_tar_fuzz.py
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from typing import List, Tuple

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES", "150"))
SEED = int(os.environ.get("FASTLOAD_FUZZ_SEED", "20250601"))
CASE_TIMEOUT_S = 10
MEMORY_LIMIT = 64 << 20  # the shards are a few KiB; the walk must never read much more


def case_seed(seed: int, i: int) -> int:
    return seed * 1_000_003 + i


# ---------------------------------------------------------------------------------------
# Case generation (the block builders are the ones test_tar.py uses)


def _builders():
    sys.path.insert(0, TESTS)
    import test_tar

    return test_tar


HOSTILE_SIZES = [b"-1536", b"-1", b"-0", b"9" * 25, b"18446744073709551616", b"abc", b"", b"1e3", b"0x10", b"+5",
                 b"1_0", b" 7", b"7 ", b"\xff", b"4611686018427387904", b"512", b"100000000"]
HOSTILE_LABELS = [b"-1", b"-3", b"99999999999999999999", b"9223372036854775807", b"9223372036854775808", b"[" * 5000,
                  b'{"label": ' * 3000, b"1e5", b"NaN", b"Infinity", b'{"label": true}', b'{"label": "12"}',
                  b'{"cls": -2}', b'{"label": 1.5}', b"\xd9\xa3", b"\xff\xfe", b"", b" ", b"1" * 5000, b"0",
                  b'"7"', b"[1]", b"null", b"1_000", b"+4"]
KINDS = [b"0", b"\0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"L", b"K", b"x", b"X", b"g", b"S", b"V", b"M",
         b"N", b"D", b"A", b"E", b"I", b"Z"]


def _base256(value: int) -> bytes:
    return ((1 << 95) | value).to_bytes(12, "big") if value >= 0 else (value % (1 << 96)).to_bytes(12, "big")


def _size_field(rng: random.Random) -> bytes:
    return rng.choice([
        _base256(1 << 62), _base256((1 << 88) - 1), _base256(-1536), _base256(-1), _base256(rng.randrange(1 << 20)),
        b"77777777777\0", b"0000000012x\0", b"-0000001000\0", b"0o000000017\0", b"           \0", b"\0" * 12,
        b"%011o\0" % rng.randrange(1 << 14), bytes(rng.randrange(256) for _ in range(12)),
    ])


def _pax_payload(rng: random.Random, t) -> bytes:
    choice = rng.randrange(10)
    if choice < 2:  # back onto an earlier header: the walk must not loop
        return t.pax_record(b"size", b"-%d" % (512 * rng.randrange(1, 12)))
    if choice < 4:
        return t.pax_record(b"size", rng.choice(HOSTILE_SIZES))
    if choice == 4:
        return t.pax_record(b"path", rng.choice([b"b\0evil.jpg", b"", b"/", b"\xff\xfe.jpg", b"a.jpg", b"a.cls"]))
    if choice == 5:  # a record whose length is wrong
        body = b" path=b.jpg\n"
        return str(rng.choice([0, 1, 2, 3, len(body) - 1, len(body) + 5, 10**6, -5])).encode() + body
    if choice == 6:  # no newline, no '=', no space, garbage
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        return rng.choice([b"13 path=b.jpg!", b"12 pathb.jpg\n", b"12path=b.jpg\n", garbage])
    if choice == 7:
        return t.pax_record(b"hdrcharset", b"BINARY") + t.pax_record(b"path", b"b.jpg")
    if choice == 8:
        return t.pax_record(b"\xff\xfekey", b"v")
    return b"".join(t.pax_record(b"k%d" % i, b"v" * rng.randrange(50)) for i in range(rng.randrange(1, 30)))


def _shard(rng: random.Random, t) -> Tuple[List[bytes], List[Tuple[bytes, bytes]]]:
    """A valid shard as a list of chunks (each a header run + data), and its members."""
    members = []
    for k in range(rng.randrange(1, 5)):
        key = b"s%d" % k if rng.random() < 0.8 else b"d" * rng.randrange(90, 130) + b"/s%d" % k
        image = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 511, 512, 513, 700])))
        label = (rng.choice([b"cls", b"json", b"txt"]),
                 rng.choice(HOSTILE_LABELS) if rng.random() < 0.15 else str(rng.randrange(10)).encode())
        members += [(key + b".jpg", image), (key + b"." + label[0], label[1])]
    rng.shuffle(members) if rng.random() < 0.2 else None
    chunks = []
    for name, data in members:
        style = rng.randrange(3)
        if style == 0 and len(name) <= 100:
            chunks.append(t.raw_member(name, data))
        elif style == 1 or len(name) > 100 and rng.random() < 0.5:  # GNU long name
            chunks.append(t.raw_member(b"././@LongLink", name + b"\0", kind=b"L") + t.raw_member(name[:100], data))
        else:  # pax path and size
            chunks.append(t.pax_header(t.pax_record(b"path", name) + t.pax_record(b"size", b"%d" % len(data)))
                          + t.raw_member(name[:100], data))
    return chunks, members


def _fix_checksum(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)


def make_case(rng: random.Random) -> Tuple[bytes, List[str]]:
    """(shard bytes, the mutations applied)."""
    t = _builders()
    chunks, members = _shard(rng, t)
    what = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        mutation = rng.randrange(11)
        at = rng.randrange(len(chunks) + 1)
        if mutation == 0:
            what.append("pax")
            chunks.insert(at, t.pax_header(_pax_payload(rng, t)) + t.raw_member(b"p.jpg", b"P"))
        elif mutation == 1:
            kind = rng.choice([b"L", b"K", b"x", b"g", b"X"])
            what.append(f"extended {kind!r} size")
            chunks.insert(at, t.raw_header(b"././@LongLink", kind=kind, size_field=_size_field(rng)) + b"N" * 512)
        elif mutation == 2:
            kind = rng.choice(KINDS)
            what.append(f"member {kind!r} size")
            chunks.insert(at, t.raw_header(b"h.jpg", kind=kind, size_field=_size_field(rng)) + b"H" * 512)
        elif mutation == 3:
            kind = rng.choice(KINDS + [bytes([rng.randrange(256)])])
            what.append(f"type {kind!r}")
            chunks.insert(at, t.raw_member(b"t.jpg", b"T" * rng.randrange(600), kind=kind))
        elif mutation == 4:
            what.append("global pax")  # sends the whole shard to the tarfile walk
            chunks.insert(0, t.raw_member(b"pax_global_header", t.pax_record(b"path", b"g.jpg"), kind=b"g"))
            if rng.random() < 0.5:
                chunks.insert(at + 1, t.raw_header(b"S.jpg", kind=rng.choice([b"S", b"x", b"L"]),
                                                   size_field=_size_field(rng)) + b"S" * 512)
        elif mutation == 5:
            what.append("duplicate")
            chunks.append(chunks[rng.randrange(len(chunks))])
        elif mutation in (6, 7):  # byte flips inside one chunk's header blocks
            if not chunks:
                continue
            i = rng.randrange(len(chunks))
            chunk = bytearray(chunks[i])
            block = rng.randrange(max(1, min(len(chunk) // 512, 3)))
            header = chunk[block * 512:block * 512 + 512]
            for _ in range(rng.choice([1, 2, 4, 16])):
                header[rng.choice([rng.randrange(512), rng.randrange(124, 136), 156, rng.randrange(0, 100)])] = \
                    rng.randrange(256)
            if mutation == 6:
                _fix_checksum(header)
            chunk[block * 512:block * 512 + 512] = header
            chunks[i] = bytes(chunk)
            what.append(f"flips in chunk {i} block {block}" + (" (checksum fixed)" if mutation == 6 else ""))
        elif mutation == 8:
            what.append("many pax")
            chunks.insert(at, t.pax_header(t.pax_record(b"k", b"v")) * rng.choice([2, 50, 1500])
                          + t.raw_member(b"m.jpg", b"M"))
        elif mutation == 9:
            what.append("hostile label")
            name = rng.choice([b"s0.cls", b"s0.json", b"z.json", b"z.cls"])
            chunks.insert(at, t.raw_member(name, rng.choice(HOSTILE_LABELS)))
        else:
            what.append("garbage block")
            chunks.insert(at, bytes(rng.randrange(256) for _ in range(512)))
    data = b"".join(chunks) + (t.END if rng.random() < 0.9 else b"")
    if rng.random() < 0.2:
        what.append("truncated")
        data = data[:rng.randrange(len(data) + 1)]
    return data, what


# ---------------------------------------------------------------------------------------
# The child: runs the cases, prints one JSON line per failure and a final summary.


class _Hang(BaseException):
    """Raised by the per-case timer; a BaseException so that no `except Exception` eats it."""


def _samples(ds):
    return ds.keys.tolist(), ds.targets, ds.index.members.tolist()


def _check_dataset(ds) -> None:
    assert len(ds.keys) == len(ds) == len(ds.targets)
    for i in range(len(ds)):
        data = ds.index.read(i)
        assert len(data) == int(ds.index.sizes[i]) >= 0, (i, len(data), ds.index.sizes[i])
        label = ds.targets[i]
        assert isinstance(label, int) and 0 <= label < (1 << 63), label


def run_case(path: str, cache: str):
    """None when the case holds the property, else a description of what broke."""
    import warnings

    from fastload.datasets.tar import TarShardError, TarShards

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            strict = TarShards(path, cache_dir=cache, on_error="raise", progress=False)
        except TarShardError as e:
            assert e.shard == path and str(e).startswith("fastload.TarShards: "), str(e)
            strict = None
        else:
            _check_dataset(strict)
        lenient = TarShards(path, cache_dir=cache, on_error="skip", progress=False)
        _check_dataset(lenient)
        if strict is None:
            assert lenient.skipped, "refused under 'raise', nothing counted under 'skip'"
        else:
            assert not lenient.skipped and _samples(lenient) == _samples(strict)
        again = TarShards(path, cache_dir=cache, on_error="skip", progress=False)
        assert again.index_status == ["cached"], again.index_status
        assert _samples(again) == _samples(lenient) and again.skipped == lenient.skipped


def child(folder: str, cases: int, seed: int) -> int:
    import signal
    import traceback
    import tracemalloc

    def on_alarm(signum, frame):
        raise _Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    _builders()
    import fastload.datasets.tar  # noqa: F401 - imported before tracing starts: only the cases count

    tracemalloc.start()
    failures = 0
    for i in range(cases):
        s = case_seed(seed, i)
        data, what = make_case(random.Random(s))
        path = os.path.join(folder, f"case-{i}.tar")
        with open(path, "wb") as f:
            f.write(data)
        problem = None
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
        try:
            run_case(path, os.path.join(folder, "cache"))
        except _Hang:
            problem = f"hang: no result within {CASE_TIMEOUT_S} s"
        except BaseException as e:  # noqa: BLE001 - any other exception type breaks the property
            problem = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        peak = tracemalloc.get_traced_memory()[1] - before
        if problem is None and peak > MEMORY_LIMIT:
            problem = f"memory: a peak of {peak} bytes for a {len(data)}-byte shard"
        if problem is not None:
            failures += 1
            print(json.dumps({"case": i, "case_seed": s, "mutations": what, "problem": problem}), flush=True)
        else:
            os.unlink(path)
    print(json.dumps({"done": cases, "failures": failures}), flush=True)
    return 0


@pytest.mark.slow
@pytest.mark.timeout(CASES * CASE_TIMEOUT_S + 120)
def test_hostile_tar_shards_raise_tar_shard_error_or_skip_never_hang_or_escape(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(tmp_path), str(CASES), str(SEED)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=CASES * CASE_TIMEOUT_S + 60)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    failures = [line for line in lines if "problem" in line]
    report = "\n\n".join(f"case {f['case']} (make_case(random.Random({f['case_seed']}))), mutations "
                         f"{f['mutations']}:\n{f['problem']}" for f in failures[:10])
    assert proc.returncode == 0 and lines and lines[-1].get("done") == CASES, (
        f"the fuzz child died (exit {proc.returncode}):\n{proc.stderr[-4000:]}\n{report}")
    assert not failures, f"{len(failures)} of {CASES} cases broke the property:\n{report}"


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
