"""Decode-only micro-benchmark, one thread: PIL vs torchvision.io.decode_jpeg vs fastload's
decode_jpeg (full image, RandomResizedCrop window, window + DCT scaling).

    .venv/bin/python benchmarks/decode.py [--decode-images 500] [--data DIR]
"""

import os
import sys

from fastload.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "decode", "--json", os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "decode.json"), *sys.argv[1:]]))
