"""Train and eval pipelines, every contender, one table: what benchmarks/RESULTS.md records.

    .venv/bin/python benchmarks/train_eval.py                 # generated data
    .venv/bin/python benchmarks/train_eval.py --data /imagenet/train --workers 8

Any fastload-bench flag may be added; the figures also go to benchmarks/out/train_eval.json.
"""

import os
import sys

from fastload.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "main", "--pipeline", "both", "--json", os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "train_eval.json"), *sys.argv[1:]]))
