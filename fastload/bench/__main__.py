"""fastload-bench: fastload against the usual PyTorch input pipelines, on one machine, one run.

    fastload-bench                        # generated ImageNet-like data, train: torch vs fastload vs DALI
    fastload-bench --contenders all --pipeline both --suite main,decode,scaling   # everything
    fastload-bench --data /imagenet/train --workers 8 --json out.json
    fastload-bench --suite decode         # decode-only micro-benchmark
    fastload-bench --suite prepared       # fastload.prepare's shards against the original files
    fastload-bench --dataset mymodule:make --plot bench.png   # your own Dataset, torch vs fastload
    fastload-bench --recipes              # training recipes (torchvision presets, timm, ...): torch vs fastload
    fastload-bench --list                 # contenders, recipes and whether they can run here

Every contender gets the same data, batch size, workers, float32 output, warm-up and timed
window, each in a fresh process; the table gives img/s, the ratio to the torchvision
baseline of the same pipeline, peak memory of the process tree, and the time to the first
batch. The window is long enough to be steady (20 x the prefetch depth in batches, whole
epochs on small data: fastload/bench/measure.py says why); a shorter one, or small data,
marks the rows " *" and says why under the table; data whose epoch fits in the prefetch is
refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import List, Optional

from fastload.bench import contenders as registry
from fastload.bench import dataset as data
from fastload.bench import measure, micro, prepared, recipe_suite, recipes, report
from fastload.bench.measure import MeasureConfig, run_in_subprocess

SUITES = ("main", "decode", "scaling", "prepared", "recipes")
# The headline, and what `make bench` runs: torch's DataLoader + torchvision, the same
# script through fastload.DataLoader, and DALI's CPU pipeline, on the train pipeline (a
# few minutes on 2 cores; every contender and suite: --contenders all --pipeline both
# --suite main,decode,scaling).
DEFAULT_CONTENDERS = ("baseline", "fastload", "dali-cpu")
# Batches of 64 and the fewest generated images whose epochs give unmarked rows (2,560 on
# 2 cores) keep that run short: a steady window is 20 x the prefetch depth in batches
# whatever their size, and torch's DataLoader makes ~150 img/s on 2 cores.
DEFAULT_BATCH_SIZE = 64
MIN_GENERATED_IMAGES = 2000


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fastload-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="an ImageFolder-layout folder (root/<class>/<image>); default: generated data")
    p.add_argument("--dataset", metavar="MODULE:FUNCTION",
                   help="race torch's DataLoader and fastload.DataLoader on the Dataset this function returns "
                        "(your own dataset code and transforms; the module imports from the current folder or "
                        "PYTHONPATH); the main suite only")
    p.add_argument("--dataset-images", type=int,
                   help="images to generate without --data (default: the fewest whose epochs are not small data, "
                        f"{measure.EPOCH_DEPTHS} x the prefetch depth in batches, and at least "
                        f"{MIN_GENERATED_IMAGES})")
    p.add_argument("--classes", type=int, default=10, help="classes to generate without --data (10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated data and of the loaders (0)")
    p.add_argument("--images", type=int,
                   help="images timed per contender, after warm-up (default: the shortest steady window, "
                        f"{measure.WINDOW_DEPTHS} x the prefetch depth in batches: {measure.WINDOW_DEPTHS} x "
                        f"max({measure.MIN_DEPTH}, {measure.PREFETCH_FACTOR} x workers) x batch size; fewer "
                        "are timed with a warning)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per contender, round-robin; the table keeps each one's fastest (1)")
    p.add_argument("--warmup-batches", type=int,
                   help="batches taken before timing (default and least: the prefetch depth + 1; all of the first "
                        "epoch when the window is whole epochs)")
    p.add_argument("--batch-size", type=int,
                   help=f"images per batch ({DEFAULT_BATCH_SIZE}; recipes: {recipes.BATCH_SIZE})")
    p.add_argument("--workers", type=int,
                   help=f"worker processes or threads of every contender (default: all cores; recipes: {recipes.WORKERS})")
    p.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS),
                   help=f"comma-separated, from: {', '.join(registry.CONTENDERS)}, or all (default: "
                        f"{','.join(DEFAULT_CONTENDERS)})")
    p.add_argument("--pipeline", choices=("train", "eval", "both"), default="train",
                   help="train: RandomResizedCrop 224 + flip + normalize; eval: Resize 256 + CenterCrop 224")
    p.add_argument("--suite",
                   help="comma-separated: main (the table), decode (decode-only micro-benchmark), "
                        "scaling (1 vs --workers threads), prepared (fastload.prepare's shards against the "
                        "original files), recipes (see --recipes) (default: main; with --recipes: recipes)")
    p.add_argument("--scaling-contenders", default="fastload-native",
                   help="contenders of the scaling suite (default: fastload-native)")
    p.add_argument("--decode-images", type=int, default=200, help="files of the decode micro-benchmark (200)")
    p.add_argument("--prepared-modes", default=prepared.DEFAULT_MODES,
                   help="shards of the prepared suite: lossless, <max_side>q<quality> (512q90), q<quality>, "
                        f"<max_side>; comma-separated (default: {prepared.DEFAULT_MODES})")
    p.add_argument("--psnr-images", type=int, default=64, help="images whose crops give the prepared suite's "
                   "PSNR (64)")
    p.add_argument("--shards", type=int, default=8, help="tar shards made for the webdataset contender (8)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before a contender is killed (600)")
    p.add_argument("--json", metavar="PATH", help="write every figure and the machine's description here")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (they go to stderr, and only "
                   "when it is a terminal)")
    p.add_argument("--wide", action="store_true", help="every column in the table (default: what fits 100 "
                   "columns, each row's path listed under it)")
    p.add_argument("--plot", metavar="PATH", help="draw img/s, CPU ms/img and peak RSS per contender into PATH "
                   "(.png, .svg: needs matplotlib)")
    p.add_argument("--recipes", nargs="?", const="all", metavar="NAMES",
                   help="the recipes suite alone (with --suite, beside others): real training scripts' datasets, "
                        "torch's DataLoader vs fastload.DataLoader on each, comma-separated names from "
                        f"{', '.join(recipes.RECIPES)} (default: all)")
    p.add_argument("--list", action="store_true", help="list the contenders and recipes, and exit")
    args = p.parse_args(argv)
    if args.suite is None:
        args.suite = "recipes" if args.recipes is not None else "main"
    # The recipes keep their scripts' batch and workers unless told otherwise.
    args.recipe_batch_size = recipes.BATCH_SIZE if args.batch_size is None else args.batch_size
    args.recipe_workers = recipes.WORKERS if args.workers is None else args.workers
    args.batch_size = DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    args.workers = (os.cpu_count() or 1) if args.workers is None else args.workers
    # The timed window and warm-up follow the prefetch depth of the workers (measure.py).
    args.images_given, args.warmup_given = args.images is not None, args.warmup_batches is not None
    if not args.images_given:
        args.images = measure.default_images(args.workers, args.batch_size)
    if not args.warmup_given:
        args.warmup_batches = measure.prefetch_depth(args.workers) + 1
    if args.dataset_images is None:
        args.dataset_images = max(MIN_GENERATED_IMAGES, measure.least_unmarked_images(args.workers, args.batch_size))
    if args.contenders == "all":
        args.contenders = ",".join(registry.CONTENDERS)
    if args.dataset and args.contenders in (",".join(registry.CONTENDERS), ",".join(DEFAULT_CONTENDERS)):
        args.contenders = ",".join(name for name, c in registry.CONTENDERS.items() if c.runs_user_dataset)
    if args.dataset and args.data:
        p.error("--dataset and --data exclude each other: the dataset function says where its data is")
    if args.dataset and args.recipes is not None:
        p.error("--dataset and --recipes exclude each other: a recipe builds its own dataset")
    if args.dataset:
        args.suite = "main"
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    args.scaling_contenders = [c.strip() for c in args.scaling_contenders.split(",") if c.strip()]
    args.suite = [s.strip() for s in args.suite.split(",") if s.strip()]
    for name in args.contenders + args.scaling_contenders:
        if name not in registry.CONTENDERS:
            p.error(f"unknown contender {name!r}: expected one of {', '.join(registry.CONTENDERS)}")
    for suite in args.suite:
        if suite not in SUITES:
            p.error(f"unknown suite {suite!r}: expected one of {', '.join(SUITES)}")
    try:
        args.prepared_modes = prepared.parse_modes(args.prepared_modes)
        args.recipes = recipes.parse_names(args.recipes)
    except ValueError as error:
        p.error(str(error))
    for name in ("images", "repeat", "batch_size", "warmup_batches", "dataset_images", "classes", "decode_images",
                 "shards", "psnr_images"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.workers < 0:
        p.error(f"--workers must be >= 0, got {args.workers}")
    return args


def _say(message: str = "") -> None:
    print(message, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    # Bars only for a person watching: never into logs or pipes.
    args.progress = not args.no_progress and sys.stderr.isatty()
    if args.list:
        for name, contender in registry.CONTENDERS.items():
            _say(f"{name:16} {contender.unavailable() or 'available'}: {contender.summary}")
        for line in recipes.listing():
            _say(line)
        return 0

    machine = report.machine_info()
    _say(f"machine: {report.format_machine(machine)}")
    if args.dataset:
        bench_data = data.describe_factory(args.dataset)
    elif args.data:
        bench_data = data.describe_folder(args.data)
    else:
        spec = data.DatasetSpec(images=args.dataset_images, classes=args.classes, seed=args.seed)
        bench_data = data.ensure_dataset(spec, progress=args.progress)
    _say(f"data: {bench_data.describe()}{' (generated now)' if bench_data.generated else ''}")

    pipelines = ["train", "eval"] if args.pipeline == "both" else [args.pipeline]
    if args.dataset:
        pipelines = ["dataset"]  # the user's own transforms: one pipeline, named after its source
    base = dict(
        root=bench_data.root, batch_size=args.batch_size, images=args.images,
        warmup_batches=args.warmup_batches, seed=args.seed, dataset_factory=args.dataset,
        dataset_images=bench_data.num_images,
    )
    # The window every row of the main table gets (each child plans its own alike, from its
    # loader's epoch length); data whose epochs fit in the prefetch is refused here, early.
    plan = window_plan(args, args.workers, args.batch_size, args.images, bench_data.num_images)
    if "main" in args.suite and plan.refused:  # the other suites' rows say it, each
        print(refusal(plan, args, bench_data.num_images), file=sys.stderr, flush=True)
        return 2
    needs_shards = not args.dataset and any(registry.get(c).needs_shards and not registry.get(c).unavailable()
                                            for c in args.contenders)
    shards = data.ensure_shards(bench_data, args.shards) if needs_shards and "main" in args.suite else []
    record = {"machine": machine, "data": vars(bench_data), "args": {k: v for k, v in vars(args).items()},
              "window": {"rule": window_rule(), **dataclasses.asdict(plan)}}

    if "main" in args.suite:
        # Repeats go round-robin over every contender, so a burst of load from other
        # processes hits one run of several contenders rather than every run of one.
        runs = {}
        for repeat in range(args.repeat):
            if args.repeat > 1:
                _say(f"round {repeat + 1} of {args.repeat}")
            for pipeline in pipelines:
                for name in args.contenders:
                    result = _measure(name, dict(base, pipeline=pipeline, shards=shards), args)
                    runs.setdefault((pipeline, name), []).append(result)
        rows = [report.best_run(r) for r in runs.values()]
        report.add_ratios(rows)
        record["results"] = rows
        _say()
        _say(f"batch {args.batch_size}, {args.workers} workers/threads, float32 output; {plan.describe(args.batch_size)}"
             f" (prefetch depth {plan.prefetch_depth}, steady window >= {plan.min_timed_batches} batches); peak "
             "memory summed over the process tree" + (f"; best of {args.repeat} runs" if args.repeat > 1 else ""))
        _say(report.format_table(rows) if args.wide else report.format_compact(rows))
        record["warnings"] = report.warning_items(rows)
        for line in report.format_warnings(rows):
            _say(line)
        noisy = [r for r in rows if r.get("others_cpu_pct", 0) > report.NOISY_OTHERS_PCT]
        if noisy:
            _say(f"note: other processes used > {report.NOISY_OTHERS_PCT:.0f}% of the CPUs during "
                 f"{len(noisy)} row(s) ('noisy'): those img/s understate the loader.")

    if "decode" in args.suite:
        rows = micro.decode_benchmark(bench_data.root, images=args.decode_images, seed=args.seed)
        record["decode"] = rows
        _say()
        _say(f"decode only, one thread, {rows[0]['images']} files in memory:")
        _say(report.format_table(rows, micro.DECODE_COLUMNS))

    if "scaling" in args.suite:
        workers = max(2, args.workers)
        images = args.images if args.images_given else measure.default_images(workers, args.batch_size)
        rows = micro.scaling_benchmark(
            args.scaling_contenders, dict(base, pipeline=pipelines[0], images=images), workers, args.timeout,
            progress=args.progress, repeat=args.repeat,
        )
        record["scaling"] = rows
        _say()
        _say(f"scaling ({pipelines[0]} pipeline), 1 vs {workers} workers/threads:")
        _say(report.format_table(rows, micro.SCALING_COLUMNS))

    if "prepared" in args.suite:
        _say()
        record["prepared"] = prepared.run_suite(bench_data, args, _say)

    if "recipes" in args.suite:
        # The recipes' own batch and workers set their window (unless --images/--warmup-batches say).
        recipe_args = argparse.Namespace(**vars(args))
        if not args.images_given:
            recipe_args.images = measure.default_images(args.recipe_workers, args.recipe_batch_size)
        if not args.warmup_given:
            recipe_args.warmup_batches = measure.prefetch_depth(args.recipe_workers) + 1
        record["recipe_runs"], record["recipes"] = recipe_suite.run_suite(recipe_args, bench_data.root, _say)

    if args.plot:
        rows = record.get("results") or prepared.plot_rows(record.get("prepared", {}).get("rows", []))
        report.plot(rows, args.plot, data=bench_data.describe())
        _say(f"\nplot written to {args.plot}")

    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1, default=str)
        _say(f"\nfigures written to {args.json}")
    return 0


def window_plan(args: argparse.Namespace, workers: int, batch_size: int, images: int,
                num_images: Optional[int]) -> measure.WindowPlan:
    """The window of a run on `num_images` samples (None: unknown, planned as one epoch)."""
    config = MeasureConfig(contender="", root="", batch_size=batch_size, workers=workers, images=images,
                           warmup_batches=args.warmup_batches)
    return measure.plan_window(config, None if num_images is None else num_images // batch_size)


def window_rule() -> dict:
    """The constants of the window rule, for the JSON record."""
    return {"prefetch_depth": f"max({measure.MIN_DEPTH}, {measure.PREFETCH_FACTOR} x workers) batches",
            "min_timed_batches": f"{measure.WINDOW_DEPTHS} x prefetch depth",
            "warmup_batches": "prefetch depth + 1 (whole epochs: all of epoch 0)",
            "small_data_below": f"{measure.EPOCH_DEPTHS} x prefetch depth batches per epoch",
            "refused_below": f"{measure.REFUSE_DEPTHS} x prefetch depth batches per epoch"}


def refusal(plan: measure.WindowPlan, args: argparse.Namespace, num_images: Optional[int]) -> str:
    """Why the run is refused, and how much data it needs."""
    need = measure.min_epoch_batches(args.workers) * args.batch_size
    better = measure.EPOCH_DEPTHS * plan.prefetch_depth * args.batch_size
    if args.dataset:
        how = f"Make the dataset hold at least {need} samples"
    elif args.data:
        how = f"Point --data at a folder of at least {need} images"
    else:
        how = f"Pass --dataset-images {better} (at least {need})"
    return f"fastload-bench: refused: {num_images} images are too few to time: {plan.refused}. {how}."


def _measure(name: str, config_kwargs: dict, args: argparse.Namespace) -> dict:
    contender = registry.get(name)
    reason = contender.unavailable()
    row = {"contender": name, "pipeline": config_kwargs["pipeline"]}
    if reason:  # no process to start: say why in the row
        return {**row, "status": "unavailable", "reason": reason}
    if config_kwargs.get("dataset_factory") and not contender.runs_user_dataset:
        return {**row, "status": "unavailable", "reason": "runs its own pipeline, not the --dataset one"}
    if contender.needs_shards and not config_kwargs.get("shards"):
        return {**row, "status": "unavailable", "reason": "no shards were made"}
    config = MeasureConfig(contender=name, workers=args.workers, progress=args.progress, **config_kwargs)
    result = run_in_subprocess(config, timeout=args.timeout, forward_stderr=True)
    if result.get("status") == "ok":
        _say(f"  {name} ({config.pipeline}): {result['images_per_s']:.0f} img/s, first batch "
             f"{result['first_batch_s']:.2f} s, peak RSS {result['peak_rss_mb']:.0f} MB")
    else:
        _say(f"  {name} ({config.pipeline}): {result.get('status')}: {result.get('reason')}")
    return result


if __name__ == "__main__":
    sys.exit(main())
