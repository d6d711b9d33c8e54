"""Load a finished run directory (resolved config, versions, manifest, metrics) for reports (effect: reads files)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import failures
from moekit.observe.runs import events, metrics, summary
from moekit.observe.runs.metrics import Metrics, MetricsError
from moekit.rundir import records

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
    """observe.runs.summary.summarize() of the metrics against the run's own hardware peaks."""
    profile: dict[str, Any] | None = None
    """The run's step-time breakdown (profile.json), when it was trained with profile=on."""
    fabric: dict[str, Any] | None = None
    """What the fabric check measured before training (fabric.json), when it ran."""

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
        raise MetricsError(
            f"{exc.path} is unreadable ({exc.why}); the run directory is damaged. Fix: report on directories made "
            "by `moekit train` (restore the file from a copy, or train the run again)."
        ) from None
    except (TypeError, ValueError, AttributeError) as exc:  # parses, but its fields have foreign types
        raise MetricsError(
            f"{path}: a record parses but holds the wrong types ({exc}); the run directory is corrupt or was not "
            "written by this moekit. Fix: report on directories made by `moekit train` (or train the run again)."
        ) from None


# A run whose manifest says "running" while no process holds its lock: it stopped without recording an end.
UNFINISHED = "unfinished"
RUN_LOCK = ".moekit.lock"  # rundir/attempts.py holds it while a `moekit train` runs the directory
# The sections of config.yaml a report reads, and the type each must have.
_SECTIONS = ("train", "cluster", "hardware", "model", "moe", "precision", "parallelism")
# The most of any count a report reads from config.yaml (steps, nodes, GPUs): lists of steps and devices are sized by
# them, so a damaged or hostile file must not make one of a billion entries.
MAX_COUNT = 10_000_000


def _wrong_types(cfg: dict[str, Any], manifest: records.Manifest) -> str | None:
    """What in a parsed config.yaml or manifest.json does not have the type moekit writes; None when all do."""
    for name in _SECTIONS:
        if not isinstance(cfg.get(name, {}), dict):
            return f"{rundir.CONFIG}: {name} is a {type(cfg[name]).__name__}, not a mapping"
    for section, keys in (("cluster", ("nodes", "gpus_per_node", "processes_per_node")), ("train", ("steps",))):
        for key in keys:
            value = cfg.get(section, {}).get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                return f"{rundir.CONFIG}: {section}.{key} is {value!r}, not a positive whole number"
            if value > MAX_COUNT:
                return f"{rundir.CONFIG}: {section}.{key} is {value:,}, more than the {MAX_COUNT:,} a report reads"
    if not isinstance(manifest.overrides, list) or not all(isinstance(o, str) for o in manifest.overrides):
        return f"{rundir.MANIFEST}: overrides is not a list of text"
    for name in ("started", "ended", "experiment"):
        if not isinstance(getattr(manifest, name), str | None):
            return f"{rundir.MANIFEST}: {name} is {getattr(manifest, name)!r}, not text"
    return None


def fabric_only(path: Path) -> dict[str, Any] | None:
    """The fabric.json of a run directory that holds only the fabric check (`moekit fabric`, fabric.only=true: no
    training, so no metrics and no maxtext.log to read); None for any other directory."""
    if not path.is_dir() or not (path / rundir.CONFIG).is_file():
        return None
    try:
        cfg = records.read_config(path)
        fab = records.read_fabric(path)
    except records.Unreadable:
        return None
    only = isinstance(cfg, dict) and bool((cfg.get("fabric") or {}).get("only"))
    return fab if only and fab is not None else None


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
    if why := _wrong_types(cfg, manifest):
        raise MetricsError(
            f"{path}: {why}; the run directory is corrupt or was not written by this moekit. Fix: report on "
            "directories made by `moekit train` (restore the file from a copy, or train the run again)."
        )
    if manifest.status == records.RUNNING and not rundir.lock_held(path / RUN_LOCK):
        manifest.status = UNFINISHED  # no `moekit train` holds it: killed (SIGKILL) or its host went down
    file = path / rundir.METRICS
    m = metrics.read(file, _planned(cfg)) if file.is_file() else Metrics([], path=file)
    if not m.rows and manifest.status == records.RUNNING:  # compiling, or before its first step: not "wrote no step"
        raise MetricsError(
            f"{path} is still running and has not finished its first step yet (MaxText compiles before it; follow "
            f"{path / rundir.LOG}). Fix: run the report again once it has written steps."
        )
    if not file.is_file():
        metrics.read(file)  # explains the missing file
    if not m.rows:
        raise MetricsError(f"{m.path} holds no completed step; nothing to report (see {path / rundir.LOG}).")
    prof = _read(records.read_profile, path)
    fab = _read(records.read_fabric, path)
    return Run(path, cfg, vers, manifest, m, summarize(m, cfg, manifest, path), prof, fab)


def _planned(cfg: dict[str, Any]) -> int | None:
    """The run's planned steps (train.steps of its config), when recorded as a whole number."""
    steps = (cfg.get("train") or {}).get("steps")
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None


def summarize(
    m: Metrics, cfg: dict[str, Any], manifest: records.Manifest | None, run: Path | None = None
) -> dict[str, Any]:
    """summary.summarize() with what the run's own records say: its peaks, checkpoint period, attempts, planned
    steps and, from run directory `run` (the metrics file's folder by default), every attempt's events."""
    peaks = cfg.get("hardware", {}).get("peak_tflops", {}) or {}
    every = int((cfg.get("checkpoint") or {}).get("every") or 0)
    planned = _planned(cfg)
    last_step = int(m.rows[-1]["step"]) if m.rows else -1
    if planned is not None and (planned > MAX_COUNT or last_step >= planned):  # checked before lists are sized
        raise MetricsError(
            f"{m.path}: step {last_step} against train.steps={planned:,} in {rundir.CONFIG}: the records do not "
            "belong to this config (or one is damaged). Fix: report on directories made by `moekit train`."
        )
    history = manifest.history() if manifest else [{}]
    folder = run or (m.path.parent if m.path else None)
    last = max((int(r.get(summary.ATTEMPT, 0)) for r in m.rows), default=0) or None
    found = events.per_attempt(folder, last=last) if folder else {}
    return summary.summarize(m, peaks, every, summary.attempt_starts(history), found, planned, _entries(manifest))


def _entries(manifest: records.Manifest | None) -> list[dict[str, Any]]:
    """Every attempt's manifest entry, the one still running or stopped unrecorded included (a finished run's
    manifest holds its last attempt's entry; a running or unfinished one's does not yet)."""
    if manifest is None:
        return []
    entries = list(manifest.attempts)
    number = manifest.attempt if isinstance(manifest.attempt, int) and manifest.attempt > 0 else len(entries) + 1
    if manifest.status in (records.RUNNING, UNFINISHED) and len(entries) < number:
        killed = {"failure": {"class": failures.KILLED.name}, "wall_s": None} if manifest.status == UNFINISHED else {}
        entries.append({"attempt": number, **killed})
    return entries
