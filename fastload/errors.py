"""fastload's exceptions, and the one policy for samples that cannot be read.

Every stage that can meet a bad sample (the generic path's fetch, the native runner,
tar shard indexing) takes `on_error` through `ErrorPolicy`, so the choice is validated
with one message and means the same everywhere:

- "raise": the error reaches the caller, naming the sample and where its bytes are.
- "skip": a sample the loader cannot read is replaced in its batch by the next readable
  sample in dataset order, on every path (ErrorPolicy says why), counted and listed in
  `loader.stats()` and named by a warning; tar indexing leaves a malformed member out of
  the index and lists it in `skipped`.

Example:
    >>> from fastload.errors import ErrorPolicy
    >>> policy = ErrorPolicy("skip", owner="fastload.TarShards")
    >>> policy.skips, policy.handle(ValueError("bad label"))
    (True, None)
    >>> ErrorPolicy("ignore", owner="fastload.TarShards")
    Traceback (most recent call last):
    ...
    ValueError: fastload.TarShards: expected on_error='raise' or 'skip', got 'ignore'.
"""

from __future__ import annotations

from typing import Iterator, Optional, Union

ON_ERROR = ("raise", "skip")
# The fix every "cannot read this sample" message ends with.
SKIP_HINT = "pass on_error='skip' to the loader to skip such samples"


class DecodeError(RuntimeError):
    """A sample could not be read or decoded.

    Attributes:
        index: the sample's index in the dataset.
        source: where its bytes came from: a file path, or "shard.tar:member".
        reason: what the decoder said (libjpeg's or PIL's message).
    """

    def __init__(self, reason: str, index: Optional[int] = None, source: Optional[str] = None):
        self.index = index
        self.source = source
        self.reason = reason
        where = ", ".join(p for p in (f"sample {index}" if index is not None else None, source) if p)
        super().__init__(f"fastload: cannot decode {where or 'sample'}: {reason}. Fix or remove the file, or "
                         f"{SKIP_HINT}.")

    def __reduce__(self):  # keeps index/source through pickling (worker processes)
        return (DecodeError, (self.reason, self.index, self.source))


class UnsupportedPipeline(ValueError):
    """The transforms cannot run on the native pipeline; the message says why."""


class FolderInUse(RuntimeError):
    """Another fastload.prepare is writing into the same output folder; the message names
    the folder, that run's process id, and what to do."""


class ErrorPolicy:
    """on_error, validated once: what a stage does with a sample it cannot read.

    "raise" (torch's behaviour): the sample's exception reaches the caller, with a note
    naming the sample index and, where the dataset says it, its file or shard member.

    "skip" has one rule on every path (native, hybrid whatever its tail_on, generic with
    or without worker processes): the unreadable sample is *replaced*, in its slot, by the
    next readable sample in dataset order (index + 1, + 2, ..., wrapping at the end; see
    `replacements`), with that sample's own label and random parameters (for fastload's
    engine and datasets a pure function of (seed, epoch, index)). At most MAX_REPLACEMENTS
    are tried, then the error is raised. Every batch keeps its size, so every epoch keeps
    its batch count.

    Why replace rather than drop. torch has no skip for a map-style Dataset; the usual
    recipe (return None, and a collate_fn that filters it out) gives short batches.
    webdataset's handlers (`warn_and_continue`) drop the sample from the stream and its
    `batched()` refills batches from the samples after it, so an epoch has fewer batches
    (and a short last one). Either way what an epoch holds depends on which files are
    bad: under DDP the rank that meets a bad file sees fewer samples, or fewer batches and
    a hung collective (a dropped batch of one sample, or webdataset's counts), and a
    resume position counted in batches no longer says which samples were seen. Replacing
    keeps len(loader) true, DDP ranks in lockstep, state_dict() positions exact, and the
    native and generic paths agreeing on which samples each batch holds. The cost: the
    replacing sample appears twice in that epoch, a small bias next to a few bad files;
    each skipped sample is therefore reported, not hidden: a UserWarning naming it (once
    per sample per loader), `loader.stats()["skipped"]` (distinct samples per pass) and
    `loader.stats()["skipped_samples"]` (index, file or member, reason).

    Args:
        on_error: "raise" or "skip" (or another ErrorPolicy, whose choice is taken).
        owner: who was configured, for the error message (e.g. "fastload.DataLoader").

    Raises:
        ValueError: on_error is neither "raise" nor "skip".

    Example:
        >>> list(ErrorPolicy("skip").replacements(8, 10))[:3]
        [9, 0, 1]
    """

    # How many replacement candidates "skip" tries for one bad sample before concluding
    # that the dataset is mostly unreadable (and raising).
    MAX_REPLACEMENTS = 64

    __slots__ = ("mode",)

    def __init__(self, on_error: Union[str, "ErrorPolicy"] = "raise", *, owner: str = "fastload"):
        if isinstance(on_error, ErrorPolicy):
            on_error = on_error.mode
        if not isinstance(on_error, str) or on_error not in ON_ERROR:
            raise ValueError(f"{owner}: expected on_error='raise' or 'skip', got {on_error!r}.")
        self.mode = on_error

    @property
    def skips(self) -> bool:
        """True when bad samples are left out (and counted) instead of raised."""
        return self.mode == "skip"

    def handle(self, error: BaseException, note: Optional[str] = None) -> None:
        """Called with the error of one sample: raises it under "raise" (with `note` added,
        which names the sample); returns under "skip", and the caller leaves the sample out."""
        if self.skips:
            return None
        if note:
            add_note(error, note)
        raise error

    def replacements(self, index: int, length: int) -> Iterator[int]:
        """The samples "skip" tries in turn in place of unreadable sample `index` of a
        dataset of `length` samples: the next ones in dataset order, wrapping around, at
        most MAX_REPLACEMENTS (the first readable one takes the slot)."""
        for step in range(1, self.MAX_REPLACEMENTS + 1):
            yield (index + step) % length

    def __getstate__(self):
        return self.mode

    def __setstate__(self, mode: str) -> None:
        self.mode = mode

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ErrorPolicy):
            return other.mode == self.mode
        return other == self.mode  # ErrorPolicy("skip") == "skip", as the argument was given

    def __hash__(self) -> int:
        return hash(self.mode)

    def __repr__(self) -> str:
        return f"ErrorPolicy({self.mode!r})"


def add_note(error: BaseException, note: str) -> None:
    """Adds `note` to an exception, keeping its type and message (Python >= 3.11:
    add_note, shown in the traceback; older Pythons: appended to a string message)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    elif error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]} ({note})",) + error.args[1:]


class TarShardError(ValueError):
    """A shard or one of its members is unusable.

    Attributes:
        shard: the shard's URL or path.
        member: the member name inside the shard, or None for the whole shard.
        reason: what is wrong.
    """

    def __init__(self, message: str, shard: str, member: Optional[str] = None, reason: str = ""):
        super().__init__(message)
        self.shard, self.member, self.reason = shard, member, reason or message

    def __reduce__(self):
        return (TarShardError, (str(self), self.shard, self.member, self.reason))
