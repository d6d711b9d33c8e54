"""`moekit train`: compose, validate, translate, launch, summarize."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from moekit import attempts, data_preflight, failures, launch, redact, rundir
from moekit import rendezvous as rz
from moekit.config.checks import ensure_valid
from moekit.config.compose import compose
from moekit.config.schema import Config
from moekit.errors import MoekitError
from moekit.observe import metrics, progress, summary
from moekit.translate import job as jobmod
from moekit.translate.env import EnvVar
from moekit.translate.maxtext_args import Arg
from moekit.translate.xla_flags import flag_origins
from moekit.versions import versions
from moekit.worker import LAUNCHER_PID

HELP = "compose, validate, launch MaxText, summarize"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, a.b=value")
    p.add_argument("--dry-run", action="store_true", help="print config, MaxText command and env; launch nothing")
    p.add_argument("--format", choices=("text", "json"), default="text", help="dry-run output format")
    p.add_argument("-m", "--multirun", action="store_true", help="sweep (a=1,2; glob(*)): one run each + a report")


def run(args: argparse.Namespace) -> int:
    if args.multirun:
        from moekit.commands import multirun

        return multirun.run_sweep(args.overrides, dry_run=args.dry_run)
    return train(args.overrides, dry_run=args.dry_run, fmt=args.format)


# Inherited variables that change how a run behaves, recorded (redacted) in job.json for reproduction.
RECORDED_ENV_PREFIXES = ("JAX_", "XLA_", "NCCL_", "NVTE_", "TF_", "CUDA_", "HF_", "MOEKIT_", "LIBTPU_")
LOG_TAIL_LINES = 200


class Interrupted(BaseException):
    """moekit itself got SIGTERM (pod eviction, scancel) or SIGINT: stop the processes, record, exit."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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


def ensure_port_free(cfg: Config) -> None:
    """Two local multi-process jobs on one coordinator port would join each other's rendezvous (gRPC shares the
    port), and fail much later in confusing ways: refuse a port that is already taken, before launching."""
    if cfg.cluster.kind != "local" or cfg.num_processes == 1:
        return
    port = cfg.cluster.coordinator_port
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed job's TIME_WAIT is no conflict
        try:
            probe.bind(("", port))
            return
        except OSError:
            pass
    with socket.socket() as free:
        free.bind(("", 0))
        suggestion = free.getsockname()[1]
    raise rz.RendezvousError(
        f"cluster.coordinator_port={port} is in use on this host (another multi-process job?); nothing was "
        f"launched. Fix: cluster.coordinator_port={suggestion} (a free port), or wait for the other job to end."
    )


def ensure_gpus_present(cfg: Config, dev: Path) -> None:
    """A GPU config on a host without (enough) GPUs would start, import everything and fail minutes later."""
    if cfg.hardware.platform != "gpu":
        return
    found = len([p for p in dev.glob("nvidia*") if p.name.removeprefix("nvidia").isdigit()])
    want = cfg.cluster.gpus_per_node
    if found == 0:
        raise rz.RendezvousError(
            f"hardware={cfg.hardware.name} needs NVIDIA GPUs, but this host has none ({dev}/nvidia0 is missing); "
            "nothing was launched. Fix: hardware=cpu to train on CPU, or run on a GPU node "
            "(in a container: docker run --gpus all ...)."
        )
    if found < want:
        raise rz.RendezvousError(
            f"cluster.gpus_per_node={want}, but this host has {found} GPU(s); nothing was launched. "
            f"Fix: cluster.gpus_per_node={found} (and a mesh that fits), or run on a node with {want} GPUs."
        )


def ensure_te_present(cfg: Config) -> None:
    """moe=te without TransformerEngine fails inside MaxText's model init, after compilation has started."""
    if cfg.moe.backend != "te" or importlib.util.find_spec("transformer_engine") is not None:
        return
    raise MoekitError(
        "moe=te runs TransformerEngine's MoE block, but transformer_engine is not importable here; nothing was "
        "launched. Fix: run in moekit's image (its NGC JAX base ships TE with NCCL EP), install TE for JAX "
        "(transformer-engine[jax], NCCL >= 2.30.4), or use moe=tokamax."
    )


def resolve_run_dir(cfg: Config, now: datetime, config_view: dict[str, Any]) -> tuple[Path, dict | None]:
    """The run directory and, when run.dir names an unfinished run of this config, its previous manifest."""
    if cfg.run.dir:
        path = Path(cfg.run.dir)
        previous = attempts.check_reusable(path, config_view)
        path.mkdir(parents=True, exist_ok=True)
        return path, previous
    return rundir.new_run_dir(Path(cfg.run.base_dir), cfg.experiment_name, now), None


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


def format_text(view: dict[str, Any], job: jobmod.Job) -> str:
    width = max(len(a) for a in view["maxtext_args"])
    out = ["# resolved config", yaml.safe_dump(view["config"], sort_keys=False).rstrip(), ""]
    out.append("# MaxText command (each argument with the config choice that set it)")
    out.append(f"python3 -m {jobmod.TRAIN_MODULE} \\")
    out += [f"    {a.render():<{width}}  # {a.origin}" for a in job.args]
    out += ["", "# XLA_FLAGS"] + ([f"  {f}  # {o}" for f, o in view["xla_flag_origins"].items()] or ["  (none)"])
    out += ["", "# environment"] + [f"  {v.name}={v.value}  # {v.origin}" for v in job.env if v.name != "XLA_FLAGS"]
    out += ["", f"# processes on this host ({len(view['processes'])}; rendezvous env)"]
    out += [f"  [{i}] {json.dumps(p, sort_keys=True)}" for i, p in enumerate(view["processes"])]
    return "\n".join(out)


def train(overrides: list[str], dry_run: bool = False, fmt: str = "text", environ: dict[str, str] | None = None) -> int:
    environ = dict(environ if environ is not None else os.environ)
    cfg = ensure_valid(compose(overrides))
    now = datetime.now(UTC)
    names = secret_names(cfg)
    scrub = redact.Scrubber(redact.secret_values(environ, cfg.to_dict(), names))
    config_view = redact.redact_tree(cfg.to_dict(), names)
    shown_overrides = [scrub(o) for o in redact.redact_assignments(overrides, names)]

    if dry_run:
        placeholder = "<run.dir>" if not cfg.run.dir else cfg.run.dir
        job = redacted_job(jobmod.build(cfg, placeholder, f"{placeholder}/{rundir.METRICS}"), names)
        view = describe(cfg, job, jobmod.dry_run_processes(cfg, environ)) | {"config": config_view}
        print(scrub(json.dumps(view, indent=2) if fmt == "json" else format_text(view, job)))
        return 0

    procs = jobmod.processes(cfg, environ)
    ensure_port_free(cfg)
    ensure_gpus_present(cfg, Path("/dev"))
    ensure_te_present(cfg)
    data_preflight.ensure_data_ready(cfg)
    run, previous = resolve_run_dir(cfg, now, config_view)
    with attempts.locked(run):
        return _run(cfg, run, previous, procs, environ, shown_overrides, config_view, scrub, now)


def _run(
    cfg: Config,
    run: Path,
    previous: dict | None,
    procs: list[dict[str, str]],
    environ: dict[str, str],
    shown_overrides: list[str],
    config_view: dict[str, Any],
    scrub: redact.Scrubber,
    now: datetime,
) -> int:
    names = secret_names(cfg)
    attempt = attempts.set_aside(run)
    resume_step = attempts.latest_checkpoint(run, cfg.run_name)
    metrics_path = run / rundir.METRICS
    job = jobmod.build(cfg, str(run), str(metrics_path))
    view = describe(cfg, redacted_job(job, names), procs)
    inherited = {k: v for k, v in sorted(environ.items()) if k.startswith(RECORDED_ENV_PREFIXES)}
    rundir.write_yaml(run / rundir.CONFIG, config_view)
    job_record = {k: view[k] for k in ("maxtext_command", "maxtext_args", "xla_flags", "env", "processes")} | {
        "inherited_env": redact.redact_tree(inherited, names),
        "overrides": shown_overrides,
    }
    rundir.write_atomic(run / rundir.JOB, scrub(json.dumps(job_record, indent=2)) + "\n")
    vers = versions()
    rundir.write_json(run / rundir.VERSIONS, vers)
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
    rundir.write_json(run / rundir.MANIFEST, {"status": "running", **base})
    resumed = f", resuming from the checkpoint of step {resume_step}" if resume_step is not None else ""
    again = f" (attempt {attempt}{resumed})" if attempt > 1 else ""
    print(
        f"moekit: {cfg.experiment_name} -> {run}{again}  ({len(procs)} process(es), {cfg.num_devices} device(s))",
        flush=True,
    )

    specs = []
    for penv in procs:
        pid = int(penv.get(rz.PROCESS_ID, 0))
        log = run / jobmod.per_process(rundir.LOG, pid)
        env = environ | job.env_dict | penv | {LAUNCHER_PID: str(os.getpid())}
        specs.append(launch.ProcessSpec(job.argv(pid), env, log))

    started = time.monotonic()
    tty = sys.stdout.isatty()

    def on_line(line: str) -> None:
        s = progress.parse(line)
        if s is not None:
            text = progress.format_progress(s, cfg.train.steps, time.monotonic() - started)
            print(("\r" + text) if tty else text, end="" if tty else "\n", flush=True)

    failure: failures.Failure | None = None
    interrupted: Interrupted | None = None
    with _signals_interrupt():
        try:
            outcome = launch.run(specs, on_line, scrub=scrub if scrub else None)
        except Interrupted as exc:
            interrupted = exc
            outcome = launch.Outcome([], None, time.monotonic() - started)
    if tty:
        print()

    attempts.merge_metrics(run)
    if interrupted is not None:
        failure = failures.Failure(
            failures.KILLED.name, failures.KILLED.title, 128 + interrupted.signum, f"moekit received {interrupted}"
        )
    elif outcome.failed_rank is not None:
        log = specs[outcome.failed_rank].log
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.is_file() else []
        failure = failures.classify(outcome.returncodes[outcome.failed_rank], "\n".join(tail))

    summ: dict[str, Any] = {}
    if metrics_path.is_file():
        peaks = cfg.hardware.peak_tflops.model_dump()
        summ = summary.summarize(metrics.read(metrics_path), peaks)
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
    rundir.write_json(run / rundir.SUMMARY, record)
    status = {
        "status": "ok" if failure is None else "failed",
        "ended": datetime.now(UTC).isoformat(),
        "returncodes": outcome.returncodes,
        "failed_rank": outcome.failed_rank,
        "failure": failure.to_dict() if failure else None,
    }
    this = {"attempt": attempt, "started": base["started"], "resumed_from_checkpoint": resume_step, **status}
    rundir.write_json(run / rundir.MANIFEST, {**base, **status, "attempts": [*history, this]})
    if summ.get("steps"):
        print(summary.format_summary(summ, cfg.hardware.name, cfg.hardware.peak_source))
    if failure is None:
        print(f"moekit: run directory {run}")
        return 0
    _report_failure(failure, outcome, specs, run)
    return 128 + interrupted.signum if interrupted else 1


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
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
        print(f"  log: {log}", file=sys.stderr)
        print("\n".join("  | " + t for t in tail), file=sys.stderr)


class _signals_interrupt:
    """While launched processes run, SIGTERM and SIGINT raise Interrupted (main thread only)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self) -> None:
        self._old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._raise)

    @staticmethod
    def _raise(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
