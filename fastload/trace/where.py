"""Where the tracer is on, and the user's file:line in what it reports."""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Tuple


# The environment variable that turns the tracer off ("0").
TRACE_ENV = "FASTLOAD_TRACE"


def enabled() -> bool:
    """False when FASTLOAD_TRACE=0 in the environment, or inside `disabled()` on this
    thread (the tracer is off)."""
    return os.environ.get(TRACE_ENV, "1") != "0" and not getattr(_off, "depth", 0)


_off = threading.local()


@contextmanager
def disabled() -> Iterator[None]:
    """The tracer off on this thread (what `fastload.DataLoader(..., trace=False)` does).

    Example:
        >>> with disabled():
        ...     enabled()
        False
    """
    _off.depth = getattr(_off, "depth", 0) + 1
    try:
        yield
    finally:
        _off.depth -= 1


# ---- where: the user's file:line -------------------------------------------------------

_LIBRARY_DIRS: Optional[Tuple[str, ...]] = None


def _library_dirs() -> Tuple[str, ...]:
    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # fastload itself
        for name in ("torch", "torchvision", "PIL", "numpy", "timm"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__file__", None):
                dirs.append(os.path.dirname(os.path.abspath(module.__file__)))
        _LIBRARY_DIRS = tuple(d + os.sep for d in dirs)
    return _LIBRARY_DIRS


_STDLIB = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["stdlib"],
                                                      sysconfig.get_paths()["platstdlib"]})
_KINDS: dict = {}
_BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench") + os.sep
CORE_CODE, PACKAGE_CODE, USER_CODE = 0, 1, 2


def code_kind(filename: str) -> int:
    """CORE_CODE for fastload, torch, torchvision, PIL, numpy, timm and the standard library;
    PACKAGE_CODE for other installed packages; USER_CODE for the rest (the user's code)."""
    kind = _KINDS.get(filename)
    if kind is None:
        path = os.path.abspath(filename)
        packaged = "-packages" + os.sep in path
        if path.startswith(_BENCH_DIR):  # fastload-bench's datasets stand for the user's own code
            kind = USER_CODE
        elif filename.startswith(("<frozen", "<__array_function__")) or path.startswith(_library_dirs()) or \
                (path.startswith(_STDLIB) and not packaged):
            kind = CORE_CODE
        else:
            kind = PACKAGE_CODE if packaged else USER_CODE
        _KINDS[filename] = kind
    return kind


def where_in_traceback(tb: Any) -> str:
    """file:line of the innermost frame of the user's code in a traceback (else of
    another package's code, else the innermost)."""
    found: dict = {}
    last = None
    while tb is not None:
        last = tb
        found[code_kind(tb.tb_frame.f_code.co_filename)] = tb
        tb = tb.tb_next
    tb = found.get(USER_CODE) or found.get(PACKAGE_CODE) or last
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"


def where_defined(dataset: Any) -> str:
    """file:line where the dataset's __getitem__ is defined."""
    code = getattr(getattr(type(dataset), "__getitem__", None), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else type(dataset).__qualname__

# What a refusal of the tracer tells the user to do.
REFUSAL_FIX = ("keep the per-sample work inside the transform (torchvision's transforms are mapped), or "
               "use fastload.FileList(paths, labels, transforms=...)")
