"""A fastload loader that a framework rebuilds keeps fastload's extras.

Accelerate's `prepare()` (and its `skip_first_batches`) does not keep the loader it is
given: it reads torch's arguments off it (dataset, collate_fn, num_workers, ...) and
builds a new loader over the same dataset object with a sharded batch_sampler, through
the DataLoader class it bound at import. Under `fastload.patch()` that class is fastload's,
so the rebuilt loader runs the batch_sampler natively; this module lets it also keep the
extras of the fastload loader it replaces (device, dtype, seed, decode_on, ...), which
torch's arguments cannot carry.

- `offer(loader)`: the loader is about to be rebuilt (Accelerate asks it
  `_is_accelerate_prepared` first): it becomes the template of its dataset.
- `extras_for(dataset, given)`: the template's extras that `given` does not name, for a
  loader built over that dataset object (the patched class asks).
- `before_accelerate_prepare(loader)`: offer(); without the patch, a warning (once per
  process) that Accelerate rebuilds the loader over torch's class, and how to keep it.
- `Rebuildable`: fastload.DataLoader's base for what frameworks ask a loader about
  (Accelerate: `_is_accelerate_prepared`, answered by before_accelerate_prepare).

Templates are held weakly (a template dies with its loader) and match by identity of the
dataset object, never by equality.

Example:
    >>> import torch
    >>> from fastload import DataLoader
    >>> ds = torch.utils.data.TensorDataset(torch.arange(4.0))
    >>> loader = DataLoader(ds, dtype=torch.float16, seed=3)  # (held weakly: keep a reference)
    >>> offer(loader); sorted(extras_for(ds, {"seed": 1}).items())[:3]
    [('accelerate', 'auto'), ('dct_scaling', True), ('decode_on', 'auto')]
    >>> extras_for(ds, {})["dtype"], extras_for(ds, {"seed": 1}).get("seed")
    (torch.float16, None)
"""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from typing import Any, Dict, Mapping

# fastload.DataLoader's keyword-only extras a rebuilt loader takes from its template
# (`exact` is the old spelling of dct_scaling, so it is not carried twice).
EXTRAS = ("device", "dtype", "memory_format", "prefetch_to_device", "accelerate", "decode_on", "on_error",
          "distributed", "uneven", "seed", "dct_scaling", "tail_on", "trace")

_lock = threading.Lock()
_templates: Dict[int, "weakref.ref[Any]"] = {}  # id(dataset) -> the loader offered for it
_warned = False


def offer(loader: Any) -> None:
    """Makes `loader` the template of loaders later built over its dataset object."""
    key = id(loader.dataset)

    def forget(_: Any, key: int = key) -> None:
        with _lock:
            if _templates.get(key) is ref:
                del _templates[key]

    ref = weakref.ref(loader, forget)
    with _lock:
        _templates[key] = ref


def extras_for(dataset: Any, given: Mapping[str, Any]) -> Dict[str, Any]:
    """The extras of the template offered for this dataset object (none: {}), less those
    named in `given` (what the new loader's caller passed wins)."""
    with _lock:
        ref = _templates.get(id(dataset))
    template = ref() if ref is not None else None
    if template is None or template.dataset is not dataset:
        return {}
    return {name: getattr(template, name) for name in EXTRAS if name not in given and hasattr(template, name)}


def before_accelerate_prepare(loader: Any) -> bool:
    """What a fastload loader answers when Accelerate asks `_is_accelerate_prepared`: False
    (Accelerate then shards it, places its batches and tracks its end, as for any loader),
    after offering it as the template of the loader Accelerate builds in its place."""
    global _warned
    offer(loader)
    data_loader = sys.modules.get("accelerate.data_loader")
    bound = getattr(data_loader, "DataLoader", None)
    if bound is not None and not _is_fastload(bound) and not _warned:
        _warned = True
        warnings.warn(
            "fastload.DataLoader: accelerate's prepare() rebuilds this loader over torch's own DataLoader class "
            "(accelerate.data_loader.DataLoader), so the prepared loader runs torch's machinery, without "
            f"fastload's native path or extras ({loader.path.split(':')[0]} here). Call fastload.patch() before "
            "accelerator.prepare(), or run the script with `python -m fastload run SCRIPT.py` "
            "(docs/frameworks.md).", UserWarning, stacklevel=4)
    return False


def _is_fastload(cls: Any) -> bool:
    return any(base.__module__ == "fastload.loader" and base.__name__ == "DataLoader"
               for base in getattr(cls, "__mro__", ()))


class Rebuildable:
    """What frameworks ask a loader before they rebuild it; a base of fastload.DataLoader.

    Accelerate's prepare() reads `_is_accelerate_prepared` first (True: it keeps the loader
    as it is) and sets it on what prepare() returned. A fastload loader answers False
    (Accelerate shards it, places its batches and tracks its end, as for any loader) after
    offering itself as the template of the rebuild (before_accelerate_prepare).
    """

    @property
    def _is_accelerate_prepared(self) -> bool:
        marked = self.__dict__.get("_accelerate_prepared")
        return marked if marked is not None else before_accelerate_prepare(self)

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:
        self.__dict__["_accelerate_prepared"] = value
