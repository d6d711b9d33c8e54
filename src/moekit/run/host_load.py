"""How busy the host was over a run, and how much of it was not the run (effect: reads /proc; one sampling thread).

Every INTERVAL_S (and once at the start and once at the end) a sample reads /proc/loadavg, /proc/stat (the
host's busy and total CPU time, as the kernel counts it) and /proc/<pid>/stat of every process (name, parent,
and CPU time with that of its exited children: utime + stime + cutime + cstime). Over each interval between two
samples, the others' share is the host's busy time minus the run's own: the CPU time of moekit's process tree,
whose waited-for children that exited stay counted in their parent's cutime/cstime. So a neighbour that comes
and goes between two samples (a compile, a pip install, another training) counts, and a worker of the run that
exits is never "other". The processes that took the most are named as a hint (those seen alive at two samples),
by their own CPU time alone (utime + stime: a shell's finished children land in its cutime all at once, when it
waits for them, and were counted under their own names while they ran), and never above others' share of the
interval: no process is named with more of the host than all others took together.
A host without /proc (not Linux) records nothing. docs/metrics.md, "Comparing runs", states how reports use it.
"""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTERVAL_S = 5.0
TOP = 5  # other processes named in the record, the busiest first
PROC = Path("/proc")
UNKNOWN = "unknown"  # the record of an attempt whose moekit was killed: its host load was never measured


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the host: load average, the host's CPU ticks (busy, all), and each process's (name, parent,
    CPU ticks with those of its exited children, its own CPU ticks alone)."""

    load1: float
    busy: int
    total: int
    procs: dict[int, tuple[str, int, int, int]]


@dataclass(frozen=True, slots=True)
class Interval:
    """What happened between two samples, in CPU ticks: all, busy, the run's own, and each other process's."""

    total: int
    busy: int
    own: int
    others: dict[int, tuple[str, int]]

    @property
    def others_ticks(self) -> int:
        """The host's busy time that was not the run's (never below zero, never above the host's)."""
        return min(max(self.busy - self.own, 0), self.total)


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
            name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
            ticks = [int(x) for x in rest[11:15]]  # utime stime cutime cstime
            procs[int(entry.name)] = (name, int(rest[1]), sum(ticks), ticks[0] + ticks[1])
        except (OSError, ValueError, IndexError):  # gone between the listing and the read
            continue
    return Sample(load1, total - idle, total, procs)


def own_tree(procs: dict[int, tuple[str, int, int, int]], root: int) -> set[int]:
    """`root` and every process descending from it."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, *_) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


def interval(before: Sample, after: Sample, root: int) -> Interval:
    """The interval between two samples (pure). The run's own time is its tree's CPU time (exited children
    included through their parents) at `after` less at `before`; a process born in between counts from 0. Each
    other process's is its own CPU time alone, at most what all others took in the interval."""
    mine_before, mine_after = own_tree(before.procs, root), own_tree(after.procs, root)
    own = sum(after.procs[p][2] for p in mine_after) - sum(before.procs[p][2] for p in mine_before)
    found = Interval(after.total - before.total, after.busy - before.busy, max(own, 0), {})
    for pid, (name, _, _, t) in after.procs.items():
        if pid in mine_after:
            continue
        was = before.procs.get(pid)
        start = was[3] if was and was[0] == name else 0
        if t > start:
            found.others[pid] = (name, min(t - start, found.others_ticks))
    return found


def record(
    intervals: Sequence[Interval], loads: list[float], cpus: int, interval_s: float = INTERVAL_S
) -> dict[str, Any] | None:
    """What the intervals say (pure): the host's busy share, the share others took (per interval, summed), its
    range over the intervals, the busiest other processes, the load average's range over every sample (`loads`).
    None when no CPU time passed."""
    ticks = sum(i.total for i in intervals)
    if ticks <= 0:
        return None
    shares = [i.others_ticks / i.total for i in intervals if i.total > 0]
    used: dict[int, tuple[str, int]] = {}
    for i in intervals:
        for pid, (name, t) in i.others.items():
            used[pid] = (name, used.get(pid, (name, 0))[1] + t)
    top = sorted(used.items(), key=lambda kv: -kv[1][1])[:TOP]
    return {
        "samples": len(loads),
        "interval_s": interval_s,
        "cpus": cpus,
        "seconds": round(ticks / cpus / _ticks_per_s(), 1),
        "busy_share": round(sum(i.busy for i in intervals) / ticks, 3),
        "own_share": round(min(sum(i.own for i in intervals) / ticks, 1.0), 3),
        "others_share": round(sum(i.others_ticks for i in intervals) / ticks, 3),
        "others_share_range": [round(min(shares), 3), round(max(shares), 3)],
        "load1": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "others": [
            {"pid": pid, "name": name, "cpu_share": round(t / ticks, 3)} for pid, (name, t) in top if t / ticks >= 0.01
        ],
    }


def unknown(why: str) -> dict[str, Any]:
    """The record of an attempt nobody measured (its moekit was killed): a share no comparison may use."""
    return {"others_share": None, UNKNOWN: why}


def over_attempts(attempts: Sequence[tuple[dict[str, Any] | None, float | None]]) -> dict[str, Any] | None:
    """The run's host load from its attempts' (record, wall seconds) (pure): the others', own and busy shares
    weighted by each attempt's wall time; unknown (others_share None, with why) when any attempt that ran has no
    known share. An attempt that launched nothing (wall time 0) adds nothing."""
    ran = [(n, r, w) for n, (r, w) in enumerate(attempts, 1) if w != 0.0]
    if len(ran) == 1:
        return ran[0][1]
    missing = [n for n, r, _ in ran if not r or r.get("others_share") is None]
    if missing or not ran:
        which = ", ".join(map(str, missing))
        return unknown(f"attempt(s) {which} recorded no host load (killed, or made before moekit measured it)")
    weights = [float(w or r.get("seconds") or 0.0) for _, r, w in ran]
    if sum(weights) <= 0:
        return unknown("the attempts recorded no wall time")

    def mean(key: str) -> float | None:
        values = [r.get(key) for _, r, _ in ran]
        if any(v is None for v in values):
            return None
        return round(sum(w * float(v) for w, v in zip(weights, values, strict=True)) / sum(weights), 3)

    return {"attempts": len(ran), "seconds": round(sum(weights), 1)} | {
        k: mean(k) for k in ("busy_share", "own_share", "others_share")
    }


def _ticks_per_s() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


@dataclass
class Sampler:
    """Samples the host on a thread until stopped; `result` holds the record afterwards."""

    interval_s: float = INTERVAL_S
    proc: Path = PROC
    root: int = field(default_factory=os.getpid)
    result: dict[str, Any] | None = None
    last: Sample | None = None
    intervals: list[Interval] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _take(self) -> None:
        """One sample: the interval since the one before, and its load (only the latest sample is kept)."""
        if (s := sample(self.proc)) is not None:
            if self.last is not None:
                self.intervals.append(interval(self.last, s, self.root))
            self.last = s
            self.loads.append(s.load1)

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
            if self.intervals:
                self.result = record(self.intervals, self.loads, os.cpu_count() or 1, self.interval_s)
