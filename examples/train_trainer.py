"""transformers' Trainer on an image folder, unmodified: run it under `python -m fastload run`.

Hugging Face's image-classification recipe (its run_image_classification.py, cut to its
shape): `datasets.load_dataset("imagefolder")`, torchvision transforms applied by
`set_transform`, a collate_fn that stacks `pixel_values` and `labels`, a ResNet built from
its config, `Trainer.train()`. The script never names fastload; run it under
`python -m fastload run` and the Trainer's loaders are fastload's, on the native path
(the collate_fn is followed around the engine's batch), the epoch resumed from a
checkpoint included:

    python -m fastload run examples/train_trainer.py --tiny                # CPU, generated data
    python -m fastload run examples/train_trainer.py --tiny --resume       # a new run resumes it
    torchrun --nproc_per_node 2 -m fastload run examples/train_trainer.py --tiny   # 2 CPU ranks (gloo)
    python examples/train_trainer.py --tiny                                # the same, torch's loaders

`--tiny` trains --steps steps with a checkpoint every --save-steps; `--resume` resumes a new
Trainer from the checkpoint at --resume-step and checks that the batches it trains on after
it are the uninterrupted run's (the same samples, the same random crops and flips: a hash
of each batch's labels and pixels). `--record FILE` writes each trained batch (step, sample
indices, hash) to FILE.rankN, one JSON line each. `--data-only` only iterates the Trainer's
training loader (a throughput measurement: benchmarks/frameworks.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torchvision import transforms as T

from framework_common import common_parser, tiny_folder_unless

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def image_dataset(root: str, size: int, cache: str):
    """Hugging Face's imagefolder dataset with the recipe's train transforms (set_transform)."""
    import datasets

    dataset = datasets.load_dataset("imagefolder", data_dir=root, split="train", cache_dir=cache)
    train_transforms = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                                  T.Normalize(MEAN, STD)])

    def preprocess(batch):
        batch["pixel_values"] = [train_transforms(image.convert("RGB")) for image in batch["image"]]
        return batch

    dataset.set_transform(preprocess)
    return dataset


def collate_fn(examples):
    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]),
            "labels": torch.tensor([e["label"] for e in examples])}


class Recorder:
    """Remembers what each training step's batch held (labels and a hash of the pixels)."""

    def __init__(self) -> None:
        self.steps = []

    def add(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> None:
        digest = hashlib.sha1(pixel_values.detach().float().cpu().numpy().tobytes()
                              + labels.cpu().numpy().tobytes()).hexdigest()[:12]
        self.steps.append({"labels": labels.tolist(), "hash": digest})


def model_for(classes: int, recorder: Recorder, tiny: bool):
    """A ResNet from its config (no download), recording the batches it trains on."""
    import transformers

    config = transformers.ResNetConfig(num_channels=3, embedding_size=16 if tiny else 32,
                                       hidden_sizes=[16, 32] if tiny else [32, 64, 128, 256],
                                       depths=[1, 1] if tiny else [1, 1, 1, 1], layer_type="basic",
                                       num_labels=classes)

    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(config)

    def record(module, args, kwargs):
        if module.training:
            recorder.add(kwargs["pixel_values"], kwargs["labels"])

    model.register_forward_pre_hook(record, with_kwargs=True)
    return model


def main(argv=None) -> dict:
    parser = common_parser(__doc__, image_size=16, per="device",
                           work=os.path.join(tempfile.gettempdir(), "fastload-trainer-example"))
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps (max_steps)")
    parser.add_argument("--save-steps", type=int, default=3)
    parser.add_argument("--resume", action="store_true", help="resume from --resume-step's checkpoint, compare")
    parser.add_argument("--resume-step", type=int, default=6)
    args = parser.parse_args(argv)
    import transformers

    rank = int(os.environ.get("RANK", "0"))
    root = tiny_folder_unless(args.data, args.work, rank)
    dataset = image_dataset(root, args.image_size, os.path.join(args.work, f"hf-cache-{rank}"))
    recorder = Recorder()
    model = model_for(dataset.features["label"].num_classes, recorder, args.tiny)
    output = os.path.join(args.work, "checkpoints")
    training = transformers.TrainingArguments(
        output_dir=output, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
        save_strategy="steps", save_steps=args.save_steps, learning_rate=1e-3, use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=args.workers, remove_unused_columns=False, report_to=[], logging_strategy="no",
        disable_tqdm=True, seed=0,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ and not torch.cuda.is_available() else None)
    trainer = transformers.Trainer(model=model, args=training, train_dataset=dataset, data_collator=collate_fn)
    loader = trainer.get_train_dataloader()
    base = getattr(loader, "base_dataloader", loader)
    print(f"train loader: {getattr(base, 'path', 'torch')}", flush=True)
    if args.data_only:
        start, images = time.perf_counter(), 0
        for batch in loader:
            images += len(batch["labels"])
        seconds = time.perf_counter() - start
        print(f"data only: {images} images in {seconds:.2f} s, {images / seconds:.1f} img/s")
        return {"images": images, "seconds": seconds}

    start = time.perf_counter()
    checkpoint = os.path.join(output, f"checkpoint-{args.resume_step}") if args.resume else None
    trainer.train(resume_from_checkpoint=checkpoint)
    seconds = time.perf_counter() - start
    print(f"trained {len(recorder.steps)} steps in {seconds:.2f} s", flush=True)
    if args.record:
        with open(f"{args.record}.rank{rank}", "w") as f:
            for step in recorder.steps:
                f.write(json.dumps(step) + "\n")
    if args.resume:
        compare(recorder.steps, os.path.join(args.work, f"uninterrupted.rank{rank}"), args.resume_step)
    else:
        with open(os.path.join(args.work, f"uninterrupted.rank{rank}"), "w") as f:
            json.dump(recorder.steps, f)
    return {"steps": len(recorder.steps), "seconds": seconds}


def compare(resumed, uninterrupted_file: str, resume_step: int) -> None:
    """The batches trained on after the checkpoint are the uninterrupted run's (or exit 1)."""
    with open(uninterrupted_file) as f:
        uninterrupted = json.load(f)
    same = resumed == uninterrupted[resume_step:]
    print(f"resume: {len(resumed)} steps after step {resume_step}, "
          f"{'equal to' if same else 'DIFFERENT from'} the uninterrupted run's (samples and pixels)", flush=True)
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
