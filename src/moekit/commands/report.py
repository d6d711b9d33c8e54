"""`moekit report RUN_DIR [RUN_DIR ...]`: summary and comparison tables, reference numbers, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from moekit.base.errors import MoekitError
from moekit.observe.reports.report_file import write_report
from moekit.observe.runs import progress

LONG_BYTES = 10_000_000  # metrics beyond this (about 10,000 steps) take seconds to read and plot: progress is shown


def _sweep_members(folder: Path) -> list[str]:
    """The run directories directly inside a sweep folder (numbered, each with a manifest); [] for a run."""
    if not folder.is_dir() or (folder / "manifest.json").is_file():
        return []
    return sorted(
        (p.name for p in folder.iterdir() if p.is_dir() and (p / "manifest.json").is_file()),
        key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n),
    )


HELP = "report on run directories: steady-state table, speed-ups, published numbers, plots"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run directories (the first is the baseline) and --out."""
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories; the first is the baseline")
    p.add_argument(
        "--out",
        type=Path,
        help="folder for report.md and plots (default: the run directory, or the folder holding several runs side by "
        "side, as a sweep's; runs in different folders need --out)",
    )


def run(args: argparse.Namespace) -> int:
    """Write report.md and its plots, print the summary tables; returns 0."""
    for run_dir in args.runs:
        if sweep := _sweep_members(run_dir):
            raise MoekitError(
                f"{run_dir} is a sweep folder, not one run; its runs are {', '.join(sweep[:6])}"
                f"{' ...' if len(sweep) > 6 else ''}.\n  fix: moekit report {' '.join(str(run_dir / m) for m in sweep)}"
                " (or its report.md, written when the sweep ended)"
            )
    size = sum(f.stat().st_size for r in args.runs for f in r.glob("metrics*.jsonl") if f.is_file())
    phase = progress.Phases() if size > LONG_BYTES else None  # long work says what it is doing
    try:
        path, shown, pngs = write_report(args.runs, args.out, phase)
    except OSError as exc:
        if exc.filename is None:
            raise
        raise MoekitError(
            f"cannot write {exc.filename} ({exc.strerror}); the run directories are unchanged.\n"
            "  fix: give a folder you can write to: moekit report ... --out /tmp/report"
        ) from None
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:  # records that parse but are foreign
        raise MoekitError(
            f"the records of {' '.join(map(str, args.runs))} are corrupt or not moekit's ({type(exc).__name__}: "
            f"{exc}).\n  fix: report on directories made by `moekit train`"
        ) from None
    print(shown)
    print(f"moekit: wrote {path}" + (f" and {', '.join(pngs)}" if pngs else ""))
    return 0
