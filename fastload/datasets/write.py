"""write_shards: a dataset or an image folder to WebDataset tar shards.

Encoded images are copied as they are whenever their bytes are at hand (an image folder,
fastload's own datasets, a torchvision ImageFolder without a transform): no decode, no
re-encode, no quality loss. Other datasets' images (PIL images, uint8 tensors) are encoded
once (JPEG quality 95 by default).
"""

from __future__ import annotations

import io
import os
from typing import Any, List, Tuple

import numpy as np

# The file endings kept as the member extension; anything else is re-encoded.
_EXT_OF_SUFFIX = {".jpg": "jpg", ".jpeg": "jpg", ".png": "png", ".webp": "webp"}


def write_shards(
    dataset_or_folder: Any,
    pattern: str,
    *,
    maxcount: int = 100_000,
    maxsize: float = 3e9,
    image_format: str = "jpg",
    quality: int = 95,
    verbose: bool = False,
) -> List[str]:
    """Writes samples as WebDataset shards: members `<key>.<jpg|png|webp>` and `<key>.cls`.

    Args:
        dataset_or_folder: an ImageFolder-layout directory (one subfolder per class; the
            files' bytes are written as they are, with the class index as label), or a
            dataset of (image, label) pairs: fastload.ImageFolder/FileList/TarShards and
            torchvision ImageFolder without transform (bytes copied), or any dataset whose
            images are PIL images, uint8 tensors [C, H, W] or numpy arrays [H, W, C]
            (encoded as image_format).
        pattern: shard file names with a printf field for the shard number,
            e.g. "out/train-%06d.tar" (the webdataset ShardWriter convention).
        maxcount: at most this many samples per shard.
        maxsize: at most about this many bytes per shard.
        image_format: "jpg" or "png", for images that must be encoded.
        quality: JPEG quality for encoded images.
        verbose: print a line per shard (webdataset's writer).

    Returns:
        The paths of the shards written, in order. Keys are the sample numbers
        ("000000042"), so dataset order is kept and keys never contain dots.

    Example:
        >>> paths = write_shards("data/train", "shards/train-%04d.tar", maxcount=1000)  # doctest: +SKIP
        >>> ds = fastload.TarShards(paths)                                               # doctest: +SKIP
    """
    import webdataset as wds

    if "%" not in pattern:
        raise ValueError(
            f"fastload.write_shards: expected a pattern with a printf field for the shard number "
            f"(e.g. 'out/train-%06d.tar'), got {pattern!r}.")
    if image_format not in ("jpg", "png"):
        raise ValueError(f"fastload.write_shards: expected image_format 'jpg' or 'png', got {image_format!r}.")
    folder = os.path.dirname(pattern)
    if folder:
        os.makedirs(folder, exist_ok=True)
    samples = _samples(dataset_or_folder, image_format, quality)
    written: List[str] = []
    with wds.ShardWriter(pattern, maxcount=maxcount, maxsize=maxsize, verbose=int(verbose)) as sink:
        for i, (data, ext, label) in enumerate(samples):
            sink.write({"__key__": f"{i:09d}", ext: data, "cls": str(int(label))})
            if sink.fname not in written:
                written.append(sink.fname)
        if not written:  # an empty dataset still leaves one (empty) shard behind
            written.append(sink.fname)
    return written


def _samples(source: Any, image_format: str, quality: int):
    """Yields (encoded bytes, member extension, label) for every sample."""
    if isinstance(source, (str, os.PathLike)):
        from fastload.datasets.folder import find_classes, scan_folder

        root = os.fspath(source)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"fastload.write_shards: expected an image folder, got no folder at {root!r}.")
        _, class_to_idx = find_classes(root)
        paths, labels = scan_folder(root, class_to_idx)
        for path, label in zip(paths, labels):
            yield _file_sample(path, label, image_format, quality)
        return

    from fastload.datasets.base import NativeDataset

    if isinstance(source, NativeDataset):
        index = source.index
        for i in range(len(source)):
            data = index.read(i)
            name = index.members[i] if index.members is not None else index.files[int(index.file_ids[i])]
            yield _bytes_sample(data, name, int(index.labels[i]), image_format, quality)
        return
    samples = getattr(source, "samples", None)
    if isinstance(samples, list) and getattr(source, "transform", None) is None and samples and \
            isinstance(samples[0], tuple) and isinstance(samples[0][0], str):
        # torchvision DatasetFolder/ImageFolder: the files themselves (target_transform kept).
        target_transform = getattr(source, "target_transform", None)
        for path, label in samples:
            yield _file_sample(path, target_transform(label) if target_transform else label, image_format, quality)
        return
    for i in range(len(source)):
        image, label = source[i][:2]
        yield _encode(image, image_format, quality), image_format, _as_label(label)


def _as_label(label: Any) -> int:
    if hasattr(label, "item"):
        label = label.item()
    return int(label)


def _file_sample(path: str, label: int, image_format: str, quality: int) -> Tuple[bytes, str, int]:
    with open(path, "rb") as f:
        data = f.read()
    return _bytes_sample(data, path, label, image_format, quality)


def _bytes_sample(data: bytes, name: str, label: int, image_format: str, quality: int) -> Tuple[bytes, str, int]:
    ext = _EXT_OF_SUFFIX.get(os.path.splitext(name)[1].lower())
    if ext is not None:
        return data, ext, int(label)
    from PIL import Image  # bmp, tiff, ...: re-encode once to a format the readers know

    with Image.open(io.BytesIO(data)) as im:
        return _encode(im, image_format, quality), image_format, int(label)


def _encode(image: Any, image_format: str, quality: int) -> bytes:
    from PIL import Image

    if isinstance(image, (bytes, bytearray)):
        return bytes(image)
    if not isinstance(image, Image.Image):
        import torch

        if isinstance(image, torch.Tensor):
            if image.dtype != torch.uint8 or image.dim() not in (2, 3):
                raise ValueError(
                    f"fastload.write_shards: expected images as uint8 tensors [C, H, W], got "
                    f"{image.dtype} {list(image.shape)}. Write the dataset without its transform.")
            array = image.numpy() if image.dim() == 2 else image.permute(1, 2, 0).numpy()
        else:
            array = np.asarray(image)
        if array.ndim == 3 and array.shape[2] == 1:
            array = array[:, :, 0]
        image = Image.fromarray(np.ascontiguousarray(array))
    out = io.BytesIO()
    if image_format == "jpg":
        image.convert("RGB" if image.mode not in ("L", "RGB") else image.mode).save(out, format="JPEG", quality=quality)
    else:
        image.save(out, format="PNG")
    return out.getvalue()
