"""The benchmark's data: a generated, cached, ImageNet-like JPEG folder (and tar shards of it).

Stage: none of the library's; this only makes input for fastload-bench. ImageNet itself
cannot be downloaded here, so the bench draws images whose decode cost matches it: sizes
spread around 500x375 (widths 300-800, aspect 0.6-1.8, a fifth portrait), and content with
flat regions, edges and texture (gradient + shapes + blur + multi-octave texture + grain)
so that a quality-90 JPEG is ~100 KB, like ImageNet's ~110 KB. Huffman decoding dominates
JPEG decode time and scales with the compressed size, so the bytes per image matter more
than what the picture shows; pure noise would be 3x larger and featureless images 5x smaller.

Images are a pure function of (seed, index), drawn in a process pool, and cached under
`$FASTLOAD_CACHE` or `~/.cache/fastload/bench/<hash of the parameters>/`. The cache is
built in a temporary folder, gets its marker file last and is renamed into place, so a
half-written cache (killed run) is never used: it is rebuilt.

Example:
    >>> from fastload.bench.dataset import DatasetSpec, ensure_dataset
    >>> ds = ensure_dataset(DatasetSpec(images=8, classes=2), cache_dir="/tmp/fl-bench-doc")
    >>> ds.num_images, len(ds.classes)
    (8, 2)
"""

from __future__ import annotations

import dataclasses
import hashlib
import glob
import io
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from typing import List, Optional, Tuple

import numpy as np

# Bump when the drawing code changes: it is part of the cache key, so old caches are not
# mistaken for the new distribution.
GENERATOR_VERSION = 1
MARKER = "fastload-bench-dataset.json"
# Standard deviation of the grain in uint8 levels: tuned so the mean file is ~100 KB.
GRAIN = 12.0
# Depth of the brightness texture (fraction of the pixel value per unit of noise).
TEXTURE = 0.6


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What to generate. Every field is part of the cache key."""

    images: int = 2000
    classes: int = 10
    seed: int = 0
    quality: int = 90

    def key(self) -> str:
        blob = json.dumps({**dataclasses.asdict(self), "v": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclasses.dataclass
class BenchDataset:
    """A folder in torchvision ImageFolder layout (root/<class>/<name>.jpg) and its figures."""

    root: str
    num_images: int
    classes: List[str]
    mean_width: float
    mean_height: float
    mean_bytes: float
    generated: bool  # False: an existing --data folder or a cache hit

    def describe(self) -> str:
        return (
            f"{self.num_images} images in {len(self.classes)} classes at {self.root}: mean "
            f"{self.mean_width:.0f}x{self.mean_height:.0f} px, {self.mean_bytes / 1e3:.0f} KB"
        )


@dataclasses.dataclass
class FactoryDataset:
    """The user's own Dataset (--dataset module:function): what the table's data line says."""

    factory: str
    type_name: str
    num_images: Optional[int]  # len(dataset), when it has one
    root: str = ""  # no folder of the bench's: the function knows where its data is
    generated: bool = False

    def describe(self) -> str:
        size = f"{self.num_images} samples" if self.num_images is not None else "no len()"
        return f"{self.type_name} from {self.factory} ({size})"


def describe_factory(factory: str) -> FactoryDataset:
    """Calls the --dataset function once here (a clear error now rather than one per
    contender) and describes what it returned."""
    from fastload.bench.contenders import user_dataset

    dataset = user_dataset(factory)
    try:
        length: Optional[int] = len(dataset)
    except TypeError:
        length = None
    return FactoryDataset(factory, type(dataset).__name__, length)


def default_cache_dir() -> str:
    """The bench/ folder of fastload's cache ($FASTLOAD_CACHE, $XDG_CACHE_HOME/fastload or
    ~/.cache/fastload)."""
    from fastload.source.tar_index import default_cache_dir as fastload_cache_dir

    return os.path.join(fastload_cache_dir(), "bench")


def image_size(rng: np.random.Generator) -> Tuple[int, int]:
    """(width, height): long side 300-800 peaked near 460, aspect 1.0-1.8, 12% portrait.

    Gives a mean near 500x375 like ImageNet's train set, whose photos are mostly 500 px
    on the long side at 4:3 or 3:2, with some portraits.
    """
    long_side = rng.triangular(300, 460, 800)
    aspect = rng.uniform(1.3, 1.6) if rng.random() < 0.7 else rng.uniform(1.0, 1.8)
    portrait = rng.random() < 0.12
    if portrait:  # keep portraits at aspect >= 0.6
        aspect = min(aspect, 1.0 / 0.6)
    short_side = max(long_side / aspect, 200.0)
    if portrait:
        return int(round(short_side)), int(round(long_side))
    return int(round(long_side)), int(round(short_side))


def _value_noise(rng: np.random.Generator, height: int, width: int, cell: int) -> np.ndarray:
    """Smooth random field in [0, 1): a coarse random grid upsampled bicubically."""
    from PIL import Image

    grid = rng.random((height // cell + 3, width // cell + 3), dtype=np.float32)
    field = Image.fromarray(grid, mode="F").resize(
        (width, height), Image.BICUBIC, box=(0, 0, width / cell, height / cell)
    )
    return np.asarray(field)


def draw_image(seed: int, index: int) -> np.ndarray:
    """The uint8 [H, W, 3] image number `index` of the set drawn with `seed` (pure function)."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng([seed, index])
    width, height = image_size(rng)
    # Background: a smooth gradient between four random corner colours.
    corners = rng.integers(0, 256, (2, 2, 3), dtype=np.uint8)
    image = Image.fromarray(corners).resize((width, height), Image.BILINEAR)
    # Objects: flat-coloured shapes give the hard edges of real photos.
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 16))):
        x0, y0 = rng.uniform(-0.2, 1.0) * width, rng.uniform(-0.2, 1.0) * height
        w, h = rng.uniform(0.05, 0.6) * width, rng.uniform(0.05, 0.6) * height
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse([x0, y0, x0 + w, y0 + h], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x0 + w, y0 + h], fill=colour)
        else:
            points = [(x0 + rng.uniform(0, w), y0 + rng.uniform(0, h)) for _ in range(int(rng.integers(3, 7)))]
            draw.polygon(points, fill=colour)
    # Mild optical blur: edges a few pixels wide, as a lens makes them.
    image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 1.5))))
    pixels = np.asarray(image, dtype=np.float32)
    # Texture: multi-octave value noise modulating brightness (surfaces, foliage), then
    # sensor-like grain. Its amplitudes set the JPEG size (~100 KB at q90).
    texture = np.zeros((height, width), np.float32)
    amplitude = 1.0
    for cell in (32, 8, 3, 2):
        texture += amplitude * (_value_noise(rng, height, width, cell) - 0.5)
        amplitude *= 0.7
    pixels = pixels * (1.0 + TEXTURE * texture[..., None])
    pixels += rng.normal(0.0, GRAIN, (height, width, 1)).astype(np.float32)
    pixels += rng.normal(0.0, GRAIN / 2, (height, width, 3)).astype(np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8)



def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def class_name(c: int) -> str:
    return f"class{c:03d}"


def file_path(root: str, spec: DatasetSpec, index: int) -> str:
    """Image i goes to class i % classes, so every class gets an equal share."""
    return os.path.join(root, class_name(index % spec.classes), f"img{index:06d}.jpg")


def _write_one(args) -> Tuple[int, int, int]:
    root, spec, index = args
    pixels = draw_image(spec.seed, index)
    data = encode_jpeg(pixels, spec.quality)
    with open(file_path(root, spec, index), "wb") as f:
        f.write(data)
    return pixels.shape[1], pixels.shape[0], len(data)


def ensure_dataset(
    spec: DatasetSpec,
    cache_dir: Optional[str] = None,
    processes: Optional[int] = None,
    progress: bool = False,
) -> BenchDataset:
    """Returns the cached dataset for `spec`, generating it first if it is missing or partial.

    Args:
        spec: how many images, classes, the seed and JPEG quality.
        cache_dir: parent folder of the caches (default: default_cache_dir()).
        processes: size of the process pool that draws the images (default: all cores).
        progress: show a tqdm bar while generating.

    Returns:
        BenchDataset whose root is an ImageFolder-layout folder.
    """
    if spec.images < 1 or spec.classes < 1:
        raise ValueError(
            f"fastload.bench: expected at least 1 image and 1 class, got images={spec.images}, "
            f"classes={spec.classes}. Pass --dataset-images N (N >= 1)."
        )
    cache_dir = cache_dir or default_cache_dir()
    final = os.path.join(cache_dir, spec.key())
    marker = os.path.join(final, MARKER)
    if os.path.exists(marker):
        with open(marker) as f:
            return BenchDataset(root=os.path.join(final, "images"), generated=False, **json.load(f))
    if os.path.exists(final):  # a cache without its marker is half-written: rebuild it
        shutil.rmtree(final, ignore_errors=True)

    os.makedirs(cache_dir, exist_ok=True)
    staging = f"{final}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    root = os.path.join(staging, "images")
    for c in range(spec.classes):
        os.makedirs(os.path.join(root, class_name(c)), exist_ok=True)
    jobs = [(root, spec, i) for i in range(spec.images)]
    processes = processes or os.cpu_count() or 1
    chunk = max(1, min(32, spec.images // (4 * processes)))
    if processes == 1 or spec.images < 16:
        results = map(_write_one, jobs)
        results = _progress(results, spec.images, progress)
        figures = list(results)
    else:
        with ProcessPoolExecutor(processes) as pool:
            figures = list(_progress(pool.map(_write_one, jobs, chunksize=chunk), spec.images, progress))
    summary = {
        "num_images": spec.images,
        "classes": [class_name(c) for c in range(spec.classes)],
        "mean_width": float(np.mean([f[0] for f in figures])),
        "mean_height": float(np.mean([f[1] for f in figures])),
        "mean_bytes": float(np.mean([f[2] for f in figures])),
    }
    with open(os.path.join(staging, MARKER), "w") as f:  # last: the cache is now complete
        json.dump(summary, f)
    try:
        os.rename(staging, final)
    except OSError:  # another process finished the same cache first: use theirs
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.exists(marker):
            raise
    return BenchDataset(root=os.path.join(final, "images"), generated=True, **summary)


def _progress(iterable, total, enabled):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc="generating images", unit="img", leave=False)


def describe_folder(root: str) -> BenchDataset:
    """Figures of an existing ImageFolder-layout folder (--data): classes, count, mean size."""
    from PIL import Image

    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if not classes:
        raise FileNotFoundError(
            f"fastload.bench: expected an ImageFolder layout (root/<class>/<image>), got no class "
            f"folders in {root}. Point --data at the folder that holds the class folders."
        )
    files = [e.path for c in classes for e in os.scandir(os.path.join(root, c)) if e.is_file()]
    sample = files[:: max(1, len(files) // 200)]  # sizes from a sample: headers only, cheap
    sizes = []
    for path in sample:
        try:
            with Image.open(path) as im:
                sizes.append(im.size)
        except Exception:  # not an image: the loaders will say so
            pass
    return BenchDataset(
        root=root,
        num_images=len(files),
        classes=classes,
        mean_width=float(np.mean([s[0] for s in sizes])) if sizes else 0.0,
        mean_height=float(np.mean([s[1] for s in sizes])) if sizes else 0.0,
        mean_bytes=float(np.mean([os.path.getsize(p) for p in sample])) if sample else 0.0,
        generated=False,
    )


def list_samples(root: str) -> List[Tuple[str, int]]:
    """(path, label) in torchvision ImageFolder order (fastload.datasets.folder's scan)."""
    from fastload.datasets.folder import find_classes, scan_folder

    paths, labels = scan_folder(root, find_classes(root)[1])
    return list(zip(paths, labels))


def ensure_shards(dataset: BenchDataset, shards: int = 8) -> List[str]:
    """WebDataset tar shards of `dataset` (cached beside it): <key>.jpg + <key>.cls members.

    Samples keep ImageFolder order, split into `shards` contiguous shards.
    Returns the shard paths.
    """
    base = os.path.join(os.path.dirname(os.path.abspath(dataset.root)), f"shards-{shards}")
    marker = os.path.join(base, "complete")
    samples = list_samples(dataset.root)
    shards = max(1, min(shards, len(samples)))
    if os.path.exists(marker):
        return sorted(glob.glob(os.path.join(base, "train-*.tar")))
    staging = f"{base}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    from fastload.datasets.write import write_shards

    written = write_shards(dataset.root, os.path.join(staging, "train-%04d.tar"),
                           maxcount=-(-len(samples) // shards), maxsize=float("inf"))
    paths = [os.path.join(base, os.path.basename(p)) for p in written]
    open(os.path.join(staging, "complete"), "w").close()
    shutil.rmtree(base, ignore_errors=True)
    try:
        os.rename(staging, base)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return paths
