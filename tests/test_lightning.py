"""fastload.DataLoader under PyTorch Lightning: a mid-epoch checkpoint resumes exactly.

Lightning saves the state_dict() of every training dataloader that has state_dict and
load_state_dict in its checkpoints, and loads it back on `fit(ckpt_path=...)`; it sizes
each epoch with len(dataloader). A resumed run must therefore see exactly the samples the
uninterrupted run saw after the checkpoint: the rest of the interrupted epoch, then whole
epochs. Tiny data, CPU, num_workers=0, no logger or progress bar.
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

import fastload  # noqa: E402
from fastload import ops  # noqa: E402

EPOCHS = 3
CHECKPOINT_STEP = 17  # inside a later epoch (not the first) for every dataset below


class Recorder(pl.LightningModule):
    """Records (epoch, sample ids, pixel sums) of every training batch."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append((self.current_epoch, y.tolist(), [round(float(v), 3) for v in x.flatten(1).sum(1)]))
        return self.layer(x.flatten(1).float().mean(1, keepdim=True)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(make_loader, root, ckpt_path=None):
    pl.seed_everything(0, verbose=False)  # a new process, seeded as at its start
    model = Recorder()
    loader = make_loader()
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=str(root), filename="{step}", save_top_k=-1,
                                              every_n_train_steps=CHECKPOINT_STEP)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[checkpoint],
                         default_root_dir=str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # num_workers / log-every-n-steps hints
        trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
    # Engine threads end here, and Lightning's reference cycles are collected in this
    # process: not in a forked worker of a later test.
    loader.close()
    gc.collect()
    return model.seen, trainer


def _per_epoch(seen):
    counts = {}
    for epoch, _, _ in seen:
        counts[epoch] = counts.get(epoch, 0) + 1
    return [counts.get(e, 0) for e in range(EPOCHS)]


def _tensor_loader():
    ids = torch.arange(40)
    dataset = torch.utils.data.TensorDataset(ids.float().view(-1, 1) * 0.5, ids)
    return fastload.DataLoader(dataset, batch_size=3, shuffle=True)  # generator=None: the usual case


def _folder_loader(root):
    def make():
        dataset = fastload.ImageFolder(str(root), ops=[ops.RandomResizedCrop(8), ops.RandomHorizontalFlip()])
        loader = fastload.DataLoader(dataset, batch_size=2, shuffle=True)
        assert loader.path.startswith("native"), loader.path
        return loader
    return make


@pytest.fixture
def jpeg_folder(tmp_path):
    from jpeg_samples import write_image_folder

    write_image_folder(tmp_path / "images", classes=2, per_class=8, size=(12, 16))
    return tmp_path / "images"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tensors", "image_folder"])
def test_lightning_resume_mid_epoch_trains_the_uninterrupted_runs_samples(kind, tmp_path, jpeg_folder):
    make = _tensor_loader if kind == "tensors" else _folder_loader(jpeg_folder)
    batches = len(make())
    assert CHECKPOINT_STEP % batches != 0  # the checkpoint falls inside an epoch
    full, _ = _fit(make, tmp_path / "run")
    assert _per_epoch(full) == [batches] * EPOCHS
    assert len({str(ids) for e, ids, _ in full if e == 0}) > 1  # shuffled

    resumed, trainer = _fit(make, tmp_path / "resumed", ckpt_path=str(tmp_path / "run" / f"step={CHECKPOINT_STEP}.ckpt"))
    assert trainer.num_training_batches == batches  # len(loader): the whole epoch, after the resume too
    done = CHECKPOINT_STEP % batches
    in_epoch = CHECKPOINT_STEP // batches
    want = [0] * in_epoch + [batches - done] + [batches] * (EPOCHS - in_epoch - 1)
    assert _per_epoch(resumed) == want
    assert resumed == full[CHECKPOINT_STEP:]  # same samples, same augmentation, same epochs
