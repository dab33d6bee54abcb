"""fastload's exceptions, and the one policy for samples that cannot be read.

Every stage that can meet a bad sample (the generic path's fetch, the native runner,
tar shard indexing) takes `on_error` through `ErrorPolicy`, so the choice is validated
with one message and means the same everywhere:

- "raise": the error reaches the caller, naming the sample and where its bytes are.
- "skip": the sample is left out (the generic path drops it from its batch, the native
  path replaces it with the next readable sample, tar indexing lists it in `skipped`)
  and counted in `loader.stats()`.

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

from typing import Optional, Union

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

    Args:
        on_error: "raise" or "skip" (or another ErrorPolicy, whose choice is taken).
        owner: who was configured, for the error message (e.g. "fastload.DataLoader").

    Raises:
        ValueError: on_error is neither "raise" nor "skip".
    """

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
