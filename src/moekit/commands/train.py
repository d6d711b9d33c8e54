"""`moekit train`: compose, validate, translate, launch, summarize."""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from moekit import attempts, failures, launch, redact, rundir, worker
from moekit import rendezvous as rz
from moekit.config.checks import CHECKS, ensure_valid, format_warnings, warnings
from moekit.config.compose import compose
from moekit.config.schema import Config
from moekit.observe import metrics, profile, progress, summary
from moekit.run import checkpoints, preemption, preflight, watchdog
from moekit.translate import job as jobmod
from moekit.translate.env import EnvVar
from moekit.translate.maxtext_args import Arg
from moekit.translate.xla_flags import flag_origins
from moekit.versions import versions

HELP = "compose, validate, launch MaxText, summarize"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, a.b=value")
    p.add_argument("--dry-run", action="store_true", help="print config, MaxText command and env; launch nothing")
    p.add_argument("--format", choices=("text", "json"), default="text", help="dry-run output format")
    p.add_argument("-m", "--multirun", action="store_true", help="sweep (a=1,2; glob(*)): one run each + a report")
    p.epilog = "groups, options and keys: moekit config groups; the composed config and where each value comes from: "
    p.epilog += "moekit config show [overrides]"


def run(args: argparse.Namespace) -> int:
    if args.multirun:
        from moekit.commands import multirun

        return multirun.run_sweep(args.overrides, dry_run=args.dry_run)
    return train(args.overrides, dry_run=args.dry_run, fmt=args.format)


# Inherited variables that change how a run behaves, recorded (redacted) in job.json for reproduction.
RECORDED_ENV_PREFIXES = ("JAX_", "XLA_", "NCCL_", "NVTE_", "TF_", "CUDA_", "HF_", "MOEKIT_", "LIBTPU_")


def secret_names(cfg: Config) -> list[str]:
    """Names the config marks secret: run.secrets and the variables a JobSet takes from Kubernetes Secrets."""
    return [*cfg.run.secrets, *(s.env for s in cfg.cluster.secrets)]


def redacted_job(job: jobmod.Job, names: list[str]) -> jobmod.Job:
    """The job as it may be shown or recorded: values of secret arguments and variables replaced."""
    args = [
        Arg(a.key, redact.REDACTED, a.origin) if redact.redact_assignments([a.render()], names) != [a.render()] else a
        for a in job.args
    ]
    env = [
        EnvVar(v.name, redact.REDACTED, v.origin) if redact.is_secret_name(v.name, names) and v.value else v
        for v in job.env
    ]
    return jobmod.Job(args, job.xla_flags, env)


def resolve_run_dir(
    cfg: Config, now: datetime, config_view: dict[str, Any], cwd: Path, first_process: int = 0
) -> tuple[Path, Path, dict | None]:
    """(run directory, this launcher's records in it, previous manifest when it names an unfinished run of this config).

    Paths are made absolute here, before MaxText sees them (Orbax refuses relative checkpoint paths).
    """
    configured = rundir.configured_dir(cfg)
    if configured:
        run = rundir.absolute(configured, cwd)
        records = rundir.for_launcher(run, first_process)
        fix = None if cfg.run.dir else "choose a new cluster.name (the run directory is named after it) or a run.dir"
        previous = attempts.check_reusable(records, config_view, fix)
        records.mkdir(parents=True, exist_ok=True)
        return run, records, previous
    run = rundir.new_run_dir(rundir.absolute(cfg.run.base_dir, cwd), cfg.experiment_name, now)
    records = rundir.for_launcher(run, first_process)
    records.mkdir(parents=True, exist_ok=True)
    return run, records, None


def describe(cfg: Config, job: jobmod.Job, procs: list[dict[str, str]]) -> dict[str, Any]:
    """The dry-run view: what would run, and which config choice set each piece."""
    return {
        "experiment": cfg.experiment_name,
        "config": cfg.to_dict(),
        "maxtext_args": job.maxtext_args,
        "maxtext_arg_origins": {a.key: a.origin for a in job.args},
        "maxtext_command": job.maxtext_command(),
        "xla_flags": job.xla_flags,
        "xla_flag_origins": flag_origins(cfg),
        "env": job.env_dict,
        "env_origins": {v.name: v.origin for v in job.env},
        "processes": procs,
        "hardware": cfg.hardware.model_dump(mode="json"),
        "devices": cfg.num_devices,
        "mesh": {"ici": cfg.ici_filled, "dcn": dict(cfg.parallelism.dcn.items()), "num_slices": cfg.num_slices},
    }


def format_text(view: dict[str, Any], job: jobmod.Job, checked: preflight.Report) -> str:
    width = max(len(a) for a in view["maxtext_args"])
    out = ["# resolved config", yaml.safe_dump(view["config"], sort_keys=False).rstrip(), ""]
    out.append("# MaxText command (each argument with the config choice that set it)")
    out.append(f"python3 -m {jobmod.TRAIN_MODULE} \\")
    out += [f"    {a.render():<{width}}  # {a.origin}" for a in job.args]
    out += ["", "# XLA_FLAGS"] + ([f"  {f}  # {o}" for f, o in view["xla_flag_origins"].items()] or ["  (none)"])
    out += ["", "# environment"] + [f"  {v.name}={v.value}  # {v.origin}" for v in job.env if v.name != "XLA_FLAGS"]
    out += ["", f"# processes on this host ({len(view['processes'])}; rendezvous env)"]
    out += [f"  [{i}] {json.dumps(p, sort_keys=True)}" for i, p in enumerate(view["processes"])]
    where = "this host is the target" if checked.target else "this host is not the target, so nothing here is fatal"
    out += ["", f"# preflight ({where}: {checked.why})", checked.text() or "  every host probe passed"]
    return "\n".join(out)


def train(overrides: list[str], dry_run: bool = False, fmt: str = "text", environ: dict[str, str] | None = None) -> int:
    environ = dict(environ if environ is not None else os.environ)
    phase = progress.Phases()
    phase("composing the config")
    composed = compose(overrides)
    phase(f"checking it ({len(CHECKS)} checks)")
    cfg = ensure_valid(composed)
    if found := warnings(cfg):
        print(format_warnings(found), file=sys.stderr)
    now = datetime.now(UTC)
    names = secret_names(cfg)
    scrub = redact.Scrubber(redact.secret_values(environ, cfg.to_dict(), names))
    config_view = redact.redact_tree(cfg.to_dict(), names)
    shown_overrides = [scrub(o) for o in redact.redact_assignments(overrides, names)]

    checked = preflight.ensure(cfg, preflight.Host(environ, config_view), dry_run=dry_run)  # as the real run does
    if dry_run:
        configured = rundir.configured_dir(cfg)
        placeholder = str(rundir.absolute(configured, Path.cwd())) if configured else "<run.dir>"
        job = redacted_job(jobmod.build(cfg, placeholder, f"{placeholder}/{rundir.METRICS}"), names)
        view = describe(cfg, job, jobmod.dry_run_processes(cfg, environ)) | {"config": config_view}
        view["preflight"] = checked.to_dict()
        print(scrub(json.dumps(view, indent=2) if fmt == "json" else format_text(view, job, checked)))
        return 0

    procs = jobmod.processes(cfg, environ)
    first_process = int(procs[0].get(rz.PROCESS_ID, 0))
    with rundir.records_before_launch(Path(rundir.configured_dir(cfg) or cfg.run.base_dir)):
        root, run, previous = resolve_run_dir(cfg, now, config_view, Path.cwd(), first_process)
    with attempts.locked(run):
        while True:
            rc = _run(cfg, root, run, previous, procs, environ, shown_overrides, config_view, scrub, now, phase)
            fallback = checkpoints.after_attempt(run, root, cfg.run_name)
            if fallback is None:
                return rc
            previous, message, again = fallback
            print(message, file=sys.stderr, flush=True)
            if not again:
                return rc
            now = datetime.now(UTC)


def _run(
    cfg: Config,
    root: Path,
    run: Path,
    previous: dict | None,
    procs: list[dict[str, str]],
    environ: dict[str, str],
    shown_overrides: list[str],
    config_view: dict[str, Any],
    scrub: redact.Scrubber,
    now: datetime,
    phase: progress.Phases,
) -> int:
    names = secret_names(cfg)
    with rundir.records_before_launch(run):
        attempt = attempts.set_aside(run)
    resume_step = attempts.latest_checkpoint(root, cfg.run_name)
    metrics_path = run / rundir.METRICS
    job = jobmod.build(cfg, str(root), str(metrics_path))  # one checkpoint set for all launchers, in the run directory
    view = describe(cfg, redacted_job(job, names), procs)
    inherited = {k: v for k, v in sorted(environ.items()) if k.startswith(RECORDED_ENV_PREFIXES)}
    job_record = {k: view[k] for k in ("maxtext_command", "maxtext_args", "xla_flags", "env", "processes")} | {
        "inherited_env": redact.redact_tree(inherited, names),
        "overrides": shown_overrides,
    }
    vers = versions()
    history = [*(previous or {}).get("attempts", [])]
    if previous and previous.get("status") == "running":  # the last attempt's moekit died before recording
        history.append(
            {
                "attempt": previous.get("attempt", len(history) + 1),
                "started": previous.get("started"),
                "status": "failed",
                "failure": {
                    "class": failures.KILLED.name,
                    "evidence": "moekit ended without recording an outcome (SIGKILL, node loss or OOM kill)",
                },
            }
        )
    base = {
        "experiment": cfg.experiment_name,
        "started": now.isoformat(),
        "overrides": shown_overrides,
        "attempt": attempt,
        "resumed_from_checkpoint": resume_step,
        "attempts": history,
    }
    with rundir.records_before_launch(run):  # a full disk or a vanished folder stops here, before any launch
        rundir.write_yaml(run / rundir.CONFIG, config_view)
        rundir.write_atomic(run / rundir.JOB, scrub(json.dumps(job_record, indent=2)) + "\n")
        rundir.write_json(run / rundir.VERSIONS, vers)
        rundir.write_json(run / rundir.MANIFEST, {"status": "running", **base})
    resumed = f", resuming from the checkpoint of step {resume_step}" if resume_step is not None else ""
    again = f" (attempt {attempt}{resumed})" if attempt > 1 else ""
    print(
        f"moekit: {cfg.experiment_name} -> {run}{again}  ({len(procs)} process(es), {cfg.num_devices} device(s))",
        flush=True,
    )

    specs = []
    secret_keys = {a.key for a in job.args if redact.is_secret_name(a.key, names)}
    for penv in procs:
        pid = int(penv.get(rz.PROCESS_ID, 0))
        log = run / jobmod.per_process(rundir.LOG, pid)
        argv, secret_env = worker.hide_secrets(job.argv(pid), secret_keys)
        env = environ | job.env_dict | penv | secret_env | {worker.LAUNCHER_PID: str(os.getpid())}
        env |= {worker.STACKS: str(run / jobmod.per_process(watchdog.STACKS, pid))}
        env |= {worker.PREEMPTIBLE: "1"} if cfg.checkpoint.every else {}
        specs.append(launch.ProcessSpec(argv, env, log))

    started = time.monotonic()
    tty = sys.stdout.isatty()
    watch = watchdog.Watchdog(cfg.run.stall_timeout_s, started)

    def on_line(line: str) -> None:
        for p in progress.parse_phase(line):
            phase(p)
        s = progress.parse(line)
        if s is not None:
            watch.step_done()
            text = progress.format_progress(s, cfg.train.steps, time.monotonic() - started)
            print(("\r" + text) if tty else text, end="" if tty else "\n", flush=True)

    phase(f"launching {len(specs)} process(es): MaxText starts, then compiles; the first step follows")
    failure: failures.Failure | None = None
    stacks = [run / jobmod.per_process(watchdog.STACKS, int(p.get(rz.PROCESS_ID, 0))) for p in procs]
    with preemption.Notice(saves=cfg.checkpoint.every > 0) as notice:
        outcome = launch.run(
            specs,
            on_line,
            scrub=scrub if scrub else None,
            notice=notice,
            stop_grace_s=cfg.cluster.signal_grace_s,
            watch=watch,
            stack_files=stacks,
        )
    if tty:
        print()

    unrecorded: list[str] = []  # what could not be written after the run (a full disk): said, never fatal
    _survive(unrecorded, "the merged metrics", attempts.merge_metrics, run)
    last, saved = preemption.last_step(metrics_path), attempts.latest_checkpoint(root, cfg.run_name)
    with _log_lines(specs[0].log, outcome, 0) as lines:
        stopped = preemption.stop(notice, outcome.ended_at, last, resume_step, saved, lines)
    if stopped is not None:
        failure = stopped.failure(128 + (notice.signum or signal.SIGTERM))
    elif outcome.hang is not None:
        failure = watchdog.failure(outcome.hang, outcome.stacks, 128 + signal.SIGKILL)
    elif outcome.failed_rank is not None:
        rank = outcome.failed_rank
        with _log_lines(specs[rank].log, outcome, rank) as lines:  # the whole log: a full disk may be far up
            failure = failures.classify(outcome.returncodes[rank], lines)

    summ: dict[str, Any] = {}
    if metrics_path.is_file():
        peaks = cfg.hardware.peak_tflops.model_dump()
        starts = summary.attempt_starts([*history, {"resumed_from_checkpoint": resume_step}])
        summ = (
            _survive(
                unrecorded,
                "the metrics summary",
                lambda: summary.summarize(metrics.read(metrics_path), peaks, cfg.checkpoint.every, starts),
            )
            or {}
        )
    record = {
        "experiment": cfg.experiment_name,
        "run_dir": str(run),
        "hardware": cfg.hardware.name,
        "devices": cfg.num_devices,
        "provenance": {
            "kind": "measured",
            "date": now.date().isoformat(),
            "hardware": cfg.hardware.name,
            "host": vers.get("host"),
            "versions": vers,
        },
        "peak_tflops": cfg.hardware.peak_tflops.model_dump(),
        "peak_source": cfg.hardware.peak_source,
        "wall_s": round(outcome.wall_s, 2),
        **summ,
    }
    _survive(unrecorded, rundir.SUMMARY, rundir.write_json, run / rundir.SUMMARY, record)
    status = {
        "status": "ok" if failure is None else "preempted" if stopped is not None else "failed",
        "ended": datetime.now(UTC).isoformat(),
        "returncodes": outcome.returncodes,
        "failed_rank": outcome.failed_rank,
        "failure": failure.to_dict() if failure else None,
    }
    if stopped is not None:
        status["preemption"] = stopped.to_dict()
    if any(outcome.log_errors) or unrecorded:
        status["incomplete"] = [e for e in outcome.log_errors if e] + unrecorded
    this = {"attempt": attempt, "started": base["started"], "resumed_from_checkpoint": resume_step, **status}
    _survive(
        unrecorded,
        rundir.MANIFEST,
        rundir.write_record,
        run / rundir.MANIFEST,
        {**base, **status, "attempts": [*history, this]},
    )
    for problem in [e for e in outcome.log_errors if e] + unrecorded:
        print(f"moekit: warning: {problem}", file=sys.stderr)
    if summ.get("steady_steps"):
        print(summary.format_summary(summ, cfg.hardware.name, cfg.hardware.peak_source))
    if cfg.profile.enabled:
        first = cfg.profile.skip_steps + (resume_step or 0)
        print(profile.report_run(run, first, cfg.profile.steps, record["provenance"]))
    if failure is None:
        print(f"moekit: run directory {run}")
        return 0
    if stopped is not None:
        print(f"moekit: preempted: {failure.evidence}. Resume: the same command with run.dir={root}", file=sys.stderr)
        return failure.returncode
    _report_failure(failure, outcome, specs, root)
    return 1


def _report_failure(failure: failures.Failure, outcome: launch.Outcome, specs: list, run: Path) -> None:
    who = (
        f"process {outcome.failed_rank} exited {failure.returncode}"
        if outcome.failed_rank is not None
        else "stopped before the processes ended"
    )
    print(f"moekit: training failed: {failure.title} ({who})", file=sys.stderr)
    print(f"  evidence: {failure.evidence}", file=sys.stderr)
    print(f"  causes and fixes: {failure.doc}", file=sys.stderr)
    print(f"  run directory (resume with run.dir={run}): {run}", file=sys.stderr)
    if outcome.failed_rank is not None:
        log = specs[outcome.failed_rank].log
        with _log_lines(log, outcome, outcome.failed_rank) as lines:
            tail = list(collections.deque((ln.rstrip("\n") for ln in lines), maxlen=15))
        print(f"  log: {log}", file=sys.stderr)
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
