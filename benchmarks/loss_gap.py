"""The loss gap of a quantized run to its bf16 twin (moekit.observe.reports.loss_gap's rule, docs/metrics.md).

    python benchmarks/loss_gap.py CANDIDATE_RUN REFERENCE_RUN [--out gap.json] [--window 0.2] [--goal 0.01]

Both are `moekit train` run directories (config.yaml, metrics.jsonl, and corpus.json for data=stdlib). Runs that
are not twins (another model, MoE path, tokens per step, step count, seed, data or corpus shards; the same
precision) are refused with the reasons, exit 2. Prints one line and, with --out, writes the result with its
provenance (both runs' paths, overrides, versions, dates, corpus identity). Exit 0 when the goal is met, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
import moekit_python  # noqa: E402, F401 (re-runs this script with .venv/bin/python when this Python lacks moekit's stack)

from moekit.observe.reports import loss_gap  # noqa: E402
from moekit.observe.runs import rundata  # noqa: E402
from moekit.observe.runs.metrics import MetricsError  # noqa: E402

CORPUS = "corpus.json"


def corpus_of(run: Path) -> dict | None:
    """The corpus identity a data.corpus run recorded, or None."""
    try:
        return json.loads((run / CORPUS).read_text())
    except (OSError, ValueError):
        return None


def provenance(run: rundata.Run, corpus: dict | None) -> dict:
    """Where a run's losses come from."""
    keys = ("python", "jax", "jaxlib", "maxtext", "transformer-engine", "moekit", "host", "platform")
    return {
        "path": str(run.path),
        "overrides": run.overrides,
        "date": run.date,
        "status": run.manifest.status,
        "hardware": run.hardware.get("name"),
        "versions": {k: run.versions.get(k) for k in keys if run.versions.get(k)},
        "corpus": {k: corpus.get(k) for k in ("source", "files", "tokens", "tokenizer", "sha256", "extra")}
        if corpus
        else None,
    }


def compare(candidate: Path, reference: Path, window: float, goal: float) -> tuple[dict, str]:
    """(the result record, its one-line text); SystemExit(2) with the reasons when the runs are not twins."""
    try:
        runs = [rundata.load(candidate), rundata.load(reference)]
    except MetricsError as exc:
        raise SystemExit(f"loss_gap: {exc}") from None
    corpora = [corpus_of(candidate), corpus_of(reference)]
    reasons = loss_gap.not_comparable(runs[0].config, runs[1].config, *corpora)
    if reasons:
        print("loss_gap: the runs are not twins (they may differ only in precision):", file=sys.stderr)
        for r in reasons:
            print(f"  - {r}", file=sys.stderr)
        raise SystemExit(2)
    losses = [[float(row["learning/loss"]) for row in r.metrics.rows] for r in runs]
    try:
        gap = loss_gap.loss_gap(losses[0], losses[1], window, goal)
    except ValueError as exc:
        raise SystemExit(f"loss_gap: {exc}") from None
    names = [f"{r.path.name} ({r.config['precision']['name']})" for r in runs]
    text = loss_gap.describe(gap, *names)
    record = {
        "rule": f"mean of (loss_candidate - loss_reference) / loss_reference over the last {window:.0%} of the steps; "
        f"goal |mean| <= {goal:.0%} (docs/metrics.md)",
        **gap.to_dict(),
        "candidate": provenance(runs[0], corpora[0]),
        "reference": provenance(runs[1], corpora[1]),
        "text": text,
    }
    return record, text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("candidate", type=Path, help="the quantized run (FP8)")
    p.add_argument("reference", type=Path, help="its bf16 twin")
    p.add_argument("--window", type=float, default=loss_gap.WINDOW, help="the last fraction of the steps compared")
    p.add_argument("--goal", type=float, default=loss_gap.GOAL, help="the largest |mean relative gap| that passes")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    a = p.parse_args()
    if not 0 < a.window <= 1:
        p.error("--window is a fraction of the steps in (0, 1]")
    record, text = compare(a.candidate, a.reference, a.window, a.goal)
    print(text)
    if a.out:
        a.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0 if record["meets_goal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
