"""Fusing transform specs (fastload's own, and torchvision's) into one native plan."""

import pytest
import torch

from fastload.augment import specs
from fastload.augment.plan import RANDOM_RESIZED_CROP, RESIZE_CENTER_CROP, UnsupportedPipeline, build_plan

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from fastload.compat.torchvision import NotConvertible, convert_transform  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def test_train_pipeline():
    plan = build_plan([specs.RandomResizedCrop(224), specs.RandomHorizontalFlip(), specs.Normalize(MEAN, STD)])
    assert plan.geometry == RANDOM_RESIZED_CROP and plan.out_size == (224, 224)
    assert plan.flip_p == 0.5 and plan.value_scale == pytest.approx(1 / 255)
    assert plan.mean == MEAN and plan.std == STD and plan.dtype == torch.float32


def test_eval_pipeline_and_dtypes():
    plan = build_plan([specs.Resize(256), specs.CenterCrop(224)])
    assert plan.geometry == RESIZE_CENTER_CROP and plan.resize_short == 256 and plan.out_size == (224, 224)
    assert plan.dtype == torch.uint8 and plan.value_scale == 1.0
    plan = build_plan([specs.Resize((100, 50)), specs.ToDtype(torch.bfloat16, scale=True)])
    assert plan.resize_size == (100, 50) and plan.out_size == (100, 50)
    assert plan.dtype == torch.bfloat16 and plan.value_scale == pytest.approx(1 / 255)
    plan = build_plan([specs.CenterCrop(8), specs.ToDtype(torch.float32, scale=False)])
    assert plan.value_scale == 1.0 and plan.dtype == torch.float32
    assert build_plan([specs.CenterCrop(8), specs.Normalize(MEAN, STD)], dtype=torch.float16).dtype == torch.float16


@pytest.mark.parametrize("ops,reason", [
    ([specs.Resize(256)], "different size per image"),
    ([], "no crop or resize"),
    ([specs.RandomResizedCrop(8), specs.CenterCrop(4)], "does not fuse"),
    ([specs.Normalize(MEAN, STD), specs.CenterCrop(4)], "pads in normalised space"),
    ([specs.CenterCrop(4), specs.RandomHorizontalFlip(), specs.RandomHorizontalFlip()], "two random flips"),
    ([specs.CenterCrop(4), "Grayscale()"], "no native equivalent"),
])
def test_unsupported_pipelines_say_why(ops, reason):
    with pytest.raises(UnsupportedPipeline, match=reason):
        build_plan(ops)


def test_spec_validation():
    with pytest.raises(ValueError, match="RandomResizedCrop: expected scale and ratio"):
        specs.RandomResizedCrop(8, scale=(1.0, 0.5))
    with pytest.raises(ValueError, match="expected a positive int"):
        specs.CenterCrop(0)
    with pytest.raises(ValueError, match="ToDtype"):
        specs.ToDtype(torch.int32)


@pytest.mark.parametrize("tv", [T, v2])
def test_torchvision_train_transforms_convert(tv):
    to_float = [tv.ToTensor()] if tv is T else [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    transform = tv.Compose([tv.RandomResizedCrop(224), tv.RandomHorizontalFlip(), *to_float, tv.Normalize(MEAN, STD)])
    plan = build_plan(convert_transform(transform))
    assert plan.geometry == RANDOM_RESIZED_CROP and plan.flip_p == 0.5 and plan.dtype == torch.float32
    assert plan.value_scale == pytest.approx(1 / 255) and plan.mean == MEAN


def test_torchvision_eval_and_uint8_transforms_convert():
    plan = build_plan(convert_transform(T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])))
    assert plan.geometry == RESIZE_CENTER_CROP and plan.resize_short == 256 and plan.dtype == torch.uint8
    plan = build_plan(convert_transform(T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor(),
                                                   T.ConvertImageDtype(torch.float32)])))
    assert plan.dtype == torch.float32 and plan.value_scale == pytest.approx(1 / 255)


@pytest.mark.parametrize("transform,reason", [
    (T.Grayscale(), "no native equivalent"),
    (T.Resize(10, interpolation=T.InterpolationMode.NEAREST), "interpolation"),
    (v2.Resize(10, antialias=False), "antialias=False"),
    (v2.ToDtype({torch.Tensor: torch.float32}), "dict of dtypes"),
])
def test_torchvision_unknown_transforms_say_why(transform, reason):
    with pytest.raises(NotConvertible, match=reason):
        convert_transform(transform)
