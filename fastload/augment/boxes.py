"""Bounding boxes through the geometry the engine drew: torchvision v2's arithmetic, batched.

A detection sample's boxes ([N, 4] in one of torchvision's formats XYXY, XYWH, CXCYWH)
take the geometry of its image: the crop window, the resize to the output size, the
flips, RandomCrop's padding. The engine draws that geometry (`_C.regions_of`: one call
per batch, no decode); this module turns it into torchvision v2's steps and applies them
to every box of a batch at once, each step as v2's kernel writes it
(torchvision.transforms.v2.functional: pad, resize, crop, horizontal_flip, vertical_flip
on BoundingBoxes), so that the boxes equal v2's on the same drawn parameters to float
rounding:

1. pad (RandomCrop's padding and pad_if_needed): shift, clamp to the padded canvas;
2. resize (Resize, before a crop): scale;
3. crop (RandomResizedCrop's window, CenterCrop, RandomCrop): shift, clamp to the crop;
4. resize (RandomResizedCrop's, after its crop): scale to the output size;
5. flips: mirrored in the output canvas.

A step v2 would not run (no padding, a RandomCrop of an image of the output size, a
Resize without CenterCrop) does not clamp here either. Clamping follows the boxes'
`clamping_mode` ("soft" and "hard" clamp alike for these formats; None never clamps).
`ClampBoundingBoxes` clamps once more at the end, and `SanitizeBoundingBoxes`
(`sanitize_mask`) drops the boxes v2 drops, with their labels.

Example:
    >>> import torch
    >>> steps = Steps.resized_crop(torch.tensor([[10.0, 20.0, 50.0, 40.0]]), (25, 20),
    ...                            flips=torch.tensor([[True, False]]))
    >>> move(torch.tensor([[20.0, 10.0, 40.0, 30.0], [0.0, 0.0, 5.0, 5.0]]), "XYXY", steps,
    ...      rows=torch.tensor([0, 0])).tolist()
    [[10.0, 0.0, 20.0, 10.0], [20.0, 0.0, 20.0, 0.0]]
    >>> sanitize_mask(torch.tensor([[10.0, 0.0, 20.0, 10.0], [20.0, 0.0, 20.0, 0.0]]), "XYXY", (25, 20)).tolist()
    [True, False]
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import torch

FORMATS = ("XYXY", "XYWH", "CXCYWH")
CLAMPING_MODES = ("soft", "hard", None)


def format_name(fmt: object) -> str:
    """A box format as its name: "XYXY", "XYWH" or "CXCYWH" (a tv_tensors.BoundingBoxFormat
    or a string, any case); ValueError for another (rotated formats are not supported)."""
    name = getattr(fmt, "name", fmt)
    if isinstance(name, str) and name.upper() in FORMATS:
        return name.upper()
    raise ValueError(f"fastload boxes: expected a box format in {FORMATS} (torchvision's "
                     f"tv_tensors.BoundingBoxFormat), got {fmt!r}; rotated boxes are not supported.")


def to_xyxy(boxes: torch.Tensor, fmt: str) -> torch.Tensor:
    """A copy of `boxes` in XYXY, by v2's arithmetic (CXCYWH of integers in float32, as v2)."""
    if fmt == "XYXY":
        return boxes.clone()
    if fmt == "XYWH":
        out = boxes.clone()
        out[..., 2:] += out[..., :2]
        return out
    out = boxes.float() if not boxes.is_floating_point() else boxes.clone()
    half = out[..., 2:] / 2
    out[..., :2].sub_(half)
    out[..., 2:].add_(out[..., :2])
    return out.to(boxes.dtype)


def from_xyxy(boxes: torch.Tensor, fmt: str) -> torch.Tensor:
    """A copy of XYXY `boxes` in `fmt`, by v2's arithmetic."""
    out = boxes.clone()
    if fmt == "XYXY":
        return out
    out[..., 2:] -= out[..., :2]
    if fmt == "CXCYWH":
        out[..., :2].mul_(2).add_(out[..., 2:]).div_(2, rounding_mode=None if out.is_floating_point() else "floor")
    return out


def clamp(boxes: torch.Tensor, fmt: str, canvas: torch.Tensor) -> torch.Tensor:
    """`boxes` clamped to their rows' canvas (float [M, 2]: height, width), as v2's
    clamp_bounding_boxes: in XYXY, in float for integer boxes, back to their dtype."""
    dtype = boxes.dtype
    xyxy = to_xyxy(boxes if boxes.is_floating_point() else boxes.float(), fmt)
    zero = torch.zeros((), dtype=xyxy.dtype)
    xyxy[:, 0::2] = torch.clamp(xyxy[:, 0::2], zero, canvas[:, 1:2].to(xyxy.dtype))
    xyxy[:, 1::2] = torch.clamp(xyxy[:, 1::2], zero, canvas[:, 0:1].to(xyxy.dtype))
    return from_xyxy(xyxy, fmt).to(dtype)


def _shift(boxes: torch.Tensor, fmt: str, offset: torch.Tensor) -> torch.Tensor:
    """`boxes` plus (x, y) per row (float [M, 2]) on their corners (XYXY) or origin (the
    others), in the boxes' dtype as v2 adds its offsets."""
    offset = offset.to(boxes.dtype)
    zeros = torch.zeros_like(offset)
    return boxes + torch.cat([offset, offset if fmt == "XYXY" else zeros], dim=1)


def _flip(boxes: torch.Tensor, fmt: str, size: Any, axis: int) -> torch.Tensor:
    """`boxes` mirrored in a canvas `size` wide along `axis` (0: x, 1: y), as v2's flips
    (`size`: an int, or a tensor [M], each row's)."""
    out = boxes.clone()
    if isinstance(size, torch.Tensor):
        size = size.to(boxes.dtype)
    if fmt == "XYXY":
        out[:, [axis + 2, axis]] = boxes[:, [axis, axis + 2]].sub(size[:, None] if isinstance(size, torch.Tensor)
                                                                  else size).neg()
    elif fmt == "XYWH":
        out[:, axis] = boxes[:, axis].add(boxes[:, axis + 2]).sub(size).neg()
    else:
        out[:, axis] = boxes[:, axis].sub(size).neg()
    return out


class Steps(NamedTuple):
    """The per-sample steps of v2's box kernels that a pipeline runs (each field has one
    row per sample; offsets and canvases float [N, 2] in (x, y) and (height, width)).

    Attributes:
        pad: (left, top) added by padding; `padded`: bool [N], whether v2 pads (and clamps).
        pad_canvas: the padded canvas.
        scale_before: (x, y) ratios of a resize before the crop (1: none).
        crop: (left, top) of the crop in the canvas it cuts; `cropped`: bool [N].
        crop_canvas: the crop's size.
        scale_after: (x, y) ratios of a resize after the crop (RandomResizedCrop's).
        flips: bool [N, 2]: left-right, top-bottom.
        out_size: the output canvas (height, width), one for all...
        canvases: ...or each sample's (float [N, 2]; images of their own sizes), else None.
    """

    pad: torch.Tensor
    padded: torch.Tensor
    pad_canvas: torch.Tensor
    scale_before: torch.Tensor
    crop: torch.Tensor
    cropped: torch.Tensor
    crop_canvas: torch.Tensor
    scale_after: torch.Tensor
    flips: torch.Tensor
    out_size: Tuple[int, int]
    canvases: Optional[torch.Tensor] = None

    def canvas_of(self, k: int) -> Tuple[int, int]:
        """Sample k's output canvas (height, width)."""
        if self.canvases is None:
            return self.out_size
        height, width = self.canvases[k].tolist()
        return int(height), int(width)

    def canvas_rows(self, rows: torch.Tensor) -> Any:
        """The canvas of each of `rows` (float [M, 2]), or the one out_size."""
        return self.out_size if self.canvases is None else self.canvases[rows]

    @classmethod
    def make(cls, n: int, out_size: Tuple[int, int], **fields: torch.Tensor) -> "Steps":
        """Steps of n samples doing nothing but what `fields` says."""
        zeros, ones = torch.zeros(n, 2, dtype=torch.float64), torch.ones(n, 2, dtype=torch.float64)
        no = torch.zeros(n, dtype=torch.bool)
        canvas = torch.tensor([list(out_size)] * n, dtype=torch.float64).reshape(n, 2)
        defaults = dict(pad=zeros, padded=no, pad_canvas=canvas, scale_before=ones, crop=zeros, cropped=no,
                        crop_canvas=canvas, scale_after=ones, flips=torch.zeros(n, 2, dtype=torch.bool))
        defaults.update(fields)
        return cls(out_size=(int(out_size[0]), int(out_size[1])), **defaults)

    @classmethod
    def resized_crop(cls, boxes: torch.Tensor, out_size: Tuple[int, int], flips: torch.Tensor) -> "Steps":
        """RandomResizedCrop: crop the engine's window (float [N, 4] top, left, height,
        width, whole pixels), then resize it to out_size (v2's F.resized_crop)."""
        window = boxes.to(torch.float64).round()
        size = window[:, 2:4]
        out = torch.tensor(out_size, dtype=torch.float64)
        return cls.make(len(boxes), out_size, crop=window[:, [1, 0]], cropped=torch.ones(len(boxes), dtype=torch.bool),
                        crop_canvas=size, scale_after=(out / size)[:, [1, 0]], flips=flips)

    @classmethod
    def resize_center_crop(cls, sizes: torch.Tensor, layouts: torch.Tensor, out_size: Tuple[int, int],
                           flips: torch.Tensor, *, center_crop: bool) -> "Steps":
        """Resize (to the layout's resized size) then CenterCrop (v2's F.resize, F.center_crop):
        `layouts` int64 [N, 4] (resized height, width, crop top, left), as
        _contract.resized_layout gives (the crop's origin is v2's, from the resized size); center_crop: whether the pipeline crops (a
        Resize alone does not clamp)."""
        sizes, layouts = sizes.to(torch.float64), layouts.to(torch.float64)
        n = len(sizes)
        # v2's center_crop of boxes takes round((size - crop) / 2), half to even, also where
        # the crop is larger, while its images pad by (crop - size) // 2 first: one pixel
        # from the image's own origin where that difference is 3, 7, 11, ...; the boxes
        # follow v2's boxes.
        origin = torch.round((layouts[:, 0:2] - torch.tensor(out_size, dtype=torch.float64)) / 2)
        return cls.make(n, out_size, scale_before=(layouts[:, 0:2] / sizes)[:, [1, 0]], crop=origin[:, [1, 0]],
                        cropped=torch.full((n,), bool(center_crop)), flips=flips)

    @classmethod
    def random_crop(cls, sizes: torch.Tensor, boxes: torch.Tensor, pads: Sequence[int], pad_if_needed: bool,
                    out_size: Tuple[int, int], flips: torch.Tensor) -> "Steps":
        """RandomCrop (v2's: pad with `pads` (top, left, bottom, right) and pad_if_needed,
        then crop): `boxes` float [N, 4], the engine's crop (top, left in the image's own
        coordinates, negative into the padding)."""
        sizes = sizes.to(torch.float64)
        top, left, bottom, right = (torch.full((len(sizes),), float(p), dtype=torch.float64) for p in pads)
        out_h, out_w = float(out_size[0]), float(out_size[1])
        height, width = sizes[:, 0] + top + bottom, sizes[:, 1] + left + right
        if pad_if_needed:  # both sides by what is missing (v2's make_params)
            missing_h, missing_w = (out_h - height).clamp(min=0), (out_w - width).clamp(min=0)
            top, bottom, height = top + missing_h, bottom + missing_h, height + 2 * missing_h
            left, right, width = left + missing_w, right + missing_w, width + 2 * missing_w
        padded = (top != 0) | (left != 0) | (bottom != 0) | (right != 0)
        cropped = (height > out_h) | (width > out_w)
        origin = boxes.to(torch.float64)[:, [1, 0]] + torch.stack([left, top], dim=1)
        return cls.make(len(sizes), out_size, pad=torch.stack([left, top], dim=1), padded=padded,
                        pad_canvas=torch.stack([height, width], dim=1), crop=origin, cropped=cropped, flips=flips)


def move(boxes: torch.Tensor, fmt: str, steps: Steps, rows: torch.Tensor,
         clamping_mode: Optional[str] = "soft") -> torch.Tensor:
    """Boxes [M, 4] of format `fmt` through their samples' steps (`rows` int64 [M]: the
    sample of each box), as v2 moves them on the same parameters; same dtype.

    Example:
        >>> steps = Steps.make(1, (10, 10), flips=torch.tensor([[False, True]]))
        >>> move(torch.tensor([[1, 2, 3, 4]]), "XYWH", steps, torch.tensor([0])).tolist()
        [[1, 4, 3, 4]]
    """
    fmt = format_name(fmt)
    if clamping_mode not in CLAMPING_MODES:
        raise ValueError(f"fastload boxes: expected clamping_mode in {CLAMPING_MODES}, got {clamping_mode!r}.")
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"fastload boxes: expected boxes of shape [N, 4], got {list(boxes.shape)}.")
    rows = rows.to(torch.int64)
    clamps = clamping_mode is not None

    def where(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(mask[rows][:, None], a, b)

    out = boxes
    if bool(steps.padded.any()):
        shifted = _shift(out, fmt, steps.pad[rows])
        out = where(steps.padded, clamp(shifted, fmt, steps.pad_canvas[rows]) if clamps else shifted, out)
    out = _scale(out, steps.scale_before[rows])
    if bool(steps.cropped.any()):  # (a sample v2 does not crop has its crop at (0, 0))
        shifted = _shift(out, fmt, -steps.crop[rows])
        out = where(steps.cropped, clamp(shifted, fmt, steps.crop_canvas[rows]) if clamps else shifted, out)
    out = _scale(out, steps.scale_after[rows])
    for axis in (0, 1):
        flip = steps.flips[:, axis]
        if bool(flip.any()):
            size = steps.out_size[1 - axis] if steps.canvases is None else steps.canvases[rows, 1 - axis]
            out = where(flip, _flip(out, fmt, size, axis), out)
    return out


def _scale(boxes: torch.Tensor, ratios: torch.Tensor) -> torch.Tensor:
    """v2's resize of boxes: times (x, y, x, y) ratios as a float32 tensor, back to the
    boxes' dtype (a resize to the same size, ratio 1, leaves them as they are)."""
    if bool((ratios == 1).all()):
        return boxes
    factors = ratios.to(torch.float32)[:, [0, 1, 0, 1]]
    return torch.where((ratios == 1).all(1)[:, None], boxes, boxes.mul(factors).to(boxes.dtype))


def clamp_to(boxes: torch.Tensor, fmt: str, canvas: Any) -> torch.Tensor:
    """v2's ClampBoundingBoxes: boxes [M, 4] clamped to one (height, width) canvas (or
    each row's: float [M, 2])."""
    if not isinstance(canvas, torch.Tensor):
        canvas = torch.tensor([list(canvas)], dtype=torch.float64).expand(len(boxes), 2)
    return clamp(boxes, format_name(fmt), canvas)


def sanitize_mask(boxes: torch.Tensor, fmt: str, canvas: Any, min_size: float = 1.0,
                  min_area: float = 1.0) -> torch.Tensor:
    """bool [M]: the boxes v2's SanitizeBoundingBoxes keeps (at least min_size wide and
    high, min_area in area, every coordinate inside the (height, width) canvas, or each
    row's: float [M, 2])."""
    xyxy = to_xyxy(boxes, format_name(fmt))
    height, width = (canvas[:, 0], canvas[:, 1]) if isinstance(canvas, torch.Tensor) else canvas
    ws, hs = xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]
    valid = (ws >= min_size) & (hs >= min_size) & (xyxy >= 0).all(dim=-1) & (ws * hs >= min_area)
    valid &= (xyxy[:, 0] <= width) & (xyxy[:, 2] <= width)
    valid &= (xyxy[:, 1] <= height) & (xyxy[:, 3] <= height)
    return valid


def steps_of(plan: Any, sizes: torch.Tensor, samples: torch.Tensor, epoch: int, *, center_crop: bool = True) -> Steps:
    """The box steps of `samples` (int64 [N]) at `epoch`, images of `sizes` (int64 [N, 2]:
    height, width), from the geometry the engine draws for `plan` (`_C.regions_of`, no
    decode); center_crop: whether a Resize + CenterCrop plan came from a CenterCrop (a
    plan of Resize((h, w)) alone does not clamp, as v2's Resize does not).

    Raises:
        ValueError: the engine's, for a geometry without pixels to sample.
    """
    from fastload._contract import regions_of, resized_layout

    sizes = sizes.to(torch.int64).reshape(-1, 2)
    boxes, _, flips = regions_of(plan, sizes, samples.to(torch.int64), int(epoch))
    out_size = tuple(plan.out_size)
    geometry = plan.geometry.name
    if geometry == "RANDOM_RESIZED_CROP":
        return Steps.resized_crop(boxes, out_size, flips)
    if geometry == "RANDOM_CROP":
        pads = (plan.pad_top, plan.pad_left, plan.pad_bottom, plan.pad_right)
        return Steps.random_crop(sizes, boxes, pads, plan.pad_if_needed, out_size, flips)
    layouts = torch.tensor([list(resized_layout(plan, h, w)) for h, w in sizes.tolist()],
                           dtype=torch.int64).reshape(-1, 4)
    return Steps.resize_center_crop(sizes, layouts, out_size, flips, center_crop=center_crop)


def own_size_steps(plan: Any, sizes: torch.Tensor, samples: torch.Tensor, epoch: int) -> Steps:
    """The box steps of `samples` (int64 [N]; images of `sizes` [N, 2]) under an own-size
    plan (fastload.augment.own_size): v2's Resize to each image's own output size (no
    clamp), then its drawn flips; each sample's canvas (`canvases`) is that size."""
    from fastload._contract import regions_of, resized_layout

    sizes = sizes.to(torch.int64).reshape(-1, 2)
    _, _, flips = regions_of(plan, sizes, samples.to(torch.int64), int(epoch))
    layouts = torch.tensor([list(resized_layout(plan, h, w)) for h, w in sizes.tolist()],
                           dtype=torch.int64).reshape(-1, 4)
    steps = Steps.resize_center_crop(sizes, layouts, (1, 1), flips, center_crop=False)
    return steps._replace(canvases=layouts[:, 0:2].to(torch.float64))


class BoxStep(NamedTuple):
    """A box-only transform after the geometry (torchvision v2's ClampBoundingBoxes,
    ConvertBoundingBoxFormat, SanitizeBoundingBoxes): kind "clamp", "convert" (to
    `format`) or "sanitize" (min_size, min_area, labels_getter: "default", None or v2's
    callable)."""

    kind: str
    format: str = ""
    min_size: float = 1.0
    min_area: float = 1.0
    labels_getter: Any = "default"


def label_keys(target: dict, getter: Any, image: Any = None) -> Tuple[Any, ...]:
    """The keys of `target` whose per-box tensors SanitizeBoundingBoxes filters with the
    boxes: v2's default heuristic (a key "labels" in any case, else the first key that
    holds "label"), None (none), or a callable given (image, target), as v2 calls it,
    whose tensors are matched to the target's by identity.

    Example:
        >>> label_keys({"boxes": 0, "Labels": 1, "iscrowd": 2}, "default")
        ('Labels',)
    """
    if getter is None:
        return ()
    if getter == "default":
        keys = [k for k in target if isinstance(k, str) and k.lower() == "labels"] or \
            [k for k in target if isinstance(k, str) and "label" in k.lower()]
        if not keys:
            raise ValueError(f"fastload boxes: SanitizeBoundingBoxes found no labels in the target (keys "
                             f"{list(target)}), as torchvision v2 would not: name a key holding 'labels', or pass "
                             "labels_getter=None when the samples have no labels.")
        return tuple(keys[:1])
    found = getter((image, target))
    found = (found,) if isinstance(found, torch.Tensor) else tuple(found or ())
    return tuple(k for k, v in target.items() if any(v is f for f in found))


def move_group(boxes: Sequence[torch.Tensor], fmt: str, clamping_mode: Optional[str], steps: Steps,
               rows: Sequence[int], box_steps: Sequence[BoxStep]) -> List[Tuple[torch.Tensor, str, List[torch.Tensor]]]:
    """Several samples' boxes (one tensor [N_k, 4] each, one format, dtype and
    clamping_mode; `rows`: each one's row of `steps`) through their steps and the
    box-only steps in one vectorised pass: per sample (boxes, their format, the mask of
    each SanitizeBoundingBoxes over the boxes it saw)."""
    counts = [len(b) for b in boxes]
    # (a list: torch.repeat_interleave costs tens of ms here, a batch's worth of pixels)
    per_box = torch.tensor([r for r, n in zip(rows, counts) for _ in range(n)], dtype=torch.int64)
    out = move(torch.cat(list(boxes)).reshape(-1, 4), fmt, steps, per_box, clamping_mode)
    keeps: List[Sequence[torch.Tensor]] = []
    for step in box_steps:
        if step.kind == "clamp":
            out = clamp_to(out, fmt, steps.canvas_rows(per_box))
        elif step.kind == "convert":
            out, fmt = from_xyxy(to_xyxy(out, fmt), step.format), step.format
        else:
            keep = sanitize_mask(out, fmt, steps.canvas_rows(per_box), step.min_size, step.min_area)
            keeps.append(keep.split(counts))
            counts = [int(m.sum()) for m in keeps[-1]]
            out, per_box = out[keep], per_box[keep]
    return [(part, fmt, [masks[j] for masks in keeps]) for j, part in enumerate(out.split(counts))]


def finish_target(target: dict, key: Any, boxes: torch.Tensor, fmt: str, keeps: Sequence[torch.Tensor],
                  box_steps: Sequence[BoxStep], canvas: Tuple[int, int], clamping_mode: Optional[str],
                  image: Any = None, where: str = "") -> dict:
    """`target` (a copy) with `boxes` as a tv_tensors.BoundingBoxes of `canvas` at `key` and
    the per-box entries each SanitizeBoundingBoxes filters (label_keys) filtered by its
    mask (`keeps`, one per sanitize step, in order).

    Raises:
        ValueError: a filtered entry without one value per box (`where` names the sample).
    """
    from torchvision import tv_tensors

    target = dict(target)
    for step, keep in zip((s for s in box_steps if s.kind == "sanitize"), keeps):
        for name in label_keys(target, step.labels_getter, image):
            value = target[name]
            if len(value) != len(keep):
                raise ValueError(f"fastload boxes: {where}: {len(keep)} boxes but target[{name!r}] has {len(value)} "
                                 "entries (SanitizeBoundingBoxes filters them together).")
            target[name] = value[keep]
    target[key] = tv_tensors.BoundingBoxes(boxes, format=fmt, canvas_size=canvas, clamping_mode=clamping_mode)
    return target


# torchvision v2's box-only transforms (they never touch pixels), by class name.
BOX_TRANSFORMS = ("ClampBoundingBoxes", "ConvertBoundingBoxFormat", "SanitizeBoundingBoxes")
# Transforms that move boxes: a box-only step must come after all of them.
GEOMETRY = ("RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip", "RandomVerticalFlip")


def box_step_of(transform: Any) -> Optional[BoxStep]:
    """The BoxStep of one of torchvision v2's box-only transforms, None for any other.

    Raises:
        ValueError: a ClampBoundingBoxes with a clamping_mode other than soft or hard.

    Example:
        >>> from torchvision.transforms import v2
        >>> box_step_of(v2.SanitizeBoundingBoxes(min_size=2)).min_size, box_step_of(v2.Resize(3)) is None
        (2.0, True)
    """
    name = type(transform).__name__
    if name not in BOX_TRANSFORMS or not type(transform).__module__.startswith("torchvision."):
        return None
    if name == "ClampBoundingBoxes":
        if getattr(transform, "clamping_mode", "auto") not in ("auto", "soft", "hard"):
            raise ValueError(f"fastload boxes: {transform!r}: clamping_mode {transform.clamping_mode!r} is not "
                             "supported (soft or hard clamp).")
        return BoxStep("clamp")
    if name == "ConvertBoundingBoxFormat":
        return BoxStep("convert", format=format_name(transform.format))
    return BoxStep("sanitize", min_size=float(transform.min_size), min_area=float(getattr(transform, "min_area", 1.0)),
                   labels_getter=transform.labels_getter)
