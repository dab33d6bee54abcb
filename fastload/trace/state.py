"""The state of one traced call: its record, the thread it runs on, how it stops, the global generators.

The lowest module of the tracer: the stand-ins (openers.py, call.py's TracedImage) and
the patches record into the active `TracedCall` through these names.
"""

from __future__ import annotations

import random
import sys
import threading
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from fastload.trace.where import PACKAGE_CODE, USER_CODE, code_kind, where_in_traceback


def where_frame(frame: Any) -> str:
    """file:line of the innermost frame of the user's code at or outside `frame`, within
    the traced call (else of another package's code, else `frame`'s)."""
    innermost, package = frame, None
    while frame is not None and frame.f_code is not record.__code__:
        kind = code_kind(frame.f_code.co_filename)
        if kind == USER_CODE:
            break
        if kind == PACKAGE_CODE and package is None:
            package = frame
        frame = frame.f_back
    else:
        frame = package or innermost
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


class StopTrace(BaseException):
    """Ends a traced call the tracer cannot see through (BaseException: a dataset's own
    `except Exception` does not swallow it). The reason is on the call."""


@dataclass
class Problem:
    why: str
    where: str


class TracedCall:
    """The record of one `__getitem__` call under the tracer."""

    __slots__ = ("opened", "outputs", "masks", "problem")

    def __init__(self) -> None:
        self.opened: List[Optional[str]] = []  # each Image.open: its path (None: not a path)
        self.outputs: List[Any] = []  # each intercepted transform call
        self.masks: List[Any] = []  # each mask a joint transform call made, and what the call made of it (masks.py)
        self.problem: Optional[Problem] = None


thread_state = threading.local()


def active_call() -> Optional[TracedCall]:
    return getattr(thread_state, "call", None)


def stop_trace(why: str) -> Any:
    """Ends the active traced call: the tracer cannot see through what the code does."""
    call = active_call()
    if call is not None and call.problem is None:
        call.problem = Problem(why, where_frame(sys._getframe(1)))
    raise StopTrace(why)


def source_of(image: Any) -> Tuple[TracedCall, str, Optional[str]]:
    """(call, path, mode) of any traced image (PIL's, OpenCV's, torchvision.io's)."""
    return object.__getattribute__(image, "_fastload_trace")


# ---- the global generators ----------------------------------------------------------------


# Python's, numpy's and torch's global generator states, in that order.
RngState = Tuple[Any, Any, torch.Tensor]


def global_rng_state() -> RngState:
    return random.getstate(), np.random.get_state(), torch.default_generator.get_state()


def global_rng_moved(before: RngState) -> List[str]:
    """The global generators drawn from since `before`."""
    py, npy, tch = before
    moved = []
    if random.getstate() != py:
        moved.append("random")
    now = np.random.get_state()
    if now[2:] != npy[2:] or not np.array_equal(now[1], npy[1]):
        moved.append("numpy.random")
    if not torch.equal(torch.default_generator.get_state(), tch):
        moved.append("torch")
    return moved


def global_rng_restore(state: RngState) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.default_generator.set_state(state[2])


# ---- tracing a dataset -------------------------------------------------------------------

class TraceRefused(Exception):
    def __init__(self, why: str, where: str):
        super().__init__(why)
        self.why, self.where = why, where


def record(dataset: Any, i: int) -> Tuple[TracedCall, Any]:
    call = TracedCall()
    thread_state.call = call
    sample = None
    try:
        sample = dataset[i]
    except StopTrace:
        pass
    except Exception as error:  # noqa: BLE001 - any exception of the user's code is a reason
        if call.problem is None:
            call.problem = Problem(f"raised {type(error).__name__}: {error}", where_in_traceback(error.__traceback__))
    finally:
        thread_state.call = None
    return call, sample
