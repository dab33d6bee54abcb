"""The bench's output: the machine it ran on, the results table, the JSON record.

Example:
    >>> rows = [{"contender": "baseline", "pipeline": "train", "status": "ok", "path": "torch (PIL)",
    ...          "images_per_s": 250.0, "peak_rss_mb": 900.0, "peak_pss_mb": 600.0,
    ...          "first_batch_s": 1.5, "cpu_ms_per_image": 8.0, "others_cpu_pct": 1.0}]
    >>> print(format_table(rows).splitlines()[2].split("|")[1].strip())
    baseline (train)
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
from typing import Any, Dict, List, Optional

# A run is flagged noisy when other processes used more than this share of the machine
# while it was timed: the throughput then understates what the loader can do.
NOISY_OTHERS_PCT = 10.0

COLUMNS = [
    ("contender", "contender"),
    ("path", "path"),
    ("img/s", "images_per_s"),
    ("vs baseline", "ratio"),
    ("peak RSS MB", "peak_rss_mb"),
    ("peak PSS MB", "peak_pss_mb"),
    ("first batch s", "first_batch_s"),
    ("CPU ms/img", "cpu_ms_per_image"),
    ("others' CPU %", "others_cpu_pct"),
]


# The default table: what fits 100 columns. The path of each row is listed under it.
COMPACT_COLUMNS = [
    ("contender", "contender"),
    ("img/s", "images_per_s"),
    ("vs base", "ratio"),
    ("CPU ms/img", "cpu_ms_per_image"),
    ("RSS MB", "peak_rss_mb"),
    ("1st batch s", "first_batch_s"),
    ("others %", "others_cpu_pct"),
]
WIDTH = 100


def _version(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> Dict[str, Any]:
    """CPU model, cores, memory, load and the versions of everything measured."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_gb = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory_gb = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    pil = _version("Pillow-SIMD") or _version("pillow")
    info = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gb": memory_gb,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {
            "torch": _version("torch"),
            "torchvision": _version("torchvision"),
            "pillow": pil,
            "pillow_simd": _version("Pillow-SIMD") is not None,
            "numpy": _version("numpy"),
            "fastload": _version("fastload"),
            "nvidia-dali": _version("nvidia-dali-cuda120") or _version("nvidia-dali-cuda110"),
            "webdataset": _version("webdataset"),
        },
    }
    try:
        from fastload import _ext

        info["fastload_build"] = _ext.build_info()
    except Exception as error:  # noqa: BLE001 -- info only
        info["fastload_build"] = {"error": str(error)}
    return info


def best_run(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The fastest successful run of a contender (all its img/s kept in "runs_images_per_s").

    The fastest run is the one least slowed by other processes; a failure shows only when
    no run succeeded.
    """
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return runs[-1]
    best = dict(max(ok, key=lambda r: r["images_per_s"]))
    if len(runs) > 1:
        best["runs_images_per_s"] = [r.get("images_per_s") for r in runs]
    return best


def add_ratios(rows: List[Dict[str, Any]]) -> None:
    """Sets row["ratio"] = img/s over the same pipeline's baseline img/s, and warns (in
    row["warnings"]) where a row's window timed other epoch starts than the baseline's."""
    baselines = {r["pipeline"]: r for r in rows if r.get("contender") == "baseline" and r.get("status") == "ok"}
    for r in rows:
        base = baselines.get(r.get("pipeline"))
        if r.get("status") != "ok" or not base or not base.get("images_per_s"):
            continue
        r["ratio"] = r["images_per_s"] / base["images_per_s"]
        mine, theirs = (r.get("window") or {}).get("epoch_starts"), (base.get("window") or {}).get("epoch_starts")
        if r is not base and mine is not None and theirs is not None and mine != theirs:
            r.setdefault("warnings", []).append(
                f"unlike windows: {mine} epoch start(s) timed, the baseline's {theirs}: the ratio weighs epoch "
                "starts unevenly"
            )


WARNING_MARK = " *"  # after the ratio (or img/s) of a row whose figures carry a warning


def warning_items(rows: List[Dict[str, Any]]) -> List[str]:
    """Each warning of the rows (`row["warnings"]`) once, after the rows it concerns
    ("every row" when all successful rows share it)."""
    which: Dict[str, List[str]] = {}
    ok = [r for r in rows if r.get("status") == "ok"]
    for r in ok:
        for warning in r.get("warnings") or []:
            which.setdefault(warning, []).append(_name(r))
    return [f"{'every row' if len(names) == len(ok) > 1 else ', '.join(names)}: {warning}"
            for warning, names in which.items()]


WARNINGS_HEADING = "* marked rows: not steady-state figures, not ratios to quote:"


def format_warnings(rows: List[Dict[str, Any]]) -> List[str]:
    """Lines for under a table: WARNINGS_HEADING and warning_items, wrapped to WIDTH; empty
    when no row has a warning.

    Example:
        >>> rows = [{"contender": "fastload", "pipeline": "train", "status": "ok", "warnings": ["short window: x"]}]
        >>> format_warnings(rows)[1]
        '  fastload (train): short window: x'
    """
    import textwrap

    items = warning_items(rows)
    if not items:
        return []
    return [WARNINGS_HEADING] + [textwrap.fill(item, WIDTH, initial_indent="  ", subsequent_indent="      ")
                                 for item in items]


def _name(r: Dict[str, Any]) -> str:
    return f"{r['contender']} ({r['pipeline']})" if r.get("pipeline") else str(r["contender"])


def format_value(key: str, value: Any) -> str:
    """One figure as the tables print it."""
    if value is None:
        return "-"
    if key in ("ratio", "speedup"):
        return f"{value:.2f}x"
    if key in ("images_per_s", "one", "many", "mean_pixels"):
        return f"{value:.0f}"
    if key in ("peak_rss_mb", "peak_pss_mb"):
        return f"{value:.0f}" if value else "-"
    if key == "others_cpu_pct":
        return f"{value:.0f}" + (" noisy" if value > NOISY_OTHERS_PCT else "")
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def format_table(rows: List[Dict[str, Any]], columns=COLUMNS, reasons: bool = True) -> str:
    """A Markdown table (readable as plain text too), one line per row.

    The first column names the row (with its pipeline, if any); a row whose status is not
    "ok" says why in the second column (only its status without `reasons`) and has "-"
    elsewhere. A row with warnings has its ratio (else img/s) marked " *"; format_warnings
    gives the lines that explain the marks.
    """
    name_key, reason_key = columns[0][1], columns[1][1]
    body = []
    keys = [key for _, key in columns]
    for r in rows:
        cells = []
        marked = None
        if r.get("status") == "ok" and r.get("warnings"):  # the ratio, else img/s, carries the mark
            marked = next((k for k in ("ratio", "images_per_s") if k in keys and r.get(k) is not None), None)
        for _, key in columns:
            if key == name_key:
                cells.append(f"{r[key]} ({r['pipeline']})" if key == "contender" and r.get("pipeline") else str(r[key]))
            elif r.get("status") != "ok":
                status = r.get("status", "failed")
                short = "n/a" if status == "unavailable" else status
                cells.append((f"{status}: {r.get('reason', '')}" if reasons else short) if key == reason_key else "-")
            else:
                cells.append(format_value(key, r.get(key)) + (WARNING_MARK if key == marked else ""))
        body.append(cells)
    header = [title for title, _ in columns]
    widths = [max(len(x) for x in column) for column in zip(header, *body)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), separator] + [line(b) for b in body])


def format_machine(info: Dict[str, Any]) -> str:
    v = info["versions"]
    return (
        f"{info['cpu_model']}, {info['cpus_usable']} cores, {info['memory_gb']} GB RAM; "
        f"torch {v['torch']}, torchvision {v['torchvision']}, "
        f"{'Pillow-SIMD' if v['pillow_simd'] else 'Pillow'} {v['pillow']}; load average "
        f"{' '.join(str(x) for x in info['load_average'])} at start; {info['date']}"
    )


def format_compact(rows: List[Dict[str, Any]]) -> str:
    """The default table (COMPACT_COLUMNS, under WIDTH columns; "n/a": the contender cannot
    run here), then each row's path or why it did not run, wrapped to WIDTH.

    Example:
        >>> rows = [{"contender": "fastload", "pipeline": "train", "status": "ok", "path": "native: ImageFolder",
        ...          "images_per_s": 900.0, "ratio": 3.6, "cpu_ms_per_image": 2.0, "peak_rss_mb": 800.0,
        ...          "first_batch_s": 0.2, "others_cpu_pct": 1.0}]
        >>> print(format_compact(rows))
        | contender        | img/s | vs base | CPU ms/img | RSS MB | 1st batch s | others % |
        |------------------|-------|---------|------------|--------|-------------|----------|
        | fastload (train) | 900   | 3.60x   | 2.00       | 800    | 0.20        | 1        |
        paths:
          fastload (train): native: ImageFolder
    """
    import textwrap

    table = format_table(rows, COMPACT_COLUMNS, reasons=False)
    lines = [table, "paths:"]
    for r in rows:
        name = f"{r['contender']} ({r['pipeline']})" if r.get("pipeline") else str(r["contender"])
        what = r.get("path") if r.get("status") == "ok" else f"{r.get('status', 'failed')}: {r.get('reason', '')}"
        lines.append(textwrap.fill(f"{name}: {what}", WIDTH, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


def plot_title(rows: List[Dict[str, Any]], data: Optional[str] = None) -> List[str]:
    """The lines heading the plot: the data, batch size, workers and images timed of the
    successful rows (a range where rows differ), then the noisy rows (others_cpu_pct above
    NOISY_OTHERS_PCT, "noisy" in the table too).

    Example:
        >>> rows = [{"contender": "fastload", "pipeline": "train", "status": "ok", "batch_size": 128,
        ...          "workers": 8, "images": 6144, "others_cpu_pct": 14.0}]
        >>> print("\\n".join(plot_title(rows, "2,000 JPEGs in /data")))
        fastload-bench: 2,000 JPEGs in /data
        batch 128, 8 workers/threads, 6,144 images timed per row
        noisy (other processes used > 10% of the CPUs while timed; img/s understated): fastload (train)
    """
    ok = [r for r in rows if r.get("status") == "ok"]

    def spread(key: str) -> Optional[str]:
        values = sorted({r[key] for r in ok if r.get(key) is not None})
        if not values:
            return None
        return f"{values[0]:,}" if len(values) == 1 else f"{values[0]:,}-{values[-1]:,}"

    lines = ["fastload-bench" + (f": {data}" if data else "")]
    conditions = [f"{text}{value}{unit}" for text, value, unit in
                  (("batch ", spread("batch_size"), ""), ("", spread("workers"), " workers/threads"),
                   ("", spread("images"), " images timed per row")) if value is not None]
    if conditions:
        lines.append(", ".join(conditions))
    noisy = [_name(r) for r in ok if (r.get("others_cpu_pct") or 0.0) > NOISY_OTHERS_PCT]
    if noisy:
        lines.append(f"noisy (other processes used > {NOISY_OTHERS_PCT:.0f}% of the CPUs while timed; img/s "
                     f"understated): {', '.join(noisy)}")
    return lines


def plot(rows: List[Dict[str, Any]], path: str, data: Optional[str] = None) -> None:
    """Draws img/s, CPU ms per image and peak RSS per contender (one panel each), and
    fastload's input stages in CPU ms per image (stacked, one bar per fastload contender)
    into `path` (.png, .svg, .pdf: matplotlib's formats), under a title naming `data` (what
    was read, e.g. the bench's data description), the batch size, the workers and the
    images timed (plot_title). Noisy rows (others_cpu_pct above NOISY_OTHERS_PCT) have
    "noisy" after their img/s and are named under the title. Rows with warnings have their
    img/s label marked " *" in red, and the warnings head the figure. The loop's wait
    ("wait ..." stages) is not stacked on the input stages: those are CPU time summed over
    threads, the wait is the loop's wall time, so it is drawn apart, as a thin hatched bar
    under each contender's stages. Needs matplotlib (`pip install matplotlib`, or the
    `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("fastload-bench: --plot needs matplotlib, which does not import here. "
                         "Install it (pip install matplotlib, or pip install 'fastload[plot]') or drop --plot.")
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        raise SystemExit("fastload-bench: --plot: no contender ran, nothing to draw")
    names = [f"{r['contender']} ({r['pipeline']})" if r.get("pipeline") else r["contender"] for r in ok]
    panels = [("images_per_s", "img/s (higher is better)"), ("cpu_ms_per_image", "CPU ms per image (lower is better)"),
              ("peak_rss_mb", "peak RSS MB (lower is better)")]
    staged = [r for r in ok if r.get("stages_ms_per_image")]
    width = len(panels) + bool(staged)
    import textwrap

    title = "\n".join(textwrap.fill(line, 70 * width) for line in plot_title(ok, data))
    items = warning_items(ok)
    notes = "\n".join(textwrap.fill(line, 55 * width) for line in ([WARNINGS_HEADING] + items if items else []))
    title_in = 0.2 * (title.count("\n") + 1) + 0.1
    notes_in = 0.15 * (notes.count("\n") + 1) + 0.1 if notes else 0.0  # inches of warning text on top
    height = 0.45 * len(ok) + 2.2 + title_in + notes_in
    figure, axes = plt.subplots(1, width, figsize=(5 * width, height), squeeze=False)
    if staged:
        _plot_stages(axes[0][-1], [names[ok.index(r)] for r in staged], staged)
    for axis, (key, panel) in zip(axes[0], panels):
        values = [float(r.get(key) or 0.0) for r in ok]
        colors = ["#999999" if r["contender"] == "baseline" else "#2b6cb0" for r in ok]
        axis.barh(range(len(ok)), values, color=colors)
        axis.set_yticks(range(len(ok)), names if axis is axes[0][0] else [""] * len(ok))
        axis.invert_yaxis()
        axis.set_title(panel, fontsize=10)
        for y, (value, r) in enumerate(zip(values, ok)):
            label = f"{value:.0f}" if key != "cpu_ms_per_image" else f"{value:.2f}"
            if key == "images_per_s" and r.get("ratio"):
                label += f"  ({r['ratio']:.2f}x)"
            if key == "images_per_s" and r.get("warnings"):
                label += WARNING_MARK
            if key == "images_per_s" and (r.get("others_cpu_pct") or 0.0) > NOISY_OTHERS_PCT:
                label += " noisy"
            axis.text(value, y, " " + label, va="center", fontsize=8,
                      color="#c53030" if key == "images_per_s" and r.get("warnings") else "black")
        axis.margins(x=0.25)
    # The title (conditions, noisy rows) on top, then the warnings in red: the same words
    # as around the table.
    figure.text(0.01, 1 - 0.05 / height, title, fontsize=9, ha="left", va="top")
    if notes:
        figure.text(0.01, 1 - title_in / height, notes, fontsize=8, color="#c53030", ha="left", va="top")
    figure.tight_layout(rect=(0, 0, 1, 1 - (title_in + notes_in) / height))  # room for the text on top
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def _plot_stages(axis: Any, names: List[str], rows: List[Dict[str, Any]]) -> None:
    """One stacked bar per fastload contender: CPU ms per image in each input stage
    (engine CPU time summed over threads, or workers' time); under it, apart (not stacked:
    wall time of the loop, not CPU time of a stage), a thin hatched bar of the loop's wait."""
    stages: List[str] = []
    waits: List[str] = []
    for r in rows:
        for stage in r["stages_ms_per_image"]:
            group = waits if stage.startswith("wait") else stages
            if stage not in group:
                group.append(stage)
    palette = ["#8fb8de", "#4a90c2", "#2b6cb0", "#38a169", "#9ae6b4", "#805ad5", "#b794f4", "#f6ad55"]
    for y, r in enumerate(rows):
        left = 0.0
        for i, stage in enumerate(stages):
            value = float(r["stages_ms_per_image"].get(stage, 0.0))
            axis.barh(y - 0.1, value, height=0.6, left=left, color=palette[i % len(palette)],
                      label=stage if y == 0 else None)
            left += value
        if left > 0:
            axis.text(left, y - 0.1, f" {left:.2f}", va="center", fontsize=7)
        for stage in waits:
            value = float(r["stages_ms_per_image"].get(stage, 0.0))
            axis.barh(y + 0.32, value, height=0.16, color="none", edgecolor="#d64545", hatch="////", linewidth=0.8,
                      label=f"{stage}: the loop's wait in __next__, wall ms/img (not stacked)" if y == 0 else None)
            axis.text(value, y + 0.32, f" {value:.2f}", va="center", fontsize=7, color="#d64545")
    axis.set_yticks(range(len(rows)), names)
    axis.invert_yaxis()
    axis.margins(x=0.2)
    axis.set_title("fastload input stages, CPU ms per image", fontsize=10)
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
