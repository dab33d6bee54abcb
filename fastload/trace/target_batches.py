"""A traced detection dataset's batches: each index's TracedBoxes moved through the
geometry the engine drew for it, the samples through the user's collate_fn.

A template of such a dataset holds SLOT where the transform's image output was and a
fastload.trace.targets.TracedBoxes where each BoundingBoxes was. Each batch:
`_C.regions_of` of the batch's samples (their canvas_size as the boxes say, the epoch and
the runner's plan, given by `at` before the batch is made), the boxes of every sample moved
at once (fastload.augment.boxes.move_group), SanitizeBoundingBoxes' masks applied to the
labels beside them, then (image, target) samples with the engine's images (views of its
batch) through the collate_fn, as torch's DataLoader hands samples to it. A sample that
falls back (its own __getitem__ made it) keeps its own target; its image is copied into its
slot of the engine's batch.

Example:
    >>> import torch
    >>> from fastload.trace.sample import SLOT
    >>> from fastload.trace.targets import TracedBoxes
    >>> holds_traced_boxes([(SLOT, {"boxes": TracedBoxes(torch.zeros(0, 4), "XYXY", (4, 4), "soft", (), False)})])
    True
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import default_collate

from fastload.augment.split import MAX_DEPTH
from fastload.trace.lazy import LazyTrace, copy_into
from fastload.trace.sample import collated
from fastload.trace.targets import TracedBoxes


def holds_traced_boxes(templates: Sequence[Any], depth: int = 0) -> bool:
    """True when one of these templates holds a TracedBoxes."""
    for value in templates:
        if isinstance(value, TracedBoxes):
            return True
        if depth < MAX_DEPTH and isinstance(value, dict) and holds_traced_boxes(list(value.values()), depth + 1):
            return True
        if depth < MAX_DEPTH and isinstance(value, (list, tuple)) and holds_traced_boxes(list(value), depth + 1):
            return True
    return False


def has_traced_boxes(trace: Any) -> bool:
    """True when a lazy trace's probe samples carry detection targets (TracedBoxes)."""
    probes = getattr(trace, "probes", None)
    return probes is not None and holds_traced_boxes([s.template for s in probes.samples.values()])


class TargetBatches:
    """A lazily traced detection dataset's batches (module doc). Everything else the
    loader calls of a LazyTrace (prepare, ahead, attach, renew, start_fallbacks, ...) goes
    to the trace."""

    def __init__(self, trace: LazyTrace, collate_fn: Any, fill: Callable[[Any, Any], Any]):
        self.trace, self.collate_fn, self.fill = trace, collate_fn or default_collate, fill
        self.epoch, self.plan = 0, None
        self.sizes: Dict[str, Tuple[int, int]] = {}  # image path -> (height, width) from its header

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "trace" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.trace, name)

    def _size_of(self, sample: int, canvas: Tuple[int, int]) -> None:
        """Checks a sample's canvas_size against its image's header (read once per file):
        the engine draws the geometry for the image's own size."""
        from fastload.decode.header import file_header

        path = self.trace.index.source(sample)
        size = self.sizes.get(path)
        if size is None:
            header = file_header(path)
            size = self.sizes[path] = canvas if header is None else (header.height, header.width)
        if tuple(canvas) != tuple(size):
            raise ValueError(f"fastload: {self.trace.who(sample)}: its boxes' canvas_size {tuple(canvas)} is not the "
                             f"size of its image {path} {tuple(size)} (height, width); torchvision v2 refuses such "
                             "a sample too: give the image's size.")

    def _check_own_sizes(self, samples: List[int], images: Sequence[torch.Tensor]) -> None:
        """Images of their own sizes: each image's output size is the one its header's size
        gives (which its boxes followed); else the file is inconsistent, named."""
        from fastload.augment.own_size import own_size
        from fastload.errors import DecodeError

        for sample, image in zip(samples, images):
            path = self.trace.index.source(sample)
            size = self.sizes.get(path)
            if size is not None and own_size(self.plan, *size) != tuple(image.shape[-2:]):
                raise DecodeError(f"the image header's size {tuple(size)} gives a {own_size(self.plan, *size)} output, "
                                  f"its decoded pixels {tuple(image.shape[-2:])}: the file is inconsistent", sample,
                                  path)

    def at(self, epoch: int, plan: Any) -> None:
        """The next batch's epoch and the runner's plan (its seed), whose draws it takes."""
        self.epoch, self.plan = int(epoch), plan

    def __call__(self, images: Any, labels: Any, indices: Any, started: Optional[Dict[int, Any]] = None) -> Any:
        trace = self.trace
        rows = [int(i) for i in indices] if trace.simple else labels.tolist()
        samples = [int(i) for i in indices]
        templates = []
        own_size = isinstance(images, list)  # images of their own sizes (fastload.augment.own_size)
        for k, r in enumerate(rows):
            if trace.fallback[r]:
                # (images of their own sizes: checked against the engine's image of that index)
                image, template = trace.fitted_fallback(r, trace.made_by_getitem(r, started),
                                                        images[k][None] if own_size else images)
                if own_size:
                    images[k] = image
                else:
                    copy_into(images[k], image)
                templates.append(template)  # (its own boxes: no TracedBoxes in it)
            else:
                templates.append(trace.template_of(r))
        per_image = images if own_size else images.unbind(0)
        targets = _resolved(templates, samples, per_image, self.epoch, self.plan, self._size_of, own_size)
        if own_size:  # (torch's default_collate stacks images of one size, else raises as torch does)
            self._check_own_sizes(samples, per_image)
            return self.collate_fn([self.fill(t, image) for t, image in zip(targets, per_image)])
        if self.collate_fn is default_collate:
            return collated(targets, images)  # (the engine's batch where torch would stack it: no second copy)
        return self.collate_fn([self.fill(t, image) for t, image in zip(targets, per_image)])


def _places(value: Any, at: Tuple[Any, ...], found: List[Tuple[Any, ...]], depth: int = 0) -> None:
    """The places of the dicts holding TracedBoxes (each place + the key)."""
    if isinstance(value, dict):
        for key, v in value.items():
            if isinstance(v, TracedBoxes):
                found.append(at + (key,))
            elif depth < MAX_DEPTH:
                _places(v, at + (key,), found, depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        for key, v in enumerate(value):
            _places(v, at + (key,), found, depth + 1)


def _resolved(templates: List[Any], samples: List[int], images: Sequence[torch.Tensor], epoch: int,
              plan: Any, check: Callable[[int, Tuple[int, int]], None], own_size: bool = False) -> List[Any]:
    """The templates with each TracedBoxes' dict made final for this batch's draws
    (`check(sample, canvas_size)` raises for boxes of another canvas than the image's;
    own_size: an own-size plan, each image its own output canvas)."""
    from fastload.augment import boxes as box_ops

    holders: List[Tuple[int, Tuple[Any, ...], TracedBoxes]] = []
    for k, template in enumerate(templates):
        found: List[Tuple[Any, ...]] = []
        _places(template, (), found)
        holders += [(k, place, _at(template, place)) for place in found]
        for place in found:
            check(samples[k], _at(template, place).canvas_size)
    if not holders:
        return templates
    if plan is None:
        raise RuntimeError("fastload: a traced detection batch was made without its epoch and plan (at())")
    groups: Dict[Any, List[int]] = {}
    for h, (_, _, traced) in enumerate(holders):
        key = (traced.format, traced.boxes.dtype, traced.clamping_mode, traced.steps, traced.center_crop)
        groups.setdefault(key, []).append(h)
    out = list(templates)
    for (fmt, _, clamping, box_steps, center_crop), members in groups.items():
        sizes = torch.tensor([list(holders[h][2].canvas_size) for h in members], dtype=torch.int64)
        rows = torch.tensor([samples[holders[h][0]] for h in members], dtype=torch.int64)
        if own_size:  # (each image its own output canvas)
            steps = box_ops.own_size_steps(plan, sizes, rows, epoch)
        else:
            steps = box_ops.steps_of(plan, sizes, rows, epoch, center_crop=center_crop)
        moved = box_ops.move_group([holders[h][2].boxes for h in members], fmt, clamping, steps,
                                   list(range(len(members))), box_steps)
        for m, (h, (boxes, out_fmt, keeps)) in enumerate(zip(members, moved)):
            k, place, _ = holders[h]
            holder = _at(out[k], place[:-1])
            final = box_ops.finish_target(holder, place[-1], boxes, out_fmt, keeps, box_steps, steps.canvas_of(m),
                                          clamping, images[k], f"sample {samples[k]}")
            out[k] = _put(out[k], place[:-1], final)
    return out


def _at(value: Any, place: Tuple[Any, ...]) -> Any:
    for key in place:
        value = value[key]
    return value


def _put(value: Any, place: Tuple[Any, ...], new: Any) -> Any:
    if not place:
        return new
    key, rest = place[0], place[1:]
    if isinstance(value, dict):
        return {**value, key: _put(value[key], rest, new)}
    items = list(value)
    items[key] = _put(items[key], rest, new)
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
