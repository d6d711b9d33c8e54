"""What `moekit tune` prints about its runs (pure): the markdown table and the runs that did not finish."""

from __future__ import annotations

from typing import Any

from moekit.base.figures import significant
from moekit.series import tuning

SAME = "candidate (same as reference)"  # commands/tune.py's role of a candidate that is its reference


def _why(r: dict[str, Any]) -> str:
    """A failed run's class, e.g. 'configuration error' (the table); format_failures gives the evidence."""
    f = r.get("failure")
    return f["title"] if f else "-"


def format_failures(runs: list[dict[str, Any]]) -> str:
    """Each run that did not finish: its class, the evidence it was read from, where to read more."""
    failed = [r for r in runs if r.get("failure") and r["role"] != SAME]
    if not failed:
        return "moekit tune: every run finished"
    lines = ["moekit tune: runs that did not finish:"]
    for r in failed:
        f = r["failure"]
        lines.append(f"  {tuning.label(r['overrides'])}: {f['title']} ({f['class']})")
        lines.append(f"    evidence: {f['evidence']}")
        where = " ".join(x for x in (f.get("help"), r["run_dir"]) if x)
        lines.append(f"    more: {where} (console: {r['console']})")
    return "\n".join(lines)


def format_table(runs: list[dict[str, Any]]) -> str:
    """Every run as a markdown table row: role, overrides, status, speed (figures with significant digits; a
    candidate's speed against its reference by observe.reports.comparable), memory and the loss check. A candidate
    that is its reference ran once and shows once, in the reference's row."""
    lines = [
        "| role | overrides | status | why | s/step | TFLOP/s/dev | tokens/s/dev | vs reference | peak GiB | check "
        "| accepted |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    # A candidate that is its reference (the same overrides) ran once: one row, the reference's, says both.
    same = {tuple(r.get("batch") or ()) for r in runs if r["role"] == SAME}
    for r in runs:
        if r["role"] == SAME:
            continue
        also = r["role"] == "reference" and tuple(r.get("batch") or ()) in same
        role = "reference (and candidate)" if also else r["role"]
        lines.append(
            f"| {role} | `{tuning.label(r['overrides'])}` | {r['status']} | {_why(r)} "
            f"| {significant(r.get('step_time_s'))} "
            f"| {significant(r.get('tflops_per_device'))} | {significant(r.get('tokens_per_s_per_device'))} "
            f"| {r.get('vs_reference', '-')} | {significant(r.get('peak_memory_gib'))} | {r.get('check', '-')} "
            f"| {'yes' if r.get('accepted') else 'no'} |"
        )
    return "\n".join(lines)
