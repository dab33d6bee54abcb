"""Thread scaling of fastload's native path: img/s with 1 thread and with 2 (or --workers),
each in a fresh process. Run it on an otherwise idle machine (check `uptime`).

    .venv/bin/python benchmarks/scaling.py [--workers 2] [--pipeline eval]
    .venv/bin/python benchmarks/scaling.py --scaling-contenders fastload-native,baseline
"""

import os
import sys

from fastload.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "scaling", "--json", os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "scaling.json"), *sys.argv[1:]]))
