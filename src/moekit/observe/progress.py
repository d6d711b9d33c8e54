"""Parse MaxText's per-step log line into a progress record (pure)."""

from __future__ import annotations

import re
from typing import NamedTuple

_STEP = re.compile(r"completed step: (\d+), seconds: ([\d.]+),.*?loss: ([\d.eE+-]+|nan|inf)")


class StepLine(NamedTuple):
    step: int
    seconds: float
    loss: float


def parse(line: str) -> StepLine | None:
    m = _STEP.search(line)
    if not m:
        return None
    return StepLine(int(m.group(1)), float(m.group(2)), float(m.group(3)))


def format_progress(s: StepLine, total: int, elapsed_s: float) -> str:
    done = s.step + 1
    eta = s.seconds * max(0, total - done)
    return (
        f"step {done:>{len(str(total))}}/{total}  {s.seconds:7.3f} s/step  loss {s.loss:8.4f}  "
        f"ETA {eta:5.0f} s  ({elapsed_s:.0f} s elapsed)"
    )
