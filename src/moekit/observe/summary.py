"""Steady-state summary of one run's metrics (pure): which steps count, which do not and why.

MaxText logs a step's time when the next one is dispatched, so a step's time is not always its own work:
- compilation lands on the first step of an attempt, or (multi-process runs) a few steps later, and the
  steps dispatched before it then show times that miss the wait;
- a checkpoint save of step s is paid by step s + 1 (MaxText saves at step 0 and every checkpoint.every).
Each rule below is one named reason; docs/metrics.md states them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from moekit.observe.metrics import Metrics

STEP_TIME = "perf/step_time_seconds"
TFLOPS = "perf/per_device_tflops_per_sec"
TOKENS = "perf/per_device_tokens_per_sec"
LOSS = "learning/loss"

COMPILE_FACTOR = 3.0  # a step this many times the run's median step time is a compilation or a stall
COMPILE_WINDOW = 5  # compilation lands within this many steps of an attempt's start
WARMUP_FACTOR = 1.5  # a leading step this many times the median of the steps after it is still warming up

REASONS = {
    "compile": f"compilation: the first step of an attempt, or its first step over {COMPILE_FACTOR:g}x the median "
    f"within {COMPILE_WINDOW} steps of the start",
    "before compile": "dispatched before the compilation finished: its time misses the wait",
    "warm-up": f"warm-up: slower than {WARMUP_FACTOR:g}x the median of the steps after it",
    "checkpoint": "pays the checkpoint save of the step before it (checkpoint.every): reported apart",
    "outlier": f"over {COMPILE_FACTOR:g}x the median later in the run: a recompilation or a stall",
}


def exclusions(
    steps: Sequence[int], times: Sequence[float], checkpoint_every: int = 0, attempt_starts: Sequence[int] = (0,)
) -> dict[int, str]:
    """step -> reason (a REASONS key) for every step left out of the steady state; the others are steady.

    attempt_starts: the first step of each attempt (0, and the step after each checkpoint a resume started from).
    """
    by_step = dict(zip(steps, times, strict=True))
    if len(by_step) < 2:
        return {}
    starts = sorted({s for s in attempt_starts if s in by_step} | {min(by_step)})
    # A resumed attempt starts right after the checkpoint it restored; that first step pays no save.
    saves = {s for s in by_step if checkpoint_every > 0 and s > 0 and (s - 1) % checkpoint_every == 0} - set(starts)
    base = [t for s, t in by_step.items() if s not in saves] or list(times)
    median = statistics.median(base)
    out: dict[int, str] = {}
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else max(by_step) + 1
        window = [s for s in sorted(by_step) if start <= s < min(end, start + COMPILE_WINDOW) and s not in saves]
        slow = [s for s in window if by_step[s] > COMPILE_FACTOR * median]
        compiled = slow[0] if slow else start
        out |= {s: "before compile" for s in window if s < compiled}
        out[compiled] = "compile"
    out |= {s: "checkpoint" for s in saves if s not in out}
    rest = [s for s in sorted(by_step) if s not in out]
    for n, s in enumerate(rest[:-1]):  # leading steps still warming up (autotuning, first transfers)
        if by_step[s] <= WARMUP_FACTOR * statistics.median(by_step[t] for t in rest[n + 1 :]):
            break
        out[s] = "warm-up"
    out |= {s: "outlier" for s in rest if s not in out and by_step[s] > COMPILE_FACTOR * median}
    return dict(sorted(out.items()))


def attempt_starts(attempts: Sequence[dict[str, Any]]) -> list[int]:
    """First step of each attempt, from a manifest's attempts (a resume starts after the checkpoint it restored)."""
    resumed = [a.get("resumed_from_checkpoint") for a in attempts]
    return sorted({0} | {int(r) + 1 for r in resumed if r is not None})


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
) -> dict[str, Any]:
    """Medians over the steady steps, the excluded steps with their reasons, checkpoint steps apart."""
    rows = [r for r in m.rows if STEP_TIME in r]
    if not rows:
        return {"steps": len(m.rows), "steady_steps": 0, "excluded": []}
    by_step = {int(r["step"]): r for r in rows}
    left_out = exclusions(list(by_step), [float(r[STEP_TIME]) for r in rows], checkpoint_every, attempt_starts)
    steady = [r for s, r in by_step.items() if s not in left_out]
    note = None
    if not steady:  # every step paid a save (checkpoint.every=1) or there is one step: use what there is
        steady = [r for s, r in by_step.items() if left_out.get(s) == "checkpoint"] or rows
        note = "no step is free of compilation or checkpoint saves: the medians include them"
    tf = [float(r[TFLOPS]) for r in steady if TFLOPS in r]
    med_tf = statistics.median(tf) if tf else None
    tok = [float(r[TOKENS]) for r in steady if TOKENS in r]
    out: dict[str, Any] = {
        "steps": len(m.rows),
        "steady_steps": len(steady),
        "counted_steps": [int(r["step"]) for r in steady],
        "excluded": [{"step": s, "reason": why} for s, why in left_out.items()],
        "exclusion_reasons": {why: REASONS[why] for why in dict.fromkeys(left_out.values())},
        "step_time_s": _spread([float(r[STEP_TIME]) for r in steady]),
        "tflops_per_device": med_tf,
        "tokens_per_s_per_device": statistics.median(tok) if tok else None,
        "mfu": {k: (med_tf / p if (med_tf is not None and p) else None) for k, p in peaks.items()},
        "checkpoint": _checkpoint_steps(by_step, left_out, steady),
        "final_loss": float(m.rows[-1][LOSS]) if LOSS in m.rows[-1] else None,
        "losses": [float(r[LOSS]) for r in m.rows if LOSS in r],
        "truncated_tail": m.truncated_tail,
    }
    if note:
        out["note"] = note
    return out


def _checkpoint_steps(by_step: dict[int, dict], left_out: dict[int, str], steady: list[dict]) -> dict[str, Any] | None:
    """The steps that paid a save, and the throughput of the run's steady and save steps together (what a run
    with these checkpoints sustains: total tokens over total time)."""
    saved = [r for s, r in by_step.items() if left_out.get(s) == "checkpoint"]
    if not saved:
        return None
    both = steady + [r for r in saved if r not in steady]
    seconds = sum(float(r[STEP_TIME]) for r in both)

    def rate(key: str) -> float | None:
        if not all(key in r for r in both) or seconds <= 0:
            return None
        return sum(float(r[key]) * float(r[STEP_TIME]) for r in both) / seconds

    return {
        "steps": [int(r["step"]) for r in saved],
        "step_time_s": _spread([float(r[STEP_TIME]) for r in saved]),
        "with_saves": {"tokens_per_s_per_device": rate(TOKENS), "tflops_per_device": rate(TFLOPS)},
    }


def excluded_text(s: dict[str, Any]) -> str:
    """'steps 0-1 (before compile), 2 (compile), 3, 5 (checkpoint)': which steps were left out, and why."""
    groups: dict[str, list[int]] = {}
    for e in s.get("excluded", []):
        groups.setdefault(e["reason"], []).append(e["step"])
    return "; ".join(f"{_ranges(v)} ({why})" for why, v in groups.items()) or "none"


def _ranges(steps: list[int]) -> str:
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
    """A run's summary as aligned text: steps counted, step time, TFLOP/s, tokens/s, MFU, checkpoint cost and final
    loss."""
    if not s.get("steady_steps"):
        return "no steps completed"
    st = s["step_time_s"]
    lines = [
        f"steps            {s['steps']} (median over {s['steady_steps']} steady)",
        f"left out         {excluded_text(s)}",
        f"step time        {st['median']:.4f} s median (min {st['min']:.4f}, max {st['max']:.4f})",
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
    if s.get("note"):
        lines.append(f"note             {s['note']}")
    lines.append(f"final loss       {_num(s['final_loss'], '.4f')}")
    return "\n".join(lines)


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)
