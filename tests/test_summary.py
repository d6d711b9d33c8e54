"""The steady-state rules on recorded runs (tests/data/runs/, copied from real CPU runs of moekit train).

- twoproc: experiment=smoke with 2 processes; MaxText's compilation landed on step 2 (36.6 s), after two
  steps whose times (0.85 s, 1.04 s) miss it.
- ckpt: experiment=smoke checkpoint.every=2; every step after a save (1, 3, ...) takes ~10 s, the others ~0.1 s.
- b2, b4: experiment=smoke train.steps=4 at per-device batch 2 and 4 (different tokens per step).
- partial: experiment=smoke train.steps=4 stopped by SIGTERM after 2 steps (status failed, class killed).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conftest import REPO, moekit
from moekit.observe import metrics, rundata, summary
from moekit.observe import report as rep

RUNS = REPO / "tests" / "data" / "runs"


def _times(name: str) -> dict[int, float]:
    rows = metrics.read(RUNS / name / "metrics.jsonl").rows
    return {int(r["step"]): r[summary.STEP_TIME] for r in rows}


def test_compilation_is_left_out_wherever_it_lands():
    run = rundata.load(RUNS / "twoproc")
    s = run.summary
    assert {e["step"]: e["reason"] for e in s["excluded"]} == {0: "before compile", 1: "before compile", 2: "compile"}
    times = _times("twoproc")
    assert times[2] > 30 and s["step_time_s"]["median"] == statistics.median(times[k] for k in range(3, 10))
    assert s["step_time_s"]["max"] < 10 and s["step_time_s"]["min"] > 2  # neither the compile nor the artefacts
    text = summary.format_summary(s, "cpu", "no peak")
    assert "left out         0, 1 (before compile); 2 (compile)" in text


def test_checkpoint_save_steps_are_reported_apart():
    run = rundata.load(RUNS / "ckpt")  # its config says checkpoint.every=2
    s, times = run.summary, _times("ckpt")
    assert run.config["checkpoint"]["every"] == 2
    assert s["checkpoint"]["steps"] == [1, 3, 5, 7, 9]
    steady = [2, 4, 6, 8]
    assert [e["step"] for e in s["excluded"]] == [0, 1, 3, 5, 7, 9]
    assert s["step_time_s"]["median"] == statistics.median(times[k] for k in steady)
    # The steady rate is the save-free one; the rate with the saves is total tokens over total time.
    rows = {int(r["step"]): r for r in run.metrics.rows}
    tokens = {k: rows[k][summary.TOKENS] * times[k] for k in rows}
    with_saves = sum(tokens[k] for k in [*steady, 1, 3, 5, 7, 9]) / sum(times[k] for k in [*steady, 1, 3, 5, 7, 9])
    assert s["checkpoint"]["with_saves"]["tokens_per_s_per_device"] == pytest.approx(with_saves)
    assert s["tokens_per_s_per_device"] > 10 * with_saves  # the number the summary showed vs the real one
    text = summary.format_summary(s, "cpu", "no peak")
    assert "1, 3, 5, 7, 9 (checkpoint)" in text and f"with them {with_saves:.1f} tokens/s/device" in text


def test_a_resumed_attempt_compiles_again_and_pays_no_save():
    """As if the run had resumed from the checkpoint of step 4: step 5 starts an attempt (compilation)."""
    m = metrics.read(RUNS / "ckpt" / "metrics.jsonl")
    starts = summary.attempt_starts([{}, {"resumed_from_checkpoint": 4}])
    s = summary.summarize(m, {}, checkpoint_every=2, attempt_starts=starts)
    reasons = {e["step"]: e["reason"] for e in s["excluded"]}
    assert reasons[5] == "compile" and reasons[0] == "compile" and reasons[7] == "checkpoint"


def test_rules_on_plain_step_times():
    assert summary.exclusions([0, 1, 2, 3, 4], [9.0, 1.0, 1.1, 0.9, 1.0]) == {0: "compile"}
    assert summary.exclusions([0, 1, 2, 3, 4], [9.0, 1.6, 1.0, 1.1, 0.9]) == {0: "compile", 1: "warm-up"}
    late = summary.exclusions(list(range(10)), [1.0] * 7 + [9.0, 1.0, 1.0])
    assert late == {0: "compile", 7: "outlier"}  # a stall late in the run: left out, named differently
    assert summary.exclusions([0], [1.0]) == {}


def test_report_marks_failed_and_partial_runs(tmp_path):
    proc = moekit("report", str(RUNS / "b2"), str(RUNS / "partial"), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| partial |"))
    assert "| failed: killed (2 of 4 steps) |" in row
    ok = next(line for line in text.splitlines() if line.startswith("| b2 |"))
    assert "| ok |" in ok
    assert "partial: the run is failed: killed (2 of 4 steps); its numbers cover only the steps it completed" in text
    assert "failed: killed (2 of 4 steps)" in proc.stdout  # the printed table too


def test_speed_up_is_on_throughput_and_says_which(tmp_path):
    b2, b4 = rundata.load(RUNS / "b2"), rundata.load(RUNS / "b4")
    table = rep.comparison_table([b2, b4], ["b2", "b4"])
    assert "speed-up vs first (tokens/s/device)" in table
    ratio = b4.summary["tokens_per_s_per_device"] / b2.summary["tokens_per_s_per_device"]
    step_ratio = b2.summary["step_time_s"]["median"] / b4.summary["step_time_s"]["median"]
    last = table.splitlines()[-1]
    assert f"| {ratio:.2f}x |" in last and f"{ratio:.2f}" != f"{step_ratio:.2f}"
    assert step_ratio < 0.7 < ratio  # double the tokens per step: slower steps, more throughput
    # A different model does different work per token: then the speed-up is on TFLOP/s.
    other = rundata.Run(b4.path, b4.config | {"model": b4.config["model"] | {"num_layers": 2}}, b4.versions,
                        b4.manifest, b4.metrics, b4.summary)  # fmt: skip
    assert rep.speedup_basis([b2, other]) == "TFLOP/s/device"
    assert "speed-up vs first (TFLOP/s/device)" in rep.comparison_table([b2, other], ["b2", "b4"])


def test_recorded_runs_are_what_their_files_say():
    """The fixtures are moekit run directories as moekit train wrote them (not edited by hand)."""
    for name in ("twoproc", "ckpt", "b2", "b4", "partial"):
        manifest = json.loads((RUNS / name / "manifest.json").read_text())
        assert manifest["experiment"] == "smoke" and Path(manifest["overrides"][-1]).name == name


def test_a_run_without_a_steady_step_still_summarizes_and_plots(tmp_path):
    """Two steps, the second paying a checkpoint save: the medians fall back to the save step, and say so."""
    import shutil

    from moekit.observe import plots

    run = tmp_path / "short"
    shutil.copytree(RUNS / "ckpt", run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    loaded = rundata.load(run)
    s = loaded.summary
    assert s["counted_steps"] == [1] and "no step is free" in s["note"]
    assert s["step_time_s"]["median"] == _times("ckpt")[1]
    assert plots.write([loaded], ["short"], tmp_path / "plots") == ["step_time.png", "tflops.png", "loss.png"]
