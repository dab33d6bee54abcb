"""DDP training with fastload: torchrun, AMP, a DDP model, checkpoints with the loader state.

Runs on CPU (gloo, bfloat16 autocast) in a few seconds on tiny generated data, and the
same way on GPUs (nccl, device batches, float16/bfloat16 autocast):

    # tiny data (an image folder and the same images as WebDataset shards), then train
    python examples/train_ddp.py --make-data /tmp/fl-demo
    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py \
        --data "/tmp/fl-demo/shards/train-{0000..0003}.tar" --epochs 2 --ckpt /tmp/fl-demo/ckpt.pt
    # interrupted mid-epoch? resume exactly where the last checkpoint was taken, with any
    # number of processes (the loader redistributes the samples not yet seen):
    torchrun --standalone --nproc_per_node=3 examples/train_ddp.py \
        --data "/tmp/fl-demo/shards/train-{0000..0003}.tar" --epochs 2 --ckpt /tmp/fl-demo/ckpt.pt --resume

--data is an ImageFolder-layout folder or a tar shard pattern. --stop-after N simulates a
crash after N steps (a checkpoint is written every --save-every steps).
"""

from __future__ import annotations

import argparse
import datetime
import io
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import fastload
from fastload import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_data(root: str, classes: int = 3, per_class: int = 24) -> None:
    """A tiny ImageFolder of random JPEGs, and the same images as 4 tar shards."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    folder = os.path.join(root, "folder")
    for c in range(classes):
        os.makedirs(os.path.join(folder, f"class{c}"), exist_ok=True)
        for i in range(per_class):
            # Each class has its own mean colour, so there is something to learn.
            pixels = np.clip(rng.normal(60 + 70 * c, 40, (40 + i % 7, 48, 3)), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
            with open(os.path.join(folder, f"class{c}", f"{i:04d}.jpg"), "wb") as f:
                f.write(buf.getvalue())
    n = classes * per_class
    paths = fastload.write_shards(folder, os.path.join(root, "shards", "train-%04d.tar"), maxcount=-(-n // 4))
    print(f"wrote {folder} ({n} images) and {len(paths)} shards: "
          f"{os.path.join(root, 'shards', 'train-{0000..%04d}.tar' % (len(paths) - 1))}")


class TinyCNN(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--make-data", metavar="DIR", help="write tiny demo data to DIR and exit")
    p.add_argument("--data", help="ImageFolder root or tar shard pattern")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8, help="per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--size", type=int, default=32, help="training crop size")
    p.add_argument("--ckpt", default="ckpt.pt")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--save-every", type=int, default=2, help="steps between checkpoints")
    p.add_argument("--stop-after", type=int, default=None, help="simulate a crash after N steps")
    p.add_argument("--uneven", default="pad", choices=["pad", "drop", "exact"])
    args = p.parse_args()
    if args.make_data:
        make_data(args.make_data)
        return
    if not args.data:
        p.error("--data is required (or --make-data DIR first)")

    cuda = torch.cuda.is_available()
    if "RANK" in os.environ:
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    log = print if rank == 0 else (lambda *a, **k: None)

    train_transforms = [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
    if ".tar" in args.data:
        dataset = fastload.TarShards(args.data, transforms=train_transforms, progress=rank == 0)
        classes = int(dataset.index.labels.max()) + 1
    else:
        dataset = fastload.ImageFolder(args.data, transforms=train_transforms)
        classes = len(dataset.classes)
    # distributed="auto": each rank gets its share of a global per-epoch permutation, with
    # the same number of batches on every rank (uneven=...), so no collective can hang.
    loader = fastload.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=False,
                                 num_workers=2, distributed="auto", uneven=args.uneven,
                                 device=device if cuda else None)
    log(f"{world} process(es), {len(dataset)} samples, {len(loader)} steps/epoch, path: {loader.path}")

    model = TinyCNN(classes).to(device)
    ddp = nn.parallel.DistributedDataParallel(model) if dist.is_initialized() else model
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    start_epoch = 0
    if args.resume and os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, map_location=device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        # One state describes the whole job: any world size resumes from rank 0's state.
        loader.load_state_dict(ckpt["loader"])
        start_epoch = ckpt["loader"]["epoch"]
        log(f"resumed: epoch {start_epoch}, {ckpt['loader']['batches_consumed']} batches already consumed "
            f"(saved by {ckpt['world']} process(es))")

    def save():
        if rank == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict(), "world": world}
            torch.save(state, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)  # a crash mid-save keeps the last good one

    autocast_dtype = torch.bfloat16 if not cuda or torch.cuda.is_bf16_supported() else torch.float16
    steps = 0
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)  # keeps a pending resume of this epoch
        total, correct, loss_sum = 0, 0, 0.0
        for images, labels in loader:
            images = images.to(device, non_blocking=True).float()
            labels = labels.to(device, non_blocking=True)
            with torch.autocast(device_type=device.type, dtype=autocast_dtype):
                logits = ddp(images)
                loss = F.cross_entropy(logits, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP's all_reduce: every rank must take this step
            opt.step()
            total += labels.numel()
            correct += int((logits.argmax(1) == labels).sum())
            loss_sum += float(loss.detach()) * labels.numel()
            steps += 1
            if steps % args.save_every == 0:
                save()
            if args.stop_after is not None and steps >= args.stop_after:
                log(f"stopping after {steps} steps (simulated crash); resume with --resume")
                if dist.is_initialized():
                    dist.destroy_process_group()
                return
        stats = torch.tensor([total, correct, loss_sum], dtype=torch.float64)
        if dist.is_initialized():
            dist.all_reduce(stats)
        log(f"epoch {epoch}: {int(stats[0])} samples, loss {stats[2] / max(stats[0], 1):.3f}, "
            f"accuracy {stats[1] / max(stats[0], 1):.2f}")
        save()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
