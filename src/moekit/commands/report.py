"""`moekit report RUN_DIR [RUN_DIR ...]`: summary and comparison tables, reference numbers, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from moekit.base.errors import MoekitError
from moekit.observe.report_file import write_report


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
        "--out", type=Path, help="folder for report.md and plots (default: the run directory, or the runs' parent)"
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
    try:
        path, shown, pngs = write_report(args.runs, args.out)
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
    forecast = _forecast_section(args.runs, path)
    print(shown + ("\n\n" + "\n".join(forecast[4:]) if forecast else ""))
    print(f"moekit: wrote {path} and {', '.join(pngs)}")
    return 0


def _forecast_section(run_dirs: list[Path], path: Path) -> list[str]:
    """Each run's forecast beside its measurement (plan.versus), added to report.md before its notes."""
    from moekit.observe import rundata
    from moekit.observe.report import labels, table
    from moekit.plan import versus

    runs = [rundata.load(p) for p in run_dirs]
    lines = versus.section(runs, labels(runs), table)
    text = path.read_text()
    at = text.find("## Notes")
    text = text[:at] + "\n".join(lines) + "\n" + text[at:] if at >= 0 else text + "\n" + "\n".join(lines) + "\n"
    path.write_text(text)
    return lines
