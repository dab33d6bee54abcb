"""torchvision's tensor-path affine ops (ShearX, ShearY, TranslateX, TranslateY, Rotate:
_gen_affine_grid / _affine_grid, then grid_sample) are not the same bit for bit on every
CPU, so the native ops are compared with them up to the rounding ties that torch itself
resolves differently from one CPU to another, and no further.

Why: the sampling grid is a float32 bmm, which torch hands to MKL's sgemm, and MKL picks
its kernel by CPU. Its AVX2 kernel rounds (bx r00 + by r10) + r20 with each product
rounded, as the native op does (an AMD EPYC gives these grids); its AVX-512 kernel (an
Intel Xeon's) computes fma(by, r10, bx r00) + r20. MKL_ENABLE_INSTRUCTIONS=AVX2 makes a
Xeon give the AVX2 grids; ATen's own vector path (grid_sample's, ATEN_CPU_CAPABILITY)
changes nothing. The two grids differ by an ulp here and there, and a shear's coordinates
lie on .5 ties by construction (magnitude 0.2 or 1/15 on half-integer rows): an ulp to
either side of x.5 picks the other nearest neighbour (up to 255 levels apart), or rounds
a bilinear value at v.5 the other way (one level). In float64 those coordinates are
within 2e-7 pixel of the tie, and the float64 side is the native op's at about half of
them and torch's at about half: neither is the right one.

The criterion: where the native result differs from torch's, it must be what
torchvision's own op gives, run in float64 (its own matrix and grid), at a sampling
coordinate within EPS pixel of the float64 one: for nearest the pixel (or the zero
outside) at one of the neighbours of a tie, for bilinear either rounding of a value that
lies within a few hundredths of a level of v.5. Everything else is compared exactly: a
wrong magnitude (even by 1e-4 of it), direction or centre moves coordinates by far more
than EPS and fails.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, List

import torch
import torch.nn.functional as nnf

# A float32 coordinate under 128 is within a few ulps (7.6e-6 at most) of the float64 one;
# the coordinates torch and the native op round differently are within 2e-7 of a tie.
EPS = 1e-4
# A bilinear value's own float32 rounding (four products under 255, summed): far under this.
VALUE_SLACK = 1e-3

AFFINE_OPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


@contextlib.contextmanager
def captured_grids() -> Iterator[List[torch.Tensor]]:
    """The sampling grids torchvision's tensor kernels (v1 and v2) pass to grid_sample."""
    import torchvision.transforms._functional_tensor as v1_kernels
    import torchvision.transforms.v2.functional._geometry as v2_kernels

    grids: List[torch.Tensor] = []
    originals = [(module, module.grid_sample) for module in (v1_kernels, v2_kernels)]

    def recording(original):
        def grid_sample(img, grid, *args, **kwargs):
            grids.append(grid.detach().clone())
            return original(img, grid, *args, **kwargs)
        return grid_sample

    for module, original in originals:
        module.grid_sample = recording(original)
    try:
        yield grids
    finally:
        for module, original in originals:
            module.grid_sample = original


def _admissible(result: torch.Tensor, candidates: torch.Tensor, low: torch.Tensor,
                high: torch.Tensor, nearest: bool) -> torch.Tensor:
    """[H, W]: where result ([C, H, W]) is one of the values allowed there."""
    if nearest:  # a whole pixel: one of the candidate neighbours, every channel
        return (candidates == result.double().unsqueeze(0)).all(1).any(0)
    value = result.double()
    return ((value >= low) & (value <= high)).all(0)


def inadmissible(got: torch.Tensor, want: torch.Tensor, op: Callable[[torch.Tensor], torch.Tensor],
                 image: torch.Tensor, nearest: bool) -> int:
    """How many pixels of got, a native result ([C, H, W] or [N, C, H, W] uint8, as want,
    torchvision's result of op on image on this CPU), are neither torch's nor what torch's
    op gives, in float64, at a coordinate within EPS of the float64 one. Raises when torch's
    own result is not admissible either (then the criterion, not the op, is wrong)."""
    if torch.equal(got, want):
        return 0
    with captured_grids() as grids:
        op(image.to(torch.float64))
    assert grids and grids[-1].dtype == torch.float64, "torchvision no longer samples in float64"
    grid = grids[-1][:1]
    source = image.reshape(-1, *image.shape[-3:]).to(torch.float64)
    height, width = source.shape[-2:]
    mode = "nearest" if nearest else "bilinear"
    samples = []
    for dx in (-EPS, 0.0, EPS):
        for dy in (-EPS, 0.0, EPS):  # grid units: 2 / size a pixel
            shift = torch.tensor([dx * 2 / width, dy * 2 / height], dtype=torch.float64)
            shifted = (grid + shift).expand(source.shape[0], -1, -1, -1)
            samples.append(nnf.grid_sample(source, shifted, mode=mode, padding_mode="zeros",
                                           align_corners=False))
    samples = torch.stack(samples, 1)  # [N, 9, C, H, W]
    # bilinear: the integers a float32 rounding of a value in [min, max] can give
    low = torch.ceil(samples.amin(1) - 0.5 - VALUE_SLACK)
    high = torch.floor(samples.amax(1) + 0.5 + VALUE_SLACK)
    got_n, want_n = got.reshape(source.shape), want.reshape(source.shape)
    bad = 0
    for n in range(source.shape[0]):
        differ = (got_n[n] != want_n[n]).any(0)
        torch_ok = _admissible(want_n[n], samples[n], low[n], high[n], nearest)
        assert torch_ok.all(), f"torch's own result is off at {int((~torch_ok).sum())} pixels"
        bad += int((differ & ~_admissible(got_n[n], samples[n], low[n], high[n], nearest)).sum())
    return bad


def native_step_chw(image: torch.Tensor, name: str, magnitude: float,
                    nearest: bool) -> torch.Tensor:
    """fastload's augmix_step on a uint8 [..., C, H, W] tensor (each image of a batch)."""
    from fastload import ops as fl_ops
    from fastload.augment.autoaugment import OPS

    flat = image.reshape(-1, *image.shape[-3:])
    op = OPS.index(name)
    out = [fl_ops.augmix_step(x.permute(1, 2, 0).contiguous(), op, float(magnitude), not nearest)
           .permute(2, 0, 1) for x in flat]
    return torch.stack(out).reshape(image.shape).contiguous()


@contextlib.contextmanager
def native_ties(owner, attribute: str, *, method: bool = False) -> Iterator[None]:
    """Within: owner.attribute, torchvision's op function (img, name, magnitude,
    interpolation, fill) -- or method of that signature -- gives, for an affine op, the
    native op's result, after checking that it is torch's up to the ties above. A chain
    of ops and its mix then follow one resolution of the ties (the native op's) and can be
    compared bit for bit; every affine step is still checked against torch's."""
    original = getattr(owner, attribute)

    def step(call, img, name, magnitude, interpolation, fill):
        want = call(img, name, magnitude, interpolation, fill)
        if name not in AFFINE_OPS:
            return want
        nearest = str(getattr(interpolation, "value", interpolation)) == "nearest"
        got = native_step_chw(img.as_subclass(torch.Tensor), name, magnitude, nearest)
        bad = inadmissible(got, want.as_subclass(torch.Tensor),
                           lambda x: call(x, name, magnitude, interpolation, fill), img, nearest)
        assert bad == 0, f"{name} {magnitude}: {bad} pixels off torch's, beyond its CPU's ties"
        return got if type(want) is torch.Tensor else got.as_subclass(type(want))

    if method:
        def patched(self, img, name, magnitude, interpolation, fill):
            return step(lambda *a: original(self, *a), img, name, magnitude, interpolation, fill)
    else:
        def patched(img, name, magnitude, interpolation, fill):
            return step(original, img, name, magnitude, interpolation, fill)
    setattr(owner, attribute, patched)
    try:
        yield
    finally:
        setattr(owner, attribute, original)
