"""The forecast against every number the repository holds: the validation table of docs/plan.md.

`moekit plan --validate` composes each point of data/forecast_points.yaml, forecasts it with data/forecast.yaml,
places it among the calibration points (plan/domain.py), widens its band by the residuals of the other points at
its level (leave one out), and prints the table. Calibration points are shown but left out of the error
statistics. Nothing here writes a file: scripts/forecast_docs.py regenerates docs/plan.md's table, the derived
parameters of data/forecast.yaml and data/forecast_bands.yaml from these functions.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from moekit.config.load import load
from moekit.config.schema import Config
from moekit.plan import calibrate, domain, tables
from moekit.plan.forecast import Forecast, Setup, efficiency, forecast, grown, params_from

BEGIN = "<!-- BEGIN forecast validation (moekit plan --validate; scripts/forecast_docs.py) -->"
END = "<!-- END forecast validation -->"


@dataclass(frozen=True, slots=True)
class Row:
    """One point: what was measured or published, what the forecast says, and the error."""

    name: str
    kind: str
    """measured (one GPU: an H200, or the H100 its run names), published, scaling or ladder."""
    measured: float
    forecast: float
    low: float
    high: float
    unit: str
    source: str
    calibration: str | None = None
    note: str = ""
    level: int | None = None
    """Its domain's level among the calibration points (plan/domain.py); None for a scaling efficiency."""
    width: float = 0.0
    """The half-width its band was widened to (0: the parameters' band alone)."""
    work_ratio: float = 0.0
    """Its FLOPs per step over its nearest calibration point's."""

    @property
    def error(self) -> float:
        """Forecast throughput over measured throughput - 1 (for a step time: measured / forecast - 1)."""
        if self.unit == "s/step":
            return self.measured / self.forecast - 1
        return self.forecast / self.measured - 1

    @property
    def inside(self) -> bool:
        """Whether the measured or published value lies within the forecast's band."""
        return self.low <= self.measured <= self.high


def compose_setup(overrides: Sequence[str]) -> tuple[Config, Setup]:
    """Compose `overrides` (every check passed) and return the config with its forecast setup."""
    cfg = load(list(overrides), warn=False)
    return cfg, calibrate.setup_of(cfg, tables.shipped())


def breakdown_setups(measured: Mapping[str, Any]) -> dict[str, Setup]:
    """The setups of every configuration data/breakdowns.yaml measured (breakdowns and single step times)."""
    out = {}
    for group in ("breakdowns", "steps"):
        for name, entry in measured[group].items():
            out[name] = compose_setup(entry["overrides"])[1]
    return out


@cache
def _composed(overrides: tuple[str, ...]) -> tuple[Setup, domain.Position]:
    cfg, su = compose_setup(list(overrides))
    return su, domain.position(cfg, su.values, su.dims, su.mesh.devices)


def _fc(overrides: Sequence[str], params) -> tuple[Setup, Forecast, domain.Position]:
    su, pos = _composed(tuple(overrides))
    return su, forecast(su, params), pos


def anchors() -> list[dict[str, Any]]:
    """The calibration points (one per configuration, the first named): name, run, measured step_s, overrides,
    position. What the forecast's domain is measured from."""
    out: dict[str, dict[str, Any]] = {}
    for p in tables.shipped().points["measured"]:
        if not p.get("calibration"):
            continue
        pos = _composed(tuple(p["overrides"]))[1].to_dict()
        key = json.dumps(pos, sort_keys=True)
        out.setdefault(
            key,
            {
                "name": p["name"],
                "run": p["run"],
                "step_s": float(p["step_s"]),
                "overrides": p["overrides"],
                "position": pos,
            },
        )
    return list(out.values())


def _place(pos: domain.Position, marks: list[dict[str, Any]]) -> dict[str, Any]:
    d = domain.classify(pos, marks)
    return {"level": d.level, "work_ratio": d.work_ratio}


def _raw_rows() -> list[Row]:
    shipped = tables.shipped()
    points, params = shipped.points, params_from(shipped.forecast)
    marks = anchors()
    out = []
    for p in points["measured"]:
        _, f, pos = _fc(p["overrides"], params)
        out.append(
            Row(
                p["name"],
                "measured",
                float(p["step_s"]),
                f.step_s,
                f.step_low_s,
                f.step_high_s,
                "s/step",
                f"run {p['run']}",
                p.get("calibration"),
                p.get("note", ""),
                **_place(pos, marks),
            )
        )
    for p in points["published"]:
        su, f, pos = _fc(p["overrides"], params)
        if "efficiency" in p:
            base, top = p["scale"]
            eff, lo, hi, why = efficiency(grown(su, base), grown(su, top), params)
            note = f"{top} vs {base} GPUs; where {1 - eff:.1%} goes: {why}"
            out.append(
                Row(p["name"], "scaling", float(p["efficiency"]), eff, lo, hi, "efficiency", p["source"], note=note)
            )
            continue
        d = f.to_dict()
        out.append(
            Row(
                p["name"],
                "published",
                float(p["tflops_per_device"]),
                d["tflops_per_device"],
                d["low"],
                d["high"],
                "TFLOP/s",
                "NVIDIA blog",
                note=p.get("note", "") + ("" if su.fits else "; does not fit memory as modelled"),
                **_place(pos, marks),
            )
        )
    return out


def residuals(rs: Sequence[Row]) -> list[tuple[int, float]]:
    """(level, error) of every row with a domain (not the scaling efficiency), calibration points included (they
    alone are at level 0)."""
    return [(r.level, r.error) for r in rs if r.level is not None]


def _widened(r: Row, width: float) -> Row:
    if r.unit == "TFLOP/s":  # the step band's ends, as throughput: f / (1 + w) .. f / (1 - w)
        low, high = min(r.low, r.forecast / (1 + width)), max(r.high, r.forecast / (1 - width))
    else:
        low, high = domain.widen(r.low, r.high, r.forecast, width)
    return dataclasses.replace(r, low=low, high=high, width=width)


def rows() -> list[Row]:
    """Every point of data/forecast_points.yaml with its forecast, its band widened by the residuals of the other
    points at its level (leave one out: a point's own error never sets its band)."""
    raw = _raw_rows()
    out = []
    for i, r in enumerate(raw):
        if r.level is None:
            out.append(r)
            continue
        others = residuals(raw[:i] + raw[i + 1 :])
        out.append(_widened(r, domain.widths(others)[r.level]["width"]))
    return out


def bands(rs: Sequence[Row]) -> dict[str, Any]:
    """data/forecast_bands.yaml's content: the calibration points, the band's half-width per level over every
    validation residual, and the range of work per step (over the nearest calibration point's) the validation
    points span."""
    ratios = [r.work_ratio for r in rs if r.level and not r.calibration]
    return {
        "anchors": anchors(),
        "widths": domain.widths(residuals(rs)),
        "work_ratio": [min(ratios), max(ratios)],
    }


def ladder() -> tuple[list[tuple[str, float, bool]], bool]:
    """The ladder's rungs with their forecast TFLOP/s and whether they fit memory, and whether each rung beats the
    one before."""
    shipped = tables.shipped()
    points, params = shipped.points["ladder"], params_from(shipped.forecast)
    rungs = []
    for name in points["experiments"]:
        su, f, _ = _fc([f"experiment={name}"], params)
        rungs.append((name, f.to_dict()["tflops_per_device"], su.fits))
    return rungs, all(b[1] > a[1] for a, b in zip(rungs, rungs[1:], strict=False))


def stats(rs: list[Row]) -> tuple[float, Row | None]:
    """Median |error| and the row with the largest |error| over the points not used for calibration."""
    scored = [r for r in rs if not r.calibration]
    if not scored:
        return 0.0, None
    return statistics.median(abs(r.error) for r in scored), max(scored, key=lambda r: abs(r.error))


def table(rs: list[Row], rungs: list[tuple[str, float, bool]], ordered: bool) -> str:
    """The markdown of the validation section (between the markers)."""
    med, worst = stats(rs)
    lines = [
        "| point | measured / published | forecast [band] | error | in band | domain | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        fmt = ".1%" if r.unit == "efficiency" else (".3f" if r.unit == "s/step" else ".0f")
        name = r.name + (f" (calibration: {r.calibration})" if r.calibration else "")
        note = f"; {r.note}" if r.note else ""
        lines.append(
            f"| {name} | {format(r.measured, fmt)} {r.unit} | {format(r.forecast, fmt)} "
            f"[{format(r.low, fmt)}-{format(r.high, fmt)}] | {r.error:+.1%} | {'yes' if r.inside else 'no'} | "
            f"{_domain_cell(r)} | {r.source}{note} |"
        )
    rung_text = " -> ".join(
        f"{n.removeprefix('dsv3_ladder_')} {t:.0f}" + ("" if fits else " (does not fit memory)") for n, t, fits in rungs
    )
    runs = tables.shipped().points["runs"]
    lines += [
        "",
        "Measured runs (one GPU each, an H200 unless the run names an H100; s/step is the steady median of "
        "moekit's summary): "
        + "; ".join(f"{k}: {v}" for k, v in runs.items())
        + ". Published: NVIDIA technical blog 'Accelerating Dropless MoE Training in JAX with NVIDIA Transformer "
        "Engine', 2026-09-14 (data/published.yaml). Error: forecast throughput over measured - 1 (for a step time, "
        "measured / forecast - 1).",
        "",
        f"Ladder (forecast TFLOP/s/device, GB300, 128 GPUs): {rung_text}. "
        f"Each rung faster than the one before: {'yes' if ordered else 'no'}.",
        "",
    ]
    lines += [
        "Band half-width by domain (plan/domain.py; the level of each point in the table, its band the wider of "
        "its parameters' and +-this, set without its own error): "
        + "; ".join(f"{w['name']} {w['width']:.1%} ({w['how']})" for w in domain.widths(residuals(rs))),
        "",
    ]
    scored = [r for r in rs if not r.calibration]
    others = [r for r in scored if r is not worst]
    if worst is not None:
        lines.append(
            f"Over the {len(scored)} points not used for calibration: **median |error| {med:.1%}**, largest "
            f"{abs(worst.error):.1%} ({worst.name}); {sum(r.inside for r in scored)} of {len(scored)} inside "
            "their band. "
            f"Calibration points ({len(rs) - len(scored)}) are named in the first column and left out."
        )
    if worst is not None and others:
        second = max(others, key=lambda r: abs(r.error))
        lines.append(
            f"Largest but one: {abs(second.error):.1%} ({second.name}). "
            f"Points within 10%: {sum(abs(r.error) <= 0.10 for r in scored)} of {len(scored)}; "
            f"within 25%: {sum(abs(r.error) <= 0.25 for r in scored)} of {len(scored)}."
        )
    return "\n".join(lines)


def _domain_cell(r: Row) -> str:
    if r.level is None:
        return "parameters' band"
    return f"{domain.LEVELS[r.level]} +-{r.width:.1%}"


def recalibrate(text: str) -> tuple[str, dict[str, float]]:
    """data/forecast.yaml's `text` with the derived parameters recomputed from data/breakdowns.yaml, and those
    parameters (scripts/forecast_docs.py reads and writes the file)."""
    measured, table_ = tables.shipped().breakdowns, tables.shipped().forecast
    derived = calibrate.derive(breakdown_setups(measured), measured, calibrate.fixed(table_))
    return calibrate.rewrite(text, derived), derived


def as_json(rs: list[Row], rungs: list[tuple[str, float, bool]], ordered: bool) -> dict[str, Any]:
    """`moekit plan --validate --format json`: every point, the ladder, the median |error| and the largest."""
    med, worst = stats(rs)
    return {
        "points": [
            {
                "name": r.name,
                "kind": r.kind,
                "unit": r.unit,
                "measured": r.measured,
                "forecast": r.forecast,
                "low": r.low,
                "high": r.high,
                "error": r.error,
                "calibration": r.calibration,
                "domain": None if r.level is None else domain.LEVELS[r.level],
                "band_width": r.width,
                "inside": r.inside,
                "source": r.source,
                "note": r.note,
            }
            for r in rs
        ],
        "ladder": [{"experiment": n, "tflops_per_device": t, "fits": fits} for n, t, fits in rungs],
        "ladder_ordered": ordered,
        "median_abs_error": med,
        "largest": None if worst is None else {"name": worst.name, "error": worst.error},
        "band_widths": domain.widths(residuals(rs)),
    }


def report(fmt: str) -> str:
    """`moekit plan --validate`: every point's forecast as the table (text) or JSON."""
    rs = rows()
    rungs, ordered = ladder()
    if fmt == "json":
        return json.dumps(as_json(rs, rungs, ordered), indent=2)
    return table(rs, rungs, ordered)
