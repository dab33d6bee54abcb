"""Each framework's image-classification recipe, unmodified, through its own loader and
through `python -m fastload run`: data-only throughput and a short training run, paired.

    PYTHONPATH=. python benchmarks/frameworks.py [--frameworks accelerate,trainer,timm,lightning]
        [--rounds 3] [--images 512] [--steps 24] [--batch-size 32] [--workers 2] [--data DIR]

The recipes (each the framework's usual shape, float32 batches of 224x224 images, the same
generated ImageNet-like JPEGs, batch size and worker count for every contender):

- accelerate: a torchvision ImageFolder with RandomResizedCrop, flip, ToTensor, Normalize,
  torch's DataLoader, `accelerator.prepare(model, optimizer, loader)`, the loop with
  `accelerator.backward`.
- trainer: Hugging Face's image-classification recipe: `load_dataset("imagefolder")`,
  the same transforms by `set_transform`, a collate_fn stacking `pixel_values`, a small
  ResNet from its config, `Trainer(max_steps=...)`.
- timm: timm's train.py data path: `create_dataset`, `create_loader` with its defaults
  (`use_prefetcher=True`: uint8 `ToNumpy`, `fast_collate`, normalisation by the
  PrefetchLoader).
- lightning: a LightningDataModule returning torch's DataLoader over the accelerate
  recipe's dataset, a LightningModule, `pl.Trainer(max_steps=...)` on the CPU.

Every recipe trains the same tiny CNN (a 4x average pool, two convolutions), so that a CPU
training step is mostly the loader's wait, as a GPU step of a real model is: the training
run shows what the loader changes, on the same 2 cores the model uses.

This file is also the unmodified script: `--child NAME` runs one recipe and prints one JSON
line (the loader's path, data-only img/s over --images images after the first batch and
CPU ms per image of that pass, worker processes included (steadier than img/s when others
share the machine: the ratio is torch's CPU over fastload's), the
training run's wall time over --steps steps from building the loader (or the framework's
trainer) to the end, and its steady img/s after the first step; all timed inside the
process, after imports). Each round runs,
per framework, `python benchmarks/frameworks.py --child NAME` (the framework's own loader)
and `python -m fastload run benchmarks/frameworks.py --child NAME` (the same script,
fastload's loader), in an order that alternates every round; the report gives medians
and the median over rounds of each paired ratio, with the load average at start and end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

import torch
import torch.nn as nn

from timing import cpu_seconds

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
FRAMEWORKS = ("accelerate", "trainer", "timm", "lightning")
SIZE = 224


def _train_transform():
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def _small_cnn(classes: int) -> nn.Module:
    """The model every recipe trains: tiny (a 4x average pool first), so that a CPU step is
    input-bound as a GPU step of a real model is, and the loader's effect shows."""
    return nn.Sequential(nn.AvgPool2d(4), nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, classes))


class ForTrainer(nn.Module):
    """The small CNN, called as transformers' Trainer calls a model (its loss returned)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor = None) -> Dict[str, torch.Tensor]:
        logits = self.model(pixel_values)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class StepClock:
    """The time at the end of each training step: the run's steady step rate (from the end
    of the first step, so that start-up, worker launch and the first batch are left out)."""

    def __init__(self) -> None:
        self.ends: List[float] = []

    def tick(self) -> None:
        self.ends.append(time.perf_counter())

    def steady_img_s(self, batch_size: int) -> float:
        return batch_size * (len(self.ends) - 1) / (self.ends[-1] - self.ends[0])


def _loader_path(loader: Any) -> str:
    base = getattr(loader, "base_dataloader", None) or getattr(loader, "loader", None) or loader
    return getattr(base, "path", "torch: " + type(base).__module__ + "." + type(base).__name__)


def _data_only(make_loader: Any, images: int) -> Dict[str, float]:
    """img/s over `images` images after the first batch (worker start-up and tracing out),
    and CPU ms per image of the whole pass from building the loader, its workers' included
    (reaped when the loader and its iterator go: timm's are persistent)."""
    cpu = cpu_seconds()
    loader = make_loader()
    it = iter(loader)
    first = next(it)
    seen, start, total = 0, time.perf_counter(), len(first["labels"] if isinstance(first, dict) else first[1])
    for batch in it:
        labels = batch["labels"] if isinstance(batch, dict) else batch[1]
        seen += len(labels)
        if seen >= images:
            break
    rate = seen / (time.perf_counter() - start)
    del it, first, batch, loader
    gc.collect()
    return {"img_s": rate, "cpu_ms": 1000 * (cpu_seconds() - cpu) / (total + seen)}


def child_accelerate(args) -> Dict[str, Any]:
    import torch.nn.functional as F
    import torchvision
    from accelerate import Accelerator

    dataset = torchvision.datasets.ImageFolder(args.data, transform=_train_transform())
    accelerator = Accelerator(cpu=True)

    def prepared():
        torch.manual_seed(0)
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                             num_workers=args.workers, drop_last=True)
        model = _small_cnn(len(dataset.classes))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        return accelerator.prepare(model, optimizer, loader)

    measured = _data_only(lambda: prepared()[2], args.images)
    start, clock = time.perf_counter(), StepClock()
    model, optimizer, loader = prepared()
    for step, (images, labels) in enumerate(loader):
        if step == args.steps:
            break
        loss = F.cross_entropy(model(images), labels)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        clock.tick()
    return {"path": _loader_path(loader), **measured, "train_s": time.perf_counter() - start,
            "train_img_s": clock.steady_img_s(args.batch_size)}


def child_trainer(args) -> Dict[str, Any]:
    import datasets
    import transformers

    dataset = datasets.load_dataset("imagefolder", data_dir=args.data, split="train",
                                    cache_dir=os.path.join(args.work, "hf-cache"))
    transform = _train_transform()

    def preprocess(batch):
        batch["pixel_values"] = [transform(image.convert("RGB")) for image in batch["image"]]
        return batch

    def collate_fn(examples):
        return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]),
                "labels": torch.tensor([e["label"] for e in examples])}

    dataset.set_transform(preprocess)
    torch.manual_seed(0)
    model = ForTrainer(_small_cnn(dataset.features["label"].num_classes))
    training = transformers.TrainingArguments(
        output_dir=os.path.join(args.work, "trainer"), per_device_train_batch_size=args.batch_size,
        max_steps=args.steps, save_strategy="no", use_cpu=True, dataloader_num_workers=args.workers,
        dataloader_drop_last=True, remove_unused_columns=False, report_to=[], logging_strategy="no",
        disable_tqdm=True, learning_rate=1e-3)
    clock = StepClock()

    class Clock(transformers.TrainerCallback):
        loader: Any = None

        def on_train_begin(self, *args: Any, train_dataloader: Any = None, **kwargs: Any) -> None:
            Clock.loader = train_dataloader  # (the loader train() built)

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            clock.tick()

    trainer = transformers.Trainer(model=model, args=training, train_dataset=dataset, data_collator=collate_fn,
                                   callbacks=[Clock()])
    measured = _data_only(trainer.get_train_dataloader, args.images)
    start = time.perf_counter()
    trainer.train()
    return {"path": _loader_path(Clock.loader), **measured, "train_s": time.perf_counter() - start,
            "train_img_s": clock.steady_img_s(args.batch_size)}


def child_timm(args) -> Dict[str, Any]:
    import timm
    import timm.data
    import torch.nn.functional as F

    dataset = timm.data.create_dataset("", root=args.data, is_training=True)

    def loader_of():
        return timm.data.create_loader(dataset, input_size=(3, SIZE, SIZE), batch_size=args.batch_size,
                                       is_training=True, use_prefetcher=True, num_workers=args.workers,
                                       device=torch.device("cpu"))

    measured = _data_only(loader_of, args.images)
    start, clock = time.perf_counter(), StepClock()
    torch.manual_seed(0)
    model = _small_cnn(len(dataset.reader.class_to_idx))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = loader_of()
    for step, (images, labels) in enumerate(loader):
        if step == args.steps:
            break
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        clock.tick()
    return {"path": _loader_path(loader), **measured, "train_s": time.perf_counter() - start,
            "train_img_s": clock.steady_img_s(args.batch_size)}


def child_lightning(args) -> Dict[str, Any]:
    import pytorch_lightning as pl
    import torch.nn.functional as F
    import torchvision

    class Data(pl.LightningDataModule):
        def setup(self, stage: str) -> None:
            self.train_set = torchvision.datasets.ImageFolder(args.data, transform=_train_transform())

        def train_dataloader(self):
            return torch.utils.data.DataLoader(self.train_set, batch_size=args.batch_size, shuffle=True,
                                               num_workers=args.workers, drop_last=True)

    class Classifier(pl.LightningModule):
        def __init__(self, classes: int):
            super().__init__()
            self.model = _small_cnn(classes)

        def training_step(self, batch, batch_idx):
            images, labels = batch
            return F.cross_entropy(self.model(images), labels)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    clock = StepClock()

    class Clock(pl.Callback):
        def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
            clock.tick()

    data = Data()
    data.setup("fit")
    measured = _data_only(data.train_dataloader, args.images)
    start = time.perf_counter()
    torch.manual_seed(0)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, callbacks=[Clock()],
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(len(data.train_set.classes)), datamodule=data)
    return {"path": _loader_path(trainer.train_dataloader), **measured, "train_s": time.perf_counter() - start,
            "train_img_s": clock.steady_img_s(args.batch_size)}


def run_child(name: str, fastload: bool, args) -> Dict[str, Any]:
    """One recipe in a fresh process, through its own loader or under `python -m fastload run`."""
    script = [os.path.abspath(__file__), "--child", name, "--data", args.data, "--images", str(args.images),
              "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--workers", str(args.workers),
              "--work", args.work]
    cmd = [sys.executable, *(["-m", "fastload", "run"] if fastload else []), *script]
    env = {**os.environ, "FASTLOAD_SUMMARY": "0", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("{")][-1]
    return json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--data", default=None, help="an ImageFolder-layout folder (default: the generated one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=512, help="data-only images per run")
    parser.add_argument("--steps", type=int, default=24, help="training steps per run")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", default=None, help="scratch folder (Hugging Face cache, Trainer output)")
    parser.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work is None:
        import tempfile

        args.work = os.path.join(tempfile.gettempdir(), "fastload-bench-frameworks")
    if args.child:
        result = globals()[f"child_{args.child}"](args)
        print(json.dumps(result), flush=True)
        return
    if args.data is None:
        from fastload.bench.dataset import DatasetSpec, ensure_dataset

        args.data = ensure_dataset(DatasetSpec(images=2000, classes=10, seed=0)).root
    names = [n for n in args.frameworks.split(",") if n]
    print(f"data: {args.data}; batch {args.batch_size}, {args.workers} workers, float32 {SIZE}x{SIZE}; "
          f"{args.images} images data-only, {args.steps} training steps; {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {n: {"torch": [], "fastload": []} for n in names}
    for k in range(args.rounds):
        for name in names:
            order = ["torch", "fastload"] if (k + names.index(name)) % 2 == 0 else ["fastload", "torch"]
            for contender in order:
                result = run_child(name, contender == "fastload", args)
                runs[name][contender].append(result)
                print(f"round {k} {name} {contender}: {result['img_s']:.0f} img/s, {result['cpu_ms']:.1f} CPU ms/img, "
                      f"train {result['train_s']:.1f} s "
                      f"({result['train_img_s']:.0f} img/s steady); "
                      f"{result['path'][:90]}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    print("| recipe | fastload's path | data-only img/s: own loader | fastload | ratio | data-only CPU ms/img: own "
          "loader | fastload | ratio | training run wall s: own loader | fastload | speed-up "
          "| training img/s after step 1: own loader | fastload | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        own, ours = runs[name]["torch"], runs[name]["fastload"]

        def median(key: str, rows: List[Dict[str, Any]]) -> float:
            return statistics.median(r[key] for r in rows)

        def paired(key: str, invert: bool = False) -> float:  # the median of the rounds' ratios
            return statistics.median((a[key] / b[key]) if invert else (b[key] / a[key]) for a, b in zip(own, ours))

        path = ours[-1]["path"].split(" [")[0]
        print(f"| {name} | {path} | {median('img_s', own):.0f} | {median('img_s', ours):.0f} | {paired('img_s'):.2f}x "
              f"| {median('cpu_ms', own):.1f} | {median('cpu_ms', ours):.1f} | {paired('cpu_ms', invert=True):.2f}x "
              f"| {median('train_s', own):.1f} | {median('train_s', ours):.1f} | {paired('train_s', invert=True):.2f}x "
              f"| {median('train_img_s', own):.0f} | {median('train_img_s', ours):.0f} | {paired('train_img_s'):.2f}x |")

if __name__ == "__main__":
    main()
