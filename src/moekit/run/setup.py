"""What every attempt of a run shares, set up once before the first: its processes (each launch its own coordinator
port where none is configured) and its run directory (new, or an unfinished one of the same config to resume)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import ports, redact
from moekit.config.schema import Cluster, Config
from moekit.observe.runs import progress
from moekit.rundir import attempts, records


def launch_port(c: Cluster, num_processes: int) -> int | None:
    """The coordinator port of one launch: the configured one, or for a local multi-process run without one a
    free port picked now (each run its own, so concurrent runs on one host never join each other)."""
    if c.coordinator_port is not None or not c.row.one_host or num_processes == 1:
        return c.coordinator_port
    return ports.free_port()


def resolve_run_dir(
    cfg: Config, now: datetime, config_view: dict[str, Any], cwd: Path, first_process: int = 0
) -> tuple[Path, Path, records.Manifest | None]:
    """(run directory, this launcher's records in it, previous manifest when it names an unfinished run of this config).


    Paths are made absolute here, before MaxText sees them (Orbax refuses relative checkpoint paths).
    """
    configured = cfg.run_dir
    if configured:
        run = rundir.absolute(configured, cwd)
        records_dir = rundir.for_launcher(run, first_process)
        fix = None if cfg.run.dir else "choose a new cluster.name (the run directory is named after it) or a run.dir"
        previous = attempts.check_reusable(records_dir, config_view, fix)
        records_dir.mkdir(parents=True, exist_ok=True)
        return run, records_dir, previous
    run = rundir.new_run_dir(rundir.absolute(cfg.run.base_dir, cwd), cfg.experiment_name, now)
    records_dir = rundir.for_launcher(run, first_process)
    records_dir.mkdir(parents=True, exist_ok=True)
    return run, records_dir, None


@dataclass(frozen=True)
class Run:
    """What every attempt of one run shares."""

    cfg: Config
    root: Path  # the run directory (checkpoints live here, for every launcher)
    run: Path  # this launcher's records in it
    procs: list[dict[str, str]]
    environ: dict[str, str]
    shown_overrides: list[str]
    config_view: dict[str, Any]
    scrub: redact.Scrubber
    phase: progress.Phases
