"""One run from a composed, checked config to its finished run directory: probes, records, processes, attempts.

`train(cfg)` is the seam every run goes through (`moekit train` and verify call it; sweeps and tune through a
`moekit train` child, series/trial.py): it runs the host probes, takes the run
directory (new, or an unfinished one of the same config to resume), launches one process per device group
through moekit.launch, follows their output, and records each attempt's outcome. When an attempt failed
restoring a damaged checkpoint it is set aside and the run relaunched from the one before (run.checkpoints).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import console, failures, ports, redact
from moekit.base.versions import versions
from moekit.config.schema import Cluster, Config
from moekit.observe.profiles import profile
from moekit.observe.runs import events, metrics, progress, routing, summary
from moekit.preflight import host as preflight
from moekit.prepare import corpus
from moekit.run import checkpoints, compiling, host_load, launch, preemption, view, watchdog
from moekit.rundir import attempts, records
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz
from moekit.worker import process as worker

# Inherited variables that change how a run behaves, recorded (redacted) in job.json for reproduction.
RECORDED_ENV_PREFIXES = ("JAX_", "XLA_", "NCCL_", "NVTE_", "TF_", "CUDA_", "HF_", "MOEKIT_", "LIBTPU_")
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


def launch_port(c: Cluster, num_processes: int) -> int | None:
    """The coordinator port of one launch: the configured one, or for a local multi-process run without one a
    free port picked now (each run its own, so concurrent runs on one host never join each other)."""
    if c.coordinator_port is not None or not c.row.one_host or num_processes == 1:
        return c.coordinator_port
    return ports.free_port()


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
    ctx = _Run(cfg, root, run, procs, environ, shown_overrides, config_view, scrub, phase)
    with attempts.locked(run):
        while True:
            rc = _attempt(ctx, previous, now)
            fallback = checkpoints.after_attempt(run, root, cfg.run_name)
            if fallback is None:
                return RunResult(rc, root, run)
            previous, message, again = fallback
            print(message, file=sys.stderr, flush=True)
            if not again:
                return RunResult(rc, root, run)
            now = datetime.now(UTC)


def placed(cfg: Config, where: Path) -> Config:
    """`cfg` with run.dir=`where`: what composing with that override gives (no check depends on run.dir), without
    composing again. Commands that choose the run directory themselves (verify) use it."""
    return cfg.model_copy(update={"run": cfg.run.model_copy(update={"dir": str(where)})})


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
class _Run:
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


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf8", errors="replace").splitlines()
    except OSError:
        return []


@dataclass
class _Prepared:
    """One attempt before its launch: its number, the checkpoint it resumes from, its processes, its records."""

    attempt: int
    resume_step: int | None
    specs: list[launch.ProcessSpec]
    manifest: records.Manifest
    history: list[dict[str, Any]]
    versions: dict[str, Any]
    now: datetime


@dataclass
class _Launched:
    """What the launch left: the processes' outcome, the stop request, and how busy the host was."""

    outcome: launch.Outcome
    notice: preemption.Notice
    launched: bool = True
    not_started: failures.Failure | None = None
    host_load: dict[str, Any] | None = None


@dataclass
class _Verdict:
    """How the attempt ended: its failure (None: ok), a preemption or a stop after the last step, and what could
    not be recorded."""

    failure: failures.Failure | None
    stopped: preemption.Stop | None
    late: dict[str, Any] | None
    unrecorded: list[str]


def _attempt(ctx: _Run, previous: records.Manifest | None, now: datetime) -> int:
    """One launch of the run's processes, in its phases: before launch (records written), launch, verdict (how it
    ended), record (summary and manifest); returns moekit train's exit status."""
    prep = _before_launch(ctx, previous, now)
    done = _launch_attempt(ctx, prep)
    verdict = _verdict(ctx, prep, done)
    stats, summary_record = _record(ctx, prep, done, verdict)
    return _tell(ctx, prep, done, verdict, stats, summary_record)


def _before_launch(ctx: _Run, previous: records.Manifest | None, now: datetime) -> _Prepared:
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
    return _Prepared(attempt, resume_step, _specs(ctx, job, names), manifest, history, vers, now)


def _launch_attempt(ctx: _Run, prep: _Prepared) -> _Launched:
    """Run the processes to their end while the host's load is sampled; nothing when every step is saved."""
    n, steps = len(prep.specs), ctx.cfg.train.steps
    if prep.resume_step is not None and prep.resume_step >= steps - 1:
        # A stop that landed in the last step's save: every step is trained and saved, and MaxText would refuse to
        # train "up to" a step it has already passed. Finish the run from its records instead of launching.
        print(
            f"moekit: the checkpoint of the last step ({prep.resume_step}) is saved: nothing left to train", flush=True
        )
        return _Launched(launch.Outcome([0] * n, None, 0.0, ended_at=time.monotonic()), preemption.Notice(False), False)
    with host_load.Sampler().running() as load:
        try:
            outcome, notice = _launch(ctx, prep.specs)
            not_started = None
        except launch.LaunchError as exc:  # recorded as the attempt's failure: the manifest never stays `running`
            not_started = failures.NOT_STARTED.failure(1, str(exc))
            outcome = launch.Outcome([1] * n, None, 0.0, ended_at=time.monotonic())
            notice = preemption.Notice(saves=False)
    return _Launched(outcome, notice, True, not_started, load.result)


def _verdict(ctx: _Run, prep: _Prepared, done: _Launched) -> _Verdict:
    """Merge the attempt's records, then decide how it ended: preempted (or stopped after its last step), hung,
    crashed, unfinished, or ok."""
    cfg, run, outcome, specs = ctx.cfg, ctx.run, done.outcome, prep.specs
    unrecorded: list[str] = []  # what could not be written after the run (a full disk): said, never fatal
    # This attempt's own records, before they join the earlier ones: those of this launcher's first process (a
    # launcher of another node holds no process 0 and so no metrics.jsonl).
    last = preemption.last_step(run / jobmod.per_process(rundir.METRICS, int(ctx.procs[0].get(rz.PROCESS_ID, 0))))
    _survive(unrecorded, "the merged metrics", attempts.merge_metrics, run)
    screen = (prep.manifest, ctx.root, run, cfg.run_name, int(ctx.procs[0].get(rz.PROCESS_ID, 0)) == 0)
    _survive(unrecorded, "the checkpoints set aside", checkpoints.screen_into, *screen)  # saves after a NaN
    saved = attempts.latest_checkpoint(ctx.root, cfg.run_name)
    began = [
        t for kind, t, _, step in events.read(run / events.FILE).intervals if kind == events.SAVE and step == saved
    ]
    with _log_lines(specs[0].log, outcome, 0) as lines:
        stopped = preemption.stop(
            done.notice, outcome.ended_at, last, prep.resume_step, saved, lines, max(began, default=None)
        )
    late = None  # a stop that came after every step had run: the run is finished, and says when the stop came
    if preemption.after_the_last_step(stopped, last, cfg.train.steps):
        late, stopped = stopped.to_dict() | {"after_the_last_step": True}, None
        said = late["signal"].removeprefix("moekit received ")
        print(f"moekit: {said} came after the last step: the run is finished", flush=True)
    # A worker ended by the stop that came after its last step did not crash.
    by_stop = (
        late is not None
        and outcome.failed_rank is not None
        and outcome.returncodes[outcome.failed_rank]
        in (-signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGINT)
    )

    def crashed(rank: int) -> failures.Failure:
        with _log_lines(specs[rank].log, outcome, rank) as lines:  # the whole log: a full disk may be far up
            return failures.classify(outcome.returncodes[rank], lines)

    failure = done.not_started or failures.attempt(
        stopped.failure(128 + (done.notice.signum or signal.SIGTERM)) if stopped is not None else None,
        watchdog.failure(outcome.hang, outcome.stacks, 128 + signal.SIGKILL) if outcome.hang is not None else None,
        (lambda: crashed(outcome.failed_rank)) if outcome.failed_rank is not None and not by_stop else None,
    )
    if failure is None and done.launched and not cfg.fabric.only:  # all exited 0: did they train every step given?
        with _log_lines(specs[0].log, outcome, 0) as lines:
            failure = failures.unfinished(lines, last, cfg.train.steps, int(ctx.procs[0].get(rz.PROCESS_ID, 0)) == 0)
    return _Verdict(failure, stopped, late, unrecorded)


def _record(ctx: _Run, prep: _Prepared, done: _Launched, verdict: _Verdict) -> tuple[dict[str, Any], records.Summary]:
    """Summarize the merged metrics and write summary.json and the finished manifest: one wall time over every
    attempt (a killed one's from its events, a lower bound) and one host load, in both."""
    cfg, run, manifest = ctx.cfg, ctx.run, prep.manifest
    stats: dict[str, Any] = {}
    if (run / rundir.METRICS).is_file():
        starts = summary.attempt_starts([*prep.history, {"resumed_from_checkpoint": prep.resume_step}])
        read = functools.partial(metrics.read, run / rundir.METRICS)
        stats = _survive(
            verdict.unrecorded,
            "the metrics summary",
            lambda: summary.summarize(
                read(),
                cfg.hardware.peak_tflops.model_dump(),
                cfg.checkpoint.every,
                starts,
                events.per_attempt(run, attempts.ATTEMPTS),
                cfg.train.steps,
            ),
        )
    own = {"wall_s": round(done.outcome.wall_s, 2), "host_load": done.host_load}
    walls = [*(a.get("wall_s") for a in prep.history), own["wall_s"]]  # each attempt's; None: it recorded none
    wall = {
        "wall_s": round(sum(w for w in walls if w is not None), 2),
        "lower_bound": any(a.get("wall_s_lower_bound") or a.get("wall_s") is None for a in prep.history),
    }
    manifest.host_load = host_load.over_attempts(
        [*((a.get("host_load"), a.get("wall_s")) for a in prep.history), (done.host_load, own["wall_s"])]
    )
    record = records.Summary(
        experiment=cfg.experiment_name,
        run_dir=str(run),
        hardware=cfg.hardware.name,
        devices=cfg.num_devices,
        provenance={
            "kind": "measured",
            "date": prep.now.date().isoformat(),
            "hardware": cfg.hardware.name,
            "host": prep.versions.get("host"),
            "versions": prep.versions,
        },
        peak_tflops=cfg.hardware.peak_tflops.model_dump(),
        peak_source=cfg.hardware.peak_source,
        wall_s=wall["wall_s"],
        wall_s_lower_bound=wall["lower_bound"],
        wall_s_attempts=walls,
        stats=(stats or {}) | checkpoints.summary_notes(manifest) | routing.summary_section(run, cfg.run.routing_every),
    )
    _survive(verdict.unrecorded, rundir.SUMMARY, records.write_summary, run, record)
    _record_outcome(manifest, done.outcome, verdict, wall, own)
    _survive(verdict.unrecorded, rundir.MANIFEST, records.write_manifest, run, manifest)
    return stats or {}, record


def _tell(
    ctx: _Run, prep: _Prepared, done: _Launched, verdict: _Verdict, stats: dict[str, Any], record: records.Summary
) -> int:
    """Print the attempt's summary (and profile), then its outcome; return moekit train's exit status."""
    cfg, run, outcome, failure = ctx.cfg, ctx.run, done.outcome, verdict.failure
    for problem in [e for e in outcome.log_errors if e] + verdict.unrecorded:
        print(f"moekit: warning: {problem}", file=sys.stderr)
    if stats.get("steps"):
        print(summary.format_summary(stats, cfg.hardware.name, cfg.hardware.peak_source))
    if cfg.profile.enabled:
        first = cfg.profile.skip_steps + (0 if prep.resume_step is None else prep.resume_step + 1)  # MaxText's start
        print(profile.report_run(run, first, cfg.profile.steps, record.provenance, stats.get("counted_steps")))
    if failure is None:
        print(f"moekit: run directory {run}")
        return 0
    if verdict.stopped is not None:
        resume = f"the same command with run.dir={ctx.root}"
        print(f"moekit: preempted: {failure.evidence}. Resume: {resume}", file=sys.stderr)
        return failure.returncode
    _report_failure(failure, outcome, prep.specs, ctx.root)
    return 1


def _record_outcome(
    manifest: records.Manifest, outcome: launch.Outcome, verdict: _Verdict, wall: dict[str, Any], own: dict[str, Any]
) -> None:
    """Turn the running manifest into the finished one: status, exit codes, failure, the run's wall time (every
    attempt's) and this attempt's entry with its own wall time and host load (`verdict.late`: the record of a stop
    that came after the last step, kept on a finished run)."""
    failure, stopped = verdict.failure, verdict.stopped
    manifest.status = records.OK if failure is None else records.PREEMPTED if stopped else records.FAILED
    manifest.ended = datetime.now(UTC).isoformat()
    manifest.returncodes = outcome.returncodes
    manifest.failed_rank = outcome.failed_rank
    manifest.failure = failure.to_dict() if failure else None
    manifest.preemption = stopped.to_dict() if stopped is not None else verdict.late
    manifest.wall_s, manifest.wall_s_lower_bound = wall["wall_s"], wall["lower_bound"]
    if any(outcome.log_errors) or verdict.unrecorded:
        manifest.incomplete = [e for e in outcome.log_errors if e] + verdict.unrecorded
    kept = (*records.Manifest._OUTCOME, "preemption", "incomplete")
    status = {k: v for k, v in manifest.to_dict().items() if k in kept and k != "wall_s_lower_bound"}
    this = {
        "attempt": manifest.attempt,
        "started": manifest.started,
        "resumed_from_checkpoint": manifest.resumed_from_checkpoint,
        **status,
        **own,
    }
    manifest.attempts = [*manifest.attempts, this]


def _specs(ctx: _Run, job: jobmod.Job, names: list[str]) -> list[launch.ProcessSpec]:
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


def _last_io(path: Path) -> tuple[str, float, bool] | None:
    """This host's first process's last checkpoint save or restore: its kind, seconds since it began (under way)
    or ended, and whether it is under way (the watchdog's events.last_io, in seconds ago)."""
    try:
        lines = path.read_text(encoding="utf8", errors="replace").splitlines()
    except OSError:
        return None
    io = events.last_io(lines)
    return None if io is None else (io[0], time.time() - io[1], io[2])


def _launch(ctx: _Run, specs: list[launch.ProcessSpec]) -> tuple[launch.Outcome, preemption.Notice]:
    """Run the processes to their end, showing phases and step progress. A signal to moekit is passed on to the
    workers (they save at the next step when they can: run/preemption.py); the watchdog stops a stalled run."""
    started = time.monotonic()
    tty = sys.stdout.isatty()
    cfg, phase, steps = ctx.cfg, ctx.phase, ctx.cfg.train.steps
    first = ctx.run / jobmod.per_process(events.FILE, int(ctx.procs[0].get(rz.PROCESS_ID, 0)))
    watch = watchdog.Watchdog(cfg.run.stall_timeout_s, started, functools.partial(_last_io, first))
    pace = progress.Pace()
    ticker = compiling.Ticker()

    def on_line(line: str) -> None:
        for p in progress.parse_phase(line):
            ticker.stop()
            phase(p)
            if p.startswith("compiling"):
                ticker.start()
        s = progress.parse(line)
        if s is not None:
            ticker.stop()
            watch.step_done()
            pace.add(s)
            text = progress.format_progress(s, steps, phase.elapsed(), pace)  # the phase lines' clock
            print(("\r" + text) if tty else text, end="" if tty else "\n", flush=True)

    if cfg.fabric.only:  # no MaxText: the rendezvous, then the collectives of the mesh
        phase(f"launching {len(specs)} process(es) for the fabric check: rendezvous, then each collective")
    else:
        phase(f"launching {len(specs)} process(es): MaxText starts, then compiles; the first step follows")
    scrub = ctx.scrub
    stacks = [ctx.run / jobmod.per_process(watchdog.STACKS, int(p.get(rz.PROCESS_ID, 0))) for p in ctx.procs]
    flag = None
    if cfg.checkpoint.every > 0 and cfg.num_processes == len(ctx.procs):  # this launcher holds every process
        flag = functools.partial(_write_stop_flag, ctx)
    with preemption.Notice(saves=cfg.checkpoint.every > 0, on_stop=flag) as notice:
        outcome = launch.run(
            specs,
            on_line,
            scrub=scrub if scrub else None,
            notice=notice,
            stop_grace_s=cfg.cluster.signal_grace_s,
            watch=watch,
            stack_files=stacks,
        )
    ticker.stop()
    if tty:
        print()
    return outcome, notice


def _write_stop_flag(ctx: _Run, signum: int) -> None:
    """moekit's stop flag (events.STOP_FILE): the step every worker stops at, after the last one they stamped."""
    stamped = [
        max(events.read(ctx.run / jobmod.per_process(events.FILE, int(p.get(rz.PROCESS_ID, 0)))).step_end, default=-1)
        for p in ctx.procs
    ]
    last = max(stamped, default=-1)
    step = preemption.stop_step(None if last < 0 else last, len(ctx.procs))
    record = {"step": step, "last_stamped": None if last < 0 else last, "signal": signal.Signals(signum).name}
    rundir.write_json(ctx.run / events.STOP_FILE, record | {"t": time.time()})


def _report_failure(failure: failures.Failure, outcome: launch.Outcome, specs: list, run: Path) -> None:
    who = (
        f"process {outcome.failed_rank} exited {failure.returncode}"
        if outcome.failed_rank is not None
        else "every process exited 0"
        if failure.returncode == 0
        else "stopped before the processes ended"
    )
    print(f"moekit: training failed: {failure.title} ({who})", file=sys.stderr)
    print(f"  evidence: {failure.evidence}", file=sys.stderr)
    print(f"  causes and fixes: {failure.doc}", file=sys.stderr)
    if failure.name == failures.DISK_FULL.name:  # the same ENOSPC for bytes and for inodes: say which
        cause, free = rundir.full_cause(run)
        print(f"  here: {cause}; fix: {free}, then resume with run.dir={run}", file=sys.stderr)
    print(f"  run directory (resume with run.dir={run}): {run}", file=sys.stderr)
    rank = outcome.failed_rank if outcome.failed_rank is not None else 0 if failure.returncode == 0 else None
    if rank is not None:
        log = specs[rank].log
        with _log_lines(log, outcome, rank) as lines:
            shown = (ln.rstrip("\n") for ln in lines if not console.is_noise(ln))  # the log keeps them all
            tail = list(collections.deque(shown, maxlen=15))
        print(f"  log: {log} (last lines, library notices left out)", file=sys.stderr)
        print("\n".join("  | " + t for t in tail), file=sys.stderr)


@contextlib.contextmanager
def _log_lines(log: Path, outcome: launch.Outcome, rank: int) -> Iterator[Iterable[str]]:
    """Every line a process wrote: its log file, then what could not be written to it (and why)."""
    unlogged = outcome.unlogged[rank] if outcome.unlogged else []
    error = [f"moekit: {outcome.log_errors[rank]}"] if outcome.log_errors and outcome.log_errors[rank] else []
    try:
        fh = open(log, encoding="utf8", errors="replace")
    except OSError:
        fh = None
    try:
        yield itertools.chain(fh or (), unlogged, error)
    finally:
        if fh is not None:
            fh.close()


def _survive(problems: list[str], what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args); an OSError (a full disk) is noted in `problems` instead of ending moekit before it records."""
    try:
        return fn(*args)
    except OSError as exc:
        problems.append(f"could not record {what}: {exc}")
        return None
