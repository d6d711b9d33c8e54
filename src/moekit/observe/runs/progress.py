"""Parse MaxText's log lines into progress: per-step records and start-up phases."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from typing import NamedTuple, TextIO

from moekit.base.failures import JOINED

_STEP = re.compile(r"completed step: (\d+), seconds: ([\d.]+),.*?loss: ([\d.eE+-]+|nan|inf)")


class StepLine(NamedTuple):
    """One `completed step` line of MaxText's log: step number, seconds it took and loss."""

    step: int
    seconds: float
    loss: float


def parse(line: str) -> StepLine | None:
    """The step record in a MaxText log line, or None when the line reports no completed step."""
    m = _STEP.search(line)
    if not m:
        return None
    return StepLine(int(m.group(1)), float(m.group(2)), float(m.group(3)))


class Pace:
    """The time per step so far, for the ETA: the mean over this attempt's steps after its first two (start-up and
    the pipeline filling: observe/runs/steady.py), so saves and the short steps after them count at their share."""

    SKIP = 2  # the attempt's first step and the one refilling the pipeline after it
    MIN = 2  # steps measured before there is an ETA

    def __init__(self) -> None:
        self.times: list[float] = []

    def add(self, s: StepLine) -> None:
        """Note one completed step."""
        self.times.append(s.seconds)

    def seconds_per_step(self) -> float | None:
        """Mean seconds per step over the measured steps, or None while there are too few."""
        measured = self.times[self.SKIP :]
        return sum(measured) / len(measured) if len(measured) >= self.MIN else None


def format_progress(s: StepLine, total: int, elapsed_s: float, pace: Pace | None = None) -> str:
    """One progress line: the step's number as the metrics, summary and report number it (0 to total - 1), how
    many of `total` are done, seconds it took, loss, the ETA at the measured pace (none before it is measured) and
    `elapsed_s`, the seconds since the command started (Phases.elapsed: the phase lines' clock)."""
    done = s.step + 1
    per_step = pace.seconds_per_step() if pace else None
    eta = "ETA  n/a (measuring)" if per_step is None else f"ETA {per_step * max(0, total - done):5.0f} s"
    return (
        f"step {s.step:>{len(str(total - 1))}} ({done}/{total} done)  {s.seconds:7.3f} s/step  loss {s.loss:8.4f}  "
        f"{eta}  ({elapsed_s:.0f} s elapsed)"
    )


# Start-up phases read from MaxText's own log lines (process 0), in the order they happen.
_PHASES = (
    (re.compile(re.escape(JOINED)), "rendezvous complete: every process joined"),
    (re.compile(r"moekit: fabric: (.*)"), "fabric check: {0}"),
    (re.compile(r"moekit: fabric warning: (.*)"), "fabric check WARNING: {0}"),
    (re.compile(r"restoring from this run's directory step (\d+)"), "restoring the checkpoint of step {0}"),
    (re.compile(r"not restoring checkpoint|restoring from this run's directory"), "compiling the train step"),
    (re.compile(r"\[train\] Total estimated memory size: ([\d.]+) GB"), "compiled (MaxText's estimate: {0} GB)"),
)


def parse_phase(line: str) -> list[str]:
    """The start-up phases a MaxText log line marks (usually none)."""
    out = []
    for rx, text in _PHASES:
        m = rx.search(line)
        if m:
            out.append(text.format(*m.groups()))
    return out


class Phases:
    """Prints each start-up phase as it begins, with the wall-clock time and the seconds since the command
    started, so the quiet minutes before the first step (imports, rendezvous, compilation) show what is going on."""

    def __init__(self, stream: TextIO | None = None, clock=time.monotonic, now=datetime.now):
        self._stream, self._clock, self._now = stream, clock, now
        self._start = clock()

    def elapsed(self) -> float:
        """Seconds since the command started: the one clock of every console line (phases and step progress)."""
        return self._clock() - self._start

    def __call__(self, phase: str) -> None:
        stream = self._stream or sys.stderr
        print(f"moekit: {self._now():%H:%M:%S} (+{self.elapsed():.1f} s) {phase}", file=stream, flush=True)
