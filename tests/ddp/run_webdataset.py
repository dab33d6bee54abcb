"""One rank of tests/adapters/test_webdataset.py's DDP test: run under torchrun, gloo, CPU.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/ddp/run_webdataset.py \
        --urls "DIR/s-{0..2}.tar" --work DIR

Builds the usual webdataset pipeline (shardshuffle, split_by_node, shuffle buffer, decode,
to_tuple with __key__, map_tuple), iterates two epochs of fastload.DataLoader with
uneven="exact" (every sample once, equal batch counts), one all_reduce per step (a rank
with fewer batches would make it hang or the sums wrong), and writes the keys it saw to
DIR/rank<r>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import warnings

import torch
import torch.distributed as dist
import webdataset as wds
from torchvision import transforms as T

import fastload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    warnings.simplefilter("ignore")
    ds = (wds.WebDataset(args.urls, shardshuffle=100, nodesplitter=wds.split_by_node).shuffle(1000)
          .decode("pil").to_tuple("jpg", "cls", "__key__").map_tuple(T.Compose([T.CenterCrop(24), T.ToTensor()]),
                                                                     int))
    loader = fastload.DataLoader(ds, batch_size=4, num_workers=2, uneven="exact", seed=5)
    print(f"rank {rank}: {loader.path}", flush=True)
    keys, batches = [], []
    for _ in range(2):
        epoch_keys, epoch_batches = [], []
        for images, labels, names in loader:
            t = torch.ones(1)
            dist.all_reduce(t)
            assert t.item() == world, "a rank ran out of batches"
            epoch_keys += list(names)
            epoch_batches.append(len(names))
        keys.append(epoch_keys)
        batches.append(epoch_batches)
    dist.all_reduce(torch.zeros(1))
    with open(os.path.join(args.work, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "path": loader.path, "keys": keys, "batches": batches}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
