"""Remote shards' member indexes shared by a job's machines through torch.distributed's store.

A plain shard in a bucket is indexed by walking its tar headers, one request per sample
(fastload/source/remote_index.py). The processes of one machine share that work through
`cache_dir` (a lock per shard); the machines of a job have no folder in common, so
without this each would walk every shard: the same requests times the number of
machines, at the same moment, against one bucket. When the default process group is
initialised (torchrun, `init_process_group`) with more than one rank, a shard's index is
instead claimed by one rank of the job (an atomic `add` on the group's key-value store,
the one torchrun's rendezvous made), built by it and posted there (JSON, compressed,
under a key naming the object's URL, size and ETag), and read from there by every other
machine.

Nothing here is a collective: a rank waits only for a shard that another rank claimed
while it was building its own dataset, so ranks that open different datasets, or open
one at different moments, never wait on each other. A rank whose build fails posts an
empty value, and waiters build the shard themselves (and meet the same error, named by
their own walk); a claimant that never posts (its process died without the job going
down) is waited for at most WAIT_S.

Example (no process group: nothing is shared, each machine builds its own):
    >>> JobShare.current() is None
    True
"""

from __future__ import annotations

import datetime
import hashlib
import json
import zlib
from typing import Any, Dict, Optional

# Seconds a rank waits for a shard's index that another rank claimed.
WAIT_S = 600.0
PREFIX = "fastload/shard-index/"


class JobShare:
    """The job's key-value store, for shard indexes (see the module's docstring)."""

    def __init__(self, store: Any):
        self.store = store

    @classmethod
    def current(cls) -> Optional["JobShare"]:
        """The default process group's store when one is initialised with several ranks, else None."""
        try:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
                return None
            # torch keeps no public accessor for the store its process group was made with.
            return cls(dist.distributed_c10d._get_default_store())
        except (ImportError, AttributeError, RuntimeError, ValueError):
            return None

    @staticmethod
    def key(url: str, identity: Dict[str, Any]) -> str:
        """The store key of one version of one object (its size and ETag in the name)."""
        name = json.dumps([url, identity.get("size"), identity.get("tag")])
        return PREFIX + hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]

    def posted(self, key: str) -> Optional[Dict[str, Any]]:
        """The record posted under `key`, without waiting; None when none is (or a failure is)."""
        if not self.store.check([key]):
            return None
        return _decode(self.store.get(key))

    def claim(self, key: str) -> bool:
        """True for the one rank of the job that is to build this shard's index."""
        return int(self.store.add(key + "/claim", 1)) == 1

    def post(self, key: str, record: Optional[Dict[str, Any]]) -> None:
        """Posts the record (None: the build failed, waiters build it themselves)."""
        data = b"" if record is None else zlib.compress(json.dumps(record, separators=(",", ":")).encode("utf-8"))
        self.store.set(key, data)

    def wait(self, key: str, timeout_s: Optional[float] = None) -> Optional[Dict[str, Any]]:
        """The record another rank claimed and posts; None if it failed or never came
        within `timeout_s` (default WAIT_S)."""
        try:
            self.store.wait([key], datetime.timedelta(seconds=WAIT_S if timeout_s is None else timeout_s))
        except RuntimeError:  # the store's timeout (DistStoreError is a RuntimeError)
            return None
        return _decode(self.store.get(key))


def _decode(data: bytes) -> Optional[Dict[str, Any]]:
    if not data:
        return None
    try:
        return json.loads(zlib.decompress(bytes(data)))
    except (zlib.error, ValueError):
        return None
