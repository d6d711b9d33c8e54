"""The plan's data tables (moekit/data), read in this one place into one value, `Tables`, that the plan's functions
take: `shipped()` reads them once per process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from moekit.config.kinds.hardware import link_table, read_yaml

DATA = Path(__file__).resolve().parents[1] / "data"


def data(name: str) -> dict[str, Any]:
    """A YAML file shipped in moekit/data, parsed (at most 1 MiB, as every row table)."""
    return read_yaml(DATA / name, "data file")


@dataclass(frozen=True, slots=True)
class Tables:
    """The facts a plan is built from, besides the config and MaxText's own files."""

    links: Mapping[str, Mapping[str, Any]]
    """Link class -> {gb_per_s (per GPU, one direction), source}: data/links.yaml, read by config/kinds/hardware.py."""
    calibration: Mapping[str, Any]
    """data/plan_calibration.yaml: the memory estimate's device factor and the peaks it was calibrated on."""
    forecast: Mapping[str, Any] | None
    """data/forecast.yaml: the forecast's parameters; None: no forecast, the no-overhead bound alone."""
    bands: Mapping[str, Any] | None
    """data/forecast_bands.yaml: the calibration points and the band's width per domain; None: the parameters' band."""
    points: Mapping[str, Any]
    """data/forecast_points.yaml: the measured and published points the forecast is validated on."""
    breakdowns: Mapping[str, Any]
    """data/breakdowns.yaml: the measured one-GPU breakdowns the forecast's efficiencies are derived from."""


@cache
def shipped() -> Tables:
    """The tables shipped in the package, read once per process (scripts/forecast_docs.py clears the cache after it
    rewrites forecast.yaml)."""
    return Tables(
        links=link_table(),
        calibration=data("plan_calibration.yaml"),
        forecast=data("forecast.yaml"),
        bands=data("forecast_bands.yaml"),
        points=data("forecast_points.yaml"),
        breakdowns=data("breakdowns.yaml"),
    )
