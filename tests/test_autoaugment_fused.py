"""TrivialAugmentWide, RandAugment, AutoAugment and AugMix (v1 and v2) in the fused pass and the loader:
the engine against torchvision with the engine's draws and against the plan's twin, what
fuses and what does not (with the reason), the plan's checks and the specs' argument
errors. The ops, their spaces and their samplers on their own: tests/ops/test_autoaugment.py and
tests/ops/test_autoaugment_policy.py (AutoAugment).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
from affine_ties import native_ties
from fastload import _ext
from fastload import ops as fl_ops
from fastload.augment import autoaugment, specs
from fastload.augment.autoaugment import OPS, AutoAugment, RandAugment, TrivialAugmentWide
from fastload.augment.plan import build_plan, fuse
from fastload.errors import UnsupportedPipeline

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402
from torchvision.transforms import autoaugment as tv_autoaugment  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
OUT = 40


# ---- the fused pass --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(make_image_folder):
    # At most 75x87 pixels: crops stay under twice the output size (no DCT scaling), so
    # the engine decodes what PIL decodes.
    return make_image_folder(classes=2, per_class=8, size=(60, 70))


def torchvision_with_engine_draws(path, plan, spec, epoch, index, augment=None):
    """torchvision's PIL pipeline on one file with the engine's crop, flip and ops: uint8 [C, h, w];
    the ops' interpolation, fill and v1/v2 kernels the torchvision transform `augment`'s
    (else the plan's)."""
    core = _ext.require_ops()
    image = Image.open(path).convert("RGB")
    (top, left, height, width), _, flip = core.region_of(plan, image.height, image.width, epoch, index)
    image = F.resized_crop(image, int(top), int(left), int(height), int(width), list(plan.out_size),
                           T.InterpolationMode.BILINEAR, antialias=True)
    if flip:
        image = F.hflip(image)
    ops, magnitudes = spec.params(torch.tensor([index]), plan.seed, epoch, *plan.out_size)
    interpolation = T.InterpolationMode.BILINEAR if plan.augment_bilinear else T.InterpolationMode.NEAREST
    fill = [int(f) for f in plan.augment_fill] or None
    is_v2 = spec.v2
    if augment is not None:
        is_v2 = type(augment).__module__.startswith("torchvision.transforms.v2")
        interpolation = augment.interpolation
        fill = None if is_v2 else augment.fill
    for op, m in zip(ops[0].tolist(), magnitudes[0].tolist()):
        if op < 0:  # an AutoAugment op not applied
            continue
        given = m / 255.0 if is_v2 and OPS[op] == "Solarize" else m
        if is_v2:
            fills = augment._fill if augment is not None else v2.TrivialAugmentWide(fill=fill)._fill
            image = v2.TrivialAugmentWide()._apply_image_or_video_transform(image, OPS[op], given, interpolation,
                                                                            fills)
        else:
            image = tv_autoaugment._apply_op(image, OPS[op], given, interpolation, fill)
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


@pytest.mark.parametrize("make", [
    lambda: T.TrivialAugmentWide(),
    lambda: T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR, fill=[20, 40, 60]),
    lambda: v2.TrivialAugmentWide(),
    lambda: T.RandAugment(interpolation=T.InterpolationMode.BILINEAR),
    lambda: v2.RandAugment(num_ops=3, magnitude=12, fill=128),
], ids=["ta", "ta-bilinear-fill", "ta-v2", "ra-bilinear", "ra-v2-fill"])
def test_the_loader_runs_it_natively_as_torchvision_with_the_engines_draws(root, make):
    from fastload.compat.torchvision import convert_transform

    augment = make()
    api = v2 if type(augment).__module__.startswith("torchvision.transforms.v2") else T
    transform = api.Compose([api.RandomResizedCrop(OUT), api.RandomHorizontalFlip(), augment, api.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=False)
    images = torch.cat([batch for batch, _ in loader])
    assert loader.path.startswith("native"), loader.path
    native = convert_transform(transform)
    plan = build_plan(native, seed=loader.state_dict()["native_seed"])
    spec = native[2]
    for i, (path, _) in enumerate(dataset.samples):
        assert torch.equal(images[i], torchvision_with_engine_draws(path, plan, spec, 0, i)), f"sample {i}"


def test_the_fused_recipe_equals_the_twin_with_normalize_and_erasing(root):
    """torchvision's reference recipe (ta_wide, random_erase 0.1), float32: the engine
    against the plan's twin (PIL-exact resample, torchvision's own ops, the value map)."""
    from fastload.augment.pipeline import apply_plan_reference
    from fastload.bench.recipes import ClassificationPresetTrain

    dataset = ImageFolder(root, transform=ClassificationPresetTrain(crop_size=OUT, auto_augment_policy="ta_wide",
                                                                    random_erase_prob=0.5))
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=False)
    images = torch.cat([batch for batch, _ in loader])
    assert loader.path.startswith("native"), loader.path
    assert images.dtype == torch.float32 and images.shape[1:] == (3, OUT, OUT)
    from fastload.adapters import convert_native as convert_dataset_native

    _, native = convert_dataset_native(dataset)
    plan = build_plan(native, seed=loader.state_dict()["native_seed"])
    for i, (path, _) in enumerate(dataset.samples):
        with open(path, "rb") as f:
            pixels = fl_ops.decode_jpeg(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
        torch.testing.assert_close(images[i], apply_plan_reference(plan, pixels, epoch=0, index=i), rtol=1e-5,
                                   atol=1e-5)


# ---- what fuses, what does not ----------------------------------------------------------------


def test_it_fuses_as_the_last_op_of_the_uint8_stage():
    fields = fuse([specs.RandomResizedCrop(32), specs.RandomHorizontalFlip(), TrivialAugmentWide(fill=(1, 2, 3)),
                   specs.ToDtype(torch.float32, scale=True), specs.Normalize(MEAN, STD)]).fields
    assert len(fields["augment_ops"]) == 14 and len(fields["augment_magnitudes"]) == 14 * 31
    assert (fields["augment_num_ops"], fields["augment_magnitude_bin"], fields["augment_fill"]) == (1, -1, [1, 2, 3])
    assert fields["augment_bilinear"] is False
    ra = fuse([specs.CenterCrop(16), RandAugment(num_ops=4, magnitude=3, interpolation="bilinear")]).fields
    assert (ra["augment_num_ops"], ra["augment_magnitude_bin"], ra["augment_bilinear"]) == (4, 3, True)
    assert "augment_ops" not in fuse([specs.CenterCrop(16), RandAugment(num_ops=0)]).fields  # does nothing
    build_plan([specs.CenterCrop(16), RandAugment()]).validate()


@pytest.mark.parametrize("ops, reason", [
    ([specs.CenterCrop(16), specs.ToDtype(torch.float32, scale=True), TrivialAugmentWide()], "tensor path"),
    ([TrivialAugmentWide(), specs.CenterCrop(16)], "before the crop/resize"),
    ([specs.CenterCrop(16), TrivialAugmentWide(), fastload.transforms.ColorJitter(0.4)], "after TrivialAugmentWide"),
    ([specs.CenterCrop(16), RandAugment(), specs.RandomHorizontalFlip()], "after RandAugment"),
    ([specs.CenterCrop(16), TrivialAugmentWide(), RandAugment()], "after TrivialAugmentWide"),
    ([specs.CenterCrop(16), TrivialAugmentWide(interpolation="bicubic")], "NEAREST and BILINEAR"),
    ([specs.CenterCrop(16), TrivialAugmentWide(1)], "num_magnitude_bins >= 2"),
    ([specs.CenterCrop(16), RandAugment(magnitude=31)], "outside its 31 bins"),
    ([specs.CenterCrop(16), RandAugment(num_ops=9)], "at most 8 ops"),
    ([specs.RandomResizedCrop(16, interpolation="nearest"), TrivialAugmentWide()], "nearest resize"),
    ([specs.CenterCrop(16), TrivialAugmentWide(fill=(1, 2))], "fill"),
])
def test_what_does_not_fuse_says_why(ops, reason):
    with pytest.raises(UnsupportedPipeline, match=reason):
        fuse(ops)


def test_a_loader_cuts_before_an_augment_that_does_not_fuse_and_runs_it_in_python(root):
    transform = T.Compose([T.RandomResizedCrop(OUT), T.TrivialAugmentWide(), T.ColorJitter(0.3), T.PILToTensor()])
    loader = fastload.DataLoader(ImageFolder(root, transform=transform), batch_size=4)
    assert loader.path.startswith("hybrid: native [RandomResizedCrop -> TrivialAugmentWide] + python [ColorJitter"), \
        loader.path
    bicubic = T.Compose([T.RandomResizedCrop(OUT), T.RandAugment(interpolation=T.InterpolationMode.BICUBIC),
                         T.PILToTensor()])
    path = fastload.DataLoader(ImageFolder(root, transform=bicubic), batch_size=4).path
    assert path.startswith("hybrid: native [RandomResizedCrop] + python [RandAugment") and "BICUBIC" in path, path


@pytest.mark.parametrize("fields, match", [
    (dict(augment_ops=[0, 15], augment_magnitudes=[0.0, 0.0]), r"augment_ops ids in \[0, 15\)"),
    (dict(augment_ops=[0, 1], augment_magnitudes=[0.0, 0.0, 0.0]), "ops x bins"),
    (dict(augment_ops=[10], augment_magnitudes=[8.0, 0.0]), "Posterize's bits"),
    (dict(augment_ops=[5], augment_magnitudes=[float("inf")]), "finite"),
    (dict(augment_ops=[5], augment_magnitudes=[1.0], augment_num_ops=9), "augment_num_ops"),
    (dict(augment_ops=[5], augment_magnitudes=[1.0, 2.0], augment_magnitude_bin=2), "augment_magnitude_bin"),
    (dict(augment_ops=[5], augment_magnitudes=[1.0], augment_fill=[1.0, 2.0]), "fill"),
])
def test_plan_validate_refuses_an_augmentation_it_cannot_run(fields, match):
    plan = build_plan([specs.CenterCrop(16)])
    for name, value in fields.items():
        setattr(plan, name, value)
    with pytest.raises(ValueError, match=match):
        plan.validate()


def test_invalid_arguments_get_errors_that_name_them():
    with pytest.raises(TypeError, match="num_magnitude_bins should be an int"):
        TrivialAugmentWide(num_magnitude_bins=3.5)
    with pytest.raises(TypeError, match="num_ops should be an int"):
        RandAugment(num_ops="2")
    with pytest.raises(TypeError, match="fill should be None, a number or a sequence"):
        TrivialAugmentWide(fill="white")
    with pytest.raises(ValueError, match="interpolation"):
        TrivialAugmentWide(interpolation="cubic-ish")


# ---- AutoAugment in the fused pass ----------------------------------------------------------------


@pytest.fixture(scope="module")
def many(make_image_folder):
    # Enough samples that every policy runs most of its sub-policies and skips some ops.
    return make_image_folder(classes=2, per_class=40, size=(60, 70))


@pytest.mark.parametrize("make", [
    lambda: T.AutoAugment(),
    lambda: T.AutoAugment(T.AutoAugmentPolicy.CIFAR10, interpolation=T.InterpolationMode.BILINEAR, fill=[20, 40, 60]),
    lambda: T.AutoAugment(T.AutoAugmentPolicy.SVHN, fill=128),
    lambda: v2.AutoAugment(),
    lambda: v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10, fill=7),
    lambda: v2.AutoAugment(v2.AutoAugmentPolicy.SVHN, interpolation=v2.InterpolationMode.BILINEAR),
], ids=["imagenet", "cifar10-bilinear-fill", "svhn-fill", "v2-imagenet", "v2-cifar10-fill", "v2-svhn-bilinear"])
def test_the_loader_runs_autoaugment_natively_as_torchvision_with_the_engines_draws(many, make):
    from fastload.compat.torchvision import convert_transform

    augment = make()
    api = v2 if type(augment).__module__.startswith("torchvision.transforms.v2") else T
    transform = api.Compose([api.RandomResizedCrop(OUT), api.RandomHorizontalFlip(), augment, api.PILToTensor()])
    dataset = ImageFolder(many, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=16, shuffle=False)
    images = torch.cat([batch for batch, _ in loader])
    assert loader.path.startswith("native") and "AutoAugment" in loader.path, loader.path
    native = convert_transform(transform)
    spec = native[2]
    assert isinstance(spec, AutoAugment) and spec.v2 == (api is v2)
    plan = build_plan(native, seed=loader.state_dict()["native_seed"])
    ops = spec.params(torch.arange(len(dataset)), plan.seed, 0, *plan.out_size)[0]
    assert (ops == -1).any() and (ops >= 0).all(dim=1).any()  # samples with ops skipped and with both run
    for i, (path, _) in enumerate(dataset.samples):
        assert torch.equal(images[i], torchvision_with_engine_draws(path, plan, spec, 0, i, augment)), f"sample {i}"


@pytest.mark.parametrize("use_v2", [False, True])
def test_the_reference_preset_with_autoaugment_is_native_and_batches_as_torch(root, use_v2):
    """torchvision's reference recipe with auto_augment_policy="imagenet": native, the
    batches torch's DataLoader gives (structure, dtypes, shapes), and the plan's twin."""
    from fastload.augment.pipeline import apply_plan_reference
    from fastload.bench.recipes import ClassificationPresetTrain
    from fastload.adapters import convert_native as convert_dataset_native

    if use_v2:  # the reference preset's v2 form
        preset = v2.Compose([v2.RandomResizedCrop(OUT, antialias=True), v2.RandomHorizontalFlip(0.5),
                             v2.AutoAugment(interpolation=v2.InterpolationMode.BILINEAR), v2.PILToTensor(),
                             v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.5),
                             v2.ToPureTensor()])
    else:
        preset = ClassificationPresetTrain(crop_size=OUT, auto_augment_policy="imagenet", random_erase_prob=0.5)
    dataset = ImageFolder(root, transform=preset)
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=False)
    assert loader.path.startswith("native") and "AutoAugment" in loader.path, loader.path
    batches = list(loader)
    reference = list(torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=False))
    assert len(batches) == len(reference)
    for (images, labels), (ref_images, ref_labels) in zip(batches, reference):
        assert type(images) is type(ref_images) and images.dtype == ref_images.dtype == torch.float32
        assert images.shape == ref_images.shape == (4, 3, OUT, OUT)
        assert labels.dtype == ref_labels.dtype and torch.equal(labels, ref_labels)
    _, native = convert_dataset_native(dataset)
    assert any(isinstance(op, AutoAugment) for op in native)
    plan = build_plan(native, seed=loader.state_dict()["native_seed"])
    images = torch.cat([batch for batch, _ in batches])
    for i, (path, _) in enumerate(dataset.samples):
        with open(path, "rb") as f:
            pixels = fl_ops.decode_jpeg(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
        torch.testing.assert_close(images[i], apply_plan_reference(plan, pixels, epoch=0, index=i), rtol=1e-5,
                                   atol=1e-5)


def test_autoaugment_fuses_its_space_and_sub_policies():
    spec = AutoAugment("svhn", interpolation="bilinear", fill=9)
    fields = fuse([specs.RandomResizedCrop(32), specs.RandomHorizontalFlip(), spec,
                   specs.ToDtype(torch.float32, scale=True), specs.Normalize(MEAN, STD)]).fields
    assert (fields["augment_ops"], fields["augment_magnitudes"]) == spec.space(32, 32)
    assert len(fields["augment_ops"]) == 14 and len(fields["augment_magnitudes"]) == 14 * 10
    assert (fields["augment_policy_ops"], fields["augment_policy_probs"], fields["augment_policy_bins"]) == \
        spec.policy_fields()
    assert fields["augment_bilinear"] is True and fields["augment_fill"] == [9.0] * 3
    plan = build_plan([specs.CenterCrop(16), AutoAugment()])
    plan.validate()
    assert len(plan.augment_policy_ops) == 50
    assert "augment_policy_ops" not in fuse([specs.CenterCrop(16), TrivialAugmentWide()]).fields
    with pytest.raises(UnsupportedPipeline, match="after AutoAugment"):
        fuse([specs.CenterCrop(16), AutoAugment(), specs.RandomHorizontalFlip()])
    with pytest.raises(UnsupportedPipeline, match="NEAREST and BILINEAR"):
        fuse([specs.CenterCrop(16), AutoAugment(interpolation="bicubic")])


def test_a_policy_without_applied_ops_still_goes_through_the_uint8_image(root):
    """A sub-policy whose ops both fail their probability leaves torchvision's PIL image
    (the resample rounded to uint8): with a table that never applies, the fused pass
    (the batch op with the plan's records) gives the plan's twin, not the float resample."""
    from fastload.augment.pipeline import apply_plan_reference

    plan = build_plan([specs.RandomResizedCrop(OUT), AutoAugment(), specs.ToDtype(torch.float32, scale=True)])
    plan.augment_policy_probs = [0.0] * len(plan.augment_policy_probs)
    plan.validate()
    core = _ext.require_ops()
    paths = [path for path, _ in ImageFolder(root).samples]
    decoded = []
    for path in paths:
        with open(path, "rb") as f:
            decoded.append(fl_ops.decode_jpeg(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)))
    samples = torch.arange(len(decoded))
    sizes = torch.tensor([d.shape[:2] for d in decoded])
    boxes, clamps, flips = core.regions_of(plan, sizes, samples, 0)
    views, relative = core.sampling_views(boxes, clamps, sizes)
    windows = [d[t:t + h, l:l + w].contiguous() for d, (t, l, h, w) in zip(decoded, views.tolist())]
    offsets = np.cumsum([0] + [w.numel() for w in windows])[:-1]
    shapes = torch.tensor([[o, w.shape[0], w.shape[1], w.shape[1] * 3] for o, w in zip(offsets, windows)])
    out = torch.empty(len(windows), 3, OUT, OUT)
    fl_ops.crop_resize_flip_normalize_batch(torch.cat([w.flatten() for w in windows]), shapes, relative, flips,
                                            plan.value_scale, torch.tensor(list(plan.mean)),
                                            torch.tensor(list(plan.std)), out, color=core.color_passes(plan, samples, 0))
    for i, pixels in enumerate(decoded):
        torch.testing.assert_close(out[i], apply_plan_reference(plan, pixels, epoch=0, index=i), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("fields, match", [
    (dict(augment_policy_ops=[0, 1, 2], augment_policy_probs=[0.5] * 3, augment_policy_bins=[0] * 3),
     r"\[policies x 2\]"),
    (dict(augment_policy_ops=[0, 1], augment_policy_probs=[0.5], augment_policy_bins=[0, 0]), r"\[policies x 2\]"),
    (dict(augment_policy_ops=[0, 14], augment_policy_probs=[0.5] * 2, augment_policy_bins=[0] * 2),
     r"indices into augment_ops \[0, 14\)"),
    (dict(augment_policy_ops=[0, 1], augment_policy_probs=[0.5, -0.1], augment_policy_bins=[0] * 2),
     r"augment_policy_probs in \[0, 1\]"),
    (dict(augment_policy_ops=[0, 1], augment_policy_probs=[0.5] * 2, augment_policy_bins=[0, 10]),
     r"augment_policy_bins -1 \(None\) or in \[0, 10\)"),
    (dict(augment_policy_ops=[9, 1], augment_policy_probs=[0.5] * 2, augment_policy_bins=[-1, 0]),
     "a bin for Posterize"),
])
def test_plan_validate_refuses_a_policy_table_it_cannot_run(fields, match):
    plan = build_plan([specs.CenterCrop(16), AutoAugment()])
    for name, value in fields.items():
        setattr(plan, name, value)
    with pytest.raises(ValueError, match=match):
        plan.validate()
    plan = build_plan([specs.CenterCrop(16)])
    plan.augment_policy_ops, plan.augment_policy_probs, plan.augment_policy_bins = [0, 0], [1.0, 1.0], [0, 0]
    with pytest.raises(ValueError, match="sub-policies without a space"):
        plan.validate()


def test_autoaugment_arguments_get_torchvisions_errors():
    with pytest.raises(ValueError, match="The provided policy imagenet-2 is not recognized"):
        AutoAugment("imagenet-2")
    with pytest.raises(TypeError, match="fill should be None, a number or a sequence"):
        AutoAugment(fill="white")
    assert fastload.transforms.AutoAugment is AutoAugment


# ---- AugMix in the fused pass -------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda: T.AugMix(),
    lambda: T.AugMix(severity=6, mixture_width=2, chain_depth=3, alpha=0.5, all_ops=False,
                     interpolation=T.InterpolationMode.NEAREST),
], ids=["default", "options"])
def test_the_loader_runs_augmix_natively_as_the_twin(root, make):
    """The engine against the plan's twin: torchvision's own tensor ops and its mix,
    with the engine's draws. The twin's affine steps give the native op's result once it
    is checked to be torchvision's up to the rounding ties torch itself resolves
    differently from one CPU to another (tests/affine_ties.py): a tie resolved the other
    way early in a chain would otherwise move every later op's input."""
    from fastload.augment.pipeline import apply_plan_reference
    from fastload.compat.torchvision import convert_transform

    transform = T.Compose([T.RandomResizedCrop(OUT), T.RandomHorizontalFlip(), make(), T.PILToTensor()])
    dataset = ImageFolder(root, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=False)
    images = torch.cat([batch for batch, _ in loader])
    assert loader.path.startswith("native") and "AugMix" in loader.path, loader.path
    plan = build_plan(convert_transform(transform), seed=loader.state_dict()["native_seed"])
    for i, (path, _) in enumerate(dataset.samples):
        with open(path, "rb") as f:
            pixels = fl_ops.decode_jpeg(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
        with native_ties(tv_autoaugment, "_apply_op"):
            want = apply_plan_reference(plan, pixels, epoch=0, index=i)
        assert torch.equal(images[i], want), f"sample {i}"


@pytest.mark.parametrize("ops, reason", [
    ([specs.CenterCrop(16), autoaugment.AugMix(fill=3)], "fill=None"),
    ([specs.CenterCrop(16), autoaugment.AugMix(mixture_width=5)], "1 to 4 chains"),
    ([specs.CenterCrop(16), autoaugment.AugMix(chain_depth=5)], "at most 4 ops"),
    ([specs.CenterCrop(16), autoaugment.AugMix(interpolation="bicubic")], "nearest and bilinear"),
    ([specs.CenterCrop(16), autoaugment.AugMix(), TrivialAugmentWide()], "after AugMix"),
])
def test_an_augmix_that_does_not_fuse_says_why(ops, reason):
    with pytest.raises(UnsupportedPipeline, match=reason):
        fuse(ops)


def test_augmix_arguments_get_torchvisions_errors():
    with pytest.raises(ValueError, match=r"The severity must be between \[1, 10\]"):
        autoaugment.AugMix(severity=11)
    with pytest.raises(TypeError, match="mixture_width should be an int"):
        autoaugment.AugMix(mixture_width=2.0)


@pytest.mark.parametrize("fields, match", [
    (dict(augmix_ops=[1, 15], augmix_magnitudes=[0.0] * 2), r"augmix_ops ids in \[0, 15\)"),
    (dict(augmix_ops=[1], augmix_magnitudes=[0.0, 1.0], augmix_severity=3), "augmix_severity"),
    (dict(augmix_ops=[10], augmix_magnitudes=[9.0], augmix_severity=1), "Posterize"),
    (dict(augmix_ops=[1], augmix_magnitudes=[0.1], augmix_severity=1, augmix_width=5), "augmix_width"),
    (dict(augmix_ops=[1], augmix_magnitudes=[0.1], augmix_severity=1, augmix_alpha=0.0), "augmix_alpha"),
    (dict(augmix_ops=[1], augmix_magnitudes=[0.1], augmix_severity=1, augment_ops=[0], augment_magnitudes=[0.0]),
     "both"),
])
def test_plan_validate_refuses_an_augmix_it_cannot_run(fields, match):
    plan = build_plan([specs.CenterCrop(16)])
    for name, value in fields.items():
        setattr(plan, name, value)
    with pytest.raises(ValueError, match=match):
        plan.validate()
