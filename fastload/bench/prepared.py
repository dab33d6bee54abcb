"""The `prepared` suite: fastload on shards made by fastload.prepare, against the original files.

    fastload-bench --suite prepared --dataset-images 1024 --images 1024 --repeat 3 --workers 2
    fastload-bench --suite prepared --prepared-modes lossless,384q90 --data /imagenet/train

Contenders, one table, the same run: torch's DataLoader + torchvision ImageFolder + v2
transforms (PIL) on the original files (`baseline`), fastload on the original files
(`fastload-native`), and fastload on the shards of each `--prepared-modes` mode
(`fastload-tar` on the prepared shards): `lossless` (the same pixels, a restart-segment
index per JPEG), `<max_side>q<quality>` (resized and re-encoded, e.g. 512q90),
`q<quality>` (re-encoded at the same size) or `<max_side>` (quality 90). FFCV is a row
of its own: its converted data and loader where `ffcv` imports, else why not.
Every loader runs the train pipeline (RandomResizedCrop 224 + flip + Normalize, float32,
batch `--batch-size`) in a fresh process, as in the main suite.

Per row, besides the main suite's figures: the size on disk (the shards' bytes; the
folder's files for the original) beside the original's, the preparation time per 1,000
images (`--workers` processes, measured when the shards were made) and the PSNR of
training crops against the original files (the same relative boxes, whole image, 25 %
and 8 % of the area, cut from the PIL decodes of both and resized to 224x224 with PIL
bilinear; lossless is inf).

Rounds (`--repeat`) go over every contender, in reversed order every other round (a
burst of load from other processes hits several contenders, not one); img/s is the
best round's, CPU ms per image and the first batch the least of the rounds (CPU time
is the figure least moved by a busy machine).

Prepared shards are cached: beside the generated data (`<cache>/bench/<hash>/`), or
under `<cache>/bench/prepared/` for `--data`, in a folder named after the mode and a
hash of the source's fingerprint (every file's path, size and mtime) and the settings.
A second run reuses them (fastload.prepare's output, resumed if a run was cut short);
the preparation time comes from `fastload-bench-preparation.json` beside the shards,
written when they were made.

Example:
    >>> from fastload.bench.prepared import parse_modes
    >>> [(m.name, m.options()) for m in parse_modes("lossless,512q75")]
    [('lossless', {}), ('512q75', {'max_side': 512, 'quality': 75})]
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import textwrap
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from fastload.bench import report
from fastload.bench.contenders import CROP
from fastload.bench.measure import MeasureConfig, run_in_subprocess

DEFAULT_MODES = "lossless,512q90,512q75,384q90"
SAMPLES_PER_SHARD = 256
TIMING_NAME = "fastload-bench-preparation.json"
CROP_AREAS = (("whole", 1.0), ("25%", 0.25), ("8%", 0.08))
TORCH, ORIGINAL = "torch+PIL original", "fastload original"
FFCV_LABEL = "ffcv (own .beton)"
# FFCV ships as a source package that builds against the system's OpenCV and libjpeg-turbo
# (pkg-config opencv4, libturbojpeg): a plain `pip install ffcv` fails without them.
FFCV_MISSING = ("not installed (ffcv does not import; `pip install ffcv` builds from source and needs "
                "OpenCV and libjpeg-turbo development files first)")

WIDE_COLUMNS = [
    ("data / loader", "label"),
    ("path", "path"),
    ("img/s", "images_per_s"),
    ("vs torch+PIL", "vs_torch"),
    ("vs fastload original", "vs_original"),
    ("CPU ms/img", "cpu_ms_per_image"),
    ("CPU vs torch+PIL / vs original", "cpu_vs"),
    ("first batch s", "first_batch_s"),
    ("peak RSS MB", "peak_rss_mb"),
    ("size MB (vs original)", "size"),
    ("prep s / 1,000 img", "prep"),
    ("PSNR whole / 25% / 8% dB", "psnr"),
    ("others' CPU %", "others_cpu_pct"),
]
# What fits report.WIDTH columns: CPU time and its ratios (the steady figures), then the
# shards' own columns; every other figure is in --wide and --json.
COMPACT_COLUMNS = [
    ("data / loader", "label"),
    ("img/s", "images_per_s"),
    ("CPU ms", "cpu_ms_per_image"),
    ("vs torch", "cpu_vs_torch_text"),
    ("vs orig", "cpu_vs_original_text"),
    ("1st s", "first_batch_s"),
    ("MB", "size_mb"),
    ("prep/1k", "prep"),
    ("PSNR dB", "psnr"),
]


@dataclasses.dataclass(frozen=True)
class Mode:
    """One preparation: `lossless`, or resized (`max_side`) and re-encoded at `quality`."""

    name: str
    max_side: Optional[int] = None
    quality: Optional[int] = None

    def options(self) -> Dict[str, int]:
        """fastload.prepare's keyword arguments for this mode."""
        return {k: v for k, v in (("max_side", self.max_side), ("quality", self.quality)) if v is not None}


def parse_modes(text: str) -> List[Mode]:
    """Modes from "lossless,512q90,q75,384": lossless, max side + quality, quality alone
    (same size), max side alone (quality 90).

    Raises:
        ValueError: an unknown or repeated mode, or none at all.
    """
    modes: List[Mode] = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        match = re.fullmatch(r"(\d+)?(?:q(\d+))?", name)
        if name == "lossless":
            mode = Mode(name)
        elif match and (match.group(1) or match.group(2)):
            side = int(match.group(1)) if match.group(1) else None
            quality = int(match.group(2)) if match.group(2) else (90 if side else None)
            if (side is not None and side < 1) or (quality is not None and not 1 <= quality <= 100):
                raise ValueError(f"fastload-bench: --prepared-modes {name!r}: expected a max side >= 1 and a "
                                 "quality in 1..100")
            mode = Mode(name, side, quality)
        else:
            raise ValueError(f"fastload-bench: --prepared-modes: expected lossless, <max_side>q<quality> (512q90), "
                             f"q<quality> or <max_side>, comma-separated; got {name!r}")
        if mode in modes or any(m.name == name for m in modes):
            raise ValueError(f"fastload-bench: --prepared-modes names {name!r} twice")
        modes.append(mode)
    if not modes:
        raise ValueError(f"fastload-bench: --prepared-modes is empty: name at least one, e.g. {DEFAULT_MODES}")
    return modes


def folder_bytes(root: str) -> int:
    """Bytes of every file under `root`."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def prepared_folder(root: str, fingerprint: str, mode: Mode, generated: bool) -> str:
    """Where the shards of `root` in `mode` are cached: beside generated data, else under
    the bench's cache; named after the mode and a hash of the source and the settings."""
    from fastload.bench.dataset import default_cache_dir

    from fastload.prepare import encode, segments

    # The layout too: shards made by an older fastload (whole-row segments) are not reused.
    layout = {"index_version": segments.VERSION, "restart_rows": encode.RESTART_ROWS}
    key = hashlib.sha256(json.dumps({"fingerprint": fingerprint, "options": mode.options(), "layout": layout,
                                     "samples_per_shard": SAMPLES_PER_SHARD}, sort_keys=True).encode()).hexdigest()
    base = os.path.dirname(os.path.abspath(root)) if generated else os.path.join(default_cache_dir(), "prepared")
    return os.path.join(base, f"prepared-{mode.name}-{key[:16]}")


def ensure_prepared(root: str, mode: Mode, fingerprint: str, generated: bool, workers: int,
                    progress: bool = False) -> Dict[str, Any]:
    """The cached shards of `root` in `mode`, made (or finished) now if missing.

    Returns:
        {"mode", "folder", "shards", "size_bytes", "samples", "prep_s_per_1000",
        "prep_workers", "prepared_at", "cached"}: `cached` is True when nothing was
        prepared in this call; the preparation time is always the one recorded when the
        shards were made.
    """
    import fastload
    from fastload.prepare.manifest import write_json_atomic
    from fastload.source.manifest import ManifestError, read_manifest

    dst = prepared_folder(root, fingerprint, mode, generated)
    timing_path = os.path.join(dst, TIMING_NAME)
    timing: Optional[Dict[str, Any]] = None
    try:
        with open(timing_path, encoding="utf-8") as f:
            timing = json.load(f)
        manifest = read_manifest(dst)
        if manifest["source"]["fingerprint"] != fingerprint or timing.get("fingerprint") != fingerprint:
            timing = None
    except (OSError, ValueError, KeyError, ManifestError):
        timing = None
    cached = timing is not None
    if not cached:
        start = time.perf_counter()
        out = fastload.prepare(root, dst, samples_per_shard=SAMPLES_PER_SHARD, num_workers=workers,
                               progress=progress, **mode.options())
        seconds = time.perf_counter() - start
        manifest = out.manifest
        samples = manifest["source"]["samples"]
        # A run cut short left some shards: this call's time covers the rest only.
        timed = samples * out.redone / max(1, len(out.shards))
        timing = {
            "fingerprint": fingerprint, "mode": mode.name, "options": mode.options(),
            "samples_per_shard": SAMPLES_PER_SHARD, "seconds": seconds, "images_timed": timed,
            "s_per_1000": seconds / timed * 1000 if timed else None, "workers": workers,
            "prepared_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "psnr": {},
        }
        write_json_atomic(timing_path, timing)
    shards = [os.path.join(dst, s["name"]) for s in manifest["shards"]]
    return {
        "mode": mode.name, "options": mode.options(), "folder": dst, "shards": shards,
        "size_bytes": sum(s["size"] for s in manifest["shards"]), "samples": manifest["source"]["samples"],
        "prep_s_per_1000": timing.get("s_per_1000"), "prep_workers": timing.get("workers"),
        "prepared_at": timing.get("prepared_at"), "cached": cached, "timing_path": timing_path,
    }


def crop_boxes(rng: np.random.Generator):
    """(name, [(left, top, right, bottom) in relative units]) per crop area: the whole
    image, then 3 seeded positions of each smaller square."""
    out = []
    for name, area in CROP_AREAS:
        side = math.sqrt(area)
        boxes = []
        for _ in range(1 if area == 1.0 else 3):
            left, top = rng.uniform(0, 1 - side), rng.uniform(0, 1 - side)
            boxes.append((left, top, left + side, top + side))
        out.append((name, boxes))
    return out


def psnr_of_crops(root: str, shards: List[str], images: int) -> Dict[str, float]:
    """{crop name: PSNR dB} of 224x224 training crops of the prepared decodes against the
    original files' (mean squared error over every crop of that area; inf when equal)."""
    import fastload
    from PIL import Image

    original, prepared = fastload.ImageFolder(root), fastload.TarShards(list(shards))
    if len(prepared) != len(original):
        raise ValueError(f"fastload-bench: {len(prepared)} prepared samples for {len(original)} original files "
                         f"(shards {shards[0]} ...): PSNR needs every sample; were some skipped?")
    sums = {name: [0.0, 0] for name, _ in CROP_AREAS}
    rng = np.random.default_rng(0)
    for i in range(min(images, len(original))):
        a = Image.open(io.BytesIO(original.index.read(i))).convert("RGB")
        b = Image.open(io.BytesIO(prepared.index.read(i))).convert("RGB")
        for name, boxes in crop_boxes(rng):
            for box in boxes:
                crops = [np.asarray(im.resize((CROP, CROP), Image.Resampling.BILINEAR,
                                              box=(box[0] * im.width, box[1] * im.height,
                                                   box[2] * im.width, box[3] * im.height)), dtype=np.float64)
                         for im in (a, b)]
                sums[name][0] += float(np.mean((crops[0] - crops[1]) ** 2))
                sums[name][1] += 1
    return {name: (float("inf") if s == 0 else 10 * math.log10(255.0 ** 2 / (s / n))) for name, (s, n) in sums.items()}


def cached_psnr(info: Dict[str, Any], root: str, images: int) -> Dict[str, float]:
    """psnr_of_crops, kept beside the shards (per image count) so a second run skips it."""
    from fastload.prepare.manifest import write_json_atomic

    with open(info["timing_path"], encoding="utf-8") as f:
        timing = json.load(f)
    table = timing.setdefault("psnr", {})
    if str(images) not in table:
        table[str(images)] = psnr_of_crops(root, info["shards"], images)
        write_json_atomic(info["timing_path"], timing)
    return {name: table[str(images)][name] for name, _ in CROP_AREAS}


def ffcv_unavailable() -> Optional[str]:
    """Why FFCV cannot be raced here (None when it imports)."""
    try:
        found = importlib.util.find_spec("ffcv") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return FFCV_MISSING
    return ("ffcv imports, but its contender (a .beton written by ffcv's DatasetWriter, read by its "
            "Loader) is not part of this bench yet")


def run_suite(bench_data: Any, args: Any, say: Callable[[str], None] = print) -> Dict[str, Any]:
    """Prepares (or reuses) the shards of every mode, races the loaders, prints the table.

    `args` is fastload-bench's namespace (data, workers, batch_size, images, repeat,
    warmup_batches, seed, timeout, progress, wide, prepared_modes, psnr_images).
    Returns {"rows": [...], "prepared": [per-mode preparation records]}.
    """
    from fastload.prepare.source import as_source

    root = bench_data.root
    modes = parse_modes(args.prepared_modes) if isinstance(args.prepared_modes, str) else list(args.prepared_modes)
    fingerprint = as_source(root).fingerprint()
    generated = not getattr(args, "data", None)
    original_bytes = folder_bytes(root)
    infos, failed = [], {}
    for mode in modes:
        try:
            info = ensure_prepared(root, mode, fingerprint, generated, args.workers, args.progress)
            info["psnr"] = cached_psnr(info, root, args.psnr_images)
        except Exception as error:  # noqa: BLE001 -- a mode that cannot be prepared is a row, not a crash
            lines = str(error).strip().splitlines()
            failed[mode.name] = f"preparation failed: {type(error).__name__}: {lines[0] if lines else ''}"[:300]
            say(f"  shards {mode.name}: {failed[mode.name]}")
            continue
        infos.append(info)
        made = f"cached, made {info['prepared_at']}" if info["cached"] else "prepared now"
        per_1000 = info["prep_s_per_1000"]
        say(f"  shards {mode.name}: {info['size_bytes'] / 1e6:.1f} MB, "
            + (f"{per_1000:.1f} s per 1,000 images" if per_1000 is not None else "preparation time unknown")
            + f" ({made}) at {info['folder']}")

    entries = [(TORCH, "baseline", None), (ORIGINAL, "fastload-native", None)]
    entries += [(f"fastload {info['mode']}", "fastload-tar", info) for info in infos]
    runs: Dict[str, List[Dict[str, Any]]] = {label: [] for label, _, _ in entries}
    for repeat in range(args.repeat):
        if args.repeat > 1:
            say(f"round {repeat + 1} of {args.repeat}")
        for label, contender, info in (entries if repeat % 2 == 0 else entries[::-1]):
            runs[label].append(_measure(label, contender, root, info["shards"] if info else [], args, say))

    rows = []
    for label, contender, info in entries:
        row = _best(runs[label])
        row.update(label=label, contender=contender, data=info["mode"] if info else "original")
        if info:
            row.update(size_bytes=info["size_bytes"], prep_s_per_1000=info["prep_s_per_1000"],
                       prep_workers=info["prep_workers"], prepared_at=info["prepared_at"], psnr_db=info["psnr"],
                       prepared_folder=info["folder"])
        else:
            row.update(size_bytes=original_bytes, prep_s_per_1000=None, psnr_db=None)
        rows.append(row)
    for name, reason in failed.items():
        rows.append({"label": f"fastload {name}", "contender": "fastload-tar", "data": name, "status": "failed",
                     "reason": reason})
    order = [TORCH, ORIGINAL] + [f"fastload {m.name}" for m in modes]
    rows.sort(key=lambda r: order.index(r["label"]))  # --prepared-modes' order, failed ones in place
    ffcv = ffcv_unavailable()
    rows.append({"label": FFCV_LABEL, "contender": "ffcv", "data": "ffcv", "status": "unavailable",
                 "reason": ffcv})
    add_ratios(rows, original_bytes)

    say()
    say(f"prepared shards: train pipeline (RandomResizedCrop {CROP} + flip + Normalize), float32, batch "
        f"{args.batch_size}, {args.workers} workers/threads, {args.images} timed images after "
        f"{args.warmup_batches} warm-up batch(es); img/s: best of {args.repeat} round(s), CPU ms/img and first "
        f"batch: least; CPU ratios: torch+PIL's (fastload original's) CPU ms/img over the row's; MB: the "
        f"shards (the original files: {original_bytes / 1e6:.1f} MB); prep: s per 1,000 images when the shards "
        f"were made; PSNR: 224x224 crops (whole / 25% / 8% of the area) against the original files, "
        f"{args.psnr_images} images")
    say(format_rows(rows, wide=args.wide))
    return {"rows": rows, "prepared": infos, "original_bytes": original_bytes}


def _measure(label: str, contender: str, root: str, shards: List[str], args: Any,
             say: Callable[[str], None]) -> Dict[str, Any]:
    from fastload.bench import contenders as registry

    reason = registry.get(contender).unavailable()
    if reason:
        return {"contender": contender, "pipeline": "train", "status": "unavailable", "reason": reason}
    config = MeasureConfig(contender=contender, root=root, pipeline="train", batch_size=args.batch_size,
                           workers=args.workers, images=args.images, warmup_batches=args.warmup_batches,
                           seed=args.seed, shards=list(shards), progress=args.progress)
    result = run_in_subprocess(config, timeout=args.timeout, forward_stderr=True)
    if result.get("status") == "ok":
        say(f"  {label}: {result['images_per_s']:.0f} img/s, {result['cpu_ms_per_image']:.2f} CPU ms/img, "
            f"first batch {result['first_batch_s']:.2f} s")
    else:
        say(f"  {label}: {result.get('status')}: {result.get('reason')}")
    return result


def _best(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The fastest round's figures, with CPU ms/img and the first batch the least of all
    successful rounds (each round's kept in runs_*)."""
    row = dict(report.best_run(runs))
    ok = [r for r in runs if r.get("status") == "ok"]
    if ok:
        row["cpu_ms_per_image"] = min(r["cpu_ms_per_image"] for r in ok)
        row["first_batch_s"] = min(r["first_batch_s"] for r in ok)
        if len(runs) > 1:
            row["runs_cpu_ms_per_image"] = [r.get("cpu_ms_per_image") for r in runs]
            row["runs_first_batch_s"] = [r.get("first_batch_s") for r in runs]
    return row


def add_ratios(rows: List[Dict[str, Any]], original_bytes: int) -> None:
    """img/s and CPU ratios against torch+PIL and fastload on the original files, and
    the size against the original files' (`size_ratio`)."""
    by_label = {r["label"]: r for r in rows if r.get("status") == "ok"}
    torch_row, original_row = by_label.get(TORCH), by_label.get(ORIGINAL)
    for r in rows:
        if r.get("size_bytes") is not None:
            r["size_ratio"] = r["size_bytes"] / original_bytes if original_bytes else None
        if r.get("status") != "ok":
            continue
        for key, ref in (("torch", torch_row), ("original", original_row)):
            r[f"vs_{key}"] = r["images_per_s"] / ref["images_per_s"] if ref else None
            # A short window can read no CPU tick at all (10 ms granularity): no ratio then.
            r[f"cpu_vs_{key}"] = (ref["cpu_ms_per_image"] / r["cpu_ms_per_image"]
                                  if ref and ref["cpu_ms_per_image"] > 0 and r["cpu_ms_per_image"] > 0 else None)
        r["ratio"] = r.get("vs_torch")  # the name report.plot labels its bars with


def _ratio(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _display(row: Dict[str, Any]) -> Dict[str, Any]:
    """The row with its composite cells as text."""
    out = dict(row)
    out["vs_torch"], out["vs_original"] = _ratio(row.get("vs_torch")), _ratio(row.get("vs_original"))
    out["cpu_vs_torch_text"] = _ratio(row.get("cpu_vs_torch"))
    out["cpu_vs_original_text"] = _ratio(row.get("cpu_vs_original"))
    out["cpu_vs"] = f"{out['cpu_vs_torch_text']} / {out['cpu_vs_original_text']}"
    size = row.get("size_bytes")
    out["size_mb"] = "-" if size is None else f"{size / 1e6:.1f}"
    out["size"] = "-" if size is None else f"{size / 1e6:.1f} ({_ratio(row.get('size_ratio'))})"
    prep = row.get("prep_s_per_1000")
    out["prep"] = "-" if prep is None else f"{prep:.1f}"
    psnr = row.get("psnr_db")
    # In CROP_AREAS order: the record beside the shards is stored with sorted keys.
    out["psnr"] = "-" if not psnr else "/".join("inf" if math.isinf(psnr[name]) else f"{psnr[name]:.1f}"
                                                for name, _ in CROP_AREAS)
    return out


def format_rows(rows: List[Dict[str, Any]], wide: bool = False) -> str:
    """The suite's table: every column with `wide`, else what fits report.WIDTH columns
    followed by each row's path (or why it did not run)."""
    shown = [_display(r) for r in rows]
    if wide:
        return report.format_table(shown, WIDE_COLUMNS)
    lines = [report.format_table(shown, COMPACT_COLUMNS, reasons=False), "paths:"]
    for r in shown:
        what = r.get("path") if r.get("status") == "ok" else f"{r.get('status', 'failed')}: {r.get('reason', '')}"
        lines.append(textwrap.fill(f"{r['label']}: {what}", report.WIDTH, initial_indent="  ",
                                   subsequent_indent="      "))
    return "\n".join(lines)


def plot_rows(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows as report.plot draws them: named by their label."""
    return [dict(r, contender=r["label"], pipeline=None) for r in rows]
