"""One run from a composed, checked config to its finished run directory: probes, records, processes, attempts.

`train(cfg)` is the seam every run goes through (`moekit train` and verify call it; sweeps and tune through a
`moekit train` child, series/trial.py): it runs the host probes, takes the run directory (new, or an unfinished one
of the same config to resume: run/setup.py), then runs the attempts (run/attempt.py: before launch, launch, verdict,
outcome, each a module of its own) until one ends the run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from moekit import rundir
from moekit.base import redact
from moekit.config.schema import Config
from moekit.observe.runs import progress
from moekit.preflight import host as preflight
from moekit.prepare import corpus
from moekit.run import attempt, view
from moekit.run.setup import Run, launch_port, resolve_run_dir
from moekit.rundir import attempts
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz

CORPUS = "corpus.json"  # the identity of the corpus a data.corpus run trained on (moekit.prepare.corpus)


@dataclass(frozen=True)
class RunResult:
    """How a run ended: the exit status `moekit train` returns, its run directory and this launcher's records."""

    returncode: int
    run_dir: Path
    records: Path

    @property
    def ok(self) -> bool:
        """Whether the run finished without a failure."""
        return self.returncode == 0


def dry_run(cfg: Config, environ: dict[str, str] | None = None, fmt: str = "text") -> str:
    """What `train` would launch (config, MaxText command, XLA flags, env, per-process env, host probes), as text
    or JSON, secrets redacted. Launches nothing; host probes that are fatal on the target host still raise."""
    environ = dict(environ if environ is not None else os.environ)
    cfg = corpus.located(cfg, environ)  # where a data.corpus run will find its shards; prepares nothing
    names = view.secret_names(cfg)
    scrub = redact.Scrubber(redact.secret_values(environ, cfg.to_dict(), names))
    config_view = redact.redact_tree(cfg.to_dict(), names)
    checked = preflight.ensure(cfg, preflight.Host(environ, config_view), dry_run=True)  # as the real run does
    configured = cfg.run_dir
    placeholder = str(rundir.absolute(configured, Path.cwd())) if configured else "<run.dir>"
    job = view.redacted_job(jobmod.build(cfg, placeholder, f"{placeholder}/{rundir.METRICS}"), names)
    shown = view.describe(cfg, job, rz.dry_run_processes(cfg, environ)) | {"config": config_view}
    shown["preflight"] = checked.to_dict()
    return scrub(json.dumps(shown, indent=2) if fmt == "json" else view.format_text(shown, job, checked))


def train(
    cfg: Config,
    overrides: Sequence[str] = (),
    environ: dict[str, str] | None = None,
    phase: progress.Phases | None = None,
) -> RunResult:
    """Run `cfg` (composed and checked) to its end, resuming an unfinished run in run.dir.

    `overrides` are what the user typed, recorded (redacted) in the manifest and job.json; `environ` is the
    environment the processes inherit (default: this process's). Host probes fail before anything is written.
    """
    environ = dict(environ if environ is not None else os.environ)
    phase = phase or progress.Phases()
    if cfg.data.corpus and not corpus.ready(cfg, environ):
        phase(f"preparing the {cfg.data.corpus} corpus (once per machine)")
    cfg, corpus_record = corpus.placed(cfg, environ)  # data.corpus: its shards, prepared here when missing
    now = datetime.now(UTC)
    names = view.secret_names(cfg)
    scrub = redact.Scrubber(redact.secret_values(environ, cfg.to_dict(), names))
    config_view = redact.redact_tree(cfg.to_dict(), names)
    shown_overrides = [scrub(o) for o in redact.redact_assignments(list(overrides), names)]
    for note in preflight.ensure(cfg, preflight.Host(environ, config_view)).notes:
        print(f"moekit: {note}", flush=True)

    procs = rz.processes(cfg, environ, port=launch_port(cfg.cluster, cfg.num_processes))
    first_process = int(procs[0].get(rz.PROCESS_ID, 0))
    with rundir.records_before_launch(Path(cfg.run_dir or cfg.run.base_dir)):
        root, run, previous = resolve_run_dir(cfg, now, config_view, Path.cwd(), first_process)
        if corpus_record is not None:
            rundir.write_json(run / CORPUS, corpus_record)
            print(f"moekit: {corpus.describe(corpus_record)}", flush=True)
    ctx = Run(cfg, root, run, procs, environ, shown_overrides, config_view, scrub, phase)
    with attempts.locked(run):
        return RunResult(attempt.until_done(ctx, previous, now), root, run)


def placed(cfg: Config, where: Path) -> Config:
    """`cfg` with run.dir=`where`: what composing with that override gives (no check depends on run.dir), without
    composing again. Commands that choose the run directory themselves (verify) use it."""
    return cfg.model_copy(update={"run": cfg.run.model_copy(update={"dir": str(where)})})
