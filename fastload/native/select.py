"""Which path a loader takes, and why: the one place every "generic: <why>" is decided.

select_path(dataset, ...) returns a NativeRunner when the dataset and the loader's
arguments can run on the C++ engine, else None and the reason, which is what
`loader.path` shows: "native: ImageFolder [RandomResizedCrop -> RandomHorizontalFlip ->
Normalize], decode_on=cpu (auto)" or e.g. "generic: custom collate_fn". A dataset (a fastload
one, or a torchvision one the compat layer converts) whose transforms go on past the
native ones (a Python tail) gets a HybridRunner:
"hybrid: native [RandomResizedCrop -> RandomHorizontalFlip] + python [TrivialAugmentWide
-> ToTensor -> Normalize], decode_on=cpu (auto); not native: TrivialAugmentWide(...): why".
The reasons for the generic path, in the order they are checked:

- the order is left to torch (order_left_to_torch): an IterableDataset, batch_size=None,
  a DataPipe, a dataset without __len__ (and no sampler to order it);
- accelerate=False; FASTLOAD_NATIVE=0 in the environment;
- the dataset or its transforms have no native pipeline (the converter's reason);
- a custom collate_fn, but for a lazily traced dataset (a class of the user's own, a
  Hugging Face dataset) whose collate_fn does no more than stack its images (followed:
  fastload.trace.collate);
- a Python tail that cannot take what the engine gives it (Tail.reason_not_runnable);
- fastload._C was not built (a fastload dataset then raises NotBuiltError instead).

Example:
    >>> import torch
    >>> from fastload.native import select_path
    >>> def path(dataset, **kwargs):
    ...     args = dict(batch_size=2, collate_fn=None, num_workers=0, pin_memory=False, accelerate="auto",
    ...                 dtype=None, memory_format=None, on_error="raise", seed=None)
    ...     return select_path(dataset, **{**args, **kwargs})
    >>> path(torch.utils.data.TensorDataset(torch.arange(4)), accelerate=False)
    (None, 'generic: accelerate=False')
    >>> path(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=None)[1]
    'generic: batch_size=None (no automatic batching; order left to torch)'
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

from fastload import _ext
from fastload.augment.own_size import OwnSizeFusion, own_size_fusion
from fastload.augment.plan import Fusion, fuse, make_plan
from fastload.errors import UnsupportedPipeline
from fastload.native.hybrid import hybrid_runner
from fastload.native.labelled import LabelledRunner
from fastload.native.producers import PRODUCERS
from fastload.native.protocol import LazyIndex, Runner
from fastload.native.runner import NativeRunner
from fastload.source.index import SampleIndex

# Where decoding and augmenting run (see fastload.native.producers):
#   "cpu":     the engine decodes and augments into the (pinned) batch; uint8 or float
#              crosses PCIe as the plan says.
#   "cpu+gpu": the engine decodes the DCT-scaled crop window to uint8; only those bytes
#              cross PCIe; the device resizes, flips, normalises and casts.
#   "gpu":     nvJPEG decodes whole images on the device (the CPU decodes what it
#              rejects), the device does the rest.
#   "auto":    "cpu+gpu" for batches bound for a CUDA device when the CUDA kernels were
#              built, else "cpu".
DECODE_ON = ("auto", *PRODUCERS)
_PREFIX = "fastload.DataLoader"


def _rows_through_collate(dataset: Any) -> bool:
    """The dataset's rows go through the collate probe even with torch's default collate_fn
    (its adapter says so: Hugging Face rows may keep PIL images)."""
    from fastload.adapters import adapter_for

    return adapter_for(dataset).rows_through_collate


def order_left_to_torch(dataset: Any, *, batch_size: Optional[int], sampler: Any = None,
                        batch_sampler: Any = None) -> Optional[str]:
    """The reason fastload does not order this dataset's batches itself (torch, or the
    dataset, does), or None when it does. Such a loader always takes the generic path.

    Args mean what they mean for torch.utils.data.DataLoader (batch_size as torch keeps
    it: None when a batch_sampler is given).
    """
    if isinstance(dataset, torch.utils.data.IterableDataset):
        # A webdataset pipeline the loader did not map, or a streaming Hugging Face
        # dataset: the reason names what kept it here.
        from fastload.adapters import adapter_for  # (its modules load PIL: not at `import fastload`)

        return adapter_for(dataset).generic_reason(dataset) or \
            "generic: IterableDataset (order left to the dataset and torch)"
    if batch_size is None and batch_sampler is None:
        return "generic: batch_size=None (no automatic batching; order left to torch)"
    if isinstance(dataset, (IterDataPipe, MapDataPipe)):
        return "generic: a DataPipe (order left to torch)"
    if sampler is None and batch_sampler is None:
        try:
            len(dataset)
        except TypeError:
            return "generic: the dataset has no __len__ (order left to torch)"
    return None


def check_decode_on(decode_on: Any) -> str:
    """decode_on, if it is one of DECODE_ON (else ValueError): the loader's one check."""
    if not isinstance(decode_on, str) or decode_on not in DECODE_ON:
        raise ValueError(f"{_PREFIX}: expected decode_on in {DECODE_ON}, got {decode_on!r}.")
    return decode_on


def _default_collate(collate_fn: Any) -> bool:
    from torch.utils.data import default_collate

    return collate_fn is None or collate_fn is default_collate


class _Resolved(NamedTuple):
    """What runs a dataset: its index, the fusion of its native part, the description,
    and what Python does per sample (the tail) or per batch (the labels)."""

    index: SampleIndex
    fusion: Fusion
    description: str
    tail: Any = None  # fastload.augment.tail.Tail, or None
    labels: Optional[Callable[[torch.Tensor], Any]] = None  # labels int64 [B] -> the batch's labels
    labels_note: str = ""  # "; labels: target_transform f in Python"
    # A traced dataset's own sample structure (fastload.trace.LazyTrace):
    # (batch images, dataset indexes int64 [B]) -> the batch default_collate would give.
    rebuild: Optional[Callable[[Any, torch.Tensor], Any]] = None
    # Several image views per sample (fastload.augment.views.Outputs) of a converted
    # dataset (a traced one whose image reaches several transform calls), else None.
    outputs: Any = None


def _resolve(dataset: Any, *, dtype: Optional[torch.dtype]) -> _Resolved:
    """_Resolved for a dataset whose samples the engine can make (fully, or its native
    prefix before a Python tail), else UnsupportedPipeline with the reason."""
    from fastload.datasets.base import NativeDataset

    labels, labels_note, rebuild, outputs = None, "", None, None
    if isinstance(dataset, NativeDataset):
        index, specs, origin = dataset.index, dataset.ops, type(dataset).__name__
        tail = dataset.python_tail()
    else:
        from fastload.adapters import convert
        from fastload.compat.conversion import callable_name
        from fastload.compat.torchvision import NotConvertible

        try:
            conversion = convert(dataset)
        except NotConvertible as error:
            raise UnsupportedPipeline(str(error)) from None
        refusal = conversion.tail_refusal()
        if refusal is not None:
            raise UnsupportedPipeline(refusal)
        index, specs, origin = conversion.index, list(conversion.pipeline.native), conversion.origin
        tail = conversion.python_tail()
        rebuild, outputs = conversion.rebuild, conversion.outputs
        if conversion.target_transform is not None:
            labels = conversion.collate_labels
            labels_note = f"; labels: target_transform {callable_name(conversion.target_transform)} in Python"
    try:
        fusion = own_size_fusion(specs) if getattr(dataset, "own_size", False) else fuse(specs)
    except UnsupportedPipeline as error:
        fusion = _own_size_of(specs, tail, rebuild)
        if fusion is None and tail is None:
            raise
        if fusion is None:
            # The cut left a prefix the engine cannot batch (e.g. nothing before the first
            # Python transform): the whole pipeline runs in Python.
            prefix = " -> ".join(type(s).__name__ for s in specs)
            why = f"the native prefix [{prefix}] does not fuse ({error})" if specs else \
                "no native transform comes first"
            raise UnsupportedPipeline(f"{origin}: {why}, so the Python tail has no engine output to start from; "
                                      f"not native: {'; '.join(tail.blockers)}") from None
    if tail is not None:
        # The tail sees the prefix's own dtype; the loader's dtype applies to the batch after it.
        where = "" if tail.takes_pil or tail.prefix_makes_tensor else \
            " on uint8 tensors (not PIL images: values within a level or two, see fastload.augment.tail)"
        return _Resolved(index, fusion, f"hybrid: native [{fusion.description}] + python [{tail.description}]{where}",
                         tail, labels, labels_note, rebuild)
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and fusion.dtype.is_floating_point:
        fusion = fusion._replace(dtype=dtype)  # e.g. bfloat16 for AMP, written directly by the kernel
    # (other dtypes, e.g. float64, are converted after the batch, as on the generic path)
    return _Resolved(index, fusion, f"native: {origin} [{fusion.description}]", None, labels, labels_note, rebuild,
                     outputs)


def _own_size_of(specs: Any, tail: Any, rebuild: Any) -> Optional[Fusion]:
    """A traced detection dataset's pipeline without a crop (torchvision's detection
    references): its own-size fusion (each image its own size), or None."""
    if tail is not None or not _traced_boxes(rebuild):
        return None
    try:
        return own_size_fusion(specs)
    except UnsupportedPipeline:
        return None


def native_pipeline(dataset: Any, *, dtype: Optional[torch.dtype]) -> Tuple[SampleIndex, Fusion, str]:
    """(index, fusion, description) for a dataset that runs natively, else UnsupportedPipeline.
    The fusion becomes the engine's plan (make_plan) once fastload._C is known to be there.
    A dataset with a Python tail (a fastload dataset's python_tail(), a torchvision
    dataset's transforms past the native ones) gets the fusion of its native prefix and a
    "hybrid: ..." description."""
    resolved = _resolve(dataset, dtype=dtype)
    return resolved.index, resolved.fusion, resolved.description


def select_path(
    dataset: Any,
    *,
    batch_size: Optional[int],
    collate_fn: Any,
    num_workers: int,
    pin_memory: bool,
    accelerate: Any,
    dtype: Optional[torch.dtype],
    memory_format: Optional[torch.memory_format],
    on_error: str,
    seed: Optional[int],
    device: Optional[torch.device] = None,
    decode_on: str = "auto",
    dct_scaling: bool = True,
    sampler: Any = None,
    batch_sampler: Any = None,
    tail_on: str = "auto",
    timeout: float = 0,
) -> Tuple[Optional[Runner], str]:
    """(runner, reason): a runner when the dataset can run natively, else None and why.

    Args:
        dataset, batch_size, collate_fn, num_workers, pin_memory, sampler, batch_sampler:
            the loader's (torch's) arguments; batch_size as torch keeps it (None when a
            batch_sampler is given: the native path then follows its batches, of any
            size). num_workers is the engine's thread count.
        accelerate: "auto", True or False (False: always generic).
        dtype, memory_format: what the batches should be; a floating dtype the engine can
            write (float32, float16, bfloat16) is written directly.
        on_error: "raise" or "skip".
        seed: base of the random augmentation; None: a fastload dataset's own `seed`,
            else drawn from torch's global generator without advancing it.
        device: where batches go (a CUDA device enables the device decode_on modes).
        decode_on: one of DECODE_ON.
        dct_scaling: decode at a reduced DCT scale where it still covers the output
            (False: outputs follow a full decode to within rounding).
        tail_on: where a hybrid pipeline's Python tail runs (fastload.native.hybrid.TAIL_ON:
            "auto", "inline", "threads", "processes"; see hybrid_runner).
        timeout: torch's DataLoader timeout: seconds a batch may take (0: no limit).

    Returns:
        (NativeRunner, "native: <what>, decode_on=<mode>[ (why)]"),
        (HybridRunner, "hybrid: native [<prefix>] + python [<tail>], decode_on=cpu[ (why)]
        [; not native: <blockers>]") or (None, "generic: <why>").

    Raises:
        ValueError: decode_on is not one of DECODE_ON, or a device mode without a CUDA
            device.
        fastload.NotBuiltError: a fastload dataset without fastload._C, or a device mode
            without the CUDA kernels.
    """
    reason = order_left_to_torch(dataset, batch_size=batch_size, sampler=sampler, batch_sampler=batch_sampler)
    if reason is not None:
        return None, reason
    if accelerate is False:
        return None, "generic: accelerate=False"
    if _ext.native_disabled_by_env():
        return None, "generic: FASTLOAD_NATIVE=0"
    # A batch_sampler's batches run as they come: the engine takes each batch's indices
    # whatever their number (a shorter last batch, or batches of varying size).
    custom_collate = not _default_collate(collate_fn)
    check_decode_on(decode_on)
    try:
        index, fusion, description, tail, labels, labels_note, rebuild, outputs = _resolve(dataset, dtype=dtype)
    except UnsupportedPipeline as error:
        return None, "generic: custom collate_fn" if custom_collate else f"generic: {error}"
    if outputs is not None and custom_collate:
        # (the collate probe follows one image per sample; each view's batch is torch's stack)
        return None, "generic: custom collate_fn (a sample with several image views or a mask)"
    # A lazily traced dataset knows each sample's structure: a custom collate_fn that stacks
    # the images is followed around the engine's batch (fastload.trace.collate); a Hugging
    # Face dataset's rows go through it even without one (they may keep PIL images).
    if hasattr(rebuild, "probes") and (custom_collate or _rows_through_collate(dataset) or _traced_boxes(rebuild)):
        from fastload.trace import fast_collate_of_stand_ins, followed_collate

        follow = collate_fn if custom_collate else None
        if custom_collate and _timm_fast_collate(collate_fn) and tail is None and fusion.dtype == torch.uint8:
            # timm's prefetcher path over its own dataset (traced): fast_collate copies the
            # uint8 images into a zeroed uint8 batch, which the probe's float stand-ins cannot
            # show; on uint8 images that is a stack, so it is probed as one.
            follow = fast_collate_of_stand_ins
        rebuild, why = followed_collate(rebuild, follow)
        if rebuild is None:
            return None, f"generic: {why}"
        if custom_collate:
            labels_note += f"; collate_fn {getattr(collate_fn, '__qualname__', type(collate_fn).__name__)} followed"
    elif custom_collate and _timm_fast_collate(collate_fn) and tail is None and labels is None and \
            fusion.dtype == torch.uint8:
        # timm's prefetcher path: uint8 images (its ToNumpy) stacked with int64 labels, as a
        # tuple: what the engine's uint8 batch is, as fast_collate returns it.
        labels_note += "; collate_fn timm fast_collate followed"
        rebuild = _as_tuple
    elif _makes_targets(dataset):
        # Per-sample targets (a detection dataset's boxes) made each batch from the engine's
        # draws, the (image, target) samples through the collate_fn as torch's would be.
        if custom_collate:
            labels_note += f"; collate_fn {getattr(collate_fn, '__qualname__', type(collate_fn).__name__)} followed"
    elif custom_collate:
        return None, "generic: custom collate_fn"
    from fastload.datasets.base import NativeDataset

    if not _ext.has_ops():
        if isinstance(dataset, NativeDataset):  # its geometry is C++ on every path: fail now
            _ext.require_ops()
        return None, "generic: fastload._C is not built (make build)"
    plan = make_plan(fusion)
    plan.seed = _augmentation_seed(dataset, seed)
    plan.dct_scaling = bool(dct_scaling)
    if tail is not None:
        reason = tail.reason_not_runnable()
        if reason is not None:
            return None, f"generic: {reason}"
        # The tail runs on host images: the engine decodes on the CPU whatever decode_on says.
        why = {"auto": " (auto)", "cpu": ""}.get(decode_on, f" (decode_on={decode_on!r} is for fully native "
                                                            "pipelines: the Python tail needs host images)")
        runner = hybrid_runner(index, plan, tail, num_workers=num_workers, pin_memory=pin_memory,
                               on_error=on_error, description=description, tail_on=tail_on, labels=labels,
                               timeout=timeout)
        blockers = f"; not native: {'; '.join(tail.blockers)}" if tail.blockers else ""
        return _Rebuilt.wrap(runner, rebuild, num_workers), f"{description}, decode_on=cpu{why}{labels_note}{blockers}"
    # A traced dataset's mask files are its trace's (fastload.trace.masked.MaskedTrace).
    mask_index = getattr(rebuild, "mask_index", None)
    if isinstance(dataset, NativeDataset):
        outputs, mask_index = getattr(dataset, "outputs", None), getattr(dataset, "mask_index", None)
    if outputs is not None:  # several outputs per sample: views and masks from one decode
        runner, reason = _views_runner(outputs, mask_index, index, plan, description, num_workers=num_workers,
                                       pin_memory=pin_memory, memory_format=memory_format, on_error=on_error,
                                       decode_on=decode_on, dtype=dtype, timeout=timeout)
        return (None if runner is None else _Rebuilt.wrap(runner, rebuild, num_workers)), reason
    if isinstance(fusion, OwnSizeFusion):  # no batch shape: each image alone on the engine's kernels
        from fastload.native.own_size import OwnSizeRunner

        runner = OwnSizeRunner(index, plan, num_threads=max(1, num_workers), pin_memory=pin_memory,
                               on_error=on_error, description=description, timeout=timeout)
        decode_on, why = "cpu", "" if decode_on in ("auto", "cpu") else " (images of their own sizes decode on the CPU)"
    else:
        decode_on, why = _resolve_decode_on(decode_on, device, colour=plan.has_color())
        runner = NativeRunner(index, plan, num_threads=max(1, num_workers), pin_memory=pin_memory,
                              memory_format=memory_format, on_error=on_error, decode_on=decode_on,
                              device=device, description=description, timeout=timeout)
    if labels is not None:
        runner = LabelledRunner(runner, labels)
    if _makes_targets(dataset):
        import functools

        from fastload.native.targets import TargetsRunner

        runner = TargetsRunner(runner, functools.partial(dataset.collated, collate_fn=collate_fn))
    return _Rebuilt.wrap(runner, rebuild, num_workers), f"{description}, decode_on={decode_on}{why}{labels_note}"


def _traced_boxes(rebuild: Any) -> bool:
    """A traced dataset whose samples carry detection boxes (fastload.trace.target_batches)."""
    from fastload.trace import has_traced_boxes

    return has_traced_boxes(rebuild)


def _makes_targets(dataset: Any) -> bool:
    """A fastload dataset whose samples carry targets made per batch (DetectionDataset)."""
    from fastload.datasets.base import NativeDataset

    return isinstance(dataset, NativeDataset) and callable(getattr(type(dataset), "collated", None))


def _views_runner(outputs: Any, mask_index: Optional[SampleIndex], index: SampleIndex, plan: Any, description: str,
                  *, num_workers: int, pin_memory: bool, memory_format: Optional[torch.memory_format], on_error: str,
                  decode_on: str, dtype: Optional[torch.dtype], timeout: float) -> Tuple[Optional[Runner], str]:
    """The runner of a dataset with several outputs per sample (image views, masks:
    fastload.augment.views; a fastload dataset's, or a traced dataset's views), made on
    the CPU from one decode of each image."""
    from fastload.augment.views import build_view_plans, describe

    try:
        views = build_view_plans(outputs, plan, dtype=dtype)
    except UnsupportedPipeline as error:
        return None, f"generic: {error}"
    why = {"auto": " (auto)", "cpu": ""}.get(decode_on, f" (decode_on={decode_on!r}: several views or masks per "
                                                        "sample are made on the CPU)")
    runner = NativeRunner(index, plan, num_threads=max(1, num_workers), pin_memory=pin_memory,
                          memory_format=memory_format, on_error=on_error, decode_on="cpu",
                          description=description, timeout=timeout, views=views, mask_index=mask_index)
    return runner, f"{description} + {describe(outputs, views)}, decode_on=cpu{why}"


class _Rebuilt(LabelledRunner):
    """A runner whose batches take a dataset's own structure through `rebuild(images, indexes)`:
    a webdataset view's here, a trace's (fastload.trace.LazyTrace.__call__) in _LazilyTraced."""

    @classmethod
    def wrap(cls, runner: Any, rebuild: Optional[Callable[[Any, torch.Tensor], Any]], num_workers: int) -> Any:
        if rebuild is None:
            return runner
        if hasattr(rebuild, "prepare"):
            return _LazilyTraced(runner, rebuild, num_workers)
        return cls(runner, rebuild)

    def result(self, ticket: int) -> Any:
        images, rows = self.runner.result(ticket)
        batch = self._labels(images, rows.cpu())
        if getattr(self.runner, "pin_memory", False):
            from torch.utils.data._utils.pin_memory import pin_memory

            batch = pin_memory(batch)  # (the images are pinned already: kept as they are)
        return batch


class _LazilyTraced(LabelledRunner):
    """A runner over a dataset traced as the loader reaches it
    (fastload.trace.LazyTrace): each batch's indexes are traced before the
    engine is handed the batch (on the submitting thread: the loader submits batches
    ahead of the one it waits for); each batch takes the dataset's own structure, the
    samples whose trace disagreed filled by their own __getitem__ (started in worker
    processes when the batch is submitted, where the loader has num_workers). The trace
    holds for one epoch: `renew()` tells, at each iter(), whether the dataset still runs
    this way."""

    def __init__(self, runner: Any, trace: LazyIndex, num_workers: int):
        super().__init__(runner, trace)
        object.__setattr__(self, "_submitted", {})
        trace.run_like_torch(num_workers, runner.plan.seed if hasattr(runner, "plan") else 0)
        native = runner
        while not hasattr(native, "refresh_index") and (hasattr(native, "runner") or hasattr(native, "native")):
            native = native.__dict__.get("runner") or native.__dict__.get("native")
        if hasattr(native, "refresh_index"):
            trace.attach(native)  # its engine holds the path bytes: handed the new ones when they grow
            native.repair.trace = trace  # under on_error="skip", a replacement sample is traced before it runs
        elif hasattr(native, "trace"):
            native.trace = trace  # worker processes: each batch carries its indexes' trace to them
        else:
            raise TypeError(f"fastload: a traced dataset's runner {type(runner).__name__} takes no index updates")

    def renew(self, keep: bool = False) -> bool:
        """A new epoch: True when the dataset still runs on this runner (its trace renewed),
        False when the loader must choose its path anew (LazyTrace.renew)."""
        return self._labels.renew(keep)

    def submit(self, indices: Any, epoch: int) -> int:
        self._labels.prepare(indices)
        ticket = self.runner.submit(indices, epoch)
        self._submitted[ticket] = (indices, self._labels.start_fallbacks(indices), epoch)
        return ticket

    def ahead(self, batches: Any) -> Any:
        """The pass's batches, traced a chunk at a time ahead of their submission."""
        return self._labels.ahead(batches)

    def discard(self, ticket: int) -> None:
        self._submitted.pop(ticket, None)
        self.runner.discard(ticket)

    def result(self, ticket: int) -> Any:
        indices, started, epoch = self._submitted.pop(ticket)
        images, labels = self.runner.result(ticket)
        if hasattr(self._labels, "at"):  # (a detection dataset's boxes take the batch's draws)
            self._labels.at(epoch, self.runner.plan)
        # The samples the batch holds: under on_error="skip", a replacement in a bad one's slot.
        held = getattr(self.runner, "last_samples", None)
        if held is not None:
            held = held.tolist()
            # (a worker process traced a replacement in its own copy: traced here too, so
            # that one whose trace disagrees is made by __getitem__ below)
            self._labels.prepare(held)
        batch = self._labels(images, labels.cpu(), indices if held is None else held, started)
        if getattr(self.runner, "pin_memory", False):
            from torch.utils.data._utils.pin_memory import pin_memory

            batch = pin_memory(batch)  # (the images are pinned already: kept as they are)
        return batch

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """The runner's stats, and "traced": this epoch's traced indexes ("samples") and
        fallbacks ({index: why}, made by their own __getitem__), and over the runner's life
        the indexes traced as batches came ("traced_total") and the CPU seconds that took."""
        out = dict(self.runner.stats(reset=reset))
        trace = self._labels
        out["traced"] = {"samples": trace.traced, "fallbacks": dict(trace.fallbacks),
                         "traced_total": trace.traced_lazily, "trace_s": trace.trace_s}
        return out

    def close(self) -> None:
        self._labels.close()
        self.runner.close()


def _timm_fast_collate(collate_fn: Any) -> bool:
    """timm's fast_collate (timm.data.loader), recognised by its module and name: for uint8
    images and scalar class indices it returns (the images stacked, int64 labels)."""
    return getattr(collate_fn, "__module__", None) == "timm.data.loader" and \
        getattr(collate_fn, "__name__", None) == "fast_collate"


def _as_tuple(images: torch.Tensor, labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """A batch as timm's fast_collate returns it: a tuple, labels int64."""
    return images, labels


def _augmentation_seed(dataset: Any, seed: Optional[int]) -> int:
    """`seed`; else a fastload dataset's own (reproducible by default, and the one its
    generic twin uses); else, like torch's own augmentation randomness, from the global
    generator, without advancing it: torch's DataLoader draws nothing at construction, and
    a draw here would shift the caller's stream (its permutations and worker seeds)."""
    if seed is not None:
        return int(seed)
    dataset_seed = getattr(dataset, "seed", None)
    if isinstance(dataset_seed, int):
        return int(dataset_seed)
    with torch.random.fork_rng(devices=[]):
        return int(torch.empty((), dtype=torch.int64).random_().item())


def _resolve_decode_on(decode_on: str, device: Optional[torch.device], *, colour: bool = False) -> Tuple[str, str]:
    """(mode, why) for decode_on; "auto" moves resize/normalise to a CUDA device when the
    CUDA kernels were built, so only uint8 crop windows cross PCIe (not for colour plans,
    which the CPU engine runs)."""
    on_cuda = device is not None and torch.device(device).type == "cuda"
    if decode_on == "auto":
        if on_cuda and _ext.has_cuda_ops():
            if colour:
                return "cpu", " (auto: colour ops run in the CPU engine's pass)"
            return "cpu+gpu", " (auto: CUDA kernels built, batches bound for the GPU)"
        return "cpu", " (auto)" if not on_cuda else " (auto: fastload._C has no CUDA kernels)"
    if decode_on != "cpu" and not on_cuda:
        raise ValueError(f"{_PREFIX}: decode_on={decode_on!r} needs device='cuda', got device={device}")
    if decode_on != "cpu" and colour:
        raise ValueError(f"{_PREFIX}: decode_on={decode_on!r} does not run colour ops (ColorJitter, Grayscale, "
                         "RandomErasing, GaussianBlur, RandomCrop's non-zero padding, TrivialAugmentWide, RandAugment, "
                         "AugMix) yet; pass decode_on='cpu' or 'auto' (the CPU engine runs them, the batch still goes "
                         "to the device)")
    if decode_on != "cpu":
        _ext.require_cuda_ops()
    return decode_on, ""
