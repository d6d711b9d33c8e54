"""The data files the forecast reads (moekit/data), and a config's forecast setup from its overrides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from moekit.base import maxtext_files
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
    return yaml.safe_load((DATA / name).read_text())


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
