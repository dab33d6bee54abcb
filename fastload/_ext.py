"""Loads the native core, fastload._C, and says what it has.

`import fastload` never fails because of the extension: everything that needs it
calls `require_ops()` (or `require_cuda_ops()`) first, which raises a message that says
how to build it.
"""

from __future__ import annotations

import functools
import os

BUILD_HINT = (
    "Build it from the project root with `make build` (or "
    "`pip install --no-build-isolation -e .`); `python -m fastload.info` shows what was built."
)


class NotBuiltError(RuntimeError):
    """The native extension (or one of its backends) was not built."""


@functools.lru_cache(maxsize=None)
def load_extension():
    """Returns (module, error): the extension module or why it could not load."""
    try:
        import torch  # noqa: F401  (registers the dispatcher before our ops)

        from fastload import _C

        from fastload import _meta  # noqa: F401  (fake kernels for torch.compile)

        return _C, None
    except ImportError as error:  # not built, or built against another torch
        return None, error


def has_ops() -> bool:
    """True when fastload._C loaded and the CPU ops are registered."""
    return load_extension()[0] is not None


def build_info() -> dict:
    """The extension's compile-time configuration ({} when not built)."""
    module, _ = load_extension()
    return dict(module.build_info()) if module is not None else {}


def has_cuda_ops() -> bool:
    """True when the CUDA kernels were compiled in (a GPU may still be absent)."""
    return bool(build_info().get("cuda"))


def has_png() -> bool:
    """True when the native PNG decoder (libpng) was compiled in: PNG images are then
    decoded in C++ by the engine and by fastload.ops.decode_png; otherwise by PIL."""
    return bool(build_info().get("libpng"))


def has_nvjpeg() -> bool:
    """True when the nvJPEG decode op was compiled in."""
    return bool(build_info().get("nvjpeg"))


def require_ops():
    """Returns fastload._C, or raises NotBuiltError saying how to build it."""
    module, error = load_extension()
    if module is None:
        raise NotBuiltError(f"fastload's native extension fastload._C is not available ({error}). {BUILD_HINT}")
    return module


def require_cuda_ops():
    module = require_ops()
    if not has_cuda_ops():
        raise NotBuiltError(
            "fastload._C was built without CUDA kernels. Rebuild on a machine with nvcc and a "
            f"CUDA build of torch (FASTLOAD_CUDA=1 forces it). {BUILD_HINT}"
        )
    return module


def native_disabled_by_env() -> bool:
    """FASTLOAD_NATIVE=0 forces every loader onto the generic path (debugging aid)."""
    return os.environ.get("FASTLOAD_NATIVE", "1") == "0"
