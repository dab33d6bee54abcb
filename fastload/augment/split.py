"""Where a transform list stops being native: the native prefix and the Python tail.

A pipeline such as [RandomResizedCrop, RandomHorizontalFlip, TrivialAugmentWide,
ToTensor, Normalize] runs its native prefix on the C++ engine (decode + the fused pass)
and the rest, from the first transform without a native equivalent, per sample in Python
on the prefix's output. The cut is at the FIRST such transform: the order of transforms
is the user's, and a native op after a Python one cannot move ahead of it. `blockers`
names every transform of the tail that has no native equivalent, so one read of
`loader.path` tells the user all that keeps a pipeline off the fully native path.

Example:
    >>> from fastload.augment.split import split_pipeline
    >>> def to_specs(t):
    ...     if t == "python":
    ...         raise ValueError("no native equivalent")
    ...     return [t.upper()]
    >>> split_pipeline(["crop", "flip", "python", "norm", "python"], to_specs)
    Pipeline(native=('CROP', 'FLIP'), tail=('python', 'norm', 'python'), blockers=("'python': no native equivalent", "'python': no native equivalent"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

# How deep fastload walks what users nest: transform wrappers (Compose in Compose),
# datasets (Subset of ConcatDataset), sample structures (tuples, lists, dicts). Deeper
# is one opaque leaf or a refusal; the bound also stops at cycles. Here, the lowest
# layer that walks such nesting, for compat and the layers above to import.
MAX_DEPTH = 32

@dataclass(frozen=True)
class Pipeline:
    """A transform list cut where the native pipeline ends.

    Attributes:
        native: fastload transform specs of the prefix (what the engine runs).
        tail: the user's transforms from the first non-native one on, in order (run per
            sample in Python on the prefix's output); empty for a fully native pipeline.
        blockers: "<transform>: <why>" for every tail transform without a native equivalent.
    """

    native: Tuple[Any, ...]
    tail: Tuple[Any, ...]
    blockers: Tuple[str, ...]


def open_wrappers(transform: Any, parts_of: Callable[[Any], Optional[List[Any]]],
                  max_depth: int = MAX_DEPTH) -> Tuple[List[Any], List[str]]:
    """(the transforms `transform` applies, in order, with every wrapper opened that
    `parts_of` opens (it returns a wrapper's parts, or None for a leaf), down to max_depth
    levels; the opened wrappers' names, outermost first)."""
    leaves: List[Any] = []
    wrappers: List[str] = []

    def visit(t: Any, depth: int) -> None:
        parts = parts_of(t) if depth < max_depth else None
        if parts is None:
            leaves.append(t)
            return
        wrappers.append(type(t).__name__)
        for part in parts:
            visit(part, depth + 1)

    visit(transform, 0)
    return leaves, wrappers


def split_pipeline(transforms: Sequence[Any], to_specs: Callable[[Any], List[Any]],
                   not_native: Tuple[type, ...] = (ValueError,),
                   fuses: Optional[Callable[[List[Any]], str]] = None) -> Pipeline:
    """Cuts `transforms` (already flattened) at the first one `to_specs` refuses.

    Args:
        transforms: the user's transforms, in order.
        to_specs: one transform -> its fastload specs; raises one of `not_native` (with
            the reason as its message) when it has none.
        not_native: the exception types that mean "no native equivalent".
        fuses: specs -> "" when they fuse into one engine pass, else why not. Given, a
            prefix that does not fuse (e.g. a ColorJitter after ToTensor) is cut earlier,
            at the last transform boundary where it still fuses, and the rest joins the
            tail, so that the engine still runs what it can; where no such boundary
            exists the prefix is left as it is (the loader then reports why it does not fuse).
    """
    native: List[Any] = []
    ends: List[int] = [0]  # ends[k]: len(native) after the first k transforms
    cut = len(transforms)
    for position, transform in enumerate(transforms):
        try:
            native.extend(to_specs(transform))
        except not_native:
            cut = position
            break
        ends.append(len(native))
    blockers: List[str] = []
    if fuses is not None and cut > 0 and fuses(native):
        for k in range(cut - 1, 0, -1):
            if not fuses(native[:ends[k]]):
                blockers.append(f"{transforms[k]!r}: does not fuse after the native transforms before it "
                                f"({fuses(native[:ends[k + 1]])})")
                native, cut = native[:ends[k]], k
                break
    tail = tuple(transforms[cut:])
    for t in tail[len(blockers):]:
        try:
            to_specs(t)
        except not_native as error:
            blockers.append(f"{t!r}: {error}")
    return Pipeline(tuple(native), tail, tuple(blockers))


def transforms_repr(native: Sequence[Any], tail: Sequence[Any] = ()) -> str:
    """The transforms as a dataset's repr shows them: the native part (what the engine
    runs), then the Python tail (what runs per sample in Python), when there is one.

    Example:
        >>> from fastload import transforms as T
        >>> transforms_repr([T.CenterCrop(8)], [abs])
        '[CenterCrop(size=(8, 8))] + python[<built-in function abs>]'
    """
    text = f"[{', '.join(repr(t) for t in native)}]"
    return f"{text} + python[{', '.join(repr(t) for t in tail)}]" if tail else text
