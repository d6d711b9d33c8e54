"""`moekit train -m ...`: a Hydra sweep, one run directory per run, then one combined report.

Sweeps use Hydra's own override grammar (`moe=dense,ragged_dot`, `train.seq_len=range(128,513,128)`,
`moe=glob(*)`, `choice(...)`) and expand to the cartesian product, in order, as Hydra's basic sweeper does.
Every run is composed and checked before the first one starts.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from moekit import redact, rundir
from moekit.config.checks import ensure_valid
from moekit.config.compose import compose, group_options
from moekit.errors import ConfigError
from moekit.run import preflight

SWEEP = "sweep.json"  # the sweep's runs: overrides, run directory, exit status


class _GroupOptions:
    """What Hydra's glob() asks of a config loader: the options of a config group (conf/<group>/*.yaml)."""

    def get_group_options(self, group_name: str, results_filter=None, config_name=None, overrides=None) -> list[str]:
        return group_options(group_name)


def _text(value) -> str:
    """A swept value as override text; booleans as Hydra spells them (str(True) would be 'True')."""
    from hydra.core.override_parser.types import Transformer

    return ("true" if value else "false") if isinstance(value, bool) else Transformer.str(value)


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """The override list of every run in the sweep (cartesian product of the sweeps, keys in given order)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create(config_loader=_GroupOptions()).parse_overrides(list(overrides))
        axes: dict[str, list[str]] = {}
        for o in parsed:
            key = o.get_key_element()
            if key in axes:
                raise ConfigError(f"{key} is given twice in a multirun; give one value list (a=1,2).")
            if o.is_sweep_override():
                if not o.is_discrete_sweep():
                    raise ConfigError(f"{key}: interval() sweeps need a search sweeper; list values (a=1,2) instead.")
                axes[key] = [f"{key}={_text(v)}" for v in o.sweep_iterator()]
            else:
                axes[key] = [f"{key}={o.get_value_element_as_str()}"]
    except HydraException as exc:
        raise ConfigError(f"could not parse the multirun overrides: {str(exc).splitlines()[0]}") from None
    if any(not values for values in axes.values()):
        empty = [k for k, v in axes.items() if not v]
        raise ConfigError(f"the sweep over {', '.join(empty)} matches no option; check the glob() pattern.")
    return [list(combo) for combo in itertools.product(*axes.values())]


def sweep_dir(runs: list[list[str]], now: datetime) -> tuple[Path, list[list[str]]]:
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
    base = Path(compose(runs[0]).run.base_dir)
    return rundir.new_run_dir(base, "multirun", now), runs


def run_sweep(overrides: Sequence[str], dry_run: bool = False) -> int:
    from moekit.commands import report
    from moekit.commands import train as train_cmd

    runs = expand(overrides)
    configs = [ensure_valid(compose(r)) for r in runs]  # every configuration error before anything starts
    if dry_run:  # and, as each run's own --dry-run does, the host probes
        print(f"# multirun: {len(runs)} run(s)")
        for i, (r, cfg) in enumerate(zip(runs, configs, strict=True)):
            view = redact.redact_tree(cfg.to_dict(), [*cfg.run.secrets, *(s.env for s in cfg.cluster.secrets)])
            try:
                checked = preflight.ensure(cfg, preflight.Host(dict(os.environ), view), dry_run=True)
            except preflight.PreflightError as exc:
                raise preflight.PreflightError(f"run [{i}] ({' '.join(redact.redact_assignments(r))}): {exc}") from None
            print(f"[{i}] {' '.join(redact.redact_assignments(r))}" + (f"\n{checked.text()}" if checked.found else ""))
        return 0
    folder, runs = sweep_dir(runs, datetime.now(UTC))
    print(f"moekit: multirun of {len(runs)} run(s) -> {folder}", flush=True)
    record: list[dict] = []
    for i, r in enumerate(runs):
        where = folder / str(i)
        shown = redact.redact_assignments(r, compose(r).run.secrets)  # never print or record a secret
        print(f"moekit: [{i}/{len(runs)}] {' '.join(shown)}", flush=True)
        rc = train_cmd.train([*r, f"run.dir={where}"])
        record.append({"index": i, "overrides": shown, "run_dir": str(where), "returncode": rc})
        rundir.write_json(folder / SWEEP, record)
    done = [Path(e["run_dir"]) for e in record if (Path(e["run_dir"]) / rundir.METRICS).is_file()]
    if done:
        path, shown, _ = report.write_report(done, folder)
        print(shown)
        print(f"moekit: combined report {path}")
    failed = [e for e in record if e["returncode"] != 0]
    for e in failed:
        print(f"moekit: run {e['index']} ({' '.join(e['overrides'])}) failed with exit {e['returncode']}")
    print(f"moekit: multirun {len(runs) - len(failed)} of {len(runs)} ok; runs listed in {folder / SWEEP}")
    return 1 if failed else 0
