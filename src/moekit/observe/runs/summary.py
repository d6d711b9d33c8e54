"""Steady-state summary of one run's metrics (pure): rates over the steady windows, what was left out and why.

Which steps are steady is observe/runs/steady.py's one rule (events the run recorded, then the step times); every
consumer (train's summary, report, tune, verify, the benchmark runners) reads the numbers made here.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from moekit.base import failures
from moekit.observe.runs import steady
from moekit.observe.runs.events import Events
from moekit.observe.runs.metrics import Metrics

STEP_TIME = "perf/step_time_seconds"
TFLOPS = "perf/per_device_tflops_per_sec"
TOKENS = "perf/per_device_tokens_per_sec"
LOSS = "learning/loss"
ATTEMPT = "moekit/attempt"  # which attempt wrote a merged record (run/attempts.merge_metrics)

REASONS = steady.REASONS


def attempt_starts(attempts: Sequence[dict[str, Any]]) -> list[int]:
    """First step of each attempt, from a manifest's attempts (a resume starts after the checkpoint it restored)."""
    resumed = [a.get("resumed_from_checkpoint") for a in attempts]
    return sorted({0} | {int(r) + 1 for r in resumed if r is not None})


def _attempt_of(row: dict, starts: Sequence[int], last: int) -> int:
    """The attempt a record belongs to: its mark when merged, else by the manifest's attempt starts."""
    if ATTEMPT in row:
        return int(row[ATTEMPT])
    if len(starts) <= 1:
        return last
    return sum(1 for s in starts if s <= int(row["step"]))


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def summarize(
    m: Metrics,
    peaks: dict[str, float | None],
    checkpoint_every: int = 0,
    attempt_starts: Sequence[int] = (0,),
    events: Mapping[int, Events] | None = None,
    planned_steps: int | None = None,
    attempts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Rates over the steady windows (none when fewer than steady.MIN_STEADY steps), each left-out step with its reason,
    the steps that paid a save apart, the steps the records miss (they ran: a later one did) and the steps that
    never ran (after the last record, up to `planned_steps`).

    `events`: attempt number -> that attempt's events (observe/runs/events.per_attempt); `planned_steps`: train.steps;
    `attempts`: every attempt's entry in the manifest (an attempt that wrote no step counts too: the summary's
    attempt count is the manifest's, and a killed attempt is named with its wall time a lower bound).
    """
    rows = [r for r in m.rows if STEP_TIME in r]
    recorded = sorted(int(r["step"]) for r in m.rows)
    # A step the records miss ran (a later step did) but left no record; a step after the last record never ran.
    # Both are counted from the gaps between records, never from a range of every step number: a step number comes
    # from a file (the caller checks it against the planned steps first: rundata, or MaxText's own loop).
    missing = [s for a, b in zip(recorded, recorded[1:], strict=False) for s in range(a + 1, b)]
    missing = list(range(recorded[0])) + missing if recorded else []
    not_run = list(range(recorded[-1] + 1 if recorded else 0, planned_steps or 0))
    if not rows:
        return {
            "steps": len(m.rows),
            "steady_steps": 0,
            "excluded": [],
            "missing_steps": missing,
            "steps_not_run": not_run,
        } | _attempts(attempts, 1)
    events = events or {}
    last = max(events, default=1)
    starts = sorted(attempt_starts)
    by_step = {int(r["step"]): r for r in rows}
    steps = [steady.Step(s, float(r[STEP_TIME]), _attempt_of(r, starts, last)) for s, r in by_step.items()]
    verdict = steady.judge(steps, events, checkpoint_every)
    left_out = verdict.left_out
    counted = [r for s, r in by_step.items() if s not in left_out]
    out: dict[str, Any] = {
        "steps": len(m.rows),
        "steady_steps": len(counted),
        "counted_steps": [int(r["step"]) for r in counted],
        "excluded": [{"step": s, "reason": why} for s, why in left_out.items()],
        "windows": [w.to_dict() for w in verdict.windows],
        "exclusion_reasons": {why: REASONS[why] for why in dict.fromkeys(left_out.values())},
        "evidence": {str(a): e for a, e in sorted(verdict.evidence.items())},
        **_attempts(attempts, len(verdict.evidence)),
        "clock_jumps": [{"step": s, "stamps_less_step_time_s": j} for s, j in sorted((verdict.jumps or {}).items())],
        "missing_steps": missing,
        "steps_not_run": not_run,
        "step_time_s": None,
        "tflops_per_device": None,
        "tokens_per_s_per_device": None,
        "mfu": {k: None for k in peaks},
        "checkpoint": _checkpoint_steps(by_step, left_out, steps, events, checkpoint_every),
        "final_loss": float(m.rows[-1][LOSS]) if LOSS in m.rows[-1] else None,
        "losses": [float(r[LOSS]) for r in m.rows if LOSS in r],
        "truncated_tail": m.truncated_tail,
    }
    if len(counted) < steady.MIN_STEADY:
        out["note"] = (
            f"too few steady steps ({len(counted)} of {len(rows)}; at least {steady.MIN_STEADY} are needed): no "
            f"steady number. {_more_steady(set(left_out.values()))}."
        )
        return out
    rate = _rates(by_step, verdict.windows)
    out |= {
        "step_time_s": _spread([float(r[STEP_TIME]) for r in counted]) | {"per_window": rate[STEP_TIME]},
        "tflops_per_device": rate[TFLOPS],
        "tokens_per_s_per_device": rate[TOKENS],
        "mfu": {k: (rate[TFLOPS] / p if (rate[TFLOPS] is not None and p) else None) for k, p in peaks.items()},
    }
    return out


def _attempts(entries: Sequence[Mapping[str, Any]], with_steps: int) -> dict[str, Any]:
    """The attempt count (the manifest's entries, at least those that wrote steps) and the attempts before the
    last that were killed (their wall time runs from their first event to their last: a lower bound); the last
    attempt's end is the run's status."""
    bound = [e.get("wall_s_lower_bound") or ("wall_s" in e and e["wall_s"] is None) for e in entries]
    killed = [  # numbered by place: the manifest lists attempt 1 first (a damaged number is never read)
        n
        for n, (e, b) in enumerate(zip(entries[:-1], bound, strict=False), 1)
        if b or (e.get("failure") or {}).get("class") == failures.KILLED.name
    ]
    return {"attempts": max(len(entries), with_steps), "killed_attempts": killed, "wall_lower_bound": any(bound)}


def _more_steady(causes: set[str]) -> str:
    """What gives a run more steady steps: more steps, and fewer of the events that left these out (only those that
    did: a profiled run without checkpoints is not told about checkpoints)."""
    fixes = ["Run more steps"]
    if causes & {steady.SAVED, steady.RESTORED}:
        fixes.append("save checkpoints less often (checkpoint.every)")
    if steady.TRACE in causes:
        fixes.append(
            "leave more steps outside the profiler's window (profile.skip_steps, profile.steps), or profile=off"
        )
    return ", or ".join(fixes)


def _rates(by_step: Mapping[int, dict], windows: Sequence[steady.Window]) -> dict[str, float | None]:
    """Tokens/s and TFLOP/s per device over the windows: the work of their steps (MaxText's rate times its step
    time is the step's tokens or TFLOP) over the wall time of the windows; and the windows' time per step."""
    seconds = sum(w.seconds for w in windows)
    rows = [by_step[s] for w in windows for s in range(w.first, w.last + 1)]
    out: dict[str, float | None] = {STEP_TIME: seconds / len(rows) if rows else None}
    for key in (TOKENS, TFLOPS):
        done = all(key in r for r in rows) and rows and seconds > 0
        out[key] = sum(float(r[key]) * float(r[STEP_TIME]) for r in rows) / seconds if done else None
    return out


def _checkpoint_steps(
    by_step: dict[int, dict],
    left_out: dict[int, str],
    steps: Sequence[steady.Step],
    events: Mapping[int, Events],
    every: int,
) -> dict[str, Any] | None:
    """The steps that paid a save, and what the run sustained with its saves: the same rule with saves counted as
    training (windows that hold no other non-training event)."""
    saved = [r for s, r in by_step.items() if left_out.get(s) == steady.SAVED]
    if not saved:
        return None
    with_saves = steady.judge(steps, events, every, training=(steady.SAVED,))
    rate = _rates(by_step, with_saves.windows)
    return {
        "steps": [int(r["step"]) for r in saved],
        "step_time_s": _spread([float(r[STEP_TIME]) for r in saved]),
        "with_saves": {
            "tokens_per_s_per_device": rate[TOKENS],
            "tflops_per_device": rate[TFLOPS],
            "windows": [w.to_dict() for w in with_saves.windows],
        },
    }


def excluded_text(s: dict[str, Any]) -> str:
    """'0 (attempt start); 1 (pipeline refill); 3, 5 (checkpoint save)': which steps were left out, and why."""
    groups: dict[str, list[int]] = {}
    for e in s.get("excluded", []):
        groups.setdefault(e["reason"], []).append(e["step"])
    return "; ".join(f"{ranges(v)} ({why})" for why, v in groups.items()) or "none"


def killed_text(s: Mapping[str, Any]) -> str:
    """'attempt 1 of 2 was killed: the wall time is a lower bound', or '' when no attempt was killed."""
    killed = s.get("killed_attempts") or []
    if not killed:
        return ""
    which = ", ".join(map(str, killed))
    bound = ": the run's wall time is a lower bound" if s.get("wall_lower_bound") else ""
    plural = len(killed) > 1
    verb = "were" if plural else "was"
    return f"attempt{'s' if plural else ''} {which} of {s.get('attempts', '?')} {verb} killed{bound}"


def ranges(steps: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7, 8"."""
    parts, run = [], [steps[0]]
    for s in steps[1:]:
        if s == run[-1] + 1:
            run.append(s)
        else:
            parts.append(run)
            run = [s]
    parts.append(run)
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in parts)


def format_summary(s: dict[str, Any], hardware: str, peak_source: str) -> str:
    """A run's summary as aligned text: steps counted and left out (with why), step time, TFLOP/s, tokens/s, MFU,
    checkpoint cost, steps the records miss and final loss; no number where there are too few steady steps."""
    if not s.get("steps"):
        return "no steps completed"
    st = s.get("step_time_s")
    attempts = f" over {s['attempts']} attempts" if s.get("attempts", 1) > 1 else ""
    lines = [
        f"steps            {s['steps']}{attempts} ({s.get('steady_steps', 0)} steady)",
        f"left out         {excluded_text(s)}",
    ]
    if killed := killed_text(s):
        lines.append(f"killed           {killed}")
    for j in s.get("clock_jumps") or []:
        lines.append(
            f"clock jump       step {j['step']}: its stamps {j['stamps_less_step_time_s']:+.3f} s off MaxText's step "
            "time; left out of the windows"
        )
    if st:
        lines += [
            f"step time        {_num(st.get('per_window'), '.4f')} s per step over {len(s.get('windows', []))} "
            f"window(s); steps' median {st['median']:.4f} (min {st['min']:.4f}, max {st['max']:.4f})",
            f"TFLOP/s/device   {_num(s['tflops_per_device'], '.3f')}  (MaxText's count)",
            f"tokens/s/device  {_num(s['tokens_per_s_per_device'], '.1f')}",
        ]
        mfu = [f"{k} {v:.1%}" for k, v in s["mfu"].items() if v is not None]
        lines.append(f"MFU              {', '.join(mfu) if mfu else 'n/a'}  (hardware={hardware}: {peak_source})")
    ck = s.get("checkpoint")
    if ck:
        rate = ck["with_saves"]["tokens_per_s_per_device"]
        lines.append(
            f"checkpoint steps {len(ck['steps'])}, {ck['step_time_s']['median']:.4f} s median; with them "
            f"{_num(rate, '.1f')} tokens/s/device"
        )
    if s.get("missing_steps"):
        lines.append(f"no record        steps {ranges(s['missing_steps'])}")
    if s.get("steps_not_run"):
        lines.append(f"not run          steps {ranges(s['steps_not_run'])}")
    if s.get("note"):
        lines.append(f"note             {s['note']}")
    lines.append(f"final loss       {_num(s.get('final_loss'), '.4f')}")
    return "\n".join(lines)


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)
