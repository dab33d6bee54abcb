"""timm's training loop, unmodified: run it under `python -m fastload run`.

The shape of timm's train.py cut to its data path: `timm.data.create_dataset` (timm's
ImageDataset over an image folder), `timm.data.create_loader` with timm's defaults
(`use_prefetcher=True`: RandomResizedCrop, flip and colour jitter ending in a uint8
`ToNumpy`, `fast_collate`, and the `PrefetchLoader` normalising on the device), a
`DistributedSampler` under torchrun, `timm.create_model`, and the epoch loop with
`loader.sampler.set_epoch`. The script never names fastload; under
`python -m fastload run` timm's loader is fastload's, on the native path (the engine makes
the uint8 batch fast_collate would; the prefetcher normalises it as before):

    python -m fastload run examples/train_timm.py --tiny              # CPU, generated data
    torchrun --nproc_per_node 2 -m fastload run examples/train_timm.py --tiny   # 2 CPU ranks (gloo)
    python examples/train_timm.py --tiny                              # the same, torch's loader
    python -m fastload run examples/train_timm.py --data /imagenet/train --model resnet50 --image-size 224

`--record FILE` writes each trained batch's labels (epoch, step) to FILE.rankN as JSON
lines (with --tiny each class has one image: labels are sample indices); `--data-only`
only iterates the loader (a throughput measurement: benchmarks/frameworks.py).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import torch
import torch.nn.functional as F

from framework_common import common_parser, tiny_folder_unless


def main(argv=None) -> dict:
    parser = common_parser(__doc__, image_size=32, per="process",
                           work=os.path.join(tempfile.gettempdir(), "fastload-timm-example"))
    parser.add_argument("--model", default=None, help="timm model name (default: test_resnet with --tiny, else resnet18)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: whole epochs)")
    args = parser.parse_args(argv)
    import timm
    import timm.data

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available() else \
        torch.device("cpu")
    if distributed:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = torch.distributed.get_rank() if distributed else 0
    root = tiny_folder_unless(args.data, args.work, rank)

    dataset = timm.data.create_dataset("", root=root, is_training=True)
    classes = len(dataset.reader.class_to_idx)
    torch.manual_seed(0)
    model = timm.create_model(args.model or ("test_resnet" if args.tiny else "resnet18"), num_classes=classes).to(device)
    loader = timm.data.create_loader(
        dataset, input_size=(3, args.image_size, args.image_size), batch_size=args.batch_size, is_training=True,
        use_prefetcher=True, num_workers=args.workers, distributed=distributed, device=device)
    inner = getattr(loader, "loader", loader)  # (inside timm's PrefetchLoader)
    print(f"[rank {rank}] train loader: {getattr(inner, 'path', 'torch')}", flush=True)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    record, images, start = [], 0, time.perf_counter()
    for epoch in range(args.epochs):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        model.train()
        for step, (input, target) in enumerate(loader):
            if args.steps and step == args.steps:
                break
            images += len(target)
            if args.data_only:
                continue
            loss = F.cross_entropy(model(input), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record.append({"epoch": epoch, "step": step, "labels": target.tolist()})
        if not args.data_only:
            print(f"[rank {rank}] epoch {epoch}: loss {loss.item():.3f}", flush=True)
    seconds = time.perf_counter() - start
    what = "data only" if args.data_only else "trained"
    print(f"[rank {rank}] {what}: {images} images in {seconds:.2f} s, {images / seconds:.1f} img/s", flush=True)
    if args.record:
        with open(f"{args.record}.rank{rank}", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in record)
    if distributed:
        torch.distributed.destroy_process_group()
    return {"images": images, "seconds": seconds}


if __name__ == "__main__":
    main()
