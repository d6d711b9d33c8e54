"""`moekit report RUN_DIR [RUN_DIR ...]`: summary and comparison tables, reference numbers, plots."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import moekit
from moekit import rundir
from moekit.observe import plots, published, rundata
from moekit.observe import report as rep

HELP = "report on run directories: steady-state table, speed-ups, published numbers, plots"
REPORT = "report.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories; the first is the baseline")
    p.add_argument(
        "--out", type=Path, help="folder for report.md and plots (default: the run directory, or the runs' parent)"
    )


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
    for name, r in zip(names, runs, strict=True):
        if r.metrics.truncated_tail:
            shown += f"\nnote: {name}: truncated last line of {r.metrics.path} skipped"
    return path, shown, pngs


def run(args: argparse.Namespace) -> int:
    path, shown, pngs = write_report(args.runs, args.out)
    print(shown)
    print(f"moekit: wrote {path} and {', '.join(pngs)}")
    return 0
