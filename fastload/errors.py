"""fastload's exceptions."""

from __future__ import annotations

from typing import Optional


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
        super().__init__(
            f"fastload: cannot decode {where or 'sample'}: {reason}. "
            "Fix or remove the file, or pass on_error='skip' to the loader to skip such samples."
        )

    def __reduce__(self):  # keeps index/source through pickling (worker processes)
        return (DecodeError, (self.reason, self.index, self.source))
