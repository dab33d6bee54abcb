"""Runner: what the loader, its feed and its resume cursor call on a native-path runner.

Every runner select_path gives (NativeRunner, HybridRunner, ProcessHybridRunner, and
LabelledRunner around one of them) answers these calls and nothing else is asked of it:
fastload.loader (keep_in_flight, stats, close), fastload.native.feed.NativeFeed
(start_pass, submit, result, discard; `min_depth` where a runner has one) and
fastload.resume.Cursor (plan.seed, set_seed).

Example:
    >>> from fastload.native.hybrid_local import HybridRunner
    >>> from fastload.native.hybrid_processes import ProcessHybridRunner
    >>> from fastload.native.runner import NativeRunner
    >>> [missing_members(cls) for cls in (NativeRunner, HybridRunner, ProcessHybridRunner)]
    [[], [], []]
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence

import torch


class Runner(Protocol):
    """A runner of the native path: batches by ticket, in any number in flight."""

    #: The fused plan the engine runs (fastload.augment.plan.Plan); `plan.seed` is the base
    #: of every random parameter, saved in the loader's state as "native_seed".
    plan: Any

    def start_pass(self) -> None:
        """A pass over the data begins (skipped samples are counted once per pass)."""

    def keep_in_flight(self, depth: int) -> None:
        """The loader keeps `depth` batches submitted: the runner sizes its memory for it."""

    def submit(self, indices: List[int], epoch: int) -> int:
        """Starts the batch of these sample indices; returns its ticket."""

    def result(self, ticket: int) -> Any:
        """The ticket's batch (`[images, labels]`, or what the dataset's structure makes)."""

    def discard(self, ticket: int) -> None:
        """Drops a submitted batch nobody will ask for (a `break` out of the epoch)."""

    def set_seed(self, seed: int) -> None:
        """Sets the plan's seed (a resumed loader's "native_seed")."""

    def stats(self, reset: bool = False) -> Dict[str, Any]:
        """Per-stage timings and counts since the start or the last reset."""

    def close(self) -> None:
        """Releases the engine, worker processes and batch memory now."""


class LazyIndex(Protocol):
    """What the runners ask of a dataset whose index fills as the loader reaches it (a
    traced dataset: fastload.trace.LazyTrace and its views and adapters). The runner
    reads `index` in place; nothing of the tracer is imported by fastload/native/.
    """

    #: The engine's SampleIndex, filled in place by `prepare`.
    index: Any
    #: Index -> why it falls back (made by its own __getitem__), this epoch.
    fallbacks: Dict[int, str]
    #: Indexes traced as batches came, and the CPU seconds that took (over the trace's life).
    traced_lazily: int
    trace_s: float

    @property
    def traced(self) -> int:
        """The number of indexes traced this epoch."""

    def run_like_torch(self, num_workers: int, seed: int) -> None:
        """Where `__getitem__` runs, as torch's DataLoader with `num_workers` would run it."""

    def attach(self, runner: Any, only: bool = False) -> None:
        """`runner.refresh_index()` is called when the index's path bytes move."""

    def renew(self, keep: bool = False) -> bool:
        """A new epoch: True when the dataset still runs this way, else the path is chosen anew."""

    def prepare(self, indices: Sequence[int]) -> None:
        """The indexes of the batch about to be submitted, traced."""

    def ahead(self, batches: Iterator[List[int]]) -> Iterator[List[int]]:
        """A pass's batches, traced a chunk at a time before they are yielded."""

    def start_fallbacks(self, indices: Sequence[int]) -> Optional[Dict[int, Any]]:
        """The batch's samples that fall back, started in worker processes."""

    def export(self, indices: Sequence[int]) -> List[Any]:
        """What a worker process needs to read these traced indexes (`adopt` takes it there)."""

    def adopt(self, exported: List[Any]) -> None:
        """A parent's `export`, taken into a worker process's copy."""

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, indices: Sequence[int],
                 started: Optional[Dict[int, Any]] = None) -> Any:
        """The batch in the dataset's own structure, fallbacks filled."""

    def close(self) -> None:
        """Stops the fallbacks' worker processes."""


def missing_members(cls: type) -> List[str]:
    """The Runner members a runner class lacks (an empty list: it is a Runner)."""
    wanted = [name for name, value in vars(Runner).items()
              if not name.startswith("_") and inspect.isfunction(value)] + list(Runner.__annotations__)
    return [name for name in wanted if not hasattr(cls, name) and name not in _instance_attributes(cls)]


def _instance_attributes(cls: type) -> List[str]:
    """The attributes __init__ assigns (`self.x = ...`, `self.x, self.y = ...`)."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    except (OSError, TypeError):
        return []
    return [node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name) and node.value.id == "self"]
