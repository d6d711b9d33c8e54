"""An attempt before its launch: the previous attempt's files set aside, every path the processes write checked, the
attempt's records written (config, job, versions, running manifest), and its processes' argv, env and logs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import failures, redact
from moekit.base.versions import versions
from moekit.observe.runs import events, routing
from moekit.run import checkpoints, host_load, launch, view, watchdog
from moekit.run.setup import Run
from moekit.rundir import attempts, records
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz
from moekit.worker import process as worker

# Inherited variables that change how a run behaves, recorded (redacted) in job.json for reproduction.
RECORDED_ENV_PREFIXES = ("JAX_", "XLA_", "NCCL_", "NVTE_", "TF_", "CUDA_", "HF_", "MOEKIT_", "LIBTPU_")


@dataclass
class Prepared:
    """One attempt before its launch: its number, the checkpoint it resumes from, its processes, its records."""

    attempt: int
    resume_step: int | None
    specs: list[launch.ProcessSpec]
    manifest: records.Manifest
    history: list[dict[str, Any]]
    versions: dict[str, Any]
    now: datetime


def begin(ctx: Run, previous: records.Manifest | None, now: datetime) -> Prepared:
    """Set the previous attempt's files aside, check every path the processes write, write the records of this
    attempt (config, job, versions, running manifest) and say what is launched."""
    cfg, run, names = ctx.cfg, ctx.run, view.secret_names(ctx.cfg)
    with rundir.records_before_launch(run):
        attempt = attempts.set_aside(run)
    aside = checkpoints.known(previous)  # incomplete saves and saves after a NaN: set aside before the resume
    checkpoints.screen_into(aside, ctx.root, run, cfg.run_name, int(ctx.procs[0].get(rz.PROCESS_ID, 0)) == 0)
    resume_step = attempts.latest_checkpoint(ctx.root, cfg.run_name)
    pids = [int(p.get(rz.PROCESS_ID, 0)) for p in ctx.procs]
    # Before anything is written: a link planted where a log or record goes would carry it out of the run dir.
    for name in (rundir.METRICS, rundir.LOG, events.FILE, watchdog.STACKS, events.STOP_FILE, routing.FILE):
        for pid in pids:
            rundir.confined(run, run / jobmod.per_process(name, pid))
    rundir.maxtext_outputs(ctx.root, cfg.run_name)  # <run.name>/checkpoints, tensorboard, profile: no link out
    job = jobmod.build(cfg, str(ctx.root), str(run / rundir.METRICS))  # one checkpoint set for all launchers
    shown = view.describe(cfg, view.redacted_job(job, names), ctx.procs)
    inherited = {k: v for k, v in sorted(ctx.environ.items()) if k.startswith(RECORDED_ENV_PREFIXES)}
    job_record = records.JobRecord(
        **{k: shown[k] for k in ("maxtext_command", "maxtext_args", "xla_flags", "env", "processes")},
        inherited_env=redact.redact_tree(inherited, names),
        overrides=ctx.shown_overrides,
    )
    vers = versions()
    history = _history(previous, run)
    manifest = records.Manifest(
        status=records.RUNNING,
        experiment=cfg.experiment_name,
        started=now.isoformat(),
        overrides=ctx.shown_overrides,
        attempt=attempt,
        resumed_from_checkpoint=resume_step,
        attempts=history,
        extra=dict(aside.extra),
    )
    with rundir.records_before_launch(run):  # a full disk or a vanished folder stops here, before any launch
        records.write_before_launch(run, ctx.config_view, job_record, vers, manifest, ctx.scrub)
    resumed = f", resuming from the checkpoint of step {resume_step}" if resume_step is not None else ""
    again = f" (attempt {attempt}{resumed})" if attempt > 1 else ""
    if attempt > 1 and (resume_step is None or resume_step < cfg.train.steps - 1):  # steps are numbered from 0
        again += f"; next step {0 if resume_step is None else resume_step + 1} of 0-{cfg.train.steps - 1}"
    print(
        f"moekit: {cfg.experiment_name} -> {run}{again}  ({len(ctx.procs)} process(es), {cfg.num_devices} device(s))",
        flush=True,
    )
    return Prepared(attempt, resume_step, _specs(ctx, job, names), manifest, history, vers, now)


def _history(previous: records.Manifest | None, run: Path) -> list[dict[str, Any]]:
    """Earlier attempts' outcomes; an attempt whose moekit died before recording one is recorded as killed, with
    the wall time its own events span (a lower bound) and a host load nobody measured."""
    history = [*(previous.attempts if previous else [])]
    if previous and previous.status == records.RUNNING:  # the last attempt's moekit died before recording
        number = previous.attempt or len(history) + 1
        spans = [events.span(_lines(f)) for f in sorted((run / attempts.ATTEMPTS / str(number)).glob("events*.jsonl"))]
        spans = [x for x in spans if x is not None]
        wall = round(max(e for _, e in spans) - min(b for b, _ in spans), 2) if spans else None
        history.append(
            {
                "attempt": number,
                "started": previous.started,
                "resumed_from_checkpoint": previous.resumed_from_checkpoint,
                "status": "failed",
                "failure": {
                    "class": failures.KILLED.name,
                    "evidence": "moekit ended without recording an outcome (SIGKILL, node loss or OOM kill)",
                },
                "wall_s": wall,
                "wall_s_lower_bound": True,  # from its first event to its last: the kill came later
                "host_load": host_load.unknown("moekit was killed before it recorded this attempt's host load"),
            }
        )
    return history


def _lines(path: Path) -> list[bytes]:
    return events.lines(path)


def _specs(ctx: Run, job: jobmod.Job, names: list[str]) -> list[launch.ProcessSpec]:
    """One process per entry of ctx.procs: argv without secret values (they travel in the env), env, log file."""
    specs = []
    secret_keys = {a.key for a in job.args if redact.is_secret_name(a.key, names)}
    for penv in ctx.procs:
        pid = int(penv.get(rz.PROCESS_ID, 0))
        log = ctx.run / jobmod.per_process(rundir.LOG, pid)
        argv, secret_env = worker.hide_secrets(job.argv(pid), secret_keys)
        env = ctx.environ | job.env_dict | penv | secret_env | {worker.LAUNCHER_PID: str(os.getpid())}
        env |= {worker.STACKS: str(ctx.run / jobmod.per_process(watchdog.STACKS, pid))}
        env |= {events.ENV: str(ctx.run / jobmod.per_process(events.FILE, pid))}
        env |= {events.STOP_ENV: str(ctx.run / events.STOP_FILE)}
        env |= {routing.ENV: str(ctx.run / jobmod.per_process(routing.FILE, pid))}  # the routing load (sampled)
        env |= {routing.EVERY_ENV: str(ctx.cfg.run.routing_every)}
        env |= {worker.PREEMPTIBLE: "1"} if ctx.cfg.checkpoint.every else {}
        specs.append(launch.ProcessSpec(argv, env, log))
    return specs
