"""The fabric check's table in `moekit report`: each collective's measured bus bandwidth next to the rate
`moekit plan` assumes for its link class (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from moekit.translate.fabric_verdict import size_text


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def rows(name: str, record: dict[str, Any]) -> list[list[str]]:
    """One row per collective and size of one run's fabric.json."""
    names = record.get("link_names", {})
    out = []
    for r in record.get("results", []):
        wrong = sum(1 for p in r.get("per_rank", []) if not p.get("correct"))
        out.append(
            [
                name,
                r["collective"],
                size_text(r["size_bytes"]),
                f"{r['groups']} x {r['group_size']}",
                names.get(r.get("link_class"), r.get("link_class") or "-"),
                _num(None if r.get("time_s") is None else r["time_s"] * 1e3, ".3g"),
                _num(r.get("gb_per_s"), ".3g"),
                _num(r.get("expected_gb_per_s"), "g"),
                "-" if r.get("ratio") is None else f"{r['ratio']:.0%}",
                "all ranks" if not wrong else f"WRONG on {wrong} rank(s)",
            ]
        )
    return out


def section(runs: Sequence[Any], names: Sequence[str], table) -> list[str]:
    """The heading, explanation and table; empty when no run has a fabric.json with results. `table` is the
    report's markdown table writer."""
    found = [(n, r.fabric) for n, r in zip(names, runs, strict=True) if getattr(r, "fabric", None)]
    body = [row for n, rec in found for row in rows(n, rec)]
    if not body:
        return []
    problems = [f"{n}: {p['what']}" for n, rec in found for p in rec.get("problems", [])]
    header = [
        "run", "collective", "size", "groups x ranks", "link", "ms", "bus GB/s", "plan assumes GB/s", "ratio",
        "correct",
    ]  # fmt: skip
    return [
        "## Fabric check (measured before training: fabric.json)",
        "",
        "Bus bandwidth (nccl-tests' convention) of the slowest group of each collective, next to the per-GPU rate "
        "`moekit plan` assumes for its link class (src/moekit/data/links.yaml; none on CPU). A ratio well under "
        "100% at the largest size means plan's communication estimate is optimistic for this fabric.",
        "",
        table(header, body),
        "",
        *([f"Problems: {'; '.join(problems)}", ""] if problems else []),
    ]
