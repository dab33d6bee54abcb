"""GPU input pipelines side by side, one run: fastload decode_on="cpu" / "cpu+gpu" /
"gpu", torchvision's GPU JPEG decode + v2 transforms on the GPU, and DALI's GPU pipeline
(where nvidia.dali imports). Train pipeline (RandomResizedCrop 224 + flip + normalize),
bfloat16 NCHW batches on the GPU, same images, batch size and CPU threads for all.

    python benchmarks/gpu.py --images 2000 --batch-size 128 --threads 16 --json out.json

Run by scripts/gpu_check.sh on a lent GPU; prints one table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, Dict, Iterator, List

import torch

from fastload.bench.dataset import DatasetSpec, ensure_dataset
from fastload.bench.report import format_table, machine_info

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def fastload_batches(root: str, decode_on: str, args) -> Iterator[torch.Tensor]:
    import fastload
    from fastload import transforms as T

    dataset = fastload.ImageFolder(root, transforms=[T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                                     T.Normalize(MEAN, STD)])
    loader = fastload.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.threads,
                                 drop_last=True, device="cuda", dtype=torch.bfloat16, decode_on=decode_on)
    print(f"  fastload {decode_on}: {loader.path}", file=sys.stderr)
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for images, _ in loader:
            yield images
        epoch += 1


def torchvision_gpu_batches(root: str, args) -> Iterator[torch.Tensor]:
    """torchvision.io.decode_jpeg(device="cuda") in batches, v2 transforms per image on the GPU."""
    import torchvision
    from torchvision.io import decode_jpeg, read_file
    from torchvision.transforms import v2

    dataset = torchvision.datasets.ImageFolder(root)
    transform = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    order = torch.randperm(len(dataset))
    position = 0
    while True:
        if position + args.batch_size > len(order):
            order, position = torch.randperm(len(dataset)), 0
        paths = [dataset.samples[i][0] for i in order[position:position + args.batch_size]]
        position += args.batch_size
        images = decode_jpeg([read_file(p) for p in paths], device="cuda")
        yield torch.stack([transform(image) for image in images]).to(torch.bfloat16)


def dali_batches(root: str, args) -> Iterator[torch.Tensor]:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=args.batch_size, num_threads=args.threads, device_id=0)
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels

    pipe = pipeline()
    pipe.build()
    iterator = DALIGenericIterator(pipe, ["images", "labels"], reader_name="reader", auto_reset=True)
    while True:
        for batch in iterator:
            yield batch[0]["images"]


def measure(name: str, make: Callable[[], Iterator[torch.Tensor]], images: int, batch_size: int) -> Dict:
    row: Dict = {"contender": name}
    try:
        started = time.perf_counter()
        batches = make()
        first = next(batches)
        torch.cuda.synchronize()
        row["first_batch_s"] = time.perf_counter() - started
        for _ in range(2):  # warm-up
            next(batches)
        torch.cuda.synchronize()
        count, started = 0, time.perf_counter()
        while count < images:
            batch = next(batches)
            count += batch.shape[0]
        torch.cuda.synchronize()
        row["img_per_s"] = count / (time.perf_counter() - started)
        row["dtype"] = str(first.dtype).replace("torch.", "")
        row["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    except Exception as error:  # noqa: BLE001 - a failing contender is a row, not a crash
        row["error"] = f"{type(error).__name__}: {error}"[:200]
    print(f"  {name}: {row}", file=sys.stderr)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="ImageFolder root (default: generated)")
    parser.add_argument("--images", type=int, default=2000, help="timed images per contender")
    parser.add_argument("--dataset-images", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device", file=sys.stderr)
        return 2
    root = args.data or ensure_dataset(DatasetSpec(images=args.dataset_images), progress=True).root
    contenders = {
        "fastload cpu": lambda: fastload_batches(root, "cpu", args),
        "fastload cpu+gpu": lambda: fastload_batches(root, "cpu+gpu", args),
        "fastload gpu (nvJPEG)": lambda: fastload_batches(root, "gpu", args),
        "torchvision GPU decode": lambda: torchvision_gpu_batches(root, args),
        "DALI GPU": lambda: dali_batches(root, args),
    }
    rows: List[Dict] = [measure(name, make, args.images, args.batch_size) for name, make in contenders.items()]
    baseline = next((r.get("img_per_s") for r in rows if r["contender"] == "torchvision GPU decode"), None)
    for row in rows:
        if baseline and row.get("img_per_s"):
            row["ratio"] = row["img_per_s"] / baseline
    info = machine_info()
    info["gpu"] = torch.cuda.get_device_name()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows, "args": vars(args)}, f, indent=2)
    print(f"GPU: {info['gpu']}; {args.threads} CPU threads; batch {args.batch_size}; bf16 out; ratio vs torchvision GPU decode")
    for row in rows:
        cells = [row["contender"], f"{row.get('img_per_s', 0):.0f} img/s", f"x{row.get('ratio', 0):.2f}",
                 f"first {row.get('first_batch_s', 0):.2f} s", row.get("error", "")]
        print(" | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
