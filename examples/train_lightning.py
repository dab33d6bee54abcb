"""PyTorch Lightning fed by fastload: a LightningDataModule whose loaders are fastload
DataLoaders, bf16 mixed precision, gradient accumulation, mid-epoch checkpoints and an
exact resume, single process or DDP.

    python examples/train_lightning.py --data path/to/imagenet --arch resnet50 \\
        --batch-size 128 --accumulate 2 --max-epochs 90 --ckpt-every 1000 --ckpt-dir ckpts
    # stopped mid-epoch? continue from the last checkpoint, on the next batch:
    python examples/train_lightning.py --data path/to/imagenet --arch resnet50 \\
        --batch-size 128 --accumulate 2 --max-epochs 90 --ckpt-every 1000 --ckpt-dir ckpts \\
        --resume ckpts/last.ckpt
    # DDP: under torchrun (any number of nodes), or Lightning's own launch with --devices N
    torchrun --standalone --nproc_per_node=8 examples/train_lightning.py --data path/to/imagenet ...
    python examples/train_lightning.py --data path/to/imagenet --devices 8 ...
    python examples/train_lightning.py --tiny   # generated data, CPU: train, then resume
    # the same on 2 processes (DDP on the CPU, gloo):
    python examples/train_lightning.py --make-data /tmp/fl-tiny
    torchrun --standalone --nproc_per_node=2 examples/train_lightning.py --tiny \
        --data /tmp/fl-tiny --ckpt-dir /tmp/fl-tiny/checkpoints

--data is an ImageFolder root with train/ and val/ (or one folder used for both).

Lightning saves the state_dict() of a training loader that has one in every checkpoint,
and fit(ckpt_path=...) loads it back, so a run resumed from a mid-epoch checkpoint sees
exactly the batches the uninterrupted run would have seen: fastload's state is (epoch,
batches consumed, the shuffle's and the augmentation's seeds). On the native path (a
torchvision ImageFolder with standard transforms, as here) the random crops are a function
of (seed, epoch, sample) and come back too; on the generic path (`loader.path` says
which ran) the order does, but random transforms in worker processes draw afresh.

Under DDP, fastload shards the data itself (distributed="auto": every rank the same
number of batches, and the one state any rank saves resumes the job at any world size),
so the Trainer runs with use_distributed_sampler=False: Lightning then keeps the loader
the datamodule built instead of rebuilding it around a DistributedSampler, and
trainer.train_dataloader is that loader (with its stats()).

--tiny trains 2 epochs on a generated folder with a checkpoint every 3 optimizer steps,
then resumes a second Trainer from the mid-epoch checkpoint of the second epoch, and
checks that the resumed run's batches (hashes written by --record) are the uninterrupted
run's batches from that step on.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import warnings

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torchvision
from torchvision.transforms import v2

from fastload import DataLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ImageFolderData(pl.LightningDataModule):
    """train/ and val/ of an ImageFolder root, each read by a fastload DataLoader."""

    def __init__(self, root: str, image_size: int = 224, batch_size: int = 128, workers: int = 8):
        super().__init__()
        self.root, self.image_size, self.batch_size, self.workers = root, image_size, batch_size, workers
        self.train_loader: DataLoader | None = None  # the loader fit() iterates: its stats() live here

    def setup(self, stage: str) -> None:
        train = os.path.join(self.root, "train")
        train = train if os.path.isdir(train) else self.root
        val = os.path.join(self.root, "val")
        val = val if os.path.isdir(val) else train
        size = self.image_size
        self.train_set = torchvision.datasets.ImageFolder(train, transform=v2.Compose([
            v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(), v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]))
        self.val_set = torchvision.datasets.ImageFolder(val, transform=v2.Compose([
            v2.Resize(size * 8 // 7), v2.CenterCrop(size), v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]))

    def _device(self):
        # Batches straight onto this rank's GPU (pinned, async copy); Lightning's own
        # transfer then has nothing to do. On the CPU, torch's behaviour.
        device = self.trainer.strategy.root_device if self.trainer is not None else None
        return device if device is not None and device.type == "cuda" else None

    def train_dataloader(self) -> DataLoader:
        self.train_loader = DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True,
                                       num_workers=self.workers, device=self._device(), distributed="auto")
        return self.train_loader

    def val_dataloader(self) -> DataLoader:
        # uneven="exact": under DDP every validation image is seen exactly once.
        return DataLoader(self.val_set, batch_size=self.batch_size, shuffle=False, num_workers=self.workers,
                          device=self._device(), distributed="auto", uneven="exact")


def make_model(arch: str, num_classes: int) -> nn.Module:
    if arch == "tiny":
        from train_amp import tiny_model  # the examples' small CNN

        return tiny_model(num_classes)
    return torchvision.models.get_model(arch, num_classes=num_classes)


def batch_hash(images: torch.Tensor, labels: torch.Tensor) -> str:
    """A short hash of a batch's labels and pixels: equal only for the same samples and crops."""
    digest = hashlib.sha256(labels.cpu().contiguous().numpy().tobytes())
    digest.update(images.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class Classifier(pl.LightningModule):
    def __init__(self, arch: str, num_classes: int, lr: float, record: str | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["record"])
        self.model = make_model(arch, num_classes)
        self.criterion = nn.CrossEntropyLoss()
        self.record = record  # write one line per training batch here (per rank)

    def forward(self, x):
        return self.model(x)

    def on_fit_start(self):
        if self.record:
            open(f"{self.record}.rank{self.global_rank}", "w").close()  # this fit's batches only

    def training_step(self, batch, batch_idx):
        images, labels = batch
        if self.record:
            with open(f"{self.record}.rank{self.global_rank}", "a") as f:
                f.write(json.dumps({"epoch": self.current_epoch, "batch": batch_idx, "step": self.global_step,
                                    "labels": labels.tolist(), "hash": batch_hash(images, labels)}) + "\n")
        loss = self.criterion(self(images), labels)  # under bf16-mixed: autocast by Lightning
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        logits = self(images)
        self.log("val_loss", self.criterion(logits, labels), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == labels).float().mean(), sync_dist=True, prog_bar=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=1e-4)
        return optimizer


def launch_settings(devices: int) -> dict:
    """Trainer arguments for how the script was started: torchrun (its environment says the
    processes per node and the node count), --devices N (Lightning launches them), or one."""
    if "LOCAL_WORLD_SIZE" in os.environ:  # torchrun
        per_node = int(os.environ["LOCAL_WORLD_SIZE"])
        nodes = int(os.environ.get("WORLD_SIZE", per_node)) // per_node
    else:
        per_node, nodes = devices, 1
    distributed = per_node * nodes > 1
    return {"accelerator": "gpu" if torch.cuda.is_available() else "cpu", "devices": per_node, "num_nodes": nodes,
            "strategy": "ddp" if distributed else "auto",
            "use_distributed_sampler": False}  # fastload shards by rank itself


def fit(args, ckpt_path: str | None = None, record: str | None = None) -> pl.Trainer:
    """One Trainer.fit; returns the trainer (its train_dataloader is the fastload loader)."""
    data = ImageFolderData(args.data, args.image_size, args.batch_size, args.workers)
    data.setup("fit")
    model = Classifier(args.arch, len(data.train_set.classes), args.lr, record=record)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, filename="{epoch}-{step}", save_top_k=-1,
                                               every_n_train_steps=args.ckpt_every, save_last=True)
    trainer = pl.Trainer(precision="bf16-mixed", accumulate_grad_batches=args.accumulate,
                         max_epochs=args.max_epochs, callbacks=[checkpoints], default_root_dir=args.ckpt_dir,
                         logger=not args.tiny, enable_progress_bar=not args.tiny, enable_model_summary=not args.tiny,
                         num_sanity_val_steps=0 if args.tiny else 2, log_every_n_steps=1 if args.tiny else 50,
                         **launch_settings(args.devices))
    with warnings.catch_warnings():
        if args.tiny:
            warnings.simplefilter("ignore")  # few-workers and small-dataset hints
        trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    loader = trainer.train_dataloader
    assert loader is data.train_loader  # not rebuilt: the datamodule's reference is the loader that ran
    if trainer.is_global_zero:
        state = loader.state_dict()
        print(f"train loader: {loader.path}\nits state: epoch {state['epoch']}, "
              f"{state['batches_consumed']} batches consumed")
        print(loader.stats())
    loader.close()  # the engine threads end now, not at exit
    return trainer


def make_data(root: str) -> str:
    """Tiny train/ and val/ ImageFolders of generated JPEGs."""
    from train_amp import make_tiny_folder  # the examples' tiny data generator

    make_tiny_folder(os.path.join(root, "train"), classes=2, per_class=16)
    make_tiny_folder(os.path.join(root, "val"), classes=2, per_class=4)
    return root


def read_record(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f]


def check_resume(full: list, resumed: list, step: int, pixels: bool = True) -> int:
    """Raises unless `resumed` (batches after resuming at optimizer step `step`) is exactly
    the uninterrupted run's batches from that step on; returns their count. pixels=False
    compares positions and labels only (the generic path's random augmentation in worker
    processes is not restored by a resume; the native path's is)."""
    start = next((i for i, r in enumerate(full) if r["step"] >= step), len(full))
    expected = full[start:]
    if not pixels:
        expected, resumed = ([{k: v for k, v in r.items() if k != "hash"} for r in rs] for rs in (expected, resumed))
    if resumed != expected:
        first = next((i for i, (a, b) in enumerate(zip(expected, resumed)) if a != b),
                     min(len(expected), len(resumed)))
        got = resumed[first] if first < len(resumed) else None
        want = expected[first] if first < len(expected) else None
        raise AssertionError(
            f"the resumed run saw other batches than the uninterrupted one: {len(resumed)} batches after step {step}, "
            f"expected {len(expected)}; first difference at batch {first}: {got} vs {want}")
    return len(expected)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="ImageFolder root with train/ and val/, or one folder for both")
    parser.add_argument("--tiny", action="store_true", help="generated data, tiny model, CPU: train, then resume")
    parser.add_argument("--make-data", metavar="DIR", help="write the tiny data to DIR/train, DIR/val and exit")
    parser.add_argument("--arch", default="resnet50", help="a torchvision.models classifier, or 'tiny'")
    parser.add_argument("--max-epochs", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=128, help="per process")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="per process")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--devices", type=int, default=1, help="processes Lightning launches (not under torchrun)")
    parser.add_argument("--ckpt-dir", default="checkpoints")
    parser.add_argument("--ckpt-every", type=int, default=1000, help="optimizer steps between checkpoints")
    parser.add_argument("--resume", metavar="CKPT", help="a checkpoint to continue from (e.g. CKPT_DIR/last.ckpt)")
    parser.add_argument("--record", metavar="PREFIX",
                        help="write a line per training batch (epoch, step, labels, hash) to PREFIX.rank<R>")
    args = parser.parse_args(argv)

    if args.make_data:
        print(f"wrote {make_data(args.make_data)}/train and /val")
        return {"data": args.make_data}
    if not args.tiny:
        if not args.data:
            parser.error("--data is required (or --tiny)")
        trainer = fit(args, ckpt_path=args.resume, record=args.record)
        return {"global_step": trainer.global_step}

    # --tiny: an uninterrupted run with checkpoints, then a run resumed from one of them.
    work = tempfile.mkdtemp(prefix="fastload-lightning-")
    processes = int(os.environ.get("WORLD_SIZE", "1")) > 1 or args.devices > 1
    if processes and (not args.data or args.ckpt_dir == parser.get_default("ckpt_dir")):
        parser.error("--tiny with several processes needs --data (from --make-data DIR) and --ckpt-dir: "
                     "every process must see the same data and checkpoints")
    if not args.data:
        args.data = make_data(os.path.join(work, "data"))
    args.arch = "tiny" if args.arch == "resnet50" else args.arch
    args.image_size, args.batch_size = min(args.image_size, 32), min(args.batch_size, 4)
    args.workers, args.max_epochs = min(args.workers, 2), min(args.max_epochs, 2)
    args.accumulate, args.ckpt_every = max(args.accumulate, 2), min(args.ckpt_every, 3)
    record = args.record or os.path.join(work, "batches")
    ckpt_root = os.path.join(work, "checkpoints") if not processes else args.ckpt_dir
    if os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
        for run in ("full", "resumed"):  # checkpoints of an earlier run would be taken for this one's
            shutil.rmtree(os.path.join(ckpt_root, run), ignore_errors=True)

    args.ckpt_dir = os.path.join(ckpt_root, "full")
    pl.seed_everything(0, verbose=False)
    trainer = fit(args, record=record + ".full")
    rank = trainer.global_rank
    # The last checkpoint taken inside an epoch (not at its end).
    steps_per_epoch = math.ceil(trainer.num_training_batches / args.accumulate)
    saved = glob.glob(os.path.join(args.ckpt_dir, "*step=*.ckpt"))
    steps = sorted(int(re.search(r"step=(\d+)", p).group(1)) for p in saved)
    mid = [s for s in steps if s % steps_per_epoch != 0]
    if not mid:
        raise SystemExit(f"no mid-epoch checkpoint among steps {steps}: change --ckpt-every")
    step = mid[-1]
    ckpt = glob.glob(os.path.join(args.ckpt_dir, f"*step={step}.ckpt"))[0]

    args.ckpt_dir = os.path.join(ckpt_root, "resumed")
    pl.seed_everything(1, verbose=False)  # another process would start from another RNG state
    resumed = fit(args, ckpt_path=ckpt, record=record + ".resumed")
    native = resumed.train_dataloader.path.startswith("native")
    count = check_resume(read_record(f"{record}.full.rank{rank}"), read_record(f"{record}.resumed.rank{rank}"), step,
                         pixels=native)
    if trainer.is_global_zero:
        print(f"resume: from {os.path.basename(ckpt)} (epoch {step // steps_per_epoch}, "
              f"{(step % steps_per_epoch) * args.accumulate} of {trainer.num_training_batches} batches done), "
              f"the {count} batches after it equal the uninterrupted run's "
              f"({'samples and pixels' if native else 'positions and labels'}, {trainer.world_size} process(es))")
    return {"record": record, "step": step, "checkpoint": ckpt, "batches_after": count,
            "path": resumed.train_dataloader.path}


if __name__ == "__main__":
    main()
