"""The samples a lazy trace cannot make in an epoch: which, why, and their own `__getitem__`'s result.

A later index whose trace disagrees with the probes' falls back *per sample*: the engine
makes a tiny placeholder in its slot (placeholder.py) and the batch gets what the
dataset's own `__getitem__` returns for it, as torch's DataLoader would: in this process
with num_workers=0, else in `num_workers` forked processes started when the batch is
submitted (fallback_pool.py). `fitted` checks that such a sample fits the batch made by
the engine.

Example:
    >>> falls = Fallbacks(4)
    >>> falls.add(2, "raised KeyError at data.py:12")
    True
    >>> falls.flags.tolist(), falls.why
    ([False, False, True, False], {2: 'raised KeyError at data.py:12'})
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload.trace.rollback import Snapshot
from fastload.trace.sample import TracedSample, is_int_label, mask_slot, shape_text, templated, view_slot


class Fallbacks:
    """Per index of an epoch: whether it falls back (`flags`) and why (`why`, index -> the
    reason at the user's file:line), and the worker processes that make them.

    Args:
        n: the dataset's length.
    """

    def __init__(self, n: int):
        self.flags = np.zeros(n, dtype=bool)
        self.why: Dict[int, str] = {}
        self.warned = False
        self.workers, self.seed, self.epochs = 0, 0, 0
        self._pool: Any = None  # a FallbackPool (fallback_pool.py), made at the first fallback of an epoch

    def add(self, i: int, why: str) -> bool:
        """Index i falls back; True when it is the epoch's first (the one to warn about)."""
        self.flags[i] = True
        self.why[i] = why
        first, self.warned = not self.warned, True
        return first

    def new_epoch(self) -> None:
        """None falls back yet; the workers (forked from the last epoch's dataset) stopped."""
        self.close()
        self.epochs += 1
        self.flags[:] = False
        self.why.clear()
        self.warned = False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def start(self, dataset: Any, indices: Sequence[int], in_workers: bool) -> Optional[Dict[int, Any]]:
        """The samples of `indices` that fall back, started in the worker processes
        ({index: future}); None when there are none or `in_workers` is False."""
        rows = [int(i) for i in indices if self.flags[int(i)]]
        if not rows or not in_workers:
            return None
        if self._pool is None:
            from fastload.trace.fallback_pool import FallbackPool  # (forks: loaded only where a sample falls back)

            # (another base seed each epoch, as torch's workers draw one per iter())
            seed = (self.seed + 1_000_003 * self.epochs) % (1 << 62)
            self._pool = FallbackPool(dataset, workers=self.workers, base_seed=seed)
        return self._pool.start(rows)


def made_by_getitem(dataset: Any, i: int, started: Optional[Dict[int, Any]], keep_effects: bool) -> Any:
    """Index i's sample from its own __getitem__: a worker's (`started`), else made here,
    its effects on the dataset kept only where torch's call would change the loop's object."""
    future = started.get(i) if started else None
    if future is not None:
        return future.result()
    if keep_effects:
        return dataset[i]
    snapshot = Snapshot(dataset)  # (torch's call would change a worker's copy, not the loop's object)
    try:
        return dataset[i]
    finally:
        snapshot.restore()


def fitted(made: str, sample: Any, images: Any, first: TracedSample, simple: bool) -> Tuple[Any, Any]:
    """(image, label) (simple) or (image, template) of a `sample` made by its own
    __getitem__ (`made` names it in messages), checked to fit the engine's batch `images`
    whose other samples are shaped like `first`. Where `first` has several image views
    (or a mask), `images` is one batch per view (then per mask) and the answer ([each
    view's image, then each mask], template)."""
    if first.views or first.masks:
        places = (first.views_at or (first.slot_at,)) + first.masks_at
        views = [_image_at(made, sample, at, batch, first) for at, batch in zip(places, images)]
        template = sample
        image_views = len(places) - len(first.masks_at)
        for v, at in enumerate(places):
            template = _put(template, at, view_slot(v) if v < image_views else mask_slot(v))
        return views, template
    image = _image_at(made, sample, first.slot_at, images, first)
    if simple:
        label = sample[1]
        if not is_int_label(label):
            raise RuntimeError(f"fastload: {made} returns the label {label!r} where the epoch's other samples "
                               "have an int class index: the batch's labels cannot be stacked. Return the same "
                               "label type for every sample.")
        return image, label
    return image, templated(sample, image, [], ())


def _image_at(made: str, sample: Any, at: Tuple[Any, ...], images: torch.Tensor, first: TracedSample) -> Any:
    """The image at place `at` of `sample`, checked to stack with the batch `images`."""
    image = sample
    try:
        for key in at:
            image = image[key]
    except (KeyError, IndexError, TypeError):
        raise RuntimeError(f"fastload: {made} is {shape_text(sample)}, without an image where the epoch's other "
                           f"samples have theirs ({shape_text(first.template)}): the batch cannot be made of both. "
                           "Return one structure for every sample.") from None
    if not isinstance(image, torch.Tensor) or image.shape != images.shape[1:]:
        what = f"{tuple(image.shape)} {image.dtype}" if isinstance(image, torch.Tensor) else type(image).__name__
        raise RuntimeError(f"fastload: cannot stack the batch: {made} has an image {what}, the batch's other "
                           f"samples {tuple(images.shape[1:])} {images.dtype} (the transform read when the epoch "
                           "began). If the dataset's transform changed during the epoch, change it between epochs "
                           "(each iter() reads it anew); else make every sample's transform give one size.")
    return image


def _put(value: Any, at: Tuple[Any, ...], new: Any) -> Any:
    """`value` with `new` at place `at`, the tuples, lists, dicts and namedtuples on the way copied."""
    if not at:
        return new
    key, rest = at[0], at[1:]
    kind = type(value)
    if isinstance(value, dict):
        out = dict(value)
        out[key] = _put(value[key], rest, new)
        return out
    items = list(value)
    items[key] = _put(items[key], rest, new)
    return kind(*items) if hasattr(kind, "_fields") else kind(items)
