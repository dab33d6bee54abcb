"""The recipes suite of `fastload-bench --recipes`: runs both loaders on each recipe's
dataset, each in a fresh process (measure.py), and prints one line per recipe.

The recipes themselves (what each dataset object is) are fastload/bench/recipes.py's; this
module sits above them, the contenders and the measurement, so imports go one way:
recipe_suite -> measure -> contenders -> recipes -> recipe_datasets, shapes.

Example:
    >>> from fastload.bench.recipe_suite import path_kind
    >>> path_kind("hybrid: ImageFolder [...] + Python tail"), path_kind("torch (PIL)")
    ('hybrid', 'generic')
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from fastload.bench import contenders as registry
from fastload.bench import measure, report
from fastload.bench.recipes import RECIPES, get

# The fastload rows' goals on a quiet machine, by the path they take (a recipe's own
# `target` replaces them: dense outputs, e.g. segmentation, aim at 2x).
TARGETS = {"native": 3.0, "hybrid": 2.0}


def path_kind(path: str) -> str:
    """"native", "hybrid" or "generic": the first word of a `loader.path`."""
    kind = path.split(":", 1)[0].strip()
    return kind if kind in ("native", "hybrid", "generic") else "generic"


# The recipe table: figures of both loaders on one line per recipe.
COLUMNS = [
    ("recipe", "recipe"),
    ("fastload path", "kind"),
    ("torch img/s", "torch_images_per_s"),
    ("fastload img/s", "fastload_images_per_s"),
    ("ratio", "ratio"),
    ("target", "target"),
    ("torch CPU ms/img", "torch_cpu_ms_per_image"),
    ("fastload CPU ms/img", "fastload_cpu_ms_per_image"),
    ("CPU ratio", "cpu_ratio"),
    ("others %", "others_cpu_pct"),
]


def table_rows(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per recipe from the best runs of its two contenders (rows of measure with
    a "recipe" key): img/s and CPU ms/img of both, fastload's path and the ratios (torch's
    CPU time over fastload's: above 1, fastload spends less).

    Example:
        >>> runs = [{"recipe": "preset", "contender": "baseline", "status": "ok", "images_per_s": 100.0,
        ...          "cpu_ms_per_image": 20.0},
        ...         {"recipe": "preset", "contender": "fastload", "status": "ok", "images_per_s": 300.0,
        ...          "cpu_ms_per_image": 5.0, "path": "native: torchvision ImageFolder [...]"}]
        >>> row = table_rows(runs)[0]
        >>> row["kind"], row["ratio"], row["cpu_ratio"], row["target"]
        ('native', 3.0, 4.0, '>= 3x')
    """
    rows: Dict[str, Dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(r["recipe"], {"recipe": r["recipe"], "status": "ok"})
        side = "torch" if r["contender"] == "baseline" else "fastload"
        if r.get("status") != "ok":
            row.setdefault("problems", []).append((side, f"{r.get('status', 'failed')}: {r.get('reason', '')}"))
            continue
        row[f"{side}_images_per_s"] = r["images_per_s"]
        row[f"{side}_cpu_ms_per_image"] = r["cpu_ms_per_image"]
        row[f"{side}_others_cpu_pct"] = r.get("others_cpu_pct")
        if side == "fastload":
            row["path"] = r.get("path", "")
            row["kind"] = path_kind(row["path"])
            recipe = RECIPES.get(r["recipe"])
            goal = recipe.target if recipe is not None and recipe.target else TARGETS.get(row["kind"])
            row["target"] = f">= {goal:.0f}x" if row["kind"] in TARGETS else "-"
    for row in rows.values():
        if row.get("torch_images_per_s") and row.get("fastload_images_per_s"):
            row["ratio"] = row["fastload_images_per_s"] / row["torch_images_per_s"]
        if row.get("torch_cpu_ms_per_image") and row.get("fastload_cpu_ms_per_image"):
            row["cpu_ratio"] = row["torch_cpu_ms_per_image"] / row["fastload_cpu_ms_per_image"]
        others = [row.get(f"{side}_others_cpu_pct") for side in ("torch", "fastload")]
        if any(v is not None for v in others):  # the busier of the two runs: how far to trust the ratio
            row["others_cpu_pct"] = max(v for v in others if v is not None)
        problems = row.pop("problems", [])
        if len({text for _, text in problems}) == 1 and len(problems) > 1:  # a skipped recipe: one reason
            row["problems"] = [problems[0][1]]
        else:
            row["problems"] = [f"{side}: {text}" for side, text in problems]
        if "kind" not in row:  # fastload did not run: the reason stands in the path column
            row["status"] = "failed"
            row["reason"] = "; ".join(row["problems"]) or "no run"
    return list(rows.values())


def format_table(rows: List[Dict[str, Any]]) -> str:
    """The recipe table, then each recipe's fastload path (why, for a generic one) and any
    contender that did not run."""
    import textwrap

    body = []
    for r in rows:
        cells = []
        for _, key in COLUMNS:
            value = r.get(key)
            if key == "recipe":
                cells.append(str(value))
            elif key == "kind" and value is None:
                cells.append("did not run")
            elif key in ("ratio", "cpu_ratio"):
                cells.append("-" if value is None else f"{value:.2f}x")
            elif key.endswith("images_per_s"):
                cells.append(report.format_value("images_per_s", value))
            else:
                cells.append(report.format_value(key, value))
        body.append(cells)
    header = [title for title, _ in COLUMNS]
    widths = [max(len(x) for x in column) for column in zip(header, *body)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    lines = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(b) for b in body]
    lines.append("fastload paths:")
    for r in rows:
        what = r.get("path") or r.get("reason", "")
        lines.append(textwrap.fill(f"{r['recipe']}: {what}", report.WIDTH, initial_indent="  ",
                                   subsequent_indent="      "))
        for problem in (r.get("problems") or []) if r.get("kind") else []:
            lines.append(textwrap.fill(f"{r['recipe']}: {problem}", report.WIDTH, initial_indent="  ",
                                       subsequent_indent="      "))
    return "\n".join(lines)


def run(names: List[str], root: str, contenders: List[str], *, batch_size: int, workers: int, images: int,
        warmup_batches: int, seed: int, repeat: int, timeout: float, progress: bool,
        say: Callable[[str], None] = print) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Measures every recipe with each contender, each run in a fresh process (start-up and
    the first `warmup_batches` batches excluded, as in the main suite), round-robin over
    recipes and contenders `repeat` times.

    Returns:
        (runs: the best run of each (recipe, contender), rows: table_rows of them).
    """
    runs: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for round_ in range(repeat):
        if repeat > 1:
            say(f"recipes, round {round_ + 1} of {repeat}")
        for name in names:
            recipe = get(name)
            for contender in contenders:
                reason = recipe.unavailable()
                if reason:
                    result = {"contender": contender, "status": "unavailable", "reason": reason}
                else:
                    config = measure.MeasureConfig(
                        contender=contender, root=root, pipeline="train" if recipe.train else "eval",
                        batch_size=batch_size, workers=workers, images=images, warmup_batches=warmup_batches,
                        seed=seed, progress=progress, recipe=name,
                    )
                    result = measure.run_in_subprocess(config, timeout=timeout, forward_stderr=True)
                result["recipe"] = name
                runs.setdefault((name, contender), []).append(result)
                if result.get("status") == "ok":
                    say(f"  {name} / {contender}: {result['images_per_s']:.0f} img/s, "
                        f"{result['cpu_ms_per_image']:.2f} CPU ms/img"
                        + (f", {path_kind(result.get('path', ''))} path" if contender != "baseline" else ""))
                else:
                    say(f"  {name} / {contender}: {result.get('status')}: {result.get('reason')}")
    best = [report.best_run(r) for r in runs.values()]
    return best, table_rows(best)


def run_suite(args: Any, root: str, say: Callable[[str], None] = print) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The recipes suite of `fastload-bench` (parsed arguments `args`): measures, prints the
    table and returns (the best run of each recipe and contender, the table's rows)."""
    # Only the contenders that take any Dataset object: a recipe is its dataset object.
    contenders = [c for c in args.contenders if registry.get(c).runs_user_dataset]
    if not contenders:
        say("\nrecipes: none of --contenders takes a Dataset object (baseline, fastload do): nothing to race")
        return [], []
    say(f"\nrecipes: {', '.join(args.recipes)}; {', '.join(contenders)}")
    runs, rows = run(
        args.recipes, root, contenders, batch_size=args.recipe_batch_size, workers=args.recipe_workers,
        images=args.images, warmup_batches=args.warmup_batches, seed=args.seed, repeat=args.repeat,
        timeout=args.timeout, progress=args.progress, say=say,
    )
    say()
    say(f"recipes: the dataset object of each script, torch.utils.data.DataLoader vs fastload.DataLoader on it; "
        f"batch {args.recipe_batch_size}, {args.recipe_workers} workers, {args.images} timed images after "
        f"{args.warmup_batches} warm-up batch(es) (start-up excluded)"
        + (f"; best of {args.repeat} runs" if args.repeat > 1 else "")
        + "; CPU ratio: torch's CPU ms/img over fastload's; target: fully native >= 3x, hybrid >= 2x, "
           "dense outputs (segmentation) >= 2x")
    say(format_table(rows))
    return runs, rows
