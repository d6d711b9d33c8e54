"""The one steady rule (pure): which step windows are the run's own training, and the rate they measure.

MaxText stamps a step done right after it dispatched it, then saves a checkpoint of it, then waits for the step
before to finish (to log its metrics). The device works on one step while the host dispatches the next, so the
time between two stamps is a step's work only while that pipeline is full. Anything that waits for the device
(the first dispatch of an attempt, a checkpoint save or restore, starting or stopping a trace) or holds the host
(a compilation) lands in the step whose window it fell in, and the step after it refills the pipeline: both are
left out, and so is the one after that: the refill step is stamped done as soon as it is dispatched, and its
work lands in the next step (CPU, 2026-12-05: 0.056 s then 3.50 s against 1.74 s steady after a save) or, after
a trace edge, in the edge step itself (the issue's profiled run: a short step, then one of normal length). From
the second stamp after the event on the pipeline is full again. No step is ever paired with another.

The steady rate is tokens over wall time of the windows that are left: each run of consecutive counted steps of
one attempt is one window, timed on the workers' own step-end clock (events.jsonl: from the stamp before its
first step to the stamp of its last), so a short step and a long one count as the time they took together.
Attempts recorded before moekit wrote events are judged by the attempt boundaries and checkpoint.every (saves at
step 0 and every N) and timed by MaxText's step times; the summary says so. Then, on what is left, the step times
themselves: warm-up at the start of each attempt and outliers. The same rule, with saves counted as training,
gives the rate with saves. docs/metrics.md states the rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from moekit.observe.runs.events import COMPILE, RESTORE, SAVE, TRACE_START, TRACE_STOP, Events

START, COMPILED, RESTORED, SAVED, TRACE, REFILL, WARMUP, OUTLIER, NONFINITE, CLOCK = (
    "attempt start",
    "compile",
    "checkpoint restore",
    "checkpoint save",
    "profile window edge",
    "pipeline refill",
    "warm-up",
    "outlier",
    "not finite",
    "clock jump",
)
WARMUP_FACTOR = 1.5  # a leading step of an attempt this many times the median of its later steps is warming up
OUTLIER_FACTOR = 3.0  # a step this many times the median of the counted steps is a stall, not steady work
COMPILE_SHARE = 0.1  # a compilation counts when it took at least this share of the step's window
MIN_STEADY = 3  # fewer steady steps than this give no steady number
# A step whose stamps (events: the time between its step-end stamp and the one before) and MaxText's own step time
# disagree by more than this many seconds plus JUMP_SHARE of the step time: the wall clock jumped (an NTP step, a
# paused VM) between the two stamps. Both time the same interval (MaxText stamps the step where its step time
# ends), so they agree otherwise: within 0.2 ms on every step of three smoke runs (CPU, 2026-12-07, jax 0.12.0.1,
# MaxText 0.2.5, step times 1.8-7.4 s on a shared 2-core host).
JUMP_S, JUMP_SHARE = 0.5, 0.5

REASONS = {
    START: "the first step of an attempt: start-up, restore and compilation precede it and the device pipeline is "
    "empty (events: the attempt's first step stamp)",
    COMPILED: f"a compilation took at least {COMPILE_SHARE:.0%} of the step's time (events: compile start and end)",
    RESTORED: "a checkpoint restore ran during the step (events: restore start and end)",
    SAVED: "a checkpoint save ran during the step: MaxText saves step s after stamping it, so step s + 1 pays "
    "(events: save start and end)",
    TRACE: "the profiler started or stopped tracing during the step (events: trace start, trace stop)",
    REFILL: "one of the two steps after one left out for an event (attempt start, compile, save, restore, trace "
    "edge): the device pipeline refills; the first is stamped done as soon as it is dispatched, and its work lands "
    "in the second (after a save or an attempt start) or in the step left out (after a trace edge)",
    WARMUP: f"a leading step of an attempt slower than {WARMUP_FACTOR:g}x the median of that attempt's later steps",
    OUTLIER: f"over {OUTLIER_FACTOR:g}x the median of the counted steps: a stall (a short step stays in its window: "
    "its work shows in the step after it)",
    NONFINITE: "its step time is NaN or infinite: no time can be counted from it",
    CLOCK: f"its step-end stamps and MaxText's own step time disagree by more than {JUMP_S:g} s + "
    f"{JUMP_SHARE:.0%} of the step: the wall clock jumped between the stamps (an NTP step, a paused VM), so the "
    "step and its jump stay out of every window (the summary's clock_jumps says by how much)",
}
# Reasons after which the pipeline refills. A compilation is host work: the device runs on with what is in flight,
# then waits, so the step after one is off too (CPU, 2026-12-04: after the metric compilations of a resumed
# attempt's second step, the third took 0.06 s against 0.7 s).
DRAINS = (START, COMPILED, RESTORED, SAVED, TRACE)
_BY_KIND = {COMPILE: COMPILED, RESTORE: RESTORED, SAVE: SAVED, TRACE_START: TRACE, TRACE_STOP: TRACE}
EVENTS, STEP_TIMES = "events", "step times"  # the clock a window was timed by


@dataclass(frozen=True, slots=True)
class Step:
    """One step's record as the rule needs it."""

    step: int
    seconds: float
    attempt: int


@dataclass(frozen=True, slots=True)
class Window:
    """Consecutive counted steps of one attempt and the wall time they took."""

    first: int
    last: int
    attempt: int
    seconds: float
    clock: str
    """EVENTS (the workers' step-end stamps) or STEP_TIMES (MaxText's step times, runs without events)."""

    def to_dict(self) -> dict[str, object]:
        """The window as the summary records it."""
        return {
            "steps": [self.first, self.last],
            "attempt": self.attempt,
            "wall_s": round(self.seconds, 4),
            "clock": self.clock,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """Which steps are left out (with their reason), the windows of the rest, and from what evidence each attempt
    was judged."""

    left_out: dict[int, str]
    evidence: dict[int, str]
    """attempt -> 'events' or 'checkpoint.every (no event record)'."""
    windows: list[Window]
    jumps: dict[int, float] | None = None
    """step -> its stamps' interval less MaxText's step time (s), for each step left out as a clock jump."""

    def steady(self, steps: Sequence[Step]) -> list[int]:
        """The steps not left out, in order."""
        return [s.step for s in steps if s.step not in self.left_out]


def judge(
    steps: Sequence[Step], events: Mapping[int, Events], checkpoint_every: int = 0, training: Collection[str] = ()
) -> Verdict:
    """The rule over all attempts' steps (one record per step): events first, then the times.

    `training`: reasons counted as training here (SAVED: the rate with saves, where no step is left out by its
    time, neither as warm-up nor as an outlier: what the run sustained includes its slow steps)."""
    out: dict[int, str] = {s.step: NONFINITE for s in steps if not math.isfinite(s.seconds)}
    evidence: dict[int, str] = {}
    jumps: dict[int, float] = {}
    by_attempt: dict[int, list[Step]] = {}
    for s in sorted(steps, key=lambda s: s.step):
        by_attempt.setdefault(s.attempt, []).append(s)
    for attempt, own in by_attempt.items():
        found = events.get(attempt)
        if found is not None and found.recorded:
            evidence[attempt] = "events"
            marks = _by_events(own, found, training)
            jumped = {s: j for s, j in clock_jumps(own, found.step_end).items() if marks.get(s) != START}
            jumps |= jumped
            marks |= dict.fromkeys(jumped, CLOCK)  # its stamps time no work: whatever else they seem to show
        else:
            evidence[attempt] = "checkpoint.every (no event record)"
            marks = _by_schedule(own, 0 if SAVED in training else checkpoint_every)
        out = marks | out  # a step that is not finite keeps that reason
        out |= _refills(own, out)
        out |= {} if training else _warmup(own, out)
    rest = [s for s in steps if s.step not in out]
    if rest and not training:  # counted as training, a save's step is long by nature: no outlier then
        median = statistics.median(s.seconds for s in rest)
        out |= {s.step: OUTLIER for s in rest if s.seconds > OUTLIER_FACTOR * median}
    kept = {s: j for s, j in jumps.items() if out.get(s) == CLOCK}
    return Verdict(dict(sorted(out.items())), evidence, _windows(by_attempt, out, events), kept)


def clock_jumps(own: Sequence[Step], stamps: Mapping[int, float]) -> dict[int, float]:
    """step -> its stamps' interval less its step time, for each step of `own` whose two step-end stamps and
    MaxText's step time disagree beyond JUMP_S + JUMP_SHARE of the step time (the clock jumped between them)."""
    out = {}
    for s in own:
        hi, lo = stamps.get(s.step), stamps.get(s.step - 1)
        if hi is None or lo is None or not math.isfinite(s.seconds):
            continue
        if abs((hi - lo) - s.seconds) > JUMP_S + JUMP_SHARE * s.seconds:
            out[s.step] = round(hi - lo - s.seconds, 3)
    return out


def _windows(
    by_attempt: Mapping[int, list[Step]], out: Mapping[int, str], events: Mapping[int, Events]
) -> list[Window]:
    """Each run of consecutive counted steps of one attempt, timed by its stamps where the attempt has them."""
    found: list[Window] = []
    for attempt, own in by_attempt.items():
        stamps = events[attempt].step_end if attempt in events else {}
        run: list[Step] = []
        for s in [*own, None]:
            if s is not None and s.step not in out and (not run or s.step == run[-1].step + 1):
                run.append(s)
                continue
            if run:
                lo, hi = stamps.get(run[0].step - 1), stamps.get(run[-1].step)
                if lo is not None and hi is not None and hi > lo:
                    found.append(Window(run[0].step, run[-1].step, attempt, hi - lo, EVENTS))
                else:
                    found.append(Window(run[0].step, run[-1].step, attempt, sum(x.seconds for x in run), STEP_TIMES))
            run = [s] if s is not None and s.step not in out else []
    return found


def _by_events(own: list[Step], found: Events, training: Collection[str] = ()) -> dict[int, str]:
    out = {own[0].step: START}  # later attempts replace records from their first step on: own[0] began this one
    for s in own:
        hi, lo = found.step_end.get(s.step), found.step_end.get(s.step - 1)
        if hi is None or lo is None or s.step in out:
            continue
        for kind, start, end, _ in found.intervals:
            reason = _BY_KIND[kind]
            if reason in training:
                continue
            if start == end:  # an instant (trace edge)
                hit = lo < start <= hi
            else:
                overlap = min(end, hi) - max(start, lo)
                hit = overlap > 0 and (kind != COMPILE or overlap >= COMPILE_SHARE * (hi - lo))
            if hit:
                out[s.step] = reason
                break
    return out


def _by_schedule(own: list[Step], every: int) -> dict[int, str]:
    out = {own[0].step: START}
    if every > 0:
        present = {s.step for s in own}
        # MaxText saves at step 0 and every `every` steps; the step after a save pays it.
        out |= {s.step: SAVED for s in own if s.step not in out and (s.step - 1) % every == 0 and s.step - 1 in present}
    return out


def _refills(own: list[Step], marked: dict[int, str]) -> dict[int, str]:
    steps = {s.step for s in own}
    drained = [s for s in sorted(steps) if marked.get(s) in DRAINS]
    return {r: REFILL for s in drained for r in (s + 1, s + 2) if r in steps and r not in marked}


def _warmup(own: list[Step], marked: dict[int, str]) -> dict[int, str]:
    rest = [s for s in own if s.step not in marked]
    out = {}
    for n, s in enumerate(rest[:-1]):
        if s.seconds <= WARMUP_FACTOR * statistics.median(t.seconds for t in rest[n + 1 :]):
            break
        out[s.step] = WARMUP
    return out
