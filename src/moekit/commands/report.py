"""`moekit report RUN_DIR [RUN_DIR ...]`: summary and comparison tables, reference numbers, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from moekit.observe.report_file import write_report

HELP = "report on run directories: steady-state table, speed-ups, published numbers, plots"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run directories (the first is the baseline) and --out."""
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories; the first is the baseline")
    p.add_argument(
        "--out", type=Path, help="folder for report.md and plots (default: the run directory, or the runs' parent)"
    )


def run(args: argparse.Namespace) -> int:
    """Write report.md and its plots, print the summary tables; returns 0."""
    path, shown, pngs = write_report(args.runs, args.out)
    print(shown)
    print(f"moekit: wrote {path} and {', '.join(pngs)}")
    return 0
