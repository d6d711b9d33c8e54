"""The steady-state rules on recorded runs (tests/data/runs/, copied from real CPU runs of moekit train).

- twoproc: experiment=smoke with 2 processes; MaxText's compilation landed on step 2 (36.6 s), after two
  steps whose times (0.85 s, 1.04 s) miss it.
- ckpt: experiment=smoke checkpoint.every=2; every step after a save (1, 3, ...) takes ~10 s, the others ~0.1 s.
- b2, b4: experiment=smoke train.steps=4 at per-device batch 2 and 4 (different tokens per step).
- partial: experiment=smoke train.steps=4 stopped by SIGTERM after 2 steps (status failed, class killed).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from conftest import REPO, moekit
from moekit.observe.reports import report as rep
from moekit.observe.runs import metrics, rundata, steady, summary
from moekit.observe.runs.events import Events

RUNS = REPO / "tests" / "data" / "runs"


def _times(name: str) -> dict[int, float]:
    rows = metrics.read(RUNS / name / "metrics.jsonl").rows
    return {int(r["step"]): r[summary.STEP_TIME] for r in rows}


def test_runs_recorded_before_events_are_judged_by_attempts_and_times():
    """twoproc has no event record: step 0 starts the attempt, 1 refills the pipeline, and step 2 (36.6 s: the
    compilation landed there) is left out by its time; the summary says which evidence it used."""
    run = rundata.load(RUNS / "twoproc")
    s = run.summary
    assert {e["step"]: e["reason"] for e in s["excluded"]} == {0: "attempt start"} | dict.fromkeys(
        [1, 2], "pipeline refill"
    )
    assert s["evidence"] == {"1": "checkpoint.every (no event record)"}
    times = _times("twoproc")
    assert times[2] > 30 and s["step_time_s"]["median"] == statistics.median(times[k] for k in range(3, 10))
    assert s["step_time_s"]["max"] < 10 and s["step_time_s"]["min"] > 2  # neither the compile nor the artefacts
    text = summary.format_summary(s, "cpu", "no peak")
    assert "left out         0 (attempt start); 1, 2 (pipeline refill)" in text


def test_a_save_every_two_steps_leaves_no_steady_step_and_says_so():
    """ckpt (checkpoint.every=2): every odd step pays a save, every even one refills the pipeline after it (the
    0.1 s steps: the issue's 5,928 tokens/s). No steady number is printed; the rate with the saves is."""
    run = rundata.load(RUNS / "ckpt")  # its config says checkpoint.every=2
    s, times = run.summary, _times("ckpt")
    assert run.config["checkpoint"]["every"] == 2
    assert s["checkpoint"]["steps"] == [1, 3, 5, 7, 9]
    assert s["steady_steps"] == 0 and s["tokens_per_s_per_device"] is None and s["step_time_s"] is None
    reasons = {e["step"]: e["reason"] for e in s["excluded"]}
    assert [k for k, v in reasons.items() if v == "pipeline refill"] == [2, 4, 6, 8]
    # The rate with the saves: the same rule with saves counted as training, so one window after the start and
    # its refill (this run has no event record: its steps' times time it).
    rows = {int(r["step"]): r for r in run.metrics.rows}
    tokens = {k: rows[k][summary.TOKENS] * times[k] for k in rows}
    with_saves = sum(tokens[k] for k in range(3, 10)) / sum(times[k] for k in range(3, 10))
    assert s["checkpoint"]["with_saves"]["tokens_per_s_per_device"] == pytest.approx(with_saves)
    text = summary.format_summary(s, "cpu", "no peak")
    assert "1, 3, 5, 7, 9 (checkpoint save)" in text and f"with them {with_saves:.1f} tokens/s/device" in text
    assert "too few steady steps (0 of 10" in text and "tokens/s/device  " not in text


def test_too_few_steady_steps_names_the_events_that_left_them_out():
    """profile=on train.steps=6 without checkpoints: the note points at the profiler's window, not at checkpoints;
    a run whose saves left its steps out is told about checkpoint.every."""
    rows = [{"step": s, summary.STEP_TIME: 1.0, summary.TOKENS: 100.0, summary.TFLOPS: 1.0} for s in range(6)]
    stamps = {s: float(s) for s in range(6)}
    traced = _events(stamps, ("trace_start", 2.5, 2.5, None), ("trace_stop", 4.5, 4.5, None))
    note = summary.summarize(metrics.Metrics(rows), {}, events={1: traced})["note"]
    assert note.startswith("too few steady steps") and "profile.skip_steps" in note and "checkpoint" not in note
    saved = _events(stamps, ("save", 1.2, 1.9, 1), ("save", 3.2, 3.9, 3))
    note = summary.summarize(metrics.Metrics(rows), {}, events={1: saved})["note"]
    assert "save checkpoints less often (checkpoint.every)" in note and "profile" not in note


def test_every_attempt_starts_and_refills_again():
    """As if the run had resumed from the checkpoint of step 4: step 5 starts an attempt, 6 refills."""
    m = metrics.read(RUNS / "ckpt" / "metrics.jsonl")
    starts = summary.attempt_starts([{}, {"resumed_from_checkpoint": 4}])
    s = summary.summarize(m, {}, checkpoint_every=2, attempt_starts=starts)
    reasons = {e["step"]: e["reason"] for e in s["excluded"]}
    assert reasons[5] == "attempt start" and reasons[6] == "pipeline refill" and reasons[0] == "attempt start"
    assert reasons[7] == "checkpoint save" and s["attempts"] == 2


def _events(stamps: dict[int, float], *spans: tuple) -> Events:
    return Events(stamps, list(spans))


def test_events_place_each_exclusion_in_the_step_window_it_fell_in():
    steps = [steady.Step(s, 1.0, 1) for s in range(12)]
    stamps = {s: float(s) for s in range(12)}  # step s ends at t = s: its window is (s - 1, s]
    found = _events(
        stamps,
        ("save", 4.2, 4.9, 4),  # MaxText saves step 4 after stamping it: step 5 pays
        ("trace_start", 7.5, 7.5, None),  # step 8's window
        ("compile", 9.10, 9.15, None),  # 5% of step 10's window: too small to count
        ("compile", 10.2, 10.9, None),  # 70% of step 11's
    )
    v = steady.judge(steps, {1: found})
    refills = dict.fromkeys([1, 2, 6, 7, 9, 10], "pipeline refill")  # the two steps after each
    assert v.left_out == {0: "attempt start", 5: "checkpoint save", 8: "profile window edge", 11: "compile"} | refills
    # The window between them, timed by the stamps: from the stamp before its first step to that of its last.
    assert [(w.first, w.last, w.seconds, w.clock) for w in v.windows] == [(3, 4, 2.0, "events")]
    assert v.evidence == {1: "events"}
    # No fixed window: the same save a step later moves the exclusion with it.
    later = steady.judge(steps, {1: _events(stamps, ("save", 5.2, 5.9, 5))})
    assert later.left_out == {0: "attempt start", 6: "checkpoint save"} | dict.fromkeys([1, 2, 7, 8], "pipeline refill")


def test_times_alone_leave_out_warm_up_and_stalls_and_keep_short_steps_in_their_window():
    steps = [steady.Step(s, t, 1) for s, t in enumerate([0.1, 0.2, 9.0, 1.0, 1.1, 0.9, 1.0, 0.2, 1.0, 9.0, 1.0])]
    v = steady.judge(steps, {})
    assert v.left_out == {0: "attempt start", 1: "pipeline refill", 2: "pipeline refill", 9: "outlier"}
    assert [(w.first, w.last, w.clock) for w in v.windows] == [(3, 8, "step times"), (10, 10, "step times")]
    assert v.windows[0].seconds == pytest.approx(5.2)  # the short step 7 counts at the time it took


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


def test_speed_up_only_between_comparable_runs():
    """Same model and tokens per step: a ratio of tokens/s. Otherwise the cell says why there is none (b2 and b4
    differ in batch; a model change; a run with too few steady steps)."""
    two, b2, b4 = rundata.load(RUNS / "twoproc"), rundata.load(RUNS / "b2"), rundata.load(RUNS / "b4")
    # A run against itself: the same configuration, never a speed-up (observe.reports.comparable).
    same = "n/a (same training configuration: the two measured 0% apart, this host's noise; ratio 1.00)"
    assert same in rep.comparison_table([two, two], ["a", "b"])
    # Recorded before moekit measured host load: unknown, so never compared.
    other_xla = dataclasses.replace(two, config=two.config | {"xla": {**two.config["xla"], "name": "other"}})
    assert "host load unknown for the base run and this run" in rep.comparison_table([two, other_xla], ["a", "b"])
    loaded = dataclasses.replace(two.manifest, host_load={"others_share": 0.1})
    two = dataclasses.replace(two, manifest=loaded)
    noisy = dataclasses.replace(other_xla, manifest=loaded)  # another XLA setting, the same host load
    assert "n/a (within noise (±9%); ratio 1.00)" in rep.comparison_table([two, noisy], ["a", "b"])
    faster = dataclasses.replace(
        noisy, summary=two.summary | {"tokens_per_s_per_device": 2 * two.summary["tokens_per_s_per_device"]}
    )
    assert "| 2.00x |" in rep.comparison_table([two, faster], ["a", "b"]).splitlines()[-1]
    table = rep.comparison_table([b2, b4], ["b2", "b4"])
    assert "speed-up vs first (tokens/s/device)" in table
    assert "| n/a (other tokens per step (512 vs 256 per device)) |" in table.splitlines()[-1]
    other = dataclasses.replace(two, config=two.config | {"model": two.config["model"] | {"num_layers": 2}})
    assert "| n/a (another model) |" in rep.comparison_table([two, other], ["a", "b"]).splitlines()[-1]
    same = dataclasses.replace(b2, summary=b2.summary | {"tokens_per_s_per_device": None, "step_time_s": None})
    assert "| n/a (too few steady steps) |" in rep.comparison_table([b2, same], ["a", "b"]).splitlines()[-1]


def test_recorded_runs_are_what_their_files_say():
    """The fixtures are moekit run directories as moekit train wrote them (not edited by hand)."""
    for name in ("twoproc", "ckpt", "b2", "b4", "partial"):
        manifest = json.loads((RUNS / name / "manifest.json").read_text())
        assert manifest["experiment"] == "smoke" and Path(manifest["overrides"][-1]).name == name


def test_a_run_without_a_steady_step_still_summarizes_and_plots(tmp_path):
    """Two steps: no steady number, and the summary, report and plots say so instead of printing one."""
    import shutil

    from moekit.observe.reports import plots

    run = tmp_path / "short"
    shutil.copytree(RUNS / "ckpt", run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    loaded = rundata.load(run)
    s = loaded.summary
    assert s["counted_steps"] == [] and "too few steady steps" in s["note"] and s["step_time_s"] is None
    assert s["missing_steps"] == [] and s["steps_not_run"] == list(range(2, 10))  # they never ran: none is missing
    assert plots.write([loaded], ["short"], tmp_path / "plots") == ["step_time.png", "tflops.png", "loss.png"]
    assert "n/a (too few steady steps)" in rep.runs_table([loaded], ["short"])


def test_a_resumed_run_is_judged_attempt_by_attempt_from_its_own_events():
    """Records 0-5 from attempt 1 (saved at 3, killed), 4-9 from attempt 2: each judged by its own attempt's stamps;
    the steady figures come from both attempts' steady steps."""
    rows = [
        {"step": s, summary.STEP_TIME: 1.0, summary.TOKENS: 100.0, summary.ATTEMPT: 1 if s < 4 else 2}
        for s in range(14)
    ]
    first = Events({s: float(s) for s in range(6)}, [("save", 3.1, 3.6, 3)])  # step 4 would pay it: re-run later
    second = Events({s: 100.0 + s for s in range(4, 14)}, [("save", 106.2, 106.8, 6)])
    s = summary.summarize(metrics.Metrics(rows), {}, 3, events={1: first, 2: second}, planned_steps=14)
    reasons = {e["step"]: e["reason"] for e in s["excluded"]}
    assert reasons == {0: "attempt start", 4: "attempt start", 7: "checkpoint save"} | dict.fromkeys(
        [1, 2, 5, 6, 8, 9], "pipeline refill"
    )
    assert s["counted_steps"] == [3, 10, 11, 12, 13] and s["tokens_per_s_per_device"] == 100.0
    assert [w["steps"] for w in s["windows"]] == [[3, 3], [10, 13]]  # windows never cross attempts
    assert s["evidence"] == {"1": "events", "2": "events"} and s["attempts"] == 2 and s["missing_steps"] == []


def test_a_run_copied_without_its_attempts_folder_still_reports(tmp_path):
    """Only the top-level files came back: the last attempt is judged by its events, earlier ones by schedule."""
    import shutil

    run = tmp_path / "copied"
    shutil.copytree(RUNS / "ckpt", run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r | {"moekit/attempt": 1 if r["step"] < 5 else 2}) + "\n"
                                               for r in rows))  # fmt: skip
    # Stamps as a worker writes them: their intervals are MaxText's step times (steady.clock_jumps checks so).
    ends = {r["step"]: sum(float(x["perf/step_time_seconds"]) for x in rows[: i + 1]) for i, r in enumerate(rows)}
    stamps = "".join(json.dumps({"event": "step_end", "step": s, "t": ends[s]}) + "\n" for s in range(5, 10))
    (run / "events.jsonl").write_text(stamps)
    s = rundata.load(run).summary
    assert s["evidence"] == {"1": "checkpoint.every (no event record)", "2": "events"}
    reasons = {e["step"]: e["reason"] for e in s["excluded"]}
    assert reasons[5] == "attempt start" and reasons[6] == "pipeline refill"
    assert reasons[7] == "pipeline refill" and s["counted_steps"] == [8, 9]  # the window after the refill


def test_console_numbers_steps_as_the_records_do_and_measures_its_eta():
    """Step 0 is 'step 0' (1 of 10 done), as in metrics, summary and report; no ETA from the start-up steps."""
    from moekit.observe.runs import progress

    pace = progress.Pace()
    lines = []
    for step, seconds in enumerate([40.0, 0.1, 2.0, 2.2, 1.8]):
        s = progress.StepLine(step, seconds, 12.0)
        pace.add(s)
        lines.append(progress.format_progress(s, 10, 60.0, pace))
    assert lines[0].startswith("step 0 (1/10 done)") and "ETA  n/a (measuring)" in lines[0]
    assert "ETA  n/a" in lines[2]  # one measured step is not a pace yet
    assert "ETA    10 s" in lines[4]  # 5 steps left x the mean of 2.0, 2.2, 1.8 (not step 0's 40 s)


def test_bench_estimate_reads_as_durations_and_counts_what_will_run():
    from moekit.bench import gmm, timing

    assert [timing.seconds(x) for x in (0.0004, 0.106, 2.5, 42.0, 600.0)] == ["0.4 ms", "106 ms", "2.5 s", "42 s",
                                                                               "10 min"]  # fmt: skip
    shape = gmm.Shape(8, 1024, 256, 128)
    text = timing.estimate(shape, "bfloat16", 3, 3, 0.0044, 5.5e9, "cpu")
    assert "3 kernel(s) x 8 calls: about 106 ms to 739 ms plus compilation" in text and "measured here" in text
    assert not gmm.available("tokamax_triton", "cpu") and gmm.available("ragged_dot", "cpu")
