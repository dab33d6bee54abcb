"""PNG decode, one core: fastload's libpng decoder beside PIL and torchvision.io.decode_png
on the same generated files, same run; then one end-to-end row: a folder of PNGs through
torch's DataLoader (torchvision ImageFolder + train transforms) and through
fastload.DataLoader on the same dataset object.

Files: photo-like RGB images (smooth shapes and sensor-like noise, saved by PIL at its
default zlib level) at several sizes, and segmentation masks (mode P and L: a few dozen
class regions) at two sizes. Figures are CPU milliseconds per image (the process's CPU
clock, one thread), the median of `--rounds` rounds; the ratios are the baseline's
figure over fastload's, measured in the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/png_decode.py [--rounds 5] [--e2e-images 256]
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import resource
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import png_samples as ps  # noqa: E402

from fastload import ops  # noqa: E402


def photo_png(height: int, width: int, seed: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(ps.photo(height, width, seed)).save(buffer, "PNG")
    return buffer.getvalue()


def mask_png(height: int, width: int, mode: str, seed: int) -> bytes:
    """Class regions: discs and bands of 21 labels (VOC's count) on background 0."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    labels = np.zeros((height, width), dtype=np.uint8)
    for _ in range(30):
        cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(8, max(9, min(height, width) // 4))
        labels[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(1, 21)
    image = Image.fromarray(labels)
    if mode == "P":
        image = image.convert("P")
        image.putpalette(list(rng.integers(0, 256, 21 * 3)))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def cpu_ms(fn, items, rounds: int, min_s: float = 0.3) -> float:
    """Median over rounds of CPU ms per call; each round repeats the items for >= min_s."""
    for item in items:  # warm-up
        fn(item)
    per_call = []
    for _ in range(rounds):
        calls, start = 0, time.process_time()
        while True:
            for item in items:
                fn(item)
            calls += len(items)
            spent = time.process_time() - start
            if spent >= min_s:
                break
        per_call.append(spent / calls * 1e3)
    return statistics.median(per_call)


def decode_rows(rounds: int):
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_png as tv_decode_png

    cases = [(f"RGB photo {h}x{w}", [photo_png(h, w, s) for s in range(3)], "RGB")
             for h, w in [(256, 256), (375, 500), (768, 1024), (1536, 2048)]]
    cases += [(f"mask {m} {h}x{w}", [mask_png(h, w, m, s) for s in range(3)], "mask")
              for m in ("P", "L") for h, w in [(512, 512), (1024, 2048)]]
    rows = []
    for name, files, mode in cases:
        tensors = [ps.as_tensor(f) for f in files]
        if mode == "RGB":
            pil = cpu_ms(lambda f: np.asarray(Image.open(io.BytesIO(f)).convert("RGB")), files, rounds)
            tv = cpu_ms(lambda t: tv_decode_png(t, ImageReadMode.RGB), tensors, rounds)
        else:  # a label map: np.array(Image.open(...)), torchvision's unchanged read
            pil = cpu_ms(lambda f: np.array(Image.open(io.BytesIO(f))), files, rounds)
            tv = cpu_ms(lambda t: tv_decode_png(t, ImageReadMode.UNCHANGED), tensors, rounds)
        ours = cpu_ms(lambda t: ops.decode_png(t, mode=mode), tensors, rounds)
        kb = statistics.mean(len(f) for f in files) / 1024
        rows.append((name, kb, pil, tv, ours))
    return rows


def _folder(root: str, images: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = os.path.join(root, f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        h, w = int(rng.integers(300, 420)), int(rng.integers(400, 520))
        with open(os.path.join(folder, f"{i}.png"), "wb") as f:
            f.write(photo_png(h, w, i))


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def end_to_end(images: int, workers: int, batch_size: int):
    import torchvision
    from torchvision import transforms as T

    import fastload

    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    rows = []
    with tempfile.TemporaryDirectory() as root:
        _folder(root, images)
        for name, cls in (("torch DataLoader", torch.utils.data.DataLoader), ("fastload.DataLoader", fastload.DataLoader)):
            dataset = torchvision.datasets.ImageFolder(root, transform=transform)
            loader = cls(dataset, batch_size=batch_size, shuffle=True, num_workers=workers, drop_last=True)
            path = getattr(loader, "path", "-")
            for _ in loader:  # warm-up epoch (workers, the engine, the page cache)
                break
            best = None
            for _ in range(2):
                wall, cpu, seen = time.perf_counter(), _cpu_s(), 0
                for batch, _labels in loader:
                    seen += len(batch)
                wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
                if best is None or seen / wall > best[0]:
                    best = (seen / wall, cpu / seen * 1e3)
            rows.append((name, path.split(" [")[0], *best))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--e2e-images", type=int, default=256)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    import PIL
    import torchvision

    from fastload import _ext

    torch.set_num_threads(1)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}; "
          f"torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow {PIL.__version__}, "
          f"libpng {_ext.build_info().get('libpng')}")
    print("\ndecode, one thread, CPU ms per image (median of rounds); ratio = baseline / fastload")
    print("| file | KiB | PIL | torchvision.io.decode_png | fastload decode_png | vs PIL | vs torchvision |")
    print("|---|---|---|---|---|---|---|")
    for name, kb, pil, tv, ours in decode_rows(args.rounds):
        print(f"| {name} | {kb:.0f} | {pil:.3f} | {tv:.3f} | {ours:.3f} | {pil / ours:.2f}x | {tv / ours:.2f}x |")
    print(f"\nend to end: {args.e2e_images} PNGs (300-420 x 400-520), torchvision ImageFolder + RandomResizedCrop(224) + "
          f"flip + ToTensor + Normalize, batch {args.batch_size}, num_workers={args.workers}; best of 2 epochs")
    print("| loader | path | img/s | CPU ms/img |")
    print("|---|---|---|---|")
    rows = end_to_end(args.e2e_images, args.workers, args.batch_size)
    for name, path, rate, cpu in rows:
        print(f"| {name} | {path} | {rate:.0f} | {cpu:.2f} |")
    (_, _, torch_rate, torch_cpu), (_, _, ours_rate, ours_cpu) = rows
    print(f"\nfastload / torch: {ours_rate / torch_rate:.2f}x img/s, {torch_cpu / ours_cpu:.2f}x less CPU per image")


if __name__ == "__main__":
    main()
