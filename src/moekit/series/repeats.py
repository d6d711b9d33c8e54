"""Tune's last word (effects: trains): its two fastest accepted candidates run once more before a winner is named.

One run each is a draw of this host's noise: two identical smoke runs on a shared CPU host measured 1.66x apart.
So the two best candidates are trained again, each candidate's noise is the spread of its two rates
(observe.reports.comparable.repeats), and the winner (the higher mean rate) is called faster than the runner-up
only when the ratio lies outside that noise (observe.reports.comparable's rule); otherwise the verdict says
"within noise", and where a repeat did not finish, which noise was not measured.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from moekit.base.figures import significant
from moekit.observe.reports import comparable
from moekit.series import trial, tune_table, tuning

FINALISTS = 2
KEPT = ("run_dir", "status", "tokens_per_s_per_device", "spread", "others_share", "step_time_s")


def finalists(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The accepted candidates with a rate, fastest first, at most FINALISTS (one result per configuration)."""
    ok = [
        r for r in runs if r["role"].startswith("candidate") and r.get("accepted") and r.get("tokens_per_s_per_device")
    ]
    return sorted(ok, key=lambda r: -r["tokens_per_s_per_device"])[:FINALISTS]


def _runs(r: dict[str, Any]) -> list[dict[str, Any]]:
    """A finalist's runs with a rate: its first, and its repeat when that finished."""
    again = r.get("repeat") or {}
    return [x for x in (r, again if again.get("status") == "ok" else {}) if x.get("tokens_per_s_per_device")]


def rates(r: dict[str, Any]) -> list[float]:
    """The rates a finalist measured: its first run's, and its repeat's when that finished."""
    return [x["tokens_per_s_per_device"] for x in _runs(r)]


def measured(r: dict[str, Any]) -> comparable.Measured:
    """A finalist as the comparison needs it: its mean rate, its steps' spread, the busiest host load of its runs
    (unknown when one's is) and its repeats' spread (None when the repeat did not finish: not measured)."""
    runs = _runs(r)
    shares = [x.get("others_share") for x in runs]
    return comparable.Measured(
        statistics.mean(rates(r)),
        r.get("spread"),
        None if None in shares else max(shares),
        comparable.repeats(rates(r)),
    )


def verdict(ranked: Sequence[dict[str, Any]], cfg_setup: comparable.Setup) -> tuple[dict[str, Any] | None, str]:
    """(the winner, one line saying how far it stands from the runner-up and what noise was measured), from the
    finalists with their repeats (pure). The winner has the higher mean rate; it is "faster" only beyond the noise."""
    if not ranked:
        return None, ""
    unmeasured = [
        f"the repeat of {tuning.label(r['overrides'])} ended {(r.get('repeat') or {}).get('status', 'unrun')}"
        for r in ranked
        if len(rates(r)) < 2
    ]
    gone = f"; noise not measured: {', '.join(unmeasured)}" if unmeasured else ""
    by_mean = sorted(ranked, key=lambda r: -measured(r).rate)
    best = by_mean[0]
    noise = measured(best).repeats
    own = f"±{comparable.percent(noise)} between its two runs" if noise is not None else "its noise not measured"
    line = f"mean of {len(rates(best))} run(s) {significant(measured(best).rate)} tokens/s/device ({own})"
    if len(by_mean) < 2:
        return best, f"{line}; the only accepted candidate{gone}"
    shared = dataclasses.replace(cfg_setup, configuration=None)  # two candidates: two training configurations
    against = comparable.compare(shared, measured(by_mean[1]), shared, measured(best))
    vs = against.text() if against.speedup else f"{against.text()}: not a measured speed-up"
    return best, f"{line}; against the runner-up {tuning.label(by_mean[1]['overrides'])}: {vs}{gone}"


def settle(
    runs: list[dict[str, Any]],
    out: Path,
    timeout_s: float,
    cfg_setup: comparable.Setup,
    save: Callable[[], None],
) -> tuple[dict[str, Any] | None, str]:
    """Train the finalists again (each into <out>/repeat<i>), record each repeat in its result, and return
    verdict()'s winner and line."""
    ranked = finalists(runs)
    for i, r in enumerate(ranked):
        print(f"moekit tune: repeat {i + 1}/{len(ranked)} (noise): {tuning.label(r['overrides'])}", flush=True)
        again = trial.run(r["overrides"], out / f"repeat{i}", timeout_s)
        r["repeat"] = {k: again.get(k) for k in KEPT}
        save()
    against_reference(runs, cfg_setup)
    save()
    return verdict(ranked, cfg_setup)


def against_reference(runs: Sequence[dict[str, Any]], cfg_setup: comparable.Setup) -> None:
    """Each repeated candidate's `vs_reference` again, now with the noise its repeats measured (the reference's
    too, where the candidate that is the reference was repeated)."""
    shared = dataclasses.replace(cfg_setup, configuration=None)
    for r in runs:
        if r["role"] != "candidate" or not r.get("repeat") or "vs_reference" not in r:
            continue
        batch = r.get("batch")
        ref = next((x for x in runs if x["role"] == "reference" and x.get("batch") == batch), None)
        if ref is None:
            continue
        same = next(
            (x for x in runs if x["role"] == tune_table.SAME and x.get("batch") == batch and x.get("repeat")), ref
        )
        r["vs_reference"] = comparable.compare(shared, measured(same), shared, measured(r)).text()
