"""`python -m fastload run SCRIPT.py [ARGS...]`: runs a script, unmodified, with fastload's
DataLoader wherever it (or its framework) builds torch's (fastload.patch).

Like `python -m cProfile`: the script runs as `__main__` (its `if __name__ == "__main__":`
block runs, sys.argv is [SCRIPT.py, ARGS...], its folder comes first on sys.path), and
the exit code is the script's. `python -m fastload run -m package.module [ARGS...]` runs a
module the same way. Under torchrun every rank runs it:
`torchrun --nproc_per_node 2 -m fastload run train.py`. At exit one line on stderr says
how many loaders were built through the patched names and which ran native (and why
not); FASTLOAD_SUMMARY=0 in the environment leaves it out.

Example:
    $ python -m fastload run train.py --epochs 1
    ...
    fastload: 2 DataLoaders: 1 native, 1 generic (train.py:58: custom collate_fn)
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import List, Optional

_USAGE = ("usage: python -m fastload run SCRIPT.py [ARGS...]\n"
          "       python -m fastload run -m MODULE [ARGS...]\n"
          "Runs the script with fastload's DataLoader in place of torch's (fastload.patch()).\n"
          "Other commands: python -m fastload.info, python -m fastload.bench")


def main(argv: Optional[List[str]] = None) -> None:
    """Runs `python -m fastload <argv>`; raises SystemExit with the script's exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(2 if not argv else 0)
    if argv[0] != "run" or len(argv) < 2 or argv[1:] == ["-m"]:
        print(f"fastload: expected `run SCRIPT.py [ARGS...]` or `run -m MODULE [ARGS...]`, got "
              f"{' '.join(argv)!r}.\n{_USAGE}", file=sys.stderr)
        raise SystemExit(2)
    import fastload.patch

    fastload.patch.patch(summary=os.environ.get("FASTLOAD_SUMMARY", "1") != "0")
    if argv[1] == "-m":
        module, args = argv[2], argv[3:]
        sys.argv = [module, *args]  # runpy sets argv[0] to the module's file, as `python -m` does
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script, args = argv[1], argv[2:]
    if not os.path.isfile(script):
        print(f"fastload run: expected a script file, got {script!r} (no such file from {os.getcwd()}).",
              file=sys.stderr)
        raise SystemExit(2)
    sys.argv = [script, *args]
    # As `python SCRIPT.py` does: the script's folder first on sys.path, not fastload's caller's.
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
