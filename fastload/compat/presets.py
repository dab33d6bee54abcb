"""Transform objects that wrap a pipeline, opened only where that is provably the same.

A wrapper is opened into its parts (which are then converted one by one) only when
calling it is exactly calling its parts in order:

- torchvision's Compose (v1; v2 without forward hooks): `for t in transforms: x = t(x)`.
- torch.nn.Sequential itself (not a subclass), without hooks: the same loop over modules.
- A preset object, such as torchvision's reference-script ClassificationPresetTrain /
  ClassificationPresetEval (`self.transforms = T.Compose([...])`, `__call__` returns
  `self.transforms(img)`). These live in the user's scripts, so they are recognised by
  structure, never by name: the class's `__call__` must compile to exactly
  `return self.transforms(<arg>)`, `transforms` must be a plain instance attribute (no
  class attribute, property or descriptor of that name anywhere in the class's MRO, no
  custom __getattribute__), and the function must take exactly (self, arg). Anything
  else, however alike, stays one opaque transform: it runs in Python.

Example:
    >>> class Preset:
    ...     def __init__(self, transforms):
    ...         self.transforms = transforms
    ...     def __call__(self, img):
    ...         return self.transforms(img)
    >>> parts(Preset("inner"))
    ['inner']
    >>> class LookAlike(Preset):
    ...     def __call__(self, img):
    ...         return self.transforms(img).flip(-1)
    >>> parts(LookAlike("inner")) is None
    True
"""

from __future__ import annotations

import inspect
import types
from typing import Any, List, Optional

import torch

from fastload.compat.mapping import is_torchvision

# What a preset's __call__ must compile to, byte for byte (same interpreter, so the same
# bytecode; argument names and docstrings do not change it).
_REFERENCE = compile("def __call__(self, img):\n    return self.transforms(img)\n", "<preset>", "exec")
_REFERENCE_CODE = next(c for c in _REFERENCE.co_consts if isinstance(c, types.CodeType))
_ODD_FLAGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | inspect.CO_COROUTINE \
    | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def hooked(transform: Any) -> str:
    """Why calling this nn.Module runs more than its forward ("" when it does not): forward
    hooks (its own or global), or a forward replaced on the instance."""
    if not isinstance(transform, torch.nn.Module):
        return ""
    from torch.nn.modules import module as nn_module

    if transform._forward_hooks or transform._forward_pre_hooks:
        return "has forward hooks"
    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return "global nn.Module forward hooks are registered"
    if "forward" in vars(transform):
        return "has its forward replaced on the instance"
    return ""


def _class_attribute(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def calls_self_transforms(obj: Any) -> bool:
    """True when calling `obj` is provably `obj.transforms(arg)` (see the module's docstring)."""
    cls = type(obj)
    call = _class_attribute(cls, "__call__")
    if not isinstance(call, types.FunctionType):
        return False
    code = call.__code__
    if (code.co_code != _REFERENCE_CODE.co_code or code.co_names != _REFERENCE_CODE.co_names
            or code.co_argcount != 2 or code.co_posonlyargcount or code.co_kwonlyargcount
            or code.co_flags & _ODD_FLAGS or code.co_freevars):
        return False
    if cls.__getattribute__ is not object.__getattribute__:
        return False
    if _class_attribute(cls, "transforms") is not None:  # a property, descriptor or class default
        return False
    try:
        return "transforms" in vars(obj)
    except TypeError:  # __slots__: no instance dict
        return False


def parts(transform: Any) -> Optional[List[Any]]:
    """The transforms `transform` applies in order, when it is a wrapper that provably
    just applies them; else None (the transform is a leaf)."""
    if is_torchvision(transform, "Compose"):
        if hooked(transform):
            return None
        return list(transform.transforms)
    if type(transform) is torch.nn.Sequential:
        if hooked(transform):
            return None
        return list(transform)
    if calls_self_transforms(transform):
        return [transform.transforms]
    return None


def why_not_native(transform: Any) -> str:
    """The reason a leaf transform has no native equivalent (no transform name in it)."""
    cls = type(transform)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__.startswith(("torchvision.", "timm.")):
        return "no native equivalent"
    if isinstance(transform, torch.nn.Sequential) or hasattr(transform, "transforms"):
        return (f"wraps transforms, but fastload cannot prove that calling it is exactly calling them ({name} "
                "is not torchvision's Compose, nn.Sequential itself, or a preset whose __call__ is exactly "
                "`return self.transforms(img)`)")
    return f"no native equivalent ({name} is not a torchvision transform)"


def fix_for(transform: Any) -> str:
    """What to change so that a leaf transform stops blocking the native path."""
    if hasattr(transform, "transforms"):
        return ("give it a __call__ that is exactly `return self.transforms(img)`, or pass "
                "its Compose as the dataset's transform")
    return ("drop it or replace it with a fastload.transforms equivalent; kept, it and every "
            "transform after it run in Python on each sample")
