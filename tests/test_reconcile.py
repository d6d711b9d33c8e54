"""A report whose numbers reconcile: the step time beside a rate is the rate's own, losses compared at one step,
a killed attempt said, a jump of the wall clock kept out of the windows, and no host-load hint above the host."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from moekit.observe.reports import report as rep
from moekit.observe.runs import metrics, rundata, steady, summary
from moekit.observe.runs.events import Events
from moekit.run import host_load

RUNS = REPO / "tests" / "data" / "runs"


def _rows(times: list[float]) -> list[dict]:
    return [{"step": s, summary.STEP_TIME: t, summary.TOKENS: 100.0 / t, summary.LOSS: 10.0 - s} for s, t in
            enumerate(times)]  # fmt: skip


def _stamps(times: list[float], jump_at: int | None = None, by: float = 0.0) -> dict[int, float]:
    """Step-end stamps that agree with the step times, the clock moved by `by` s before step `jump_at`'s stamp."""
    out, t = {}, 1000.0
    for s, dt in enumerate(times):
        t += dt + (by if s == jump_at else 0.0)
        out[s] = t
    return out


@pytest.mark.parametrize("by", [3600.0, -30.0])
def test_a_jump_of_the_wall_clock_is_left_out_of_the_windows_and_named(by):
    """Step-end stamps moved 3,600 s (an NTP step, a paused VM) gave 0.4 tokens/s against 219.9 with status ok."""
    times = [3.0, 1.1, 1.1] + [1.1, 1.0, 1.2, 1.1, 1.0, 1.1, 1.2, 1.0, 1.1]
    plain = summary.summarize(metrics.Metrics(_rows(times)), {}, events={1: Events(_stamps(times), [])})
    jumped = summary.summarize(metrics.Metrics(_rows(times)), {}, events={1: Events(_stamps(times, 7, by), [])})
    assert plain["clock_jumps"] == [] and "clock jump" not in plain["exclusion_reasons"]
    assert {e["step"]: e["reason"] for e in jumped["excluded"]}[7] == "clock jump"
    assert jumped["clock_jumps"] == [{"step": 7, "stamps_less_step_time_s": pytest.approx(by)}]
    assert [w["steps"] for w in jumped["windows"]] == [[3, 6], [8, 11]]  # no refill after it: no work was lost
    assert jumped["tokens_per_s_per_device"] == pytest.approx(plain["tokens_per_s_per_device"], rel=0.02)
    assert f"clock jump       step 7: its stamps {by:+.3f} s off MaxText's step time" in summary.format_summary(
        jumped, "cpu", "-"
    )


def test_stamps_that_agree_with_step_times_to_a_short_step_are_no_jump():
    """A pipelined short step (0.06 s) then a long one (3.5 s): both clocks see them; no jump."""
    times = [0.2, 1.0, 0.06, 3.5, 1.7, 1.8, 1.7]
    assert steady.clock_jumps([steady.Step(s, t, 1) for s, t in enumerate(times)], _stamps(times)) == {}


def test_a_real_run_has_no_clock_jump_and_a_moved_clock_is_found(smoke_run, tmp_path):
    """The tolerance holds on a real MaxText run (stamps and step times from one training), and the same run with
    its stamps moved an hour from step 6 on keeps its rate and names the jump."""
    base, proc = smoke_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = next((base / "smoke").iterdir())
    real = json.loads((run / "summary.json").read_text())
    assert real["clock_jumps"] == [], real["clock_jumps"]
    moved = tmp_path / "moved"
    shutil.copytree(run, moved, ignore=shutil.ignore_patterns("checkpoints", "*.lock"))
    files = sorted(moved.rglob("events*.jsonl"))
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    at = next(e["t"] for e in lines if e["event"] == "step_end" and e["step"] == 5)
    for f in files:
        shifted = []
        for e in map(json.loads, f.read_text().splitlines()):
            shifted.append({k: (v + 3600 if k in ("t", "start", "end") and v > at else v) for k, v in e.items()})
        f.write_text("".join(json.dumps(e) + "\n" for e in shifted))
    got = rundata.load(moved).summary
    assert [j["step"] for j in got["clock_jumps"]] == [6]
    assert got["tokens_per_s_per_device"] == pytest.approx(real["tokens_per_s_per_device"], rel=0.35)


def _killed_first(tmp_path: Path) -> rundata.Run:
    """b2 (4 steps, ok) as the second attempt of a run whose first was killed while compiling."""
    run = tmp_path / "b2"
    shutil.copytree(RUNS / "b2", run)
    manifest = json.loads((run / "manifest.json").read_text())
    killed = {"attempt": 1, "status": "failed", "failure": {"class": "killed"}, "wall_s": 4.15,
              "wall_s_lower_bound": True, "host_load": {"others_share": None}}  # fmt: skip
    manifest["attempts"] = [killed, manifest["attempts"][0] | {"attempt": 2, "wall_s": 30.9}]
    manifest["attempt"] = 2
    (run / "manifest.json").write_text(json.dumps(manifest))
    return rundata.load(run)


def test_a_killed_attempt_is_counted_once_and_said(tmp_path):
    """After a kill -9 during compile, summary.json said "attempts": 1 beside two wall times and a manifest of two."""
    r = _killed_first(tmp_path)
    assert r.summary["attempts"] == 2 == len(r.manifest.attempts) and r.summary["killed_attempts"] == [1]
    said = "attempt 1 of 2 was killed: the run's wall time is a lower bound"
    assert rep.status(r) == f"ok; {said}"
    notes = rep.notes([r], ["b2"])
    assert f"b2: {said}; its rates come from the steps the attempts recorded, which stand." in notes
    assert not any("the run is ok" in n for n in notes)
    assert f"killed           {said}" in summary.format_summary(r.summary, "cpu", "-")
    plain = rundata.load(RUNS / "b2")
    assert plain.summary["killed_attempts"] == [] and rep.status(plain) == "ok"


def test_the_step_time_beside_a_rate_is_the_rate_s_own():
    """The report showed the steps' median (1.2315 s) beside tokens/s from the windows' wall time (1.276 s/step)."""
    r = rundata.load(RUNS / "twoproc")
    st = r.summary["step_time_s"]
    windows = r.summary["windows"]
    per_step = sum(w["wall_s"] for w in windows) / sum(w["steps"][1] - w["steps"][0] + 1 for w in windows)
    assert st["per_window"] == pytest.approx(per_step, rel=1e-3)
    cell = f"{st['per_window']:.4f} ({st['median']:.4f})"
    assert f"| {cell} |" in rep.runs_table([r], ["twoproc"])
    assert f"| {cell} |" in rep.comparison_table([r, r], ["a", "b"])


def test_losses_are_compared_at_the_same_step():
    """'loss - first' set a 16-step run's final loss against a 10-step one's."""
    r = rundata.load(RUNS / "b2")

    def cut(n: int) -> rundata.Run:
        return dataclasses.replace(r, metrics=metrics.Metrics(r.metrics.rows[:n]))

    rows = {int(x["step"]): x[summary.LOSS] for x in r.metrics.rows}
    assert rep.loss_difference(r, r) == "+0.00e+00"
    assert rep.loss_difference(r, cut(2)) == f"{rows[1] - rows[1]:+.2e} (step 1)"
    later = dataclasses.replace(r, metrics=metrics.Metrics([x | {"step": x["step"] + 10} for x in r.metrics.rows]))
    assert rep.loss_difference(r, later) == "n/a (other steps)"


def test_a_shell_s_finished_children_never_make_a_share_above_the_host():
    """host_load.others listed {"name": "bash", "cpu_share": 4.255} on a 2-CPU host whose others took 0.615: the
    shell's children, counted under their own names while they ran, landed in its cutime all at once."""
    moekit = ("moekit", 1)
    s0 = host_load.Sample(0.5, 100, 1000, {10: (*moekit, 0, 0), 40: ("bash", 1, 10, 10), 41: ("cc", 40, 0, 0)})
    s1 = host_load.Sample(0.5, 700, 2000, {10: (*moekit, 100, 100), 40: ("bash", 1, 12, 12), 41: ("cc", 40, 480, 480)})
    s2 = host_load.Sample(0.5, 1300, 3000, {10: (*moekit, 200, 200), 40: ("bash", 1, 5012, 12)})  # cc waited for
    got = host_load.record([host_load.interval(s0, s1, 10), host_load.interval(s1, s2, 10)], [0.5] * 3, cpus=2)
    shares = {o["name"]: o["cpu_share"] for o in got["others"]}
    assert max(shares.values()) <= got["others_share"] <= 1
    assert shares == {"cc": 0.24}  # the shell itself took 2 ticks of 2000: below the hint's 1%
    greedy = host_load.Sample(0.5, 800, 2000, {10: ("moekit", 1, 100, 100), 50: ("x", 1, 9000, 9000)})
    capped = host_load.interval(host_load.Sample(0.5, 100, 1000, {10: ("moekit", 1, 0, 0)}), greedy, 10)
    assert capped.others[50][1] == capped.others_ticks == 600  # never more than all others took
