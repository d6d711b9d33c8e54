"""`moekit train`: compose, validate, translate, launch, summarize."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from moekit import launch, rundir
from moekit import rendezvous as rz
from moekit.config.checks import ensure_valid
from moekit.config.compose import compose
from moekit.config.schema import Config
from moekit.observe import metrics, progress, summary
from moekit.translate import job as jobmod
from moekit.versions import versions

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


def resolve_run_dir(cfg: Config, now: datetime) -> Path:
    if cfg.run.dir:
        path = Path(cfg.run.dir)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return rundir.new_run_dir(Path(cfg.run.base_dir), cfg.experiment_name, now)


def describe(cfg: Config, job: jobmod.Job, procs: list[dict[str, str]]) -> dict[str, Any]:
    """The dry-run view: what would run, and which config choice set each piece."""
    return {
        "experiment": cfg.experiment_name,
        "config": cfg.to_dict(),
        "maxtext_args": job.maxtext_args,
        "maxtext_arg_origins": {a.key: a.origin for a in job.args},
        "maxtext_command": job.maxtext_command(),
        "xla_flags": job.xla_flags,
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
    out += ["", "# XLA_FLAGS"] + [f"  {f}" for f in view["xla_flags"] or ["(none)"]]
    out += ["", "# environment"] + [f"  {v.name}={v.value}  # {v.origin}" for v in job.env if v.name != "XLA_FLAGS"]
    out += ["", f"# processes on this host ({len(view['processes'])}; rendezvous env)"]
    out += [f"  [{i}] {json.dumps(p, sort_keys=True)}" for i, p in enumerate(view["processes"])]
    return "\n".join(out)


def train(overrides: list[str], dry_run: bool = False, fmt: str = "text", environ: dict[str, str] | None = None) -> int:
    environ = dict(environ if environ is not None else __import__("os").environ)
    cfg = ensure_valid(compose(overrides))
    now = datetime.now(UTC)

    if dry_run:
        placeholder = "<run.dir>" if not cfg.run.dir else cfg.run.dir
        job = jobmod.build(cfg, placeholder, f"{placeholder}/{rundir.METRICS}")
        view = describe(cfg, job, jobmod.processes(cfg, environ))
        print(json.dumps(view, indent=2) if fmt == "json" else format_text(view, job))
        return 0

    procs = jobmod.processes(cfg, environ)
    run = resolve_run_dir(cfg, now)
    metrics_path = run / rundir.METRICS
    job = jobmod.build(cfg, str(run), str(metrics_path))
    view = describe(cfg, job, procs)
    rundir.write_yaml(run / rundir.CONFIG, cfg.to_dict())
    rundir.write_json(
        run / rundir.JOB,
        {k: view[k] for k in ("maxtext_command", "maxtext_args", "xla_flags", "env", "processes")}
        | {"overrides": overrides},
    )
    vers = versions()
    rundir.write_json(run / rundir.VERSIONS, vers)
    rundir.write_json(run / rundir.MANIFEST, {"status": "running", "started": now.isoformat(), "overrides": overrides})
    print(
        f"moekit: {cfg.experiment_name} -> {run}  ({len(procs)} process(es), {cfg.num_devices} device(s))", flush=True
    )

    specs = []
    for penv in procs:
        pid = int(penv.get(rz.PROCESS_ID, 0))
        log = run / jobmod.per_process(rundir.LOG, pid)
        specs.append(launch.ProcessSpec(job.argv(pid), environ | job.env_dict | penv, log))

    started = time.monotonic()
    tty = sys.stdout.isatty()

    def on_line(line: str) -> None:
        s = progress.parse(line)
        if s is not None:
            text = progress.format_progress(s, cfg.train.steps, time.monotonic() - started)
            print(("\r" + text) if tty else text, end="" if tty else "\n", flush=True)

    outcome = launch.run(specs, on_line)
    if tty:
        print()

    ok = outcome.failed_rank is None
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
        "status": "ok" if ok else "failed",
        "returncodes": outcome.returncodes,
        "failed_rank": outcome.failed_rank,
    }
    rundir.write_json(run / rundir.MANIFEST, {"started": now.isoformat(), "overrides": overrides, **status})
    if summ.get("steps"):
        print(summary.format_summary(summ, cfg.hardware.name, cfg.hardware.peak_source))
    if not ok:
        log = specs[outcome.failed_rank].log
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
        print(
            f"moekit: training failed (process {outcome.failed_rank} exited "
            f"{outcome.returncodes[outcome.failed_rank]}); log: {log}",
            file=sys.stderr,
        )
        print("\n".join("  | " + t for t in tail), file=sys.stderr)
        return 1
    print(f"moekit: run directory {run}")
    return 0
