"""A map-style dataset of the user's own class, learnt by running its own `__getitem__`.

fastload does not guess what arbitrary `__getitem__` code returns: it calls it, for each
index, under a tracer, and keeps what it can see through:

- `PIL.Image.open(path)` (a str or os.PathLike path) or `PIL.Image.open(f)` (a file
  opened with `open(path, "rb")`, not yet read) returns a `TracedImage` that records the
  path and reads nothing. `.convert("RGB")`, `.load()`, `.copy()`, `.close()`, `.filename`,
  `.mode` after `.convert("RGB")` and `with` keep it traced;
- `cv2.imread` + `cv2.cvtColor(BGR2RGB)`, `np.array(image)` of an image converted to RGB,
  torchvision.io's `read_image` / `decode_image` / `decode_jpeg(read_file(path))`, and
  `open(path, "rb").read()` into
  `Image.open(io.BytesIO(data))` are followed too (fastload/trace/openers.py: lazy arrays,
  tensors and bytes, each with its own checks and refusals);
- a torchvision (v1, v2) or timm transform, or an nn.Sequential, called with the traced
  image alone, or an albumentations transform called with `image=` the traced array
  alone (compat/albumentations.py), returns a `TracedOutput` standing for "the
  transform's output for this sample" (albumentations': `{"image": output}`) and records
  the transform object (the transform is not run);
- the sample returned is kept as it is, the output replaced by a slot the engine's
  batch fills. Labels (an int, a tensor, a dict entry, ...) and other fields are whatever
  `__getitem__` returned, collated per batch with torch's default_collate.

The result is the same `Analysis` a torchvision ImageFolder gets (a SampleIndex of paths
+ one transform pipeline), so the engine, resume, DDP and stats run it unchanged; the
chain reads "traced <Class>.__getitem__". A sample `(output, int label)` (or a 0-d int64
tensor label) keeps its labels in the index; any other structure (a dict, extra fields,
other label types) is rebuilt per batch from the recorded values (LazyTrace.__call__ in
fastload/trace/lazy.py, or the user's collate_fn around them: collate.py):
the dataset must then be the loader's own dataset, not inside a Subset or ConcatDataset.

What the tracer does not see through sends the dataset to the generic path, the reason
naming the user's file:line:

- the image used any other way before a transform fastload maps: pixels read
  (`np.asarray`, `.getpixel`), `.size` / `.width` / `.mode` before `.convert("RGB")` (they
  need the file's header), `.crop`, `.resize`, `.rotate`, ...; `.convert` to a mode other
  than "RGB" (the native pipeline makes 3 channels); a transform given an image not
  converted to RGB (an L, P or CMYK file would reach it in another mode);
- `Image.open` of bytes not read from a file in the call (a BytesIO of bytes kept in
  memory, an archive member): fastload reads files by path;
- a second transform applied to a transform's output, a transform's output used
  (`.float()`, `[0]`, ...), two images per sample, an image that does not reach the
  sample, the image returned without a transform;
- one image passed to K >= 2 transform calls (SimCLR's TwoCropTransform, DINO's global
  and local crops) runs as K image views made from one decode (`Analysis.outputs`),
  unless a view's transforms are not all native (no Python tail per view) or a view's
  output is not returned once;
- an image and a mask file passed to one joint transform call (torchvision v2 with a
  tv_tensors.Mask, albumentations' image= and mask=) run as the image and a mask that
  follows its geometry (fastload/trace/masks.py, masked.py: what is followed, what not);
- random numbers drawn outside the transforms (Python's `random`, numpy's global
  generator, torch's CPU generator, compared before and after; the caller's states are
  restored either way);
- an exception; index 0 traced twice returning different samples; another transform
  object than index 0's;
- a dataset that keeps what its call made (a cache): an image kept and used again, or
  the transform's output kept (the probes' effects on the dataset undone, so the generic
  path does not find the stand-in; fastload/trace/rollback.py). An image kept where no
  rollback reaches it (a module-level cache) turns into the real image (PIL.Image.open(path),
  converted as traced) on first use.

A dataset whose `__getitem__` opens no image with PIL (a TensorDataset, ...) keeps the
compat layer's reason unchanged. FASTLOAD_TRACE=0 in the environment turns the tracer off.

Not every index is traced when the loader is built: index 0 (twice) and 16 indexes spread
over the dataset are probed (a fixed cost, whatever the length; what the calls changed on
the dataset undone), and decide native or generic; a trace holds for one epoch, each
served index traced just before the engine is handed its batch, and a later index whose
trace disagrees runs through its own __getitem__ per sample (fastload/trace/
lazy.py; inside a Subset or ConcatDataset as lazily, through views.py).
A trace is an `__getitem__` call without decoding (no file is opened by path, a
file opened with `open(path, "rb")` is opened and closed): about 15 us per sample on a
quiet machine against ~1 ms for a decode (benchmarks/trace_lazy.py, benchmarks/RESULTS.md).

Example (Photos: a user's dataset, fastload/trace/doc_dataset.py):
    >>> from PIL import Image
    >>> from torchvision import transforms as T
    >>> from fastload.adapters import analyse
    >>> from fastload.trace.doc_dataset import Photos
    >>> photos = Photos(T.Compose([T.CenterCrop(4), T.ToTensor()]), length=1)
    >>> analysis = analyse(photos)
    >>> analysis.trace.prepare([0])  # (what the loader does as each epoch reaches the index)
    >>> analysis.chain, analysis.index.labels.tolist(), [type(s).__name__ for s in analysis.pipeline.native]
    ('traced Photos.__getitem__', [0], ['CenterCrop', 'ToDtype'])
    >>> class Peeks(Photos):
    ...     def __getitem__(self, i): return self.transform(Image.open(self.path).convert("RGB").crop((0, 0, 4, 4))), 7
    >>> analyse(Peeks(T.ToTensor())).reasons[0]
    "Peeks.__getitem__ (traced, index 0): uses the image's .crop before a transform ... at <doctest ...>:2"
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from fastload.compat.conversion import Analysis
from fastload.trace.lazy import LazyTrace, probe
from fastload.trace.probes import pipeline_of
from fastload.trace.state import TraceRefused
from fastload.trace.where import REFUSAL_FIX, enabled, where_defined


def _map_style(dataset: Any) -> bool:
    if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(type(dataset), "__getitem__"):
        return False
    try:
        len(dataset)
    except Exception:  # noqa: BLE001 - no usable __len__: nothing to trace
        return False
    return True


def trace_dataset(dataset: Any, refused: Analysis) -> Analysis:
    """The analysis of a dataset the compat layer does not recognise (`refused`, with its
    reasons), learnt from its own `__getitem__`: an Analysis with a `trace` when the trace sees
    through it; else `refused` with the trace's reason and the user's file:line (for a
    DatasetFolder, added to its reasons; for another class, in place of them); `refused`
    itself when the tracer is off or index 0 opens no image with PIL.

    Up front, index 0 (twice) and a few indexes spread over the dataset are traced
    (fastload.trace.lazy); the rest as the loader reaches them, also inside a
    Subset or ConcatDataset (the wrapper takes its indexes, and their samples' templates,
    through a LazyView: fastload.trace.views)."""
    if not enabled() or not _map_style(dataset):
        return refused
    name = type(dataset).__name__
    if getattr(type(dataset), "__getitems__", None) is not None:  # torch fetches batches through it instead
        return refused
    result = probe(dataset)
    if result is None:
        return refused
    if isinstance(result, TraceRefused):
        reason = f"{name}.__getitem__ (traced, index {result.index}): {result.why} at {result.where}"  # type: ignore
        folder = sys.modules.get("torchvision.datasets.folder")
        if folder is not None and isinstance(dataset, folder.DatasetFolder):
            return refused.refuse(reason, REFUSAL_FIX)
        out = Analysis(refused.chain, transform=refused.transform, pipeline=refused.pipeline,
                       wrappers=list(refused.wrappers))
        return out.refuse(reason, REFUSAL_FIX)
    return _analysis(dataset, result)


def _views_not_native(transforms: Any, out: Analysis) -> str:
    """Why the image views of a traced index (one transform per view, view 0's pipeline in
    `out`) cannot all run on the engine, or "" with `out.outputs` set: every view fully
    native (no Python tail), their specs as one Outputs."""
    from fastload.augment.views import Outputs

    pipelines = [out.pipeline] + [pipeline_of(t)[0] for t in transforms[1:]]
    for v, (transform, pipeline) in enumerate(zip(transforms, pipelines)):
        if pipeline.tail:
            return (f"passes the image to {len(transforms)} transform calls (views); view {v}'s "
                    f"{type(transform).__name__} is not native ({'; '.join(pipeline.blockers)}), and every view "
                    "must be")
    out.outputs = Outputs.of_views([list(p.native) for p in pipelines])
    return ""


def _analysis(dataset: Any, traced: LazyTrace) -> Analysis:
    """The Analysis of a dataset whose probes traced (traced: a LazyTrace)."""
    name = type(dataset).__name__
    if traced.first.masks:  # (an image and its mask: the mask's file table too)
        from fastload.trace.masked import MaskedTrace

        traced = MaskedTrace(dataset, traced.probes)
    out = Analysis(f"traced {name}.__getitem__")
    out.transform = traced.first.transform
    out.pipeline, out.wrappers = pipeline_of(out.transform)
    out.trace = traced
    if traced.first.masks:
        from fastload.trace.masked import masks_not_native

        why = masks_not_native(traced, out)
        if why:
            return out.refuse(f"{name}.__getitem__ (traced, index 0): {why} at {where_defined(dataset)}",
                              "use transforms fastload runs natively (fastload.explain lists them)")
    if traced.first.views:
        why = _views_not_native(traced.first.views, out)
        if why:
            return out.refuse(f"{name}.__getitem__ (traced, index 0): {why} at {where_defined(dataset)}",
                              "make every view's transforms ones fastload runs natively (fastload.explain "
                              "lists them)")
    # (inside a Subset or ConcatDataset the wrapper takes this index's rows lazily, each
    # sample's template with them: fastload.trace.views)
    out.index, out.rebuild = traced.index, traced
    return out
