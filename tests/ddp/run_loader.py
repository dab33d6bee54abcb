"""One rank of the DDP tests (tests/test_ddp.py): run under torchrun, gloo, CPU.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/ddp/run_loader.py \
        --phase first --work DIR [--tar "DIR/s-{00..03}.tar"]

Iterates fastload.DataLoader(..., distributed="auto") and writes what this rank saw to
DIR/<phase>-rank<r>.json; the test compares the ranks. Every step does an all_reduce that
must see every rank (a rank with fewer batches makes the sums wrong and the script fail,
or the collective time out), and every run ends with a marker all_reduce of 0.

Every phase first runs every uneven mode x drop_last over N=23 (and TarShards with "pad",
and with a bad sample skipped: --tar-skip).
Phases (each launch checks several things, to keep launches few):
  first    (any world): num_workers=2 on one mode;
           the resume job: the full epoch 1 and epoch 2, then a fresh job interrupted after
           RESUME_STEPS steps whose state (identical on all ranks) goes to DIR/state.json;
           the same for TarShards (DIR/tar_state.json) when --tar is given.
  resume   (any world, e.g. 2 again or 3 = elastic): loads the states and runs the rest of
           the epoch and the next epoch.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

import fastload

N = 23  # divisible by neither 2 nor 3 (nor by 2 * 4 or 3 * 4)
BATCH = 4
RESUME = dict(n=23, batch_size=2, uneven="exact", seed=7, epoch=1)
RESUME_STEPS = 3
TAR = dict(batch_size=3, uneven="exact", seed=5, epoch=0)
TAR_STEPS = 2


def ids(batch):
    return batch[0].tolist()


def tar_record(batch):
    images, labels = batch
    return {"labels": labels.tolist(), "shape": list(images.shape),
            "sha1": [hashlib.sha1(im.contiguous().numpy().tobytes()).hexdigest() for im in images]}


def lockstep(loader, record, world, steps=None):
    """Iterates `loader`; one all_reduce per step; stops after `steps` if given."""
    out = []
    for batch in loader:
        t = torch.ones(1)
        dist.all_reduce(t)
        if t.item() != world:
            raise SystemExit(f"rank {dist.get_rank()}: step {len(out)} seen by {t.item()} of {world} ranks")
        out.append(record(batch))
        if steps is not None and len(out) == steps:
            break
    t = torch.zeros(1)
    dist.all_reduce(t)  # end marker: a rank still stepping would add 1 here
    if t.item() != 0:
        raise SystemExit(f"rank {dist.get_rank()}: another rank has more batches than my {len(out)}")
    return out


def same_on_all_ranks(obj, world):
    gathered = [None] * world
    dist.all_gather_object(gathered, obj)
    if any(g != gathered[0] for g in gathered):
        raise SystemExit(f"rank {dist.get_rank()}: the loader states differ across ranks: {gathered}")
    return gathered[0]


def resume_loader(dataset, cfg):
    return fastload.DataLoader(dataset, batch_size=cfg["batch_size"], shuffle=True, distributed="auto",
                               uneven=cfg["uneven"], seed=cfg["seed"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=["first", "resume"], required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tar", default=None)
    parser.add_argument("--tar-skip", default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "world": world}
    resume_ds = torch.utils.data.TensorDataset(torch.arange(RESUME["n"]))
    tar_ds = None
    if args.tar:
        tar_ds = fastload.TarShards(args.tar, ops=[fastload.ops.RandomResizedCrop(8)],
                                    cache_dir=os.path.join(args.work, "cache"), progress=False)

    ds = torch.utils.data.TensorDataset(torch.arange(N))
    out["modes"] = {}
    for uneven in ("pad", "drop", "exact"):
        for drop_last in (False, True):
            loader = fastload.DataLoader(ds, batch_size=BATCH, shuffle=True, drop_last=drop_last,
                                         distributed="auto", uneven=uneven)
            out["modes"][f"{uneven}-{drop_last}"] = {"len": len(loader), "batches": lockstep(loader, ids, world)}
    if tar_ds is not None:
        loader = fastload.DataLoader(tar_ds, batch_size=2, shuffle=True, distributed="auto", uneven="pad")
        out["tar_pad"] = lockstep(loader, tar_record, world)
    if args.tar_skip:
        # A shard with a bad sample, skipped at index time: the same on every rank.
        skip_ds = fastload.TarShards(args.tar_skip, ops=[fastload.ops.RandomResizedCrop(8)], on_error="skip",
                                     cache_dir=os.path.join(args.work, "cache"), progress=False)
        out["tar_skipped"] = [list(s) for s in skip_ds.skipped]
        loader = fastload.DataLoader(skip_ds, batch_size=2, shuffle=True, distributed="auto", uneven="exact")
        out["tar_skip"] = lockstep(loader, tar_record, world)

    if args.phase == "first":
        # Worker processes (torch's machinery under the same batch_sampler) change nothing.
        loader = fastload.DataLoader(ds, batch_size=BATCH, shuffle=True, distributed="auto", uneven="exact",
                                     num_workers=2)
        out["exact-workers"] = lockstep(loader, ids, world)

        # The uninterrupted job, then an interrupted one whose state is checkpointed.
        loader = resume_loader(resume_ds, RESUME)
        loader.set_epoch(RESUME["epoch"])
        out["full"] = lockstep(loader, ids, world)
        out["full_next"] = lockstep(loader, ids, world)
        loader = resume_loader(resume_ds, RESUME)
        loader.set_epoch(RESUME["epoch"])
        out["head"] = lockstep(loader, ids, world, steps=RESUME_STEPS)
        state = same_on_all_ranks(loader.state_dict(), world)
        if rank == 0:
            with open(os.path.join(args.work, "state.json"), "w") as f:
                json.dump(state, f)
        if tar_ds is not None:
            out["tar_path"] = resume_loader(tar_ds, TAR).path
            loader = resume_loader(tar_ds, TAR)
            out["tar_full"] = lockstep(loader, tar_record, world)
            loader = resume_loader(tar_ds, TAR)
            out["tar_head"] = lockstep(loader, tar_record, world, steps=TAR_STEPS)
            state = same_on_all_ranks(loader.state_dict(), world)
            if rank == 0:
                with open(os.path.join(args.work, "tar_state.json"), "w") as f:
                    json.dump(state, f)
    else:
        with open(os.path.join(args.work, "state.json")) as f:
            state = json.load(f)
        loader = resume_loader(resume_ds, RESUME)
        loader.load_state_dict(state)
        out["rest"] = lockstep(loader, ids, world)
        out["next"] = lockstep(loader, ids, world)
        if tar_ds is not None:
            with open(os.path.join(args.work, "tar_state.json")) as f:
                state = json.load(f)
            loader = resume_loader(tar_ds, TAR)
            loader.load_state_dict(state)
            out["tar_rest"] = lockstep(loader, tar_record, world)

    with open(os.path.join(args.work, f"{args.phase}-w{world}-rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
