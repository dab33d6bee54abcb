"""Decode micro-benchmark, one core: fastload's libjpeg-turbo decode (full image, crop
window, crop window + DCT scale) beside PIL and torchvision.io.decode_jpeg, same run,
same JPEG.

The JPEG is a ~500x375 q90 4:2:0 photo-like image (tests/jpeg_samples.photo); windows
are RandomResizedCrop(224) boxes (torchvision's sampler, seeded), the work a training
loader does per sample. Every figure is the median of `--rounds` rounds of `--iters`
decodes, in milliseconds per image.

    .venv/bin/python benchmarks/decode_micro.py [--iters 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import jpeg_samples as js  # noqa: E402

from fastload import ops  # noqa: E402


def choose_scale_denom(crop_h: int, crop_w: int, out_h: int, out_w: int) -> int:
    """Mirror of the C++ choose_scale_denom: largest d with ceil(crop / d) >= out."""
    for d in (8, 4, 2):
        if -(-crop_h // d) >= out_h and -(-crop_w // d) >= out_w:
            return d
    return 1


def per_image_ms(fn, items, iters: int, rounds: int) -> float:
    for item in items[:10]:  # warm-up
        fn(item)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(iters):
            fn(items[i % len(items)])
        times.append((time.perf_counter() - start) / iters * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--width", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from PIL import Image
    import torchvision
    from torchvision.io import decode_jpeg as tv_decode_jpeg
    from torchvision.transforms import RandomResizedCrop

    data = js.encode(js.photo(args.height, args.width, seed=1), quality=90, subsampling="4:2:0")
    tensor = js.as_tensor(data)
    torch.manual_seed(0)
    probe = torch.empty(3, args.height, args.width)
    windows = [list(RandomResizedCrop.get_params(probe, (0.08, 1.0), (3 / 4, 4 / 3))) for _ in range(256)]
    scaled = [(w, choose_scale_denom(w[2], w[3], 224, 224)) for w in windows]
    mean_area = statistics.mean(w[2] * w[3] for w in windows) / (args.height * args.width)
    share_scaled = sum(d > 1 for _, d in scaled) / len(scaled)

    def pil_full(_):
        Image.open(io.BytesIO(data)).convert("RGB")

    def pil_crop(w):  # what torchvision's RandomResizedCrop decodes: everything
        Image.open(io.BytesIO(data)).convert("RGB").crop((w[1], w[0], w[1] + w[3], w[0] + w[2]))

    rows = [
        ("PIL Image.open().convert('RGB') (full)", per_image_ms(pil_full, [None], args.iters, args.rounds)),
        ("PIL full decode + crop (torchvision path)", per_image_ms(pil_crop, windows, args.iters, args.rounds)),
        ("torchvision.io.decode_jpeg (full)", per_image_ms(lambda _: tv_decode_jpeg(tensor), [None], args.iters, args.rounds)),
        ("fastload decode_jpeg (full)", per_image_ms(lambda _: ops.decode_jpeg(tensor), [None], args.iters, args.rounds)),
        ("fastload decode_jpeg (RRC window)", per_image_ms(lambda w: ops.decode_jpeg(tensor, w), windows, args.iters, args.rounds)),
        ("fastload decode_jpeg (RRC window + DCT scale)",
         per_image_ms(lambda ws: ops.decode_jpeg(tensor, ws[0], scale_denom=ws[1]), scaled, args.iters, args.rounds)),
        ("fastload jpeg_header", per_image_ms(lambda _: ops.jpeg_header(tensor), [None], args.iters, args.rounds)),
    ]
    print(f"# decode micro-benchmark: {args.height}x{args.width} q90 4:2:0 photo-like JPEG, {len(data)} bytes")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, 1 thread; "
          f"torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow {Image.__version__}")
    print(f"# RRC windows: mean area {mean_area:.2f} of the image; {share_scaled:.0%} allow a DCT scale for 224x224")
    baseline = rows[0][1]
    print(f"{'':48s} {'ms/image':>9s} {'vs PIL full':>12s}")
    for name, ms in rows:
        print(f"{name:48s} {ms:9.3f} {baseline / ms:11.2f}x")


if __name__ == "__main__":
    main()
