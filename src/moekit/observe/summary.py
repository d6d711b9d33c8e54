"""Steady-state summary of one run's metrics (pure)."""

from __future__ import annotations

import statistics
from typing import Any

from moekit.observe.metrics import Metrics

STEP_TIME = "perf/step_time_seconds"
TFLOPS = "perf/per_device_tflops_per_sec"
TOKENS = "perf/per_device_tokens_per_sec"
LOSS = "learning/loss"


def warmup_steps(times: list[float]) -> int:
    """Leading steps to drop: always the first (compilation), then any step still over 1.5x the later median."""
    n = 1 if len(times) > 1 else 0
    while n < len(times) - 1 and times[n] > 1.5 * statistics.median(times[n + 1 :]):
        n += 1
    return n


def summarize(m: Metrics, peaks: dict[str, float | None]) -> dict[str, Any]:
    rows = m.rows
    if not rows:
        return {"steps": 0}
    times = [float(r[STEP_TIME]) for r in rows if STEP_TIME in r]
    skip = warmup_steps(times)
    steady = rows[skip:]
    st = [float(r[STEP_TIME]) for r in steady]
    tf = [float(r[TFLOPS]) for r in steady if TFLOPS in r]
    tok = [float(r[TOKENS]) for r in steady if TOKENS in r]
    med_tf = statistics.median(tf) if tf else None
    out: dict[str, Any] = {
        "steps": len(rows),
        "warmup_steps": skip,
        "steady_steps": len(steady),
        "step_time_s": {
            "median": statistics.median(st),
            "min": min(st),
            "max": max(st),
            "stdev": statistics.stdev(st) if len(st) > 1 else 0.0,
        },
        "tflops_per_device": med_tf,
        "tokens_per_s_per_device": statistics.median(tok) if tok else None,
        "mfu": {k: (med_tf / p if (med_tf is not None and p) else None) for k, p in peaks.items()},
        "final_loss": float(rows[-1][LOSS]) if LOSS in rows[-1] else None,
        "losses": [float(r[LOSS]) for r in rows if LOSS in r],
        "truncated_tail": m.truncated_tail,
    }
    return out


def format_summary(s: dict[str, Any], hardware: str, peak_source: str) -> str:
    if not s.get("steps"):
        return "no steps completed"
    st = s["step_time_s"]
    lines = [
        f"steps            {s['steps']} ({s['warmup_steps']} warm-up, median over {s['steady_steps']})",
        f"step time        {st['median']:.4f} s median (min {st['min']:.4f}, max {st['max']:.4f})",
        f"TFLOP/s/device   {_num(s['tflops_per_device'], '.3f')}  (MaxText's count)",
        f"tokens/s/device  {_num(s['tokens_per_s_per_device'], '.1f')}",
    ]
    mfu = [f"{k} {v:.1%}" for k, v in s["mfu"].items() if v is not None]
    lines.append(f"MFU              {', '.join(mfu) if mfu else 'n/a'}  (hardware={hardware}: {peak_source})")
    lines.append(f"final loss       {_num(s['final_loss'], '.4f')}")
    return "\n".join(lines)


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)
