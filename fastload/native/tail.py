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
        # also queues a lazy CUDA seeding with a formatted stack, ~5 ms per call.
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)

    def __exit__(self, *exc: Any) -> None:
        torch.set_rng_state(self._torch)
        random.setstate(self._random)
        np.random.set_state(self._numpy)


class _TailError(Exception):
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

    def __call__(self, image: torch.Tensor) -> Any:
        """Runs the tail on one prefix output [C, H, W]; _TailError names the transform that raised."""
        value = self.to_input(image)
        for position, transform in enumerate(self.transforms):
            try:
                value = transform(value)
            except Exception as error:
                raise _TailError(error, position) from error
        return value

    def note(self, error: _TailError, index: int, source: Optional[str]) -> str:
        """The note a raised tail error gets: the transform, the sample, its file."""
        where = f"sample {index}" + (f", {source}" if source else "")
        return (f"fastload: the Python transform {self.transforms[error.position]!r} (the tail's transforms"
                f"[{error.position}]) raised on {where}. Pass on_error='skip' to the loader to skip such samples.")
