"""Prepared shards (fastload.prepare) against the original files: `fastload-bench --suite prepared`.

    .venv/bin/python benchmarks/prepare.py [--images 1024] [--workers 2] [--rounds 3] [fastload-bench options]

The same as

    fastload-bench --suite prepared --dataset-images N --images N --workers W --repeat R

(N generated images, each loader timed over N images after its warm-up batch; R rounds,
interleaved). The suite, its columns and its cache of prepared shards are described in
fastload/bench/prepared.py; any other fastload-bench option passes through (--wide,
--json PATH, --prepared-modes ..., --psnr-images K, --batch-size B).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fastload.bench.__main__ import main as bench_main  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1024, help="generated images, and images timed per loader")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args, rest = parser.parse_known_args(argv)
    return bench_main(["--suite", "prepared", "--dataset-images", str(args.images), "--images", str(args.images),
                       "--workers", str(args.workers), "--batch-size", str(args.batch), "--repeat", str(args.rounds)]
                      + rest)


if __name__ == "__main__":
    sys.exit(main())
