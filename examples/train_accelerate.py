"""Hugging Face Accelerate with fastload: prepare(), gather_for_metrics, save_state/load_state.

An Accelerate training script over a torchvision ImageFolder with torchvision transforms.
`accelerator.prepare(model, optimizer, loader)` shards the loader across processes by
rebuilding it; the rebuilt loader is fastload's, on the native path, with the extras given
here (fastload/rebuild.py; docs/frameworks.md). The run trains, evaluates with
`gather_for_metrics` (each validation sample counted once, whatever the padding of the
last batches), saves the state after --stop-after steps of the last epoch (the loader's
position with it: `register_for_checkpointing`), and resumes a new run from it with
`load_state`, checking that the resumed run sees the batches the uninterrupted run saw
(the same samples with the same random crops and flips).

    python examples/train_accelerate.py --tiny                       # CPU, generated data
    python examples/train_accelerate.py --tiny --resume              # a new run resumes it
    accelerate launch examples/train_accelerate.py --data /imagenet  # GPUs: one process each
    torchrun --nproc_per_node 2 examples/train_accelerate.py --tiny  # 2 CPU processes (gloo)

With --torch-loader the script builds torch's own DataLoader (a script that never heard of
fastload); run it under `python -m fastload run` and the same loaders are fastload's:

    python -m fastload run examples/train_accelerate.py --tiny --torch-loader
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision import transforms as T

import fastload

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_tiny_folder(root: str, classes: int = 2, per_class: int = 9) -> str:
    """A small ImageFolder of JPEGs whose classes differ in colour, for a CPU run."""
    from PIL import Image

    generator = torch.Generator().manual_seed(0)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        for i in range(per_class):
            colour = torch.tensor([200.0 if c == k else 40.0 for k in range(3)]).view(3, 1, 1)
            pixels = (colour + 30 * torch.rand(3, 36, 44, generator=generator)).clamp(0, 255).to(torch.uint8)
            Image.fromarray(pixels.permute(1, 2, 0).numpy()).save(os.path.join(root, f"class{c}", f"{i}.jpg"))
    return root


def loaders(root: str, size: int, batch_size: int, workers: int, torch_loader: bool):
    train = torchvision.datasets.ImageFolder(root, transform=T.Compose([
        T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]))
    val = torchvision.datasets.ImageFolder(root, transform=T.Compose([
        T.Resize(size), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)]))
    if torch_loader:  # a script that knows only torch (run it under `python -m fastload run`)
        return (torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True, num_workers=workers),
                torch.utils.data.DataLoader(val, batch_size=batch_size, num_workers=workers))
    # The augmentation seed (random crops and flips) is a fastload extra: it survives prepare().
    return (fastload.DataLoader(train, batch_size=batch_size, shuffle=True, num_workers=workers, seed=0),
            fastload.DataLoader(val, batch_size=batch_size, num_workers=workers))


def resumable(prepared) -> bool:
    """Accelerate's prepared loader has the fastload loader's state (to save and load)."""
    return hasattr(prepared.base_dataloader, "state_dict")


def fingerprint(images: torch.Tensor, labels: torch.Tensor) -> str:
    return hashlib.sha1(images.float().cpu().numpy().tobytes() + labels.cpu().numpy().tobytes()).hexdigest()[:12]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="ImageFolder root (default with --tiny: a generated one)")
    parser.add_argument("--tiny", action="store_true", help="tiny generated data and model, CPU friendly")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--stop-after", type=int, default=3, help="steps of the second epoch before save_state")
    parser.add_argument("--torch-loader", action="store_true", help="build torch's DataLoader (see above)")
    parser.add_argument("--resume", action="store_true",
                        help="a second run: resume from the state the first one saved, compare the batches")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "fastload-accelerate-example"),
                        help="where --tiny data and the checkpoint go (shared by the processes)")
    args = parser.parse_args(argv)
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    # A seedable sampler shuffles epoch e with (seed, e): a resumed epoch is the same epoch.
    accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                              dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    root = args.data
    if root is None:
        root = os.path.join(args.work, "data")
        with accelerator.main_process_first():  # one process writes it, the others then read it
            if accelerator.is_main_process:
                make_tiny_folder(root)

    def build():
        set_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train, val = loaders(root, args.image_size, args.batch_size, args.workers, args.torch_loader)
        return accelerator.prepare(model, optimizer, train, val)

    model, optimizer, train, val = build()
    accelerator.print(f"train loader: {getattr(train.base_dataloader, 'path', 'torch')}")
    if resumable(train):
        # save_state keeps the loader's position (prepared, it answers for fastload's state).
        accelerator.register_for_checkpointing(train)
    checkpoint, seen_file = os.path.join(args.work, "state"), os.path.join(args.work, "batches.json")
    last = args.epochs - 1
    if args.resume:
        return resume(accelerator, train, checkpoint, seen_file, last, args.stop_after)

    seen = []
    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        model.train()
        for step, (images, labels) in enumerate(train):
            loss = F.cross_entropy(model(images), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if epoch == last:
                seen.append(fingerprint(images, labels))
                if step + 1 == args.stop_after:
                    accelerator.save_state(checkpoint)
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in val:
                predictions, labels = accelerator.gather_for_metrics((model(images).argmax(1), labels))
                correct += int((predictions == labels).sum())
                total += len(labels)
        accelerator.print(f"epoch {epoch}: loss {loss.item():.3f}, validation {correct}/{total} correct")
    assert total == len(val.dataset), f"gather_for_metrics counted {total} samples, the dataset has {len(val.dataset)}"
    with open(f"{seen_file}.{accelerator.process_index}", "w") as f:
        json.dump(seen, f)
    return {"path": getattr(train.base_dataloader, "path", "torch"), "validated": total}


def resume(accelerator, train, checkpoint: str, seen_file: str, epoch: int, stop_after: int) -> dict:
    """A new run (as after a crash) resumes `epoch` after `stop_after` steps from the saved
    state and compares its batches with the ones the saved run took."""
    accelerator.load_state(checkpoint)
    train.set_epoch(epoch)
    # A fastload loader resumes from its own state, right after the last batch the saved run
    # took; torch's is rebuilt to skip the batches already seen (Accelerate's recipe).
    rest = train if resumable(train) else accelerator.skip_first_batches(train, stop_after)
    resumed = [fingerprint(images, labels) for images, labels in rest]
    with open(f"{seen_file}.{accelerator.process_index}") as f:
        seen = json.load(f)
    same = resumed == seen[stop_after:]
    accelerator.print(f"resume: {len(resumed)} batches after step {stop_after} of epoch {epoch}, "
                      f"{'equal to' if same else 'DIFFERENT from'} the uninterrupted run's")
    if not same:
        raise SystemExit("the resumed run saw other batches than the uninterrupted run")
    return {"resumed": len(resumed)}


if __name__ == "__main__":
    main()
