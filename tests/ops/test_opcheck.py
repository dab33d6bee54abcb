"""torch.library.opcheck of the colour and prepared-JPEG ops: schemas, fake kernels
(torch.compile, meta tensors) and autograd registration agree with the CPU kernels."""

from __future__ import annotations

import io
import math

import pytest
import torch
from PIL import Image

from fastload import _ext

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built")


def _jpeg(width=40, height=33) -> torch.Tensor:
    buffer = io.BytesIO()
    Image.effect_noise((width, height), 60).convert("RGB").save(buffer, "JPEG", quality=90)
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
    yield "transcode_jpeg", lambda: (fl().transcode_jpeg.default, (_jpeg(), 1))
    yield "decode_jpeg_rows", lambda: (fl().decode_jpeg_rows.default,
                                       (*torch.ops.fastload.transcode_jpeg(_jpeg(), 1), [9, 3, 12, 20], 2, 3))


CASES = dict(_cases())


@pytest.mark.parametrize("name", sorted(CASES))
def test_opcheck_of_the_op(name):
    _ext.require_ops()
    op, args = CASES[name]()
    torch.library.opcheck(op, args)
