"""A user's collate_fn followed around the engine's images, for any lazily traced dataset.

A traced dataset (a class of the user's own, fastload/trace/lazy.py, or a Hugging
Face dataset, fastload/adapters/huggingface_trace.py) knows each sample's structure without its image: a template
with SLOT where the transform's output was. torch's DataLoader hands the samples to the
loader's collate_fn; `followed_collate` decides whether fastload can do the same with
stand-ins in place of the images and put the engine's batch where the collate_fn stacked
them: transformers' `default_data_collator`, Hugging Face's examples'
`torch.stack([e["pixel_values"] for e in examples])`, any collate_fn that stacks the
images into one place of its output and computes everything else from the other fields.

It is probed on up to three probe samples twice, with stand-ins of two shapes and values
that nothing but a stack of them reproduces (float64, sample-numbered): the stack must
appear exactly once, at the same place, and every other output must be the same in both
probes (an output computed from the images, a cast or scaling of them, does not pass).
Each batch then runs the collate_fn on the samples' templates with stand-ins (no pixels, a
few us per sample) and puts the engine's images where the stack was. A sample that falls
back (its own __getitem__ made it) gets its real fields and a stand-in image: its image is
copied into its slot of the engine's batch.

A Hugging Face row may keep its PIL image (the image column left in by the transform
function, as Hugging Face's examples do) when the collate_fn leaves it out: the template
holds KEPT there, and the collate_fn gets a stand-in it must not use or return.

Example:
    >>> import torch
    >>> from fastload.trace import SLOT
    >>> stack = lambda rows: {"x": torch.stack([r["x"] for r in rows]), "y": torch.tensor([r["y"] for r in rows])}
    >>> place, why = probe_collate(stack, [{"x": SLOT, "y": 3}, {"x": SLOT, "y": 4}])
    >>> place, why
    (('x',), '')
    >>> probe_collate(lambda rows: torch.stack([r["x"] for r in rows]) * 2, [{"x": SLOT, "y": 3}])[1]
    'custom collate_fn (<lambda> does not return the images stacked as they are (0 stacks found; followed: torch.stack of the images))'
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from fastload.augment.split import MAX_DEPTH
from fastload.trace.lazy import LazyTrace, copy_into
from fastload.trace.sample import SLOT, same_value
from fastload.trace.target_batches import TargetBatches, has_traced_boxes


class _Kept:
    """Where a row still holds its (PIL) image: only a collate_fn that leaves it out runs."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<PIL image>"


KEPT = _Kept()


class _KeptStandIn:
    """What a collate_fn gets in place of a kept PIL image (it must not use it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<PIL image (not read by fastload)>"


_STAND_IN = _KeptStandIn()

# The stand-ins a collate_fn is probed with in place of each sample's image: two shapes and
# values that nothing but a stack of them reproduces (float64, sample-numbered).
STAND_INS = ((lambda j: torch.tensor(0.5 + j, dtype=torch.float64)),
             (lambda j: torch.tensor([1000.25 + j, -3.0 - j], dtype=torch.float64)))


def probe_collate(collate_fn: Any, templates: Sequence[Any]) -> Tuple[Optional[Tuple[Any, ...]], str]:
    """(where the collate_fn puts the stacked images, "") for these sample templates, or
    (None, why it is not followed)."""
    outs, places = [], []
    for stand_in in STAND_INS:
        samples = [filled(t, stand_in(j)) for j, t in enumerate(templates)]
        try:
            out = collate_fn(samples)
        except Exception as error:  # noqa: BLE001 - the user's code on stand-ins: not followed
            return None, _why(collate_fn, f"raised {type(error).__name__} on stand-in images: {error}")
        want = torch.stack([stand_in(j) for j in range(len(templates))])
        found: List[Tuple[Any, ...]] = []
        _find(out, want, (), found)
        if len(found) != 1:
            return None, _why(collate_fn, f"does not return the images stacked as they are ({len(found)} stacks "
                                          "found; followed: torch.stack of the images)")
        if _holds(out, _KeptStandIn):
            return None, _why(collate_fn, "returns the PIL images of the rows")
        outs.append(out)
        places.append(found[0])
    if places[0] != places[1] or not _same_rest(outs[0], outs[1], places[0], ()):
        return None, _why(collate_fn, "computes other outputs from the images")
    return places[0], ""


def fast_collate_of_stand_ins(batch: Sequence[Any]) -> Tuple[torch.Tensor, Any]:
    """timm's fast_collate (timm.data.loader) as it batches (uint8 image, target) samples,
    written for stand-in images: the images stacked (fast_collate copies them into a zeroed
    uint8 batch: on uint8 images, the same values), the targets through default_collate,
    1-D ones as int64, as a tuple. Other samples (tuples of views, not (image, target))
    raise TypeError, so the probe names them and the loader keeps the generic path.

    Example:
        >>> from fastload.trace import SLOT
        >>> probe_collate(fast_collate_of_stand_ins, [(SLOT, 3), (SLOT, 4)])
        ((0,), '')
        >>> images, targets = fast_collate_of_stand_ins([(torch.zeros(2), 3), (torch.ones(2), 4)])
        >>> images.shape, targets.dtype
        (torch.Size([2, 2]), torch.int64)
    """
    from torch.utils.data import default_collate

    if not all(type(s) is tuple and len(s) == 2 and isinstance(s[0], torch.Tensor) for s in batch):
        raise TypeError("expected (image, target) samples, as timm's datasets return")
    targets = default_collate([s[1] for s in batch])
    if isinstance(targets, torch.Tensor) and targets.ndim == 1:
        targets = targets.long()
    return torch.stack([s[0] for s in batch]), targets


def followed_collate(rebuild: LazyTrace, collate_fn: Any
                     ) -> Tuple[Union[LazyTrace, "CollatedBatches", TargetBatches, None], str]:
    """(rebuild, "") making each batch of a lazily traced dataset (`rebuild`, its
    LazyTrace) with the user's `collate_fn` (None: torch's default_collate) around the
    engine's images, or (None, why) when the collate_fn is not seen through, or the rows
    keep PIL images that default_collate cannot batch. A detection dataset's samples
    (TracedBoxes in their templates) go through any collate_fn themselves
    (fastload.trace.target_batches)."""
    kept = getattr(rebuild, "kept", "")
    if has_traced_boxes(rebuild):  # detection targets: the samples themselves go through the collate_fn
        return TargetBatches(rebuild, collate_fn, filled), ""
    if collate_fn is None:
        return (None, kept) if kept else (rebuild, "")
    probes = [i for i in rebuild.probes.samples if not rebuild.fallback[i]][:3]
    templates = [rebuild.probes.samples[i].template for i in probes]
    if not templates:
        return None, _why(collate_fn, "could not be probed (no probe sample traced)")
    place, why = probe_collate(collate_fn, templates)
    if place is None:
        return None, why
    return CollatedBatches(rebuild, collate_fn, place), ""


class CollatedBatches:
    """A lazily traced dataset's batches made by the user's collate_fn: the samples'
    templates with a stand-in image through it, the engine's images put where the stack
    was; a sample the engine cannot make (a fallback) gets its own fields, its image copied
    into its slot. Everything else the loader calls of a LazyTrace (prepare, ahead, attach,
    renew, start_fallbacks, ...) goes to the trace."""

    def __init__(self, trace: LazyTrace, collate_fn: Any, place: Tuple[Any, ...]):
        self.trace, self.collate_fn, self.place = trace, collate_fn, place

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "trace" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.trace, name)

    def __call__(self, images: Any, labels: Any, indices: Any, started: Optional[Dict[int, Any]] = None) -> Any:


        trace, stand_in = self.trace, STAND_INS[0](0)
        # (the index's labels are the dataset indexes of a rebuilt sample, else class labels)
        rows = [int(i) for i in indices] if trace.simple else labels.tolist()
        samples = []
        for k, r in enumerate(rows):
            if trace.fallback[r]:
                image, made = trace.fitted_fallback(r, trace.made_by_getitem(r, started), images)
                copy_into(images[k], image)
                template = trace.template_of(r, made) if trace.simple else made
            else:
                template = trace.template_of(r)
            samples.append(filled(template, stand_in))
        return _put(self.collate_fn(samples), self.place, images)


def _why(collate_fn: Any, what: str) -> str:
    name = getattr(collate_fn, "__qualname__", None) or type(collate_fn).__name__
    return f"custom collate_fn ({name} {what})"


def _holds(value: Any, kind: type, depth: int = 0) -> bool:
    if isinstance(value, kind):
        return True
    if depth < MAX_DEPTH and isinstance(value, dict):
        return any(_holds(v, kind, depth + 1) for v in value.values())
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        return any(_holds(v, kind, depth + 1) for v in value)
    return False


def filled(template: Any, image: Any) -> Any:
    """The template with `image` in its SLOT (and the kept-image stand-in for KEPT)."""
    if template is SLOT:
        return image
    if template is KEPT:
        return _STAND_IN
    if type(template) is dict:
        return {k: filled(v, image) for k, v in template.items()}
    if type(template) in (list, tuple):
        return type(template)(filled(v, image) for v in template)
    return template


def _find(value: Any, want: Any, at: Tuple[Any, ...], found: List[Tuple[Any, ...]], depth: int = 0) -> None:
    if isinstance(value, torch.Tensor):
        if value.dtype == want.dtype and value.shape == want.shape and torch.equal(value, want):
            found.append(at)
    elif depth < MAX_DEPTH and isinstance(value, dict):
        for k, v in value.items():
            _find(v, want, at + (k,), found, depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            _find(v, want, at + (k,), found, depth + 1)


def _same_rest(a: Any, b: Any, skip: Tuple[Any, ...], at: Tuple[Any, ...]) -> bool:
    """a and b equal everywhere but at `skip`."""
    if at == skip:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_rest(a[k], b[k], skip, at + (k,)) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_rest(x, y, skip, at + (k,)) for k, (x, y) in enumerate(zip(a, b)))
    return same_value(a, b)  # (a leaf: tensors by dtype, shape and values)


def _put(out: Any, place: Tuple[Any, ...], images: Any) -> Any:
    if not place:
        return images
    key, rest = place[0], place[1:]
    if isinstance(out, (dict, list)):
        out[key] = _put(out[key], rest, images)
        return out
    items = list(out)
    items[key] = _put(items[key], rest, images)
    return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
