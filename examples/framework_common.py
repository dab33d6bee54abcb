"""What the framework scripts (train_trainer.py, train_timm.py) share: the tiny folder of
generated JPEGs their `--tiny` runs train on, and the command-line options they have
alike. It names no loader: those scripts stay a framework's own, run under
`python -m fastload run`, which finds this module beside them (the script's folder is
first on sys.path, as with `python SCRIPT.py`).

    parser = common_parser(__doc__, image_size=32, per="process", work="/tmp/my-run")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    root = tiny_folder_unless(args.data, args.work, rank=0)
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def make_tiny_folder(root: str, images: int = 16, size=(36, 44)) -> str:
    """An ImageFolder-layout folder of JPEGs, one image per class (label = sample index)."""
    from PIL import Image

    generator = torch.Generator().manual_seed(0)
    for i in range(images):
        os.makedirs(os.path.join(root, f"c{i:03d}"), exist_ok=True)
        pixels = (255 * torch.rand(3, *size, generator=generator)).to(torch.uint8)
        Image.fromarray(pixels.permute(1, 2, 0).numpy()).save(os.path.join(root, f"c{i:03d}", "0.jpg"))
    return root


def tiny_folder_unless(data, work: str, rank: int) -> str:
    """`data`, or (None) the tiny folder under `work`: written once by rank 0, whole or not
    at all, while the other ranks wait for it."""
    root = data or os.path.join(work, "data")
    if data is None and rank == 0 and not os.path.isdir(root):
        make_tiny_folder(root + ".tmp")
        os.replace(root + ".tmp", root)  # whole, or not there: the other ranks wait for it
    while not os.path.isdir(root):
        time.sleep(0.1)
    return root


def common_parser(doc: str, *, image_size: int, per: str, work: str) -> argparse.ArgumentParser:
    """The options both scripts take (their own follow): --data, --tiny, --batch-size (per
    `per`), --image-size, --workers, --record, --data-only, --work."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="image folder (class folders; default with --tiny: a generated one)")
    parser.add_argument("--tiny", action="store_true", help="tiny generated data and model, CPU friendly")
    parser.add_argument("--batch-size", type=int, default=2, help=f"per {per}")
    parser.add_argument("--image-size", type=int, default=image_size)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--record", help="write what each trained batch held to RECORD.rankN (JSON lines)")
    parser.add_argument("--data-only", action="store_true", help="only iterate the training loader, img/s")
    parser.add_argument("--work", default=work, help="where the --tiny data, caches and checkpoints go")
    return parser
