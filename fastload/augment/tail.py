"""The Python tail of a hybrid pipeline: the user's transforms after the native prefix.

A transform list such as [RandomResizedCrop(224), RandomHorizontalFlip(),
TrivialAugmentWide(), ToTensor(), Normalize(m, s)] is cut (fastload.augment.split) at its
first transform without a native equivalent. The engine runs the prefix (decode the crop
window, resize, flip) into a uint8 batch; the tail runs per sample in Python, exactly as
the user wrote it, on what torchvision would have handed it at that point:

- "pil" (the default, when the prefix made no tensor): a PIL image (RGB, or L for one
  channel) of the prefix's uint8 output. torchvision v1 and v2 transforms, ToTensor
  included, then see the very type, dtype and values they see after the same prefix on
  torchvision's own path;
- "tensor": the prefix's uint8 [C, H, W] tensor itself (no PIL round trip). v2 transforms
  accept it; some behave slightly differently on tensors than on PIL images (torchvision
  documents it), and ToTensor / PILToTensor do not convert tensors, so a tail with those
  is refused (`reason_not_runnable`); loader.path then says "python [...] on uint8
  tensors". Measured (benchmarks/hybrid_tail.py --compare and a per-op run: 24
  ImageNet-like 224x224 images, each op of TrivialAugmentWide at two magnitudes, same
  draws): with NEAREST (the transforms' default) the geometric ops and Brightness,
  Posterize, Solarize, Equalize are identical, Rotate differs at ~0.1 % of pixels,
  Color/Contrast/Sharpness/AutoContrast by at most 1-2 levels (float blends truncate
  where PIL rounds); with BILINEAR (the reference presets) Shear and Rotate also differ
  by ~0.5 level on average, with a few edge pixels far apart (~0.5 % over 1 level).
  Whole transforms: TrivialAugmentWide / RandAugment / AutoAugment mean |diff| 0.03-0.3
  levels; AugMix identical (it converts PIL images to tensors itself). Not material for
  augmentation, but not torchvision's PIL values either: "pil" stays the default;
- when the prefix itself ends in a tensor (a ToTensor, ToImage, ToDtype or Normalize
  before the first Python transform), the tail receives that tensor ([C, H, W], the plan's
  dtype), as on torchvision's path.

Randomness: torchvision transforms draw from the process's global generators (torch,
Python's `random`, numpy). Where the tail runs on one thread, each sample's tail runs with
those generators seeded from sample_seed(plan seed, epoch, index), and the caller's
generator states are restored afterwards (`GlobalDraws`): the draws are reproducible, the
same whatever the batch size or thread count, equal to the generic twin's, and resumable
mid-epoch. Generators are process-global, so tails run concurrently on several threads
cannot be seeded per sample without a race: their draws are not reproducible (as torch's
own worker draws are not across worker counts).
"""

from __future__ import annotations

import random
import threading
import types
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

# What the tail may receive when the prefix made no tensor (see the module docstring).
TAIL_INPUTS = ("pil", "tensor")
# torchvision transforms (v1 and v2) after which torchvision's image is a tensor.
_MAKES_TENSOR = ("ToTensor", "PILToTensor", "ToImage", "ConvertImageDtype", "ToDtype", "Normalize")
# torchvision transforms that do not convert a tensor (v1 refuses one, v2 passes it through
# unchanged): a "tensor" tail containing one would differ from torchvision's output.
_NEEDS_PIL = ("ToTensor", "PILToTensor")
_MASK64 = (1 << 64) - 1


def flatten(transforms: Sequence[Any]) -> List[Any]:
    """The transforms with torchvision Compose (v1 and v2) opened, recursively: a Compose
    only calls its transforms in order, so the cut may fall inside one."""
    out: List[Any] = []
    for transform in transforms:
        if type(transform).__module__.startswith("torchvision.") and type(transform).__name__ == "Compose":
            out.extend(flatten(transform.transforms))
        else:
            out.append(transform)
    return out


def makes_tensor(transform: Any) -> bool:
    """True when torchvision's image is a tensor after `transform` (a torchvision
    transform, or a fastload spec: ToDtype and Normalize write tensors)."""
    from fastload.augment import specs

    if isinstance(transform, (specs.ToDtype, specs.Normalize)):
        return True
    return type(transform).__module__.startswith("torchvision.") and type(transform).__name__ in _MAKES_TENSOR


def name_of(transform: Any) -> str:
    """A transform's short name for loader.path: its class name, a function's name."""
    if isinstance(transform, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return transform.__name__
    return type(transform).__name__


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for one sample's tail: a pure function of (seed, epoch, index)
    (splitmix64 over the three), so neighbouring samples get unrelated streams."""
    state = 0
    for value in (seed, epoch, index):
        state = (state + (int(value) & _MASK64) + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        state = z ^ (z >> 31)
    return state >> 1


class GlobalDraws:
    """Seeds the global generators (torch CPU, Python's random, numpy's legacy one) per
    sample inside the block, and restores the caller's states when it ends, so a training
    loop's own draws on this thread are not moved. Not thread-safe: the generators are
    process-global (use it only where one thread draws).

    Example:
        >>> import torch
        >>> with GlobalDraws() as draws:
        ...     draws.seed(7); a = torch.rand(1)
        ...     draws.seed(7); b = torch.rand(1)
        >>> bool(a == b)
        True
    """

    def __enter__(self) -> "GlobalDraws":
        self._torch = torch.get_rng_state()
        self._random = random.getstate()
        self._numpy = np.random.get_state()
        return self

    @staticmethod
    def seed(seed: int) -> None:
        """Seeds the three generators for one sample."""
        # The CPU generator only (what transforms of host images draw from): torch.manual_seed
        # also queues a lazy CUDA seeding with a formatted stack, milliseconds per call
        # (benchmarks/RESULTS.md, "Small costs behind choices in the hybrid tail").
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)

    def __exit__(self, *exc: Any) -> None:
        torch.set_rng_state(self._torch)
        random.setstate(self._random)
        np.random.set_state(self._numpy)


# ---- the conversion to a tensor, run without torchvision's per-call overhead -------------
#
# Most tails end in a conversion: [TrivialAugmentWide, PILToTensor, ConvertImageDtype,
# Normalize] or [AugMix, ToTensor, Normalize]. torchvision runs it per sample through
# Python-level checks and fresh tensors, then default_collate copies every sample into the
# batch: on 224x224 images more than the augmentation costs (benchmarks/RESULTS.md, "Small
# costs behind choices in the hybrid tail"). The same element-wise steps (the same torch
# calls, so the same float32 values, bit for bit) run here straight into the batch's slot.

# A conversion run starts with one of these: (makes float32, divides by 255 as v1 does).
_CONVERTERS = {"ToTensor": True, "PILToTensor": False, "MaybeToTensor": True, "MaybePILToTensor": False}


def _is_class(transform: Any, module: str, names: Any) -> bool:
    kind = type(transform)
    return kind.__module__.startswith(module) and kind.__name__ in names


class Conversion:
    """Steps that turn a PIL image into the tensor a run of
    torchvision conversion transforms would make, written into a given tensor.

    `Conversion.find(transforms)` gives (begin, end, Conversion) for the first run in a
    tail: a ToTensor / PILToTensor (v1 or v2, timm's MaybeToTensor / MaybePILToTensor)
    after at least one other transform, then any ConvertImageDtype(float32),
    ToDtype(float32) and Normalize that follow. Anything else ends the run.

    Example:
        >>> import torch
        >>> from torchvision import transforms as T
        >>> begin, end, conversion = Conversion.find([T.RandomInvert(), T.ToTensor(), T.Normalize([0.5], [0.5])])
        >>> begin, end, conversion.dtype
        (1, 3, torch.float32)
        >>> out = torch.empty(1, 1, 2)
        >>> conversion.write(torch.tensor([[[0, 255]]], dtype=torch.uint8), out).tolist()  # (x / 255 - 0.5) / 0.5
        [[[-1.0, 1.0]]]
    """

    def __init__(self, dtype: torch.dtype, scale_step: Optional[Tuple[str, float]] = None,
                 normalize: Optional[Tuple[Any, Any]] = None):
        self.dtype = dtype  # uint8 (PILToTensor alone) or float32
        self.scale_step = scale_step  # ("div", 255.0) as v1 does, ("mul", 1 / 255) as v2 does, or None
        self.mean, self.std = (None, None) if normalize is None else (
            torch.as_tensor(normalize[0], dtype=torch.float32).view(-1, 1, 1),
            torch.as_tensor(normalize[1], dtype=torch.float32).view(-1, 1, 1))

    @staticmethod
    def find(transforms: Sequence[Any]) -> Optional[Tuple[int, int, "Conversion"]]:
        for begin in range(1, len(transforms)):
            first = transforms[begin]
            torchvision_converter = _is_class(first, "torchvision.transforms", _CONVERTERS) and not _is_class(
                first, "torchvision.transforms.v2", ("ToTensor",))
            if not (torchvision_converter or _is_class(first, "timm.", ("MaybeToTensor", "MaybePILToTensor"))):
                continue
            floats = _CONVERTERS[type(first).__name__]
            scale_step = ("div", 255.0) if floats else None
            normalize = None
            end = begin + 1
            for transform in transforms[begin + 1:]:
                name = type(transform).__name__
                if not _is_class(transform, "torchvision.transforms", ("ConvertImageDtype", "ToDtype", "Normalize")):
                    break
                if name == "Normalize":
                    if not floats or normalize is not None:
                        break
                    normalize = (transform.mean, transform.std)
                elif transform.dtype is not torch.float32 or floats:
                    break  # (float to float: leave it to torchvision)
                elif name == "ConvertImageDtype":
                    floats, scale_step = True, ("div", 255.0)
                else:  # v2 ToDtype
                    floats, scale_step = True, ("mul", 1.0 / 255) if transform.scale else None
                end += 1
            return begin, end, Conversion(torch.float32 if floats else torch.uint8, scale_step, normalize)
        return None

    def pixels(self, value: Any) -> Optional[torch.Tensor]:
        """A PIL image's pixels as a uint8 [C, H, W] view, or None where torchvision would
        do something else with `value` (another PIL mode, a tensor, a numpy array...)."""
        from PIL import Image

        if not isinstance(value, Image.Image) or value.mode not in ("RGB", "L"):
            return None
        hwc = np.asarray(value)  # (a copy of the pixels already: PIL hands them over as bytes)
        # numpy's transposing copy is faster than torch's uint8 -> float copy from the
        # permuted view (benchmarks/RESULTS.md, "Small costs behind choices in the hybrid
        # tail"); the float conversion then runs on contiguous memory.
        chw = hwc[None] if hwc.ndim == 2 else np.ascontiguousarray(hwc.transpose(2, 0, 1))
        return torch.from_numpy(chw) if chw.flags.writeable else torch.from_numpy(chw.copy())

    def shape_of(self, pixels: torch.Tensor) -> Optional[Tuple[int, ...]]:
        """The output shape for these pixels, or None when Normalize would not broadcast."""
        if self.mean is not None and max(self.mean.shape[0], self.std.shape[0]) not in (1, pixels.shape[0]):
            return None
        return tuple(pixels.shape)

    def write(self, pixels: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Converts uint8 [C, H, W] `pixels` into `out` ([C, H, W] of self.dtype): the
        calls torchvision makes, in its order."""
        out.copy_(pixels)
        if self.scale_step is not None:
            (out.div_ if self.scale_step[0] == "div" else out.mul_)(self.scale_step[1])
        if self.mean is not None:
            out.sub_(self.mean).div_(self.std)
        return out


class BatchSlots:
    """The batch tensor a tail's conversion writes into, made at the first converted
    sample (from `buffers`, a fastload.transfer.buffers.BatchBuffers, when given: fresh
    pages cost a page fault each); `collate` returns it once every output fits, else None
    (default_collate then)."""

    def __init__(self, size: int, buffers: Any = None):
        self.size = size
        self.tensor: Optional[torch.Tensor] = None
        self._buffers = buffers
        self._lock = threading.Lock()

    def slot(self, position: int, shape: Tuple[int, ...], dtype: torch.dtype) -> Optional[torch.Tensor]:
        with self._lock:
            if self.tensor is None:
                shape_of_batch = (self.size, *shape)
                self.tensor = torch.empty(shape_of_batch, dtype=dtype) if self._buffers is None else \
                    self._buffers.take(shape_of_batch, dtype, torch.contiguous_format)
        if tuple(self.tensor.shape[1:]) != shape or self.tensor.dtype != dtype:
            return None
        return self.tensor[position]

    def collate(self, outputs: Sequence[Any]) -> Optional[torch.Tensor]:
        """The batch, outputs not already in their slot copied in (what torch.stack in
        default_collate would make), or None when an output is not a tensor that fits."""
        batch = self.tensor
        if batch is None or len(outputs) != self.size:
            return None
        for output in outputs:
            if type(output) is not torch.Tensor or output.shape != batch.shape[1:] or output.dtype != batch.dtype:
                return None
        for position, output in enumerate(outputs):
            slot = batch[position]
            if output.data_ptr() != slot.data_ptr() or output.stride() != slot.stride():
                slot.copy_(output)
        return batch


class TailError(Exception):
    """Internal: a tail transform raised; `position` says which one."""

    def __init__(self, error: BaseException, position: int):
        super().__init__(str(error))
        self.error, self.position = error, position


class Tail:
    """The transforms after the native prefix, run per sample on the prefix's output.

    Args:
        transforms: the user's transforms from the first non-native one on, in order
            (callables: torchvision v1/v2 transforms, user functions).
        input: "pil" or "tensor": what the tail receives when the prefix made no tensor
            (see the module docstring).
        prefix_makes_tensor: the prefix ends in a tensor (a ToTensor, ToImage, ToDtype or
            Normalize in it); the tail then receives that tensor whatever `input` says.
        blockers: "<transform>: <why>" for the tail's transforms without a native
            equivalent (for loader.path).
    """

    def __init__(self, transforms: Sequence[Any], *, input: str = "pil", prefix_makes_tensor: bool = False,
                 blockers: Sequence[str] = ()):
        if input not in TAIL_INPUTS:
            raise ValueError(f"fastload: expected tail_input in {TAIL_INPUTS}, got {input!r}.")
        self.transforms: Tuple[Any, ...] = tuple(transforms)
        self.input = "tensor" if prefix_makes_tensor else input
        self.prefix_makes_tensor = bool(prefix_makes_tensor)
        self.blockers = tuple(blockers)
        # (begin, end, Conversion): transforms[begin:end] turn the PIL image into a tensor.
        self._conversion = Conversion.find(self.transforms) if self.takes_pil else None

    def __len__(self) -> int:
        return len(self.transforms)

    @property
    def description(self) -> str:
        """"TrivialAugmentWide -> ToTensor -> Normalize"."""
        return " -> ".join(name_of(t) for t in self.transforms)

    @property
    def takes_pil(self) -> bool:
        """The tail receives PIL images (the engine then writes HWC, channels_last)."""
        return self.input == "pil"

    def reason_not_runnable(self) -> Optional[str]:
        """Why this tail cannot take what the engine gives it, or None."""
        if self.takes_pil or self.prefix_makes_tensor:
            return None  # exactly what torchvision hands it
        for transform in self.transforms:
            if type(transform).__module__.startswith("torchvision.") and type(transform).__name__ in _NEEDS_PIL:
                return (f"the Python tail's {transform!r} does not convert the uint8 tensors of tail_input='tensor' "
                        "(pass tail_input='pil', or use v2.ToImage() and v2.ToDtype(torch.float32, scale=True))")
        return None

    def to_input(self, image: torch.Tensor) -> Any:
        """What the tail's first transform receives, from one prefix output [C, H, W]."""
        if not self.takes_pil:
            return image
        from PIL import Image

        pixels = image.permute(1, 2, 0).numpy()  # HWC: contiguous when the batch is channels_last
        # uint8 [H, W] is mode L, [H, W, 3] mode RGB: the modes torchvision's loader gives.
        return Image.fromarray(np.ascontiguousarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels))

    def __call__(self, image: torch.Tensor, slots: Optional[BatchSlots] = None, slot: int = 0) -> Any:
        """Runs the tail on one prefix output [C, H, W]; TailError names the transform
        that raised. The tail's conversion run (Conversion) writes into `slots`' slot
        `slot` when given, else into a tensor of its own."""
        value = self.to_input(image)
        run = self._conversion
        at = 0
        while at < len(self.transforms):
            if run is not None and at == run[0]:
                converted = self._convert(run[2], value, slots, slot)
                if converted is not None:
                    value, at = converted, run[1]
                    continue
            try:
                value = self.transforms[at](value)
            except Exception as error:
                raise TailError(error, at) from error
            at += 1
        return value

    @staticmethod
    def _convert(conversion: Conversion, value: Any, slots: Optional[BatchSlots], slot: int) -> Optional[torch.Tensor]:
        """The conversion run's output for `value`, or None: torchvision's transforms then run."""
        pixels = conversion.pixels(value)
        shape = None if pixels is None else conversion.shape_of(pixels)
        if shape is None:
            return None
        out = slots.slot(slot, shape, conversion.dtype) if slots is not None else None
        return conversion.write(pixels, torch.empty(shape, dtype=conversion.dtype) if out is None else out)

    def note(self, error: TailError, index: int, source: Optional[str]) -> str:
        """The note a raised tail error gets: the transform, the sample, its file."""
        where = f"sample {index}" + (f", {source}" if source else "")
        return (f"fastload: the Python transform {self.transforms[error.position]!r} (the tail's transforms"
                f"[{error.position}]) raised on {where}. Pass on_error='skip' to the loader to skip such samples.")
