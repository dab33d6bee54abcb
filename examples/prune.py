"""Global magnitude pruning, then a short mixed-precision fine-tune fed by fastload.

The smallest-magnitude weights of every conv and linear layer, ranked together
(torch.nn.utils.prune.global_unstructured with L1Unstructured), are zeroed; a few hundred
steps of fine-tuning under autocast (bf16 on the CPU, fp16 with GradScaler on CUDA) with
gradient accumulation recover most of the loss; prune.remove then makes the zeros
permanent (plain weight tensors again, no masks or hooks), ready to save.

    python examples/prune.py --data path/to/imagenet --weights IMAGENET1K_V1 --amount 0.5 \\
        --steps 500 --batch-size 128 --accumulate 2 --out resnet18-pruned50.pt
    python examples/prune.py --tiny    # a small generated folder, a tiny CNN, CPU

--data is an ImageFolder root with train/ and val/ (or one folder used for both);
--weights names torchvision's weights for --arch (downloaded by torchvision), --checkpoint
loads a state_dict of your own instead. Loss is measured on the val loader (no shuffle,
eval transforms) before pruning, after pruning and after the fine-tune.

The train loader delivers batches in the autocast dtype (`dtype=`), on the device. On a
CPU without native bf16 (no AVX512-BF16 or AMX), bf16 autocast emulates it and can be
several times slower than float32: pass --amp off there.

Unstructured sparsity saves no time by itself in dense kernels: it is the first step
before sparse kernels, compression, or structured pruning.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.utils.prune as prune
import torchvision
from torchvision.transforms import v2

from fastload import DataLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def prunable(model: nn.Module) -> list:
    """(module, "weight") for every conv and linear layer: what global pruning ranks."""
    return [(m, "weight") for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def sparsity(params: list) -> float:
    """Fraction of zeros over the given (module, name) weights (masked or permanent)."""
    zeros = sum(int((getattr(m, name) == 0).sum()) for m, name in params)
    total = sum(getattr(m, name).numel() for m, name in params)
    return zeros / max(total, 1)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device, max_batches: int | None = None) -> float:
    """Mean cross-entropy over the loader (float32, eval mode)."""
    model.eval()
    total, count = 0.0, 0
    for step, (images, labels) in enumerate(loader):
        if max_batches is not None and step >= max_batches:
            break
        logits = model(images.to(device).float())
        total += float(nn.functional.cross_entropy(logits, labels.to(device), reduction="sum"))
        count += labels.numel()
    return total / max(count, 1)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="ImageFolder root with train/ and val/, or one folder for both")
    parser.add_argument("--tiny", action="store_true", help="small generated data, few steps, CPU")
    parser.add_argument("--arch", default="resnet18", help="a torchvision.models classifier, or 'tiny'")
    parser.add_argument("--weights", help="torchvision weights name for --arch, e.g. IMAGENET1K_V1")
    parser.add_argument("--checkpoint", help="a state_dict of your own for --arch")
    parser.add_argument("--amount", type=float, default=0.5, help="fraction of conv/linear weights to zero")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--amp", choices=["auto", "bf16", "fp16", "off"], default="auto",
                        help="auto: fp16 + GradScaler on CUDA, bf16 on the CPU")
    parser.add_argument("--steps", type=int, default=500, help="optimizer steps of fine-tuning")
    parser.add_argument("--accumulate", type=int, default=2, help="micro-batches per optimizer step")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--eval-batches", type=int, default=None, help="limit each loss measurement")
    parser.add_argument("--out", help="save the pruned, fine-tuned state_dict here")
    args = parser.parse_args(argv)

    if args.tiny:
        if not args.data:
            from train_amp import make_tiny_folder  # the examples' tiny data generator

            args.data = make_tiny_folder(tempfile.mkdtemp(prefix="fastload-prune-"), classes=2, per_class=32)
        args.image_size, args.batch_size = min(args.image_size, 32), min(args.batch_size, 8)
        args.steps, args.workers = min(args.steps, 12), min(args.workers, 2)
        args.arch = "tiny" if args.arch == "resnet18" else args.arch
        torch.manual_seed(0)  # the same random weights every run
    if not args.data:
        parser.error("--data is required (or --tiny)")
    device = torch.device(args.device)
    amp = args.amp if args.amp != "auto" else ("fp16" if device.type == "cuda" else "bf16")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[amp]

    train_root = os.path.join(args.data, "train") if os.path.isdir(os.path.join(args.data, "train")) else args.data
    val_root = os.path.join(args.data, "val") if os.path.isdir(os.path.join(args.data, "val")) else train_root
    train_set = torchvision.datasets.ImageFolder(train_root, transform=v2.Compose([
        v2.RandomResizedCrop(args.image_size), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]))
    val_set = torchvision.datasets.ImageFolder(val_root, transform=v2.Compose([
        v2.Resize(args.image_size * 8 // 7), v2.CenterCrop(args.image_size), v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]))
    on_cuda = device.type == "cuda"
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True,
                              num_workers=args.workers, pin_memory=on_cuda, device=device, dtype=amp_dtype)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
                            pin_memory=on_cuda, device=device)
    print(f"train loader: {train_loader.path}\nval loader:   {val_loader.path}")

    if args.arch == "tiny":
        from train_amp import tiny_model  # the examples' small CNN

        model = tiny_model(len(train_set.classes))
    else:
        model = torchvision.models.get_model(args.arch, weights=args.weights,
                                             **({} if args.weights else {"num_classes": len(train_set.classes)}))
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    model = model.to(device)
    params = prunable(model)

    loss_dense = evaluate(model, val_loader, device, args.eval_batches)
    prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=args.amount)
    pruned_sparsity = sparsity(params)
    loss_pruned = evaluate(model, val_loader, device, args.eval_batches)
    print(f"pruned {len(params)} conv/linear weights to {pruned_sparsity:.1%} sparsity (global L1); "
          f"val loss {loss_dense:.4f} -> {loss_pruned:.4f}")

    # Fine-tune with the masks in place: each forward uses weight_orig * weight_mask, so the
    # pruned weights stay zero while the others learn.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)  # fp16 needs loss scaling
    criterion = nn.CrossEntropyLoss()
    model.train()
    micro, step, train_losses, started = 0, 0, [], time.perf_counter()
    epoch = 0
    while step < args.steps:
        train_loader.set_epoch(epoch)
        for images, labels in train_loader:
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                loss = criterion(model(images), labels) / args.accumulate
            scaler.scale(loss).backward()
            train_losses.append(float(loss.detach()) * args.accumulate)
            micro += 1
            if micro % args.accumulate == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                if step % 50 == 0 or step == args.steps:
                    recent = sum(train_losses[-args.accumulate:]) / args.accumulate
                    print(f"step {step}/{args.steps}: train loss {recent:.4f}")
                if step == args.steps:
                    break
        epoch += 1
    elapsed = time.perf_counter() - started
    print(f"fine-tuned {step} steps ({micro} micro-batches, {amp} autocast) in {elapsed:.1f} s")

    loss_tuned = evaluate(model, val_loader, device, args.eval_batches)
    for module, name in params:
        prune.remove(module, name)  # weight = weight_orig * mask, as a plain parameter
    assert not any(hasattr(m, "weight_mask") or m._forward_pre_hooks for m, _ in params)
    final_sparsity = sparsity(params)
    print(f"val loss: dense {loss_dense:.4f}, pruned {loss_pruned:.4f}, fine-tuned {loss_tuned:.4f}; "
          f"sparsity {final_sparsity:.1%} (permanent)")
    print(train_loader.stats())
    if args.out:
        torch.save(model.state_dict(), args.out)
        print(f"saved {args.out}")
    return {"sparsity": final_sparsity, "loss_dense": loss_dense, "loss_pruned": loss_pruned,
            "loss_tuned": loss_tuned, "steps": step, "micro_batches": micro, "path": train_loader.path}


if __name__ == "__main__":
    main()
