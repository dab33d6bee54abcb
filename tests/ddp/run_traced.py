"""One rank of the traced-dataset DDP test (tests/trace/test_trace_lazy.py): torchrun, gloo, CPU.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/ddp/run_traced.py \
        --images DIR --out DIR

A Dataset of its own class (Image.open(path).convert("RGB") + a torchvision transform,
label = the dataset index) of N samples cycling over the JPEG files of DIR, read by
fastload.DataLoader(..., distributed="auto"): writes the labels (dataset indexes) this rank
saw, the loader's path, how many indexes this rank traced and how many `__getitem__` calls
its dataset object saw to <out>/rank<r>.json.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os

import torch
import torch.distributed as dist
from PIL import Image
from torchvision import transforms as T

import fastload

N = 600  # 2 ranks x batch 6: 50 batches each, no padding
BATCH = 6


class Cycling(torch.utils.data.Dataset):
    def __init__(self, files, n):
        self.files, self.n, self.calls = files, n, 0
        self.transform = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor()])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        return self.transform(Image.open(self.files[i % len(self.files)]).convert("RGB")), i


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    files = sorted(glob.glob(os.path.join(args.images, "**", "*.jpg"), recursive=True))
    dataset = Cycling(files, N)
    loader = fastload.DataLoader(dataset, batch_size=BATCH, shuffle=True, distributed="auto", seed=3)
    seen = []
    for images, labels in loader:
        seen += labels.tolist()
        dist.all_reduce(torch.ones(1))  # every step sees every rank
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "seen": seen, "path": loader.path, "calls": dataset.calls,
                   "traced": loader.stats()["native"]["traced"]["samples"]}, f)
    dist.all_reduce(torch.zeros(1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
