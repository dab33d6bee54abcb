"""`fastload.patch()`: fastload's DataLoader wherever code builds torch's, unmodified.

patch() binds a subclass of fastload.DataLoader (`PatchedDataLoader`) to every name that
holds torch's own DataLoader class: `torch.utils.data.DataLoader`,
`torch.utils.data.dataloader.DataLoader`, and the names other modules bound when they were
imported (`from torch.utils.data import DataLoader` in transformers.trainer,
accelerate.data_loader, Lightning, a user's modules). Modules imported later bind the
patched name themselves (their `from torch.utils.data import DataLoader` reads it), and
factories that read `torch.utils.data.DataLoader` when called (timm.data.loader's
create_loader) build fastload's. unpatch() puts torch's class back everywhere patch() or a
later import bound the patched one; loaders built meanwhile keep working.

What stays torch's: classes that subclass torch's DataLoader (their base was fixed when
they were defined, e.g. timm's MultiEpochsDataLoader), torch's own modules other than the
two above, and fastload's (its generic path builds on torch's class: nothing recurses).

`isinstance(x, torch.utils.data.DataLoader)` stays true for every torch DataLoader,
built before the patch or not, and issubclass for its subclasses: PatchedDataLoader's
metaclass answers for torch's class.

Every loader built through a patched name is recorded: `patched_loaders()` lists where
it was built and which path it runs (loader.path: "native: ..." or "generic: <why>"), and
at exit one line on stderr sums them up (`summary()`).

Example:
    >>> import torch, fastload
    >>> fastload.patch()
    >>> loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2)
    >>> isinstance(loader, fastload.DataLoader), [b[0].tolist() for b in loader]
    (True, [[0, 1], [2, 3]])
    >>> fastload.patched_loaders()[-1].path.split(":")[0]
    'generic'
    >>> "torch.utils.data.DataLoader" in fastload.patch.patched_names()
    True
    >>> fastload.unpatch(); torch.utils.data.DataLoader is torch.utils.data.dataloader.DataLoader
    True
    >>> type(loader).__name__, fastload.is_patched()
    ('PatchedDataLoader', False)
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
import threading
import types
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch.utils.data

from fastload.generic import TorchDataLoader
from fastload.loader import DataLoader
from fastload.rebuild import extras_for, unbind_accelerate

_TORCH_MODULES = ("torch.utils.data", "torch.utils.data.dataloader")
# Frames of these packages are not where a loader was "built": the caller above them is.
_SKIPPED_FRAMES = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


class _TorchCompatible(type):
    """PatchedDataLoader's metaclass: isinstance and issubclass answer as torch's class
    does, so that a check against the patched name accepts every torch DataLoader."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, TorchDataLoader)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, TorchDataLoader)


class PatchedLoader(NamedTuple):
    """A loader built through a patched name: where (file:line of the call) and its path."""

    where: str
    path: str

    @property
    def native(self) -> bool:
        """The engine makes (at least the native prefix of) every sample."""
        return not self.path.startswith("generic:")


class PatchedDataLoader(DataLoader, metaclass=_TorchCompatible):
    """fastload.DataLoader as bound by patch(): the same loader, recorded for
    patched_loaders() and the summary at exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A loader rebuilt over another fastload loader's dataset (Accelerate's prepare)
        # keeps that loader's extras (fastload.rebuild).
        dataset = args[0] if args else kwargs.get("dataset")
        kwargs.update(extras_for(dataset, kwargs))
        super().__init__(*args, **kwargs)
        _state.record(PatchedLoader(_caller(), self.path))

    # fastload.DataLoader's signature (torch's arguments, then the extras): frameworks that
    # read the arguments a loader was built with off its __init__ (Lightning, to rebuild it
    # around a DistributedSampler) find `dataset` and the others by name.
    __init__.__signature__ = inspect.signature(DataLoader.__init__)  # type: ignore[attr-defined]


def _caller() -> str:
    """file:line of the first frame outside fastload (the code that built the loader)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED_FRAMES):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


class _State:
    """What patch() changed, to undo it, and the loaders built since."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.loaders: List[PatchedLoader] = []
        self.summary_registered = False
        self.bound: List[str] = []  # "module.name"s patch() bound

    def record(self, loader: PatchedLoader) -> None:
        with self.lock:
            self.loaders.append(loader)


_state = _State()


def _rebind(old: type, new: type) -> List[str]:
    """Binds `new` to every module-level name holding `old` in the modules loaded now
    (not fastload's own, nor torch's but the two public names); returns "module.name"s."""
    changed = []
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name == "fastload" or module_name.startswith("fastload."):
            continue
        if module_name.startswith("torch.") and module_name not in _TORCH_MODULES:
            continue
        try:
            names = [name for name, value in list(vars(module).items()) if value is old]
        except TypeError:  # an object in sys.modules without a __dict__
            continue
        for name in names:
            try:
                setattr(module, name, new)
            except (AttributeError, TypeError):  # a read-only module stand-in: left as it is
                continue
            changed.append(f"{module_name}.{name}")
    return changed


def patch(*, summary: bool = True) -> None:
    """Builds fastload's DataLoader wherever code builds torch's (see the module docstring).

    Calling it again is harmless (it also rebinds modules imported meanwhile that bound
    torch's class some other way).

    Args:
        summary: print one line on stderr at exit saying how many loaders were built
            through the patched names and which paths they ran.
    """
    _state.active = True
    unbind_accelerate()  # (torch's class again under Accelerate's name, so that it is rebound below)
    _state.bound = sorted(set(_state.bound) | set(_rebind(TorchDataLoader, PatchedDataLoader)))
    if summary and not _state.summary_registered:
        atexit.register(_print_summary)
        _state.summary_registered = True


def unpatch() -> None:
    """Puts torch's DataLoader back under every name bound to the patched class (by
    patch(), or by an import since). Loaders built while patched keep working; no summary
    is printed at exit unless patch() is called again."""
    _state.active = False
    _state.bound = []
    _rebind(PatchedDataLoader, TorchDataLoader)


def patched_names() -> List[str]:
    """The "module.name"s patch() bound to fastload's class (those imports bound since are
    not listed; unpatch() restores them too): empty when not patched."""
    return list(_state.bound)


def is_patched() -> bool:
    """torch.utils.data.DataLoader is fastload's (patch() ran and unpatch() did not since)."""
    return torch.utils.data.DataLoader is PatchedDataLoader


def patched_loaders() -> List[PatchedLoader]:
    """The loaders built through patched names since the process started, oldest first:
    where each was built and its loader.path ("native: ...", "hybrid: ..." or
    "generic: <why not native>")."""
    with _state.lock:
        return list(_state.loaders)


def summary() -> Optional[str]:
    """One line on the loaders built through patched names, or None when none was:
    "fastload: 3 DataLoaders: 2 native, 1 generic (train.py:40: custom collate_fn)"."""
    loaders = patched_loaders()
    if not loaders:
        return None
    native = sum(1 for loader in loaders if loader.native)
    generic = [loader for loader in loaders if not loader.native]
    why: Dict[Tuple[str, str], int] = {}
    for loader in generic:
        key = (loader.where, loader.path.split(": ", 1)[1] if ": " in loader.path else loader.path)
        why[key] = why.get(key, 0) + 1
    reasons = "; ".join(f"{where}: {_short(reason)}" + (f" (x{count})" if count > 1 else "")
                        for (where, reason), count in why.items())
    noun = "DataLoader" if len(loaders) == 1 else "DataLoaders"
    line = f"fastload: {len(loaders)} {noun}: {native} native, {len(generic)} generic"
    return line + (f" ({reasons})" if reasons else "")


def _short(text: str, limit: int = 120) -> str:
    """A reason cut to `limit` characters (the whole one is in patched_loaders())."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _print_summary() -> None:
    if not _state.active:
        return
    line = summary()
    if line is not None:
        rank = os.environ.get("RANK") if "LOCAL_RANK" in os.environ else None
        print(line if rank is None else f"[rank {rank}] {line}", file=sys.stderr, flush=True)


class _CallableModule(types.ModuleType):
    """`fastload.patch()` is patch(): importing this module binds the module itself to the
    name fastload.patch (as any submodule import does), so the module calls patch()."""

    def __call__(self, *, summary: bool = True) -> None:
        patch(summary=summary)


sys.modules[__name__].__class__ = _CallableModule
