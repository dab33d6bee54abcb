"""The colour specs (fastload/augment/color.py: ColorJitter, Grayscale, RandomErasing)
refuse what torchvision refuses, with its exception types and messages, and hold the
ranges torchvision holds. The ops and samplers behind them: tests/ops/test_color.py."""

from __future__ import annotations

import warnings

import pytest
import torch
from PIL import Image

from fastload.augment import color

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402


# ---- spec validation: torchvision's exception types and messages --------------------------

BAD_ARGUMENTS = [
    ("ColorJitter", dict(brightness=-0.1)),
    ("ColorJitter", dict(contrast=-1)),
    ("ColorJitter", dict(saturation=(1.5, 0.5))),
    ("ColorJitter", dict(brightness=(-0.5, 1.0))),
    ("ColorJitter", dict(hue=0.6)),
    ("ColorJitter", dict(hue=-0.1)),
    ("ColorJitter", dict(hue=(-0.6, 0.2))),
    ("ColorJitter", dict(hue=(0.3, 0.1))),
    ("ColorJitter", dict(brightness=(0.1, 0.2, 0.3))),
    ("ColorJitter", dict(contrast="strong")),
    ("RandomErasing", dict(value="noise")),
    ("RandomErasing", dict(value=object())),
    ("RandomErasing", dict(scale=0.5)),
    ("RandomErasing", dict(ratio=None)),
    ("RandomErasing", dict(scale=(-0.1, 0.3))),
    ("RandomErasing", dict(scale=(0.1, 1.3))),
    ("RandomErasing", dict(p=1.5)),
    ("RandomErasing", dict(p=-0.01)),
]


@pytest.mark.parametrize("name, kwargs", BAD_ARGUMENTS)
def test_specs_refuse_bad_arguments_in_torchvisions_words(name, kwargs):
    with pytest.raises(Exception) as want:
        getattr(T, name)(**kwargs)
    with pytest.raises(type(want.value)) as got:
        getattr(color, name)(**kwargs)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def test_grayscale_refuses_a_channel_count_as_torchvision_does_on_its_first_image():
    with pytest.raises(ValueError) as want:
        T.Grayscale(num_output_channels=2)(Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError) as got:
        color.Grayscale(num_output_channels=2)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("kwargs", [dict(scale=(0.3, 0.1)), dict(ratio=(3.0, 0.5))])
def test_erasing_decreasing_range_warns_and_fails_as_torchvision_does_on_its_first_image(kwargs):
    with pytest.warns(UserWarning, match=r"Scale and ratio should be of kind \(min, max\)"):
        transform = T.RandomErasing(p=1.0, **kwargs)
    with pytest.raises(RuntimeError) as want:
        transform(torch.zeros(3, 8, 8))
    with pytest.warns(UserWarning, match=r"Scale and ratio should be of kind \(min, max\)"):
        with pytest.raises(RuntimeError) as got:
            color.RandomErasing(p=1.0, **kwargs)
    # torch's message formats the floats its own way (float32 log ratio): same words.
    assert str(got.value).split(",")[0] == str(want.value).split(",")[0]


def test_erasing_refuses_a_per_channel_value_of_the_wrong_length_like_torchvision():
    with pytest.raises(ValueError) as want:
        T.RandomErasing(p=1.0, value=(1.0, 2.0))(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError) as got:
        color.RandomErasing(p=1.0, value=(1.0, 2.0)).fill(3)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(brightness=0.4, contrast=0.4, saturation=0.4), dict(brightness=(0.5, 1.5), hue=0.5),
     dict(brightness=2.0, hue=(-0.2, 0.0)), dict(contrast=(1, 1), hue=(0, 0)), dict(saturation=[0.0, 0.0])],
)
def test_jitter_spec_holds_torchvisions_ranges(kwargs):
    want, got = T.ColorJitter(**kwargs), color.ColorJitter(**kwargs)
    for name in color._OPS:
        assert getattr(got, name) == getattr(want, name), name
    assert color.ColorJitter(**{n: getattr(got, n) for n in color._OPS}) == got  # ranges round-trip


def test_erasing_spec_accepts_what_torchvision_accepts():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kwargs in (dict(), dict(p=0.25, value="random"), dict(value=(0.1, 0.2, 0.3)), dict(scale=[0.1, 0.1])):
            T.RandomErasing(**kwargs)
            assert color.RandomErasing(**kwargs).p == kwargs.get("p", 0.5)
