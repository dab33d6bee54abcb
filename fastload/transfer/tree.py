"""Nested batches: apply a function to every tensor, keep the structure as it was.

A batch is any nesting of tensors in dicts (any Mapping), lists, tuples, namedtuples and
dataclass instances; anything else (str, int, None, custom objects) is a leaf left as is.
The rebuilt containers have the same types as the originals, like torch's own pin_memory
(a mutable mapping or list is copied and updated so extra attributes survive).

Example:
    >>> import torch
    >>> from fastload.transfer.tree import tree_map, tree_tensors
    >>> batch = {"x": torch.zeros(2), "meta": ("a", torch.ones(1))}
    >>> out = tree_map(lambda t: t + 1, batch)
    >>> out["x"].tolist(), out["meta"][0], out["meta"][1].tolist()
    ([1.0, 1.0], 'a', [2.0])
    >>> len(tree_tensors(batch))
    2
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
from typing import Any, Callable, List

import torch


def tree_map(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """A copy of `obj` whose every tensor `t` is replaced by `fn(t)`."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (str, bytes)):
        return obj
    if isinstance(obj, collections.abc.Mapping):
        items = {k: tree_map(fn, v) for k, v in obj.items()}
        try:
            if isinstance(obj, collections.abc.MutableMapping):
                clone = copy.copy(obj)
                clone.update(items)
                return clone
            return type(obj)(items)
        except TypeError:  # a mapping type without copy()/update() or dict construction
            return items
    if isinstance(obj, tuple):
        if hasattr(obj, "_fields"):  # namedtuple: positional construction
            return type(obj)(*(tree_map(fn, v) for v in obj))
        try:
            return type(obj)(tree_map(fn, v) for v in obj)
        except TypeError:
            return tuple(tree_map(fn, v) for v in obj)
    if isinstance(obj, list):
        clone = copy.copy(obj)
        for i, v in enumerate(obj):
            clone[i] = tree_map(fn, v)
        return clone
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # copy + field assignment rather than replace(): works for frozen dataclasses and
        # for fields with init=False.
        clone = copy.copy(obj)
        for field in dataclasses.fields(obj):
            object.__setattr__(clone, field.name, tree_map(fn, getattr(obj, field.name)))
        return clone
    return obj


def tree_tensors(obj: Any) -> List[torch.Tensor]:
    """Every tensor of a nested batch, in tree_map's traversal order."""
    found: List[torch.Tensor] = []

    def visit(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    tree_map(visit, obj)
    return found
