"""Micro-benchmarks: JPEG decode alone on one core, and throughput from 1 to N threads.

Decode-only runs in this process on one thread (its figure is CPU time per image, which a
busy machine disturbs far less than wall time), over the same files for every method,
bytes already in memory (so it measures decoding, not the disk):
  - PIL: Image.open + convert("RGB"), what the torchvision baseline does per sample;
  - torchvision.io.decode_jpeg (CPU, libjpeg-turbo);
  - fastload decode_jpeg, full image;
  - fastload decode_jpeg of a RandomResizedCrop window only (rows and MCU columns);
  - the same window at the largest DCT scale (1/2, 1/4, 1/8) that keeps >= 224 px.
The crop windows come from torchvision's own RandomResizedCrop sampler, seeded.

Scaling runs a contender (fastload-native by default) in fresh processes with 1 and N
workers/threads through measure.run_in_subprocess.

Example:
    >>> from fastload.bench.micro import dct_scale_denom
    >>> dct_scale_denom(crop_height=900, crop_width=1000, size=224)
    4
"""

from __future__ import annotations

import io
import os
import time
from typing import Any, Callable, Dict, List, Sequence

from fastload.bench.dataset import list_samples
from fastload.bench.procfs import system_busy_seconds

DECODE_COLUMNS = [
    ("decoder", "method"),
    ("CPU ms/img", "cpu_ms_per_image"),
    ("vs PIL", "ratio"),
    ("wall ms/img", "ms_per_image"),
    ("mean output px", "mean_pixels"),
    ("others' CPU %", "others_cpu_pct"),
]

SCALING_COLUMNS = [
    ("contender", "contender"),
    ("path", "path"),
    ("1 worker img/s", "one"),
    ("N workers img/s", "many"),
    ("N", "workers"),
    ("speedup", "speedup"),
    ("others' CPU %", "others_cpu_pct"),
]


def dct_scale_denom(crop_height: float, crop_width: float, size: int = 224) -> int:
    """Largest of 8, 4, 2, 1 whose scaled crop still covers `size` on both sides."""
    for denom in (8, 4, 2):
        if crop_height / denom >= size and crop_width / denom >= size:
            return denom
    return 1


def _windows(sizes: Sequence[Sequence[int]], seed: int) -> List[List[int]]:
    """torchvision RandomResizedCrop(224) boxes [top, left, height, width], one per image."""
    import torch
    from torchvision.transforms import v2

    torch.manual_seed(seed)
    boxes = []
    for height, width in sizes:
        top, left, h, w = v2.RandomResizedCrop.get_params(
            torch.empty(3, height, width), scale=[0.08, 1.0], ratio=[3 / 4, 4 / 3]
        )
        boxes.append([int(top), int(left), int(h), int(w)])
    return boxes


def decode_benchmark(root: str, images: int = 200, seed: int = 0) -> List[Dict[str, Any]]:
    """One row per decoder: ms per image on one thread over the same `images` files.

    Rows of methods that cannot run here have status "unavailable" and a reason.
    """
    import numpy as np
    import torch
    from PIL import Image

    torch.set_num_threads(1)  # one core: per-core cost, comparable to the decode floor
    samples = list_samples(root)
    step = max(1, len(samples) // images)
    blobs = []
    for path, _ in samples[::step][:images]:
        with open(path, "rb") as f:
            blobs.append(f.read())
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    sizes = []
    for b in blobs:
        with Image.open(io.BytesIO(b)) as im:
            sizes.append((im.height, im.width))
    windows = _windows(sizes, seed)

    def pil(i):
        with Image.open(io.BytesIO(blobs[i])) as im:
            return np.asarray(im.convert("RGB"))

    methods: Dict[str, Callable[[int], Any]] = {"PIL open+convert": pil}
    reasons: Dict[str, str] = {}
    try:
        from torchvision.io import decode_jpeg as tv_decode

        tv_decode(tensors[0])
        methods["torchvision.io.decode_jpeg"] = lambda i: tv_decode(tensors[i])
    except Exception as error:  # noqa: BLE001 -- a row that says why
        reasons["torchvision.io.decode_jpeg"] = _reason(error)

    fastload_methods = {
        "fastload decode_jpeg full": lambda d, i: d(tensors[i]),
        "fastload decode_jpeg crop window": lambda d, i: d(tensors[i], windows[i]),
        "fastload decode_jpeg crop + DCT scale": lambda d, i: d(
            tensors[i], windows[i], dct_scale_denom(windows[i][2], windows[i][3])
        ),
    }
    try:
        from fastload.ops import decode_jpeg

        decode_jpeg(tensors[0])
        for name, fn in fastload_methods.items():
            methods[name] = (lambda fn: lambda i: fn(decode_jpeg, i))(fn)
    except Exception as error:  # noqa: BLE001
        for name in fastload_methods:
            reasons[name] = _reason(error)

    rows = []
    for name, fn in methods.items():
        for i in range(min(10, len(blobs))):  # warm caches, allocator, lazy init
            fn(i)
        pixels = 0
        cpu0, busy0, start = time.process_time(), system_busy_seconds(), time.perf_counter()
        for i in range(len(blobs)):
            out = fn(i)
            pixels += _pixels(out)
        elapsed = time.perf_counter() - start
        cpu, busy = time.process_time() - cpu0, system_busy_seconds() - busy0
        rows.append({
            "method": name, "status": "ok", "images": len(blobs),
            "ms_per_image": 1e3 * elapsed / len(blobs), "images_per_s": len(blobs) / elapsed,
            "cpu_ms_per_image": 1e3 * cpu / len(blobs), "mean_pixels": pixels / len(blobs),
            "others_cpu_pct": 100.0 * max(0.0, busy - cpu) / (elapsed * (os.cpu_count() or 1)),
        })
    rows += [{"method": n, "status": "unavailable", "reason": r} for n, r in reasons.items()]
    # Ratios of CPU time: on one thread it is the per-core cost, and unlike wall time it
    # does not grow when other processes take the core.
    pil_cpu = rows[0]["cpu_ms_per_image"]
    for r in rows:
        if r["status"] == "ok":
            r["ratio"] = pil_cpu / r["cpu_ms_per_image"]
    return rows


def _pixels(image) -> int:
    """Pixels of a decoded image, HWC (PIL, fastload) or CHW (torchvision)."""
    shape = tuple(image.shape)
    if len(shape) == 3 and shape[0] in (1, 3) and shape[2] not in (1, 3):
        return shape[1] * shape[2]
    return shape[0] * shape[1]


def _reason(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:160]


def scaling_benchmark(
    contenders: Sequence[str],
    config_kwargs: Dict[str, Any],
    workers: int,
    timeout: float,
    progress: bool = True,
    repeat: int = 1,
) -> List[Dict[str, Any]]:
    """For each contender: img/s with 1 worker/thread and with `workers` (the fastest of
    `repeat` runs each), and the speedup."""
    from fastload.bench.contenders import get
    from fastload.bench.measure import MeasureConfig, run_in_subprocess
    from fastload.bench.report import best_run

    rows = []
    for name in contenders:
        row: Dict[str, Any] = {"contender": name, "pipeline": config_kwargs.get("pipeline", "train"), "workers": workers}
        reason = get(name).unavailable()
        if reason:
            rows.append({**row, "status": "unavailable", "reason": reason})
            continue
        attempts: Dict[str, list] = {"one": [], "many": []}
        for _ in range(repeat):  # alternate, so load from other processes hits both alike
            for count, key in ((1, "one"), (workers, "many")):
                attempts[key].append(run_in_subprocess(
                    MeasureConfig(contender=name, workers=count, progress=progress, **config_kwargs),
                    timeout=timeout, forward_stderr=progress,
                ))
        runs = {key: best_run(results) for key, results in attempts.items()}
        failed = [r for r in runs.values() if r.get("status") != "ok"]
        if failed:
            rows.append({**row, "status": failed[0].get("status"), "reason": failed[0].get("reason")})
            continue
        rows.append({
            **row, "status": "ok", "path": runs["many"].get("path"),
            "one": runs["one"]["images_per_s"], "many": runs["many"]["images_per_s"],
            "speedup": runs["many"]["images_per_s"] / runs["one"]["images_per_s"],
            "others_cpu_pct": max(runs["one"]["others_cpu_pct"], runs["many"]["others_cpu_pct"]),
            "runs": runs,
        })
    return rows

