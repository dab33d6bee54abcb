"""fastload-prepare: the command line of fastload.prepare.

    fastload-prepare SRC DST [--max-side N] [--quality Q] [--raw-fraction F]
                     [--samples-per-shard N] [--name NAME] [--workers N]
                     [--on-error raise|skip] [--seed S] [--overwrite] [--no-progress]

SRC: an ImageFolder-layout folder or tar shards (a path or brace pattern). Prints one
summary line; exit status 1 with the error's message on a bad image (--on-error raise), a
refused destination, or one that another preparation is writing into.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fastload-prepare",
        description="Prepare a dataset once into WebDataset shards fastload reads faster "
                    "(lossless by default; --max-side/--quality: resized and re-encoded).")
    parser.add_argument("src", help="an ImageFolder-layout folder, or tar shards (path or brace pattern)")
    parser.add_argument("dst", help="output folder (shards, their indexes, fastload-manifest.json)")
    parser.add_argument("--max-side", type=int, default=None, metavar="N",
                        help="downscale so the longer side is at most N")
    parser.add_argument("--quality", type=int, default=None, metavar="Q",
                        help="JPEG quality of re-encoded images (default 90)")
    parser.add_argument("--raw-fraction", type=float, default=0.0, metavar="F",
                        help="share of images (0..1) stored as raw pixels (PPM); resize mode only (default 0)")
    parser.add_argument("--samples-per-shard", type=int, default=None, metavar="N",
                        help="images per shard, the unit of work and of resume "
                             "(default: 1000, fewer to give every worker a shard, at least 64)")
    parser.add_argument("--name", default="shard", help="shard file name prefix")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker processes (default: all CPUs; 0: work in this process)")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="a bad image: stop (default), or skip it and list it in the manifest")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="which images --raw-fraction picks (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace another preparation in DST")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    from fastload.errors import DecodeError
    from fastload.prepare.run import PrepareDecodeError, prepare

    start = time.perf_counter()
    try:
        out = prepare(args.src, args.dst, max_side=args.max_side, quality=args.quality,
                      raw_fraction=args.raw_fraction, samples_per_shard=args.samples_per_shard, name=args.name,
                      num_workers=args.workers, on_error=args.on_error, seed=args.seed,
                      progress=False if args.no_progress else None, overwrite=args.overwrite)
    except DecodeError as error:  # its advice names the command's option, not the Python argument
        error = PrepareDecodeError(error.reason, error.index, error.source, skip_option="--on-error skip")
        print(f"fastload-prepare: {error}", file=sys.stderr)
        return 1
    except (ValueError, TypeError, OSError, RuntimeError) as error:
        print(f"fastload-prepare: {error}", file=sys.stderr)
        return 1
    samples = sum(s["count"] for s in out.manifest["shards"])
    print(f"fastload-prepare: {samples} samples in {len(out.shards)} shards ({out.redone} written, "
          f"{len(out.shards) - out.redone} kept), {len(out.skipped)} skipped, {time.perf_counter() - start:.1f} s "
          f"-> {out.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
