"""Measured against forecast for `moekit report`: each run's forecast beside its measurement, and with profile=on the
difference per op class (pure: a run's recorded config, summary and profile in, tables out).

The forecast is `moekit plan`'s (plan.forecast) for the configuration the run recorded (config.yaml). The classes
of a traced breakdown (docs/profiling.md) map onto the forecast's parts as CLASSES says; a part with no traced
counterpart (recompute runs inside the classes; imbalance and synchronisation need several devices) is compared
as a whole with nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from moekit.base.errors import ConfigError
from moekit.config.compose import config_dir
from moekit.config.kinds import hardware
from moekit.config.schema import Config
from moekit.observe.reports import comparable
from moekit.plan import calibrate, tables
from moekit.plan.forecast import Forecast, forecast, params_from

# forecast part -> the profile buckets (observe/profiles/profile_rules.py) that measure it
CLASSES: dict[str, tuple[str, ...]] = {
    "grouped GEMM": ("grouped_gemm",),
    "other GEMMs": ("other_gemm",),
    "attention": ("attention",),
    "other compute": (
        "dispatch", "combine", "mlp_act", "norm", "embed_loss", "optimizer", "other", "host_copy", "idle",
    ),
    "EP dispatch + combine": ("all_to_all", "nccl_ep"),
    "FSDP/DP collectives (exposed)": ("all_gather", "reduce_scatter", "all_reduce", "collective_permute"),
    "host offload (exposed)": ("offload",),
}  # fmt: skip


def run_forecast(config: Mapping[str, Any]) -> tuple[Forecast | None, str]:
    """The forecast of a run's recorded config, or None and why there is none."""
    recorded = dict(config.get("hardware") or {})
    try:  # a run recorded before its row held every fact takes the missing ones from today's row
        row = hardware.row(str(recorded.get("name", "")), config_dir())
        cfg = Config.model_validate(dict(config) | {"hardware": {**row, **recorded}})
    except (ValueError, ConfigError) as exc:
        return None, f"its config.yaml does not validate ({type(exc).__name__})"
    if cfg.hardware.platform != "gpu":
        return None, f"no forecast for hardware={cfg.hardware.name}"
    try:
        shipped = tables.shipped()
        su = calibrate.setup_of(cfg, shipped)
    except (ValueError, KeyError) as exc:
        return None, str(exc)
    return forecast(su, params_from(shipped.forecast)), ""


def _row(name: str, summary: Mapping[str, Any], f: Forecast | None, why: str) -> list[str]:
    steps = summary.get("step_time_s") or {}
    st = steps.get("per_window") or steps.get("median")  # the windows' time per step: the rates' own
    tf = summary.get("tflops_per_device")
    if f is None:
        return [name, f"{st:.4f}" if st else "n/a", f"n/a ({why})", "-", "-", "-"]
    d = f.to_dict()
    err = error(st, f, comparable.Measured.of(summary, None).noise) if st else "n/a (too few steady steps)"
    return [
        name,
        f"{st:.4f}" if st else "n/a",
        f"{f.step_s:.4f} [{f.step_low_s:.4f}-{f.step_high_s:.4f}]",
        f"{tf:.4g}" if tf else "n/a",
        f"{d['tflops_per_device']:.4g} [{d['low']:.4g}-{d['high']:.4g}]",
        err,
    ]


def error(step_s: float, f: Forecast, noise: float | None) -> str:
    """Measured step time over forecast - 1, with where it lies: inside or outside the forecast's band, and "within
    noise" when the run's own noise (comparable.Measured.noise: its steady steps' spread) is as large as the error,
    so that no difference the host produced alone reads as the forecast's."""
    e = step_s / f.step_s - 1
    where = "inside the band" if f.step_low_s <= step_s <= f.step_high_s else "outside the band"
    if noise is not None and abs(e) <= noise:
        return f"{e:+.1%} (within noise ±{comparable.percent(noise)}; {where})"
    return f"{e:+.1%} ({where})"


def attribution(f: Forecast, mean: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(class, forecast s, measured s) per class of a traced step (the profile's mean over devices)."""
    buckets = dict(mean.get("buckets_s", {})) | {"idle": mean.get("idle_s", 0.0)}
    parts = {p.name: p.seconds for p in f.parts}
    out = [(c, parts.get(c, 0.0), sum(buckets.get(b, 0.0) for b in bs)) for c, bs in CLASSES.items()]
    rest = sum(s for n, s in parts.items() if n not in CLASSES)
    out.append(("not traced (recompute, imbalance, synchronisation, contention)", rest, 0.0))
    return [r for r in out if r[1] or r[2]]


def section(runs: Sequence[Any], names: Sequence[str], table) -> list[str]:
    """The report's "Measured vs forecast" heading, table and (profiled runs) the per-class difference. `runs`:
    observe.runs.rundata.Run; `table`: the report's markdown table function."""
    rows, diffs = [], []
    for name, r in zip(names, runs, strict=True):
        f, why = run_forecast(r.config)
        rows.append(_row(name, r.summary, f, why))
        mean = (r.profile or {}).get("mean")
        if f is not None and mean and mean.get("window_s"):
            for cls, fs, ms in attribution(f, mean):
                diffs.append([name, cls, f"{fs * 1e3:.4g}", f"{ms * 1e3:.4g}", f"{(ms - fs) * 1e3:+.4g}"])
    header = ["run", "measured s/step", "forecast s/step [band]", "measured TFLOP/s", "forecast TFLOP/s [band]"]
    out = [
        "## Measured vs forecast",
        "",
        'Forecast: `moekit plan`\'s for the configuration each run recorded (docs/plan.md, "Forecast"; built from '
        "measured one-GPU parts, its validation table there). Measured: the steady windows' wall time per step, the "
        "one TFLOP/s and tokens/s are computed from. Error: measured step time over forecast - 1 (positive: the run "
        "was slower than forecast), inside or outside the forecast's band, and \"within noise\" where the run's "
        'own steady steps spread as far (docs/metrics.md, "Comparing runs").',
        "",
        table([*header, "error"], rows),
        "",
    ]
    if diffs:
        out += [
            "Difference per op class (profiled runs: the traced step's buckets, mean over devices, against the "
            "forecast's parts; positive: measured longer):",
            "",
            table(["run", "class", "forecast ms", "measured ms", "measured - forecast ms"], diffs),
            "",
        ]
    return out
