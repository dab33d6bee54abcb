"""The device path: ordering, N-ahead, event waits, record_stream and pinned-buffer lifetime,
tested on CPU with a fake transport whose copies happen only when their event completes
(so a buffer rewritten too early shows up as wrong data); real CUDA tests are marked."""

from __future__ import annotations

import collections
import dataclasses
import warnings

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader

import fastload
import fastload.transfer
from fastload import DataLoader
from fastload.transfer import DevicePrefetcher, PinnedPool, make_convert, tree_map, tree_tensors
from loader_datasets import Images, Squares, Structured, collate_structured
from resume_helpers import batches_equal

pytestmark = pytest.mark.timeout(120)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class FakeEvent:
    def __init__(self, n):
        self.n = n
        self.done = False


class FakeTransport:
    """Records every call. copy() returns uninitialised outputs and fills them from the
    (pinned) sources only when the event completes, like an async copy would."""

    def __init__(self, complete_on_wait=False):
        self.device = torch.device("cpu")
        self.calls = []
        self.events = []
        self.pinned = set()  # data_ptrs of "page-locked" memory
        self.allocations = 0
        self.complete_on_wait = complete_on_wait
        self._pending = {}

    def alloc_pinned(self, nbytes):
        self.allocations += 1
        t = torch.empty(nbytes, dtype=torch.uint8)
        self.pinned.add(t.data_ptr())
        self.calls.append(("alloc", nbytes))
        return t

    def is_pinned(self, t):
        return t.data_ptr() in self.pinned

    def copy(self, batch, convert):
        event = FakeEvent(len(self.events))
        pairs = []

        def move(t):
            dst = torch.empty_like(convert(t) if convert else t)
            pairs.append((t, dst, convert))
            return dst

        out = tree_map(move, batch)
        self._pending[event.n] = pairs
        self.events.append(event)
        self.calls.append(("copy", event.n, [t.data_ptr() for t in tree_tensors(batch)]))
        return out, event

    def complete(self, event):
        for e in self.events[: event.n + 1]:  # one stream: in order
            if not e.done:
                for src, dst, convert in self._pending.pop(e.n):
                    dst.copy_(convert(src) if convert else src)
                e.done = True

    def complete_all(self):
        if self.events:
            self.complete(self.events[-1])

    def wait(self, event):
        self.calls.append(("wait", event.n))
        if self.complete_on_wait:
            self.complete(event)

    def record_stream(self, t):
        self.calls.append(("record_stream", t.data_ptr()))

    def query(self, event):
        return event.done

    def synchronize(self, event):
        self.calls.append(("sync", event.n))
        self.complete(event)

    def elapsed_s(self, event):
        return 0.001


def _batches(n, size=4):
    return [({"x": torch.full((2, 3), float(i)), "y": torch.tensor([i, -i])}, f"tag{i}") for i in range(n)]


class Counting:
    def __init__(self, items):
        self.items = list(items)
        self.pulled = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pulled == len(self.items):
            raise StopIteration
        item = self.items[self.pulled]
        self.pulled += 1
        if isinstance(item, Exception):
            raise item
        return item


# -- the prefetcher's logic ------------------------------------------------------------------


def test_order_values_and_tags():
    fake = FakeTransport(complete_on_wait=True)
    got = list(DevicePrefetcher(iter(_batches(5)), fake, ahead=2))
    assert [tag for _, tag in got] == [f"tag{i}" for i in range(5)]
    for (batch, _), (want, _) in zip(got, _batches(5), strict=True):
        assert batches_equal(batch, want)


@pytest.mark.parametrize("ahead", [1, 2, 3])
def test_copies_are_issued_n_ahead(ahead):
    fake = FakeTransport(complete_on_wait=True)
    source = Counting(_batches(6))
    pf = DevicePrefetcher(source, fake, ahead=ahead)
    for k in range(6):
        next(pf)
        # after the k-th delivery, batches up to k + ahead - 1 were issued (when they exist)
        assert source.pulled == min(6, k + ahead)
        assert sum(c[0] == "copy" for c in fake.calls) == min(6, k + ahead)
    with pytest.raises(StopIteration):
        next(pf)


def test_consumer_waits_on_the_batch_event_then_records_its_tensors():
    fake = FakeTransport(complete_on_wait=True)
    pf = DevicePrefetcher(iter(_batches(3)), fake, ahead=2)
    for k in range(3):
        fake.calls.clear()
        batch, _ = next(pf)
        kinds = [c for c in fake.calls if c[0] in ("wait", "record_stream")]
        assert kinds[0] == ("wait", k)  # the event of *this* batch, before anything else
        recorded = [c[1] for c in kinds[1:]]
        assert recorded == [t.data_ptr() for t in tree_tensors(batch)]  # every output tensor


def test_pinned_buffers_are_not_reused_before_their_copy_completed():
    fake = FakeTransport(complete_on_wait=False)  # no copy completes until we say so
    pf = DevicePrefetcher(iter(_batches(5)), fake, ahead=2)
    got = [next(pf) for _ in range(5)]
    # every batch needed fresh blocks (x and y): nothing could be recycled
    assert fake.allocations == 2 * 5
    fake.complete_all()
    for (batch, _), (want, _) in zip(got, _batches(5), strict=True):
        assert batches_equal(batch, want)  # no source buffer was overwritten before its copy


def test_pinned_buffers_are_reused_once_their_copy_completed():
    fake = FakeTransport(complete_on_wait=True)
    pf = DevicePrefetcher(iter(_batches(8)), fake, ahead=2)
    got = [next(pf) for _ in range(8)]
    assert fake.allocations == 2 * 2  # `ahead` batches' worth of blocks, recycled
    assert pf.pool.reuses == 2 * 6
    for (batch, _), (want, _) in zip(got, _batches(8), strict=True):
        assert batches_equal(batch, want)


def test_pool_at_its_cap_waits_for_the_oldest_copy():
    fake = FakeTransport(complete_on_wait=False)
    nbytes = 2 * 3 * 4 + 2 * 8  # one batch: x float32 [2, 3], y int64 [2]
    pool = PinnedPool(fake, max_bytes=2 * nbytes)
    pf = DevicePrefetcher(iter(_batches(4)), fake, ahead=2, pool=pool)
    got = [next(pf) for _ in range(4)]
    assert fake.allocations == 4  # two batches' worth, then waits
    assert ("sync", 0) in fake.calls and pool.waits >= 2
    fake.complete_all()
    for (batch, _), (want, _) in zip(got, _batches(4), strict=True):
        assert batches_equal(batch, want)


def test_already_pinned_tensors_are_not_staged_and_stay_alive_until_their_copy_ends():
    fake = FakeTransport(complete_on_wait=False)
    items = []
    for i in range(3):
        t = torch.full((4,), float(i))
        fake.pinned.add(t.data_ptr())
        items.append((t, i))
    pf = DevicePrefetcher(iter(items), fake, ahead=1)
    first, _ = next(pf)
    assert fake.allocations == 0
    del items
    assert len(pf._retiring) == 1  # the source tensor is still referenced
    fake.complete_all()
    assert first.tolist() == [0.0] * 4
    next(pf)
    assert len(pf._retiring) == 1  # the completed one was retired, the new one is held


def test_source_errors_are_raised_in_order_and_iteration_goes_on():
    fake = FakeTransport(complete_on_wait=True)
    b = _batches(4)
    pf = DevicePrefetcher(Counting([b[0], b[1], ValueError("boom"), b[3]]), fake, ahead=3)
    assert next(pf)[1] == "tag0"
    assert next(pf)[1] == "tag1"
    with pytest.raises(ValueError, match="boom"):
        next(pf)
    assert next(pf)[1] == "tag3"
    with pytest.raises(StopIteration):
        next(pf)


def test_close_waits_for_copies_in_flight():
    fake = FakeTransport()
    pf = DevicePrefetcher(iter(_batches(4)), fake, ahead=3)
    next(pf)
    pf.close()
    assert all(e.done for e in fake.events)


def test_stats_hooks():
    class Times(collections.Counter):
        def add_time(self, stage, seconds):
            self[stage] += seconds

    fake, times = FakeTransport(complete_on_wait=True), Times()
    list(DevicePrefetcher(iter(_batches(3)), fake, ahead=2, stats=times))
    assert times["pin"] > 0 and times["transfer"] > 0
    assert times["copy"] == pytest.approx(0.003)  # elapsed_s of three completed copies


# -- pieces --------------------------------------------------------------------------------


def test_make_convert():
    convert = make_convert(torch.bfloat16, torch.channels_last)
    x = convert(torch.rand(2, 3, 4, 5))
    assert x.dtype == torch.bfloat16 and x.is_contiguous(memory_format=torch.channels_last)
    assert convert(torch.arange(3)).dtype == torch.int64
    assert convert(torch.zeros(2, 3, dtype=torch.uint8)).dtype == torch.uint8
    assert convert(torch.rand(3, 4)).shape == (3, 4)
    assert make_convert(None, None) is None
    y = make_convert(None, torch.channels_last)(torch.rand(1, 2, 3, 4, dtype=torch.float64))
    assert y.dtype == torch.float64 and y.is_contiguous(memory_format=torch.channels_last)


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: str = "keep"


Point = collections.namedtuple("Point", "x y")


def test_tree_map_keeps_structure_and_types():
    batch = collections.OrderedDict(p=Point(torch.ones(1), [torch.zeros(2), "s"]), f=Frozen(torch.ones(3)),
                                    t=(torch.ones(1), 3), n=None)
    out = tree_map(lambda t: t + 1, batch)
    assert type(out) is collections.OrderedDict and list(out) == ["p", "f", "t", "n"]
    assert type(out["p"]) is Point and out["p"].y[1] == "s" and out["p"].y[0].tolist() == [1.0, 1.0]
    assert type(out["f"]) is Frozen and out["f"].a.tolist() == [2.0] * 3 and out["f"].b == "keep"
    assert batch["f"].a.tolist() == [1.0] * 3  # the input is untouched
    assert out["t"][1] == 3 and out["n"] is None
    assert len(tree_tensors(batch)) == 4


def test_pool_release_checks():
    pool = PinnedPool(FakeTransport())
    a = pool.acquire((3,), torch.int64)
    assert pool.owns(a)
    pool.release(a)
    with pytest.raises(ValueError, match="does not own"):
        pool.release(a)
    small = pool.acquire((1,), torch.int64)  # a 24-byte block is too big for 8 bytes (slack 2)
    assert small.data_ptr() != a.data_ptr()


# -- the loader with the fake transport ------------------------------------------------------


@pytest.fixture
def fake_device(monkeypatch):
    made = []

    def make(device):
        made.append(FakeTransport(complete_on_wait=True))
        return made[-1]

    monkeypatch.setattr(fastload.transfer, "make_transport", make)
    # The fake stands in for the GPU: the loader's check that one is there is skipped too.
    monkeypatch.setattr(fastload.loader, "require_cuda_device", lambda device: None)
    return made


def _host_reference(loader_kwargs, dataset, convert):
    torch.manual_seed(0)
    return [tree_map(convert, b) if convert else b for b in TorchLoader(dataset, **loader_kwargs)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_device_path_with_fake_transport(fake_device, num_workers):
    kwargs = dict(batch_size=3, num_workers=num_workers, shuffle=True, generator=torch.Generator().manual_seed(1))
    want = _host_reference(dict(kwargs, generator=torch.Generator().manual_seed(1)), Images(),
                           make_convert(torch.bfloat16, torch.channels_last))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: pin_memory without an accelerator
        torch.manual_seed(0)
        loader = DataLoader(Images(), device="cuda", dtype=torch.bfloat16, memory_format=torch.channels_last,
                            prefetch_to_device=2, **kwargs)
        got = list(loader)
    fake = fake_device[0]
    assert len(got) == len(want)
    for a, b in zip(want, got, strict=True):
        assert batches_equal(a, b)
        assert b["x"].is_contiguous(memory_format=torch.channels_last) and b["image"].dtype == torch.uint8
    assert [c for c in fake.calls if c[0] == "wait"] == [("wait", i) for i in range(len(want))]
    stats = loader.stats()
    assert stats["transfer_s"] > 0 and stats["copy_s"] == pytest.approx(0.001 * len(want))


def test_loader_device_path_structured_batches(fake_device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(Structured(), batch_size=4, collate_fn=collate_structured, device="cuda",
                            dtype=torch.float16)
        got = list(loader)
    first = got[0]
    assert type(first["pair"]).__name__ == "Pair" and first["pair"].x.dtype == torch.float16
    assert first["pair"].y.dtype == torch.int64 and first["tag"] == "batch"
    assert type(first["record"]).__name__ == "Record" and first["record"].image.dtype == torch.float16
    assert first["record"].image[:, 0, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("device", [None, "cpu"])
def test_dtype_and_memory_format_on_the_cpu(device):
    kwargs = dict(batch_size=3)
    want = _host_reference(kwargs, Images(), make_convert(torch.float16, torch.channels_last))
    loader = DataLoader(Images(), device=device, dtype=torch.float16, memory_format=torch.channels_last, **kwargs)
    got = list(loader)
    for a, b in zip(want, got, strict=True):
        assert batches_equal(a, b) and b["x"].is_contiguous(memory_format=torch.channels_last)


def test_cpu_device_is_like_torch():
    torch.manual_seed(0)
    want = list(TorchLoader(Squares(), batch_size=4))
    got = list(DataLoader(Squares(), batch_size=4, device="cpu"))
    assert all(batches_equal(a, b) for a, b in zip(want, got, strict=True)) and len(want) == len(got)


# -- real CUDA (skipped without a GPU; run on a lent GPU) -------------------------------------


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_cuda_batches_equal_torch_moved(num_workers):
    want = _host_reference(dict(batch_size=3), Images(), None)
    loader = DataLoader(Images(), batch_size=3, num_workers=num_workers, device="cuda",
                        dtype=torch.bfloat16, memory_format=torch.channels_last)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the consumer's current stream is not the default one
        got = [tree_map(lambda t: t.clone(), b) for b in loader]
    torch.cuda.synchronize()
    for a, b in zip(want, got, strict=True):
        assert b["x"].is_cuda and b["x"].dtype == torch.bfloat16
        assert b["x"].is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(b["x"].cpu(), a["x"].to(torch.bfloat16))
        assert torch.equal(b["image"].cpu(), a["image"]) and b["label"].tolist() == a["label"].tolist()
    stats = loader.stats()
    assert stats["copy_s"] > 0 and stats["pin_s"] > 0  # torch's pin thread, measured


@cuda
@pytest.mark.cuda
def test_cuda_pool_with_real_events():
    from fastload.transfer.cuda import CudaTransport

    transport = CudaTransport("cuda")
    items = [(torch.full((1 << 20,), float(i)), i) for i in range(6)]  # unpinned: staged by the pool
    pf = DevicePrefetcher(iter(items), transport, ahead=2)
    out = [(b.clone(), tag) for b, tag in pf]
    torch.cuda.synchronize()
    assert [float(b[0]) for b, _ in out] == [float(i) for i in range(6)]
    assert all(float(b.min()) == float(b.max()) for b, _ in out)
    assert pf.pool.allocations <= 3
