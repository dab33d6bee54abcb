"""The tracer: a dataset's own `__getitem__` run to learn where its images are and what transforms them.

This `__init__` is the tracer's contract: the adapters (fastload/adapters/), fastload's
own datasets (the webdataset view) and the runners use these names and nothing else of
the package. What the package does, module by module (the data flows down the list):

| module | job |
| --- | --- |
| `where.py` | whether the tracer is on (`enabled`, `disabled`, FASTLOAD_TRACE), the user's file:line |
| `state.py` | one traced call's record: `record(dataset, i)`, the thread it runs on, `stop_trace`, the global generators |
| `openers.py`, `open_calls.py` | the other openers (OpenCV, torchvision.io, bytes): their lazy stand-ins, and the calls swapped while tracing |
| `call.py` | the lazy PIL image (`TracedImage`), a transform's output (`TracedOutput`), what may enter a transform (`enter`) |
| `patches.py` | `tracing_patches`: PIL.Image.open, the openers and the transforms' `__call__` patched on the tracing thread |
| `sample.py` | a call's sample: its template with `SLOT` where the engine's image goes (`view_slot(v)` for image view v where one image reaches several transform calls), and the checks on it |
| `rollback.py` | what a traced call changed on the dataset, undone |
| `probes.py` | index 0 twice and a few indexes spread over the dataset, traced up front on a watched thread; the `Basis` a trace was made from |
| `files.py` | the engine's file table of a lazy trace, filled in place as indexes are traced |
| `fallbacks.py`, `fallback_pool.py`, `placeholder.py` | the samples that fall back, where their own `__getitem__` runs (forked workers), the tiny image the engine makes in their slot |
| `lazy.py` | `LazyTrace`: a trace that holds for one epoch, each index traced as its batch comes |
| `views.py` | a traced dataset inside Subset / ConcatDataset (`LazyView`; dict samples, image views, masks and boxes too) |
| `dataset.py` | `trace_dataset`: a dataset's analysis from its probes |
| `targets.py`, `target_batches.py` | v2's `transform(image, target)` with boxes: the boxes recorded per index (`TracedBoxes`), each batch's moved through the engine's draws, the samples through the collate_fn |
| `collate.py` | the user's collate_fn followed around the engine's batch |
| `masks.py`, `masked.py` | a segmentation mask read from a second file and passed with the image to one joint transform call (`LabelMap`, `MaskOutput`), and `MaskedTrace`: its file table beside the image's |

The hooks a lazy trace offers its runner (what fastload/native/ calls) are `LazyTrace`'s
public methods: `prepare` / `ahead` (trace the indexes of the next batches), `renew` (a
new epoch), `run_like_torch`, `attach` (told when the path bytes move), `start_fallbacks`,
`__call__` (a batch in the dataset's own structure), `export` / `adopt` (worker processes),
`close`. An adapter that locates its samples itself (Hugging Face) derives from
`LazyTrace` and overrides how rows are traced.

Example (Photos: a user's dataset, fastload/trace/doc_dataset.py):
    >>> from torchvision import transforms as T
    >>> from fastload.trace.doc_dataset import Photos
    >>> photos = Photos(T.ToTensor(), length=10)
    >>> with tracing_patches(photos):
    ...     call, sample = record(photos, 7)
    >>> traced = sample_of_call(photos, call, sample)
    >>> traced.path == photos.path, traced.template
    (True, (<image>, 7))
"""

from fastload.trace.call import TracedImage, TracedOutput, traced_image_state
from fastload.trace.collate import KEPT, fast_collate_of_stand_ins, followed_collate, probe_collate
from fastload.trace.dataset import trace_dataset
from fastload.trace.lazy import LazyTrace, copy_into, probe
from fastload.trace.openers import Lazy
from fastload.trace.patches import tracing_patches, where_drawn
from fastload.trace.probes import PROBES, Probe, probe_indexes
from fastload.trace.rollback import Snapshot
from fastload.trace.sample import (PLAIN_LEAVES, SLOT, Slot, TracedSample, collated, is_int_label, is_simple_template,
                                   same_value, sample_of_call, shape_text, templated, view_count, view_slot)
from fastload.trace.state import (active_call, global_rng_moved, global_rng_restore, global_rng_state, record,
                                  source_of, stop_trace, StopTrace, thread_state, TracedCall, TraceRefused)
from fastload.trace.target_batches import has_traced_boxes
from fastload.trace.views import LazyView, concat as concat_view, eager, is_lazy, subset as subset_view
from fastload.trace.where import REFUSAL_FIX, TRACE_ENV, disabled, enabled, where_defined, where_in_traceback

__all__ = [
    "KEPT", "LazyTrace", "LazyView", "Lazy", "PLAIN_LEAVES", "PROBES", "Probe", "REFUSAL_FIX", "SLOT", "Slot",
    "Snapshot", "StopTrace", "TRACE_ENV", "TraceRefused", "TracedCall", "TracedImage",
    "TracedOutput", "TracedSample", "active_call", "collated", "concat_view", "copy_into", "disabled", "eager", "enabled", "fast_collate_of_stand_ins",
    "followed_collate", "global_rng_moved", "global_rng_restore", "global_rng_state", "has_traced_boxes", "is_int_label", "is_lazy",
    "is_simple_template", "probe", "probe_collate", "probe_indexes", "record", "same_value", "sample_of_call",
    "shape_text", "source_of", "stop_trace", "subset_view", "templated", "thread_state", "trace_dataset",
    "traced_image_state", "tracing_patches", "view_count", "view_slot", "where_defined", "where_drawn", "where_in_traceback",
]
