"""Write the report of run directories: report.md (tables, reference numbers) and its plots (effect: files)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import moekit
from moekit import rundir
from moekit.observe.reports import fabric_report, plots, published, versus
from moekit.observe.reports import report as rep
from moekit.observe.runs import rundata, summary

REPORT = "report.md"


def default_out(runs: Sequence[Path]) -> Path:
    """One run: its own directory. Several side by side in one folder (a sweep's): that folder. Runs in different
    folders have no folder of their own in common (their common parent may be a home or /): --out is needed."""
    if len(runs) == 1:
        return runs[0]
    parents = {p.resolve().parent for p in runs}
    if len(parents) == 1:
        return parents.pop()
    from moekit.base.errors import MoekitError

    raise MoekitError(
        f"the {len(runs)} runs lie in different folders ({', '.join(sorted(map(str, parents))[:3])}); a report of "
        "them belongs to none of them.\n"
        f"  fix: choose where it goes: moekit report ... --out {runs[0].resolve().parent / 'report'}"
    )


def write_report(
    run_dirs: Sequence[Path], out: Path | None = None, phase: Callable[[str], None] | None = None
) -> tuple[Path, str, list[str]]:
    """Load, render and write; returns the report's path, the tables to print and the plots written. `phase` hears
    each stage of long work (a progress line per run loaded, then the plots)."""
    out = out or default_out(run_dirs)
    checks = {p: fab for p in run_dirs if (fab := rundata.fabric_only(p)) is not None}
    if checks:
        return _fabric_report(run_dirs, checks, out)
    runs = []
    for i, p in enumerate(run_dirs, 1):  # every error surfaces before anything is written
        if phase:
            size = sum(f.stat().st_size for f in p.glob("metrics*.jsonl") if f.is_file()) / 1e6
            phase(f"reading run {i} of {len(run_dirs)} ({size:.1f} MB of metrics): {p}")
        runs.append(rundata.load(p))
    names = rep.labels(runs)
    if phase:
        phase(f"plotting {sum(len(r.metrics.rows) for r in runs):,} steps into {out}")
    pngs = plots.write(runs, names, out)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = rep.markdown(runs, published.load(), pngs, f"Generated {now} by moekit {moekit.__version__}")
    forecast = versus.section(runs, names, rep.table)  # each run's forecast beside its measurement
    if forecast:
        at = text.find("## Notes")
        at = at if at >= 0 else len(text)
        text = text[:at] + "\n".join(forecast) + "\n\n" + text[at:]
    path = out / REPORT
    rundir.write_atomic(path, text)
    shown = rep.runs_table(runs, names)
    if len(runs) > 1:
        shown += "\n\n" + rep.comparison_table(runs, names)
    if any(r.profile for r in runs):
        profiled = [(n, r) for n, r in zip(names, runs, strict=True) if r.profile]
        shown += "\n\n" + rep.breakdown_table([r for _, r in profiled], [n for n, _ in profiled])
    if forecast:
        shown += "\n\n" + "\n".join(forecast[4:])
    if fabric := fabric_report.section(runs, names, rep.table):
        shown += "\n\n" + fabric[4]  # the table alone
    for name, r in zip(names, runs, strict=True):
        shown += f"\n{name}: left out {summary.excluded_text(r.summary)}"
        if r.summary.get("note"):
            shown += f"\n{name}: {r.summary['note']}"
        if r.metrics.truncated_tail:
            shown += f"\nnote: {name}: truncated last line of {r.metrics.path} skipped"
    return path, shown, pngs


def _fabric_report(run_dirs: Sequence[Path], checks: dict[Path, dict], out: Path) -> tuple[Path, str, list[str]]:
    """The report of fabric-only run directories (`moekit fabric`): the fabric table alone, no plots."""
    from types import SimpleNamespace

    from moekit.base.errors import MoekitError

    if len(checks) != len(run_dirs):
        trained = [str(p) for p in run_dirs if p not in checks]
        raise MoekitError(
            f"{', '.join(map(str, checks))} hold(s) only a fabric check (no training), {', '.join(trained)} trained; "
            "a report compares one kind.\n  fix: report them apart: moekit report <the fabric checks>, and "
            "moekit report <the trained runs> (a trained run's report has its own fabric table)"
        )
    names = [p.name for p in run_dirs]
    runs = [SimpleNamespace(fabric=checks[p]) for p in run_dirs]
    section = fabric_report.section(runs, names, rep.table)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    listed = [f"- {n}: `{p}`" for n, p in zip(names, run_dirs, strict=True)]
    body = section or ["No collective was checked (one device, or the check stopped before any result)."]
    stopped = [f"{n}: the check stopped: {'; '.join(p['what'] for p in checks[d].get('problems', []))}"
               for n, d in zip(names, run_dirs, strict=True) if checks[d].get("stopped")]  # fmt: skip
    text = "\n".join(
        ["# moekit report: fabric check", "", f"Generated {now} by moekit {moekit.__version__}; fabric-only run "
         "directories (`moekit fabric`: no training, so no steps to report):", "", *listed, "", *body, *stopped, ""]
    )  # fmt: skip
    path = out / REPORT
    out.mkdir(parents=True, exist_ok=True)
    rundir.write_atomic(path, text)
    shown = section[4] if section else body[0]
    return path, "\n".join([shown, *stopped]), []
