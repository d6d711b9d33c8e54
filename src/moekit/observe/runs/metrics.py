"""Read MaxText's per-step metrics JSONL (metrics_file=)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from moekit.base.errors import MoekitError


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


def read(path: Path) -> Metrics:
    """The metrics file's records, one per step in step order. A cut-off last line (a killed run) is skipped; any
    other unreadable line raises MetricsError, as does a missing file."""
    if not path.is_file():
        raise MetricsError(f"no metrics file at {path}: the run wrote no step (see its maxtext.log).")
    text = path.read_text(encoding="utf8", errors="replace")
    lines = text.splitlines()
    by_step: dict[int, dict] = {}
    truncated = False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError) as exc:
            if i == len(lines) - 1 and not text.endswith("\n"):
                truncated = True
                continue
            raise MetricsError(
                f"{path}:{i + 1} is not a MaxText metrics record ({exc}); the file is corrupt."
            ) from None
        by_step[step] = row
    return Metrics([by_step[s] for s in sorted(by_step)], truncated, path)


def series(m: Metrics, key: str) -> list[tuple[int, float]]:
    """(step, value) for every step that recorded `key` (MaxText omits perf keys before rampup_end_step)."""
    return [(int(r["step"]), float(r[key])) for r in m.rows if key in r]
