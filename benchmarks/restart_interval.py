"""Prepared JPEGs (fastload::transcode_jpeg) by restart interval, one core: file size,
full decode time and crop-window decode time (fastload::decode_jpeg_rows), each beside
the original file's figure measured in the same run (fastload::decode_jpeg).

Images are the bench's generated ImageNet-like photos (fastload.bench.dataset:
~500x375, q90, 4:2:0, ~100 KB). Windows are RandomResizedCrop-like boxes of a fixed
share of the image area (aspect 3/4..4/3, random position, seeded), and
RandomResizedCrop's own boxes (scale 0.08..1: the training mix), the same for both
files. Layouts: whole rows (a restart every 1, 2, 4 MCU rows) and column tiles (a
restart every k MCUs, k the divisor of the image's MCUs per row nearest a tile width of
32, 64 or 128 pixels, transcode_jpeg's -k; whole rows where none is within 32..128 px),
and the transcoder's own choice (-1). The cost of restart markers alone (libjpeg-turbo
leaves its fast Huffman path near each marker) is shown from PIL re-encodes of the same
pixels (optimised Huffman tables, restart every n MCUs) against the same re-encode
without restarts. Times: best of `--rounds` passes over every image and
window, the original's and the prepared file's passes interleaved, CPU milliseconds per decode
(process time of the one thread).

    .venv/bin/python benchmarks/restart_interval.py [--images 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import math
import os
import platform
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fastload import _ext  # noqa: E402
from fastload.bench.dataset import draw_image  # noqa: E402

_ext.require_ops()
fl = torch.ops.fastload


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def per_call_ms(fn, items, rounds: int) -> float:
    """Best of `rounds` passes over items, CPU ms per call: process CPU time, not wall
    time, and the least disturbed pass, so that other work on a shared machine (which
    only ever adds time) moves the figures less."""
    for item in items[: min(len(items), 5)]:
        fn(item)
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for item in items:
            fn(item)
        times.append((time.process_time() - start) / len(items) * 1e3)
    return min(times)


def paired_ms(fn_a, fn_b, items, rounds: int):
    """(a, b): per_call_ms of two decoders, their passes interleaved so that both see
    the same machine load."""
    a, b = [], []
    for _ in range(rounds):
        a.append(per_call_ms(fn_a, items, 1))
        b.append(per_call_ms(fn_b, items, 1))
    return min(a), min(b)


def windows_of_area(h: int, w: int, share: float, count: int, rng: random.Random):
    out = []
    for _ in range(count):
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        ww = min(w, max(1, round(math.sqrt(share * h * w * aspect))))
        hh = min(h, max(1, round(math.sqrt(share * h * w / aspect))))
        out.append([rng.randint(0, h - hh), rng.randint(0, w - ww), hh, ww])
    return out


def rrc_windows(h: int, w: int, count: int, rng: random.Random):
    """RandomResizedCrop's boxes (torchvision's sampling: scale 0.08..1, ratio 3/4..4/3,
    ten tries, then the centre crop of the clamped ratio)."""
    out = []
    for _ in range(count):
        for _ in range(10):
            area = h * w * rng.uniform(0.08, 1.0)
            aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            ww, hh = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < ww <= w and 0 < hh <= h:
                out.append([rng.randint(0, h - hh), rng.randint(0, w - ww), hh, ww])
                break
        else:
            out.append([0, 0, h, w])
    return out


def pil_encode(pixels, **options) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90, **options)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--windows", type=int, default=8, help="windows per image and area")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    pixels = [draw_image(args.seed, i) for i in range(args.images)]
    originals = [as_tensor(pil_encode(p)) for p in pixels]
    rng = random.Random(args.seed)
    shares = (0.08, 0.25, 1.0, "RandomResizedCrop")
    windows = {s: [] for s in shares}
    for i, data in enumerate(originals):
        h, w = fl.jpeg_header(data)[:2]
        for s in shares:
            boxes = rrc_windows(h, w, args.windows, rng) if isinstance(s, str) else \
                windows_of_area(h, w, s, args.windows, rng)
            windows[s] += [(i, win) for win in boxes]
    size_orig = sum(d.numel() for d in originals)
    sizes = [tuple(p.shape[:2]) for p in pixels]
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, one thread; "
          f"{args.images} images, mean {sum(s[0] for s in sizes) / len(sizes):.0f}x"
          f"{sum(s[1] for s in sizes) / len(sizes):.0f}, mean {size_orig / len(originals) / 1e3:.1f} KB (q90 4:2:0)")

    header = "| file | size vs original | full decode ms (original) | " + " | ".join(
        f"{s if isinstance(s, str) else f'{int(s * 100)}%'} window ms (original)" for s in shares) + " |"
    print(header)
    print("|" + "---|" * (3 + len(shares)))
    def tiles_of(data: torch.Tensor, width_px: int) -> int:
        """transcode_jpeg's restart_rows for tiles nearest width_px wide (1: whole rows)."""
        h, w, components = fl.jpeg_header(data)[:3]
        mcu = 16  # the bench's photos are 4:2:0
        mcus = -(-w // mcu)
        ks = [k for k in range(2, mcus) if mcus % k == 0 and 32 <= k * mcu <= 128]
        return -min(ks, key=lambda k: abs(k * mcu - width_px)) if ks else 1

    layouts = [(f"restart every {r} MCU row{'s' if r > 1 else ''}", lambda d, r=r: r) for r in (1, 2, 4)]
    layouts += [(f"tiles of ~{px} px", lambda d, px=px: tiles_of(d, px)) for px in (32, 64, 128)]
    layouts += [("tiles, transcoder's choice (-1)", lambda d: -1)]
    for label, restart_of in layouts:
        prepared = [fl.transcode_jpeg(d, restart_of(d)) for d in originals]
        size = sum(p[0].numel() for p in prepared)
        indices = list(range(len(originals)))
        full_orig, full = paired_ms(lambda i: fl.decode_jpeg(originals[i]), lambda i: fl.decode_jpeg(prepared[i][0]),
                                    indices, args.rounds)
        cells = []
        for s in shares:
            orig, t = paired_ms(lambda iw: fl.decode_jpeg(originals[iw[0]], iw[1]),
                                lambda iw: fl.decode_jpeg_rows(prepared[iw[0]][0], prepared[iw[0]][1], iw[1]),
                                windows[s], args.rounds)
            cells.append(f"{t:.3f} ({orig:.3f})")
        print(f"| prepared, {label} | "
              f"{size / size_orig:.3f} | {full:.3f} ({full_orig:.3f}) | " + " | ".join(cells) + " |")

    # Finer intervals (per MCU) from PIL re-encodes: cost only, no partial decode.
    base = [as_tensor(pil_encode(p, optimize=True)) for p in pixels]
    base_size = sum(d.numel() for d in base)
    print()
    print("| PIL re-encode, optimised Huffman | size vs no restarts | full decode ms (no restarts) |")
    print("|---|---|---|")
    indices = list(range(len(pixels)))
    for blocks in (1, 4, 16):
        files = [as_tensor(pil_encode(p, optimize=True, restart_marker_blocks=blocks)) for p in pixels]
        base_full, full = paired_ms(lambda i: fl.decode_jpeg(base[i]), lambda i: fl.decode_jpeg(files[i]), indices,
                                    args.rounds)
        print(f"| restart every {blocks} MCU{'s' if blocks > 1 else ''} | "
              f"{sum(d.numel() for d in files) / base_size:.3f} | {full:.3f} ({base_full:.3f}) |")

if __name__ == "__main__":
    main()
