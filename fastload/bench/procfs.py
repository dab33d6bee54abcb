"""Process-tree memory and CPU figures from Linux /proc, for the bench's measurements.

A contender runs in its own process, and a torch DataLoader adds worker processes, so
"its memory" is the sum over the process tree. This kernel has no
/proc/<pid>/task/<tid>/children, so the tree is found from each process's parent pid; a
ProcessTree caches those (parents never change while a process lives) so that polling
costs a directory listing plus one small read per process of the tree.

Two memory figures: RSS summed over the tree (what the task asks for; it counts pages
that forked workers share with their parent once per process, so it overstates
multi-process loaders) and PSS (each shared page split among its sharers: the tree's
fair share of physical memory).

Example:
    >>> import os
    >>> tree = ProcessTree(os.getpid())
    >>> tree.rss_bytes() > 0
    True
"""

from __future__ import annotations

import os
from typing import Dict, List

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("ascii", "replace")


def _stat_fields(pid: int) -> List[str]:
    """Fields of /proc/<pid>/stat after the command name (which may contain spaces)."""
    text = _read(f"/proc/{pid}/stat")
    return text[text.rindex(")") + 2 :].split()


class ProcessTree:
    """A process and all its descendants, re-discovered at every call.

    Args:
        root: pid of the tree's root.
    """

    def __init__(self, root: int):
        self.root = root
        self._parents: Dict[int, int] = {}

    def pids(self) -> List[int]:
        """The root and its live descendants (the root first)."""
        live = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        parents = {}
        for pid in live:
            parent = self._parents.get(pid)
            if parent is None:
                try:
                    parent = int(_stat_fields(pid)[1])
                except (OSError, ValueError, IndexError):  # exited meanwhile
                    continue
            parents[pid] = parent
        self._parents = parents  # forget the dead (their pids may be reused)
        children: Dict[int, List[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        return tree

    def rss_bytes(self) -> int:
        """Resident set size summed over the tree."""
        total = 0
        for pid in self.pids():
            try:
                total += int(_read(f"/proc/{pid}/statm").split()[1]) * PAGE_SIZE
            except (OSError, ValueError, IndexError):
                pass
        return total

    def pss_bytes(self) -> int:
        """Proportional set size summed over the tree (0 where smaps_rollup is missing)."""
        total = 0
        for pid in self.pids():
            try:
                for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            except (OSError, ValueError, IndexError):
                pass
        return total

    def cpu_seconds(self) -> float:
        """User + system CPU time of the live processes of the tree (threads included)."""
        ticks = 0
        for pid in self.pids():
            try:
                fields = _stat_fields(pid)
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, ValueError, IndexError):
                pass
        return ticks / CLOCK_TICKS


def system_busy_seconds() -> float:
    """CPU time all cores of the machine spent busy since boot (from /proc/stat)."""
    fields = _read("/proc/stat").splitlines()[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
