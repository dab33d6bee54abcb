"""Hybrid pipelines: a native prefix on the engine, the rest of the transforms in Python.

A fastload dataset whose transforms continue past what the engine can run (RandomRotation,
a user function, ...) runs the prefix on the engine and the tail per sample in Python; the
batches agree with the dataset's generic twin and keep torchvision's output contract."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

import fastload
from fastload import _ext
from fastload.augment import specs
from fastload.native.hybrid_local import HybridRunner
from fastload.augment.tail import GlobalDraws, sample_seed

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as T  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

pytestmark = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C not built")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def folder_with_black(tmp_path_factory):
    """Like `image_folder` with 3 images a class, plus one all-black image (sample 2, class_0/img_1b.jpg): a tail can
    fail on it alone."""
    from PIL import Image

    import jpeg_samples as js

    root = tmp_path_factory.mktemp("hybrid_black")
    js.write_image_folder(root, classes=2, per_class=3, size=(40, 52))
    Image.fromarray(np.zeros((40, 52, 3), np.uint8)).save(root / "class_0" / "img_1b.jpg", quality=95)
    return str(root)


def invert(image):
    return 1.0 - image


def refuse_black(image):
    if np.asarray(image).max() < 8:
        raise ValueError("a black image")
    return image


def recipe():
    return [T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.RandomRotation(15), T.ToTensor(),
            T.Normalize(MEAN, STD), T.RandomErasing(0.5)]


def equal(a, b):
    from resume_helpers import batches_equal

    return batches_equal(a, b)


def test_path_names_the_native_prefix_the_python_tail_and_its_blockers(image_folder):
    dataset = fastload.ImageFolder(image_folder, transforms=recipe()[:5])
    assert dataset.transforms == [specs.RandomResizedCrop(16), specs.RandomHorizontalFlip()]
    assert [type(t).__name__ for t in dataset.tail] == ["RandomRotation", "ToTensor", "Normalize"]
    loader = fastload.DataLoader(dataset, batch_size=4)
    head = ("hybrid: native [RandomResizedCrop -> RandomHorizontalFlip] + python "
            "[RandomRotation -> ToTensor -> Normalize], decode_on=cpu (auto); not native: RandomRotation(")
    assert loader.path.startswith(head), loader.path
    assert loader.path.endswith("no native equivalent"), loader.path  # only RandomRotation blocks
    assert loader.path.count("RandomRotation(") == 1, loader.path
    assert "ToTensor()" not in loader.path.split("not native:")[1]


def test_a_compose_is_cut_inside_and_a_user_function_is_named(image_folder):
    dataset = fastload.ImageFolder(image_folder,
                                   transforms=[T.Compose([T.CenterCrop(16), T.RandomInvert(1.0)]), invert])
    assert dataset.transforms == [specs.CenterCrop(16)] and len(dataset.tail) == 2
    assert fastload.DataLoader(dataset, batch_size=2).path.startswith(
        "hybrid: native [CenterCrop] + python [RandomInvert -> invert], decode_on=cpu (auto); not native: RandomInvert(")


def tail_on_the_native_prefix(image_folder, tail, *, seed, batch_size, epoch=0):
    """What a hybrid loader must give: the fully native prefix's batches (the engine's
    uint8), each sample's tail run on them under its seed, then default_collate."""
    prefix = fastload.ImageFolder(image_folder, transforms=[T.RandomResizedCrop(16), T.RandomHorizontalFlip()])
    tail = fastload.ImageFolder(image_folder, transforms=[T.RandomResizedCrop(16)] + tail).python_tail()
    batches, start = [], 0
    for images, labels in fastload.DataLoader(prefix, batch_size=batch_size, seed=seed):
        outputs = []
        with GlobalDraws() as draws:
            for slot in range(len(labels)):
                draws.seed(sample_seed(seed, epoch, start + slot))
                outputs.append(tail(images[slot]))
        batches.append([default_collate(outputs), labels])
        start += len(labels)
    return batches


TAILS = {"v1+function": [T.RandomInvert(1.0), T.ToTensor(), invert], "v2-on-pil": [v2.RandomInvert(1.0), v2.PILToTensor()],
         "v2-on-tensor": [v2.PILToTensor(), v2.Grayscale(1)], "random": recipe()[2:]}


@pytest.mark.parametrize("name", TAILS)
def test_hybrid_batches_are_the_tail_run_on_the_engines_prefix_exactly(image_folder, name):
    transforms = [T.RandomResizedCrop(16), T.RandomHorizontalFlip()] + TAILS[name]
    hybrid = fastload.DataLoader(fastload.ImageFolder(image_folder, transforms=transforms), batch_size=3, seed=3)
    assert hybrid.path.startswith("hybrid")
    got, want = list(hybrid), tail_on_the_native_prefix(image_folder, TAILS[name], seed=3, batch_size=3)
    assert len(got) == len(want) == 3
    for a, b in zip(got, want):
        assert equal(a, b)


@pytest.mark.parametrize("name", TAILS)
def test_hybrid_batches_match_the_generic_twin(image_folder, name):
    """The twin decodes with PIL and resizes in plain PyTorch: the same crops, the same
    tail draws, the prefix's pixels equal but for rare one-level rounding differences."""
    dataset = fastload.ImageFolder(image_folder,
                                   transforms=[T.RandomResizedCrop(16), T.RandomHorizontalFlip()] + TAILS[name],
                                   seed=3)
    # dct_scaling=False: the twin decodes whole images, so must the engine for equal pixels.
    hybrid = fastload.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2, dct_scaling=False,
                                 generator=torch.Generator().manual_seed(1))
    twin = fastload.DataLoader(dataset, batch_size=3, shuffle=True, accelerate=False,
                               generator=torch.Generator().manual_seed(1))
    assert hybrid.path.startswith("hybrid") and twin.path.startswith("generic")
    got, want = list(hybrid), list(twin)
    assert len(got) == len(want) == 3
    for (images, labels), (twin_images, twin_labels) in zip(got, want):
        assert torch.equal(labels, twin_labels) and (images.dtype, images.shape) == (twin_images.dtype, twin_images.shape)
        assert (images == twin_images).double().mean() >= 0.99


def test_a_threaded_tail_gives_the_same_batches_as_the_inline_one(image_folder):
    from fastload.augment.plan import build_plan

    dataset = fastload.ImageFolder(image_folder,
                                   transforms=[T.CenterCrop(16), T.RandomInvert(1.0), T.ToTensor(), invert])
    batches = []
    for parallel in ("inline", "threads"):
        runner = HybridRunner(dataset.index, build_plan(dataset.transforms), dataset.python_tail(), num_threads=2,
                              parallel=parallel)
        batches.append(runner.result(runner.submit([5, 0, 3, 3, 7], 0)))
        runner.close()
    assert equal(batches[0], batches[1])


@pytest.mark.timeout(120)
def test_worker_processes_give_the_inline_batches_random_draws_included(image_folder):
    from fastload.augment.plan import build_plan
    from fastload.native.feed import NativeFeed
    from fastload.native.hybrid_processes import ProcessHybridRunner

    dataset = fastload.ImageFolder(image_folder, transforms=recipe())
    plan = build_plan(dataset.transforms, seed=9)
    batches = [[5, 0, 3], [3, 7, 1], [2, 6]]
    epochs = []
    # The worker's runner makes its batches on shared memory (sent as a handle, no copy).
    for runner in (HybridRunner(dataset.index, plan, dataset.python_tail(), num_threads=2),
                   HybridRunner(dataset.index, plan, dataset.python_tail(), num_threads=2, shared_batches=True),
                   ProcessHybridRunner(dataset.index, plan, dataset.python_tail(), num_threads=2)):
        try:
            epochs.append([batch for batch, _ in NativeFeed(runner, iter(batches), epoch=1, depth=2)])
            stats = runner.stats()
        finally:
            runner.close()
        assert (stats["images"], stats["batches"]) == (8, 3)
    assert not any(batch[0].is_shared() for batch in epochs[0])
    assert all(batch[0].is_shared() for batch in epochs[1])
    for other in epochs[1:]:
        assert all(equal(a, b) for a, b in zip(epochs[0], other, strict=True))


def test_random_tail_draws_are_reproducible_and_leave_the_global_generators_alone(image_folder):
    def loader(seed, **kwargs):
        # A generator of its own: torch's iterator draws its base seed from it, not from the
        # global one, so only the tail could move the global generators.
        return fastload.DataLoader(fastload.ImageFolder(image_folder, transforms=recipe()), batch_size=4, seed=seed,
                                   generator=torch.Generator().manual_seed(0), **kwargs)

    torch.manual_seed(0)
    random.seed(0)
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    first, again, inline = list(loader(7, num_workers=2)), list(loader(7, num_workers=1)), list(loader(7))
    assert torch.equal(before[0], torch.get_rng_state()) and before[1] == random.getstate()
    assert np.array_equal(before[2], np.random.get_state()[1])
    assert all(equal(a, b) and equal(a, c) for a, b, c in zip(first, again, inline, strict=True))
    assert not equal(first[0], list(loader(8))[0])
    # Another epoch draws other augmentations for the same samples.
    epochs = loader(7)
    assert not equal(list(epochs)[0], list(epochs)[0])


def test_sample_seeds_depend_on_seed_epoch_and_index():
    seeds = {sample_seed(s, e, i) for s in range(3) for e in range(3) for i in range(50)}
    assert len(seeds) == 3 * 3 * 50 and all(0 <= s < 2 ** 63 for s in seeds)


def test_outputs_have_torchvisions_dtype_shape_and_range(image_folder):
    transform = T.Compose(recipe())
    theirs = next(iter(torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(image_folder, transform=transform),
                                                   batch_size=8)))
    ours = next(iter(fastload.DataLoader(fastload.ImageFolder(image_folder, transforms=recipe()), batch_size=8)))
    assert type(ours) is type(theirs) and len(ours) == 2
    for a, b in zip(ours, theirs):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
    lowest, highest = (0 - max(MEAN)) / min(STD), (1 - min(MEAN)) / min(STD)
    assert lowest <= ours[0].min() < -1.0 and 1.0 < ours[0].max() <= highest


def test_a_deterministic_tail_matches_torchvisions_values(image_folder):
    """Same crop (centre), same tail: within the resize's rounding of torchvision + PIL."""
    tail = [T.RandomInvert(1.0), T.ToTensor(), T.Normalize(MEAN, STD)]
    theirs = torchvision.datasets.ImageFolder(image_folder,
                                              transform=T.Compose([T.Resize(20), T.CenterCrop(16)] + tail))
    ours = fastload.DataLoader(fastload.ImageFolder(image_folder, transforms=[T.Resize(20), T.CenterCrop(16)] + tail),
                               batch_size=8, dct_scaling=False)
    images = next(iter(ours))[0]
    expected = torch.stack([theirs[i][0] for i in range(8)])
    # Two uint8 levels of resize rounding, through ToTensor and Normalize's 1/std.
    assert torch.allclose(images, expected, atol=2.5 / 255 / min(STD))


def test_tail_input_tensor_hands_the_uint8_tensor_and_refuses_totensor(image_folder):
    seen = []

    def record(image):
        seen.append((type(image), image.dtype, tuple(image.shape)))
        return image

    dataset = fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), record, v2.ToDtype(torch.float32, True)])
    dataset.tail_input = "tensor"
    images, _ = next(iter(fastload.DataLoader(dataset, batch_size=2)))
    assert seen == [(torch.Tensor, torch.uint8, (3, 16, 16))] * 2 and images.dtype == torch.float32
    refused = fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), record, T.ToTensor()])
    refused.tail_input = "tensor"  # (a NativeDataset argument; ImageFolder keeps it as an attribute)
    path = fastload.DataLoader(refused, batch_size=2).path
    assert path.startswith("generic: the Python tail's ToTensor() does not convert the uint8 tensors"), path


def test_a_prefix_that_ends_in_a_tensor_hands_that_tensor_to_the_tail(image_folder):
    seen = []

    def record(image):
        seen.append((type(image), image.dtype))
        return image

    dataset = fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), T.ToTensor(), record])
    assert dataset.transforms == [specs.CenterCrop(16), specs.ToDtype(torch.float32, scale=True)]
    hybrid = next(iter(fastload.DataLoader(dataset, batch_size=2, dct_scaling=False)))
    assert seen == [(torch.Tensor, torch.float32)] * 2
    twin = next(iter(fastload.DataLoader(dataset, batch_size=2, accelerate=False)))
    # The kernel and the reference sum in another order: float32 rounding apart.
    torch.testing.assert_close(hybrid[0], twin[0], atol=1e-4, rtol=0)


def test_a_tail_error_raises_with_the_sample_and_its_file(folder_with_black):
    dataset = fastload.ImageFolder(folder_with_black, transforms=[T.CenterCrop(16), refuse_black, T.ToTensor()])
    assert dataset.index.source(2).endswith("img_1b.jpg")
    for accelerate in ("auto", False):
        with pytest.raises(ValueError, match="a black image") as info:
            list(fastload.DataLoader(dataset, batch_size=3, accelerate=accelerate))
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert "refuse_black" in notes and "sample 2" in notes and "img_1b.jpg" in notes, notes


def test_a_tail_error_under_skip_replaces_the_sample_and_counts_it(folder_with_black):
    dataset = fastload.ImageFolder(folder_with_black, transforms=[T.CenterCrop(16), refuse_black, T.ToTensor()])
    loader = fastload.DataLoader(dataset, batch_size=3, on_error="skip")
    batches = list(loader)
    assert [len(labels) for _, labels in batches] == [3, 3, 1]
    # Sample 2 is replaced by the next readable one, sample 3 (also the next batch's first).
    assert equal(batches[0][0][2], batches[1][0][0])
    assert batches[0][1].tolist() == [int(dataset.index.labels[i]) for i in (0, 1, 3)]
    assert loader.stats()["native"]["skipped"] == 1
    list(loader)
    assert loader.stats()["native"]["skipped"] == 2  # once per pass


def test_hybrid_loader_resumes_at_every_position(image_folder):
    from resume_helpers import check_resume_at_every_position

    dataset = fastload.ImageFolder(image_folder, transforms=recipe())

    def make():
        return fastload.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2, seed=11,
                                   generator=torch.Generator().manual_seed(0))

    reference = check_resume_at_every_position(make)
    assert len(reference) == 3 and reference[0][0].dtype == torch.float32


def test_tail_outputs_collate_like_torchs_default_collate(image_folder):
    def as_dict(image):
        return {"image": image, "size": image.shape[-1], "name": "x"}

    dataset = fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), T.PILToTensor(), as_dict])
    hybrid = next(iter(fastload.DataLoader(dataset, batch_size=3, dct_scaling=False)))
    assert equal(hybrid, default_collate([dataset[i] for i in range(3)]))
    assert hybrid[0]["name"] == ["x"] * 3 and hybrid[0]["size"].dtype == torch.int64


def test_a_tail_ending_in_pil_images_fails_to_collate_as_torch_does(image_folder):
    dataset = fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), T.Grayscale()])
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors") as torchs:
        next(iter(torch.utils.data.DataLoader(dataset, batch_size=2)))
    with pytest.raises(TypeError, match=str(torchs.value).split(";")[0]) as ours:
        next(iter(fastload.DataLoader(dataset, batch_size=2)))
    assert "end the tail with a transform that returns tensors" in " ".join(ours.value.__notes__)


def test_a_fastload_transform_after_a_python_one_is_refused(image_folder):
    with pytest.raises(fastload.UnsupportedPipeline, match=r"transforms\[2\] is fastload's Normalize.*after the "
                                                         r"Python transform"):
        fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), invert, specs.Normalize(MEAN, STD)])
    with pytest.raises(TypeError, match=r"expected a callable at transforms\[1\]"):
        fastload.ImageFolder(image_folder, transforms=[T.CenterCrop(16), "flip"])


def test_global_draws_restore_the_callers_generators():
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    with GlobalDraws() as draws:
        draws.seed(5)
        torch.rand(10)
    assert torch.equal(torch.rand(3), expected)


def test_state_is_plain_data_with_a_hybrid_runner(image_folder):
    loader = fastload.DataLoader(fastload.ImageFolder(image_folder, transforms=recipe()), batch_size=3, seed=4)
    iterator = iter(loader)
    next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["native_seed"] == 4 and state["batches_consumed"] == 1


# ---- torchvision datasets: the compat layer's pipelines, hybrid ------------------------------


def double(image):
    return image * 2


TENSOR_TAIL = ["PILToTensor", "ConvertImageDtype", "Normalize"]
RECIPES = {  # name: (transform, the tail's transform names)
    "rotation+erase": (lambda: T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.RandomRotation(15),
                                          T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD),
                                          T.RandomErasing(0.1)]),
                       ["RandomRotation"] + TENSOR_TAIL + ["RandomErasing"]),
    "invert-v2": (lambda: v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(), v2.RandomInvert(0.5),
                                      v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)]),
                  ["RandomInvert", "PILToTensor", "ToDtype"]),
    "rotation-v2": (lambda: v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(), v2.RandomRotation(15),
                                        v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)]),
                    ["RandomRotation", "PILToTensor", "ToDtype"]),
    "function": (lambda: T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor(), double]),
                 ["double"]),
}


def tv_folder(root, recipe_name, **kwargs):
    return torchvision.datasets.ImageFolder(root, transform=RECIPES[recipe_name][0](), **kwargs)


@pytest.mark.parametrize("name", RECIPES)
def test_torchvision_recipes_run_hybrid_and_explain_says_the_same(image_folder, name, capsys):
    dataset = torch.utils.data.Subset(tv_folder(image_folder, name), [7, 0, 3, 5])
    path = fastload.DataLoader(dataset, batch_size=2).path
    prefix = "RandomResizedCrop -> RandomHorizontalFlip" + (" -> ToDtype" if name == "function" else "")
    assert path.startswith(f"hybrid: native [{prefix}] + python [{' -> '.join(RECIPES[name][1])}], decode_on=cpu "
                           "(auto); not native: "), path
    verdict = fastload.explain(dataset).splitlines()[-1]
    assert verdict.startswith("  verdict: hybrid path: native prefix, then Python per sample"), verdict


def test_random_erasing_after_normalize_is_the_tail_or_native(image_folder):
    """Whatever the transform mapping makes of RandomErasing, loader.path and explain agree."""
    from fastload.compat.torchvision import split_transform

    transform = T.Compose([T.RandomResizedCrop(16), T.ToTensor(), T.Normalize(MEAN, STD), T.RandomErasing(0.5)])
    dataset = torchvision.datasets.ImageFolder(image_folder, transform=transform)
    path = fastload.DataLoader(dataset, batch_size=2).path
    verdict = fastload.explain(dataset).splitlines()[-1]
    if split_transform(transform).tail:
        assert path.startswith("hybrid: native [RandomResizedCrop -> ToDtype -> Normalize] + python [RandomErasing]")
        assert "verdict: hybrid path" in verdict
    else:
        assert path.startswith("native: ") and verdict == "  verdict: native path"


def test_torchvision_pipelines_the_engine_cannot_start_stay_generic_and_explain_agrees(image_folder):
    for transform in (T.Compose([T.RandomRotation(15), T.RandomResizedCrop(16), T.ToTensor()]),  # nothing native first
                      T.Compose([T.ToTensor(), T.Normalize(MEAN, STD), double])):  # no crop: sizes differ
        dataset = torchvision.datasets.ImageFolder(image_folder, transform=transform)
        path = fastload.DataLoader(dataset, batch_size=2).path
        assert path.startswith("generic: "), path
        assert fastload.explain(dataset).splitlines()[-1].startswith("  verdict: generic path")


def torchvision_tail_on_the_native_prefix(dataset, *, seed, batch_size, epoch=0):
    """What a hybrid loader over a torchvision dataset must give: the engine's uint8 prefix
    batches (the same crops: same plan and seed), each sample's torchvision tail run on
    them under its seed, collated, and the labels through target_transform."""
    from fastload.adapters import convert as convert_dataset

    conversion = convert_dataset(dataset)
    tail = conversion.python_tail()
    to_tensor = [] if tail.prefix_makes_tensor else [T.PILToTensor()]  # the engine's uint8, as a tensor
    prefix = torchvision.datasets.ImageFolder(
        dataset.dataset.root if isinstance(dataset, torch.utils.data.Subset) else dataset.root,
        transform=T.Compose(list(conversion.prefix) + to_tensor))
    if isinstance(dataset, torch.utils.data.Subset):
        prefix = torch.utils.data.Subset(prefix, dataset.indices)
    loader = fastload.DataLoader(prefix, batch_size=batch_size, seed=seed)
    assert loader.path.startswith("native: ")
    batches, start = [], 0
    for images, labels in loader:
        outputs = []
        with GlobalDraws() as draws:
            for slot in range(len(labels)):
                draws.seed(sample_seed(seed, epoch, start + slot))
                outputs.append(tail(images[slot]))
        batches.append([default_collate(outputs), conversion.collate_labels(labels)])
        start += len(labels)
    return batches


def one_hot(label):
    return torch.nn.functional.one_hot(torch.tensor(label), 2)


@pytest.mark.parametrize("name", ["rotation+erase", "invert-v2", "function"])
def test_torchvision_hybrid_batches_are_their_tail_run_on_the_engines_prefix(image_folder, name):
    dataset = torch.utils.data.Subset(tv_folder(image_folder, name, target_transform=one_hot), [7, 0, 3, 5, 1])
    loader = fastload.DataLoader(dataset, batch_size=2, seed=3)
    assert loader.path.startswith("hybrid: ") and "; labels: target_transform one_hot in Python" in loader.path
    got, want = list(loader), torchvision_tail_on_the_native_prefix(dataset, seed=3, batch_size=2)
    assert len(got) == len(want) == 3
    for a, b in zip(got, want):
        assert equal(a, b)
    assert got[0][1].shape == (2, 2)  # one-hot labels, collated


def test_torchvision_hybrid_outputs_keep_torchvisions_dtypes_shapes_and_ranges(image_folder):
    dataset = tv_folder(image_folder, "rotation+erase", target_transform=one_hot)
    theirs = next(iter(torch.utils.data.DataLoader(dataset, batch_size=8)))
    ours = next(iter(fastload.DataLoader(dataset, batch_size=8)))
    assert type(ours) is type(theirs) and len(ours) == 2
    for a, b in zip(ours, theirs):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
    lowest, highest = (0 - max(MEAN)) / min(STD), (1 - min(MEAN)) / min(STD)
    assert lowest <= ours[0].min() < -1.0 and 1.0 < ours[0].max() <= highest


def test_a_target_transform_alone_keeps_the_images_native(image_folder, capsys):
    transform = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])
    plain = torchvision.datasets.ImageFolder(image_folder, transform=transform)
    dataset = torchvision.datasets.ImageFolder(image_folder, transform=transform, target_transform=one_hot)
    loader = fastload.DataLoader(dataset, batch_size=3, seed=1)
    assert loader.path.startswith("native: torchvision ImageFolder [RandomResizedCrop -> ToDtype]")
    assert loader.path.endswith("; labels: target_transform one_hot in Python")
    assert fastload.explain(dataset).splitlines()[-1].startswith("  verdict: native path, labels through")
    for (images, labels), (plain_images, plain_labels) in zip(loader, fastload.DataLoader(plain, batch_size=3, seed=1)):
        assert torch.equal(images, plain_images)
        assert torch.equal(labels, torch.nn.functional.one_hot(plain_labels, 2))


def test_torchvision_hybrid_loader_resumes_at_every_position(image_folder):
    from resume_helpers import check_resume_at_every_position

    dataset = torch.utils.data.Subset(tv_folder(image_folder, "rotation+erase"), [7, 0, 3, 5, 1, 2, 6])

    def make():
        return fastload.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2, seed=11,
                                   generator=torch.Generator().manual_seed(0))

    assert make().path.startswith("hybrid: ")
    reference = check_resume_at_every_position(make)
    assert len(reference) == 3 and reference[0][0].dtype == torch.float32


def test_torchvision_hybrid_draws_are_reproducible_and_differ_by_seed(image_folder):
    def epoch(seed):
        loader = fastload.DataLoader(tv_folder(image_folder, "rotation-v2"), batch_size=4, shuffle=True, seed=seed,
                                     generator=torch.Generator().manual_seed(0))
        return list(loader)

    torch.manual_seed(0)
    before = torch.get_rng_state()
    first, again = epoch(5), epoch(5)
    assert torch.equal(before, torch.get_rng_state())
    assert all(equal(a, b) for a, b in zip(first, again, strict=True))
    assert not equal(first, epoch(6))


def test_a_torchvision_tail_error_goes_through_on_error(folder_with_black):
    transform = T.Compose([T.CenterCrop(16), refuse_black, T.ToTensor()])
    dataset = torchvision.datasets.ImageFolder(folder_with_black, transform=transform)
    assert dataset.samples[2][0].endswith("img_1b.jpg")
    loader = fastload.DataLoader(dataset, batch_size=3)
    assert loader.path.startswith("hybrid: native [CenterCrop] + python [refuse_black -> ToTensor]"), loader.path
    with pytest.raises(ValueError, match="a black image") as info:
        list(loader)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "refuse_black" in notes and "sample 2" in notes and "img_1b.jpg" in notes, notes
    skipping = fastload.DataLoader(dataset, batch_size=3, on_error="skip")
    batches = list(skipping)
    assert [len(labels) for _, labels in batches] == [3, 3, 1]
    assert equal(batches[0][0][2], batches[1][0][0])  # sample 2 replaced by the next readable one, sample 3
    assert skipping.stats()["native"]["skipped"] == 1


def test_tail_on_chooses_where_the_tail_runs(image_folder):
    from fastload.native.hybrid_processes import ProcessHybridRunner
    from fastload.native.select import select_path

    args = dict(batch_size=2, collate_fn=None, num_workers=2, pin_memory=False, accelerate="auto", dtype=None,
                memory_format=None, on_error="raise", seed=1)
    dataset = tv_folder(image_folder, "rotation+erase")
    runners = {tail_on: select_path(dataset, tail_on=tail_on, **args)[0] for tail_on in ("auto", "threads", "processes")}
    try:
        assert type(runners["auto"]) is ProcessHybridRunner  # worker processes, as torch's num_workers
        inline = select_path(dataset, tail_on="auto", **{**args, "num_workers": 0})[0]
        assert type(inline) is HybridRunner and inline.parallel == "inline"
        inline.close()
        assert runners["threads"].parallel == "threads" and type(runners["processes"]) is ProcessHybridRunner
    finally:
        for runner in runners.values():
            runner.close()
    with pytest.raises(ValueError, match="expected tail_on in"):
        select_path(dataset, tail_on="gpu", **args)


def test_explain_of_a_fastload_dataset_with_a_tail_says_hybrid_as_its_loader(image_folder):
    dataset = fastload.ImageFolder(image_folder, transforms=recipe())
    report = fastload.explain(dataset)
    assert any(line.startswith("  python tail:   RandomRotation(") for line in report.splitlines())
    assert report.splitlines()[-1].startswith("  verdict: hybrid path: native prefix, then Python per sample")
    assert fastload.DataLoader(dataset, batch_size=2).path.startswith("hybrid: ")


def test_the_loader_takes_tail_on_and_refuses_unknown_places(image_folder):
    from fastload.native.hybrid_processes import ProcessHybridRunner

    dataset = tv_folder(image_folder, "rotation+erase")
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, tail_on="processes")
    try:
        assert loader.path.startswith("hybrid:") and type(loader._runner) is ProcessHybridRunner
    finally:
        loader.close()
    with pytest.raises(ValueError, match=r"expected tail_on in \('auto', 'inline', 'threads', 'processes'\)"):
        fastload.DataLoader(dataset, batch_size=2, tail_on="gpu")


# ---- the tail's conversion to a tensor (fastload.augment.tail.Conversion) ----------------

CONVERSIONS = {
    "v1 ToTensor+Normalize": [T.ToTensor(), T.Normalize(MEAN, STD)],
    "v1 PILToTensor+ConvertImageDtype+Normalize": [T.PILToTensor(), T.ConvertImageDtype(torch.float32),
                                                   T.Normalize(MEAN, STD)],
    "v2 PILToTensor+ToDtype+Normalize": [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                                         v2.Normalize(MEAN, STD)],
    "v2 ToDtype unscaled": [v2.PILToTensor(), v2.ToDtype(torch.float32)],
    "v1 ToTensor alone": [T.ToTensor()],
    "v1 PILToTensor alone": [T.PILToTensor()],
    "one-value Normalize": [T.ToTensor(), T.Normalize([0.5], [0.25])],
}


def pil_image(height, width, mode):
    from PIL import Image

    pixels = np.random.default_rng(height * 100 + width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("size", [(1, 1), (3, 5), (17, 16)])
@pytest.mark.parametrize("name", CONVERSIONS)
def test_the_tails_conversion_gives_torchvisions_tensor_bit_for_bit(name, size, mode):
    from fastload.augment.tail import Tail

    first = T.RandomInvert(1.0)  # a Python transform before the conversion, as in a hybrid tail
    transforms = [first] + CONVERSIONS[name]
    if mode == "L" and any(len(getattr(t, "mean", ())) == 3 for t in transforms):
        pytest.skip("torchvision refuses three means for one channel")
    image = pil_image(*size, mode)
    tail = Tail(transforms)
    assert tail._conversion is not None and tail._conversion[:2] == (1, len(transforms))
    want = image
    for transform in transforms:
        want = transform(want)
    got = tail(torch.from_numpy(np.array(image)).reshape(*size, -1).permute(2, 0, 1))
    assert type(got) is torch.Tensor and got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)


def test_the_conversion_run_stops_where_torchvision_would_do_more_than_convert():
    from fastload.augment.tail import Conversion

    def run(*transforms):
        found = Conversion.find([T.RandomInvert(1.0), *transforms])
        return None if found is None else found[:2]

    assert run(T.ToTensor(), T.Normalize(MEAN, STD), T.RandomErasing()) == (1, 3)
    assert run(T.ToTensor(), T.ConvertImageDtype(torch.float16)) == (1, 2)  # float to float: torchvision's
    assert run(T.PILToTensor(), T.Normalize(MEAN, STD)) == (1, 2)  # Normalize on uint8 raises in torchvision
    assert run(T.ToTensor(), T.Normalize(MEAN, STD), T.Normalize(MEAN, STD)) == (1, 3)
    assert run(v2.ToImage(), v2.ToDtype(torch.float32, scale=True)) is None  # (makes tv_tensors.Image)
    assert run(T.Normalize(MEAN, STD)) is None
    assert Conversion.find([T.ToTensor(), T.Normalize(MEAN, STD)]) is None  # nothing before it: native


@pytest.mark.parametrize("make", [lambda image: image.convert("RGBA"), lambda image: np.array(image)],
                         ids=["RGBA image", "numpy array"])
def test_a_tail_value_the_conversion_does_not_take_goes_through_torchvision(make):
    from fastload.augment.tail import Tail

    transforms = [T.Lambda(make), T.ToTensor(), T.Normalize([0.5], [0.25])]
    image = pil_image(5, 7, "RGB")
    want = image
    for transform in transforms:
        want = transform(want)
    got = Tail(transforms)(torch.from_numpy(np.array(image)).permute(2, 0, 1))
    assert torch.equal(got, want) and got.shape[0] == want.shape[0]


def test_held_hybrid_batches_are_never_overwritten_by_later_ones(image_folder):
    """The tail's batches reuse their memory only once nobody holds them."""
    transforms = [T.RandomResizedCrop(16), T.RandomRotation(15), T.ToTensor(), T.Normalize(MEAN, STD)]
    def loader():
        return fastload.DataLoader(fastload.ImageFolder(image_folder, transforms=transforms), batch_size=2, seed=5)

    copies = [[batch[0].clone(), batch[1]] for batch in loader()]
    held = list(loader())  # every batch kept alive at once
    assert len(held) == len(copies) == 4
    assert len({batch[0].data_ptr() for batch in held}) == 4
    for a, b in zip(held, copies):
        assert equal(a, b)


# ---- a prefix that stops fusing is cut there, not sent to the generic path --------------

UNFUSED = {  # name: (transforms, native prefix, python tail)
    "ColorJitter after ToTensor": ([T.RandomResizedCrop(16), T.ToTensor(), T.ColorJitter(0.4, 0.4, 0.4)],
                                   "RandomResizedCrop -> ToDtype", "ColorJitter"),
    "two ColorJitters": ([T.RandomResizedCrop(16), T.ColorJitter(0.4), T.ColorJitter(0.2), T.ToTensor()],
                         "RandomResizedCrop -> ColorJitter", "ColorJitter -> ToTensor"),
    "Normalize after RandomErasing": ([T.RandomResizedCrop(16), T.ToTensor(), T.RandomErasing(1.0),
                                       T.Normalize(MEAN, STD)],
                                      "RandomResizedCrop -> ToDtype -> RandomErasing", "Normalize"),
}


@pytest.mark.parametrize("name", UNFUSED)
def test_a_prefix_that_stops_fusing_is_cut_there_and_the_rest_runs_in_python(image_folder, name):
    transforms, prefix, tail = UNFUSED[name]
    dataset = torchvision.datasets.ImageFolder(image_folder, transform=T.Compose(transforms))
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path.startswith(f"hybrid: native [{prefix}] + python [{tail}]"), loader.path
    assert "does not fuse after the native transforms before it" in loader.path
    assert fastload.explain(dataset).splitlines()[-1].startswith("  verdict: hybrid path")
    images, labels = next(iter(loader))
    want = torch.stack([dataset[i][0] for i in range(4)])
    assert images.shape == want.shape and images.dtype == want.dtype


def test_a_prefix_that_never_fuses_stays_generic_with_the_reason(image_folder):
    dataset = torchvision.datasets.ImageFolder(image_folder, transform=T.Compose([T.Resize(12), T.ToTensor()]))
    assert fastload.DataLoader(dataset, batch_size=2).path.startswith("generic: Resize(")


@pytest.mark.parametrize("tail_on", ["inline", "threads"])
def test_the_tail_runs_on_one_intra_op_thread_and_the_loop_keeps_its_own(image_folder, tail_on):
    seen = []

    def record(image):
        seen.append(torch.get_num_threads())
        return image

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        dataset = torchvision.datasets.ImageFolder(image_folder, transform=T.Compose([T.RandomResizedCrop(16), record,
                                                                               T.ToTensor()]))
        for _ in fastload.DataLoader(dataset, batch_size=4, tail_on=tail_on):
            assert torch.get_num_threads() == 2  # the training loop's setting, between batches
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}


@pytest.mark.timeout(60)
def test_worker_processes_end_when_their_parent_ends_without_closing(image_folder):
    """A training process that os._exit()s (or is killed) with a hybrid loader open must not
    leave its tail workers behind."""
    import subprocess
    import sys
    import textwrap
    import time

    code = textwrap.dedent(f"""
        import multiprocessing, os, torchvision, fastload
        from torchvision import transforms as T
        dataset = torchvision.datasets.ImageFolder({image_folder!r}, transform=T.Compose(
            [T.RandomResizedCrop(16), T.RandomInvert(), T.ToTensor()]))
        loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, tail_on="processes")
        next(iter(loader))
        print(" ".join(str(child.pid) for child in multiprocessing.active_children()), flush=True)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert pids, out.stdout
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if os.path.exists(f"/proc/{p}") and
                 open(f"/proc/{p}/stat").read().split(")")[1].split()[0] != "Z"]
    assert not alive, f"tail workers {alive} outlived their parent"
