"""Mixed-precision training fed by fastload: autocast (bf16, or fp16 with GradScaler),
gradient accumulation and channels_last, on any torchvision-style image folder.

    python examples/train_amp.py --data path/to/imagefolder --device cuda --amp bf16
    python examples/train_amp.py --tiny          # generates a small folder, runs on the CPU
    python examples/train_amp.py --tiny --profile trace.json   # + a Chrome/Perfetto trace

With --profile, torch.profiler records steps 2-5 of the first epoch (after a warm-up
step) and writes a trace that opens in https://ui.perfetto.dev or chrome://tracing: the
loader's "fastload.wait" on the main thread is the data stall, the engine threads'
"fastload.read/decode/augment" ranges say which input stage took the time.

The loader is the only fastload line: it delivers batches on the training device, in
the autocast dtype and channels_last, from the native pipeline when the transforms allow.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torchvision
from torchvision.transforms import v2

import fastload

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def tiny_model(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )


def make_tiny_folder(root: str, classes: int = 2, per_class: int = 16) -> str:
    """A small ImageFolder of random-ish JPEGs, for a CPU smoke run."""
    from PIL import Image

    generator = torch.Generator().manual_seed(0)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        for i in range(per_class):
            pixels = (torch.rand(3, 1, 1, generator=generator) * 255 * torch.linspace(0.3, 1, 48).view(1, 1, 48)
                      ).expand(3, 40, 48).to(torch.uint8)
            Image.fromarray(pixels.permute(1, 2, 0).numpy()).save(os.path.join(root, f"class{c}", f"{i}.jpg"))
    return root


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="ImageFolder root (default with --tiny: a generated one)")
    parser.add_argument("--tiny", action="store_true", help="tiny generated data and model, CPU friendly")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--amp", choices=["bf16", "fp16", "off"], default="bf16")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--profile", metavar="TRACE.json", help="write a torch.profiler trace of steps 2-5")
    args = parser.parse_args(argv)

    if args.tiny:
        args.data = args.data or make_tiny_folder(tempfile.mkdtemp(prefix="fastload-amp-"))
        args.image_size, args.batch_size = min(args.image_size, 32), min(args.batch_size, 8)
    if not args.data:
        parser.error("--data is required (or --tiny)")
    device = torch.device(args.device)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[args.amp]

    # An unchanged torchvision dataset; fastload runs it natively.
    dataset = torchvision.datasets.ImageFolder(args.data, transform=v2.Compose([
        v2.RandomResizedCrop(args.image_size), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]))
    loader = fastload.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True,
        pin_memory=device.type == "cuda", device=device, dtype=amp_dtype,
        memory_format=torch.channels_last)
    print(f"loader: {loader.path}")

    model = (tiny_model(len(dataset.classes)) if args.tiny else torchvision.models.resnet50(num_classes=len(dataset.classes)))
    model = model.to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # fp16 needs loss scaling; bf16 has float32's range and does not.
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    criterion = nn.CrossEntropyLoss()

    losses = []
    profiler = make_profiler(args.profile, device) if args.profile else None
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        model.train()
        started = time.perf_counter()
        for step, (images, labels) in enumerate(loader):
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                loss = criterion(model(images), labels) / args.accumulate
            scaler.scale(loss).backward()
            if (step + 1) % args.accumulate == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item() * args.accumulate)
            if profiler is not None and epoch == 0:
                profiler.step()
        elapsed = time.perf_counter() - started
        print(f"epoch {epoch}: loss {sum(losses[-len(loader):]) / max(1, len(loader)):.4f}, "
              f"{len(loader) * args.batch_size / elapsed:.0f} img/s")
    if profiler is not None:
        profiler.stop()
    print(loader.stats())
    return {"losses": losses, "path": loader.path, "batches": len(loader)}


def make_profiler(trace_path: str, device: torch.device) -> torch.profiler.profile:
    """A started profiler that records steps 2-5 (step 1 warms up) into `trace_path`."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(
        activities=activities, schedule=torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path))
    profiler.start()
    return profiler


if __name__ == "__main__":
    main()
