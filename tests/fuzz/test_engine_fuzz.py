"""Seeded, bounded fuzz of the C++ batch engine, driven the way the loader drives it
(fastload.native.NativeRunner): random sample indexes of good, truncated and mutated
JPEG files (one file per sample, or slices of one shard file), extreme plans
(RandomResizedCrop scales and ratios, tiny and large outputs, every dtype, one or three
channels, channels_last, exact or DCT-scaled), random index arrays with duplicates,
several batches in flight, on_error "raise" and "skip".

Properties:
  * nothing crashes or hangs (under `make sanitize`, nothing reads or writes out of
    bounds or hits undefined behaviour);
  * each sample's outcome is a pure function of (plan, epoch, index): in any batch, with
    any thread count and memory format, a sample gives bit for bit what it gives alone,
    or fails as it fails alone;
  * "raise" raises fastload.DecodeError naming the batch's first failing sample and its
    file; "skip" fills the slot with the next readable sample and counts the failures;
  * an unmodified file under an exact plan equals the reference pipeline (PIL decode +
    fastload.reference), within the kernel tests' tolerances;
  * decode_on="cpu+gpu" (decoded windows packed for the batched kernel, run here on the
    CPU) gives the CPU mode's batches;
  * invalid indices and invalid engine arguments raise a clean error.

Case i is rebuilt by `make_case(SEED, i, root)` (root: a folder for its files). FASTLOAD_FUZZ_CASES sets the number of cases
(default: about 10 s on one core with the normal build).
"""

from __future__ import annotations

import io
import os
import random
import re
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jpeg_samples as js  # noqa: E402

from fastload import _ext, ops  # noqa: E402
from fastload.augment.pipeline import apply_plan_reference  # noqa: E402
from fastload.augment.plan import Plan, build_plan  # noqa: E402
from fastload.errors import DecodeError  # noqa: E402
from fastload.native import NOT_JPEG, OK, READ_ERROR, NativeRunner  # noqa: E402
from fastload.source.index import FlatStrings, SampleIndex  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

DEFAULT_CASES = 150
CASES = int(os.environ.get("FASTLOAD_FUZZ_CASES") or DEFAULT_CASES)
SEED = 20260301
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# Kernel vs reference tolerances (as in tests/ops/test_crop_resize_flip_normalize.py):
# float32 1e-4 of the value range; float16 / bfloat16 one unit in the last place;
# uint8 one level (values within float noise of k + 0.5 round either way).
FLOAT32_RANGE_TOL = 1e-4
HALF_RTOL, BFLOAT16_RTOL = 2.0**-10, 2.0**-7
UINT8_MAX_DIFF = 1


def _good_files() -> List[bytes]:
    """Unmodified JPEGs: odd sizes, 1-pixel rows and columns, every subsampling,
    progressive, restart markers, gray, CMYK, and one large enough for DCT scaling."""
    names = ["rgb420_1x1", "rgb420_1x37", "rgb422_29x1", "rgb444_2x3", "rgb420_17x23", "rgb422_31x47",
             "rgb444_97x131", "rgb420_120x161", "gray_17x23", "cmyk_31x47", "progressive420_97x131",
             "restart3_97x131", "gray_progressive_40x56"]
    files = [js.sample(name).data for name in names]
    files.append(js.encode(js.photo(360, 480, seed=3), subsampling="4:2:0"))
    return files


GOOD = _good_files()


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(js.photo(21, 34, seed=4)).save(buffer, "PNG")
    return buffer.getvalue()


PNG = _png()  # the engine decodes it with libpng (PIL where the build has none) and augments it


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A damaged copy: bit flips, a cut, inserted or overwritten bytes, a broken
    marker length."""
    b = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0:
        for _ in range(rng.choice([1, 2, 8])):
            b[rng.randrange(2, len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del b[rng.randrange(2, len(b)):]
    elif kind == 2:
        at = rng.randrange(2, len(b))
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif kind == 3:
        at, n = rng.randrange(2, len(b)), rng.randint(1, 48)
        b[at:at + n] = bytes([rng.choice([0, 0xFF, rng.randrange(256)])]) * n
    else:
        markers = [i for i in range(2, len(b) - 3) if b[i] == 0xFF and b[i + 1] not in (0, 0xFF)]
        if markers:
            at = rng.choice(markers)
            b[at + 2:at + 4] = rng.choice([b"\x00\x00", b"\x00\x01", b"\xff\xff", bytes([rng.randrange(256)] * 2)])
    return bytes(b)


@dataclass
class Sample:
    data: bytes
    kind: str  # "good", "png", "truncated", "mutated", "empty", "text", "past_eof"
    base: Optional[int] = None  # index into GOOD for good files


def random_samples(rng: random.Random) -> List[Sample]:
    samples = []
    for _ in range(rng.randint(1, 8)):
        roll = rng.random()
        base = rng.randrange(len(GOOD))
        if roll < 0.55:
            samples.append(Sample(GOOD[base], "good", base))
        elif roll < 0.65:
            data = GOOD[base]
            samples.append(Sample(data[:rng.randrange(0, len(data))], "truncated"))
        elif roll < 0.85:
            samples.append(Sample(mutate(GOOD[base], rng), "mutated"))
        elif roll < 0.90:
            samples.append(Sample(PNG, "png"))
        elif roll < 0.95:
            samples.append(Sample(b"", "empty"))
        else:
            samples.append(Sample(b"not an image\n" * rng.randint(1, 20), "text"))
    if not any(s.kind == "good" for s in samples):  # "skip" needs a readable sample
        samples.insert(rng.randrange(len(samples) + 1), Sample(GOOD[0], "good", 0))
    return samples


def write_index(root: str, samples: List[Sample], rng: random.Random) -> SampleIndex:
    """One file per sample, or all samples as slices of one shard file (then a sample
    may also claim bytes past the shard's end)."""
    os.makedirs(root, exist_ok=True)
    labels = np.arange(len(samples), dtype=np.int64) * 7 + 3
    if rng.random() < 0.6:
        paths = []
        for i, sample in enumerate(samples):
            paths.append(os.path.join(root, f"{i}_{sample.kind}.jpg"))
            with open(paths[-1], "wb") as f:
                f.write(sample.data)
        return SampleIndex.from_files(paths, labels)
    shard = os.path.join(root, "shard.bin")
    offsets, sizes, position = [], [], 0
    with open(shard, "wb") as f:
        for sample in samples:
            f.write(b"\0" * rng.randrange(3))  # unaligned starts
            position = f.tell()
            f.write(sample.data)
            offsets.append(position)
            sizes.append(len(sample.data))
    if rng.random() < 0.3:  # one more sample whose bytes run past the end of the shard
        samples.append(Sample(b"", "past_eof"))
        offsets.append(max(0, os.path.getsize(shard) - rng.randint(0, 40)))
        sizes.append(rng.randint(41, 4096))
        labels = np.append(labels, 1000)
    n = len(samples)
    return SampleIndex(files=FlatStrings.from_list([shard]), file_ids=np.zeros(n, dtype=np.int64),
                       offsets=np.asarray(offsets, dtype=np.int64), sizes=np.asarray(sizes, dtype=np.int64),
                       labels=labels)


SIZES = [1, 1, 2, 3, 7, 16, 23, 32, 57]


def random_plan(rng: random.Random) -> Plan:
    def size():
        if rng.random() < 0.05:
            return (rng.choice([160, 224, 300]), rng.choice([160, 224, 300]))
        return (rng.choice(SIZES), rng.choice(SIZES))

    specs = []
    geometry = rng.randrange(4)
    if geometry == 0:
        specs.append(ops.RandomResizedCrop(
            size(),
            scale=rng.choice([(0.08, 1.0), (1.0, 1.0), (0.0, 0.0), (1e-4, 1e-3), (0.5, 4.0), (0.999, 1.0)]),
            ratio=rng.choice([(3 / 4, 4 / 3), (1.0, 1.0), (0.01, 100.0), (1e-3, 1e-3), (50.0, 100.0)])))
    elif geometry == 1:
        resize = rng.choice([1, 2, 5, 16, 48, 200, 1000])
        specs += [ops.Resize(resize, max_size=rng.choice([None, None, resize + 1, resize * 3])), ops.CenterCrop(size())]
    elif geometry == 2:
        specs.append(ops.Resize(size()))
    else:
        specs.append(ops.CenterCrop(size()))
    if rng.random() < 0.6:
        specs.append(ops.RandomHorizontalFlip(rng.choice([0.5, 1.0, 0.0])))
    dtype = rng.choice([torch.uint8, torch.float32, torch.float16, torch.bfloat16])
    if dtype != torch.uint8:
        specs.append(ops.ToDtype(dtype, scale=rng.random() < 0.8))
    channels = rng.choice([3, 3, 1])
    if dtype != torch.uint8 and rng.random() < 0.5:
        specs.append(ops.Normalize(MEAN[:1] if channels == 1 else MEAN, STD[:1] if channels == 1 else STD))
    max_pixels = ops.DEFAULT_MAX_PIXELS if rng.random() < 0.9 else rng.choice([1, 600, 4000])
    return build_plan(specs, channels=channels, dct_scaling=rng.random() < 0.5, max_pixels=max_pixels,
                      seed=rng.randrange(1 << 31))


def random_batch(rng: random.Random, n: int) -> List[int]:
    length = rng.choice([0, 1, 1, 2, 3, 5, 8, 12])
    batch = [rng.randrange(n) for _ in range(length)]
    if batch and rng.random() < 0.3:  # duplicates, next to each other or not
        batch[rng.randrange(length)] = batch[rng.randrange(length)]
    return batch


@dataclass
class Case:
    samples: List[Sample]
    plan: Plan
    threads: int
    channels_last: bool
    on_error: str
    epoch: int
    batches: List[List[int]]
    windows: bool  # also run the batches in decode_on="cpu+gpu" (device: the CPU)
    rng: random.Random


def make_case(seed: int, i: int, root: str):
    rng = random.Random(seed * 1_000_003 + i)
    samples = random_samples(rng)
    index = write_index(os.path.join(root, f"case{i}"), samples, rng)
    plan = random_plan(rng)
    batches = [random_batch(rng, len(samples)) for _ in range(rng.randint(1, 3))]
    case = Case(samples, plan, threads=rng.randint(1, 3), channels_last=rng.random() < 0.4,
                on_error=rng.choice(["raise", "skip"]), epoch=rng.randrange(5), batches=batches,
                windows=rng.random() < 0.3, rng=rng)
    return case, index


Outcome = Union[torch.Tensor, DecodeError]


class Solo:
    """Each sample's outcome alone: a 1-sample batch on its own single-thread runner."""

    def __init__(self, index: SampleIndex, plan: Plan, epoch: int):
        self.runner = NativeRunner(index, plan, num_threads=1, on_error="raise")
        self.epoch = epoch
        self.outcomes: Dict[int, Outcome] = {}

    def __call__(self, sample: int) -> Outcome:
        if sample not in self.outcomes:
            try:
                images, _ = self.runner.result(self.runner.submit([sample], self.epoch))
                self.outcomes[sample] = images[0].clone()
            except DecodeError as error:
                self.outcomes[sample] = error
        return self.outcomes[sample]

    def close(self):
        self.runner.close()


def check_reference(case: Case, sample: int, image: torch.Tensor, where: str):
    """An unmodified file under an exact plan: the reference pipeline's values."""
    plan, s = case.plan, case.samples[sample]
    decoded = js.pil_decode(s.data, "RGB" if plan.channels == 3 else "L")
    decoded = torch.from_numpy(np.array(decoded))  # a writable copy
    if decoded.dim() == 2:
        decoded = decoded.unsqueeze(-1)
    expected = apply_plan_reference(plan, decoded, epoch=case.epoch, index=sample)
    assert_close_as_kernels(image, expected, f"{where}, vs the reference")


def assert_close_as_kernels(got: torch.Tensor, want: torch.Tensor, where: str):
    """Equal up to the arithmetic of two implementations of the same resample."""
    assert got.shape == want.shape and got.dtype == want.dtype, (where, got.shape, want.shape, got.dtype, want.dtype)
    if got.numel() == 0:
        return
    if got.dtype == torch.uint8:
        diff = (got.int() - want.int()).abs().max().item()
        assert diff <= UINT8_MAX_DIFF, f"{where}: uint8 off by {diff}"
    elif got.dtype == torch.float32:
        span = max(1.0, (want.max() - want.min()).item())
        torch.testing.assert_close(got, want, atol=FLOAT32_RANGE_TOL * span, rtol=0, msg=where)
    else:
        rtol = HALF_RTOL if got.dtype == torch.float16 else BFLOAT16_RTOL
        torch.testing.assert_close(got.double(), want.double(), atol=1e-3, rtol=rtol, msg=where)


def check_case(case: Case, index: SampleIndex, where: str) -> Dict[str, int]:
    plan, n = case.plan, len(index)
    solo = Solo(index, plan, case.epoch)
    memory_format = torch.channels_last if case.channels_last else torch.contiguous_format
    runner = NativeRunner(index, plan, num_threads=case.threads, memory_format=memory_format, on_error=case.on_error)
    counts = {"ok": 0, "failed": 0, "raised": 0, "invalid": 0}
    try:
        # Bad indices first: a clean error, and the runner still works afterwards.
        if case.rng.random() < 0.2:
            bad = case.rng.choice([n, n + 5, -1, -(1 << 40), 1 << 40])
            with pytest.raises((ValueError, RuntimeError), match=r"expected sample indices in \[0, "):
                runner.submit([0, bad], case.epoch)
            counts["invalid"] += 1
        # Every batch in flight at once, collected in a random order.
        tickets = [(batch, runner.submit(batch, case.epoch)) for batch in case.batches]
        case.rng.shuffle(tickets)
        results = []  # (batch, [images, labels] or the DecodeError)
        counted = set()  # a bad sample counts once per epoch, in whichever batch meets it first
        for batch, ticket in tickets:
            at = f"{where}, batch {batch}"
            skipped_before = runner.stats()["skipped"]
            try:
                images, labels = runner.result(ticket)
                results.append((batch, (images, labels)))
            except DecodeError as error:
                results.append((batch, error))
                if case.on_error == "skip":  # only when no sample of the index is readable
                    assert all(isinstance(solo(s), DecodeError) for s in range(n)), f"{at}: unexpected {error}"
                    assert "consecutive samples failed" in str(error), (at, str(error))
                    counts["raised"] += 1
                    continue
                failing = [s for s in batch if isinstance(solo(s), DecodeError)]
                assert failing, f"{at}: unexpected {error}"
                assert error.index == failing[0], f"{at}: raised for sample {error.index}, expected {failing[0]}"
                assert error.source == index.source(failing[0]), (at, error.source)
                assert str(error).startswith("fastload: cannot decode sample"), (at, str(error))
                counts["raised"] += 1
                continue
            assert images.shape == (len(batch), plan.channels, *plan.out_size), (at, images.shape)
            assert images.dtype == plan.dtype, (at, images.dtype)
            if case.channels_last and len(batch):
                assert images.is_contiguous(memory_format=torch.channels_last), at
            failed = set()
            for slot, sample in enumerate(batch):
                chosen = sample
                while isinstance(solo(chosen), DecodeError):
                    assert case.on_error == "skip", f"{at}: sample {chosen} failed alone, not in the batch"
                    failed.add(chosen)
                    chosen = (chosen + 1) % n
                expected = solo(chosen)
                assert int(labels[slot]) == int(index.labels[chosen]), (at, slot, int(labels[slot]), chosen)
                assert torch.equal(images[slot], expected), (
                    f"{at}: slot {slot} (sample {chosen}) differs from the sample decoded alone")
                counts["ok"] += 1
            counts["failed"] += len(failed)
            assert runner.stats()["skipped"] - skipped_before == len(failed - counted), at
            counted |= failed
        if case.windows:
            check_windows_mode(case, index, results, where)
        # Every sample the batches met, alone: valid, and like the reference where exact.
        for sample, outcome in sorted(solo.outcomes.items()):
            at = f"{where}, sample {sample} ({case.samples[sample].kind})"
            if isinstance(outcome, DecodeError):
                # A good file fails only over a lowered pixel limit, or where the plan's
                # geometry leaves no pixel to sample (torchvision fails on those too).
                no_pixels = re.search(r"expected a (crop of at least 1x1 pixels|resized image)", str(outcome))
                assert case.samples[sample].kind != "good" or plan.max_pixels < ops.DEFAULT_MAX_PIXELS \
                    or no_pixels, f"{at}: an unmodified file failed: {outcome}"
                assert outcome.index == sample and outcome.source == index.source(sample), at
                continue
            if outcome.dtype.is_floating_point:
                assert torch.isfinite(outcome).all(), f"{at}: non-finite values"
            if case.samples[sample].kind in ("good", "png") and not plan.dct_scaling and plan.channels == 3:
                check_reference(case, sample, outcome, at)
    finally:
        runner.close()
        solo.close()
    return counts


def check_windows_mode(case: Case, index: SampleIndex, results, where: str):
    """decode_on="cpu+gpu": the engine keeps each sample's decoded window and packs them;
    the batched kernel (here on the CPU) gives what the per-sample path gave."""
    runner = NativeRunner(index, case.plan, num_threads=case.threads, on_error=case.on_error,
                          decode_on="cpu+gpu", device="cpu")
    try:
        for batch, expected in results:
            at = f"{where}, batch {batch}, cpu+gpu mode"
            try:
                images, labels = runner.result(runner.submit(batch, case.epoch))
            except DecodeError as error:
                assert isinstance(expected, DecodeError), f"{at}: unexpected {error}"
                assert error.index == expected.index, (at, error.index, expected.index)
                continue
            assert not isinstance(expected, DecodeError), f"{at}: no error, the CPU mode raised {expected}"
            assert torch.equal(labels, expected[1]), at
            assert_close_as_kernels(images, expected[0], at)
    finally:
        runner.close()


def test_engine_batches_match_samples_alone_and_the_reference(tmp_path, fuzz_trace):
    totals = {"ok": 0, "failed": 0, "raised": 0, "invalid": 0}
    for i in range(CASES):
        where = f"case {i} (make_case({SEED}, {i}, root))"
        fuzz_trace(where)
        case, index = make_case(SEED, i, str(tmp_path))
        try:
            counts = check_case(case, index, where)
        except AssertionError as failure:
            raise AssertionError(f"{where}: plan {case.plan!r}, threads {case.threads}, "
                                 f"channels_last {case.channels_last}, on_error {case.on_error}: {failure}") from failure
        for key, value in counts.items():
            totals[key] += value
    # Each outcome must occur, else the generator is not exercising anything.
    if CASES >= 50:
        assert all(value > 0 for value in totals.values()), totals


# ---- the engine's own arguments ----------------------------------------------------


def _config(**changes):
    plan = build_plan([ops.CenterCrop(8)])
    for name, value in changes.items():
        setattr(plan, name, _ext.require_ops().Geometry(value) if name == "geometry" else value)
    return plan


BAD_CONFIGS = [
    dict(channels=2), dict(channels=0), dict(channels=4, mean=[0.0] * 4, std=[1.0] * 4),
    dict(mean=[0.0]), dict(std=[1.0, 1.0]), dict(out_height=0), dict(out_width=-3),
    dict(geometry=0, scale_min=float("nan")), dict(geometry=0, scale_max=float("inf")),
    dict(geometry=0, scale_min=-0.1), dict(geometry=0, scale_min=0.9, scale_max=0.1),
    dict(geometry=0, ratio_min=0.0), dict(geometry=0, ratio_min=-1.0), dict(geometry=0, ratio_min=2.0, ratio_max=1.0),
    dict(geometry=0, ratio_max=float("nan")), dict(resize_height=5, resize_width=-1), dict(resize_height=-1, resize_width=5),
]


@pytest.mark.parametrize("changes", BAD_CONFIGS, ids=[str(c) for c in BAD_CONFIGS])
def test_engine_refuses_invalid_plans(changes):
    engine = _ext.require_ops().BatchEngine(1)
    try:
        with pytest.raises((ValueError, RuntimeError), match=r"^fastload\.BatchEngine\.set_plan: expected"):
            engine.set_plan(_config(**changes))
    finally:
        engine.close()


@pytest.fixture(scope="module")
def one_file_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "a.jpg"
    path.write_bytes(js.sample("rgb420_97x131").data)
    return SampleIndex.from_files([str(path)], [0])


def _engine(index, config):
    engine = _ext.require_ops().BatchEngine(2)
    engine.set_index(torch.from_numpy(index.files.data), torch.from_numpy(index.files.offsets),
                     torch.from_numpy(index.file_ids), torch.from_numpy(index.offsets), torch.from_numpy(index.sizes))
    engine.set_plan(config)
    return engine


def test_engine_writes_outputs_of_any_strides_like_dense_ones(one_file_index):
    config = _config(out_height=9, out_width=13, value_scale=1.0 / 255, mean=list(MEAN), std=list(STD))
    engine = _engine(one_file_index, config)
    try:
        samples = torch.tensor([0, 0, 0], dtype=torch.int64)
        dense = torch.empty(3, 3, 9, 13)
        status, _ = engine.wait(engine.submit(samples, dense, 0))
        assert status.tolist() == [0, 0, 0]
        views = [
            torch.empty(3, 9, 13, 3).permute(0, 3, 1, 2),           # channels_last
            torch.empty(13, 9, 3, 3).permute(3, 2, 1, 0),           # every axis reversed
            torch.empty(6, 3, 18, 26)[::2, :, ::2, ::2],            # gaps everywhere
            torch.empty(3, 3, 9, 13 + 7)[..., 7:],                  # an offset view
        ]
        for out in views:
            out.fill_(float("nan"))
            status, _ = engine.wait(engine.submit(samples, out, 0))
            assert status.tolist() == [0, 0, 0]
            assert torch.equal(out, dense), out.stride()
    finally:
        engine.close()


def test_engine_refuses_bad_outputs_and_arguments(one_file_index):
    engine = _engine(one_file_index, _config(out_height=4, out_width=5))
    samples = torch.tensor([0, 0], dtype=torch.int64)
    error = (ValueError, RuntimeError)
    try:
        for out in [torch.empty(2, 3, 4), torch.empty(3, 3, 4, 5, dtype=torch.uint8),
                    torch.empty(2, 1, 4, 5, dtype=torch.uint8), torch.empty(2, 3, 5, 4, dtype=torch.uint8),
                    torch.empty(2, 3, 4, 5, dtype=torch.float64), torch.empty(2, 3, 4, 5, dtype=torch.int32),
                    torch.empty(1, 3, 4, 5, dtype=torch.uint8).expand(2, 3, 4, 5),
                    torch.empty(3, 4, 5, dtype=torch.uint8).unsqueeze(0).expand(2, 3, 4, 5)]:
            with pytest.raises(error, match=r"^fastload\.BatchEngine\.submit: expected"):
                engine.submit(samples, out, 0)
        out = torch.empty(2, 3, 4, 5, dtype=torch.uint8)
        for bad in [torch.tensor([0, 1]), torch.tensor([-1, 0]), torch.tensor([0.0, 0.0]),
                    torch.zeros(2, 1, dtype=torch.int64)]:
            with pytest.raises(error, match=r"^fastload\.BatchEngine\.submit: expected"):
                engine.submit(bad, out, 0)
        for predecoded in [{2: torch.zeros(4, 4, 3, dtype=torch.uint8)}, {-1: torch.zeros(4, 4, 3, dtype=torch.uint8)},
                           {0: torch.zeros(4, 4, 1, dtype=torch.uint8)}, {0: torch.zeros(0, 4, 3, dtype=torch.uint8)},
                           {0: torch.zeros(4, 4, 3)}, {0: torch.zeros(4, 3, dtype=torch.uint8)}]:
            with pytest.raises(error, match=r"^fastload\.BatchEngine\.submit: expected predecoded"):
                engine.submit(samples, out, 0, predecoded)
        # A predecoded image of any strides is taken as it is.
        image = torch.from_numpy(js.photo(11, 17, seed=1)).permute(1, 0, 2).contiguous().permute(1, 0, 2)
        status, _ = engine.wait(engine.submit(samples, out, 0, {1: image}))
        assert status.tolist() == [0, 0]
        with pytest.raises(error, match=r"unknown or already collected ticket"):
            engine.wait(12345)
    finally:
        engine.close()
    with pytest.raises(error, match=r"the engine is closed"):
        engine.submit(samples, out, 0)


def test_engine_refuses_corrupt_indexes():
    engine = _ext.require_ops().BatchEngine(1)
    path = torch.tensor(list(b"/nonexistent"), dtype=torch.uint8)
    long = lambda *values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
    bad = [
        (path, long(0, 12), long(1), long(0), long(-1)),                   # file id past the files
        (path, long(0, 12), long(-1), long(0), long(-1)),                  # negative file id
        (path, long(0, 40), long(0), long(0), long(-1)),                   # path past the bytes
        (path, long(8, 4, 12), long(0), long(0), long(-1)),                # decreasing offsets
        (path, long(0, 12), long(0, 0), long(0), long(-1)),                # lengths differ
        (path, long(0, 12).int(), long(0), long(0), long(-1)),             # int32
        (path.float(), long(0, 12), long(0), long(0), long(-1)),           # not bytes
        (path, long(0, 12)[None], long(0), long(0), long(-1)),             # 2-D
    ]
    try:
        for arrays in bad:
            with pytest.raises((ValueError, RuntimeError), match=r"^fastload\.BatchEngine\.set_index: expected"):
                engine.set_index(*arrays)
    finally:
        engine.close()


def test_engine_reports_unreadable_samples_as_errors(tmp_path):
    """Missing files, negative offsets and sizes past the end are per-sample errors."""
    path = tmp_path / "a.jpg"
    data = js.sample("rgb420_17x23").data
    path.write_bytes(data)
    index = SampleIndex(files=FlatStrings.from_list([str(path), str(tmp_path / "missing.jpg")]),
                        file_ids=np.array([0, 1, 0, 0, 0], dtype=np.int64),
                        offsets=np.array([0, 0, -5, 10, 0], dtype=np.int64),
                        sizes=np.array([len(data), -1, 20, len(data), 0], dtype=np.int64),
                        labels=np.zeros(5, dtype=np.int64))
    engine = _engine(index, _config(out_height=4, out_width=4))
    try:
        out = torch.empty(5, 3, 4, 4, dtype=torch.uint8)
        status, messages = engine.wait(engine.submit(torch.arange(5), out, 0))
        # Read errors carry the reason; 0 bytes are "not a JPEG" (Python then tries PIL).
        assert status.tolist() == [OK, READ_ERROR, READ_ERROR, READ_ERROR, NOT_JPEG], (status, messages)
        assert "cannot open" in messages[1] and "truncated" in messages[3] and all(messages[1:4]), messages
    finally:
        engine.close()
