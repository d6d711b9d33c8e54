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
from moekit.config.schema import Config
from moekit.observe.runs import progress
from moekit.preflight import host as preflight
from moekit.prepare import corpus
from moekit.run import attempt, setup, view
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz


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
    cfg = corpus.for_run(cfg, environ, dry_run=True).cfg  # where a data.corpus run will find its shards
    seen = view.shown(cfg, environ)
    checked = preflight.ensure(cfg, preflight.Host(environ, seen.config), dry_run=True)  # as the real run does
    configured = cfg.run_dir
    placeholder = str(rundir.absolute(configured, Path.cwd())) if configured else "<run.dir>"
    job = view.redacted_job(jobmod.build(cfg, placeholder, f"{placeholder}/{rundir.METRICS}"), seen.names)
    shown = view.describe(cfg, job, rz.dry_run_processes(cfg, environ)) | {"config": seen.config}
    shown["preflight"] = checked.to_dict()
    return seen.scrub(json.dumps(shown, indent=2) if fmt == "json" else view.format_text(shown, job, checked))


def train(
    cfg: Config,
    overrides: Sequence[str] = (),
    environ: dict[str, str] | None = None,
    phase: progress.Phases | None = None,
) -> RunResult:
    """Run `cfg` (composed and checked) to its end, resuming an unfinished run in run.dir.

    In order, each asked once: the corpus (prepare/: prepared, placed, checked, described), what may be shown
    (secrets redacted), the host probes (they fail before anything is written), the run's setup (processes, run
    directory), then its attempts. `overrides` are what the user typed, recorded (redacted) in the manifest and
    job.json; `environ` is the environment the processes inherit (default: this process's).
    """
    environ = dict(environ if environ is not None else os.environ)
    phase = phase or progress.Phases()
    ready = corpus.for_run(cfg, environ, phase)  # data.corpus: its shards, prepared here when missing
    cfg, now = ready.cfg, datetime.now(UTC)
    shown = view.shown(cfg, environ, overrides)
    for note in preflight.ensure(cfg, preflight.Host(environ, shown.config)).notes:
        print(f"moekit: {note}", flush=True)
    ctx, previous = setup.start(cfg, environ, shown, phase, now, (ready.record, ready.line))
    return RunResult(attempt.until_done(ctx, previous, now), ctx.root, ctx.run)


def placed(cfg: Config, where: Path) -> Config:
    """`cfg` with run.dir=`where`: what composing with that override gives (no check depends on run.dir), without
    composing again. Commands that choose the run directory themselves (verify) use it."""
    return cfg.model_copy(update={"run": cfg.run.model_copy(update={"dir": str(where)})})
