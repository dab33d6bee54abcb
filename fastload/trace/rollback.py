"""What a traced `__getitem__` call changed on the user's dataset object, undone.

torch's DataLoader never calls `__getitem__` when it is built, and with worker processes
it calls it only in their copies of the dataset: the training loop's own object never
sees what the calls did. The tracer calls `__getitem__` in the loop's process (to learn
the dataset when the loader is built, and each served index once per epoch), so whatever
such a call leaves on the dataset would be seen where torch's would not: a zip, HDF5 or
LMDB handle opened lazily (`if self.zf is None: self.zf = ZipFile(...)`), which forked
workers would then share; a call counter; a log of served indexes; a cache.

`Snapshot(dataset)` records the dataset's attributes, and those of the objects of the
user's own classes it holds (one level down: a reader, a cache object), before a call;
`restore()` puts them back: attributes added are deleted, attributes rebound are bound
again to what they were, and a list or dict attribute that grew in place (an `append`, a
new cache entry) is cut back to the length it had. In-place changes of other kinds (an
item replaced in a list, a counter in shared memory, a file written) are not undone.

Example:
    >>> import torch
    >>> class Zipped(torch.utils.data.Dataset):
    ...     def __init__(self): self.handle, self.calls, self.seen = None, 0, []
    ...     def __getitem__(self, i):
    ...         self.handle = self.handle or object()   # opened lazily, once per process
    ...         self.calls += 1; self.seen.append(i); self.cache = {}
    ...         return i
    >>> ds = Zipped()
    >>> snapshot = Snapshot(ds); ds[3]; snapshot.restore()
    3
    >>> ds.handle, ds.calls, ds.seen, hasattr(ds, "cache")
    (None, 0, [], False)
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Dict, List, Tuple

# Where libraries live: their objects (transforms, tensors, arrays, file handles) are
# values to rebind, never objects whose own attributes are recorded.
_LIBRARY_MARKERS = ("-packages" + os.sep, os.sep + "lib" + os.sep + "python")
_USER_CLASS: Dict[type, bool] = {}


def _user_class(cls: type) -> bool:
    """True for a class defined in the user's own code (not the standard library or an
    installed package)."""
    known = _USER_CLASS.get(cls)
    if known is None:
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None) or ""
        known = cls.__module__ == "__main__" or bool(path) and not any(m in path for m in _LIBRARY_MARKERS)
        _USER_CLASS[cls] = known
    return known


class _Record:
    """One object's attributes as they were: the bindings, and the lengths of its list and
    dict attributes."""

    __slots__ = ("target", "bound", "lengths")

    def __init__(self, target: Any, attributes: Dict[str, Any]):
        self.target = target
        self.bound = dict(attributes)
        self.lengths = {k: len(v) for k, v in attributes.items() if type(v) in (list, dict)}

    def restore(self) -> None:
        attributes = vars(self.target)
        for key in [k for k in attributes if k not in self.bound]:
            del attributes[key]
        for key, value in self.bound.items():
            if attributes.get(key, _MISSING) is not value:
                attributes[key] = value
        for key, length in self.lengths.items():
            value = self.bound[key]
            grown = len(value) - length
            if grown > 0:
                if type(value) is list:
                    del value[length:]
                else:  # a dict keeps insertion order: what the call added is at its end
                    for added in list(itertools.islice(reversed(value), grown)):
                        del value[added]


_MISSING = object()


class Snapshot:
    """The state of `dataset` (and of the user-class objects it holds) to restore after a
    traced call. Costs a copy of a few attribute dicts: ~1-2 us for a typical dataset."""

    __slots__ = ("records",)

    def __init__(self, dataset: Any):
        self.records: List[_Record] = []
        attributes = _attributes(dataset)
        if attributes is None:
            return
        self.records.append(_Record(dataset, attributes))
        for value in attributes.values():
            if value is not dataset and _user_class(type(value)):
                inner = _attributes(value)
                if inner is not None:
                    self.records.append(_Record(value, inner))

    def restore(self) -> None:
        for record in self.records:
            record.restore()


def _attributes(obj: Any) -> Any:
    """The object's instance dict, or None (a class with __slots__ only, a builtin)."""
    try:
        attributes = vars(obj)
    except TypeError:
        return None
    return attributes if type(attributes) is dict else None


def snapshots(datasets: Tuple[Any, ...]) -> List[Snapshot]:
    """A Snapshot of each dataset (a wrapper and the datasets it holds)."""
    return [Snapshot(d) for d in datasets]
