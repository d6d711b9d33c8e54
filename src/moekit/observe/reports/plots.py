"""PNG plots of one or more runs (matplotlib's Agg backend: no display needed): one row of PLOTS per chart.

Adding a plot (docs/extending.md): its drawing function and its row in PLOTS, and its line in docs/metrics.md
(tests/test_plots.py ties them); report.md embeds every plot written.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.observe.profiles.profile_rules import BUCKETS
from moekit.observe.reports import routing_plot
from moekit.observe.runs import summary
from moekit.observe.runs.metrics import series
from moekit.observe.runs.rundata import Run

STEP_TIME_PNG = "step_time.png"
TFLOPS_PNG = "tflops.png"
LOSS_PNG = "loss.png"
BREAKDOWN_PNG = "breakdown.png"
ROUTING_PNG = "routing.png"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _caption(runs: Sequence[Run]) -> str:
    hw = sorted({f"{r.hardware.get('name', '?')} x{r.devices}" for r in runs})
    dates = sorted({r.date for r in runs})
    return f"measured: {', '.join(hw)}; {', '.join(dates)}"


def _save(plt, fig, runs: Sequence[Run], path: Path) -> None:
    """Every chart: the runs' provenance as a caption, then written and closed."""
    fig.text(0.01, 0.01, _caption(runs), fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    # Into a new file renamed over `path`: a symbolic link planted at `path` is replaced, never followed.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, dpi=110, format="png")
        os.chmod(tmp, 0o666 & ~rundir.umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)


LABEL_WIDTH = 24  # characters per line of a bar's label: a long run name wraps instead of running past its bar


def _wrapped(name: str) -> str:
    """A label on lines of at most LABEL_WIDTH characters (long words cut too: a run name has no spaces)."""
    return textwrap.fill(name, LABEL_WIDTH, break_long_words=True) if len(name) > LABEL_WIDTH else name


def _legend_outside(ax) -> None:
    """The legend right of the axes, where it covers no data (tight_layout makes room for it)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:  # labels wrapped: a long run name would leave the axes no width
        ax.legend(handles, [_wrapped(n) for n in labels], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _excluded(r: Run) -> set[int]:
    """The steps the summary's medians do not count."""
    counted = set(r.summary.get("counted_steps", []))
    return {int(row["step"]) for row in r.metrics.rows} - counted


def _step_time(plt, runs: Sequence[Run], names: Sequence[str], path: Path) -> None:
    """Step time per step, one line per run: the steady median dotted, the steps it leaves out hollow."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, r in zip(names, runs, strict=True):
        pts = series(r.metrics, summary.STEP_TIME)
        line = ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", ms=3, label=name)[0]
        skipped = _excluded(r)
        if skipped:  # hollow markers: steps left out of the median (compilation, checkpoint saves, ...)
            left = [(s, v) for s, v in pts if s in skipped]
            ax.plot([s for s, _ in left], [v for _, v in left], "o", mfc="white", color=line.get_color())
        if r.summary.get("step_time_s"):  # none when too few steps are steady
            ax.axhline(r.summary["step_time_s"]["median"], color=line.get_color(), ls=":", lw=1)
    title = "Step time per step (dotted: steady median; hollow: left out, see report notes)"
    ax.set(xlabel="step", ylabel="step time (s)", title=title)
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    _save(plt, fig, runs, path)


def _tflops(plt, runs: Sequence[Run], names: Sequence[str], path: Path) -> None:
    """TFLOP/s per device, one bar per run: the steady rate, its counted steps' min-max as the error bar."""
    fig, ax = plt.subplots(figsize=(max(6.4, 1.6 * len(runs) + 3), 4.5))
    meds = [r.summary["tflops_per_device"] or 0.0 for r in runs]
    spans = []
    for r in runs:
        left_out = _excluded(r)  # once per run: inside the comprehension it cost a pass over every step per step
        counted = [v for s, v in series(r.metrics, summary.TFLOPS) if s not in left_out]
        vals = counted if r.summary["tflops_per_device"] is not None and counted else [0.0]
        spans.append((max(0.0, min(vals)), max(vals)))
    err = [  # the rate is over windows' wall time, so it may lie outside the single steps' range
        [max(m - lo, 0.0) for m, (lo, _) in zip(meds, spans, strict=True)],
        [max(hi - m, 0.0) for m, (_, hi) in zip(meds, spans, strict=True)],
    ]
    bars = ax.bar(range(len(runs)), meds, yerr=err, capsize=4, color=[f"C{i}" for i in range(len(runs))])
    shown = [r.summary["tflops_per_device"] for r in runs]
    ax.bar_label(bars, labels=["n/a" if m is None else f"{m:.4g}" for m in shown], padding=3, fontsize=8)
    ax.set_xticks(range(len(runs)), [_wrapped(n) for n in names], rotation=15 if len(runs) > 3 else 0, fontsize=8)
    ax.set(ylabel="TFLOP/s per device (MaxText's count)", title="Throughput: steady-state rate (bars: steps' min-max)")
    ax.grid(axis="y", alpha=0.3)
    _save(plt, fig, runs, path)


def _loss(plt, runs: Sequence[Run], names: Sequence[str], path: Path) -> None:
    """Training loss per step, one line per run; coinciding curves (equivalent runs) stay visible."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, r) in enumerate(zip(names, runs, strict=True)):
        pts = series(r.metrics, summary.LOSS)
        # Curves that coincide (equivalent runs) stay visible: later ones dashed and thinner.
        ax.plot(
            [s for s, _ in pts],
            [v for _, v in pts],
            ls="-" if i == 0 else "--",
            lw=2.5 if i == 0 else 1.5,
            marker="o",
            ms=3,
            label=name,
        )
    ax.set(xlabel="step", ylabel="training loss", title="Loss curves")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    _save(plt, fig, runs, path)


def _breakdown(plt, runs: Sequence[Run], names: Sequence[str], path: Path) -> None:
    """Stacked bars: ms per traced step in each bucket, one bar per profiled run; idle hatched."""
    from moekit.observe.reports.report import breakdown_columns

    cols = breakdown_columns(runs)
    colors = {b: plt.get_cmap("tab20")(i) for i, (b, _, _) in enumerate(BUCKETS)}  # one color per bucket, every chart
    fig, ax = plt.subplots(figsize=(max(6.4, 1.6 * len(runs) + 4.5), 5.5))
    bottoms = [0.0] * len(runs)
    for bucket, label in cols:
        heights = [
            (r.profile["mean"]["idle_s"] if bucket == "idle" else r.profile["mean"]["buckets_s"].get(bucket, 0.0)) * 1e3
            for r in runs
        ]
        idle = {"color": "white", "hatch": "//", "edgecolor": "gray"}
        style = idle if bucket == "idle" else {"color": colors[bucket]}
        ax.bar(range(len(runs)), heights, bottom=bottoms, label=label, width=0.6, **style)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_xticks(range(len(runs)), [textwrap.fill(n, 28, break_long_words=False) for n in names], fontsize=7)
    ax.set(ylabel="ms per traced step (mean over devices)", title="Where the step time goes (profile=on)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(plt, fig, runs, path)


def _routing(plt, runs: Sequence[Run], names: Sequence[str], path: Path) -> None:
    """The routing load over steps, one panel per run that recorded it: each MoE layer's busiest expert over the
    mean expert at the sampled steps (observe/reports/routing_plot.py)."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 3.2 * len(runs)), squeeze=False)
    for ax, name, r in zip(axes[:, 0], names, runs, strict=True):
        routing_plot.panel(ax, name, r)
        _legend_outside(ax)
    _save(plt, fig, runs, path)


def _profiled(r: Run) -> bool:
    return bool((r.profile or {}).get("mean"))


@dataclass(frozen=True, slots=True)
class Plot:
    """One chart of a report: its file, what it shows, how it is drawn and which runs it draws."""

    file: str
    """File name beside report.md (docs/metrics.md names each)."""
    shows: str
    """What it shows, in a few words."""
    draw: Callable[[Any, Sequence[Run], Sequence[str], Path], None]
    """(pyplot, runs, their names, path) -> the PNG written at path."""
    draws: Callable[[Run], bool] | None = None
    """Which runs it draws (None: every run); a plot with none to draw is not written."""


# The report's charts, in the order report.md shows them. One row per plot.
PLOTS: tuple[Plot, ...] = (
    Plot(STEP_TIME_PNG, "step time per step, steady median and left-out steps", _step_time),
    Plot(TFLOPS_PNG, "steady TFLOP/s per device per run, min-max bars", _tflops),
    Plot(LOSS_PNG, "training loss per step", _loss),
    Plot(BREAKDOWN_PNG, "where the step time goes, per profiled run (profile=on)", _breakdown, _profiled),
    Plot(
        ROUTING_PNG,
        "routing load: busiest expert over the mean, per MoE layer, at sampled steps",
        _routing,
        routing_plot.recorded,
    ),
)


def write(runs: Sequence[Run], names: Sequence[str], out: Path) -> list[str]:
    """Write into `out` every plot of PLOTS that has runs to draw; returns their file names, in PLOTS order."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in PLOTS:
        chosen = [(n, r) for n, r in zip(names, runs, strict=True) if plot.draws is None or plot.draws(r)]
        if chosen:
            plot.draw(plt, [r for _, r in chosen], [n for n, _ in chosen], out / plot.file)
            written.append(plot.file)
    return written
