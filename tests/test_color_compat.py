"""torchvision (v1, v2) and timm colour transforms -> fastload's colour specs, or the reason not."""

from __future__ import annotations

import math

import pytest
import torch

from fastload.augment import color, specs
from fastload.compat import timm as timm_compat
from fastload.compat.torchvision import NotConvertible, convert_transform, split_transform

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize("TV", [T, v2], ids=["v1", "v2"])
def test_torchvision_color_transforms_map_to_color_specs(TV):
    got = convert_transform(TV.Compose([
        TV.RandomResizedCrop(32), TV.ColorJitter(0.4, (0.5, 1.2), 0.4, 0.1), TV.RandomGrayscale(0.25),
        TV.Grayscale(3), TV.ColorJitter(brightness=0.3)]))
    assert got == [specs.RandomResizedCrop(32), color.ColorJitter((0.6, 1.4), (0.5, 1.2), (0.6, 1.4), (-0.1, 0.1)),
                   color.RandomGrayscale(0.25), color.Grayscale(3), color.ColorJitter(brightness=(0.7, 1.3),
                                                                                      contrast=None, saturation=None,
                                                                                      hue=None)]


@pytest.mark.parametrize("TV", [T, v2], ids=["v1", "v2"])
def test_random_apply_of_one_color_jitter_maps_to_a_jitter_with_p(TV):
    got = convert_transform(TV.Compose([TV.RandomResizedCrop(32), TV.RandomApply([TV.ColorJitter(0.4, 0.4)], p=0.8)]))
    assert got == [specs.RandomResizedCrop(32),
                   color.ColorJitter((0.6, 1.4), (0.6, 1.4), None, None, p=0.8)]


@pytest.mark.parametrize("TV", [T, v2], ids=["v1", "v2"])
def test_random_apply_of_one_gaussian_blur_maps_to_a_blur_with_p(TV):
    got = convert_transform(TV.Compose([TV.RandomResizedCrop(32), TV.RandomApply([TV.GaussianBlur(5, (0.2, 1.5))],
                                                                                  p=0.3)]))
    assert got == [specs.RandomResizedCrop(32), specs.GaussianBlur((5, 5), (0.2, 1.5), p=0.3)]


@pytest.mark.parametrize("TV", [T, v2], ids=["v1", "v2"])
def test_random_apply_of_anything_else_is_a_blocker_that_says_why(TV):
    inner = [TV.ColorJitter(0.4), TV.GaussianBlur(3)]
    pipeline = split_transform(TV.Compose([TV.CenterCrop(8), TV.RandomApply(inner, p=0.5), TV.PILToTensor()]))
    assert pipeline.native == (specs.CenterCrop(8),)
    assert "single ColorJitter or GaussianBlur only (this one applies ColorJitter, GaussianBlur)" in pipeline.blockers[0]


@pytest.mark.parametrize("value, want", [(0, 0.0), ("random", "random"), ((0.1, 0.2, 0.3), (0.1, 0.2, 0.3)),
                                         (7, 7.0)])
@pytest.mark.parametrize("TV", [T, v2], ids=["v1", "v2"])
def test_torchvision_random_erasing_maps_with_its_value(TV, value, want):
    (got,) = convert_transform(TV.RandomErasing(p=0.3, scale=(0.1, 0.2), ratio=(0.5, 2.0), value=value))
    assert got == color.RandomErasing(0.3, (0.1, 0.2), (0.5, 2.0), want)


def test_grayscale_to_one_channel_is_a_blocker_with_the_fix():
    pipeline = split_transform(T.Compose([T.CenterCrop(8), T.Grayscale(), T.ToTensor()]))
    assert pipeline.native == (specs.CenterCrop(8),)
    assert "num_output_channels=3" in pipeline.blockers[0]


@pytest.mark.parametrize("make", [
    lambda m: m.ColorJitter(brightness=-0.1),
    lambda m: m.ColorJitter(hue=0.7),
    lambda m: m.ColorJitter(contrast=(1.2, 0.8)),
    lambda m: m.ColorJitter(saturation="a"),
    lambda m: m.RandomErasing(value="noise"),
    lambda m: m.RandomErasing(scale=(0.5, 1.5)),
    lambda m: m.RandomErasing(p=1.5),
    lambda m: m.RandomErasing(value={1}),
])
def test_invalid_color_arguments_get_torchvisions_own_errors(make):
    with pytest.raises((ValueError, TypeError)) as theirs:
        make(T)
    with pytest.raises(type(theirs.value)) as ours:
        make(color)
    assert str(ours.value) == str(theirs.value)


def timm_erasing(**attributes):
    """A stand-in with timm.data.random_erasing.RandomErasing's module, name and the
    attributes its __call__ reads."""
    defaults = dict(probability=0.25, min_area=0.02, max_area=1 / 3, log_aspect_ratio=(math.log(0.3),
                                                                                         math.log(1 / 0.3)),
                    mode="pixel", min_count=1, max_count=1, num_splits=0)
    defaults.update(attributes)
    cls = type("RandomErasing", (), {"__module__": "timm.data.random_erasing"})
    obj = cls()
    obj.__dict__.update(defaults)
    return obj


@pytest.mark.parametrize("mode, value, per_channel", [("pixel", "random", False), ("rand", "random", True),
                                                      ("const", 0.0, False)])
def test_timm_random_erasing_maps_by_mode(mode, value, per_channel):
    (got,) = timm_compat.leaf_specs(timm_erasing(mode=mode))
    assert (got.p, got.value, got.per_channel) == (0.25, value, per_channel)
    assert got.scale == pytest.approx((0.02, 1 / 3)) and got.ratio == pytest.approx((0.3, 1 / 0.3))


@pytest.mark.parametrize("attributes, reason", [(dict(max_count=3), "rectangles"), (dict(num_splits=2), "split"),
                                                (dict(mode="noise"), "mode")])
def test_timm_random_erasing_variants_without_native_equivalent_say_why(attributes, reason):
    with pytest.raises(NotConvertible, match=reason):
        timm_compat.leaf_specs(timm_erasing(**attributes))


def test_timm_per_channel_erasing_fuses_with_one_normal_per_channel():
    from fastload.augment.plan import fuse

    fields = fuse([specs.CenterCrop(8), specs.Normalize(MEAN, STD), *timm_compat.leaf_specs(timm_erasing(mode="rand"))]
                  ).fields
    assert fields["erase_random"] == 2 and fields["erase_p"] == 0.25
