"""Read MaxText's per-step metrics JSONL (metrics_file=)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from moekit.base import bounded, quantities
from moekit.base.errors import MoekitError
from moekit.base.parse import json_line

# The most a metrics file may hold: about a million steps of MaxText's records (a few hundred bytes each).
MAX_BYTES = 512 * bounded.MiB


class MetricsError(MoekitError):
    """A metrics file is missing or unreadable."""


@dataclass(frozen=True, slots=True)
class Metrics:
    """A run's per-step metrics records, read from MaxText's metrics file at `path`."""

    rows: list[dict]
    """One dict per step, in step order (the last record of a repeated step wins)."""
    truncated_tail: bool = False
    """The last line was cut off (a run killed mid-write); it was skipped."""
    path: Path | None = field(default=None)


def read(path: Path, steps: int | None = None) -> Metrics:
    """The metrics file's records, one per step in step order. A cut-off last line (a killed run) is skipped; any
    other unreadable line raises MetricsError, as does a missing file, one larger than MAX_BYTES and a step that is
    not a whole number in 0 .. `steps` - 1 (`steps`: the run's planned train.steps, when known) — a step number is
    checked before anything is sized by it."""
    by_step: dict[int, dict] = {}
    truncated = False
    pending: str | None = None  # an unreadable line without its newline: a cut-off tail if nothing follows
    try:
        with bounded.lines(path, MAX_BYTES, "metrics file") as lines:  # streamed: one line held at a time
            for i, line in enumerate(lines):
                if pending is not None:
                    raise MetricsError(pending)
                if not line.strip():
                    continue
                try:
                    row = json_line(line, str(path), finite=False)  # a NaN loss is a measurement: kept
                    step = _step(row["step"], steps)
                except (ValueError, KeyError, TypeError) as exc:
                    why = (
                        f"{bounded.shown(path)}:{i + 1} is not a MaxText metrics record "
                        f"({str(exc).split(': ', 1)[-1][:200]}); the file is corrupt or not this run's. "
                        "Fix: report on directories made by `moekit train` (or train the run again)."
                    )
                    if line.endswith(b"\n"):
                        raise MetricsError(why) from None
                    pending = why
                    continue
                by_step[step] = {sys.intern(k): v for k, v in row.items()}  # one copy of each key name
    except FileNotFoundError:
        raise MetricsError(
            f"no metrics file at {bounded.shown(path)}: the run wrote no step (see its maxtext.log)."
        ) from None
    except OSError as exc:
        raise MetricsError(
            f"cannot read {bounded.shown(path)} ({exc.strerror}); fix its permissions or give another run."
        ) from None
    truncated = pending is not None
    return Metrics([by_step[s] for s in sorted(by_step)], truncated, path)


def _step(value: object, steps: int | None) -> int:
    """A record's step number; ValueError unless it is a whole number in 0 .. steps - 1."""
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or quantities.problem("step", int(value)):  # 1e300 is no step either
        raise ValueError(f"step {value!r} is not a whole number from 0 to 2**53")
    if steps is not None and value >= steps:
        raise ValueError(f"step {int(value)} lies past the run's planned {steps} steps (train.steps in its config)")
    return int(value)


def series(m: Metrics, key: str) -> list[tuple[int, float]]:
    """(step, value) for every step that recorded `key` (MaxText omits perf keys before rampup_end_step)."""
    return [(int(r["step"]), float(r[key])) for r in m.rows if key in r]
