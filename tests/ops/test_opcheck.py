"""torch.library.opcheck of the ops: schemas, fake kernels (torch.compile, meta tensors)
and autograd registration agree with the CPU kernels. The op list is the one the
extension registers (csrc/fastload.cpp): every op there has a wrapper in fastload.ops, a
fake kernel (fastload/_meta.py) and an opcheck case, here or in its family's test file."""

from __future__ import annotations

import io
import math

import pytest
import torch
from PIL import Image

from fastload import _ext, ops
from fastload.augment.autoaugment import AugMix, RandAugment

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built")


def _jpeg(width=40, height=33) -> torch.Tensor:
    buffer = io.BytesIO()
    Image.effect_noise((width, height), 60).convert("RGB").save(buffer, "JPEG", quality=90)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _png(mode="P") -> torch.Tensor:
    buffer = io.BytesIO()
    Image.effect_noise((13, 9), 60).convert(mode).save(buffer, "PNG")
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _image(dtype=torch.uint8, channels=3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    image = torch.randint(0, 256, (7, 9, channels), dtype=torch.uint8, generator=generator)
    return image if dtype == torch.uint8 else image.to(dtype) / 255


def _cases():
    fl = lambda: torch.ops.fastload  # noqa: E731  (the ops exist only once _C is loaded)
    indices = torch.arange(5)
    nan = math.nan
    yield "adjust_brightness", lambda: (fl().adjust_brightness.default, (_image(), 1.3))
    yield "adjust_contrast", lambda: (fl().adjust_contrast.default, (_image(torch.float32), 0.7))
    yield "adjust_saturation", lambda: (fl().adjust_saturation.default, (_image(), 1.8))
    yield "adjust_hue", lambda: (fl().adjust_hue.default, (_image(), -0.2))
    yield "color_jitter", lambda: (fl().color_jitter.default, (_image(), [3, 1, 0, 2], [1.2, 0.8, nan, 0.1]))
    yield "rgb_to_grayscale", lambda: (fl().rgb_to_grayscale.default, (_image(), 3))
    yield "erase", lambda: (fl().erase.default, (_image(torch.float32), [1, 2, 3, 4], [], 0, 1, 2))
    yield "color_jitter_params", lambda: (fl().color_jitter_params.default,
                                          (indices, 0, 1, [0.6, 1.4, 0.5, 1.5, 0.6, 1.4, -0.1, 0.1]))  # opcheck's comparison treats NaN (an op off) as unequal
    yield "random_grayscale_params", lambda: (fl().random_grayscale_params.default, (indices, 0, 1, 0.5))
    yield "random_erasing_params", lambda: (fl().random_erasing_params.default,
                                            (indices, 0, 1, 32, 48, 0.5, [0.02, 0.33], [0.3, 3.3]))
    yield "gaussian_blur", lambda: (fl().gaussian_blur.default, (_image(), [5, 3], 1.2))
    yield "gaussian_blur_params", lambda: (fl().gaussian_blur_params.default, (indices, 0, 1, 0.1, 2.0))  # (p < 1: NaN)
    yield "auto_augment", lambda: (fl().auto_augment.default, (_image(), [1, 11, 13], [0.3, 128.0, 0.0], [], True))
    yield "auto_augment_params", lambda: (fl().auto_augment_params.default,
                                          (indices, 0, 1, *RandAugment(num_ops=2, magnitude=9).space(7, 9), 2, 9))
    yield "augmix_step", lambda: (fl().augmix_step.default, (_image(), 3, 0.3))
    yield "augmix_params", lambda: (fl().augmix_params.default, (indices, 0, 1, *AugMix().space(7, 9), 3, 2, -1))
    yield "jpeg_header", lambda: (fl().jpeg_header.default, (_jpeg(),))
    yield "decode_png", lambda: (fl().decode_png.default, (_png(), [1, 2, 5, 6], "RGB"))
    yield "transcode_jpeg", lambda: (fl().transcode_jpeg.default, (_jpeg(), 1))
    yield "decode_jpeg_rows", lambda: (fl().decode_jpeg_rows.default,
                                       (*torch.ops.fastload.transcode_jpeg(_jpeg(), 1), [9, 3, 12, 20], 2, 3))


CASES = dict(_cases())


@pytest.mark.parametrize("name", sorted(CASES))
def test_opcheck_of_the_op(name):
    _ext.require_ops()
    if name == "decode_png" and not _ext.has_png():
        pytest.skip("fastload._C is built without libpng: decode_png raises")
    op, args = CASES[name]()
    torch.library.opcheck(op, args)


# Ops whose opcheck cases live with their family's tests (they need that file's inputs),
# or that need a GPU.
ELSEWHERE = {
    "crop_resize_flip_normalize": "tests/ops/test_crop_resize_flip_normalize.py",
    "crop_resize_flip_normalize_batch": "tests/ops/test_crop_resize_flip_normalize.py",
    "decode_jpeg": "tests/ops/test_decode_jpeg.py",
    "decode_jpeg_cuda": "a GPU (scripts/gpu_check.sh)",
}


def _registered_ops():
    _ext.require_ops()
    return sorted(name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("fastload::"))


def test_every_op_has_a_wrapper_a_fake_kernel_and_an_opcheck_case():
    from torch._library.simple_registry import singleton

    names = _registered_ops()
    assert len(names) >= 20, names
    no_case = [n for n in names if n not in CASES and n not in ELSEWHERE]
    no_fake = [n for n in names if singleton.find(f"fastload::{n}").fake_impl.kernel is None]
    no_wrapper = [n for n in names if not callable(getattr(ops, n, None))]
    assert (no_case, no_fake, no_wrapper) == ([], [], []), "ops without an opcheck case, a fake kernel, a wrapper"
    assert not set(CASES) & set(ELSEWHERE) and set(CASES) | set(ELSEWHERE) == set(names)
