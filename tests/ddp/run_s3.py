"""One rank of tests/test_s3.py's DDP test: run under torchrun, gloo, CPU, shards in S3.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/ddp/run_s3.py \
        --url "s3://bucket/train-{0000..0003}.tar" --endpoint http://127.0.0.1:PORT \
        --cache DIR/cache --work DIR --phase first|resume

Every rank reads the same s3:// shards through fastload.TarShards with one shared
`--cache` folder (its range cache and member indexes). "first": one whole epoch, one
all_reduce per step (a rank with fewer batches would hang it), the state after
STATE_AFTER steps saved by rank 0; "resume": a new process group loads that state and
reads the rest of the epoch; both open the dataset again, each in a cache of its own
(`--cache`-machine<rank>), as two machines would: each shard's headers must be walked by
one of them, shared through the process group's store; then both ranks fetch every
sample at the same moment into a fresh shared cache (`--cache`-race): each member must be
downloaded once, by one of them.
Each rank writes the labels it saw (the test's shards give every sample its own label),
its batch sizes, its range-read counters and which shard indexes it built (the ranks open
the cold dataset at once: each shard's headers must be walked by one of them) to
DIR/<phase>-rank<r>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import fastload
from fastload import transforms as T

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from s3_server import ACCESS_KEY, SECRET_KEY  # noqa: E402

BATCH = 3
STATE_AFTER = 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--phase", choices=["first", "resume"], required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    options = {"key": ACCESS_KEY, "secret": SECRET_KEY, "client_kwargs": {"endpoint_url": args.endpoint}}
    dist.barrier()  # both ranks open the (cold, in "first") dataset at once
    ds = fastload.TarShards(args.url, [T.RandomResizedCrop(16)], cache_dir=args.cache, storage_options=options)
    loader = fastload.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=1, seed=5)
    state_path = os.path.join(args.work, "state.pt")
    if args.phase == "resume":
        loader.load_state_dict(torch.load(state_path))
    before = ds.remote.stats()
    labels, batches = [], []
    for step, (_, y) in enumerate(loader):
        t = torch.ones(1)
        dist.all_reduce(t)
        assert t.item() == world, "a rank ran out of batches"
        labels += y.tolist()
        batches.append(len(y))
        if args.phase == "first" and step + 1 == STATE_AFTER and rank == 0:
            torch.save(loader.state_dict(), state_path)
    dist.all_reduce(torch.zeros(1))
    after = ds.remote.stats()
    race = machines = None
    if args.phase == "resume":
        # Each rank as a machine of its own (no cache_dir in common), opening cold at once
        # (the first cold open in this process group).
        dist.barrier()
        alone = fastload.TarShards(args.url, cache_dir=f"{args.cache}-machine{rank}", storage_options=options)
        machines = {"index_status": alone.index_status, "keys": alone.keys.tolist()}
        both = fastload.TarShards(args.url, cache_dir=args.cache + "-race", storage_options=options)
        dist.barrier()
        both.remote.ensure(both.index, list(range(len(both))))
        race = both.remote.stats()["members_fetched"]
    with open(os.path.join(args.work, f"{args.phase}-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "path": loader.path, "labels": labels, "batches": batches,
                   "members_fetched": after["members_fetched"] - before["members_fetched"],
                   "bytes_read": after["bytes_read"] - before["bytes_read"],
                   "requests": after["requests"] - before["requests"], "race_fetched": race,
                   "index_status": ds.index_status, "machines": machines}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
