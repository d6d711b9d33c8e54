"""`moekit train -m ...`: a Hydra sweep, one run directory per run, then one combined report.

The sweep's runs come from moekit.config.sweeps (Hydra's grammar). Every run is composed and checked before the
first one starts; each then trains in <folder>/<index> through series/trial.py, the runner tune and the benchmark
runners use: a `moekit train` of its own, so one run's crash ends that run only, and sweep.json records each run's
status and failure class as tune.json does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from moekit import rundir
from moekit.base import redact
from moekit.base.errors import ConfigError
from moekit.config.load import load
from moekit.config.sweeps import expand
from moekit.observe.reports import report_file
from moekit.plan import launch
from moekit.preflight import host as preflight
from moekit.run import view
from moekit.series import trial

SWEEP = "sweep.json"  # the sweep's runs: overrides, run directory, exit status


def sweep_dir(runs: list[list[str]], base_dir: str, now: datetime) -> tuple[Path, list[list[str]]]:
    """run.dir= names the sweep's folder (each run goes into <folder>/<index>); by default <run.base_dir>/multirun/."""
    dirs = {o for r in runs for o in r if o.startswith("run.dir=")}
    if len(dirs) > 1:
        raise ConfigError("run.dir cannot be swept: it names the folder that holds the sweep's runs.")
    runs = [[o for o in r if not o.startswith("run.dir=")] for r in runs]
    if dirs:
        path = Path(dirs.pop().removeprefix("run.dir="))
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise ConfigError(f"{path} is not empty; a sweep needs a new folder (run directories are never reused).")
        return path, runs
    return rundir.new_run_dir(Path(base_dir), "multirun", now), runs


def _differing_keys(configs: Sequence) -> list[list[str]]:
    """For each run, its MaxText arguments and job environment (XLA_FLAGS flag by flag) whose value is not the same
    in every run of the sweep: what each run changes, as MaxText and XLA receive it (secrets redacted)."""
    from moekit.translate.env import env
    from moekit.translate.maxtext_args import maxtext_args

    rendered = []
    for c in configs:
        keys = {a.key: a.render() for a in maxtext_args(c, "<run dir>", "<run dir>/metrics.jsonl")}
        variables = env(c)
        flags = str(variables.pop("XLA_FLAGS", "")).split()
        keys |= {f"${k}": f"{k}={v}" for k, v in variables.items()}
        keys |= {f.partition("=")[0]: f"XLA_FLAGS:{f}" for f in flags}
        rendered.append(keys)
    every = set().union(*rendered) if rendered else set()
    varying = sorted(k for k in every if len({r.get(k) for r in rendered}) > 1)
    return [redact.redact_assignments(r[k] for k in varying if k in r) for r in rendered]


def run_sweep(overrides: Sequence[str], dry_run: bool = False) -> int:
    """Expand, compose and check every run, then train them one after another and report on those that ran."""
    runs = expand(overrides)
    configs = [load(r, warn=False) for r in runs]  # every configuration error before anything starts
    if dry_run:  # and, as each run's own --dry-run does, the host probes
        print(f"# multirun: {len(runs)} run(s)")
        keys = _differing_keys(configs)
        for i, (r, cfg) in enumerate(zip(runs, configs, strict=True)):
            shown = redact.redact_tree(cfg.to_dict(), view.secret_names(cfg))
            try:
                checked = preflight.ensure(cfg, preflight.Host(dict(os.environ), shown), dry_run=True)
            except preflight.PreflightError as exc:
                raise preflight.PreflightError(f"run [{i}] ({' '.join(redact.redact_assignments(r))}): {exc}") from None
            print(f"[{i}] {' '.join(redact.redact_assignments(r))}")
            print(f"  differs (MaxText keys, environment): {' '.join(keys[i]) or '(the same as every other run)'}")
            if fit := launch.memory_line(cfg):
                print(f"  memory (the plan's estimate): {fit}")
            if checked.found:
                print(checked.text())
        return 0
    folder, runs = sweep_dir(runs, configs[0].run.base_dir, datetime.now(UTC))
    print(f"moekit: multirun of {len(runs)} run(s) -> {folder}", flush=True)
    record: list[dict] = []
    for i, (r, cfg) in enumerate(zip(runs, configs, strict=True)):
        where = folder / str(i)
        shown = redact.redact_assignments(r, cfg.run.secrets)  # never print or record a secret
        print(f"moekit: [{i}/{len(runs)}] {' '.join(shown)}", flush=True)
        result = trial.run(r, where, timeout_s=None, echo=True)
        entry = {"index": i, "overrides": shown, "run_dir": str(where), "returncode": result["returncode"]}
        entry["status"] = result["status"]
        if "failure" in result:
            entry["failure"] = result["failure"]
        record.append(entry)
        rundir.write_json(folder / SWEEP, record)
    done = [Path(e["run_dir"]) for e in record if (Path(e["run_dir"]) / rundir.METRICS).is_file()]
    if done:
        path, shown, _ = report_file.write_report(done, folder)
        print(shown)
        print(f"moekit: combined report {path}")
    failed = [e for e in record if e["returncode"] != 0]
    for e in failed:
        print(f"moekit: run {e['index']} ({' '.join(e['overrides'])}) failed with exit {e['returncode']}")
    print(f"moekit: multirun {len(runs) - len(failed)} of {len(runs)} ok; runs listed in {folder / SWEEP}")
    return 1 if failed else 0
