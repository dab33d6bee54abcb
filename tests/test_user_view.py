"""What a user sees: fastload.explain at a REPL, a dataset's repr, the stats report, a
printed state_dict, the bench plot, accelerate=True, and the stats under Lightning DDP."""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

import fastload
from fastload import _ext
from fastload import transforms as T
from loader_datasets import Squares

torchvision = pytest.importorskip("torchvision")
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.timeout(180)
needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    import jpeg_samples as js

    folder = tmp_path_factory.mktemp("user_view")
    js.write_image_folder(folder, classes=2, per_class=3, size=(16, 20))
    return str(folder)


def to_float():
    return [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]


# ---- fastload.explain -----------------------------------------------------------------------


def test_explain_returns_its_report_without_printing_so_a_repl_shows_it_once(root, capsys):
    report = fastload.explain(ImageFolder(root, transform=v2.Compose([v2.RandomResizedCrop(16), *to_float()])))
    assert capsys.readouterr().out == ""  # nothing printed by explain itself
    assert isinstance(report, str) and repr(report) == str(report)  # what a REPL echoes: the text, once
    assert report.splitlines()[-1] == "  verdict: native path"
    print(report)
    assert capsys.readouterr().out == str(report) + "\n"


def test_explain_says_the_native_prefix_does_not_fuse(root):
    # A flip (no crop) is the whole native prefix: it cannot be batched on its own.
    report = fastload.explain(ImageFolder(root, transform=v2.Compose(
        [v2.RandomHorizontalFlip(), v2.Lambda(lambda x: x), v2.RandomResizedCrop(16), *to_float()])))
    assert "the native prefix does not fuse into one plan" in report
    assert "do not fuse" not in report


def test_explain_counts_one_lambda_as_one_blocker(root):
    report = fastload.explain(ImageFolder(root, transform=v2.Compose(
        [v2.Lambda(lambda x: x), v2.RandomResizedCrop(16), *to_float()])))
    assert report.splitlines()[-1] == "  verdict: generic path (1 blocker)", report
    assert "no native transform comes before the Python tail" in report
    # With no crop or resize anywhere, the missing crop is a blocker of its own.
    report = fastload.explain(ImageFolder(root, transform=v2.Compose([v2.Lambda(lambda x: x), v2.ToImage()])))
    assert report.splitlines()[-1] == "  verdict: generic path (2 blockers)", report
    assert "without the blockers, the native transforms still do not fuse: no crop or resize" in report


# ---- a dataset's repr -----------------------------------------------------------------------


def test_dataset_repr_shows_the_native_part_and_the_python_tail(root):
    pipeline = [v2.Resize(16), v2.CenterCrop(16), *to_float(), v2.RandomRotation(10)]
    dataset = fastload.ImageFolder(root, transforms=pipeline)
    text = repr(dataset)
    assert text.startswith(f"fastload.ImageFolder({root!r}, 6 images, 2 classes, transforms=[Resize(")
    assert "CenterCrop(size=(16, 16)), ToDtype(" in text and text.endswith("] + python[RandomRotation(degrees=[-10.0, 10.0], "
                                                                            "interpolation=nearest, expand=False, fill=0)])")
    files = fastload.FileList(["a.jpg"], [0], transforms=[T.CenterCrop(8)])
    assert repr(files) == "fastload.FileList(1 image, transforms=[CenterCrop(size=(8, 8))])"
    # A torchvision dataset as the compat layer converts it.
    from fastload.adapters import convert as convert_dataset

    converted = convert_dataset(ImageFolder(root, transform=v2.Compose(
        [v2.Resize(16), v2.CenterCrop(16), v2.RandomRotation(10), *to_float()])))
    text = repr(converted)
    assert text.startswith("Conversion(torchvision ImageFolder, 6 samples, transforms=[Resize(") and len(text) < 400
    assert "CenterCrop(size=(16, 16))] + python[RandomRotation(" in text and text.endswith("ToDtype(scale=True)])")


# ---- the stats report -----------------------------------------------------------------------


def table(text):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("stage"))
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("verdict:"))
    return lines[start + 1:end]


def test_stats_report_shows_one_wait_and_no_transfer_row_on_a_cpu_run():
    loader = fastload.DataLoader(Squares(8), batch_size=4, dtype=torch.float16)  # a dtype conversion on the CPU
    list(loader)
    stats = loader.stats()
    assert stats["transfer_s"] > 0 and stats["copy_s"] == 0.0 and stats["wait_s"] > 0  # the keys stay
    text = str(stats)
    assert "transfer" not in text and "copy (device)" not in text
    rows = table(text)
    assert [row.split()[0] for row in rows if "(host)" in row] == ["convert"]
    waits = [row for row in rows if "wait" in row]
    assert len(waits) == 1 and waits[0].strip().startswith("wait in __next__ ")
    assert "(the training loop's time blocked in __next__" in text and "wait (loop)" not in text
    # Batches that went to a CUDA device (their copies timed) show the transfer and the copy.
    to_gpu = dict(stats, copy_s=0.002)
    assert "transfer (host)" in str(fastload.stats.report(to_gpu)) and "copy (device)" in fastload.stats.report(to_gpu)


@needs_ops
def test_stats_report_shows_one_wait_on_the_native_path(root):
    loader = fastload.DataLoader(fastload.ImageFolder(root, transforms=[T.RandomResizedCrop(8)]), batch_size=2)
    list(loader)
    stats = loader.stats()
    assert "wait_s" in stats["native"]  # the engine's wait stays in the dict
    text = str(stats)
    assert "wait_s=" not in text and sum("wait" in row for row in table(text)) == 1
    native = [line for line in text.splitlines() if line.strip().startswith("native:")]
    assert native and "engine_s=" in native[0]


# ---- a printed state_dict -------------------------------------------------------------------


def test_state_dict_prints_short_and_still_saves_loads_and_resumes():
    def make():
        return fastload.DataLoader(torch.utils.data.TensorDataset(torch.arange(12)), batch_size=3, shuffle=True)

    torch.manual_seed(0)
    loader = make()
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [b[0].tolist() for b in it]
    text = repr(state)
    assert len(text) < 600 and "<rng (base64), " in text and str(state) == text, text
    assert len(state["order"]["rng"]) > 4000  # the dict itself holds the whole generator state
    # torch.save / torch.load (weights_only by default), pickle, json, copies: the same state.
    buffer = io.BytesIO()
    torch.save({"loader": state}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)["loader"]
    for other in (loaded, pickle.loads(pickle.dumps(state)), json.loads(json.dumps(state)), copy.deepcopy(state),
                  copy.copy(state)):
        assert isinstance(other, dict) and other == state
    assert type(copy.deepcopy(state)) is type(state)
    resumed = make()
    resumed.load_state_dict(loaded)
    assert [b[0].tolist() for b in resumed] == rest


# ---- the bench plot -------------------------------------------------------------------------


def bench_rows():
    common = dict(pipeline="train", status="ok", batch_size=128, workers=2, images=6144, peak_rss_mb=500.0,
                  cpu_ms_per_image=1.5)
    return [dict(common, contender="baseline", images_per_s=200.0, ratio=1.0, others_cpu_pct=2.0),
            dict(common, contender="fastload", images_per_s=900.0, ratio=4.5, others_cpu_pct=14.0,
                 stages_ms_per_image={"read (engine)": 0.06, "decode (engine)": 1.2, "augment (engine)": 0.3,
                                      "wait (loop)": 2.6})]


def test_bench_plot_has_a_title_with_the_conditions_and_marks_noisy_rows(tmp_path):
    from fastload.bench import report

    title = report.plot_title(bench_rows(), "2,000 JPEGs in /data")
    assert title[0] == "fastload-bench: 2,000 JPEGs in /data"
    assert title[1] == "batch 128, 2 workers/threads, 6,144 images timed per row"
    assert title[2].startswith("noisy (other processes used > 10% of the CPUs") and title[2].endswith(": fastload (train)")
    pytest.importorskip("matplotlib")
    report.plot(bench_rows(), str(tmp_path / "bench.svg"), data="2,000 JPEGs in /data")
    svg = (tmp_path / "bench.svg").read_text()
    assert "2,000 JPEGs in /data" in svg and "6,144 images timed per row" in svg and "(4.50x) noisy" in svg


def test_bench_plot_does_not_stack_the_loops_wait_on_the_stages():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fastload.bench import report

    figure, axis = plt.subplots()
    try:
        rows = bench_rows()[1:]
        report._plot_stages(axis, ["fastload (train)"], rows)
        bars = {bar.get_label(): bar.patches[0] for bar in axis.containers}  # one bar per stage (one row)
        wait = next(patch for label, patch in bars.items() if label.startswith("wait (loop)"))
        assert wait.get_x() == 0.0 and wait.get_width() == pytest.approx(2.6)  # apart, not after the stages
        stacked = [patch for label, patch in bars.items() if not label.startswith("wait")]
        assert max(p.get_x() + p.get_width() for p in stacked) == pytest.approx(1.56)
    finally:
        plt.close(figure)


# ---- accelerate=True ------------------------------------------------------------------------


@needs_ops
def test_accelerate_true_accepts_a_hybrid_pipeline_and_refuses_the_generic_path(root):
    hybrid = ImageFolder(root, transform=v2.Compose([v2.RandomResizedCrop(16), v2.RandomRotation(10), *to_float()]))
    loader = fastload.DataLoader(hybrid, batch_size=2, accelerate=True)
    assert loader.path.startswith("hybrid: native [RandomResizedCrop] + python [RandomRotation"), loader.path
    assert sum(len(images) for images, _ in loader) == 6
    with pytest.raises(ValueError, match=r"accelerate=True: the native or hybrid path\), got 'generic: "
                                         r"TensorDataset is not"):
        fastload.DataLoader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2, accelerate=True)
    doc = " ".join(fastload.DataLoader.__doc__.split())
    assert "True requires the engine: the native path or the hybrid path" in doc
    for form in ('"native: ', '"hybrid: native [', '"generic: '):
        assert form in doc and form in " ".join(fastload.DataLoader.path.__doc__.split())


# ---- stats under Lightning DDP --------------------------------------------------------------

LIGHTNING_DDP = textwrap.dedent("""
    import json, os, socket, warnings
    import torch, pytorch_lightning as pl, fastload

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, i):
            return self.layer(batch[0].float().unsqueeze(1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    out = {}
    for flag in (True, False):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        loader = fastload.DataLoader(torch.utils.data.TensorDataset(torch.arange(16)), batch_size=4)
        trainer = pl.Trainer(accelerator="cpu", devices=1, strategy="ddp", max_epochs=1, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             use_distributed_sampler=flag)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(Model(), train_dataloaders=loader)
        live = trainer.train_dataloader
        out[str(flag)] = dict(same=live is loader, mine=loader.stats()["batches"], live=live.stats()["batches"])
        torch.distributed.destroy_process_group()
    print("RESULT " + json.dumps(out))
""")


def test_under_lightning_ddp_the_stats_are_on_the_loader_that_ran():
    pytest.importorskip("pytorch_lightning")
    # Lightning's DDP needs a process group: a process of its own, not this one.
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", LIGHTNING_DDP], capture_output=True, text=True, timeout=150, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    # The default rebuilds the loader: the user's own reports nothing, trainer.train_dataloader all.
    assert result["True"] == {"same": False, "mine": 0, "live": 4}
    assert result["False"] == {"same": True, "mine": 4, "live": 4}
    with open(os.path.join(ROOT, "docs", "profiling.md")) as f:
        docs = " ".join(f.read().split())
    assert "print(trainer.train_dataloader.stats())" in docs and "use_distributed_sampler=False" in docs
