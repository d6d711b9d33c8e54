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
from moekit.run import view
from moekit.rundir import attempts, records
from moekit.translate import rendezvous as rz

CORPUS = "corpus.json"  # the identity of the corpus a data.corpus run trained on (written by moekit.prepare)


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


def start(
    cfg: Config,
    environ: dict[str, str],
    shown: view.Shown,
    phase: progress.Phases,
    now: datetime,
    corpus: tuple[dict | None, str | None] = (None, None),
) -> tuple[Run, records.Manifest | None]:
    """What every attempt of the run shares, and the previous manifest when the run directory is an unfinished run of
    this config: the processes (with this launch's coordinator port), then the run directory: run.dir (or a cluster
    job's), or a new <run.base_dir>/<experiment>/<timestamp>, made absolute before MaxText sees it (Orbax refuses
    relative checkpoint paths), with this launcher's records folder in it; a data.corpus run's record and line
    (`corpus`) are written there and said. A full disk or a vanished folder stops here, before any launch."""
    port = launch_port(cfg.cluster, cfg.num_processes)
    procs = rz.processes(cfg, environ, port=port)
    first_process = int(procs[0].get(rz.PROCESS_ID, 0))
    configured, cwd = cfg.run_dir, Path.cwd()
    fix = None if cfg.run.dir else "choose a new cluster.name (the run directory is named after it) or a run.dir"
    with rundir.records_before_launch(Path(configured or cfg.run.base_dir)):
        if configured:
            root = rundir.absolute(configured, cwd)
        else:
            root = rundir.new_run_dir(rundir.absolute(cfg.run.base_dir, cwd), cfg.experiment_name, now)
        run = rundir.for_launcher(root, first_process)
        previous = attempts.check_reusable(run, shown.config, fix) if configured else None
        run.mkdir(parents=True, exist_ok=True)
        record, line = corpus
        if record is not None:
            rundir.write_json(run / CORPUS, record)
            print(f"moekit: {line}", flush=True)
    return Run(cfg, root, run, procs, environ, shown.overrides, shown.config, shown.scrub, phase), previous


def launch_port(c: Cluster, num_processes: int) -> int | None:
    """The coordinator port of one launch: the configured one, or for a local multi-process run without one a
    free port picked now (each run its own, so concurrent runs on one host never join each other)."""
    if c.coordinator_port is not None or not c.row.one_host or num_processes == 1:
        return c.coordinator_port
    return ports.free_port()
