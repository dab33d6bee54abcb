"""NativeDataset: the base of fastload's own datasets (ImageFolder, TarShards, FileList).

A native dataset is a SampleIndex (where the bytes are) plus a list of transforms (specs
from fastload.transforms: what to do to the pixels). fastload.DataLoader runs it on the
C++ engine, one call per batch. Indexed directly (`dataset[i]`, or in torch's DataLoader)
it decodes with PIL and applies the same transforms in plain PyTorch, with the same random
parameters: a slow but faithful twin.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, List, Optional, Sequence, Tuple

import torch

from fastload.compat.conversion import NativeSource
from fastload.source.index import SampleIndex


def transforms_argument(transforms: Optional[Sequence[Any]], ops: Optional[Sequence[Any]], owner: str):
    """The transforms a dataset was given: `transforms=`, or the older keyword `ops=`
    (same meaning); both at once is refused, as neither could win silently.

    Raises:
        TypeError: both transforms and ops were passed.
    """
    if ops is None:
        return transforms
    if transforms is not None:
        raise TypeError(f"{owner}: expected transforms=[...] or ops=[...] (the older name of the same argument), "
                        "got both. Pass only transforms=.")
    return ops


def transform_list(transforms: Any) -> List[Any]:
    """`transforms` as a list: None is [], a list, tuple or other iterable (nn.Sequential)
    gives its items, and one transform (a fastload spec, a torchvision transform, a
    torchvision Compose v1 or v2: none of them iterable) is a list of itself. Compose is
    opened later, where the transforms are converted.

    Example:
        >>> from fastload import transforms as T
        >>> transform_list(None), transform_list(T.CenterCrop(8)), transform_list((T.CenterCrop(8),))
        ([], [CenterCrop(size=(8, 8))], [CenterCrop(size=(8, 8))])
    """
    if transforms is None:
        return []
    if isinstance(transforms, Iterable) and not isinstance(transforms, (str, bytes)):
        return list(transforms)
    return [transforms]


def native_transforms(transforms: Optional[Sequence[Any]], owner: str = "fastload") -> List[Any]:
    """fastload.transforms specs for `transforms`: specs are kept, torchvision transforms
    (v1 or v2, Compose flattened; a Compose or one transform may stand for the list)
    become their fastload equivalents, anything else is refused now rather than at the
    first batch.

    Raises:
        UnsupportedPipeline: a torchvision transform without a fastload equivalent.
        TypeError: a transform that is neither a fastload spec nor a torchvision transform.
    """
    out: List[Any] = []
    for position, transform in enumerate(transform_list(transforms)):
        out.extend(_to_specs(transform, position, owner))
    return out


def _spec_names() -> str:
    from fastload.augment.specs import SPECS

    return ", ".join(f"fastload.transforms.{spec.__name__}" for spec in SPECS)


def _to_specs(transform: Any, position: int, owner: str) -> List[Any]:
    """One transform's fastload specs; UnsupportedPipeline / TypeError saying why not."""
    from fastload.augment.specs import SPECS
    from fastload.errors import UnsupportedPipeline

    if isinstance(transform, SPECS):
        return [transform]
    if type(transform).__module__.startswith("torchvision."):
        from fastload.compat.torchvision import NotConvertible, convert_transform

        try:
            return convert_transform(transform)
        except NotConvertible as error:
            raise UnsupportedPipeline(
                f"{owner}: transforms[{position}] is the torchvision transform {transform!r}, which fastload "
                f"cannot run ({error}). Use fastload's transforms ({_spec_names()}), or keep this transform in a "
                "torchvision.datasets.ImageFolder(root, transform=...): fastload.DataLoader runs that "
                "on its generic path.") from None
    raise TypeError(f"{owner}: expected transforms made of fastload's transforms ({_spec_names()}) or torchvision "
                    f"transforms they map to, got {transform!r} at transforms[{position}]. Python callables may "
                    "follow them (after a native crop or resize).")


def split_transforms(transforms: Optional[Sequence[Any]], owner: str = "fastload"):
    """The transforms cut into their native prefix and Python tail
    (fastload.augment.split.Pipeline; Compose flattened): the prefix as fastload specs, the
    tail as the user's callables, from the first transform without a native equivalent.
    `transforms` is a list, or one transform or Compose (transform_list).

    Raises:
        UnsupportedPipeline: the first transform has no native equivalent (the engine needs
            a native crop or resize before any Python transform), or a fastload spec comes
            after a Python transform (specs run only on the engine).
        TypeError: the first transform is neither a fastload spec nor a torchvision
            transform, or a later one is not callable.
    """
    from fastload.augment.specs import SPECS
    from fastload.augment.split import split_pipeline
    from fastload.errors import UnsupportedPipeline
    from fastload.augment.tail import flatten

    flat = flatten(transform_list(transforms))
    positions: dict = {}
    for position, transform in enumerate(flat):
        positions.setdefault(id(transform), position)

    def to_specs(transform: Any) -> List[Any]:
        position = positions[id(transform)]
        if position == 0 or isinstance(transform, SPECS):
            return _to_specs(transform, position, owner)
        if type(transform).__module__.startswith("torchvision."):
            from fastload.compat.torchvision import convert_transform, flatten, leaf_specs

            # NotConvertible (a ValueError) says why not; a leaf's reason without its name
            # (split_pipeline names it).
            return leaf_specs(transform) if len(flatten(transform)[0]) == 1 else convert_transform(transform)
        if callable(transform):
            raise ValueError("a Python callable")
        raise TypeError(f"{owner}: expected a callable at transforms[{position}] (after the native transforms, "
                        f"each runs in Python on the result of the one before), got {transform!r}.")

    if flat:
        # Refused here, not as the start of a tail: the engine needs a native first step.
        _to_specs(flat[0], 0, owner)
    pipeline = split_pipeline(flat, to_specs)
    for position, transform in enumerate(pipeline.tail, start=len(flat) - len(pipeline.tail)):
        if isinstance(transform, SPECS):
            raise UnsupportedPipeline(
                f"{owner}: transforms[{position}] is fastload's {transform!r}, after the Python transform "
                f"{pipeline.tail[0]!r}: fastload's transforms run only on the engine, before the first Python "
                "transform. Use torchvision's equivalent there, or move it before the Python transforms.")
    return pipeline, flat


class NativeDataset(torch.utils.data.Dataset, NativeSource):
    """Base class: subclasses build `self.index` and call `super().__init__(index, transforms)`.

    Args:
        index: where each sample's bytes are, and its label.
        transforms: a list of specs from fastload.transforms (RandomResizedCrop,
            Normalize, ...); torchvision transforms with a fastload equivalent are
            converted to them. A torchvision Compose (v1 or v2), or one transform, may
            stand for the list. From the first transform without a native equivalent on
            (TrivialAugmentWide, a user function, ...), the rest is the Python tail:
            callables run per sample, in order, on the native prefix's output (a hybrid
            pipeline; fastload.augment.tail says what they receive). The first transform
            must be native.
        seed: the base of every random parameter (crop, flip; the tail's per-sample seeds):
            parameters are a pure function of (seed, epoch, sample index). The loader
            overrides it with its own.
        ops: the older name of `transforms` (same meaning; pass one of the two).
        tail_input: what the tail receives when the prefix made no tensor: "pil" (a PIL
            image, as torchvision's path; the default) or "tensor" (the uint8 [C, H, W]
            tensor: faster, for v2 transforms).
        views: several views of each image, one transform list (or Compose) per view, in
            place of `transforms` (SimCLR: the same list twice; DINO: 2 global + 8 local
            crops). Each view draws its own random parameters (view v from (seed, epoch,
            index, v); view 0 as `transforms` alone would), all from one read and one
            decode of the image. A sample is then `([view_0, ..., view_K-1], label)`,
            batches `[[view_0 [B, C, H, W], ...], labels]`. Every view's transforms must
            be native (no Python tail).
        outputs: the outputs' structure itself (fastload.augment.views.Outputs: views,
            masks, arrangement), for datasets built on this one (SegmentationDataset).
        mask_index: where each sample's mask file is, when `outputs` has masks.

    Attributes:
        transforms: the list of fastload.transforms specs of the native prefix (unlike a
            torchvision dataset's `transforms`, which is one callable); `ops` reads the
            same list.
        tail: the Python transforms after the prefix, as given (a tuple; empty when every
            transform is native). `tail_blockers` says why each has no native equivalent.

    Example:
        >>> from fastload import transforms as T
        >>> index = SampleIndex.from_files(["a.jpg"], [0])
        >>> NativeDataset(index, [T.CenterCrop(8)]).transforms == NativeDataset(index, ops=[T.CenterCrop(8)]).ops
        True
        >>> def invert(image):
        ...     return 255 - image
        >>> hybrid = NativeDataset(index, [T.CenterCrop(8), invert])
        >>> hybrid.transforms, hybrid.tail == (invert,)
        ([CenterCrop(size=(8, 8))], True)
    """

    def __init__(self, index: SampleIndex, transforms: Optional[Sequence[Any]] = None, seed: int = 0, *,
                 ops: Optional[Sequence[Any]] = None, tail_input: str = "pil", views: Optional[Sequence[Any]] = None,
                 outputs: Any = None, mask_index: Optional[SampleIndex] = None):
        from fastload.augment.tail import TAIL_INPUTS, makes_tensor

        owner = f"fastload.{type(self).__name__}"
        if tail_input not in TAIL_INPUTS:
            raise ValueError(f"{owner}: expected tail_input in {TAIL_INPUTS}, got {tail_input!r}.")
        if views is not None:
            if transforms is not None or ops is not None:
                raise TypeError(f"{owner}: expected transforms=[...] or views=[[...], ...] (one transform list per "
                                "view), got both. Pass only views=.")
            outputs = view_outputs(views, owner)
        if outputs is not None:
            if outputs.masks and (mask_index is None or len(mask_index) != len(index)):
                raise ValueError(f"{owner}: expected one mask file per sample, got "
                                 f"{0 if mask_index is None else len(mask_index)} for {len(index)} samples.")
            transforms = list(outputs.views[0])
        # Several outputs per sample (fastload.augment.views.Outputs), or None: one image.
        self.outputs = outputs if outputs is not None and outputs.several else None
        self.mask_index = mask_index if self.outputs is not None and self.outputs.masks else None
        self.index = index
        pipeline, flat = split_transforms(transforms_argument(transforms, ops, owner), owner)
        self.transforms = list(pipeline.native)
        self.tail = tuple(pipeline.tail)
        self.tail_blockers = tuple(pipeline.blockers)
        self.tail_input = tail_input
        # torchvision's image is a tensor after the prefix: the tail gets that tensor.
        self.prefix_makes_tensor = any(makes_tensor(t) for t in flat[:len(flat) - len(self.tail)])
        self.seed = seed
        self.epoch = 0

    @property
    def ops(self) -> List[Any]:
        """The older name of `transforms` (read-only)."""
        return self.transforms

    def python_tail(self):
        """The tail as a fastload.augment.tail.Tail (None when every transform is native)."""
        if not self.tail:
            return None
        from fastload.augment.tail import Tail

        return Tail(self.tail, input=self.tail_input, prefix_makes_tensor=self.prefix_makes_tensor,
                    blockers=self.tail_blockers)

    def __len__(self) -> int:
        return len(self.index)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def targets(self):
        """Labels of every sample, like torchvision's ImageFolder.targets."""
        return self.index.labels.tolist()

    def __getitem__(self, i: int) -> Tuple[Any, int]:
        from fastload.augment.pipeline import apply_ops_reference
        from fastload.decode.pil import decode_to_tensor

        if i < 0:
            i += len(self)
        image = decode_to_tensor(self.index.read(i), index=i, source=self.index.source(i))
        if self.outputs is not None:
            return self._outputs_of(image, i)
        out = apply_ops_reference(self.transforms, image, seed=self.seed, epoch=self.epoch, index=i)
        tail = self.python_tail()
        if tail is not None:
            from fastload.augment.tail import GlobalDraws, TailError, sample_seed

            # The same per-sample seed as the hybrid runner's: both paths draw alike.
            try:
                with GlobalDraws() as draws:
                    draws.seed(sample_seed(self.seed, self.epoch, i))
                    out = tail(out)
            except TailError as error:
                from fastload.errors import add_note

                add_note(error.error, tail.note(error, i, self.index.source(i)))
                raise error.error from None
        return out, int(self.index.labels[i])

    def view_plans(self, **options: Any) -> Any:
        """The outputs fused (fastload.augment.views.ViewPlans: one Plan per image view, view
        0 seeded with the dataset's seed), or None for one output per sample. `options`
        go to view 0's fastload.augment.plan.build_plan (dtype, dct_scaling, ...)."""
        if self.outputs is None:
            return None
        from fastload.augment.plan import build_plan
        from fastload.augment.views import build_view_plans

        first = build_plan(self.outputs.views[0], seed=self.seed, **options)
        return build_view_plans(self.outputs, first, dtype=options.get("dtype"))

    def _outputs_of(self, image: torch.Tensor, i: int) -> Any:
        """Sample i's views and masks, made in plain PyTorch/PIL with the engine's draws."""
        from fastload.augment.pipeline import apply_plan_reference
        from fastload.augment.views import mask_reference
        from fastload.decode.pil import decode_mask_array
        from fastload.errors import DecodeError

        plans = self.view_plans()
        images = [apply_plan_reference(plans.seeded(v), image, epoch=self.epoch, index=i)
                  for v in range(plans.image_views)]
        masks = []
        if self.outputs.masks:
            source = self.mask_index.source(i)
            mask = decode_mask_array(self.mask_index.read(i), index=i, source=source)
            if mask.shape != tuple(image.shape[:2]):
                raise DecodeError(f"expected the mask {source} to have its image's size "
                                  f"{image.shape[0]}x{image.shape[1]}, got {mask.shape[0]}x{mask.shape[1]}", i,
                                  self.index.source(i))
            masks = [mask_reference(mask, plans.seeded(m.follows), m, epoch=self.epoch, index=i)
                     for m in self.outputs.masks]
        return self.outputs.arrange_sample(images, masks, int(self.index.labels[i]))


def view_outputs(views: Sequence[Any], owner: str = "fastload") -> Any:
    """fastload.augment.views.Outputs of `views`: one transform list (or Compose, or one
    transform) per view, each fully native.

    Raises:
        ValueError: no view.
        UnsupportedPipeline, TypeError: a view's transform without a native equivalent
            (named with the view: "views[1]: transforms[2] ...").
    """
    from fastload.augment.views import Outputs

    views = list(views) if isinstance(views, Iterable) else [views]
    if not views:
        raise ValueError(f"{owner}: expected at least one view in views=[...], got none.")
    return Outputs.of_views([native_transforms(view, f"{owner} views[{k}]") for k, view in enumerate(views)])
