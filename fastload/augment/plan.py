"""Reduces a list of transform specs to one fused plan for the C++ engine.

A plan is: one geometry (RandomResizedCrop, RandomCrop with its padding, or Resize and/or
CenterCrop with a fixed output size) resampled with one interpolation (bilinear, bicubic
or nearest), optional left-right and top-bottom flips, the uint8-stage ops (ColorJitter,
Grayscale, then GaussianBlur, then TrivialAugmentWide, RandAugment, AutoAugment or AugMix), and one affine value map (scale, mean, std) with an
output dtype. Lists that do not reduce to that raise UnsupportedPipeline with the
reason; the loader then says so in `loader.path` and takes the generic path.

The plan itself is the engine's: `Plan` IS-A `fastload._C.Plan` (csrc/augment/plan.h,
every field bound once there), and adds only what C++ does not need: `description`
(str), `dtype` (torch.dtype) and the read-only `out_size`.

Example:
    >>> from fastload.augment.plan import Plan
    >>> plan = Plan(out_height=8, out_width=6, channels=1, mean=[0.5], std=[0.25])
    >>> plan.out_size, plan.dct_scaling, plan.dtype
    ((8, 6), True, torch.uint8)
    >>> plan.out_hieght = 8
    Traceback (most recent call last):
    ...
    AttributeError: 'Plan' object has no attribute 'out_hieght'
"""

from __future__ import annotations

import functools
from typing import Any, Dict, NamedTuple, Optional, Sequence

import torch

from fastload import _ext
from fastload.augment import autoaugment, color, specs
from fastload.errors import UnsupportedPipeline  # noqa: F401  (raised here; re-exported)


def __getattr__(name: str) -> Any:
    # `Plan` is made on first use: `import fastload` must not load fastload._C, and the
    # class IS-A fastload._C.Plan. Pickle finds plans' class by this name too.
    if name == "Plan":
        return _plan_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=None)
def _plan_class() -> type:
    core = _ext.require_ops().Plan

    class Plan(core):
        """A fused pipeline: a fastload._C.Plan with `description` and `dtype`.

        `Plan(**fields)` starts from the C++ defaults and sets the given fields; a
        misspelt field raises AttributeError, here and on assignment. Needs fastload._C.

        """

        __slots__ = ("description", "dtype")

        def __init__(self, **fields: Any):
            super().__init__()
            self.description = ""
            self.dtype = torch.uint8
            for name, value in fields.items():
                setattr(self, name, value)

        @property
        def out_size(self):
            """(out_height, out_width)."""
            return (self.out_height, self.out_width)

        def __getstate__(self):
            return core.__getstate__(self), self.description, self.dtype

        def __setstate__(self, state):
            core.__setstate__(self, state[0])
            self.description, self.dtype = state[1], state[2]

        def __eq__(self, other):  # the description only describes
            return isinstance(other, Plan) and core.__eq__(self, other) and self.dtype == other.dtype

        __hash__ = None  # mutable

        def __repr__(self):
            return f"{core.__repr__(self)[:-1]}, dtype={self.dtype}, description={self.description!r})"

    Plan.__module__, Plan.__qualname__ = __name__, "Plan"
    return Plan


class Fusion(NamedTuple):
    """What a list of specs fuses into: the Plan's fields, its description and dtype.
    Pure Python, so the reason a pipeline does not fuse is known without fastload._C."""

    fields: Dict[str, Any]
    description: str
    dtype: torch.dtype


# torchvision's neutral point of each ColorJitter factor: the plan marks an op that is
# off (None) by a range of exactly it.
_JITTER_CENTRES = (1.0, 1.0, 1.0, 0.0)


def _jitter_ranges(jitter: "color.ColorJitter") -> list:
    out = []
    for name, centre in zip(("brightness", "contrast", "saturation", "hue"), _JITTER_CENTRES):
        value = getattr(jitter, name)
        out += [centre, centre] if value is None else [float(value[0]), float(value[1])]
    return out


def jitter_nan_ranges(plan_jitter: Sequence[float]) -> list:
    """The plan's jitter ranges as the colour ops take them: NaN pairs where an op is off."""
    out = []
    for k, centre in enumerate(_JITTER_CENTRES):
        low, high = float(plan_jitter[2 * k]), float(plan_jitter[2 * k + 1])
        out += [float("nan")] * 2 if low == high == centre else [low, high]
    return out


def _engine(op: Any) -> Any:
    """fastload._C, where the engine's enums and limits the plan follows are defined once;
    UnsupportedPipeline naming `op` when it is not built (the loader then runs generic)."""
    if not _ext.has_ops():
        raise UnsupportedPipeline(f"{op}: native needs fastload._C, which is not built")
    return _ext.require_ops()


def _random_crop_padding(crop: "specs.RandomCrop", channels: int) -> Dict[str, Any]:
    """The plan fields of a padding RandomCrop's fill and padding_mode (any width: the engine
    decodes every pixel a mirrored or edge position reads); UnsupportedPipeline where the
    engine cannot pad as torchvision does."""
    if crop.padding_mode == "constant":
        fill = crop.uint8_fill(channels)
        return {} if not any(fill) else dict(pad_fill=[float(f) for f in fill])
    if crop.padding_mode in ("reflect", "symmetric") and crop.pad_if_needed and any(crop.padding or ()):
        # torchvision pads twice: `padding`, then what the crop still misses, mirrored about
        # the padded image's edges; the engine mirrors about the image's own.
        raise UnsupportedPipeline(f"{crop} mirrors an already padded image (padding, then pad_if_needed); native: "
                                  f"{crop.padding_mode} padding with padding or pad_if_needed, not both")
    return dict(padding_mode=int(_engine(crop).PaddingMode.__members__[crop.padding_mode.upper()]))



def _augment_fields(augment: Any, out_size, channels: int, nearest_resize: bool) -> Dict[str, Any]:
    """The plan fields of a TrivialAugmentWide / RandAugment / AutoAugment on the out_size output;
    UnsupportedPipeline where the engine cannot run it as torchvision does."""
    if augment.interpolation not in ("nearest", "bilinear"):
        raise UnsupportedPipeline(f"{augment}: the native affine ops have Pillow's NEAREST and BILINEAR, not "
                                  f"{augment.interpolation}")
    bins = augment.num_magnitude_bins
    if bins < 2:
        raise UnsupportedPipeline(f"{augment}: native with num_magnitude_bins >= 2")
    if not -1 <= augment.magnitude_bin < bins:
        raise UnsupportedPipeline(f"{augment}: magnitude {augment.magnitude_bin} is outside its "
                                  f"{bins} bins, which torchvision refuses")
    most = _engine(augment).AUTOAUGMENT_MAX_STEPS
    if augment.ops_per_sample > most:
        raise UnsupportedPipeline(f"{augment}: native with at most {most} ops per sample")
    if nearest_resize:
        raise UnsupportedPipeline(f"{augment} after a nearest resize does not fuse (native: bilinear, bicubic)")
    try:
        fill = augment.uint8_fill(channels)
    except ValueError as error:
        raise UnsupportedPipeline(f"{augment}: {error}") from None
    space_ops, magnitudes = augment.space(*out_size)
    fields = dict(augment_ops=space_ops, augment_magnitudes=magnitudes, augment_num_ops=augment.ops_per_sample,
                  augment_magnitude_bin=augment.magnitude_bin, augment_fill=fill,
                  augment_bilinear=augment.interpolation == "bilinear")
    if isinstance(augment, autoaugment.AutoAugment):  # its sub-policies pick the ops
        policy_ops, policy_probs, policy_bins = augment.policy_fields()
        fields.update(augment_policy_ops=policy_ops, augment_policy_probs=policy_probs,
                      augment_policy_bins=policy_bins)
    return fields



def _augmix_fields(augmix: Any, out_size, nearest_resize: bool) -> Dict[str, Any]:
    """The plan fields of an AugMix; UnsupportedPipeline where the engine cannot run it."""
    if augmix.interpolation not in ("nearest", "bilinear"):
        raise UnsupportedPipeline(f"{augmix}: the native affine ops have grid_sample's nearest and bilinear, not "
                                  f"{augmix.interpolation}")
    if augmix.fill is not None:
        raise UnsupportedPipeline(f"{augmix}: native with fill=None (grid_sample's zeros)")
    chains, depth = _engine(augmix).AUGMIX_MAX_CHAINS, _engine(augmix).AUGMIX_MAX_DEPTH
    if not 1 <= augmix.mixture_width <= chains or augmix.chain_depth > depth:
        raise UnsupportedPipeline(f"{augmix}: native with 1 to {chains} chains of at most {depth} ops")
    if not augmix.alpha > 0:
        raise UnsupportedPipeline(f"{augmix}: native with alpha > 0 (torch's Dirichlet needs it)")
    if nearest_resize:
        raise UnsupportedPipeline(f"{augmix} after a nearest resize does not fuse (native: bilinear, bicubic)")
    space_ops, magnitudes = augmix.space(*out_size)
    return dict(augmix_ops=space_ops, augmix_magnitudes=magnitudes, augmix_severity=augmix.severity,
                augmix_width=augmix.mixture_width, augmix_depth=augmix.chain_depth, augmix_alpha=augmix.alpha,
                augmix_bilinear=augmix.interpolation == "bilinear")


def build_plan(ops: Sequence[Any], **options: Any) -> Any:
    """Fuses `ops` into a Plan (fastload._C.Plan with description and dtype): fuse(), then
    make_plan(). Takes fuse()'s arguments; raises UnsupportedPipeline like it."""
    return make_plan(fuse(ops, **options))


def make_plan(fusion: Fusion) -> Any:
    """The Plan of a Fusion (needs fastload._C)."""
    fields = dict(fusion.fields)
    out_height, out_width = fields.pop("out_size")
    fields["geometry"] = getattr(_ext.require_ops().Geometry, fields["geometry"])
    core = _ext.require_ops()
    fields["interpolation"] = getattr(core.Interpolation, fields["interpolation"].upper())
    if fields["max_pixels"] is None:
        fields["max_pixels"] = core.DEFAULT_MAX_PIXELS
    plan = _plan_class()(out_height=out_height, out_width=out_width, **fields)
    plan.dtype, plan.description = fusion.dtype, fusion.description
    return plan


def fuse(
    ops: Sequence[Any],
    *,
    channels: int = 3,
    dtype: Optional[torch.dtype] = None,
    dct_scaling: bool = True,
    max_pixels: Optional[int] = None,
    seed: int = 0,
) -> Fusion:
    """Fuses `ops` (fastload transform specs, applied in order) into one plan's fields.

    Args:
        ops: specs from fastload.augment.specs.
        channels: 3 (RGB) or 1 (grayscale).
        dtype: overrides the output dtype (e.g. torch.bfloat16 for AMP), values unchanged.
        dct_scaling: decode at a reduced DCT scale where the crop allows it; False: never
            (outputs follow a full decode to rounding).
        max_pixels: the decoder refuses images with more pixels (<= 0: no limit; None:
            fastload._C.DEFAULT_MAX_PIXELS, Pillow's Image.MAX_IMAGE_PIXELS).
        seed: the random parameters are a pure function of (seed, epoch, index).

    Raises:
        UnsupportedPipeline: with the reason, when the list does not fuse.
    """
    geometry = []  # the geometric specs, in order
    flip_p = flip_v_p = 0.0
    value_scale, mean, std = 1.0, (0.0,) * channels, (1.0,) * channels
    out_dtype = torch.uint8
    value_started = False  # a value op ran: later padding would pad normalised zeros
    jitter: Optional[color.ColorJitter] = None
    grayscale_p = 0.0
    erasing: Optional[color.RandomErasing] = None
    color_started = False  # a PIL-stage colour op ran: geometry after it does not fuse
    blur: Optional[specs.GaussianBlur] = None
    augment = None  # TrivialAugmentWide, RandAugment, AutoAugment or AugMix
    for op in ops:
        if erasing is not None and not isinstance(op, (specs.RandomHorizontalFlip, specs.RandomVerticalFlip)):
            # Erasing writes final values: a later value op would map them again.
            raise UnsupportedPipeline(f"{op} after RandomErasing does not fuse (RandomErasing runs last, on the "
                                      f"normalised output)")
        if augment is not None and isinstance(op, (color.ColorJitter, color.Grayscale, color.RandomGrayscale,
                                                   specs.GaussianBlur, specs.RandomHorizontalFlip,
                                                   specs.RandomVerticalFlip) + autoaugment.SPECS):
            raise UnsupportedPipeline(f"{op} after {type(augment).__name__} does not fuse (the fused pass flips "
                                      f"while resampling and runs {type(augment).__name__} last on the uint8 image)")
        if isinstance(op, autoaugment.SPECS):
            name = type(op).__name__
            if value_started:
                raise UnsupportedPipeline(f"{name} after ToTensor/ToDtype/Normalize runs torchvision's tensor path; "
                                          f"native: on the PIL image, before the conversion")
            if not geometry:
                raise UnsupportedPipeline(f"{name} before the crop/resize does not fuse (the fused pass augments the "
                                          f"resized image)")
            augment = op
            color_started = True
            continue
        if isinstance(op, specs.GaussianBlur):
            if value_started:
                raise UnsupportedPipeline(f"{op} after ToTensor/ToDtype/Normalize blurs torchvision's float tensor; "
                                          f"native: in the PIL stage, before the conversion")
            if not geometry:
                raise UnsupportedPipeline(f"{op} before the crop/resize does not fuse (the fused pass blurs the "
                                          f"resized image)")
            if blur is not None:
                raise UnsupportedPipeline("two GaussianBlur ops do not fuse into one")
            blur = op
            continue
        if blur is not None and isinstance(op, (color.ColorJitter, color.Grayscale, color.RandomGrayscale,
                                                specs.RandomResizedCrop, specs.Resize, specs.CenterCrop,
                                                specs.RandomCrop)):
            raise UnsupportedPipeline(f"{op} after GaussianBlur does not fuse (the fused pass blurs after the "
                                      f"crop/resize and the colour ops)")
        if isinstance(op, (color.ColorJitter, color.Grayscale, color.RandomGrayscale)):
            name = type(op).__name__
            if value_started:
                raise UnsupportedPipeline(f"{name} after ToTensor/ToDtype/Normalize runs torchvision's tensor path; "
                                          f"native: in the PIL stage, before the conversion")
            if not geometry:
                raise UnsupportedPipeline(f"{name} before the crop/resize does not fuse (the fused pass applies "
                                          f"colour to the resized image)")
            if isinstance(op, color.ColorJitter):
                if jitter is not None or grayscale_p > 0:
                    raise UnsupportedPipeline("ColorJitter after another ColorJitter or a Grayscale does not fuse")
                jitter = op
            else:
                if grayscale_p > 0:
                    raise UnsupportedPipeline("two Grayscale/RandomGrayscale ops do not fuse into one")
                if isinstance(op, color.Grayscale):
                    if op.num_output_channels != channels:
                        raise UnsupportedPipeline(f"{op} changes the number of channels ({channels} -> "
                                                  f"{op.num_output_channels}); native: Grayscale("
                                                  f"num_output_channels={channels})")
                    grayscale_p = 1.0
                else:
                    grayscale_p = min(max(float(op.p), 0.0), 1.0)
                if channels == 1:  # "L" to "L": nothing to do
                    grayscale_p = 0.0
            color_started = True
            continue
        if isinstance(op, color.RandomErasing):
            try:
                op.fill(channels)
            except ValueError as error:
                raise UnsupportedPipeline(f"{op}: {error}") from None
            erasing = op
            continue
        if isinstance(op, (specs.RandomResizedCrop, specs.Resize, specs.CenterCrop, specs.RandomCrop)):
            if value_started and isinstance(op, (specs.CenterCrop, specs.RandomCrop)):
                raise UnsupportedPipeline(f"{op} after a dtype/normalise op pads in normalised space")
            if color_started:
                raise UnsupportedPipeline(f"{op} after a colour op does not fuse (the fused pass applies colour to "
                                          f"the resized image)")
            geometry.append(op)
        elif isinstance(op, specs.RandomHorizontalFlip):
            if flip_p > 0 and op.p > 0:
                raise UnsupportedPipeline("two random flips do not fuse into one")
            flip_p = op.p
        elif isinstance(op, specs.RandomVerticalFlip):
            if flip_v_p > 0 and op.p > 0:
                raise UnsupportedPipeline("two random vertical flips do not fuse into one")
            flip_v_p = op.p
        elif isinstance(op, specs.ToDtype):
            value_started = True
            if op.dtype.is_floating_point and op.scale and not out_dtype.is_floating_point:
                value_scale = 1.0 / 255.0
            elif op.dtype == torch.uint8 and out_dtype.is_floating_point:
                raise UnsupportedPipeline("converting back to uint8 after a float conversion")
            out_dtype = op.dtype
        elif isinstance(op, specs.Normalize):
            value_started = True
            if len(op.mean) not in (1, channels) or len(op.std) not in (1, channels):
                raise UnsupportedPipeline(f"{op} does not match {channels} channels")
            if not out_dtype.is_floating_point:  # like ToTensor before Normalize
                value_scale, out_dtype = 1.0 / 255.0, torch.float32
            if mean != (0.0,) * channels or std != (1.0,) * channels:
                raise UnsupportedPipeline("two Normalize ops do not fuse into one")
            mean = tuple(op.mean) * (channels // len(op.mean))
            std = tuple(op.std) * (channels // len(op.std))
        else:
            raise UnsupportedPipeline(f"{op!r} has no native equivalent")

    # One fused pass resamples once, so with one filter.
    resamplers = [op for op in geometry if isinstance(op, (specs.RandomResizedCrop, specs.Resize))]
    for op in resamplers:
        if not specs.has_native_filter(op.interpolation):
            raise UnsupportedPipeline(f"{type(op).__name__}(interpolation={op.interpolation!r}) has no native "
                                      f"filter (native: {', '.join(specs.native_interpolations())})")
        if not op.antialias and op.interpolation == "bicubic":
            raise UnsupportedPipeline(f"{type(op).__name__}(interpolation='bicubic', antialias=False) has no native "
                                      f"filter (bicubic is native with antialias only)")
    modes = sorted({specs.resampling_filter(op) for op in resamplers})
    if len(modes) > 1:
        raise UnsupportedPipeline(f"resizes with different interpolations ({' and '.join(modes)}) do not fuse: "
                                  f"the fused pass resamples once, with one filter")
    interpolation = modes[0] if modes else "bilinear"
    fields = dict(interpolation=interpolation, flip_p=flip_p, flip_v_p=flip_v_p, value_scale=value_scale,
                  mean=list(mean), std=list(std), channels=channels, dct_scaling=dct_scaling,
                  max_pixels=max_pixels, seed=seed)
    if jitter is not None:
        fields["jitter"] = _jitter_ranges(jitter)
        fields["jitter_p"] = jitter.p
    fields["grayscale_p"] = grayscale_p
    if erasing is not None and erasing.p > 0:
        fill = erasing.fill(channels)
        fields.update(erase_p=float(erasing.p), erase_scale_min=erasing.scale[0], erase_scale_max=erasing.scale[1],
                      erase_ratio_min=erasing.ratio[0], erase_ratio_max=erasing.ratio[1],
                      erase_value=fill or [0.0], erase_random=0 if fill else (2 if erasing.per_channel else 1))
    kinds = [type(op) for op in geometry]
    if kinds == [specs.RandomResizedCrop]:
        (crop,) = geometry
        fields.update(geometry="RANDOM_RESIZED_CROP", out_size=crop.size, scale_min=crop.scale[0],
                      scale_max=crop.scale[1], ratio_min=crop.ratio[0], ratio_max=crop.ratio[1])
    elif kinds == [specs.RandomCrop]:
        (crop,) = geometry
        left, top, right, bottom = crop.padding or (0, 0, 0, 0)
        fields.update(geometry="RANDOM_CROP", out_size=crop.size, pad_top=top, pad_left=left, pad_bottom=bottom,
                      pad_right=right, pad_if_needed=bool(crop.pad_if_needed))
        if crop.pads:
            fields.update(_random_crop_padding(crop, channels))
    elif kinds in ([specs.Resize, specs.CenterCrop], [specs.CenterCrop], [specs.Resize]):
        fields.update(geometry="RESIZE_CENTER_CROP")
        resize = geometry[0] if kinds[0] is specs.Resize else None
        crop = geometry[-1] if kinds[-1] is specs.CenterCrop else None
        if resize is not None:
            if isinstance(resize.size, int):
                fields.update(resize_short=resize.size, max_size=resize.max_size or -1)
            else:
                fields.update(resize_height=resize.size[0], resize_width=resize.size[1])
        if crop is not None:
            fields.update(out_size=crop.size)
        elif isinstance(resize.size, int):
            raise UnsupportedPipeline(
                f"{resize} alone gives a different size per image; add a CenterCrop or give (height, width)"
            )
        else:
            fields.update(out_size=resize.size)
    elif not kinds:
        raise UnsupportedPipeline("no crop or resize: images of different sizes cannot be batched")
    elif specs.RandomCrop in kinds and any(k in (specs.Resize, specs.RandomResizedCrop) for k in kinds):
        names = " -> ".join(k.__name__ for k in kinds)
        raise UnsupportedPipeline(f"geometry {names} does not fuse: the fused pass resamples the decoded image "
                                  f"once, and a resize after RandomCrop resamples the padded crop (its filter "
                                  f"reads the padding, its taps clamp at the crop's edges)")
    else:
        names = " -> ".join(k.__name__ for k in kinds)
        raise UnsupportedPipeline(f"geometry {names} does not fuse into one crop-resize")
    if blur is not None:
        out_height, out_width = fields["out_size"]
        kx, ky = blur.kernel_size
        if kx // 2 >= out_width or ky // 2 >= out_height:
            # torchvision's reflect padding raises on every sample: the generic path does too.
            raise UnsupportedPipeline(f"{blur} on the {out_height}x{out_width} output: its reflect padding "
                                      f"(kernel_size // 2) reaches past the image, which torchvision refuses")
        most = _engine(blur).BLUR_MAX_KERNEL
        if max(kx, ky) > most:
            raise UnsupportedPipeline(f"{blur}: native kernels reach {most} pixels")
        if interpolation == "nearest" and resamplers:
            raise UnsupportedPipeline(f"{blur} after a nearest resize does not fuse (native: bilinear, bicubic)")
        fields.update(blur_kernel_x=kx, blur_kernel_y=ky, blur_sigma_min=blur.sigma[0],
                      blur_sigma_max=blur.sigma[1], blur_p=blur.p)
    nearest_resize = interpolation == "nearest" and bool(resamplers)
    if isinstance(augment, autoaugment.AugMix):
        fields.update(_augmix_fields(augment, fields["out_size"], nearest_resize))
    elif augment is not None and augment.ops_per_sample > 0:  # RandAugment(num_ops=0) does nothing
        fields.update(_augment_fields(augment, fields["out_size"], channels, nearest_resize))
    return Fusion(fields, " -> ".join(type(op).__name__ for op in ops), dtype or out_dtype)
