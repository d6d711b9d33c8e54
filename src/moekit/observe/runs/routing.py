"""The routing load a run measured: routing.jsonl, written by each training process (worker/routing.py).

One JSON object per sampled step (every `run.routing_every` steps, from step 0):

    {"step": s, "t": ..., "ep": E_p, "layers": [name, ...], "counts": [[tokens of expert 0, 1, ...], ...]}

`counts` holds, for each MoE layer (named by its place in MaxText's model, in layer order), how many token
assignments each expert received in that step's global batch (tokens x experts_per_token in all). Process i writes
routing.jsonl (i = 0) or routing.<i>.jsonl beside its metrics; each attempt's file moves to attempts/<n>/ with
them. Under gradient accumulation a step has one record per microbatch: they add up.

The load of a layer is its busiest expert over the mean expert (max/mean: 1.0 is perfectly balanced, E when every
token goes to one of E experts), the busiest expert's share of the assignments, and the spread of the experts'
loads (cv: standard deviation over the mean). With expert parallelism EP > 1,
the experts are laid out in EP equal blocks of consecutive ids (MaxText's expert sharding), and a rank's load is
the sum of its block: the busiest rank over the mean rank is what the slowest rank's grouped GEMM pays for, and
the ranks' cv is what `moekit plan`'s routing-imbalance term takes (routing.rank_cv, docs/plan.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from moekit.base import bounded, parse

FILE = "routing.jsonl"
ENV = "MOEKIT_ROUTING"  # the file a training process appends its routing records to
EVERY_ENV = "MOEKIT_ROUTING_EVERY"  # sample every N-th step (0: record nothing)
MAX_BYTES = 256 * bounded.MiB  # layers x experts integers per sampled step: far below this for any real run
KEY = "routing"  # the summary's section


def read(path: Path) -> dict[int, dict[str, Any]]:
    """step -> {"ep", "layers", "counts"} of one routing file (records of one step added up); a line cut off by a
    kill, or any record whose shape does not hold (layers x experts of whole numbers >= 0), is skipped."""
    try:
        text = bounded.read_text(path, MAX_BYTES, "routing record", errors="replace")
    except (OSError, bounded.TooLarge):
        return {}
    out: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        rec = _record(line)
        if rec is None:
            continue
        step, ep, layers, counts = rec
        have = out.get(step)
        if have is not None and have["layers"] == layers and len(have["counts"][0]) == len(counts[0]):
            have["counts"] = [
                [a + b for a, b in zip(x, y, strict=True)] for x, y in zip(have["counts"], counts, strict=True)
            ]
        else:
            out[step] = {"ep": ep, "layers": layers, "counts": counts}
    return dict(sorted(out.items()))


def _record(line: str) -> tuple[int, int, list[str], list[list[int]]] | None:
    try:
        row = parse.json_line(line, "routing record")
        step, ep, layers, counts = row["step"], row.get("ep", 1), row["layers"], row["counts"]
    except (ValueError, KeyError, TypeError):
        return None
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    if not (whole(step) and whole(ep) and ep >= 1 and isinstance(layers, list) and isinstance(counts, list)):
        return None
    if not counts or len(layers) != len(counts) or not all(isinstance(n, str) for n in layers):
        return None
    width = len(counts[0]) if isinstance(counts[0], list) else 0
    if width == 0 or not all(isinstance(c, list) and len(c) == width and all(map(whole, c)) for c in counts):
        return None
    return step, ep, layers, counts


MEASURES = ("max_over_mean", "busiest_share", "cv", "rank_max_over_mean", "rank_cv")


def _cv(values: Sequence[int]) -> float:
    """Coefficient of variation (population standard deviation over the mean) of loads that sum to more than 0."""
    return statistics.pstdev(values) / statistics.fmean(values)


def load(counts: Sequence[int], ep: int = 1) -> dict[str, float | None]:
    """One layer's load in one step: over experts max/mean, the busiest expert's share and the coefficient of
    variation (cv); with ep > 1 (dividing the experts) max/mean and cv over EP ranks; None where nothing was routed
    (or, for the rank measures, with ep 1)."""
    out: dict[str, float | None] = dict.fromkeys(MEASURES)
    total = sum(counts)
    if total == 0:
        return out
    out |= {
        "max_over_mean": max(counts) * len(counts) / total,
        "busiest_share": max(counts) / total,
        "cv": _cv(counts),
    }
    if ep > 1 and len(counts) % ep == 0:
        block = len(counts) // ep
        ranks = [sum(counts[r * block : (r + 1) * block]) for r in range(ep)]
        out |= {"rank_max_over_mean": max(ranks) * ep / total, "rank_cv": _cv(ranks)}
    return out


def series(records: dict[int, dict[str, Any]]) -> dict[str, list[tuple[int, dict[str, float | None]]]]:
    """layer -> [(step, load)] over the sampled steps."""
    out: dict[str, list[tuple[int, dict[str, float | None]]]] = {}
    for step, rec in records.items():
        for name, counts in zip(rec["layers"], rec["counts"], strict=True):
            out.setdefault(name, []).append((step, load(counts, rec["ep"])))
    return out


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "max": round(max(values), 4), "min": round(min(values), 4)}


def summarize(records: dict[int, dict[str, Any]], every: int | None = None) -> dict[str, Any]:
    """The summary's routing section: what was sampled, and each load measure's median, max and min over every MoE
    layer and sampled step, overall and per layer; {} when nothing was recorded."""
    if not records:
        return {}
    per_layer = series(records)
    last = records[max(records)]

    def pooled(key: str, pts: list[tuple[int, dict[str, float | None]]] | None = None) -> dict[str, float] | None:
        chosen = pts if pts is not None else [p for layer in per_layer.values() for p in layer]
        return _spread([v for _, ld in chosen if (v := ld[key]) is not None])

    section: dict[str, Any] = {
        "sampled_steps": sorted(records),
        "every": every,
        "moe_layers": len(last["layers"]),
        "experts": len(last["counts"][0]),
        "ep": last["ep"],
        "assignments_per_step": sum(last["counts"][0]),
        "max_over_mean": pooled("max_over_mean"),
        "busiest_share": pooled("busiest_share"),
        "cv": pooled("cv"),
        "per_layer": {
            name: {k: pooled(k, pts) for k in ("max_over_mean", "busiest_share", "cv")}
            for name, pts in per_layer.items()
        },
        "source": f"{FILE}: tokens per expert of each MoE layer at the sampled steps (worker/routing.py)",
    }
    if last["ep"] > 1:
        section |= {"rank_max_over_mean": pooled("rank_max_over_mean"), "rank_cv": pooled("rank_cv")}
    section["rank_cv_by_ep"] = rank_cv_by_ep(records)
    return section


def rank_cv_by_ep(records: dict[int, dict[str, Any]]) -> dict[str, float]:
    """The median over layers and sampled steps of the EP ranks' load cv this routing would give at each expert
    parallelism that divides the experts (blocks of consecutive experts per rank): what `moekit plan`'s
    routing-imbalance term takes, measured at the layout the run had or could have had."""
    experts = len(next(iter(records.values()))["counts"][0])
    out = {}
    for ep in [d for d in range(2, experts + 1) if experts % d == 0]:
        cvs = [
            v
            for rec in records.values()
            for counts in rec["counts"]
            if len(counts) == experts and (v := load(counts, ep)["rank_cv"]) is not None
        ]
        if cvs:
            out[str(ep)] = round(statistics.median(cvs), 4)
    return out


def summary_section(run: Path, every: int | None = None) -> dict[str, Any]:
    """{KEY: summarize(...)} of run directory `run`'s first process's records over every attempt (a later attempt's
    record of a step replaces an earlier one's); {} when the run recorded none."""
    records: dict[int, dict[str, Any]] = {}
    attempts = run / "attempts"
    folders = (
        sorted((p for p in attempts.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        if attempts.is_dir()
        else []
    )
    for folder in [*folders, run]:
        records |= read(folder / FILE)
    section = summarize(dict(sorted(records.items())), every)
    return {KEY: section} if section else {}
