"""Images with bounding boxes as a native dataset: detection on the engine.

Each sample is an image file and its target: a dict with "boxes" (a
tv_tensors.BoundingBoxes, or an [N, 4] tensor in `box_format`), "labels" and any other
keys. The engine makes the pixels of a batch in one call; the boxes take the geometry it
drew for each image (fastload.augment.boxes: `_C.regions_of`, torchvision v2's box
arithmetic), computed per batch in a few vectorised torch ops. A sample is `(image,
target)` with target["boxes"] a tv_tensors.BoundingBoxes of the output's canvas, and
batches take the user's collate_fn (torchvision's detection references' `lambda b:
tuple(zip(*b))`: a tuple of [C, H, W] images and a tuple of target dicts).

With a fixed output size (a crop, or Resize((h, w))): torchvision's RandomResizedCrop,
CenterCrop, RandomCrop (constant padding), Resize, the flips, colour ops, Normalize,
ToDtype. Without one (torchvision's detection references: flips, PILToTensor / ToImage,
ToDtype, Normalize, colour, at most a shorter-side Resize such as Resize(800,
max_size=1333)) each image keeps its own size (`own_size`): a batch's images are a list
of [C, H_i, W_i], each made by the engine's decode and kernel on its own
(fastload.augment.own_size, fastload.native.own_size), and the collate_fn gets them as
torch's DataLoader would (torch's default_collate stacks them only where they are of one
size, else raises as it does). Then v2's box-only ClampBoundingBoxes,
ConvertBoundingBoxFormat and SanitizeBoundingBoxes, anywhere after the geometry.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from fastload.augment import boxes as box_ops
from fastload.augment.split import transforms_repr
from fastload.datasets.base import NativeDataset, transform_list
from fastload.errors import UnsupportedPipeline
from fastload.source.index import SampleIndex

# Specs whose v2 twin moves boxes in ways the box steps do not follow (shears, rotations,
# translations drawn per op).
_REFUSED = ("TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix")


def split_box_transforms(transforms: Any, owner: str) -> Tuple[List[Any], Tuple[box_ops.BoxStep, ...]]:
    """(the image's transforms, the box-only steps) of a transform list or Compose: v2's
    ClampBoundingBoxes, ConvertBoundingBoxFormat and SanitizeBoundingBoxes are taken out
    (they never touch pixels), in their order.

    Raises:
        UnsupportedPipeline: a box-only transform before a geometric one (it would see
            other boxes than the output's).
    """
    from fastload.augment.tail import flatten

    images, steps, last_box = [], [], None
    for position, transform in enumerate(flatten(transform_list(transforms))):
        try:
            step = box_ops.box_step_of(transform)
        except ValueError as error:
            raise UnsupportedPipeline(f"{owner}: transforms[{position}]: {error}") from None
        if step is not None:
            steps.append(step)
            last_box = (position, transform)
            continue
        if last_box is not None and type(transform).__name__ in box_ops.GEOMETRY:
            raise UnsupportedPipeline(
                f"{owner}: transforms[{last_box[0]}] {last_box[1]!r} comes before the geometric transform "
                f"transforms[{position}] {transform!r}; fastload applies the box-only transforms to the output's "
                "boxes: move it after the crops, resizes and flips.")
        images.append(transform)
    return images, tuple(steps)


class DetectionDataset(NativeDataset):
    """Images and their bounding boxes on fastload's native pipeline.

    Args:
        images: image file paths (JPEG and PNG natively; other formats through PIL).
        targets: one dict per image: "boxes" (a torchvision tv_tensors.BoundingBoxes, whose
            format, canvas_size and clamping_mode are kept, or a tensor [N, 4] in
            `box_format`), usually "labels" (int64 [N]); every other key is carried along as
            it is (SanitizeBoundingBoxes filters the keys its labels_getter names).
        transforms: torchvision (v1 or v2) or fastload transforms with a native equivalent,
            of a fixed output size or none (each image its own size), and v2's box-only
            transforms after them (module doc).
        box_format: the format of boxes given as plain tensors ("XYXY", "XYWH", "CXCYWH").
        seed: base of the random augmentation parameters (the loader overrides it).

    A sample is `(image [C, H, W], target)`, target["boxes"] a tv_tensors.BoundingBoxes
    with canvas_size the output size; a batch is the collate_fn's (with torch's default
    collate_fn images stack, and boxes only when every image has as many).

    Attributes:
        own_size: True where the transforms have no output size (each image its own).

    Example:
        >>> import torch, fastload
        >>> from torchvision.transforms import v2
        >>> ds = fastload.DetectionDataset(["a.jpg"], [{"boxes": torch.tensor([[1.0, 2.0, 30.0, 40.0]]),
        ...     "labels": torch.tensor([3])}], v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
        ...     v2.SanitizeBoundingBoxes()]))
        >>> len(ds), [step.kind for step in ds.box_steps]
        (1, ['sanitize'])
        >>> loader = fastload.DataLoader(ds, batch_size=8, collate_fn=lambda b: tuple(zip(*b)))
    """

    def __init__(self, images: Sequence[str], targets: Sequence[Dict[str, Any]], transforms: Any = None, *,
                 box_format: str = "XYXY", seed: int = 0):
        owner = f"fastload.{type(self).__name__}"
        images = [os.fspath(p) for p in images]
        targets = list(targets)
        if len(images) != len(targets):
            raise ValueError(f"{owner}: expected one target per image, got {len(targets)} targets for "
                             f"{len(images)} images.")
        image_transforms, self.box_steps = split_box_transforms(transforms, owner)
        self.own_size = False  # True: no batch shape, each image its own size (fastload.augment.own_size)
        # The index's label of sample i is i: a batch's labels are then the samples it holds
        # (a replacement under on_error="skip" included), whose targets the batch takes.
        super().__init__(SampleIndex.from_files(images, list(range(len(images)))), image_transforms, seed=seed)
        self._check_pipeline(owner)
        self.box_format = box_ops.format_name(box_format)
        self.annotations = [_annotation(t, k, images[k], self.box_format, owner) for k, t in enumerate(targets)]
        self._sizes = torch.full((len(images), 2), -1, dtype=torch.int64)  # read from headers when first needed
        self.center_crop = any(type(s).__name__ == "CenterCrop" for s in self.transforms)

    def _check_pipeline(self, owner: str) -> None:
        from fastload.augment.own_size import own_size_fusion
        from fastload.augment.plan import fuse

        if self.tail:
            raise UnsupportedPipeline(f"{owner}: {'; '.join(self.tail_blockers)}: the boxes follow the engine's "
                                      "geometry, so every image transform must be native.")
        refused = [type(s).__name__ for s in self.transforms if type(s).__name__ in _REFUSED]
        if refused:
            raise UnsupportedPipeline(f"{owner}: {refused[0]} moves boxes by its own drawn ops (shear, rotate, "
                                      "translate), which fastload's boxes do not follow; use it on a "
                                      "classification dataset, or torch's DataLoader over a torchvision dataset.")
        try:
            fuse(self.transforms)
        except UnsupportedPipeline as error:
            try:  # torchvision's detection references: each image keeps its own size
                own_size_fusion(self.transforms)
            except UnsupportedPipeline:
                raise UnsupportedPipeline(f"{owner}: {error}. Detection batches need one output size (a crop or "
                                          "Resize((height, width))), or each image its own size (flips, colour, "
                                          "dtype, Normalize and at most a shorter-side Resize).") from None
            self.own_size = True

    @property
    def targets(self) -> List[Dict[str, Any]]:
        """Each image's target as given (boxes as plain tensors with their format aside)."""
        return [a["target"] for a in self.annotations]

    def sizes_of(self, samples: torch.Tensor) -> torch.Tensor:
        """int64 [N, 2]: (height, width) of these samples' images, from their headers (read
        once, no decode); checked against the boxes' canvas_size where one was given.

        Raises:
            fastload.DecodeError: an image whose header cannot be read.
            ValueError: a canvas_size other than the image's size (v2 refuses it too).
        """
        from fastload.decode.header import file_header
        from fastload.errors import DecodeError

        samples = samples.to(torch.int64)
        for i in samples[(self._sizes[samples, 0] < 0)].tolist():
            header = file_header(self.index.source(i))
            if header is None:
                raise DecodeError("could not read the image's header for its size (the boxes need it)", i,
                                  self.index.source(i))
            canvas = self.annotations[i]["canvas_size"]
            if canvas is not None and tuple(canvas) != (header.height, header.width):
                raise ValueError(f"fastload.DetectionDataset: sample {i} ({self.index.source(i)}): the boxes' "
                                 f"canvas_size {tuple(canvas)} is not the image's size "
                                 f"{(header.height, header.width)} (height, width); give the image's size.")
            self._sizes[i] = torch.tensor([header.height, header.width])
        return self._sizes[samples]

    def targets_of(self, samples: torch.Tensor, epoch: int, plan: Any, images: Optional[Sequence[Any]] = None
                   ) -> List[Dict[str, Any]]:
        """The targets of these samples at `epoch` under `plan` (the engine's geometry,
        seeded as the batch was): boxes moved, box-only transforms applied.

        Args:
            samples: int64 [N], the samples in batch order.
            images: the batch's images, what a callable labels_getter is given with each target.
        """
        samples = samples.to(torch.int64).reshape(-1)
        if self.own_size:  # (each image its own output canvas)
            steps = box_ops.own_size_steps(plan, self.sizes_of(samples), samples, epoch)
        else:
            steps = box_ops.steps_of(plan, self.sizes_of(samples), samples, epoch, center_crop=self.center_crop)
        notes = [self.annotations[i] for i in samples.tolist()]
        groups: Dict[Any, List[int]] = {}
        for k, note in enumerate(notes):
            groups.setdefault((note["format"], note["boxes"].dtype, note["clamping_mode"]), []).append(k)
        out: List[Any] = [None] * len(notes)
        for (fmt, _, clamping), members in groups.items():
            moved = box_ops.move_group([notes[k]["boxes"] for k in members], fmt, clamping, steps, members,
                                       self.box_steps)
            for k, (boxes, out_fmt, keeps) in zip(members, moved):
                out[k] = box_ops.finish_target(
                    notes[k]["target"], notes[k]["key"], boxes, out_fmt, keeps, self.box_steps, steps.canvas_of(k),
                    clamping, None if images is None else images[k],
                    f"fastload.DetectionDataset sample {int(samples[k])}")
        return out

    def collated(self, images: torch.Tensor, samples: torch.Tensor, epoch: int, plan: Any,
                 collate_fn: Any = None) -> Any:
        """A loader batch: the engine's images [B, C, H, W] and these samples' targets as
        (image, target) samples through `collate_fn` (None: torch's default_collate)."""
        from torch.utils.data import default_collate

        per_image = list(images) if isinstance(images, (list, tuple)) else images.unbind(0)
        targets = self.targets_of(samples, epoch, plan, per_image)
        if self.own_size:
            for k, i in enumerate(samples.tolist()):  # a file whose header's size is not its decoded size
                self._check_size(i, per_image[k], plan)
            # (torch's default_collate stacks images of one size and raises as torch does otherwise)
            return (collate_fn or default_collate)(list(zip(per_image, targets)))
        if collate_fn is None or collate_fn is default_collate:
            # default_collate's batch ([images, targets collated]) without stacking the
            # engine's batch again.
            return [images, default_collate(targets)]
        return collate_fn(list(zip(per_image, targets)))

    def _check_size(self, i: int, image: torch.Tensor, plan: Any) -> None:
        from fastload.augment.own_size import own_size
        from fastload.errors import DecodeError

        want = own_size(plan, *self.sizes_of(torch.tensor([i]))[0].tolist())
        if tuple(image.shape[-2:]) != want:
            raise DecodeError(f"the image header's size gives a {want[0]}x{want[1]} output, its decoded pixels "
                              f"{image.shape[-2]}x{image.shape[-1]}: the file is inconsistent", i,
                              self.index.source(i))

    def plan(self) -> Any:
        """The engine's plan of the image transforms (an own-size plan where images keep
        their own sizes), seeded with `seed`.

        Example:
            >>> import torch, fastload
            >>> from torchvision.transforms import v2
            >>> ds = fastload.DetectionDataset(["a.jpg"], [{"boxes": torch.zeros(0, 4)}], [v2.RandomHorizontalFlip()])
            >>> ds.own_size, ds.plan().flip_p
            (True, 0.5)
        """
        from fastload.augment.own_size import own_size_fusion
        from fastload.augment.plan import build_plan, make_plan

        if self.own_size:
            plan = make_plan(own_size_fusion(self.transforms))
            plan.seed = self.seed
            return plan
        return build_plan(self.transforms, seed=self.seed)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, Dict[str, Any]]:
        if i < 0:
            i += len(self)
        plan = self.plan()
        if self.own_size:  # PIL's decode, then the engine's kernel and draws
            from fastload.augment.own_size import apply_own_size
            from fastload.decode.pil import decode_to_tensor

            image = decode_to_tensor(self.index.read(i), index=i, source=self.index.source(i))
            image = apply_own_size(plan, image, self.epoch, i)
            self._check_size(i, image, plan)
        else:
            image, _ = super().__getitem__(i)
        return image, self.targets_of(torch.tensor([i]), self.epoch, plan, [image])[0]

    def __repr__(self) -> str:
        steps = "".join(f" + {s.kind}" for s in self.box_steps)
        return f"fastload.DetectionDataset({len(self)} images, transforms={transforms_repr(self.transforms, ())}{steps})"


def _annotation(target: Any, k: int, path: str, box_format: str, owner: str) -> Dict[str, Any]:
    """One image's target read once: its boxes as a plain tensor, their format,
    canvas_size and clamping_mode, and the dict as given."""
    if not isinstance(target, dict):
        raise TypeError(f"{owner}: expected each target as a dict with 'boxes' (and 'labels'), got "
                        f"{type(target).__name__} for image {k} ({path}).")
    keys = [key for key in target if isinstance(key, str) and key.lower() == "boxes"]
    if not keys:
        raise ValueError(f"{owner}: target {k} ({path}) has no 'boxes' key (keys: {list(target)}).")
    boxes = target[keys[0]]
    fmt, canvas, clamping = box_format, None, "soft"
    if type(boxes).__name__ == "BoundingBoxes":
        fmt, canvas, clamping = box_ops.format_name(boxes.format), tuple(boxes.canvas_size), boxes.clamping_mode
    for value in target.values():
        if type(value).__name__ == "Mask":
            raise UnsupportedPipeline(f"{owner}: target {k} ({path}) holds a tv_tensors.Mask: per-instance masks "
                                      "do not follow the geometry here; keep them out of the targets.")
    plain = torch.as_tensor(boxes).as_subclass(torch.Tensor).reshape(-1, 4)
    return {"target": target, "key": keys[0], "boxes": plain, "format": fmt, "canvas_size": canvas,
            "clamping_mode": clamping}
