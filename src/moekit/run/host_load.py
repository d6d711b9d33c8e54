"""How busy the host was over a run, and with what besides the run (effect: reads /proc; one sampling thread).

Every INTERVAL_S (and once at the start and once at the end) a sample reads /proc/loadavg, /proc/stat (the
host's CPU time) and /proc/<pid>/stat of every process (its CPU time, name and parent). The record compares the
first and last sample: the host's busy share of all its CPUs, the share other processes took (every process
outside this moekit's own tree), the top other consumers, and the 1-minute load average's range. Reading a few
hundred small files every few seconds costs milliseconds. A host without /proc (not Linux) records nothing.
"""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTERVAL_S = 5.0
TOP = 5  # other processes named in the record, the busiest first
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the host: load average, the host's CPU ticks (busy, all), and each process's (name, parent,
    CPU ticks)."""

    load1: float
    busy: int
    total: int
    procs: dict[int, tuple[str, int, int]]


def sample(proc: Path = PROC) -> Sample | None:
    """The host now; None where /proc cannot be read."""
    try:
        load1 = float((proc / "loadavg").read_text().split()[0])
        cpu = [int(x) for x in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)  # idle + iowait
    total = sum(cpu[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    procs = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone between the listing and the read
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        procs[int(entry.name)] = (name, int(rest[1]), int(rest[11]) + int(rest[12]))  # ppid, utime + stime
    return Sample(load1, total - idle, total, procs)


def own_tree(procs: dict[int, tuple[str, int, int]], root: int) -> set[int]:
    """`root` and every process descending from it."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


def record(
    first: Sample, last: Sample, loads: list[float], own: set[int], cpus: int, interval_s: float = INTERVAL_S
) -> dict[str, Any] | None:
    """What two samples say (pure): busy and others' shares of the host's CPU time between them (`own`: the pids of
    the run's own tree seen at any sample), the busiest other processes, the load average's range over every
    sample (`loads`). None when no CPU time passed between them."""
    ticks = last.total - first.total
    if ticks <= 0:
        return None
    used: dict[int, tuple[str, int]] = {}
    for pid, (name, _, t) in last.procs.items():
        before = first.procs.get(pid)
        start = before[2] if before and before[0] == name else 0  # a process born during the run counts from 0
        used[pid] = (name, max(t - start, 0))
    others = {pid: u for pid, u in used.items() if pid not in own}
    other_ticks = sum(t for _, t in others.values())
    top = sorted(others.items(), key=lambda kv: -kv[1][1])[:TOP]
    return {
        "samples": len(loads),
        "interval_s": interval_s,
        "cpus": cpus,
        "busy_share": round((last.busy - first.busy) / ticks, 3),
        "others_share": round(min(other_ticks / ticks, 1.0), 3),
        "load1": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "others": [
            {"pid": pid, "name": name, "cpu_share": round(t / ticks, 3)} for pid, (name, t) in top if t / ticks >= 0.01
        ],
    }


@dataclass
class Sampler:
    """Samples the host on a thread until stopped; `result` holds the record afterwards."""

    interval_s: float = INTERVAL_S
    proc: Path = PROC
    root: int = field(default_factory=os.getpid)
    result: dict[str, Any] | None = None
    first: Sample | None = None
    last: Sample | None = None
    loads: list[float] = field(default_factory=list)
    own: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _take(self) -> None:
        """One sample: kept as the first or the latest, its load and the run's own pids (nothing else is kept)."""
        if (s := sample(self.proc)) is not None:
            self.first = self.first or s
            self.last = s
            self.loads.append(s.load1)
            self.own |= own_tree(s.procs, self.root)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        """Sample from entry to exit (a sample at each end), then set `result`."""
        self._take()
        thread = threading.Thread(target=self._loop, name="moekit-host-load", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=self.interval_s + 1)
            self._take()
            if self.first is not None and self.last is not None and self.last is not self.first:
                self.result = record(self.first, self.last, self.loads, self.own, os.cpu_count() or 1, self.interval_s)
