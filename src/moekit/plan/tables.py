"""The data files the forecast reads (moekit/data), a config's forecast setup from its overrides, and a config's
whole plan from them (`moekit plan`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from moekit.base import maxtext_files
from moekit.base.errors import ConfigError
from moekit.config.checks import warnings
from moekit.config.load import load
from moekit.config.schema import Config
from moekit.plan import memory
from moekit.plan.calibrate import setup
from moekit.plan.forecast import Setup
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims, maxtext_values
from moekit.translate.env import env
from moekit.translate.maxtext_args import maxtext_args

DATA = Path(__file__).resolve().parents[1] / "data"


@cache
def data(name: str) -> dict[str, Any]:
    """A YAML file shipped in moekit/data, parsed (cached: read once per process)."""
    return yaml.load((DATA / name).read_text(), getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: fast


@cache
def _maxtext(model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return maxtext_files.model_values(model)


def values_of(cfg: Config) -> dict[str, Any]:
    """MaxText's keys for this config: base.yml < model file < the translated arguments."""
    base, model_file = _maxtext(cfg.model.name)
    args = {a.key: a.value for a in maxtext_args(cfg, "<run.dir>", "<run.dir>/metrics.jsonl")}
    return maxtext_values(base, model_file, args)


def setup_of(cfg: Config) -> Setup:
    """The forecast's setup of a composed config (offload bytes and fit from the memory estimate)."""
    values = values_of(cfg)
    links = data("links.yaml")
    mem = memory.estimate(
        Dims.from_values(values),
        values,
        Mesh.from_config(cfg),
        cfg.hardware.hbm_gib,
        env(cfg),
        links["hardware"].get(cfg.hardware.name, {}).get("host_gib_per_gpu"),
        float(data("plan_calibration.yaml").get("device_factor", 1.0)),
    )
    return setup(cfg, values, links, data("forecast.yaml"), mem.total("host"), not mem.warnings)


def compose_setup(overrides: Sequence[str]) -> tuple[Config, Setup]:
    """Compose `overrides` (every check passed) and return the config with its forecast setup."""
    cfg = load(list(overrides), warn=False)
    return cfg, setup_of(cfg)


def breakdown_setups(measured: Mapping[str, Any]) -> dict[str, Setup]:
    """The setups of every configuration data/breakdowns.yaml measured (breakdowns and single step times)."""
    out = {}
    for group in ("breakdowns", "steps"):
        for name, entry in measured[group].items():
            out[name] = compose_setup(entry["overrides"])[1]
    return out


def fabric_record(path: Path | None) -> dict[str, Any] | None:
    """A run's fabric.json (`--fabric PATH`), parsed; None without a path."""
    if path is None:
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"--fabric {path}: cannot read it as fabric.json ({exc}).\n"
            "  fix: give the fabric.json of a run directory (moekit fabric / train write it)"
        ) from None
    if not isinstance(record, dict) or not record.get("results"):
        raise ConfigError(f"--fabric {path}: no measured results in it; the fabric check must have run to its end")
    return record


def plan_of(
    cfg: Config,
    compute_tflops: float | None = None,
    scale: Sequence[int] = (),
    fabric: Path | None = None,
    search: bool = False,
) -> dict[str, Any]:
    """`moekit plan`'s data for a composed config: plan.build over the shipped data files, the ranked layouts with
    `search`, and the config's warnings. A model that cannot be planned is a ConfigError."""
    from moekit import plan
    from moekit.plan import search as layouts

    base, model_file = _maxtext(cfg.model.name)
    record = fabric_record(fabric)
    try:
        out = plan.build(
            cfg,
            base,
            model_file,
            data("links.yaml"),
            data("plan_calibration.yaml"),
            compute_tflops,
            scale,
            data("forecast.yaml"),
            record,
            data("forecast_bands.yaml"),
        )
        if search:
            links, table = data("links.yaml"), data("forecast.yaml")
            out["search"] = layouts.rank(cfg, base, model_file, links, table, fabric=record)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out["config_warnings"] = [str(w) for w in warnings(cfg)]
    return out
