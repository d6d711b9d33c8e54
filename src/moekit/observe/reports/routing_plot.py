"""The routing load over steps (plots.py's ROUTING_PNG): each MoE layer's busiest expert over the mean expert at
the sampled steps, one panel per run (observe/runs/routing.py reads the records)."""

from __future__ import annotations

from typing import Any

from moekit.observe.runs import routing
from moekit.observe.runs.rundata import Run

MAX_LINES = 12  # layers drawn one line each per panel; a deeper model draws its median and max over layers


def recorded(r: Run) -> bool:
    """Whether the run recorded its routing load (the summary's routing section)."""
    return bool(r.summary.get(routing.KEY)) or bool(_records(r))


def _records(r: Run) -> dict[int, dict[str, Any]]:
    records: dict[int, dict[str, Any]] = {}
    attempts = r.path / "attempts"
    folders = (
        sorted((p for p in attempts.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        if attempts.is_dir()
        else []
    )
    for folder in [*folders, r.path]:
        records |= routing.read(folder / routing.FILE)
    return dict(sorted(records.items()))


def panel(ax: Any, name: str, r: Run) -> None:
    """One run's panel: max/mean tokens per expert of each MoE layer over the sampled steps (1.0: balanced), and
    with EP > 1 the busiest rank over the mean rank, dashed."""
    lines = list(routing.series(_records(r)).items())
    if len(lines) > MAX_LINES:  # the spread over layers instead of one line each
        steps = sorted({s for _, pts in lines for s, _ in pts})
        vals = {
            s: [v for _, pts in lines for t, ld in pts if t == s and (v := ld["max_over_mean"]) is not None]
            for s in steps
        }
        ax.plot(steps, [sorted(v)[len(v) // 2] if v else None for v in vals.values()], marker="o", label="median layer")
        ax.plot(steps, [max(v) if v else None for v in vals.values()], marker="^", label="busiest layer")
    else:
        for layer, pts in lines:
            ax.plot([s for s, _ in pts], [ld["max_over_mean"] for _, ld in pts], marker="o", ms=3, label=layer)
            ranks = [(s, ld["rank_max_over_mean"]) for s, ld in pts if ld["rank_max_over_mean"] is not None]
            if ranks:
                ax.plot([s for s, _ in ranks], [v for _, v in ranks], ls="--", lw=1, label=f"{layer} (EP ranks)")
    ax.axhline(1.0, color="gray", lw=0.8, ls=":")
    ax.set(xlabel="step", ylabel="max / mean tokens per expert", title=f"Routing load: {name}")
    ax.grid(alpha=0.3)
