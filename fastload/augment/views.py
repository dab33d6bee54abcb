"""Several outputs per sample: image views with their own transforms, and masks.

A sample may have K image views (SimCLR's two random views of one image, DINO's 2 global
+ 8 local crops) and masks (a segmentation label map read from a second file of the
sample) that take their geometry from one of the views. The engine reads and decodes the
image once, over the union of the views' crop windows, then makes every output from that
one decode (csrc/augment/views.h, csrc/engine/sample.cpp).

- `Mask`: what a mask output is (which view it follows, RandomCrop's fill, dtype, shape,
  Pillow's, torch's or OpenCV's nearest).
- `Outputs`: the structure of a dataset's outputs: one transform list per image view,
  the masks, and how a batch is arranged (`arrange`).
- `ViewPlans`: Outputs fused into one Plan per image view, as the engine takes them.
- `mask_reference`: a mask's output in plain PIL / PyTorch, the twin of the engine's.

Random parameters stay a pure function of (seed, epoch, index, view): view v draws with
`fastload._C.view_seed(seed, v)` (view 0 with `seed` itself, so that a single-view
pipeline draws as before); a mask draws nothing, it follows its view's draws.

Example:
    >>> from fastload import transforms as T
    >>> two = Outputs.of_views([[T.RandomResizedCrop(32), T.RandomHorizontalFlip()]] * 2)
    >>> len(two.views), two.masks, two.arrangement
    (2, (), 'views')
    >>> seg = Outputs.segmentation([T.RandomResizedCrop(32)], Mask(fill=255))
    >>> seg.masks[0].follows, seg.masks[0].dtype, seg.arrangement
    (0, torch.int64, 'pairs')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastload.errors import UnsupportedPipeline

MASK_SAMPLINGS = ("pil", "tensor", "cv2")
MASK_DTYPES = (torch.uint8, torch.int64)
ARRANGEMENTS = ("views", "pairs")


@dataclass(frozen=True)
class Mask:
    """A mask output: a single-channel uint8 label map read from the sample's second file,
    through the geometry of image view `follows` (crop window, flips, resize, RandomCrop's
    padding), nearest-neighbour, without colour ops or normalisation.

    Args:
        follows: the image view whose geometry the mask takes (0: the first).
        fill: the label RandomCrop's padding writes (torchvision's `fill` for the mask,
            e.g. 255, the ignore index); CenterCrop pads with 0, as torchvision does.
        dtype: torch.int64 (what `torch.as_tensor(np.array(mask), dtype=torch.int64)` and
            cross-entropy targets are) or torch.uint8 (a tv_tensors.Mask of a PIL image).
        sampling: "pil": Pillow's NEAREST (torchvision v1 transforms on a PIL mask);
            "tensor": torch's interpolate(mode="nearest") (v2 transforms on a
            tv_tensors.Mask or a tensor); "cv2": OpenCV's INTER_NEAREST (albumentations'
            mask=, resized by cv2.resize). They pick different pixels when resizing.
        channel_dim: batches of [B, 1, H, W] (a tv_tensors.Mask made from a PIL image)
            instead of [B, H, W].

    Example:
        >>> Mask(fill=255, sampling="tensor")
        Mask(follows=0, fill=255, dtype=torch.int64, sampling='tensor', channel_dim=False)
    """

    follows: int = 0
    fill: int = 0
    dtype: torch.dtype = torch.int64
    sampling: str = "pil"
    channel_dim: bool = False

    def __post_init__(self):
        if not isinstance(self.follows, int) or self.follows < 0:
            raise ValueError(f"fastload.Mask: expected follows as the index of an image view (>= 0), got "
                             f"{self.follows!r}.")
        if not isinstance(self.fill, int) or not 0 <= self.fill <= 255:
            raise ValueError(f"fastload.Mask: expected fill as a uint8 label in [0, 255], got {self.fill!r}.")
        if self.dtype not in MASK_DTYPES:
            raise ValueError(f"fastload.Mask: expected dtype torch.uint8 or torch.int64, got {self.dtype!r}.")
        if self.sampling not in MASK_SAMPLINGS:
            raise ValueError(f"fastload.Mask: expected sampling in {MASK_SAMPLINGS}, got {self.sampling!r}.")

    def shape(self, batch: int, out_size: Tuple[int, int]) -> Tuple[int, ...]:
        """The batch shape of this mask: [B, H, W] or [B, 1, H, W]."""
        return (batch, 1, *out_size) if self.channel_dim else (batch, *out_size)


@dataclass(frozen=True)
class Outputs:
    """What a sample of a dataset is made of: image views and masks, and their batch layout.

    Attributes:
        views: one tuple of fastload transform specs per image view (at least one).
        masks: the masks, each following one of the views.
        arrangement: "views": a batch is `[[view_0, ..., view_K-1, mask_0, ...], labels]`
            (SimCLR's and DINO's structure; each view a batched tensor, views of different
            sizes in different tensors, then the masks); "pairs": `[image, mask]` (one
            view, one mask: a segmentation batch).
    """

    views: Tuple[Tuple[Any, ...], ...]
    masks: Tuple[Mask, ...] = ()
    arrangement: str = "views"

    def __post_init__(self):
        if not self.views:
            raise ValueError("fastload: expected at least one image view, got none.")
        if self.arrangement not in ARRANGEMENTS:
            raise ValueError(f"fastload: expected arrangement in {ARRANGEMENTS}, got {self.arrangement!r}.")
        for mask in self.masks:
            if mask.follows >= len(self.views):
                raise ValueError(f"fastload.Mask: follows={mask.follows} names no image view (there are "
                                 f"{len(self.views)}).")
        if self.arrangement == "pairs" and (len(self.views) != 1 or len(self.masks) != 1):
            raise ValueError("fastload: the 'pairs' arrangement is one image view and one mask, got "
                             f"{len(self.views)} and {len(self.masks)}.")

    @classmethod
    def of_views(cls, views: Sequence[Sequence[Any]], masks: Sequence[Mask] = ()) -> "Outputs":
        """K image views (lists of specs), batches `[[view, ...], labels]`."""
        return cls(tuple(tuple(v) for v in views), tuple(masks), "views")

    @classmethod
    def segmentation(cls, transforms: Sequence[Any], mask: Mask) -> "Outputs":
        """One image and its mask, batches `[image, mask]`."""
        return cls((tuple(transforms),), (mask,), "pairs")

    @property
    def several(self) -> bool:
        """True when a sample has more than one output (the engine's views are needed)."""
        return len(self.views) > 1 or bool(self.masks)

    def arrange(self, images: List[torch.Tensor], masks: List[torch.Tensor], labels: torch.Tensor) -> list:
        """A batch in this structure, from the engine's outputs (one tensor per image view
        and per mask) and the labels int64 [B]."""
        if self.arrangement == "pairs":
            return [images[0], masks[0]]
        return [list(images) + list(masks), labels]

    def arrange_sample(self, images: List[torch.Tensor], masks: List[torch.Tensor], label: int) -> tuple:
        """One sample in this structure (what `dataset[i]` returns)."""
        if self.arrangement == "pairs":
            return images[0], masks[0]
        return list(images) + list(masks), label


@dataclass
class ViewPlans:
    """`Outputs` fused: one Plan per image view (view 0's is the loader's plan, which the
    runner seeds; the others are seeded from it by the engine) and the masks.

    Attributes:
        plans: one fastload.augment.plan.Plan per image view.
        outputs: what they were fused from (masks, arrangement).
    """

    plans: List[Any]
    outputs: Outputs
    masks: Tuple[Mask, ...] = field(default_factory=tuple)

    def __post_init__(self):
        self.masks = self.outputs.masks

    @property
    def image_views(self) -> int:
        return len(self.plans)

    def seeded(self, view: int) -> Any:
        """A copy of view `view`'s plan seeded as the engine seeds it (view_seed of view 0's
        seed), with view 0's decode settings: what the plain-PyTorch twin runs."""
        from fastload._contract import view_seed

        base = self.plans[0]
        plan = _copy_plan(self.plans[view])
        plan.seed = view_seed(base.seed, view)
        plan.dct_scaling, plan.max_pixels = base.dct_scaling, base.max_pixels
        return plan


def _copy_plan(plan: Any) -> Any:
    import copy

    return copy.deepcopy(plan)


def build_view_plans(outputs: Outputs, first: Any, *, dtype: Optional[torch.dtype] = None) -> ViewPlans:
    """ViewPlans of `outputs` whose view 0 is `first` (the plan the loader built from
    view 0's transforms, seed and decode settings included). The other views are fused
    here with view 0's channels; a loader's floating dtype applies to floating views.

    Raises:
        UnsupportedPipeline: a view's transforms do not fuse, or a mask follows a view
            whose RandomCrop pads with edge/reflect/symmetric (constant only for masks).
    """
    from fastload.augment.plan import fuse, make_plan

    plans = [first]
    for v, specs in enumerate(outputs.views[1:], start=1):
        try:
            fusion = fuse(specs, channels=first.channels)
        except UnsupportedPipeline as error:
            raise UnsupportedPipeline(f"view {v}: {error}") from None
        if dtype in (torch.float32, torch.float16, torch.bfloat16) and fusion.dtype.is_floating_point:
            fusion = fusion._replace(dtype=dtype)
        plans.append(make_plan(fusion))
    for mask in outputs.masks:
        followed = plans[mask.follows]
        if followed.padding_mode != 0 and followed.geometry.name == "RANDOM_CROP":
            raise UnsupportedPipeline(f"a mask follows view {mask.follows}, whose RandomCrop pads with "
                                      f"padding_mode {followed.padding_mode}: masks take constant padding (fill)")
    return ViewPlans(plans, outputs)


def describe(outputs: Outputs, plans: ViewPlans) -> str:
    """What loader.path says of the outputs beyond view 0: "view 1 16x16 [...]; mask of view 0
    (pil nearest, int64)"."""
    def text(plan: Any) -> str:
        return f"{plan.out_height}x{plan.out_width} [{plan.description}]"

    parts: List[str] = []
    v = 1
    while v < len(plans.plans):  # consecutive views alike are named once: "views 2-9 96x96 [...]"
        last = v
        while last + 1 < len(plans.plans) and text(plans.plans[last + 1]) == text(plans.plans[v]):
            last += 1
        parts.append(f"{f'views {v}-{last}' if last > v else f'view {v}'} {text(plans.plans[v])}")
        v = last + 1
    parts += [f"mask of view {m.follows} ({m.sampling} nearest, {str(m.dtype).replace('torch.', '')})"
              for m in outputs.masks]
    return "; ".join(parts)


def mask_reference(mask: np.ndarray, plan: Any, spec: Mask, *, epoch: int, index: int) -> torch.Tensor:
    """A mask's output in plain PIL / PyTorch: the geometry of `plan` (the followed view's,
    seeded as the engine seeds it) for sample `index` at `epoch`, applied as torchvision
    applies it to a mask: crop then resize (RandomResizedCrop), resize then centre crop
    (Resize, CenterCrop; padding 0), pad with `spec.fill` then crop (RandomCrop); nearest
    by Pillow (`sampling="pil"`), torch's interpolate (`"tensor"`) or OpenCV's cv2.resize
    (`"cv2"`); flips last.

    Args:
        mask: uint8 [H, W], the decoded label map.

    Returns:
        [H', W'] (or [1, H', W'] with channel_dim) of spec.dtype.
    """
    from PIL import Image

    from fastload._contract import region_of

    height, width = mask.shape
    box, _, flip, flip_v = region_of(plan, height, width, epoch, index)
    out_h, out_w = plan.out_size
    geometry = plan.geometry.name
    labels = torch.from_numpy(np.ascontiguousarray(mask))

    def resize(t: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        if tuple(t.shape) == tuple(size):
            return t
        if spec.sampling == "pil":
            image = Image.fromarray(t.numpy()).resize((size[1], size[0]), Image.NEAREST)
            return torch.from_numpy(np.array(image))
        if spec.sampling == "cv2":
            import cv2

            return torch.from_numpy(cv2.resize(t.numpy(), (size[1], size[0]), interpolation=cv2.INTER_NEAREST))
        return torch.nn.functional.interpolate(t[None, None], size=size, mode="nearest")[0, 0]

    def crop(t: torch.Tensor, top: int, left: int, h: int, w: int, fill: int) -> torch.Tensor:
        out = torch.full((h, w), fill, dtype=torch.uint8)
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + h, t.shape[0]), min(left + w, t.shape[1])
        if y1 > y0 and x1 > x0:
            out[y0 - top:y1 - top, x0 - left:x1 - left] = t[y0:y1, x0:x1]
        return out

    top, left = int(round(box[0])), int(round(box[1]))
    if geometry == "RANDOM_RESIZED_CROP":
        out = resize(crop(labels, top, left, int(round(box[2])), int(round(box[3])), 0), (out_h, out_w))
    elif geometry == "RANDOM_CROP":
        out = crop(labels, top, left, out_h, out_w, spec.fill)
    else:
        from fastload._contract import resized_layout

        new_h, new_w, top, left = resized_layout(plan, height, width)
        out = crop(resize(labels, (new_h, new_w)), top, left, out_h, out_w, 0)
    if flip:
        out = out.flip(-1)
    if flip_v:
        out = out.flip(-2)
    out = out.to(spec.dtype)
    return out[None] if spec.channel_dim else out
