"""What a transform called with the image and a detection target is told: v2's
`transform(image, target)` with tv_tensors.BoundingBoxes in the target.

The tracer follows one image per transform call (fastload.trace.call.enter); boxes passed
with it would have to be moved by the engine's drawn geometry, which fastload's own
DetectionDataset does (fastload.augment.boxes). Such a call ends the trace with that
reason (loader.path, fastload.explain), instead of letting torchvision read the stand-in
image and stop on its pixels.

Example:
    >>> holds_boxes(({"labels": 1, "boxes": [0, 0, 1, 1]},))
    False
"""

from __future__ import annotations

from typing import Any

from fastload.augment.split import MAX_DEPTH


def holds_boxes(value: Any, depth: int = 0) -> bool:
    """True when `value` (the inputs after the image) holds a tv_tensors.BoundingBoxes."""
    if type(value).__name__ == "BoundingBoxes" and type(value).__module__.startswith("torchvision."):
        return True
    if depth < MAX_DEPTH and isinstance(value, dict):
        return any(holds_boxes(v, depth + 1) for v in value.values())
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        return any(holds_boxes(v, depth + 1) for v in value)
    return False


def boxes_reason(transform: Any) -> str:
    """Why a `transform(image, target)` call with boxes is not followed, and what runs it."""
    return (f"passes bounding boxes with the image to {type(transform).__name__} (v2's transform(image, target)): the "
            "tracer follows one image per transform call, not its boxes; fastload.DetectionDataset(paths, targets, "
            "transforms) runs the images and their boxes natively")
