"""The first batch of a webdataset pipeline through fastload.DataLoader against a plain
fastload.TarShards over the same shards: what building the pipeline's view costs.

    python benchmarks/webdataset_first_batch.py [--shards 8] [--per-shard 5000] [--batch 64] [--repeats 3]

Writes `--shards` shards of `--per-shard` samples (a 64x48 JPEG + .cls each) with
webdataset's TarWriter into a temporary folder, indexes them once (fastload's index cache,
as after a first run), then times in fresh processes, `--repeats` times each, the best:
  - TarShards: fastload.DataLoader(fastload.TarShards(urls, transforms=...)) built + next(iter());
  - webdataset: fastload.DataLoader(wds.WebDataset(urls).decode("pil").to_tuple("jpg", "cls")
    .map_tuple(transform, int), batch_size=...) built + next(iter()) (path: native).
Wall times and the process's CPU time over the same span (less at the mercy of a loaded
machine), for the first loader of the process (fastload's modules load) and a second one.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

CHILD = r'''
import sys, time, warnings
warnings.simplefilter("ignore")
import torch, fastload
from torchvision import transforms as T
which, urls, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
if which == "webdataset":
    import webdataset as wds  # (its import is not the view's cost)
transform = T.Compose([T.CenterCrop(32), T.ToTensor()])
def build():
    if which == "tarshards":
        return fastload.DataLoader(fastload.TarShards(urls, transforms=transform, progress=False), batch_size=batch)
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(transform, int)
    return fastload.DataLoader(ds, batch_size=batch)
out = []
for _ in range(2):  # the first in the process (fastload's modules load), then again
    start, cpu = time.perf_counter(), time.process_time()
    loader = build()
    built, path = time.perf_counter() - start, loader.path
    next(iter(loader))
    out += [built, time.perf_counter() - start, time.process_time() - cpu]
    del loader
print(" ".join(f"{v:.3f}" for v in out), path)
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--per-shard", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default=None, help="shards written before (reused when present)")
    args = parser.parse_args()
    import webdataset as wds

    folder = args.folder or tempfile.mkdtemp()
    urls = os.path.join(folder, "s-{0..%d}.tar" % (args.shards - 1))
    if not os.path.exists(os.path.join(folder, f"s-{args.shards - 1}.tar")):
        rng = np.random.default_rng(0)
        photos = []
        for k in range(64):
            out = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(out, format="JPEG", quality=90)
            photos.append(out.getvalue())
        n = 0
        for s in range(args.shards):
            with wds.TarWriter(os.path.join(folder, f"s-{s}.tar")) as w:
                for _ in range(args.per_shard):
                    w.write({"__key__": f"k{n:07d}", "jpg": photos[n % 64], "cls": n % 10})
                    n += 1
    env = dict(os.environ)
    script = os.path.join(folder, "child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    run = lambda which: subprocess.run([sys.executable, script, which, urls, str(args.batch)], env=env,  # noqa: E731
                                       capture_output=True, text=True, check=True).stdout.split(maxsplit=6)
    run("tarshards")  # the index built and cached once, as after a first run
    print(f"{args.shards} shards x {args.per_shard} samples in {folder}")
    for which in ("tarshards", "webdataset"):
        got = [run(which) for _ in range(args.repeats)]
        best = [min(float(g[k]) for g in got) for k in range(6)]
        print(f"{which}: construction {best[0] * 1e3:.0f} ms, + first batch {best[1] * 1e3:.0f} ms "
              f"({best[2] * 1e3:.0f} ms CPU); again in the same process: {best[3] * 1e3:.0f} ms, + first batch "
              f"{best[4] * 1e3:.0f} ms ({best[5] * 1e3:.0f} ms CPU) (best of {args.repeats}); path: {got[0][6].strip()}")


if __name__ == "__main__":
    main()
