"""AutoAugment (v1 and v2, policies IMAGENET, CIFAR10, SVHN): its tables and its sampler.

The spec's sub-policies and 10-bin space against torchvision's; fastload::auto_augment_params
with a sub-policy table against torchvision's get_params distribution (a sub-policy
uniformly, each op with its probability, a sign with probability 1/2); every policy's
draws replayed through torchvision's _apply_op on a PIL image against the native ops; the
op's argument checks and opcheck. The fused pass and the loader: tests/test_autoaugment_fused.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fastload import _ext
from fastload import ops as fl_ops
from fastload.augment import autoaugment
from fastload.augment.autoaugment import OPS, AutoAugment

tv = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
from torchvision.transforms import autoaugment as tv_autoaugment  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

POLICIES = ["imagenet", "cifar10", "svhn"]
SIGNED = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness")


def binomial_close(hits: int, n: int, p: float) -> bool:
    """hits of n within 5 standard deviations of n * p (exact where p is 0 or 1)."""
    sd = (n * p * (1 - p)) ** 0.5
    return abs(hits - n * p) <= 5 * sd + 1e-9


# ---- the tables ---------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(T.AutoAugmentPolicy))
def test_the_policies_are_torchvisions(policy):
    ours = autoaugment.POLICIES[policy.value]
    for theirs in (tv_autoaugment.AutoAugment(policy).policies, v2.AutoAugment(policy)._policies):
        assert [tuple(map(tuple, sub)) for sub in theirs] == [tuple(map(tuple, sub)) for sub in ours]
    assert AutoAugment(policy).policy == AutoAugment(policy.value.upper()).policy == policy.value


@pytest.mark.parametrize("height, width", [(224, 224), (37, 91)])
def test_the_space_is_torchvisions_ten_bin_space(height, width):
    ops, magnitudes = AutoAugment().space(height, width)
    space = tv_autoaugment.AutoAugment()._augmentation_space(10, (height, width))
    assert [OPS[op] for op in ops] == list(space)
    for k, (table, signed) in enumerate(space.values()):
        values = [float(v) for v in table.tolist()] if table.ndim else []
        assert magnitudes[k * 10:(k + 1) * 10] == (values or [0.0] * 10)
        assert (OPS[ops[k]] in SIGNED) == signed
    ops, magnitudes = AutoAugment(v2=True).space(height, width)
    assert [OPS[op] for op in ops] == list(v2.AutoAugment._AUGMENTATION_SPACE)
    for k, (name, (table, _)) in enumerate(v2.AutoAugment._AUGMENTATION_SPACE.items()):
        values = table(10, height, width)
        values = [] if values is None else [float(v) for v in values.tolist()]
        if name == "Solarize":  # v2's threshold: 255 * the fraction
            values = [255.0 * v for v in values]
        assert magnitudes[k * 10:(k + 1) * 10] == (values or [0.0] * 10)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_plans_policy_fields_index_the_space(policy):
    spec = AutoAugment(policy)
    space_ops, _ = spec.space(32, 32)
    policy_ops, probs, bins = spec.policy_fields()
    rows = [row for sub in autoaugment.POLICIES[policy] for row in sub]
    assert len(policy_ops) == len(probs) == len(bins) == 2 * 25 == len(rows)
    assert [(OPS[space_ops[i]], p, None if b < 0 else b) for i, p, b in zip(policy_ops, probs, bins)] == rows


# ---- the draws ------------------------------------------------------------------------------------


def draws(spec_space, table, n, seed=5, epoch=1):
    """auto_augment_params with a sub-policy table [(op name, p, bin or None), ...] x 2."""
    space_ops, magnitudes = spec_space
    names = [OPS[op] for op in space_ops]
    rows = [row for sub in table for row in sub]
    return fl_ops.auto_augment_params(torch.arange(n), seed, epoch, space_ops, magnitudes, 1, -1,
                                      [names.index(op) for op, _, _ in rows], [p for _, p, _ in rows],
                                      [-1 if b is None else b for _, _, b in rows])


def test_a_sub_policy_is_drawn_uniformly():
    space = AutoAugment().space(32, 32)
    first = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color"]
    table = [((op, 1.0, 3), ("Invert", 1.0, None)) for op in first]
    n = 70_000
    ops, magnitudes = draws(space, table, n)
    assert ops.shape == magnitudes.shape == (n, 2)
    assert (ops[:, 1] == OPS.index("Invert")).all()  # p = 1: always applied
    counts = np.bincount(ops[:, 0].numpy(), minlength=len(OPS))[[OPS.index(op) for op in first]]
    assert counts.sum() == n and all(binomial_close(int(c), n, 1 / len(first)) for c in counts), counts


def test_each_op_runs_with_its_probability_at_its_bin_with_a_random_sign():
    space_ops, magnitudes = AutoAugment().space(32, 32)
    table = np.array(magnitudes).reshape(len(space_ops), 10)
    shear = table[[OPS[op] for op in space_ops].index("ShearX"), 5]
    n = 60_000
    ops, drawn = draws((space_ops, magnitudes), [(("ShearX", 0.3, 5), ("Rotate", 0.7, None))], n)
    slot0, slot1 = ops[:, 0] >= 0, ops[:, 1] >= 0
    assert binomial_close(int(slot0.sum()), n, 0.3) and binomial_close(int(slot1.sum()), n, 0.7)
    assert binomial_close(int((slot0 & slot1).sum()), n, 0.21)  # independent draws
    assert (ops[:, 0][slot0] == OPS.index("ShearX")).all() and (ops[:, 1][slot1] == OPS.index("Rotate")).all()
    assert (ops[~slot0, 0] == -1).all() and (drawn[~slot0, 0] == 0).all()  # not applied: -1, magnitude 0
    assert (drawn[slot0, 0].abs() == shear).all()  # the bin's magnitude
    assert binomial_close(int((drawn[slot0, 0] < 0).sum()), int(slot0.sum()), 0.5)  # a sign, p = 1/2
    assert (drawn[slot1, 1].abs() == 0).all()  # None: magnitude 0 (signed: +-0.0, as torchvision)
    rotate_sign = torch.signbit(drawn[slot1, 1])
    assert binomial_close(int(rotate_sign.sum()), int(slot1.sum()), 0.5)
    ops, drawn = draws((space_ops, magnitudes), [(("Solarize", 0.5, 2), ("Equalize", 0.0, None))], n)
    applied = ops[:, 0] >= 0
    assert not torch.signbit(drawn[applied, 0]).any()  # unsigned: never negated
    assert (ops[:, 1] == -1).all()  # p = 0 (a uniform in [0, 1) is 0 with probability 2^-53)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_policys_ops_follow_torchvisions_distribution(policy):
    """Over many samples the frequency of op X in slot i is sum(p of X in slot i) / 25, and
    every magnitude is its bin's, with a sign for signed ops."""
    spec = AutoAugment(policy)
    n = 50_000
    ops, drawn = spec.params(torch.arange(n), 11, 3, 64, 48)
    space_ops, magnitudes = spec.space(64, 48)
    table = np.array(magnitudes).reshape(len(space_ops), 10)
    subs = autoaugment.POLICIES[policy]
    for slot in range(2):
        for op in {sub[slot][0] for sub in subs}:
            expected = sum(sub[slot][1] for sub in subs if sub[slot][0] == op) / len(subs)
            hits = int((ops[:, slot] == OPS.index(op)).sum())
            assert binomial_close(hits, n, expected), (slot, op, hits / n, expected)
        applied = ops[:, slot] >= 0
        allowed = {(OPS.index(sub[slot][0]), 0.0 if sub[slot][2] is None else
                    float(table[[OPS[o] for o in space_ops].index(sub[slot][0]), sub[slot][2]])) for sub in subs}
        seen = {(int(o), abs(float(m))) for o, m in zip(ops[applied, slot].tolist(), drawn[applied, slot].tolist())}
        assert seen <= allowed
        signed = torch.tensor([OPS[int(o)] in SIGNED for o in ops[applied, slot].tolist()], dtype=torch.bool)
        negative = torch.signbit(drawn[applied, slot])
        assert not negative[~signed].any()
        assert binomial_close(int(negative[signed].sum()), int(signed.sum()), 0.5)


def test_draws_are_a_pure_function_of_seed_epoch_and_index():
    spec = AutoAugment()
    a = spec.params(torch.tensor([5, 9, 5]), 3, 1, 32, 32)
    b = spec.params(torch.tensor([9, 5]), 3, 1, 32, 32)
    assert torch.equal(a[0][0], a[0][2]) and torch.equal(a[0][1], b[0][0]) and torch.equal(a[1][1], b[1][0])
    assert not torch.equal(spec.params(torch.arange(200), 3, 1, 32, 32)[0],
                           spec.params(torch.arange(200), 3, 2, 32, 32)[0])


# ---- the draws through torchvision's ops ----------------------------------------------------------


def pil_image(height: int, width: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = 40 + 150 * x / (width - 1) + 30 * np.sin(y / 3.0)
    pixels = np.clip(base[..., None] + rng.normal(0, 25, (height, width, 3)), 0, 255).astype(np.uint8)
    pixels[: height // 4, : width // 4] = 3
    return Image.fromarray(pixels, "RGB")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("interpolation, fill", [(T.InterpolationMode.NEAREST, None),
                                                 (T.InterpolationMode.BILINEAR, [20, 40, 60])])
def test_every_policys_draws_through_torchvisions_ops_equal_the_native_ops(policy, interpolation, fill):
    spec = AutoAugment(policy, interpolation.value, fill)
    height, width, n = 27, 33, 150
    ops, drawn = spec.params(torch.arange(n), 2, 0, height, width)
    for i in range(n):
        image = pil_image(height, width, i)
        pixels = torch.from_numpy(np.asarray(image).copy())
        applied = [(int(o), float(m)) for o, m in zip(ops[i].tolist(), drawn[i].tolist()) if o >= 0]
        native = fl_ops.auto_augment(pixels, [o for o, _ in applied], [m for _, m in applied], fill or [],
                                     interpolation == T.InterpolationMode.BILINEAR)
        for op, magnitude in applied:
            image = tv_autoaugment._apply_op(image, OPS[op], magnitude, interpolation, fill)
        assert torch.equal(native, torch.from_numpy(np.asarray(image).copy())), (i, applied)


# ---- the op's checks -------------------------------------------------------------------------------


@pytest.mark.parametrize("policy_args, match", [
    (([0, 1, 2], [0.5, 0.5, 0.5], [0, 0, 0]), r"\[policies x 2\]"),
    (([0, 1], [0.5, 0.5], [0]), r"\[policies x 2\]"),
    (([0, 14], [0.5, 0.5], [0, 0]), r"indices into space_ops \[0, 14\)"),
    (([0, 1], [0.5, 1.5], [0, 0]), r"policy_probs in \[0, 1\]"),
    (([0, 1], [0.5, float("nan")], [0, 0]), r"policy_probs in \[0, 1\]"),
    (([0, 1], [0.5, 0.5], [0, 10]), r"policy_bins -1 \(None\) or in \[0, 10\)"),
])
def test_bad_policy_arguments_raise_with_the_reason(policy_args, match):
    space_ops, magnitudes = AutoAugment().space(8, 8)
    with pytest.raises(ValueError, match=match):
        fl_ops.auto_augment_params(torch.arange(3), 0, 0, space_ops, magnitudes, 1, -1, *policy_args)


def test_opcheck_of_the_params_op_with_a_policy():
    spec = AutoAugment("cifar10")
    args = (torch.arange(5), 0, 1, *spec.space(7, 9), 1, -1, *spec.policy_fields())
    torch.library.opcheck(torch.ops.fastload.auto_augment_params.default, args)
    ops, magnitudes = torch.ops.fastload.auto_augment_params(*args)
    assert ops.shape == magnitudes.shape == (5, 2) and ops.dtype == torch.int64 and magnitudes.dtype == torch.float64
