"""The forecast against every number the repository holds: the validation table of docs/plan.md.

`moekit plan --validate` composes each point of data/forecast_points.yaml, forecasts it with data/forecast.yaml,
and prints the table; `--write` also re-derives the calibrated parameters (plan/calibrate.py) into
data/forecast.yaml and replaces the table between the markers in docs/plan.md. Calibration points are shown but
left out of the error statistics.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit.base.errors import ConfigError
from moekit.plan import calibrate, tables
from moekit.plan.forecast import Forecast, efficiency, forecast, grown, params_from

BEGIN = "<!-- BEGIN forecast validation (moekit plan --validate --write) -->"
END = "<!-- END forecast validation -->"
DOC = Path(__file__).resolve().parents[3] / "docs" / "plan.md"
"""The page whose table `--write` replaces: present in a source checkout only."""


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


def _fc(overrides: list[str], params) -> tuple[Any, Forecast]:
    cfg, su = tables.compose_setup(overrides)
    return su, forecast(su, params)


def rows() -> list[Row]:
    """Every point of data/forecast_points.yaml with its forecast."""
    points = tables.data("forecast_points.yaml")
    params = params_from(tables.data("forecast.yaml"))
    out = []
    for p in points["measured"]:
        _, f = _fc(p["overrides"], params)
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
            )
        )
    for p in points["published"]:
        su, f = _fc(p["overrides"], params)
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
            )
        )
    return out


def ladder() -> tuple[list[tuple[str, float, bool]], bool]:
    """The ladder's rungs with their forecast TFLOP/s and whether they fit memory, and whether each rung beats the
    one before."""
    points = tables.data("forecast_points.yaml")["ladder"]
    params = params_from(tables.data("forecast.yaml"))
    rungs = []
    for name in points["experiments"]:
        su, f = _fc([f"experiment={name}"], params)
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
        "| point | measured / published | forecast [band] | error | in band | source |",
        "|---|---|---|---|---|---|",
    ]
    for r in rs:
        fmt = ".1%" if r.unit == "efficiency" else (".3f" if r.unit == "s/step" else ".0f")
        name = r.name + (f" (calibration: {r.calibration})" if r.calibration else "")
        note = f"; {r.note}" if r.note else ""
        lines.append(
            f"| {name} | {format(r.measured, fmt)} {r.unit} | {format(r.forecast, fmt)} "
            f"[{format(r.low, fmt)}-{format(r.high, fmt)}] | {r.error:+.1%} | {'yes' if r.inside else 'no'} | "
            f"{r.source}{note} |"
        )
    rung_text = " -> ".join(
        f"{n.removeprefix('dsv3_ladder_')} {t:.0f}" + ("" if fits else " (does not fit memory)") for n, t, fits in rungs
    )
    runs = tables.data("forecast_points.yaml")["runs"]
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


def section() -> str:
    """The whole generated section, markers included."""
    rs = rows()
    rungs, ordered = ladder()
    return f"{BEGIN}\n{table(rs, rungs, ordered)}\n{END}"


def replace_section(doc: str, text: str) -> str:
    """`doc` with the text between the markers replaced by `text` (markers included); appended when absent."""
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        return head + text + rest.split(END, 1)[1]
    return doc.rstrip("\n") + "\n\n" + text + "\n"


def recalibrate() -> tuple[str, dict[str, float]]:
    """data/forecast.yaml's text with the derived parameters recomputed from data/breakdowns.yaml."""
    measured = tables.data("breakdowns.yaml")
    setups = tables.breakdown_setups(measured)
    table_ = tables.data("forecast.yaml")
    derived = calibrate.derive(setups, measured, calibrate.fixed(table_))
    return calibrate.rewrite((tables.DATA / "forecast.yaml").read_text(), derived), derived


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
                "source": r.source,
                "note": r.note,
            }
            for r in rs
        ],
        "ladder": [{"experiment": n, "tflops_per_device": t, "fits": fits} for n, t, fits in rungs],
        "ladder_ordered": ordered,
        "median_abs_error": med,
        "largest": None if worst is None else {"name": worst.name, "error": worst.error},
    }


def report(write: bool, fmt: str) -> str:
    """`moekit plan --validate`: every point's forecast as the table (text) or JSON. With `write`, first the
    calibrated parameters re-derived into data/forecast.yaml, then (text) the table written into docs/plan.md."""
    if write:
        if not DOC.is_file():
            raise ConfigError(f"--write rewrites {DOC}, which this installation does not have (a source checkout does)")
        text, _ = recalibrate()
        (tables.DATA / "forecast.yaml").write_text(text)
        tables.data.cache_clear()
    rs = rows()
    rungs, ordered = ladder()
    if fmt == "json":
        return json.dumps(as_json(rs, rungs, ordered), indent=2)
    text = f"{BEGIN}\n{table(rs, rungs, ordered)}\n{END}"
    if not write:
        return text
    DOC.write_text(replace_section(DOC.read_text(), text))
    return f"{text}\nmoekit: wrote {DOC} and {tables.DATA / 'forecast.yaml'}"
