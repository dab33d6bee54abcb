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
- `before_accelerate_prepare(loader)`: offer(); without the patch, Accelerate's name for
  torch's class is bound to a one-shot builder for that rebuild (see there).
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
    extras = {name: getattr(template, name) for name in EXTRAS if name not in given and hasattr(template, name)}
    if "seed" in extras and extras["seed"] is None:
        # The augmentation seed the template drew: the rebuilt loader (for the rest of an
        # epoch, say) draws the same random parameters for the same samples.
        extras["seed"] = template.state_dict().get("native_seed")
    return extras


def before_accelerate_prepare(loader: Any) -> bool:
    """What a fastload loader answers when Accelerate asks `_is_accelerate_prepared`: False
    (Accelerate then shards it, places its batches and tracks its end, as for any loader),
    after offering it as the template of the loader Accelerate builds in its place.

    Without fastload.patch(), Accelerate builds that loader through torch's class (the
    name accelerate.data_loader.DataLoader): the name is bound to a one-shot builder
    (`_RebuildOnce`) until that build, which makes a fastload loader over the template's
    dataset, with its extras, and puts torch's class back. Where that cannot be done
    (Accelerate without that name), a warning, once per process, says how to keep fastload.
    """
    global _warned
    offer(loader)
    module = sys.modules.get("accelerate.data_loader")
    bound = getattr(module, "DataLoader", None)
    if bound is None or _is_fastload(bound):
        return False  # not imported (nothing to rebuild), or patched: the rebuild is fastload's
    if _RebuildOnce in getattr(bound, "__mro__", ()):
        bound.restore()  # one left from a prepare() that built no loader
        bound = getattr(module, "DataLoader", None)
    if isinstance(bound, type) and bound.__module__ == "torch.utils.data.dataloader":
        setattr(module, "DataLoader", _RebuildOnce.bound_to(module, bound, loader))
    elif not _warned:
        _warned = True
        warnings.warn(
            "fastload.DataLoader: accelerate's prepare() rebuilds this loader over "
            f"{getattr(bound, '__qualname__', bound)!r}, not a fastload loader, so the prepared loader runs "
            f"without fastload's native path or extras ({loader.path.split(':')[0]} here). Call fastload.patch() "
            "before accelerator.prepare(), or run the script with `python -m fastload run SCRIPT.py` "
            "(docs/frameworks.md).", UserWarning, stacklevel=4)
    return False


class _TorchInstances(type):
    """isinstance/issubclass against a _RebuildOnce answer as against torch's class."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.torch_class)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.torch_class)


class _RebuildOnce(metaclass=_TorchInstances):
    """Stands for torch's DataLoader in Accelerate's module for one build: the first loader
    built through it is a fastload loader when it is over the template's dataset (with the
    template's extras), else torch's; either way torch's class is bound back first."""

    module: Any = None
    torch_class: Any = None
    template: Any = None  # weakref.ref to the loader prepare() was given

    @classmethod
    def bound_to(cls, module: Any, torch_class: type, template: Any) -> type:
        return type("DataLoader", (cls,), {"module": module, "torch_class": torch_class,
                                           "template": weakref.ref(template)})

    @classmethod
    def restore(cls) -> None:
        if getattr(cls.module, "DataLoader", None) is cls:
            setattr(cls.module, "DataLoader", cls.torch_class)

    def __new__(cls, dataset: Any, *args: Any, **kwargs: Any) -> Any:
        cls.restore()
        template = cls.template()
        if template is None or template.dataset is not dataset:
            return cls.torch_class(dataset, *args, **kwargs)
        fastload_class = next(c for c in type(template).__mro__ if _is_fastload_loader(c))
        return fastload_class(dataset, *args, **{**extras_for(dataset, kwargs), **kwargs})


def _is_fastload_loader(cls: Any) -> bool:
    """cls is fastload.DataLoader (named: this module sits under fastload.loader)."""
    return cls.__module__ == "fastload.loader" and cls.__name__ == "DataLoader"


def _is_fastload(cls: Any) -> bool:
    """cls is fastload.DataLoader or a subclass (fastload.patch's PatchedDataLoader)."""
    return any(_is_fastload_loader(base) for base in getattr(cls, "__mro__", ()))


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
