"""Load a finished run directory (resolved config, versions, manifest, metrics) for reports (effect: reads files)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from moekit import rundir
from moekit.observe import metrics, summary
from moekit.observe.metrics import Metrics, MetricsError

# Overrides that only place a run; they never distinguish one run from another in a report.
PLACEMENT = ("run.dir=", "run.base_dir=", "run.name=", "cluster.coordinator_port=")


@dataclass(frozen=True, slots=True)
class Run:
    path: Path
    config: dict[str, Any]
    """The resolved moekit config the run used (config.yaml)."""
    versions: dict[str, str]
    manifest: dict[str, Any]
    metrics: Metrics
    summary: dict[str, Any]
    """observe.summary.summarize() of the metrics against the run's own hardware peaks."""
    profile: dict[str, Any] | None = None
    """The run's step-time breakdown (profile.json), when it was trained with profile=on."""

    @property
    def overrides(self) -> list[str]:
        return [o for o in self.manifest.get("overrides", []) if not o.startswith(PLACEMENT)]

    @property
    def hardware(self) -> dict[str, Any]:
        return self.config.get("hardware", {})

    @property
    def devices(self) -> int:
        c = self.config.get("cluster", {})
        per_process = max(1, c.get("gpus_per_node", 1) // max(1, c.get("processes_per_node", 1)))
        return c.get("nodes", 1) * c.get("processes_per_node", 1) * per_process

    @property
    def date(self) -> str:
        return str(self.manifest.get("started", ""))[:10] or "?"


def _read_mapping(path: Path, loader) -> dict[str, Any]:
    try:
        data = loader(path.read_text(encoding="utf8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise MetricsError(f"{path} is unreadable ({exc}); the run directory is damaged.") from None
    if not isinstance(data, dict):
        raise MetricsError(f"{path} does not hold a mapping; the run directory is damaged.")
    return data


def load(path: Path) -> Run:
    if not path.is_dir():
        raise MetricsError(f"{path} is not a directory: give run directories made by `moekit train`.")
    cfg_path = path / rundir.CONFIG
    if not cfg_path.is_file():
        raise MetricsError(
            f"{path} has no {rundir.CONFIG}: it is not a moekit run directory; give directories made by `moekit train`."
        )
    cfg = _read_mapping(cfg_path, yaml.safe_load)
    vers = _read_mapping(path / rundir.VERSIONS, json.loads) if (path / rundir.VERSIONS).is_file() else {}
    manifest = _read_mapping(path / rundir.MANIFEST, json.loads) if (path / rundir.MANIFEST).is_file() else {}
    m = metrics.read(path / rundir.METRICS)
    if not m.rows:
        raise MetricsError(f"{m.path} holds no completed step; nothing to report (see {path / rundir.LOG}).")
    prof = _read_mapping(path / rundir.PROFILE, json.loads) if (path / rundir.PROFILE).is_file() else None
    return Run(path, cfg, vers, manifest, m, summarize(m, cfg, manifest), prof)


def summarize(m: Metrics, cfg: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """summary.summarize() with what the run's own records say: its peaks, checkpoint period and attempts."""
    peaks = cfg.get("hardware", {}).get("peak_tflops", {}) or {}
    every = int((cfg.get("checkpoint") or {}).get("every") or 0)
    return summary.summarize(m, peaks, every, summary.attempt_starts(manifest.get("attempts") or [manifest]))
