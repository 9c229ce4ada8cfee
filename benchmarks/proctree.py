"""Reading a process tree from ``/proc``, shared by the benchmarks that measure memory and CPU
(``engine_overhead.py``: every process an arm starts; ``scale.py``: the driver and the server):
the tree below a process, a process's PSS, RSS and private resident memory, and a thread that
keeps the peak of any of them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")  # clock ticks per second of /proc/<pid>/stat's CPU times


def children() -> dict[int, list[int]]:
    """``ppid -> [pid, …]`` of every process now running."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(root: int, also_below: int | None = None) -> list[int]:
    """``root`` and all its descendants, and the descendants of ``also_below`` (a process that
    stands for one which exited, such as the launcher of a ``ray start`` instance; it is not
    itself counted)."""
    kids = children()
    out, todo = [], [root, *(kids.get(also_below, []) if also_below is not None else [])]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def smaps(pid: int | str = "self") -> dict[str, int]:
    """``Pss`` and ``Anonymous`` bytes of a process (``/proc/<pid>/smaps_rollup``)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss", "Anonymous"):
            fields[key] = int(rest.split()[0]) * 1024
    return fields


def pss(pid: int | str = "self") -> int:
    """Proportional set size: shared pages split among the processes mapping them."""
    return smaps(pid).get("Pss", 0)


def _status(pid: int | str, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    return 0


def rss(pid: int | str = "self") -> int:
    """Resident memory with every mapped page counted whole (shared object-store pages too):
    an upper bound beside PSS."""
    return _status(pid, "VmRSS")


def rss_anon(pid: int | str) -> int:
    """The process's private resident memory (its heap), without the shared pages it maps."""
    return _status(pid, "RssAnon")


class Peak:
    """The peak of ``measure()`` sampled every ``every`` seconds on a thread."""

    def __init__(self, measure, every: float = 0.2):
        self.measure, self.every, self.peak = measure, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.measure())
            except OSError:
                pass
            time.sleep(self.every)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak
