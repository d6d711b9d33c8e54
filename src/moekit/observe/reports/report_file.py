"""Write the report of run directories: report.md (tables, reference numbers) and its plots (effect: files)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import moekit
from moekit import rundir
from moekit.observe.reports import fabric_report, plots, published
from moekit.observe.reports import report as rep
from moekit.observe.runs import rundata, summary

REPORT = "report.md"


def default_out(runs: Sequence[Path]) -> Path:
    """One run: its own directory. Several: the folder that holds them all (a sweep's folder)."""
    if len(runs) == 1:
        return runs[0]
    return Path(os.path.commonpath([str(p.resolve()) for p in runs]))


def write_report(run_dirs: Sequence[Path], out: Path | None = None) -> tuple[Path, str, list[str]]:
    """Load, render and write; returns the report's path, the tables to print and the plots written."""
    runs = [rundata.load(p) for p in run_dirs]  # every error surfaces before anything is written
    out = out or default_out(run_dirs)
    names = rep.labels(runs)
    pngs = plots.write(runs, names, out)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = rep.markdown(runs, published.load(), pngs, f"Generated {now} by moekit {moekit.__version__}")
    path = out / REPORT
    rundir.write_atomic(path, text)
    shown = rep.runs_table(runs, names)
    if len(runs) > 1:
        shown += "\n\n" + rep.comparison_table(runs, names)
    if any(r.profile for r in runs):
        profiled = [(n, r) for n, r in zip(names, runs, strict=True) if r.profile]
        shown += "\n\n" + rep.breakdown_table([r for _, r in profiled], [n for n, _ in profiled])
    if fabric := fabric_report.section(runs, names, rep.table):
        shown += "\n\n" + fabric[4]  # the table alone
    for name, r in zip(names, runs, strict=True):
        shown += f"\n{name}: left out {summary.excluded_text(r.summary)}"
        if r.summary.get("note"):
            shown += f"\n{name}: {r.summary['note']}"
        if r.metrics.truncated_tail:
            shown += f"\nnote: {name}: truncated last line of {r.metrics.path} skipped"
    return path, shown, pngs
