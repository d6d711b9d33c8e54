"""The one steady-step rule (pure): which steps' times are the run's own work, and why each other one is not.

MaxText stamps a step done right after it dispatched it, then saves a checkpoint of it, then waits for the step
before to finish (to log its metrics). The device works on one step while the host dispatches the next, so a
step's time is its own work only while that pipeline is full. Anything that waits for the device (the first
dispatch of an attempt, a checkpoint save or restore, starting or stopping a trace) lands in the time of the step
whose window it fell in and leaves the next one off: the pipeline refills. A compilation lands in its step, and
the next one refills too.

The step left off is not all idle: MaxText stamps it done as soon as it is dispatched, and its work runs in the
step after it, which then takes about two steps' time. So the two are one pair: where the step after a refill is
itself steady (judged by its own time, as every step), both count, each at the pair's mean time: work is counted
where it was done, and a steady rate is never the doubled step alone. Where the step after it is left out too,
the refill is left out with it.

Which window an event fell in comes from the run's own record (events.jsonl, observe/runs/events.py): each step's end
stamp and when each save, restore, compilation and trace edge started and ended. Attempts recorded before
moekit wrote events are judged by the attempt boundaries and checkpoint.every (saves at step 0 and every N), and
the summary says so. Then, on what is left, the step times themselves: warm-up at the start of each attempt and
outliers. docs/metrics.md states the rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from moekit.observe.runs.events import COMPILE, RESTORE, SAVE, TRACE_START, TRACE_STOP, Events

START, COMPILED, RESTORED, SAVED, TRACE, REFILL, WARMUP, OUTLIER, NONFINITE = (
    "attempt start",
    "compile",
    "checkpoint restore",
    "checkpoint save",
    "profile window edge",
    "pipeline refill",
    "warm-up",
    "outlier",
    "not finite",
)
WARMUP_FACTOR = 1.5  # a leading step of an attempt this many times the median of its later steps is warming up
OUTLIER_FACTOR = 3.0  # a step this many times (or this fraction of) the median of the counted steps is not steady
COMPILE_SHARE = 0.1  # a compilation counts when it took at least this share of the step's window
MIN_STEADY = 3  # fewer steady steps than this give no steady number

REASONS = {
    START: "the first step of an attempt: start-up, restore and compilation precede it and the device pipeline is "
    "empty (events: the attempt's first step stamp)",
    COMPILED: f"a compilation took at least {COMPILE_SHARE:.0%} of the step's time (events: compile start and end)",
    RESTORED: "a checkpoint restore ran during the step (events: restore start and end)",
    SAVED: "a checkpoint save ran during the step: MaxText saves step s after stamping it, so step s + 1 pays "
    "(events: save start and end)",
    TRACE: "the profiler started or stopped tracing during the step (events: trace start, trace stop)",
    REFILL: "the step after one left out for an event (attempt start, compile, save, restore, trace edge): the "
    "device pipeline refills, and its work lands in the step after it; where that step is steady the two count as "
    "one pair at their mean time, else both are left out",
    WARMUP: f"a leading step of an attempt slower than {WARMUP_FACTOR:g}x the median of that attempt's later steps",
    OUTLIER: f"over {OUTLIER_FACTOR:g}x or under 1/{OUTLIER_FACTOR:g} of the median of the counted steps: a stall "
    "or a timing artefact",
    NONFINITE: "its step time is NaN or infinite: no time can be counted from it",
}
# Reasons after which the pipeline refills. A compilation is host work: the device runs on with what is in flight,
# then waits, so the step after one is off too (CPU, 2026-12-04: after the metric compilations of a resumed
# attempt's second step, the third took 0.06 s against 0.7 s).
DRAINS = (START, COMPILED, RESTORED, SAVED, TRACE)
_BY_KIND = {COMPILE: COMPILED, RESTORE: RESTORED, SAVE: SAVED, TRACE_START: TRACE, TRACE_STOP: TRACE}


@dataclass(frozen=True, slots=True)
class Step:
    """One step's record as the rule needs it."""

    step: int
    seconds: float
    attempt: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """Which steps are left out (with their reason), and from what evidence each attempt was judged."""

    left_out: dict[int, str]
    evidence: dict[int, str]
    """attempt -> 'events' or 'checkpoint.every (no event record)'."""
    pairs: dict[int, int] = field(default_factory=dict)
    """refill step -> the steady step after it that did its work: both count, each at the pair's mean time."""

    def steady(self, steps: Sequence[Step]) -> list[int]:
        """The steps not left out, in order."""
        return [s.step for s in steps if s.step not in self.left_out]


def judge(steps: Sequence[Step], events: Mapping[int, Events], checkpoint_every: int = 0) -> Verdict:
    """The rule over all attempts' steps (one record per step): events first, then the times."""
    out: dict[int, str] = {s.step: NONFINITE for s in steps if not math.isfinite(s.seconds)}
    evidence: dict[int, str] = {}
    by_attempt: dict[int, list[Step]] = {}
    for s in sorted(steps, key=lambda s: s.step):
        by_attempt.setdefault(s.attempt, []).append(s)
    for attempt, own in by_attempt.items():
        found = events.get(attempt)
        if found is not None and found.recorded:
            evidence[attempt] = "events"
            marks = _by_events(own, found)
        else:
            evidence[attempt] = "checkpoint.every (no event record)"
            marks = _by_schedule(own, checkpoint_every)
        out = marks | out  # a step that is not finite keeps that reason
        out |= _refills(own, out)
        out |= _warmup(own, out)
    rest = [s for s in steps if s.step not in out]
    if rest:
        median = statistics.median(s.seconds for s in rest)
        out |= {
            s.step: OUTLIER for s in rest if s.seconds > OUTLIER_FACTOR * median or s.seconds * OUTLIER_FACTOR < median
        }
    # A refill whose next step (same attempt) counts did its work there: the two count as one pair.
    attempt_of = {s.step: s.attempt for s in steps}
    pairs = {
        r: r + 1
        for r, why in out.items()
        if why == REFILL and attempt_of.get(r + 1) == attempt_of[r] and r + 1 not in out
    }
    for r in pairs:
        del out[r]
    return Verdict(dict(sorted(out.items())), evidence, dict(sorted(pairs.items())))


def paired(steps: Sequence[Step], pairs: Mapping[int, int]) -> list[Step]:
    """`steps` with each pair's two members at the pair's mean time (the work of both, over the time of both)."""
    seconds = {s.step: s.seconds for s in steps}
    mean = {}
    for r, n in pairs.items():
        mean[r] = mean[n] = (seconds[r] + seconds[n]) / 2
    return [Step(s.step, mean.get(s.step, s.seconds), s.attempt) for s in steps]


def _by_events(own: list[Step], found: Events) -> dict[int, str]:
    out = {own[0].step: START}  # later attempts replace records from their first step on: own[0] began this one
    for s in own:
        hi, lo = found.step_end.get(s.step), found.step_end.get(s.step - 1)
        if hi is None or lo is None or s.step in out:
            continue
        for kind, start, end, _ in found.intervals:
            reason = _BY_KIND[kind]
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
    return {s + 1: REFILL for s in sorted(steps) if marked.get(s) in DRAINS and s + 1 in steps and s + 1 not in marked}


def _warmup(own: list[Step], marked: dict[int, str]) -> dict[int, str]:
    rest = [s for s in own if s.step not in marked]
    out = {}
    for n, s in enumerate(rest[:-1]):
        if s.seconds <= WARMUP_FACTOR * statistics.median(t.seconds for t in rest[n + 1 :]):
            break
        out[s.step] = WARMUP
    return out
