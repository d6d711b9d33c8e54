"""Every experiment, one table: each conf/experiment/*.yaml against every step a user's command takes with it.

A row is (experiment, step). The steps: it composes; passes moekit's checks; translates (MaxText arguments, XLA
flags, environment, and a local experiment's processes); MaxText's own validator accepts it; it renders every
target, each checked by what reads it (the JobSet against the pinned CRD and pod schema, the Compose project by
`docker compose config`, the Slurm script by `bash -n`); it plans. Committed renders (k8s/, compose/) equal a fresh
render of the command in their header. Pure and fast enough for every `make test` (never marked slow): a broken
experiment fails here. MaxText's validator runs once per device count for all the command lines of that count.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import EXPERIMENTS, REPO, compose
from moekit import plan
from moekit.commands import render as cmd
from moekit.config import formats
from moekit.config.checks import problems
from moekit.plan import tables
from moekit.preflight.maxtext_validate import MaxTextRejected, rejections, validate
from moekit.render import validate as manifest
from moekit.translate.job import build
from moekit.translate.rendezvous import dry_run_processes

RUN_DIR = "/tmp/moekit-validate"


def maxtext_verdicts(cases: dict[str, list[str]]) -> dict[str, str | None]:
    """case id -> MaxText's refusal (None = accepted) of the composed overrides, one validator per device count."""
    by_shape: dict[tuple[int, int], list[tuple[str, list[str]]]] = defaultdict(list)
    for case, overrides in cases.items():
        cfg = compose(None, overrides)
        args = build(cfg, RUN_DIR, f"{RUN_DIR}/metrics.jsonl").maxtext_args
        by_shape[(cfg.num_devices, cfg.num_slices)].append((case, args))
    verdicts: dict[str, str | None] = {}
    for (devices, slices), group in by_shape.items():
        found = rejections([a for _, a in group], devices, slices)
        verdicts |= {c: str(r) if r else None for (c, _), r in zip(group, found, strict=True)}
    return verdicts


@pytest.fixture(scope="session")
def experiment_verdicts() -> dict[str, str | None]:
    return maxtext_verdicts({e: [f"experiment={e}"] for e in EXPERIMENTS})


def _render(experiment: str, target: str) -> str:
    # Names over 25 characters are refused before rendering (test_render_jobset); give those a short one.
    name = [f"cluster.name=e{len(experiment)}"] if len(experiment) > 25 else []
    return cmd.render([f"experiment={experiment}", f"target={target}", *name])[0]


# ---- the steps ----


def composes(experiment: str, _) -> None:
    assert compose(experiment).experiment_name == experiment


def checks(experiment: str, _) -> None:
    assert problems(compose(experiment)) == []


def translates(experiment: str, _) -> None:
    cfg = compose(experiment)
    job = build(cfg, RUN_DIR, f"{RUN_DIR}/metrics.jsonl")
    keys = [a.split("=", 1)[0] for a in job.maxtext_args]
    assert len(keys) == len(set(keys)) and all(formats.MAXTEXT_KEY.problem(k) is None for k in keys)
    for flag in job.xla_flags:
        name, _, value = flag.removeprefix("--").partition("=")
        assert formats.XLA_FLAG_NAME.problem(name) is None and formats.XLA_FLAG_VALUE.problem(value) is None, flag
    assert all(formats.ENV_NAME.problem(v.name) is None and isinstance(v.value, str) for v in job.env)
    if cfg.cluster.kind == "local":  # a cluster's own environment gives the others theirs (test_rendezvous)
        assert len(dry_run_processes(cfg, {})) == cfg.num_processes


def maxtext_accepts(experiment: str, request: pytest.FixtureRequest) -> None:
    assert request.getfixturevalue("experiment_verdicts")[experiment] is None


def renders_jobset(experiment: str, _) -> None:
    version = max("1.30", compose(experiment).network.min_kubernetes, key=lambda v: tuple(map(int, v.split("."))))
    assert manifest.problems(yaml.safe_load(_render(experiment, "jobset")), None, version) == []


def renders_compose(experiment: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue("tmp_path") / "compose.yaml"
    path.write_text(_render(experiment, "compose"))
    compose_bin = Path(sys.executable).parent / "docker-compose"
    found = subprocess.run([str(compose_bin), "-f", str(path), "config", "-q"], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr


def renders_slurm(experiment: str, _) -> None:
    found = subprocess.run(["bash", "-n"], input=_render(experiment, "slurm"), capture_output=True, text=True)
    assert found.returncode == 0, found.stderr


def plans(experiment: str, _) -> None:
    cfg = compose(experiment)
    out = plan.build(cfg, replace(tables.shipped(), forecast=None, bands=None), plan.Options(compute_tflops=100))
    assert out["memory"]["device_gib"] > 0 and out["flops"]["train_tflop_per_device_step"] > 0
    assert out["mesh"]["devices"] == cfg.num_devices
    assert all(c["ici_gb"] >= 0 and c["dcn_gb"] >= 0 for c in out["communication"])


def forecasts(experiment: str, _) -> None:
    """A GPU experiment has a forecast with a band inside the hardware's peak (docs/plan.md, "Forecast")."""
    from moekit.plan import calibrate, forecast

    cfg, shipped = compose(experiment), tables.shipped()
    assert cfg.hardware.platform != "cpu", "no forecast for a CPU experiment: list it in CPU_EXPERIMENTS"
    f = forecast.forecast(calibrate.setup_of(cfg, shipped), forecast.params_from(shipped.forecast)).to_dict()
    assert 0 < f["low"] <= f["tflops_per_device"] <= f["high"] < cfg.hardware.peak_tflops.fp8
    assert all(p["seconds"] >= 0 for p in f["parts"])


STEPS: dict[str, Callable[[str, pytest.FixtureRequest], None]] = {
    "composes": composes,
    "checks": checks,
    "translates": translates,
    "maxtext": maxtext_accepts,
    "jobset": renders_jobset,
    "compose": renders_compose,
    "slurm": renders_slurm,
    "plans": plans,
    "forecasts": forecasts,
}
CPU_EXPERIMENTS = ("smoke",)  # no GPU to forecast: their rows leave "forecasts" out
TABLE = [(e, s) for e in EXPERIMENTS for s in STEPS if not (s == "forecasts" and e in CPU_EXPERIMENTS)]


@pytest.mark.parametrize("experiment, step", TABLE, ids=[f"{e}-{s}" for e, s in TABLE])
def test_experiment(experiment, step, request):
    STEPS[step](experiment, request)


# ---- committed renders ----

RENDERS = sorted(  # the files moekit render wrote (compose/smoke.yaml is written by hand)
    p for folder in ("k8s", "compose") for p in (REPO / folder).glob("*.yaml") if "\n# render: " in p.read_text()
)


@pytest.mark.parametrize("path", RENDERS, ids=[f"{p.parent.name}/{p.name}" for p in RENDERS])
def test_committed_render_equals_a_fresh_one(path):
    """What `make k8s` would write: a difference is a stale render (`moekit render --refresh k8s`, or the command
    in the file's header for compose/), or a change to the translation that the render did not pick up."""
    overrides, label = cmd.recorded_command(path)
    assert any(o.removeprefix("experiment=") in EXPERIMENTS for o in overrides if o.startswith("experiment="))
    assert cmd.render(overrides, label)[0] == path.read_text(), f"{path.relative_to(REPO)} is stale"


def test_every_experiment_file_is_a_row():
    assert sorted({e for e, _ in TABLE}) == sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


def test_the_cpu_experiments_are_those_on_cpu():
    assert sorted(CPU_EXPERIMENTS) == [e for e in EXPERIMENTS if compose(e).hardware.platform == "cpu"]


def test_validator_rejects_an_unknown_maxtext_key():
    cfg = compose("smoke", ["maxtext.extra.no_such_maxtext_key=1"])
    job = build(cfg, "/tmp/x", "/tmp/x/m.jsonl")
    with pytest.raises(MaxTextRejected, match="no_such_maxtext_key"):
        validate(job.maxtext_args, cfg.num_devices, cfg.num_slices)


def test_no_other_test_walks_every_experiment():
    """This table is the one per-experiment test: a step for every experiment belongs in STEPS."""
    others = [p.name for p in (REPO / "tests").glob("test_*.py") if p.name != Path(__file__).name]
    assert [n for n in others if "EXPERIMENTS" in (REPO / "tests" / n).read_text()] == []
