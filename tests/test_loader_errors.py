"""Errors: bad arguments raise what torch raises; failures in workers keep their type and
message and name the sample; a dead or stuck worker is an error, never a hang."""

from __future__ import annotations

import multiprocessing
import traceback

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader

from fastload import DataLoader
from loader_datasets import BatchFetch, Failing, FailingTwo, Killer, RangeIterable, Squares, Stuck

pytestmark = pytest.mark.timeout(120)


def _error(fn):
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the test compares what was raised
        _release(error)
        return type(error), str(error)
    return None


def _release(error):
    """Drops the traceback's frames, so the loader iterator they hold (and its worker
    processes) goes away now. Left to the cyclic GC, torch's worker shutdown waits for
    join timeouts (seconds), in whichever later test the collection happens to run."""
    traceback.clear_frames(error.__traceback__)


BAD_ARGUMENTS = {
    "batch_sampler+batch_size": (Squares, dict(batch_sampler=[[0]], batch_size=2)),
    "batch_sampler+shuffle": (Squares, dict(batch_sampler=[[0]], shuffle=True)),
    "batch_sampler+sampler": (Squares, dict(batch_sampler=[[0]], sampler=[0])),
    "batch_sampler+drop_last": (Squares, dict(batch_sampler=[[0]], drop_last=True)),
    "sampler+shuffle": (Squares, dict(sampler=[0, 1], shuffle=True)),
    "negative num_workers": (Squares, dict(num_workers=-1)),
    "negative timeout": (Squares, dict(timeout=-1)),
    "prefetch_factor without workers": (Squares, dict(prefetch_factor=2)),
    "negative prefetch_factor": (Squares, dict(num_workers=1, prefetch_factor=-1)),
    "persistent_workers without workers": (Squares, dict(persistent_workers=True)),
    "batch_size=None with drop_last": (Squares, dict(batch_size=None, drop_last=True)),
    "batch_size=0": (Squares, dict(batch_size=0)),
    "drop_last not bool": (Squares, dict(batch_size=2, drop_last="yes")),
    "context without workers": (Squares, dict(multiprocessing_context="fork")),
    "unknown context": (Squares, dict(num_workers=1, multiprocessing_context="teleport")),
    "context of a wrong type": (Squares, dict(num_workers=1, multiprocessing_context=5)),
    "iterable with shuffle": (RangeIterable, dict(shuffle=True)),
    "iterable with sampler": (RangeIterable, dict(sampler=[0, 1])),
    "iterable with batch_sampler": (RangeIterable, dict(batch_sampler=[[0]])),
}


@pytest.mark.parametrize("name", list(BAD_ARGUMENTS))
def test_bad_arguments_raise_like_torch(name):
    make_dataset, kwargs = BAD_ARGUMENTS[name]
    want = _error(lambda: TorchLoader(make_dataset(), **kwargs))
    assert want is not None, "torch accepted it: the scenario is wrong"
    assert _error(lambda: DataLoader(make_dataset(), **kwargs)) == want


def test_context_object_accepted_like_torch():
    ctx = multiprocessing.get_context("fork")
    loader = DataLoader(Squares(4), batch_size=2, num_workers=1, multiprocessing_context=ctx)
    assert loader.multiprocessing_context is ctx
    assert [b[0].shape[0] for b in loader] == [2, 2]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # torch's own __del__
def test_zero_prefetch_factor_fails_at_iteration_like_torch():
    kwargs = dict(num_workers=1, prefetch_factor=0)
    want = _error(lambda: list(TorchLoader(Squares(4), **kwargs)))
    assert want is not None
    assert _error(lambda: list(DataLoader(Squares(4), **kwargs)))[0] is want[0]


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(device="nowhere"), ValueError, "expected device=None"),
    (dict(dtype=torch.int64), TypeError, "floating torch.dtype"),
    (dict(memory_format="channels_last"), TypeError, "torch.memory_format"),
    (dict(prefetch_to_device=0), ValueError, "prefetch_to_device >= 1"),
    (dict(prefetch_to_device=True), ValueError, "prefetch_to_device >= 1"),
    (dict(accelerate="yes"), ValueError, "accelerate='auto', True or False"),
    (dict(accelerate=1), ValueError, "accelerate='auto', True or False"),
    (dict(on_error="ignore"), ValueError, "on_error='raise' or 'skip'"),
    (dict(decode_on="tpu"), ValueError, "expected decode_on in"),
    (dict(distributed="maybe"), ValueError, "distributed='auto', True or False"),
    (dict(uneven="spread"), ValueError, "uneven in"),
    (dict(seed="1"), TypeError, "seed=None or an int"),
    (dict(accelerate=True), ValueError, "native pipeline can run"),
])
def test_bad_extras(kwargs, error, match):
    with pytest.raises(error, match=match):
        DataLoader(Squares(), batch_size=2, **kwargs)


def test_skip_needs_a_map_style_dataset():
    with pytest.raises(ValueError, match="on_error='raise' with an IterableDataset"):
        DataLoader(RangeIterable(), on_error="skip")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_device_without_cuda_fails_at_construction():
    with pytest.raises(RuntimeError, match="expected an available CUDA device"):
        DataLoader(Squares(), device="cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_device_without_cuda_fails_at_construction_with_a_native_dataset(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    import fastload
    from fastload import ops

    (tmp_path / "a").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "a" / "x.jpg")
    dataset = fastload.ImageFolder(str(tmp_path), ops=[ops.CenterCrop(4)])
    for device in ("cuda", "cuda:1", torch.device("cuda", 0)):
        with pytest.raises(RuntimeError, match=r"expected an available CUDA device .*"
                                               r"torch\.cuda\.is_available\(\) == False.*Pass device=None"):
            DataLoader(dataset, batch_size=1, device=device)


def test_cuda_device_index_out_of_range_fails_at_construction(monkeypatch):
    # As a machine with one GPU would answer (nothing here touches CUDA).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match=r"expected a CUDA device index below torch\.cuda\.device_count\(\) "
                                           r"== 1, got device='cuda:3'"):
        DataLoader(Squares(), batch_size=2, device="cuda:3")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_worker_exception_keeps_type_message_and_names_the_sample(num_workers):
    loader = DataLoader(Failing(bad=(7,)), batch_size=3, num_workers=num_workers)
    with pytest.raises(ValueError, match="bad sample") as info:
        list(loader)
    _release(info.value)
    assert "sample index 7" in "".join(info.value.__notes__ if num_workers == 0 else [str(info.value)])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_sample_error_names_its_file_where_the_dataset_says_it(tmp_path, num_workers):
    """torchvision's ImageFolder: the error keeps torch's type and message, and its note
    names the file: "fastload: raised by dataset[3] (<path>)". A Subset of it (whose
    __getitems__ reads a whole batch) names the file in stats() under on_error="skip"."""
    torchvision = pytest.importorskip("torchvision")
    import jpeg_samples as js
    from torch.utils.data import Subset

    paths = js.write_image_folder(tmp_path, classes=2, per_class=3, size=(40, 48))
    with open(paths[3], "rb") as f:
        data = f.read()
    with open(paths[3], "wb") as f:
        f.write(data[:data.index(b"\xff\xda") + 30])  # truncated after the start of the scan
    folder = torchvision.datasets.ImageFolder(str(tmp_path), transform=torchvision.transforms.Compose(
        [torchvision.transforms.CenterCrop(24), torchvision.transforms.PILToTensor()]))
    want = _error(lambda: list(TorchLoader(folder, batch_size=2, num_workers=num_workers)))
    with pytest.raises(OSError) as info:
        list(DataLoader(folder, batch_size=2, num_workers=num_workers, accelerate=False))
    _release(info.value)
    assert type(info.value) is want[0] and "image file is truncated" in want[1]
    text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
    if num_workers == 0:
        assert str(info.value) == want[1]  # torch's message, the note apart
    else:
        assert str(info.value).startswith("Caught OSError in DataLoader worker process")
    assert f"fastload: raised by dataset[3] ({paths[3]})" in text, text

    loader = DataLoader(Subset(folder, [5, 4, 3]), batch_size=2, num_workers=num_workers, on_error="skip")
    with pytest.warns(UserWarning, match=f"skipped sample 2 \\({paths[3]}\\)"):
        assert [labels.tolist() for _, labels in loader] == [[1, 1], [1]]  # sample 2 replaced by sample 0
    assert [(r["sample"], r["source"]) for r in loader.stats()["skipped_samples"]] == [(2, paths[3])]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_key_error_and_unconstructible_exceptions_like_torch(num_workers):
    for make in (lambda: Failing(bad=(2,), error=KeyError), lambda: FailingTwo(bad=(2,))):
        want = _error(lambda: list(TorchLoader(make(), batch_size=2, num_workers=num_workers)))
        got = _error(lambda: list(DataLoader(make(), batch_size=2, num_workers=num_workers)))
        assert got[0] is want[0]
        assert "bad sample" in got[1] and (num_workers == 0 or "sample index 2" in got[1])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_error_names_the_batch(num_workers):
    with pytest.raises(KeyError) as info:
        list(DataLoader(BatchFetch(9), batch_size=3, num_workers=num_workers))
    _release(info.value)
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "no five" in text and "[3, 4, 5]" in text


def test_collate_error_keeps_its_type():
    def collate(samples):
        raise TypeError("cannot collate these")

    for num_workers in (0, 2):
        with pytest.raises(TypeError, match="cannot collate these") as info:
            list(DataLoader(Squares(), batch_size=2, collate_fn=collate, num_workers=num_workers))
        _release(info.value)


def test_iteration_goes_on_after_a_worker_error_like_torch():
    def outcomes(cls):
        it = iter(cls(Failing(n=8, bad=(3,)), batch_size=2, num_workers=2))
        seen = []
        while True:
            try:
                seen.append(next(it).view(-1).tolist())
            except StopIteration:
                return seen
            except ValueError as error:
                _release(error)
                seen.append("error")

    assert outcomes(DataLoader) == outcomes(TorchLoader) == [[0, 1], "error", [4, 5], [6, 7]]


@pytest.mark.timeout(60)
def test_worker_killed_by_a_signal_is_an_error_not_a_hang():
    loader = DataLoader(Killer(victim=3), batch_size=2, num_workers=2)
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid") as info:
        list(loader)
    _release(info.value)


@pytest.mark.timeout(60)
def test_timeout_is_respected():
    loader = DataLoader(Stuck(slow=1, seconds=1.0), batch_size=2, num_workers=1, timeout=0.25)
    with pytest.raises(RuntimeError, match="timed out after 0.25 seconds") as info:
        list(loader)
    _release(info.value)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_on_error_skip_replaces_bad_samples_and_counts_them(num_workers):
    loader = DataLoader(Failing(n=10, bad=(1, 7)), batch_size=3, num_workers=num_workers, on_error="skip")
    with pytest.warns(UserWarning, match="skipped sample"):
        assert [b.view(-1).tolist() for b in loader] == [[0, 2, 2], [3, 4, 5], [6, 8, 8], [9]]
    stats = loader.stats()
    assert stats["skipped"] == 2 and stats["samples"] == 10
    assert [(r["sample"], r["source"], r["reason"]) for r in stats["skipped_samples"]] == [
        (1, None, "ValueError: bad sample"), (7, None, "ValueError: bad sample")]


@pytest.mark.filterwarnings("ignore:fastload. on_error='skip' skipped sample")
def test_on_error_skip_whole_batch_and_single_samples():
    # Samples 2 and 3 fail: slot 2 passes 3 (also bad) to 4; slot 3 gets 4 too. 3 counts once.
    loader = DataLoader(Failing(n=6, bad=(2, 3)), batch_size=2, on_error="skip")
    assert [b.view(-1).tolist() for b in loader] == [[0, 1], [4, 4], [4, 5]]
    assert loader.stats()["skipped"] == 2 and loader.stats()["batches"] == 3
    loader = DataLoader(Failing(n=4, bad=(2,)), batch_size=None, on_error="skip")
    assert [b.tolist() for b in loader] == [[0], [1], [3], [3]]
    loader = DataLoader(Failing(n=4, bad=(3,)), batch_size=2, on_error="skip")
    assert [b.view(-1).tolist() for b in loader] == [[0, 1], [2, 0]]  # wraps to the dataset's start


def test_on_error_skip_on_an_unreadable_dataset_raises_after_the_replacement_limit():
    from fastload.errors import ErrorPolicy

    n = ErrorPolicy.MAX_REPLACEMENTS + 10
    loader = DataLoader(Failing(n=n, bad=range(n)), batch_size=2, on_error="skip")
    with pytest.raises(ValueError, match="bad sample") as info:
        next(iter(loader))
    _release(info.value)
    notes = " ".join(info.value.__notes__)
    assert f"no readable sample among the {ErrorPolicy.MAX_REPLACEMENTS} after dataset[0]" in notes, notes


def test_bad_states_and_epochs():
    loader = DataLoader(Squares(), batch_size=2)
    with pytest.raises(TypeError, match="expected a dict"):
        loader.load_state_dict([1])
    with pytest.raises(ValueError, match="expected version 1"):
        loader.load_state_dict({"version": 9, "epoch": 0, "batches_consumed": 0, "order": None})
    with pytest.raises(ValueError, match="non-negative int batches_consumed"):
        loader.load_state_dict({"version": 1, "epoch": 0, "batches_consumed": -1, "order": None})
    with pytest.raises(ValueError, match="non-negative epoch"):
        loader.set_epoch(-1)
    with pytest.raises(TypeError, match="an int epoch"):
        loader.set_epoch("1")


@pytest.mark.filterwarnings("ignore:fastload. on_error='skip' skipped sample")
def test_ddp_rank_whose_every_sample_fails_keeps_its_batches(monkeypatch):
    """on_error='skip' on the generic path: a batch whose samples all failed is not
    dropped (the other ranks would hang in their next collective): each sample is replaced
    by the next readable one, every rank yields len(loader) batches."""
    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i % 2 == 0:
                raise OSError(f"unreadable sample {i}")
            return torch.tensor(i)

    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, want in ((0, [1, 3, 5, 7]), (1, [1, 3, 5, 7])):  # rank 0 gets samples 0, 2, 4, 6
        monkeypatch.setenv("RANK", str(rank))
        loader = DataLoader(Broken(), batch_size=1, on_error="skip")
        assert [int(b) for b in loader] == want and len(loader) == 4
        assert loader.stats()["skipped"] == (4 if rank == 0 else 0)


def test_every_exception_type_fastload_raises_is_importable_from_fastload():
    import importlib
    import inspect
    import pathlib
    import re

    import fastload
    from fastload import _ext

    root = pathlib.Path(fastload.__file__).parent
    if _ext.has_ops():
        importlib.import_module("fastload._C")  # fastload._meta registers on its ops
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__" or (parts == ("_meta",) and not _ext.has_ops()):
            continue
        name = ".".join(("fastload",) + parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[attr] = value
        # Also by the source text, for classes a module only defines under a condition.
        for match in re.finditer(r"^\s*class (\w+)\(([\w., ]*(?:Error|Exception|Warning)[\w., ]*)\)",
                                 path.read_text(), re.MULTILINE):
            found.setdefault(match.group(1), None)
    # Private ones (e.g. source.tar's _Unsupported) are caught where they are raised; these
    # pass between two modules of fastload (so their names are public in their module) and
    # are caught there, never reaching a user.
    between_modules = {"TailError": "augment.tail -> the runners of a Python tail, which name the sample",
                       "EncodeError": "prepare.encode -> prepare.run, which names the file",
                       "StopTrace": "fastload.trace -> its openers and the webdataset view, ending a traced call",
                       "TraceRefused": "fastload.trace -> the lazy trace and the Hugging Face adapter: a reason",
                       "NotLocated": "source.arrow -> the Hugging Face adapter: why its images cannot be located",
                       "NotMapped": "datasets.webdataset_* -> the webdataset adapter: the stage that keeps a pipeline generic"}
    public = {name: cls for name, cls in found.items() if not name.startswith("_") and name not in between_modules}
    assert {"DecodeError", "TarShardError", "NotBuiltError", "UnsupportedPipeline", "NotConvertible"} <= set(public)
    for name, cls in public.items():
        assert name in fastload.__all__, name
        assert cls is None or getattr(fastload, name) is cls, name


NATIVE_READ_NEVER_RETURNS = """
import sys, time
import fastload
from fastload import transforms as T
dataset = fastload.ImageFolder(sys.argv[1], transforms=[T.Resize(32), T.CenterCrop(32)])
loader = fastload.DataLoader(dataset, batch_size=4, timeout=1.5)
assert loader.path.startswith("native"), loader.path
started = time.monotonic()
try:
    list(loader)
except RuntimeError as error:
    print(f"{time.monotonic() - started:.1f}s", error)
"""


def test_native_read_that_never_returns_honours_timeout_and_the_process_exits(tmp_path):
    """A FIFO opened for reading blocks until a writer comes: the engine's read never
    returns, as on a hung network file system. The loader raises torch's timeout error
    naming the batch, and the process exits (close leaves the stuck thread behind)."""
    import os
    import subprocess
    import sys

    import jpeg_samples as js

    js.write_image_folder(tmp_path, classes=1, per_class=3, size=(40, 40))
    os.mkfifo(tmp_path / "class_0" / "img_9.jpg")
    script = tmp_path / "child.py"
    script.write_text(NATIVE_READ_NEVER_RETURNS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                                     os.environ.get("PYTHONPATH")])))
    child = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                           timeout=60, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "DataLoader timed out after 1.5 seconds" in child.stdout, child.stdout + child.stderr[-3000:]
    assert "batch of samples [0, 1, 2, 3]" in child.stdout and "img_9.jpg" in child.stdout
