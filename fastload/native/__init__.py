"""The native path: fastload datasets (and torchvision ImageFolders with known
transforms) run on the C++ batch engine, one call per batch, GIL released.

Python decides the order, the error policy and the labels; the engine reads, decodes
and augments every image of a batch straight into its slot of the output tensor.

- runner.py: NativeRunner (the engine, tickets, close, stats);
- producers.py: one producer per decode_on mode ("cpu", "cpu+gpu", "gpu");
- repair.py: the slots the engine could not fill (PIL fallback, then on_error);
- protocol.py: Runner, what the loader calls on every runner below;
- hybrid.py: which hybrid runner a loader gets (hybrid_runner, TAIL_ON);
- hybrid_local.py: HybridRunner, a native prefix on the engine and the Python tail of the
  transforms per sample, inline or on threads (fastload.augment.tail: what the tail
  receives, its seeds); hybrid_processes.py, hybrid_workers.py: ProcessHybridRunner, whole
  batches in worker processes (the parent's side, the workers' side);
- labelled.py: LabelledRunner, a native batch whose labels go through target_transform;
- feed.py: NativeFeed, the loop that keeps batches in flight and yields them in order;
- select.py: which path a loader takes and why (select_path, native_pipeline, DECODE_ON);
- the status codes (OK, DECODE_ERROR, ...) are read from fastload._contract, the calls across
  the Python/C++ line.
"""

from fastload.native.feed import NativeFeed
from fastload.native.hybrid_local import HybridRunner
from fastload.native.repair import MAX_SKIP_ATTEMPTS
from fastload.native.runner import NativeRunner
from fastload.native.select import DECODE_ON, native_pipeline, order_left_to_torch, select_path

__all__ = ["BAD_GEOMETRY", "DECODE_ERROR", "DECODE_ON", "MAX_SKIP_ATTEMPTS", "NOT_JPEG", "OK", "READ_ERROR",
           "HybridRunner", "NativeFeed", "NativeRunner", "native_pipeline", "order_left_to_torch", "select_path"]


def __getattr__(name: str):
    # The engine's status codes (fastload._C.Status), read when first asked for:
    # `import fastload` must work without the extension.
    from fastload import _contract as contract

    return getattr(contract, name)
