"""A traced call's sample: the template with a slot where the engine's image goes, and the checks on it."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import numpy as np
import torch

from fastload.augment.split import MAX_DEPTH
from fastload.trace.call import TracedImage, TracedOutput
from fastload.trace.state import TraceRefused, TracedCall, source_of
from fastload.trace.where import where_defined


_NOTHING = object()


class Slot:
    """Where the engine's batch goes in a sample template: view 0's (SLOT), or image view
    `view`'s where one image reaches several transform calls (`view_slot`)."""

    __slots__ = ("view",)

    def __init__(self, view: int = 0):
        self.view = view

    def __repr__(self) -> str:
        return "<image>" if self.view == 0 else f"<view {self.view}>"

    def __reduce__(self) -> Any:  # (one slot per view in every process: templates compare by identity)
        return view_slot, (self.view,)


SLOT = Slot()
_VIEW_SLOTS: List[Slot] = [SLOT]


def view_slot(view: int) -> Slot:
    """The one Slot of image view `view` (SLOT for view 0)."""
    while len(_VIEW_SLOTS) <= view:
        _VIEW_SLOTS.append(Slot(len(_VIEW_SLOTS)))
    return _VIEW_SLOTS[view]


class MaskSlot(Slot):
    """Where the engine's mask batch goes in a sample template (`view`: its place among the
    engine's outputs, after the image views'; fastload.trace.masks)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<mask>"

    def __reduce__(self) -> Any:
        return mask_slot, (self.view,)


_MASK_SLOTS: Dict[int, MaskSlot] = {}


def mask_slot(view: int) -> MaskSlot:
    """The one MaskSlot of the engine's output `view`."""
    return _MASK_SLOTS.setdefault(view, MaskSlot(view))


class TracedSample(NamedTuple):
    """One traced index: the image's path, the transform, the sample with the output
    replaced by SLOT, and where SLOT sits (keys/positions). Where the image reaches K >= 2
    transform calls (SimCLR's two views, DINO's crops), view v is the v-th call's output:
    `views` holds each view's transform and `views_at` where its `view_slot(v)` sits
    (view 0's are `transform` and `slot_at`); both are empty for one view. A mask read
    from a second file and passed with the image to one joint transform call (masks.py)
    is in `masks` ((its file's path, the engine's fastload.augment.views.Mask)) and
    `masks_at` (where its mask_slot, after the image views' slots, sits)."""

    path: str
    transform: Any
    template: Any
    slot_at: Tuple[Any, ...]
    views: Tuple[Any, ...] = ()
    views_at: Tuple[Tuple[Any, ...], ...] = ()
    masks: Tuple[Tuple[str, Any], ...] = ()
    masks_at: Tuple[Tuple[Any, ...], ...] = ()


# Leaves that hold no traced object (checked first: most of a sample is labels).
PLAIN_LEAVES = (int, float, str, bool, type(None), torch.Tensor, np.ndarray, np.int64)


def _lazy(value: Any) -> bool:
    from fastload.trace.openers import Lazy

    return isinstance(value, Lazy)


def templated(value: Any, out: Any, found: List[Any], at: Tuple[Any, ...], depth: int = 0) -> Any:
    """`value` with `out` replaced by SLOT (its place appended to `found`), copying the
    tuples, lists, dicts and namedtuples around it; TraceRefused for a traced image returned.
    With `out` a dict {id(output): Slot} (several views), each output is replaced by its
    slot and `found` gets (slot, place) pairs."""
    if value is out:
        found.append(at)
        return SLOT
    if type(out) is dict and id(value) in out:
        slot = out[id(value)]
        found.append((slot, at))
        return slot
    kind = type(value)
    if kind in PLAIN_LEAVES:
        return value
    if kind is TracedImage or _lazy(value):
        raise TraceRefused("returns the image itself, not a transform's output (a transform fastload maps must "
                       "make the sample's image)", "")
    if kind is TracedOutput:
        raise TraceRefused("returns a transform output of another call", "")
    if depth >= MAX_DEPTH:
        return value
    if kind is tuple or kind is list:
        return kind([templated(v, out, found, at + (k,), depth + 1) for k, v in enumerate(value)])
    if isinstance(value, tuple) and hasattr(kind, "_fields"):  # a namedtuple
        return kind(*[templated(v, out, found, at + (k,), depth + 1) for k, v in enumerate(value)])
    if kind is dict:
        return {k: templated(v, out, found, at + (k,), depth + 1) for k, v in value.items()}
    return value


def sample_of_call(dataset: Any, call: TracedCall, sample: Any) -> TracedSample:
    """The traced index, or TraceRefused."""
    if call.problem is not None:
        raise TraceRefused(call.problem.why, call.problem.where)
    if call.masks:
        return _with_mask(call, sample)
    if len(call.opened) != 1:
        raise TraceRefused(f"opens {len(call.opened)} images per sample (one is followed, and a mask passed with it "
                           "to one joint transform call)", "")
    if not call.outputs:
        templated(sample, _NOTHING, [], ())  # type: ignore[arg-type]  # a raw image returned: that reason
        raise TraceRefused("opens an image that reaches no transform fastload maps", "")
    if len(call.outputs) > 1:
        return _views_of_call(call, sample)
    out = call.outputs[0]
    if type(sample) is tuple and len(sample) == 2 and sample[0] is out and type(sample[1]) in PLAIN_LEAVES:
        return TracedSample(source_of(out.image)[1], out.transform, (SLOT, sample[1]), (0,))  # the common case, quickly
    found: List[Tuple[Any, ...]] = []
    template = templated(sample, out, found, ())
    if len(found) != 1:
        raise TraceRefused(f"returns the output of {type(out.transform).__name__} {len(found)} times (followed: "
                       "once, inside a tuple, list or dict)" if found else
                       f"does not return the output of {type(out.transform).__name__} as it is (followed: inside "
                       "a tuple, list or dict)", "")
    return TracedSample(source_of(out.image)[1], out.transform, template, found[0])


def _views_of_call(call: TracedCall, sample: Any) -> TracedSample:
    """The traced index of a call whose one image reached several transform calls: view v
    is the v-th call's output, each returned once (a list or tuple of views, a dict, ...)."""
    slots = {id(out): view_slot(v) for v, out in enumerate(call.outputs)}
    found: List[Tuple[Any, ...]] = []
    template = templated(sample, slots, found, ())
    places = dict(found)
    for v, out in enumerate(call.outputs):
        times = sum(1 for slot, _ in found if slot.view == v)
        if times != 1:
            name = type(out.transform).__name__
            raise TraceRefused(f"returns the output of view {v}'s {name} call {times} times (followed: each "
                               "view's output once, inside a tuple, list or dict)" if times else
                               f"does not return the output of view {v}'s {name} call as it is (followed: each "
                               "view's output inside a tuple, list or dict)", "")
    at = tuple(places[view_slot(v)] for v in range(len(call.outputs)))
    return TracedSample(source_of(call.outputs[0].image)[1], call.outputs[0].transform, template, at[0],
                        tuple(out.transform for out in call.outputs), at)


def _with_mask(call: TracedCall, sample: Any) -> TracedSample:
    """The traced index of a call whose image and mask went through one joint transform
    call (fastload.trace.masks): the mask's slot is view_slot(1), the engine's second output."""
    out = call.outputs[0]
    if len(call.outputs) != 1 or len(call.opened) != 2:
        raise TraceRefused(f"opens {len(call.opened)} files and makes {len(call.outputs)} image outputs besides its "
                           "mask (followed: one image and one mask, through one joint transform call)", "")
    slots = {id(out): SLOT, **{id(made): mask_slot(1) for made in call.masks}}
    found: List[Tuple[Any, Any]] = []
    template = templated(sample, slots, found, ())
    images = [at for slot, at in found if slot is SLOT]
    masks = [at for slot, at in found if slot is not SLOT]
    if len(images) != 1 or len(masks) != 1:
        what, times = ("image", len(images)) if len(images) != 1 else ("mask", len(masks))
        raise TraceRefused(f"returns the joint transform's {what} {times} times (followed: the image and the mask "
                           "once each, as they are or with the mask's dtype changed, inside a tuple, list or dict)", "")
    made = sample
    for key in masks[0]:
        made = made[key]
    return TracedSample(source_of(out.image)[1], out.transform, template, images[0], masks=(made.record(),),
                        masks_at=(masks[0],))


def view_count(sample: TracedSample) -> int:
    """The number of image views a traced index makes (1 for a single transform call)."""
    return max(1, len(sample.views))


def collated(templates: List[Any], images: Any) -> Any:
    """torch's default_collate of sample templates, the batch `images` where SLOT is:
    the batch a dataset's own structure gives (the one rebuild of every source whose
    samples are not (image, int label)). `images` is one tensor [B, ...], or one per
    image view (view v's batch where `view_slot(v)` is)."""
    from torch.utils.data._utils.collate import collate, default_collate_fn_map

    def fill(batch: Any, *, collate_fn_map: Any = None) -> Any:
        if isinstance(images, torch.Tensor):
            return images
        return images[batch[0].view]

    return collate(templates, collate_fn_map={Slot: fill, **default_collate_fn_map})


def same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object that cannot be compared: not the same
        return False


def is_int_label(value: Any) -> bool:
    """An int class index that default_collate batches into int64 like the index's labels."""
    if type(value) is int or type(value) is np.int64:
        return True
    return isinstance(value, torch.Tensor) and value.dtype == torch.int64 and value.dim() == 0 and \
        value.layout == torch.strided and value.device.type == "cpu" and not value.requires_grad


def is_simple_template(t: Any) -> bool:
    """A template (SLOT, int label): batches are [images, labels int64 [B]] as the index gives."""
    return type(t) in (tuple, list) and len(t) == 2 and t[0] is SLOT and is_int_label(t[1])


def sample_unless_kept(dataset: Any, traced: List[Any], undo: Callable[[], None]) -> TracedSample:
    """sample_of_call(dataset, call, value) of traced = [call, value] (emptied: nothing of the
    tracer's holds the call's objects afterwards), unless the dataset kept the transform's
    output or what the call opened after it returned (a cache, where the generic path
    would find the stand-in): then the dataset is refused, and `undo()` (the probes'
    rollback.Snapshot restored) takes the stand-ins out of its state."""
    call, value = traced
    traced.clear()
    refusal = None
    try:
        sample = sample_of_call(dataset, call, value)
    except TraceRefused as error:
        refusal = error.with_traceback(None)  # (its frames would keep the outputs alive)
    kept = [weakref.ref(out) for out in call.outputs]
    lazies = _lazies_made_in(call)
    call.outputs.clear()
    call.masks.clear()
    del call, value
    for refs, what in ((kept, "the transform's output"), (lazies, "what it opened")):
        alive = [ref() for ref in refs if ref() is not None]
        if alive:
            if what != "the transform's output":
                what += f" ({type(alive[0]).__name__})"
            del alive
            undo()
            removed = all(ref() is None for ref in refs)
            raise TraceRefused(f"keeps {what} after __getitem__ returns (a cache? the tracer's stand-in "
                           + ("was taken out of it)" if removed else "is held outside the dataset, where it could not "
                              "be taken out: set FASTLOAD_TRACE=0)"), where_defined(dataset))
    if refusal is not None:
        raise refusal
    return sample


def _lazies_made_in(call: TracedCall) -> List[Any]:
    from fastload.trace.openers import made_in

    return made_in(call)


def shape_text(template: Any) -> str:
    if isinstance(template, dict):
        return "{" + ", ".join(f"{k!r}: {shape_text(v)}" for k, v in template.items()) + "}"
    if isinstance(template, (tuple, list)):
        inner = ", ".join(shape_text(v) for v in template)
        return f"({inner})" if isinstance(template, tuple) else f"[{inner}]"
    if isinstance(template, MaskSlot):
        return "mask"
    if isinstance(template, Slot):
        return "image" if template.view == 0 else f"view {template.view}"
    return type(template).__name__
