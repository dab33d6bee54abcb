"""What several benchmark scripts measure alike, beside the clock.

    from timing import cpu_seconds   # (the scripts' folder is first on sys.path)
    cpu = cpu_seconds(); ...; used = cpu_seconds() - cpu
"""

from __future__ import annotations

import os
import time


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (a torch loader's worker
    processes count once they are joined)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def epoch_rate(loader) -> float:
    """Images per second of one pass over `loader` (batches of (images, labels))."""
    start, images = time.perf_counter(), 0
    for batch, _ in loader:
        images += batch.shape[0]
    return images / (time.perf_counter() - start)
