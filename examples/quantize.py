"""Static post-training int8 quantization of a torchvision model, calibrated on a fastload
loader, with fp32 vs int8 accuracy and latency.

    python examples/quantize.py --data path/to/imagenet --weights IMAGENET1K_V1 \\
        --calib-images 1024 --eval-images 10000
    python examples/quantize.py --tiny    # a small generated folder, a random ResNet-18, CPU

--data is an ImageFolder root with train/ and val/ (or one folder used for both): the
calibration set is a fixed, evenly strided subset of train/ (every class, no shuffle), the
accuracy is measured on val/. --weights names torchvision's float weights for --arch
(downloaded by torchvision); --checkpoint loads a float state_dict of your own instead.
On random weights (--tiny) accuracy means nothing: the top-1 agreement between the fp32
and the int8 model is what to read there.

The workflow is eager-mode static quantization: a quantizable torchvision model
(torchvision.models.quantization, quantize=False) in eval mode, fuse_model() (conv + bn +
relu), the x86 backend (torch.backends.quantized.engine = "x86" and its qconfig),
torch.ao.quantization.prepare (observers), calibration (forward passes over the
calibration loader), torch.ao.quantization.convert (int8 modules). Int8 eager models run
on the CPU only.

In torch 2.14 this API still works, but it is deprecated: torch.ao.quantization's calls
warn that it will be removed and point to torchao, and the quantized tensor types it
builds on (torch.quint8, torch.qint8) warn that they will go too (the script silences
both warnings). torch recommends torchao's pt2e flow for static quantization
(torch.export, prepare_pt2e / convert_pt2e with X86InductorQuantizer, then torch.compile
for the int8 kernels). `--api pt2e` runs that flow on the same calibration loader when
torchao is installed (pip install torchao); its int8 latency is measured after
torch.compile (the first call compiles, which takes a while).

Calibration needs float32 batches, exactly what inference will see: leave the loader's
`dtype=` unset (not torch.bfloat16, which AMP training uses), or the observers record
bf16-rounded ranges. The calibration loader is deterministic (shuffle=False, eval
transforms, a fixed sampler): the script hashes every calibration batch on two passes and
stops if they differ, since a calibration that changes from run to run makes the int8
model irreproducible.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import statistics
import tempfile
import time
import warnings

import torch
import torchvision
from torchvision.models import quantization as quantizable
from torchvision.transforms import v2

from fastload import DataLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def eval_transform(image_size: int) -> v2.Compose:
    return v2.Compose([v2.Resize(image_size * 8 // 7), v2.CenterCrop(image_size), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def strided(n: int, count: int | None) -> range | None:
    """`count` indices spread evenly over range(n) (every class of a sorted ImageFolder),
    or None (all of them, in order)."""
    if count is None or count >= n:
        return None
    return range(0, n, n // count)[:count]


def calibration_loader(root: str, image_size: int, batch_size: int, images: int | None, workers: int) -> DataLoader:
    """The calibration batches: eval transforms, no shuffle, a fixed subset, float32."""
    dataset = torchvision.datasets.ImageFolder(root, transform=eval_transform(image_size))
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=strided(len(dataset), images),
                      num_workers=workers)  # no dtype=: calibration sees float32, as inference does


def fingerprint(batches) -> tuple[str, int]:
    """(sha256 over every batch's labels and pixels, batch count) of an iterable of
    (images, labels) batches: equal only for the same samples, transforms and order."""
    digest, count = hashlib.sha256(), 0
    for images, labels in batches:
        digest.update(labels.cpu().contiguous().numpy().tobytes())
        digest.update(images.cpu().contiguous().numpy().tobytes())
        count += 1
    return digest.hexdigest()[:16], count


@torch.inference_mode()
def calibrate(model: torch.nn.Module, loader: DataLoader) -> tuple[str, int]:
    """Runs the prepared model over the loader (its observers record activation ranges);
    returns the fingerprint of the batches it saw."""
    def feed():
        for images, labels in loader:
            if images.dtype != torch.float32:
                raise TypeError(f"calibration needs float32 batches, got {images.dtype} (drop the loader's dtype=)")
            model(images)
            yield images, labels
    return fingerprint(feed())


@torch.inference_mode()
def evaluate(models: dict, loader: DataLoader) -> dict:
    """Top-1 accuracy of each model and the fraction of samples where its top-1 equals the
    first model's, over one pass of the loader."""
    names = list(models)
    correct, agree, seen = dict.fromkeys(names, 0), dict.fromkeys(names, 0), 0
    for images, labels in loader:
        predictions = {name: model(images).argmax(1) for name, model in models.items()}
        for name in names:
            correct[name] += int((predictions[name] == labels).sum())
            agree[name] += int((predictions[name] == predictions[names[0]]).sum())
        seen += labels.numel()
    return {name: {"top1": correct[name] / max(seen, 1), "agreement": agree[name] / max(seen, 1)} for name in names}


@torch.inference_mode()
def latency_ms(model: torch.nn.Module, images: torch.Tensor, runs: int) -> float:
    """Median milliseconds of one forward pass over `images`, after two warm-up calls."""
    for _ in range(2):
        model(images)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        model(images)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def quantize_eager(float_model: torch.nn.Module, loader: DataLoader) -> tuple[torch.nn.Module, tuple[str, int]]:
    """torch.ao.quantization eager mode: fuse, prepare, calibrate, convert (x86 backend)."""
    torch.backends.quantized.engine = "x86"
    model = copy.deepcopy(float_model).eval()
    model.fuse_model()  # conv + bn (+ relu) into one module: fewer quantize steps, better accuracy
    model.qconfig = torch.ao.quantization.get_default_qconfig("x86")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*reduce_range will be deprecated")
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*are deprecated")
        torch.ao.quantization.prepare(model, inplace=True)
        seen = calibrate(model, loader)
        torch.ao.quantization.convert(model, inplace=True)
    return model, seen


def quantize_pt2e(float_model: torch.nn.Module, loader: DataLoader,
                  example: torch.Tensor) -> tuple[torch.nn.Module, tuple[str, int]]:
    """torchao's pt2e flow (what torch recommends now): export, prepare, calibrate, convert,
    then torch.compile lowers the quantized graph to int8 kernels."""
    try:
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    except ImportError as error:
        raise SystemExit(f"--api pt2e needs torchao (pip install torchao): {error}") from None
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    batch = torch.export.Dim("batch", min=1)  # any batch size: the last batch may be smaller
    exported = torch.export.export(copy.deepcopy(float_model).eval(), (example,),
                                   dynamic_shapes=({0: batch},)).module()
    prepared = prepare_pt2e(exported, quantizer)
    seen = calibrate(prepared, loader)
    converted = convert_pt2e(prepared)
    torch._inductor.config.freezing = True  # constant weights: inductor prepacks them for int8 kernels
    return torch.compile(converted), seen


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="ImageFolder root with train/ and val/, or one folder for both")
    parser.add_argument("--tiny", action="store_true", help="small generated data, random weights, CPU")
    parser.add_argument("--arch", default="resnet18", choices=["resnet18", "resnet50", "mobilenet_v2",
                                                               "mobilenet_v3_large", "shufflenet_v2_x1_0"])
    parser.add_argument("--weights", help="torchvision float weights for --arch, e.g. IMAGENET1K_V1")
    parser.add_argument("--checkpoint", help="a float state_dict of your own for --arch")
    parser.add_argument("--api", choices=["eager", "pt2e"], default="eager",
                        help="eager: torch.ao.quantization (deprecated, works in torch 2.14); pt2e: torchao")
    parser.add_argument("--calib-images", type=int, default=1024, help="calibration subset of train/ (0: all)")
    parser.add_argument("--eval-images", type=int, default=None, help="evaluation subset of val/ (default: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--out", help="save the int8 model's state_dict here (eager api)")
    args = parser.parse_args(argv)

    if args.tiny:
        if not args.data:
            from train_amp import make_tiny_folder  # the examples' tiny data generator

            args.data = make_tiny_folder(tempfile.mkdtemp(prefix="fastload-quantize-"), classes=2, per_class=16)
        args.image_size, args.batch_size = min(args.image_size, 32), min(args.batch_size, 8)
        args.workers, args.latency_runs = min(args.workers, 2), min(args.latency_runs, 5)
        torch.manual_seed(0)  # the same random weights every run
    if not args.data:
        parser.error("--data is required (or --tiny)")
    train_root = os.path.join(args.data, "train") if os.path.isdir(os.path.join(args.data, "train")) else args.data
    val_root = os.path.join(args.data, "val") if os.path.isdir(os.path.join(args.data, "val")) else train_root

    calib_loader = calibration_loader(train_root, args.image_size, args.batch_size, args.calib_images or None,
                                      args.workers)
    val_set = torchvision.datasets.ImageFolder(val_root, transform=eval_transform(args.image_size))
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False,
                            sampler=strided(len(val_set), args.eval_images), num_workers=args.workers)
    print(f"calibration loader: {calib_loader.path}\nval loader:         {val_loader.path}")

    builder = getattr(quantizable, args.arch)
    if args.weights:
        float_model = builder(weights=args.weights, quantize=False)
    else:
        float_model = builder(weights=None, quantize=False, num_classes=len(val_set.classes))
    if args.checkpoint:
        float_model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    float_model.eval()

    # The same batches on every pass: hash them once before calibrating, once while calibrating.
    expected = fingerprint(calib_loader)
    started = time.perf_counter()
    example = next(iter(val_loader))[0]
    if args.api == "eager":
        int8_model, seen = quantize_eager(float_model, calib_loader)
    else:
        int8_model, seen = quantize_pt2e(float_model, calib_loader, example)
    if seen != expected:
        raise RuntimeError(f"the calibration loader yielded different batches on two passes: {expected} then {seen}")
    print(f"calibration: {seen[1]} batches, fingerprint {seen[0]} (identical on 2 passes); "
          f"{args.api} quantization in {time.perf_counter() - started:.1f} s")

    results = evaluate({"fp32": float_model, "int8": int8_model}, val_loader)
    fp32_ms = latency_ms(float_model, example, args.latency_runs)
    int8_ms = latency_ms(int8_model, example, args.latency_runs)
    print(f"top-1 accuracy: fp32 {results['fp32']['top1']:.2%}, int8 {results['int8']['top1']:.2%}; "
          f"int8 agrees with fp32 on {results['int8']['agreement']:.2%} of {len(val_loader.sampler)} images")
    print(f"latency, batch of {example.shape[0]} at {example.shape[-1]}px, {torch.get_num_threads()} threads: "
          f"fp32 {fp32_ms:.2f} ms, int8 {int8_ms:.2f} ms ({fp32_ms / int8_ms:.2f}x)")
    print(calib_loader.stats())
    if args.out and args.api == "eager":
        # To load it: the same quantizable model, fuse_model(), qconfig, prepare, convert
        # (no calibration needed: the scales are in the state), then load_state_dict.
        torch.save(int8_model.state_dict(), args.out)
        print(f"saved {args.out}")
    return {"fingerprint": seen[0], "calibration_batches": seen[1], "fp32": results["fp32"],
            "int8": results["int8"], "fp32_ms": fp32_ms, "int8_ms": int8_ms, "path": calib_loader.path}


if __name__ == "__main__":
    main()
