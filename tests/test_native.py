"""The native path end to end: engine batches vs the plain PyTorch/PIL reference,
torchvision's own pipeline, determinism, bad input."""

import io
import os

import numpy as np
import pytest
import torch
from PIL import Image

import fastload
from fastload import _ext, ops
from fastload.augment.plan import build_plan
from fastload.errors import DecodeError
from fastload.native import NativeRunner

torchvision = pytest.importorskip("torchvision")
from torchvision.transforms import v2  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TRAIN = [ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.Normalize(MEAN, STD)]
# Kernel vs reference, both float32 from the same decoded pixels: only summation order
# differs (~1e-6 relative); normalised values span ~[-2.2, 2.7].
FLOAT_ATOL = 1e-4
# The folders' one PNG goes through PIL only in a build without libpng.
PNG_THROUGH_PIL = 0 if _ext.has_png() else 1
# PSNR floor for DCT-scaled decodes vs full decode + resize.
MIN_PSNR_DB = 35.0


def photo(height, width, seed):
    """Photo-like RGB: smooth gradients, hard-edged shapes, mild texture."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack([
        128 + 100 * np.sin(x / (width / 3 + 1) + seed),
        128 + 100 * np.cos(y / (height / 2 + 1) - seed),
        128 + 60 * np.sin((x + y) / (width / 5 + 1)),
    ], axis=-1)
    for _ in range(4):
        cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(2, max(3, min(height, width) // 3))
        image[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(0, 255, 3)
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def save(path, array, fmt="JPEG", mode=None, **kwargs):
    image = Image.fromarray(array)
    if mode:
        image = image.convert(mode)
    image.save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}), **kwargs)


@pytest.fixture(scope="module")
def mixed_format_folder(tmp_path_factory):
    """An ImageFolder of varied JPEGs: sizes, grayscale, CMYK, progressive, plus a PNG."""
    root = tmp_path_factory.mktemp("folder")
    sizes = [(48, 64), (64, 48), (97, 131), (33, 35), (120, 90), (75, 200), (200, 75), (64, 64)]
    for i, (h, w) in enumerate(sizes):
        cls = root / f"class{i % 3}"
        cls.mkdir(exist_ok=True)
        save(cls / f"img{i}.jpg", photo(h, w, i), progressive=(i == 4))
    save(root / "class0" / "gray.jpg", photo(50, 70, 10), mode="L")
    save(root / "class1" / "cmyk.jpg", photo(60, 40, 11), mode="CMYK")
    save(root / "class2" / "image.png", photo(40, 52, 12), fmt="PNG")
    return str(root)


def run(dataset, indices, *, epoch=0, threads=2, **plan_options):
    plan = build_plan(dataset.ops, seed=dataset.seed, **plan_options)
    runner = NativeRunner(dataset.index, plan, num_threads=threads)
    try:
        return runner.result(runner.submit(indices, epoch)), runner.stats()
    finally:
        runner.close()


def psnr(a, b):
    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def test_imagefolder_discovers_like_torchvision(mixed_format_folder):
    ours = fastload.ImageFolder(mixed_format_folder)
    theirs = torchvision.datasets.ImageFolder(mixed_format_folder)
    assert ours.classes == theirs.classes and ours.class_to_idx == theirs.class_to_idx
    assert ours.targets == theirs.targets
    assert [ours.index.source(i) for i in range(len(ours))] == [p for p, _ in theirs.samples]


def test_train_batch_without_dct_scaling_matches_reference(mixed_format_folder):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN, seed=3)
    indices = list(range(len(dataset)))
    (images, labels), stats = run(dataset, indices, epoch=2, dct_scaling=False)
    assert images.shape == (len(indices), 3, 32, 32) and images.dtype == torch.float32
    assert labels.tolist() == dataset.targets
    assert stats["pil_fallback"] == PNG_THROUGH_PIL  # the PNG
    dataset.set_epoch(2)
    for i in indices:
        expected, label = dataset[i]
        torch.testing.assert_close(images[i], expected, atol=FLOAT_ATOL, rtol=0, msg=f"sample {i}")


def test_dct_scaled_decode_stays_close(tmp_path):
    """Large images: the crop window is decoded at 1/2..1/8 scale; PSNR vs full decode."""
    for i in range(4):
        (tmp_path / "c").mkdir(exist_ok=True)
        save(tmp_path / "c" / f"{i}.jpg", photo(600 + 40 * i, 800, i))
    pipeline = [ops.Resize(64), ops.CenterCrop(56)]
    dataset = fastload.ImageFolder(str(tmp_path), ops=pipeline)
    (scaled, _), _ = run(dataset, [0, 1, 2, 3])
    (exact, _), _ = run(dataset, [0, 1, 2, 3], dct_scaling=False)
    assert scaled.dtype == torch.uint8
    assert not torch.equal(scaled, exact)  # scaling really happened
    for i in range(4):
        assert psnr(scaled[i], exact[i]) >= MIN_PSNR_DB


def test_eval_pipeline_matches_torchvision_pil(mixed_format_folder):
    """dct_scaling=False: within 2 uint8 levels of torchvision + PIL on >= 99.9% of values."""
    transform = v2.Compose([v2.Resize(40), v2.CenterCrop(36), v2.PILToTensor()])
    theirs = torchvision.datasets.ImageFolder(mixed_format_folder, transform=transform)
    ours = fastload.ImageFolder(mixed_format_folder, ops=[ops.Resize(40), ops.CenterCrop(36)])
    (images, labels), _ = run(ours, list(range(len(ours))), dct_scaling=False)
    expected = torch.stack([theirs[i][0] for i in range(len(theirs))])
    diff = (images.int() - expected.int()).abs()
    assert (diff <= 2).float().mean() >= 0.999, f"max diff {diff.max()}"
    assert labels.tolist() == theirs.targets


def test_same_batches_whatever_the_thread_count(mixed_format_folder):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN, seed=5)
    indices = [3, 1, 4, 1, 5, 9, 2, 6]
    (one, _), _ = run(dataset, indices, epoch=1, threads=1)
    (two, _), _ = run(dataset, indices, epoch=1, threads=2)
    (other_epoch, _), _ = run(dataset, indices, epoch=2, threads=2)
    assert torch.equal(one, two)
    assert torch.equal(one[1], one[3])  # the same sample, the same parameters
    assert not torch.equal(one, other_epoch)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.float16])
def test_dtypes_and_channels_last(mixed_format_folder, dtype):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.Resize((20, 30)), ops.ToDtype(dtype, scale=True)])
    plan = build_plan(dataset.ops)
    runner = NativeRunner(dataset.index, plan, memory_format=torch.channels_last)
    images, _ = runner.result(runner.submit([0, 1, 2], 0))
    runner.close()
    assert images.dtype == dtype and images.shape == (3, 3, 20, 30)
    assert images.is_contiguous(memory_format=torch.channels_last)
    dense = NativeRunner(dataset.index, plan)
    expected, _ = dense.result(dense.submit([0, 1, 2], 0))
    dense.close()
    assert torch.equal(images, expected)


@pytest.fixture
def bad_folder(tmp_path):
    cls = tmp_path / "a"
    cls.mkdir()
    good = io.BytesIO()
    Image.fromarray(photo(40, 40, 0)).save(good, "JPEG")
    data = good.getvalue()
    (cls / "0_good.jpg").write_bytes(data)
    (cls / "1_truncated.jpg").write_bytes(data[: len(data) // 2])
    (cls / "2_empty.jpg").write_bytes(b"")
    (cls / "3_text.jpg").write_bytes(b"this is not an image\n" * 10)
    (cls / "4_good.jpg").write_bytes(data)
    return str(tmp_path)


@pytest.mark.parametrize("slot,fragment", [(1, "1_truncated.jpg"), (2, "2_empty.jpg"), (3, "3_text.jpg")])
def test_bad_input_raises_decode_error_naming_the_file(bad_folder, slot, fragment):
    dataset = fastload.ImageFolder(bad_folder, ops=[ops.CenterCrop(16)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops))
    with pytest.raises(DecodeError, match=fragment) as info:
        runner.result(runner.submit([0, slot], 0))
    assert info.value.index == slot and info.value.source.endswith(fragment)
    runner.close()


def test_bad_input_skip_keeps_batch_size_and_counts(bad_folder):
    dataset = fastload.ImageFolder(bad_folder, ops=[ops.CenterCrop(16)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), on_error="skip")
    images, labels = runner.result(runner.submit([0, 1, 2, 3, 4], 0))
    assert images.shape[0] == 5 and labels.shape[0] == 5
    assert runner.stats()["skipped"] == 3  # the distinct bad files; each slot got the next good one
    assert torch.equal(images[1], images[4]) and torch.equal(images[0], images[4])
    runner.close()

    loader = fastload.DataLoader(dataset, batch_size=3, on_error="skip")
    assert [len(labels) for _, labels in loader] == [3, 2]
    # Batch [0, 1, 2] meets bad files 1, 2, 3 (as replacements); batch [3, 4] meets 3 again:
    # each bad file counts once.
    assert loader.stats(reset=True)["skipped"] == 3 and loader.stats()["skipped"] == 0


@pytest.mark.parametrize("shuffle", [False, True])
def test_skip_counts_each_bad_sample_once_per_epoch(tmp_path, shuffle):
    """Runs of bad files longer than a batch and across batch boundaries: the replacement
    searches of many batches pass the same bad files, each is still counted once."""
    good = io.BytesIO()
    Image.fromarray(photo(20, 20, 0)).save(good, "JPEG")
    cls = tmp_path / "c"
    cls.mkdir()
    bad = set(range(3, 13)) | set(range(20, 34)) | {40, 41, 45} | set(range(60, 65))  # 32 bad of 72
    for i in range(72):
        (cls / f"{i:03d}.jpg").write_bytes(b"not a jpeg at all" if i in bad else good.getvalue())
    assert len(bad) == 32
    dataset = fastload.ImageFolder(str(tmp_path), ops=[ops.CenterCrop(8)])
    loader = fastload.DataLoader(dataset, batch_size=8, shuffle=shuffle, on_error="skip",
                                 generator=torch.Generator().manual_seed(0))
    for epoch in range(2):
        assert sum(len(labels) for _, labels in loader) == 72  # bad slots are replaced
        assert loader.stats(reset=True)["skipped"] == 32, f"epoch {epoch}"


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_torchvision_transforms_in_a_fastload_dataset_become_fastload_ops(mixed_format_folder, api):
    T = torchvision.transforms if api == "v1" else v2
    transforms = [T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()]), T.ToTensor() if api == "v1"
                  else T.Compose([T.ToImage(), T.ToDtype(torch.float32, scale=True)]), T.Normalize(MEAN, STD)]
    converted = fastload.ImageFolder(mixed_format_folder, ops=transforms, seed=3)
    native = fastload.ImageFolder(mixed_format_folder,
                                  ops=TRAIN[:2] + [ops.ToDtype(torch.float32, scale=True), TRAIN[2]],
                                  seed=3)
    assert converted.ops == native.ops
    loader = fastload.DataLoader(converted, batch_size=4)
    assert loader.path.startswith("native"), loader.path
    for (images, labels), (want_images, want_labels) in zip(loader, fastload.DataLoader(native, batch_size=4),
                                                            strict=True):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


def test_a_transform_without_fastload_equivalent_is_refused_at_construction(mixed_format_folder):
    # First: with nothing native before it there is no native prefix to run (after a native
    # prefix it would start a Python tail, tests/test_hybrid.py).
    with pytest.raises(fastload.UnsupportedPipeline, match=r"transforms\[0\] is the torchvision transform Grayscale.*"
                                                         r"fastload\.transforms\.Resize.*torchvision\.datasets\.ImageFolder"):
        fastload.ImageFolder(mixed_format_folder, ops=[v2.Grayscale(), ops.CenterCrop(8)])
    with pytest.raises(fastload.UnsupportedPipeline, match="LANCZOS"):
        fastload.FileList([], ops=[torchvision.transforms.Resize(8, interpolation=v2.InterpolationMode.LANCZOS)])
    with pytest.raises(TypeError, match=r"expected transforms made of fastload's transforms .* at transforms\[0\]"):
        fastload.ImageFolder(mixed_format_folder, ops=[lambda image: image])


def test_decompression_bomb_limit(tmp_path):
    (tmp_path / "a").mkdir()
    save(tmp_path / "a" / "big.jpg", photo(300, 400, 0))
    dataset = fastload.ImageFolder(str(tmp_path), ops=[ops.CenterCrop(8)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops, max_pixels=300 * 400 - 1))
    with pytest.raises(DecodeError, match="big.jpg"):
        runner.result(runner.submit([0], 0))
    runner.close()


def test_zero_code_torchvision_imagefolder(mixed_format_folder):
    """An unchanged torchvision script: the loader runs it natively, same output contract."""
    transform = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip(), v2.ToImage(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    dataset = torchvision.datasets.ImageFolder(mixed_format_folder, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2)
    batches = list(loader)
    assert loader.path.startswith("native"), loader.path
    reference = next(iter(torch.utils.data.DataLoader(dataset, batch_size=4)))
    images, labels = batches[0]
    assert type(batches[0]) is type(reference)
    assert images.dtype == reference[0].dtype and images.shape == reference[0].shape
    assert labels.dtype == reference[1].dtype
    assert sum(len(b[1]) for b in batches) == len(dataset)
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == sorted(dataset.targets)
    # Normalised values span the same range as torchvision's.
    assert images.min() < -1.5 and images.max() > 1.5

    generic = fastload.DataLoader(dataset, batch_size=4, accelerate=False)
    assert generic.path.startswith("generic") and "accelerate=False" in generic.path
    grayscale = torchvision.datasets.ImageFolder(mixed_format_folder, transform=v2.Compose([v2.Grayscale(), transform]))
    assert "Grayscale" in fastload.DataLoader(grayscale, batch_size=4).path


def cpu_stand_in_for_nvjpeg(datas, channels, device):
    """ops.decode_jpeg_cuda's contract (whole images, raise on an undecodable sample),
    decoded on the CPU."""
    return [ops.decode_jpeg(d, channels=channels) for d in datas], torch.zeros(len(datas), dtype=torch.bool)


def on_the_cpu(runner):
    """The "gpu" mode's batched nvJPEG decode replaced by the CPU decoder (the seam is
    the producer's NvjpegDecoder.batch_decode); the packing and kernels stay the GPU's."""
    runner.producer.decoder.batch_decode = cpu_stand_in_for_nvjpeg
    return runner


def run_mode(dataset, indices, decode_on, epoch=0, **plan_options):
    """A runner with the device step on the CPU: the same packing and kernels as on a GPU."""
    runner = NativeRunner(dataset.index, build_plan(dataset.ops, seed=dataset.seed, **plan_options),
                          num_threads=2, decode_on=decode_on, device="cpu")
    if decode_on == "gpu":
        on_the_cpu(runner)
    try:
        return runner.result(runner.submit(indices, epoch)), runner.stats()
    finally:
        runner.close()


@pytest.mark.parametrize("decode_on", ["cpu+gpu", "gpu"])
@pytest.mark.parametrize("pipeline", [TRAIN, [ops.Resize(40), ops.CenterCrop(36), ops.Normalize(MEAN, STD)]])
def test_device_modes_match_the_cpu_mode(mixed_format_folder, decode_on, pipeline):
    """cpu+gpu (CPU decodes windows, device augments) and gpu (device decodes whole
    images) produce the batches the CPU path does; PNG and bad samples are repaired."""
    dataset = fastload.ImageFolder(mixed_format_folder, ops=pipeline, seed=4)
    indices = list(range(len(dataset)))
    (expected, labels), _ = run_mode(dataset, indices, "cpu", epoch=1, dct_scaling=False)
    (images, got_labels), stats = run_mode(dataset, indices, decode_on, epoch=1, dct_scaling=False)
    assert torch.equal(labels, got_labels)
    assert stats["pil_fallback"] == PNG_THROUGH_PIL
    torch.testing.assert_close(images, expected, atol=FLOAT_ATOL, rtol=0)


@pytest.mark.parametrize("decode_on", ["cpu+gpu", "gpu"])
def test_device_modes_apply_error_policy(bad_folder, decode_on):
    dataset = fastload.ImageFolder(bad_folder, ops=[ops.CenterCrop(16)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), decode_on=decode_on, device="cpu")
    if decode_on == "gpu":
        on_the_cpu(runner)
    with pytest.raises(DecodeError, match="1_truncated.jpg"):
        runner.result(runner.submit([0, 1], 0))
    runner.on_error = "skip"
    images, _ = runner.result(runner.submit([0, 1, 4], 0))
    assert torch.equal(images[1], images[0]) and runner.stats()["skipped"] == 3
    runner.close()


@pytest.mark.parametrize("decode_on, producer", [("cpu", "CpuProducer"), ("cpu+gpu", "CpuGpuProducer"),
                                                  ("gpu", "GpuProducer")])
def test_each_decode_on_mode_runs_on_its_own_producer(mixed_format_folder, decode_on, producer):
    from fastload.decode.nvjpeg import NvjpegDecoder

    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.CenterCrop(16)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), decode_on=decode_on, device="cpu")
    try:
        assert type(runner.producer).__name__ == producer and runner.decode_on == decode_on
        assert isinstance(getattr(runner.producer, "decoder", None), NvjpegDecoder) == (decode_on == "gpu")
    finally:
        runner.close()


def test_runner_arguments_are_checked_with_the_common_messages(mixed_format_folder):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.CenterCrop(16)])
    plan = build_plan(dataset.ops)
    with pytest.raises(ValueError, match=r"fastload\.NativeRunner: expected on_error='raise' or 'skip', got 'ignore'"):
        NativeRunner(dataset.index, plan, on_error="ignore")
    with pytest.raises(ValueError, match=r"fastload\.NativeRunner: expected decode_on in \('cpu', 'cpu\+gpu', 'gpu'\)"):
        NativeRunner(dataset.index, plan, decode_on="auto")
    runner = NativeRunner(dataset.index, plan)
    with pytest.raises(ValueError, match="got 'ignore'"):
        runner.on_error = "ignore"
    assert runner.on_error == "raise"
    runner.close()


def test_runner_stats_keys_end_in_s_for_seconds(mixed_format_folder):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.CenterCrop(16)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), num_threads=2)
    runner.result(runner.submit([0, 1, 2], 0))
    stats = runner.stats(reset=True)
    assert set(stats) == {"images", "batches", "skipped", "skipped_samples", "pil_fallback", "gpu_cpu_fallback",
                          "engine_s", "wait_s", "threads", "queue_depth", "stages_s", "thread_stages_s", "cpu_s"}
    assert (stats["images"], stats["batches"], stats["threads"], stats["queue_depth"]) == (3, 1, 2, 1.0)
    assert stats["engine_s"] >= stats["wait_s"] >= 0.0
    after = runner.stats()
    assert after == dict(stats, images=0, batches=0, engine_s=0.0, wait_s=0.0, queue_depth=None,
                         stages_s=after["stages_s"], thread_stages_s=after["thread_stages_s"], cpu_s=after["cpu_s"])
    assert set(after["stages_s"].values()) == {0.0}
    runner.close()


def test_native_loader_resumes_bit_for_bit_with_a_drawn_seed(mixed_format_folder):
    """seed=None draws the augmentation seed; the state carries it, so a new process
    (whose global RNG differs) resumes with the same crops and flips."""
    from resume_helpers import check_resume_at_every_position

    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN)

    def make():
        # The helper builds the reference, then per position a run to interrupt (odd
        # calls) and a fresh process to resume in (even calls): only the last one starts
        # from another global seed, so only the state can give it the same augmentation.
        call = len(make.calls)
        make.calls.append(call)
        torch.manual_seed(0 if call == 0 or call % 2 else 1000 + call)
        return fastload.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2,
                                   generator=torch.Generator().manual_seed(0))
    make.calls = []
    reference = check_resume_at_every_position(make)
    assert len(reference) == 4 and reference[0][0].dtype == torch.float32


def test_loader_dct_scaling_option_reaches_the_engine(tmp_path):
    (tmp_path / "c").mkdir()
    save(tmp_path / "c" / "big.jpg", photo(640, 800, 1))
    dataset = fastload.ImageFolder(str(tmp_path), ops=[ops.Resize(64), ops.CenterCrop(56)])
    scaled = next(iter(fastload.DataLoader(dataset, batch_size=1)))[0]
    exact = next(iter(fastload.DataLoader(dataset, batch_size=1, dct_scaling=False)))[0]
    (expected, _), _ = run(dataset, [0], dct_scaling=False)
    assert torch.equal(exact, expected) and not torch.equal(scaled, exact)


def test_generic_twin_of_a_native_dataset_gives_the_native_batches(mixed_format_folder):
    """accelerate=False runs dataset[i] (PIL + reference) with the epoch and the seed the
    native path uses: the same batches, to float rounding."""
    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.RandomResizedCrop(24), ops.RandomHorizontalFlip(),
                                                ops.Normalize(MEAN, STD)], seed=11)

    def epochs(accelerate):
        loader = fastload.DataLoader(dataset, batch_size=4, accelerate=accelerate, dct_scaling=False)
        assert loader.path.startswith("native" if accelerate else "generic")
        out = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            out.append(list(loader))
        return out

    for native_epoch, generic_epoch in zip(epochs("auto"), epochs(False), strict=True):
        for (images, labels), (twin_images, twin_labels) in zip(native_epoch, generic_epoch, strict=True):
            torch.testing.assert_close(twin_images, images, atol=FLOAT_ATOL, rtol=0)
            assert torch.equal(twin_labels, labels)


def test_breaking_out_of_an_epoch_releases_the_batches_in_flight(mixed_format_folder):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN)
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, prefetch_factor=2)
    for epoch in range(3):
        for _ in loader:
            break  # 4 batches were submitted ahead
    runner = loader._runner
    assert runner._pending == {}  # nothing left holding engine jobs or output buffers
    assert len(list(loader)) == len(loader)


def test_native_feed_yields_the_runners_batches_in_order_and_releases_them_on_close(mixed_format_folder):
    from fastload.native import NativeFeed

    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.CenterCrop(16)])
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), num_threads=2)
    batches = [[0, 1, 2], [3, 4], [5, 6, 7], [8]]
    got = list(NativeFeed(runner, iter(batches), epoch=0, depth=2))
    assert [tag for _, tag in got] == [(3, 1), (2, 2), (3, 3), (1, 4)]
    for (images, labels), indices in zip((batch for batch, _ in got), batches, strict=True):
        want, want_labels = runner.result(runner.submit(indices, 0))
        assert torch.equal(images, want) and torch.equal(labels, want_labels)
    feed = NativeFeed(runner, iter(batches), epoch=0, depth=3)
    next(feed)
    assert len(runner._pending) == 2  # submitted ahead
    feed.close()
    assert runner._pending == {}
    runner.close()


def test_dtypes_the_engine_cannot_write_fall_back_or_convert(mixed_format_folder):
    transform = v2.Compose([v2.CenterCrop(8), v2.ToImage(), v2.ToDtype(torch.float64, scale=True)])
    dataset = torchvision.datasets.ImageFolder(mixed_format_folder, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert "float64" in loader.path and next(iter(loader))[0].dtype == torch.float64
    dataset = fastload.ImageFolder(mixed_format_folder, ops=[ops.CenterCrop(8), ops.Normalize(MEAN, STD)])
    loader = fastload.DataLoader(dataset, batch_size=4, dtype=torch.float64)
    assert loader.path.startswith("native") and next(iter(loader))[0].dtype == torch.float64


def test_distributed_true_refuses_data_it_cannot_shard():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(ValueError, match="distributed=True.*IterableDataset"):
        fastload.DataLoader(Stream(), batch_size=2, distributed=True)


def test_without_the_extension_native_datasets_fail_early_and_torchvision_falls_back(mixed_format_folder, monkeypatch):
    from fastload import _ext

    monkeypatch.setattr(_ext, "load_extension", lambda: (None, ImportError("fastload._C not built")))
    with pytest.raises(_ext.NotBuiltError, match="make build"):
        fastload.DataLoader(fastload.ImageFolder(mixed_format_folder, ops=TRAIN), batch_size=4)
    transform = v2.Compose([v2.CenterCrop(8), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    dataset = torchvision.datasets.ImageFolder(mixed_format_folder, transform=transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.path == "generic: fastload._C is not built (make build)"
    assert next(iter(loader))[0].shape == (4, 3, 8, 8)


def test_batch_memory_is_reused_only_once_nobody_holds_it(mixed_format_folder):
    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN)
    runner = NativeRunner(dataset.index, build_plan(dataset.ops))
    first, _ = runner.result(runner.submit([0, 1], 0))
    view = first[1, 0]  # a view keeps the memory as surely as the batch does
    address = first.data_ptr()
    del first
    second, _ = runner.result(runner.submit([2, 3], 0))
    assert second.data_ptr() != address
    expected = view.clone()
    del second
    third, _ = runner.result(runner.submit([4, 5], 0))
    assert torch.equal(view, expected)  # never overwritten while held
    del view
    third_address = third.data_ptr()
    del third
    fourth, _ = runner.result(runner.submit([0, 1], 0))
    assert fourth.data_ptr() in (address, third_address)  # dropped memory comes back
    runner.close()


def wait_for_child(pid, timeout=30.0):
    """The exit code of a forked child (negative: killed by that signal); fails the test
    if the child is still running after `timeout` seconds (a hang)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child hung (killed after {timeout} s)")


def test_a_forked_child_can_drop_the_engine_without_hanging(mixed_format_folder):
    """DataLoader workers are forked: an engine (or a batch in flight) collected there must
    neither join threads that do not exist in the child nor wait for their jobs."""
    import gc

    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN)
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), num_threads=2)
    batch = list(range(len(dataset))) * 300  # long enough to be in flight at the fork
    ticket = runner.submit(batch, 0)
    pid = os.fork()
    if pid == 0:  # the child: drop everything, as garbage collection in a worker would
        code = 1  # an exception in the child must fail the test, not exit 0
        try:
            runner.discard(ticket)
            runner.close()
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    assert wait_for_child(pid) == 0
    images, _ = runner.result(ticket)  # the parent's engine is untouched
    assert images.shape[0] == len(batch)
    runner.close()


def test_a_forked_child_can_destroy_an_inherited_idle_engine(mixed_format_folder):
    """A loader made before the fork, its threads idle (waiting for work) at the fork:
    the child drops its copy (as a DataLoader worker's garbage collection would), so the
    engine is destroyed there, and must not wait on what the parent's threads wait on."""
    import gc

    dataset = fastload.ImageFolder(mixed_format_folder, ops=TRAIN)
    runner = NativeRunner(dataset.index, build_plan(dataset.ops), num_threads=3)
    runner.result(runner.submit([0, 1, 2], 0))  # the workers ran, and now wait idle
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            del runner  # the last reference: ~BatchEngine runs here
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    assert wait_for_child(pid) == 0
    images, _ = runner.result(runner.submit([3, 4], 0))  # the parent's engine still works
    assert images.shape[0] == 2
    runner.close()


@pytest.mark.parametrize("kwargs", [dict(), dict(drop_last=True), dict(num_workers=2), dict(accelerate=False),
                                    dict(accelerate=False, num_workers=2)])
def test_an_empty_file_list_yields_nothing(kwargs):
    """A split or a rank without files: no batch, len() == 0, like torch."""
    dataset = fastload.FileList([], ops=[ops.Resize(8), ops.CenterCrop(8)])
    loader = fastload.DataLoader(dataset, batch_size=4, **kwargs)
    assert loader.path.startswith("generic" if kwargs.get("accelerate") is False else "native"), loader.path
    for _ in range(2):
        assert len(loader) == 0 and list(loader) == []
    assert loader.stats()["batches"] == 0


def test_an_empty_file_list_yields_nothing_on_every_rank(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        loader = fastload.DataLoader(fastload.FileList([], ops=[ops.CenterCrop(8)]), batch_size=4)
        assert loader.path.startswith("native") and len(loader) == 0 and list(loader) == []
