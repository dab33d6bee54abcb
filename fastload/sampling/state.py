"""The plain-data state of an order: its version, the checks every state passes, and the
encoding of generator states (base64 text, so a state is JSON-able).

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(3)
    >>> torch.equal(unb64(b64(g.get_state())), g.get_state()), is_seed(2 ** 64)
    (True, False)
"""

from __future__ import annotations

import base64
from typing import Any

import torch


# The version of the order's own state (nested in the loader's, whose version is
# fastload.resume.STATE_VERSION): 2 added "rng" (the stream that draws the next epoch's
# shuffle seed when there is no generator); version 1 states, without it, still load.
ORDER_STATE_VERSION = 2
ORDER_STATE_VERSIONS = (1, 2)


def b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode("ascii")


def unb64(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s.encode("ascii"))), dtype=torch.uint8)


def state_error(what: str, fix: str = "Load a state saved by the same kind of loader over the same dataset.") -> ValueError:
    return ValueError(f"fastload.DataLoader.load_state_dict: {what}. {fix}")


def check_common(state: Any, dataset_len: int, kind: str) -> None:
    if not isinstance(state, dict):
        raise state_error(f"expected a dict, got {type(state).__name__}")
    version = state.get("version")
    if type(version) is not int or version not in ORDER_STATE_VERSIONS:
        raise state_error(
            f"expected state version {' or '.join(map(str, ORDER_STATE_VERSIONS))}, got {version!r}",
            "The state was saved by another fastload version; resume with the version that saved it.",
        )
    if state.get("kind") != kind:
        raise state_error(
            f"expected a state of a loader with {'a user sampler' if kind == 'sampler' else 'its own order (no sampler)'}, "
            f"got one of kind {state.get('kind')!r}",
            "Pass the same sampler/batch_sampler arguments as the run that saved it.",
        )
    if state.get("dataset_len") != dataset_len:
        raise state_error(
            f"expected a state for a dataset of {dataset_len} samples, got one saved with "
            f"{state.get('dataset_len')!r} samples",
            "Resume with the same dataset, or start the epoch afresh without load_state_dict.",
        )
    epoch = state.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise state_error(f"expected a non-negative int epoch, got {epoch!r}")


def is_seed(value: Any) -> bool:
    """An int torch.Generator.manual_seed takes (the int64 and uint64 ranges)."""
    return type(value) is int and -2 ** 63 <= value < 2 ** 64


def check_rng_state(value: Any, key: str, scratch: torch.Generator) -> None:
    """Raises unless `value` is a generator state that `scratch` (like the one it is for) takes."""
    if isinstance(value, str):
        try:
            scratch.set_state(unb64(value))
            return
        except (ValueError, RuntimeError, TypeError):
            pass
    raise state_error(f"expected {key!r} to be a saved {scratch.device.type.upper()} generator state (base64 "
                       f"text), got {str(value)[:40]!r}")
