"""The run's own record of what happened when: events.jsonl, written by each training process (worker/step_events.py).

One JSON object per line, wall-clock seconds (time.time() of the process that wrote it):

    {"event": "start", "t": ...}                           the process started (an attempt begins)
    {"event": "step_end", "step": s, "t": ...}             MaxText stamped step s done (its step time ends here)
    {"event": "save_begin", "step": s, "t": ...}           a checkpoint save of step s began (the save follows)
    {"event": "save", "step": s, "start": ..., "end": ...}  a checkpoint save of step s (blocking part)
    {"event": "restore_begin", "t": ...}                   a checkpoint restore began
    {"event": "restore", "start": ..., "end": ...}         a checkpoint restore
    {"event": "compile", "start": ..., "end": ...}         an XLA compilation (jax.monitoring's duration)
    {"event": "trace_start" | "trace_stop", "t": ...}      the profiler started or stopped tracing
    {"event": "stop", "step": s, "t": ...}                 the process stopped at step s for a preemption notice

Process i writes events.jsonl (i = 0) or events.<i>.jsonl, beside its metrics file; each attempt's file moves to
attempts/<n>/ with its metrics (rundir/attempts.py). This module reads them; steady.py judges steps by them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from moekit.base import bounded, quantities
from moekit.base.parse import json_line

FILE = "events.jsonl"
ENV = "MOEKIT_EVENTS"  # the file a training process appends its events to
# moekit's own stop flag: the launcher writes {"step": N, ...} here when it is asked to stop, and every worker
# stops at the first step boundary >= N (run/preemption.py decides N; worker/step_events.py obeys it).
STOP_FILE = "stop.json"
STOP_ENV = "MOEKIT_STOP"

START, STEP_END, SAVE, RESTORE, COMPILE = "start", "step_end", "save", "restore", "compile"
TRACE_START, TRACE_STOP, STOP = "trace_start", "trace_stop", "stop"
SAVE_BEGIN, RESTORE_BEGIN = "save_begin", "restore_begin"
MAX_BYTES = 512 * bounded.MiB  # a few events per step, about a hundred bytes each: millions of steps
_ENDED_BY = {SAVE_BEGIN: SAVE, RESTORE_BEGIN: RESTORE}


@dataclass(frozen=True, slots=True)
class Events:
    """One attempt's events of one process."""

    step_end: dict[int, float]
    """step -> wall time MaxText stamped it done (the last stamp when a step ran twice in one attempt)."""
    intervals: list[tuple[str, float, float, int | None]]
    """(kind, start, end, step or None) of saves, restores, compilations; trace edges as zero-length intervals."""
    stopped_at: int | None = None
    """The step a preemption notice stopped this attempt at."""

    @property
    def recorded(self) -> bool:
        """Whether the attempt recorded step stamps (runs made before moekit recorded events have none)."""
        return bool(self.step_end)


def _step(value: object) -> int:
    """A recorded step; ValueError (the line is skipped) for what no run records: Infinity, 1e300, true, "3"."""
    if why := quantities.problem("step", value):
        raise ValueError(why)
    return int(value)  # type: ignore[call-overload]


def _time(value: object) -> float:
    """A recorded wall-clock time (seconds since the epoch); ValueError for what is not a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e11:
        raise ValueError(f"{value!r} is not a wall-clock time")
    return float(value)


def parse(lines: Iterable[str] | Iterable[bytes]) -> Events:
    """Events from the lines of an events file; a line cut off by a kill (or otherwise unreadable) is skipped."""
    ends: dict[int, float] = {}
    spans: list[tuple[str, float, float, int | None]] = []
    stopped = None
    for line in lines:
        try:
            e = json_line(line)
            kind = e["event"]
            if kind == STEP_END:
                ends[_step(e["step"])] = _time(e["t"])
            elif kind in (SAVE, RESTORE, COMPILE):
                step = e.get("step")
                spans.append((kind, _time(e["start"]), _time(e["end"]), None if step is None else _step(step)))
            elif kind in (TRACE_START, TRACE_STOP):
                spans.append((kind, _time(e["t"]), _time(e["t"]), None))
            elif kind == STOP:
                stopped = _step(e["step"])
        except (ValueError, KeyError, TypeError, OverflowError):
            continue
    return Events(ends, spans, stopped)


def last_io(lines: Iterable[str] | Iterable[bytes]) -> tuple[str, float, bool] | None:
    """The last checkpoint save or restore in the lines of a process's events file: (save or restore, the wall
    time it began or, once it ended, ended, whether it is still under way); None when there is none. The stall
    watchdog waits for such I/O and counts from its end."""
    last: tuple[str, float, bool] | None = None
    for line in lines:
        try:
            e = json_line(line)
            kind = e["event"]
            if kind in _ENDED_BY:
                last = (_ENDED_BY[kind], _time(e["t"]), True)
            elif kind in (SAVE, RESTORE):
                last = (kind, _time(e["end"]), False)
        except (ValueError, KeyError, TypeError, OverflowError):
            continue
    return last


def span(lines: Iterable[str] | Iterable[bytes]) -> tuple[float, float] | None:
    """The first and the last wall time in the lines of an events file (any event's `t`, `start` or `end`); None
    when there is none. A killed attempt's wall time is at least their difference."""
    times = []
    for line in lines:
        try:
            e = json_line(line)
            times += [_time(e[k]) for k in ("t", "start", "end") if k in e]
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            continue
    return (min(times), max(times)) if times else None


def lines(path: Path) -> list[bytes]:
    """The lines of an events file, read within MAX_BYTES from one handle; empty when it cannot be read (absent,
    not a regular file: a pipe planted there never blocks the reader)."""
    try:
        with bounded.lines(path, MAX_BYTES, "run's events file") as found:
            return list(found)
    except (OSError, bounded.TooLarge):
        return []


def read(path: Path) -> Events:
    """The events of one file; empty when there is none (a run made before moekit recorded events); TooLarge when
    it holds more than MAX_BYTES or is not a regular file."""
    try:
        with bounded.lines(path, MAX_BYTES, "run's events file") as lines:
            return parse(lines)  # type: ignore[arg-type]  (bytes lines: json_line takes either)
    except OSError:
        return Events({}, [])


def per_attempt(run: Path, attempts_dir: str = "attempts", last: int | None = None) -> dict[int, Events]:
    """attempt number -> process 0's events: attempts/<n>/events.jsonl for the earlier attempts, the run
    directory's own file for the last one (numbered after the earlier ones, as run/attempts.merge_metrics does,
    or `last`: the highest attempt the merged records name, when attempts/ was not copied along)."""
    folder = run / attempts_dir
    earlier = sorted(
        (int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()) if folder.is_dir() else []
    )
    out = {n: read(folder / str(n) / FILE) for n in earlier}
    out[max((earlier[-1] if earlier else 0) + 1, last or 0)] = read(run / FILE)
    return out
