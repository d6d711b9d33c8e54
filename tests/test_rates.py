"""One rule for every steady rate (observe/runs/steady.py): tokens over the wall time of windows on the workers'
step-end clock that hold no non-training event, never a pairing of steps; docs/metrics.md states it."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, moekit
from moekit.observe.runs import metrics, summary
from moekit.observe.runs.events import Events

T = 3.28  # the profiled run: its own trace says a step takes 3,280 ms
TOKENS = 256.0  # tokens per step per device (experiment=smoke: batch 2 x 128)


def _run(times: list[float], *spans: tuple) -> dict:
    """The summary of one attempt whose steps took `times` (stamps are their running sums), with `spans` as events
    at offsets after the stamp of the step named: (kind, after step, offset, length)."""
    stamps = dict(enumerate(itertools.accumulate(times)))
    rows = [{"step": s, summary.STEP_TIME: t, summary.TOKENS: TOKENS / t} for s, t in enumerate(times)]
    found = [(kind, stamps[after] + at, stamps[after] + at + length, None) for kind, after, at, length in spans]
    return summary.summarize(metrics.Metrics(rows), {}, events={1: Events(stamps, found)})


def test_a_profiled_run_measures_what_a_plain_run_measures():
    """The issue's profile=on timings: each trace edge's step also holds the work of the step after it, which is
    then stamped done at once (0.05 s) while the next takes one step's time. Pairing that short step with the next
    as two steps of work reported 147.7 tokens/s against 56-63 measured beside it; windows measure T."""
    plain = _run([20.0, 0.05, 2 * T] + [T] * 13)
    edge = 2 * T + 0.4  # starting or stopping the trace, plus the refill step's work
    traced = [20.0, 0.05, 2 * T, edge, 0.05, T, edge, 0.05] + [T] * 8
    profiled = _run(traced, ("trace_start", 2, 0.1, 0.0), ("trace_stop", 5, 0.1, 0.0))
    reasons = {e["step"]: e["reason"] for e in profiled["excluded"]}
    assert reasons[3] == reasons[6] == "profile window edge"
    assert {s for s, why in reasons.items() if why == "pipeline refill"} == {1, 2, 4, 5, 7, 8}
    assert profiled["windows"] == [{"steps": [9, 15], "attempt": 1, "wall_s": pytest.approx(7 * T), "clock": "events"}]
    for s in (plain, profiled):
        assert s["tokens_per_s_per_device"] == pytest.approx(TOKENS / T)
    assert profiled["step_time_s"]["per_window"] == pytest.approx(T)


def test_after_a_save_the_step_with_the_refill_work_stays_out_and_with_saves_is_the_same_rule():
    """After a save (or an attempt start) the refill step is short and the one after it holds two steps' work (CPU,
    2026-12-05: 0.056 s, then 3.50 s against 1.74 s steady): both stay out, so no doubled step halves the rate.
    With the saves the rate is the same windows with saves counted as training."""
    save = 1.5
    times = [20.0, 0.05, 2 * T, T, T, T + save, 0.05, 2 * T, T, T, T, T + save, 0.05, 2 * T, T, T]
    got = _run(times, ("save", 4, 0.01, save), ("save", 10, 0.01, save))
    reasons = {e["step"]: e["reason"] for e in got["excluded"]}
    assert [s for s, why in reasons.items() if why == "checkpoint save"] == [5, 11]
    assert [w["steps"] for w in got["windows"]] == [[3, 4], [8, 10], [14, 15]]
    assert got["tokens_per_s_per_device"] == pytest.approx(TOKENS / T)
    with_saves = got["checkpoint"]["with_saves"]
    assert [w["steps"] for w in with_saves["windows"]] == [[3, 15]]
    assert with_saves["tokens_per_s_per_device"] == pytest.approx(13 * TOKENS / sum(times[3:]))
    assert with_saves["tokens_per_s_per_device"] < got["tokens_per_s_per_device"]


STEPS = 16  # MaxText traces steps 3..5 (profile.skip_steps=3): windows after the second edge's refill remain


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory) -> dict[str, Path]:
    """experiment=smoke with profile=on and twice without, one after another on the same host. Started together on 2
    cores they do not share one load: the profiled run, slower by its trace, ends last and its clean window runs
    alone (seen: 2.5x the plain runs' rate, each rate right for the load it ran under)."""
    base = tmp_path_factory.mktemp("side_by_side")
    runs = {"profiled": ["profile=on"], "plain": [], "again": []}
    for name, extra in runs.items():
        cmd = [sys.executable, "-m", "moekit", "train", "experiment=smoke", f"train.steps={STEPS}", *extra,
               f"run.dir={base / name}"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{name}:\n{(proc.stdout + proc.stderr)[-3000:]}"
    return {name: base / name for name in runs}


@pytest.mark.integration
def test_a_profiled_and_a_plain_run_of_one_configuration_report_rates_within_1_35x(side_by_side):
    got = {name: json.loads((run / "summary.json").read_text()) for name, run in side_by_side.items()}
    rates = {name: s["tokens_per_s_per_device"] for name, s in got.items()}
    print(f"\ntokens/s/device one after another: {rates}; windows {[got[n]['windows'] for n in got]}")
    reasons = {e["step"]: e["reason"] for e in got["profiled"]["excluded"]}
    assert reasons.get(3) == reasons.get(6) == "profile window edge", reasons
    assert all(r is not None for r in rates.values()), got
    ratio = rates["profiled"] / rates["plain"]
    assert 1 / 1.35 <= ratio <= 1.35, (ratio, rates)


@pytest.mark.integration
def test_two_identical_runs_are_the_same_configuration_not_a_speed_up(side_by_side):
    """The issue's identical configurations passed as 0.81x and 0.74x speed-ups; now moekit report names them."""
    got = moekit("report", str(side_by_side["plain"]), str(side_by_side["again"]))
    assert got.returncode == 0, got.stderr[-3000:]
    print("\n" + "\n".join(line for line in got.stdout.splitlines() if "same training configuration" in line))
    assert "n/a (same training configuration: the two measured" in got.stdout, got.stdout[-3000:]
    for run in ("plain", "again"):  # both sampled the same host: each others' share is known
        manifest = json.loads((side_by_side[run] / "manifest.json").read_text())
        assert manifest["host_load"]["others_share"] is not None, manifest["host_load"]
