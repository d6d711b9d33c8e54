"""Load a finished run directory (resolved config, versions, manifest, metrics) for reports (effect: reads files)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.observe import events, metrics, summary
from moekit.observe.metrics import Metrics, MetricsError
from moekit.run import records

# Overrides that only place a run; they never distinguish one run from another in a report.
PLACEMENT = ("run.dir=", "run.base_dir=", "run.name=", "cluster.coordinator_port=")


@dataclass(frozen=True, slots=True)
class Run:
    """One run directory's records, loaded for a report."""

    path: Path
    config: dict[str, Any]
    """The resolved moekit config the run used (config.yaml)."""
    versions: dict[str, str]
    manifest: records.Manifest
    metrics: Metrics
    summary: dict[str, Any]
    """observe.summary.summarize() of the metrics against the run's own hardware peaks."""
    profile: dict[str, Any] | None = None
    """The run's step-time breakdown (profile.json), when it was trained with profile=on."""

    @property
    def overrides(self) -> list[str]:
        """The run's overrides, less those that only place it (directory, name, port)."""
        return [o for o in self.manifest.overrides if not o.startswith(PLACEMENT)]

    @property
    def hardware(self) -> dict[str, Any]:
        """The hardware section of the run's config (empty when absent)."""
        return self.config.get("hardware", {})

    @property
    def devices(self) -> int:
        """Devices the run used, computed from its recorded cluster section."""
        c = self.config.get("cluster", {})
        per_process = max(1, c.get("gpus_per_node", 1) // max(1, c.get("processes_per_node", 1)))
        return c.get("nodes", 1) * c.get("processes_per_node", 1) * per_process

    @property
    def date(self) -> str:
        """The day the run started (YYYY-MM-DD), or '?' when unrecorded."""
        return str(self.manifest.started or "")[:10] or "?"


def _read(read: Callable[[Path], Any], path: Path) -> Any:
    try:
        return read(path)
    except records.Unreadable as exc:
        raise MetricsError(f"{exc.path} is unreadable ({exc.why}); the run directory is damaged.") from None


def load(path: Path) -> Run:
    """The run directory at `path`, with its summary computed from its metrics; MetricsError when it is not one."""
    if not path.is_dir():
        raise MetricsError(f"{path} is not a directory: give run directories made by `moekit train`.")
    cfg = _read(records.read_config, path)
    if cfg is None:
        raise MetricsError(
            f"{path} has no {rundir.CONFIG}: it is not a moekit run directory; give directories made by `moekit train`."
        )
    vers = _read(records.read_versions, path)
    manifest = _read(records.read_manifest, path) or records.Manifest(status="")
    m = metrics.read(path / rundir.METRICS)
    if not m.rows:
        raise MetricsError(f"{m.path} holds no completed step; nothing to report (see {path / rundir.LOG}).")
    prof = _read(records.read_profile, path)
    return Run(path, cfg, vers, manifest, m, summarize(m, cfg, manifest, path), prof)


def summarize(
    m: Metrics, cfg: dict[str, Any], manifest: records.Manifest | None, run: Path | None = None
) -> dict[str, Any]:
    """summary.summarize() with what the run's own records say: its peaks, checkpoint period, attempts, planned
    steps and, from run directory `run` (the metrics file's folder by default), every attempt's events."""
    peaks = cfg.get("hardware", {}).get("peak_tflops", {}) or {}
    every = int((cfg.get("checkpoint") or {}).get("every") or 0)
    planned = int((cfg.get("train") or {}).get("steps") or 0) or None
    history = manifest.history() if manifest else [{}]
    folder = run or (m.path.parent if m.path else None)
    last = max((int(r.get(summary.ATTEMPT, 0)) for r in m.rows), default=0) or None
    found = events.per_attempt(folder, last=last) if folder else {}
    return summary.summarize(m, peaks, every, summary.attempt_starts(history), found, planned)
