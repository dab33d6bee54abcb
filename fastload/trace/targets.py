"""A detection target passed with the image to one transform call (torchvision v2's
`transform(image, target)` with tv_tensors.BoundingBoxes in the target), traced.

The image goes the way of any traced image (fastload.trace.call.enter: its output is the
engine's); the call returns what v2 would, `(output, target, ...)`, each BoundingBoxes of
the target replaced by a `TracedBoxes` leaf: the index's boxes as given (format,
canvas_size, clamping_mode) and what the transform's box-only steps are (ClampBoundingBoxes,
ConvertBoundingBoxFormat, SanitizeBoundingBoxes, taken out of the Compose the engine runs).
Each batch moves them through the geometry the engine drew for that index
(fastload.trace.target_batches, fastload.augment.boxes).

Example:
    >>> holds_boxes(({"labels": 1, "boxes": [0, 0, 1, 1]},))
    False
"""

from __future__ import annotations

import weakref
from typing import Any, Tuple

import torch

from fastload.augment.split import MAX_DEPTH
from fastload.trace.call import enter
from fastload.trace.state import TracedCall, stop_trace

# v2 transforms whose boxes the engine's geometry does not give (drawn ops of their own).
_UNFOLLOWED = ("TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix", "RandomZoomOut", "RandomIoUCrop",
               "RandomAffine", "RandomRotation", "RandomPerspective", "ElasticTransform", "ScaleJitter",
               "RandomShortestSize", "RandomResize", "Pad")
# (the transform the user called) -> (the Compose the engine runs, the box steps, CenterCrop in it)
_SPLIT: "weakref.WeakKeyDictionary[Any, Tuple[Any, Tuple[Any, ...], bool]]" = weakref.WeakKeyDictionary()


def holds_boxes(value: Any, depth: int = 0) -> bool:
    """True when `value` (the inputs after the image) holds a tv_tensors.BoundingBoxes."""
    if _is_boxes(value):
        return True
    if depth < MAX_DEPTH and isinstance(value, dict):
        return any(holds_boxes(v, depth + 1) for v in value.values())
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        return any(holds_boxes(v, depth + 1) for v in value)
    return False


def _is_boxes(value: Any) -> bool:
    return type(value).__name__ == "BoundingBoxes" and type(value).__module__.startswith("torchvision.")


class TracedBoxes:
    """Where a traced call's target held a tv_tensors.BoundingBoxes: the boxes as given
    (plain tensor [N, 4]), their format name, canvas_size (height, width), clamping_mode,
    and the transform's box-only steps (fastload.augment.boxes.BoxStep) and whether it
    centre-crops. Compared by value (two traces of one index agree)."""

    __slots__ = ("boxes", "format", "canvas_size", "clamping_mode", "steps", "center_crop")

    def __init__(self, boxes: torch.Tensor, format: str, canvas_size: Tuple[int, int], clamping_mode: Any,
                 steps: Tuple[Any, ...], center_crop: bool):
        self.boxes, self.format, self.canvas_size = boxes, format, tuple(int(v) for v in canvas_size)
        self.clamping_mode, self.steps, self.center_crop = clamping_mode, tuple(steps), bool(center_crop)

    def __eq__(self, other: Any) -> bool:
        return type(other) is TracedBoxes and self.format == other.format and \
            self.canvas_size == other.canvas_size and self.clamping_mode == other.clamping_mode and \
            self.steps == other.steps and self.boxes.dtype == other.boxes.dtype and \
            self.boxes.shape == other.boxes.shape and bool(torch.equal(self.boxes, other.boxes))

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return TracedBoxes, (self.boxes, self.format, self.canvas_size, self.clamping_mode, self.steps,
                             self.center_crop)

    def __repr__(self) -> str:
        return f"TracedBoxes({len(self.boxes)} {self.format} boxes, canvas_size={self.canvas_size})"


def split_transform(transform: Any) -> Tuple[Any, Tuple[Any, ...], bool]:
    """(the transform without its box-only steps, the steps, whether it centre-crops), one
    answer per transform object (every index then records the same transform).

    Raises (through stop_trace): a box-only step before a geometric transform, or a
    transform whose boxes the engine's geometry does not give.
    """
    try:
        return _SPLIT[transform]
    except (KeyError, TypeError):
        pass
    from fastload.augment import boxes as box_ops
    from fastload.augment.tail import flatten

    leaves = flatten([transform])
    kept, steps = [], []
    for leaf in leaves:
        name = type(leaf).__name__
        if name in _UNFOLLOWED:
            stop_trace(f"passes bounding boxes with the image to {type(transform).__name__}, whose {name} moves "
                       "boxes by its own draws (followed: crops, resizes, flips, colour ops, then v2's "
                       "ClampBoundingBoxes / ConvertBoundingBoxFormat / SanitizeBoundingBoxes)")
        try:
            step = box_ops.box_step_of(leaf)
        except ValueError as error:
            stop_trace(str(error))
        if step is not None:
            steps.append(step)
            continue
        if steps and name in box_ops.GEOMETRY:
            stop_trace(f"applies {name} after a box-only transform in {type(transform).__name__} (followed: "
                       "ClampBoundingBoxes / SanitizeBoundingBoxes after the geometry)")
        kept.append(leaf)
    if not steps:
        engine = transform
    else:
        from torchvision.transforms import v2

        engine = v2.Compose(kept)
    answer = (engine, tuple(steps), any(type(leaf).__name__ == "CenterCrop" for leaf in kept))
    try:
        _SPLIT[transform] = answer
    except TypeError:
        pass
    return answer


def enter_with_targets(call: TracedCall, transform: Any, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """`transform(image, target, ...)` recorded on `call`: (the image's TracedOutput, each
    target with TracedBoxes for its boxes), as v2 returns its inputs."""
    engine, steps, center_crop = split_transform(transform)
    out = enter(call, engine, args[0])
    return (out,) + tuple(_traced_target(a, steps, center_crop, 0) for a in args[1:])


def _traced_target(value: Any, steps: Tuple[Any, ...], center_crop: bool, depth: int) -> Any:
    if _is_boxes(value):
        from fastload.augment import boxes as box_ops

        if value.ndim != 2:
            stop_trace(f"passes bounding boxes of shape {list(value.shape)} (followed: [N, 4])")
        return TracedBoxes(value.as_subclass(torch.Tensor).clone(), box_ops.format_name(value.format),
                           value.canvas_size, value.clamping_mode, steps, center_crop)
    if type(value).__name__ == "Mask" and type(value).__module__.startswith("torchvision."):
        stop_trace("passes a tv_tensors.Mask with the boxes (per-instance masks are not followed)")
    if depth < MAX_DEPTH and type(value) is dict:
        return {k: _traced_target(v, steps, center_crop, depth + 1) for k, v in value.items()}
    if depth < MAX_DEPTH and type(value) in (list, tuple):
        return type(value)(_traced_target(v, steps, center_crop, depth + 1) for v in value)
    return value
