"""Numbers a user can trust: which runs compare (observe.reports.comparable), the host load a run records
(run/host_load.py), and figures printed with significant digits (base/figures.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from moekit.base.figures import significant
from moekit.bench import gmm
from moekit.observe.reports import comparable
from moekit.run import host_load

MODEL = {"num_layers": 2, "emb_dim": 64}
SETUP = comparable.Setup(MODEL, 256.0, "cpu", 1)


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (comparable.Setup({**MODEL, "num_layers": 3}, 256.0, "cpu", 1), "another model"),
        (comparable.Setup(MODEL, 512.0, "cpu", 1), "other tokens per step (512 vs 256 per device)"),
        (comparable.Setup(MODEL, 256.0, "h100", 1), "other hardware (h100 x1 vs cpu x1)"),
        (comparable.Setup(MODEL, 256.0, "cpu", 2), "other hardware (cpu x2 vs cpu x1)"),
        (SETUP, None),
    ],
)
def test_runs_compare_only_on_one_setup(other, why):
    assert comparable.differs(SETUP, other) == why
    got = comparable.compare(SETUP, comparable.Measured(100.0, 0.01, 0.0), other, comparable.Measured(150.0, 0.01, 0.0))
    assert got.why == why and (got.speedup == 1.5) == (why is None)


def test_a_busier_host_or_a_difference_within_the_spread_is_no_speed_up():
    quiet, busy = comparable.Measured(100.0, 0.02, 0.05), comparable.Measured(37.0, 0.02, 0.55)
    got = comparable.compare(SETUP, quiet, SETUP, busy)  # the issue's "0.37x": a smoke run beside other work
    assert got.speedup is None and got.ratio == pytest.approx(0.37)
    assert got.text() == "n/a (different host load: others took 5% vs 55% of the CPU; ratio 0.37)"
    noisy = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.10, 0.0), SETUP, comparable.Measured(108.0, 0.03, 0.1)
    )
    assert noisy.speedup is None and "within noise (±10%)" in noisy.text()
    real = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.03, 0.0), SETUP, comparable.Measured(141.0, 0.03, 0.1)
    )
    assert real.text() == "1.41x"
    one = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.01, None), SETUP, comparable.Measured(200.0, 0.01, 0.0)
    )
    assert one.speedup is None and one.why.startswith("host load unknown for the base run")
    both = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.01, None), SETUP, comparable.Measured(200.0, 0.01, None)
    )  # an unknown share is never compared, not even with another unknown one
    assert both.speedup is None and both.why.startswith("host load unknown for the base run and this run")
    assert comparable.compare(SETUP, comparable.Measured(None), SETUP, quiet).why == "too few steady steps"


def test_measured_reads_a_summary_and_a_host_load_record():
    stats = {"tokens_per_s_per_device": 80.0, "step_time_s": {"median": 2.0, "stdev": 0.1, "min": 1.9, "max": 2.2}}
    m = comparable.Measured.of(stats, {"others_share": 0.3})
    assert (m.rate, m.spread, m.others_share) == (80.0, pytest.approx(0.05), 0.3)
    assert comparable.Measured.of({}, None) == comparable.Measured(None, None, None)


def test_two_runs_of_the_same_configuration_are_never_a_speed_up():
    """Identical configurations passed as 0.81x and 0.74x speed-ups: the same training configuration (every
    key that reaches the training step equal: config/training_step.py) measures the host's noise, and the comparison
    says so."""
    config = {"model": MODEL, "train": {"per_device_batch_size": 2, "seq_len": 128}, "hardware": {"name": "cpu"}}
    a = comparable.Setup.of(config | {"run": {"dir": "/a"}}, 1)
    b = comparable.Setup.of(config | {"run": {"dir": "/b"}}, 1)
    got = comparable.compare(a, comparable.Measured(100.0, 0.01, 0.1), b, comparable.Measured(81.0, 0.01, 0.1))
    assert got.speedup is None and got.ratio == pytest.approx(0.81)
    assert got.text() == "n/a (same training configuration: the two measured 23% apart, this host's noise; ratio 0.81)"
    other = comparable.Setup.of(config | {"xla": {"flags": ["x"]}}, 1)  # another XLA setting: a real comparison
    assert comparable.compare(
        a, comparable.Measured(100.0, 0.01, 0.1), other, comparable.Measured(81.0, 0.01, 0.1)
    ).speedup


def _sample(load1: float, busy: int, total: int, procs: dict) -> host_load.Sample:
    """procs: pid -> (name, parent, ticks with exited children[, own ticks alone: the same when left out])."""
    return host_load.Sample(load1, busy, total, {pid: (*p, p[2])[:4] for pid, p in procs.items()})


def test_a_neighbour_that_exits_between_samples_is_counted_and_the_run_own_exited_children_are_not():
    """Three samples, 1000 ticks apart. Between the first two a neighbour (pid 30) starts, burns 400 ticks and
    exits, so no sample sees it: the host's busy time still holds it. Between the last two the run's worker (11)
    exits and its 300 ticks move into moekit's (10) cutime: the run's own, never "other"."""
    s0 = _sample(0.5, 100, 1000, {10: ("moekit", 1, 0), 11: ("python", 10, 0), 20: ("other", 1, 100)})
    s1 = _sample(1.5, 700, 2000, {10: ("moekit", 1, 50), 11: ("python", 10, 200), 20: ("other", 1, 200)})
    s2 = _sample(2.5, 1100, 3000, {10: ("moekit", 1, 50 + 300 + 10), 20: ("other", 1, 250)})
    first, second = host_load.interval(s0, s1, 10), host_load.interval(s1, s2, 10)
    assert (first.own, first.others_ticks) == (250, 350)  # 600 busy: 250 the run's, 100 pid 20's, 250 the neighbour's
    assert (second.own, second.others_ticks) == (110, 290)
    got = host_load.record([first, second], [0.5, 1.5, 2.5], cpus=2, interval_s=5)
    assert got["busy_share"] == 0.5 and got["others_share"] == pytest.approx(0.32)
    assert got["others_share_range"] == [0.29, 0.35] and got["own_share"] == pytest.approx(0.18)
    assert [o["name"] for o in got["others"]] == ["other"]  # the named hint: pid 20, seen at each sample
    assert got["load1"] == {"min": 0.5, "median": 1.5, "max": 2.5} and got["samples"] == 3
    assert host_load.own_tree(s1.procs, 10) == {10, 11}
    assert host_load.record([], [0.5], 2) is None


def test_a_killed_attempt_makes_the_run_host_load_unknown():
    known = {"busy_share": 0.5, "own_share": 0.3, "others_share": 0.2}
    assert host_load.over_attempts([(known, 10.0)]) == known
    both = host_load.over_attempts([(known, 10.0), (known | {"others_share": 0.5}, 30.0)])
    assert both["others_share"] == pytest.approx(0.425) and both["attempts"] == 2
    killed = host_load.over_attempts([(host_load.unknown("killed"), 133.0), (known, 30.0)])
    assert killed["others_share"] is None and "attempt(s) 1 recorded no host load" in killed["unknown"]
    assert host_load.over_attempts([(known, 10.0), (None, 0.0)]) == known  # launched nothing: adds nothing


def test_a_neighbour_that_exits_mid_run_is_counted_on_this_host():
    """Real /proc: the "run" is an idle process; a busy neighbour (this test's child, outside the run's tree)
    starts after the first sample and exits before the last. Its CPU time (what the kernel charged this test for
    it) is inside others' share: before, only processes alive at the last sample were counted."""
    import resource

    run = subprocess.Popen(["sleep", "30"])
    try:
        sampler = host_load.Sampler(interval_s=0.5, root=run.pid)
        with sampler.running():
            time.sleep(0.3)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.2: pass"])
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            time.sleep(0.3)
    finally:
        run.kill()
        run.wait()
    got = sampler.result
    burnt = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    seconds = sum(i.total for i in sampler.intervals) / host_load._ticks_per_s()  # CPU seconds of all CPUs
    assert burnt > 0.1 and got is not None
    assert got["others_share"] * seconds >= 0.8 * burnt, (got, burnt, seconds)


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.004123, "0.00412"), (12.345, "12.3"), (4567.8, "4568"), (99.96, "100"), (0.0, "0"), (None, "-")],
)
def test_figures_keep_significant_digits(value, text):
    assert significant(value) == text


def test_a_cpu_gmm_table_prints_no_zero():
    """bench gmm on CPU: 0.02 TFLOP/s printed as 0.0 before; now its digits show."""
    shape = {"groups": 4, "rows": 64, "k": 32, "n": 32, "tflop_per_call": 1e-6}
    row = {
        "backend": "ragged_dot",
        "groups": "even",
        "ms": 0.0412,
        "tflops": 0.0243,
        "of_ceiling": 0.0004,
        "runs_as": "cpu",
        "error": None,
    }
    text = gmm.format_table({"shape": shape, "dtype": "float32", "rows": [row]})
    assert "| 0.0412 | 0.0243 | 0.040% |" in text


# The issue's run (checkpoint.every=3, 14 steps, CPU): each save's step, the refill after it, the step that did the
# refill's work. Tokens per step 256; tokens/s of a step = 256 / its time, as MaxText records it.
ISSUE_TIMES = [9.1, 4.38, 0.056, 3.50, 5.53, 0.007, 3.26, 4.9, 0.03, 3.41, 4.6, 0.02, 3.3, 4.5]
NO_SAVES = [9.0, 0.05, 3.45, 1.74, 1.8, 1.71, 1.77, 1.69, 1.75, 1.8, 1.72, 1.76, 1.74, 1.73]


def _metrics(times):
    from moekit.observe.runs import metrics, summary

    rows = [{"step": i, summary.STEP_TIME: t, summary.TOKENS: 256 / t} for i, t in enumerate(times)]
    return metrics.Metrics(rows)


def test_a_save_every_three_steps_leaves_no_clean_window_and_no_doubled_step_makes_a_rate():
    """The issue's checkpoint.every=3 run, judged without events: each save, the short refill and the step holding
    its work leave no window between saves, so there is no steady number (never one from a doubled or a paired
    step); the rate with saves is the same rule with the saves counted, below the plain run's."""
    from moekit.observe.runs import summary

    s = summary.summarize(_metrics(ISSUE_TIMES), {}, checkpoint_every=3)
    assert s["tokens_per_s_per_device"] is None and "too few steady steps (0 of 14" in s["note"]
    assert [e["step"] for e in s["excluded"] if e["reason"] == "checkpoint save"] == [1, 4, 7, 10, 13]
    with_saves = s["checkpoint"]["with_saves"]
    assert [w["steps"] for w in with_saves["windows"]] == [[3, 13]]
    assert with_saves["tokens_per_s_per_device"] == pytest.approx(11 * 256 / sum(ISSUE_TIMES[3:]))
    plain = summary.summarize(_metrics(NO_SAVES), {}, checkpoint_every=0)
    assert plain["tokens_per_s_per_device"] == pytest.approx(11 * 256 / sum(NO_SAVES[3:]))
    assert with_saves["tokens_per_s_per_device"] < plain["tokens_per_s_per_device"]


def test_a_checkpoint_saved_before_the_signal_is_not_claimed_as_saved_after_it():
    """The issue's SIGINT record: the checkpoint was committed 2.4 s before the signal; the record says so."""
    import signal as sig

    from moekit.run import preemption

    notice = preemption.Notice()
    notice.signum, notice.at, notice.wall = sig.SIGINT, 50.0, 1000.0
    before = preemption.stop(notice, 51.0, 7, None, 6, save_began=997.6)
    assert before.saved and not before.saved_after_signal and before.to_dict()["checkpoint_saved_after_signal"] is False
    assert "checkpoint of step 6 saved 2.4 s before the signal, none after it" in before.failure(130).evidence
    after = preemption.stop(notice, 51.0, 7, None, 7, save_began=1000.5)
    assert after.saved_after_signal and "checkpoint of step 7 saved after the signal" in after.failure(130).evidence


def test_a_stop_after_the_last_step_leaves_a_finished_run():
    from moekit.run import preemption

    stop = preemption.Stop("moekit received SIGTERM", 0.4, 9, 9, True)
    assert preemption.after_the_last_step(stop, last_step=9, planned_steps=10)
    assert not preemption.after_the_last_step(stop, last_step=8, planned_steps=10)
    assert not preemption.after_the_last_step(None, last_step=9, planned_steps=10)


def test_steps_that_never_ran_are_not_missing():
    from moekit.observe.runs import metrics, summary

    def summarized(steps):
        return summary.summarize(
            metrics.Metrics([{"step": s, summary.STEP_TIME: 1.0} for s in steps]), {}, 0, planned_steps=10
        )

    stopped = summarized(range(5))  # preempted after step 4: steps 5-9 never ran
    assert stopped["missing_steps"] == [] and stopped["steps_not_run"] == [5, 6, 7, 8, 9]
    gap = summarized([0, 1, 3, 4, 5, 6, 7, 8, 9])  # step 2 ran (3 did) but left no record
    assert gap["missing_steps"] == [2] and gap["steps_not_run"] == []
    text = summary.format_summary(stopped, "cpu", "no peak")
    assert "not run          steps 5-9" in text and "no record" not in text


def test_a_summary_keeps_every_attempt_wall_time():
    from moekit.rundir import records

    s = records.Summary(wall_s=30.5, wall_s_lower_bound=True, wall_s_attempts=[12.0, None, 18.5], stats={"steps": 3})
    back = records.Summary.from_dict(s.to_dict())
    assert back.wall_s == 30.5 and back.wall_s_attempts == [12.0, None, 18.5] and back.stats == {"steps": 3}
    assert back.wall_s_lower_bound
    m = records.Manifest(status="ok", ended="x", wall_s=18.5, host_load={"others_share": 0.1})
    assert records.Manifest.from_dict(m.to_dict()).host_load == {"others_share": 0.1}


def test_the_tune_table_prints_cpu_figures_and_the_comparison_rule():
    """tune on CPU printed TFLOP/s as 0.0; a candidate within its reference's spread shows no speed-up."""
    from moekit.series import tune_table

    ref = {"role": "reference", "overrides": ["experiment=smoke"], "status": "ok", "step_time_s": 0.0943,
           "tflops_per_device": 0.00412, "tokens_per_s_per_device": 2726.4, "spread": 0.05, "others_share": 0.1,
           "accepted": True}  # fmt: skip
    cand = ref | {"role": "candidate", "overrides": ["moe=dense"], "tokens_per_s_per_device": 2800.0}
    cand["vs_reference"] = _versus(ref, cand)
    table = tune_table.format_table([ref, cand])
    assert "| 0.0943 | 0.00412 | 2726 | - |" in table and "| 0.0 |" not in table
    assert "n/a (within noise (±5%); ratio 1.03)" in table


def _versus(ref, cand):
    from conftest import compose
    from moekit.series import tuning

    return tuning.versus(compose("smoke"), ref, cand).text()


@pytest.mark.integration
def test_a_sigterm_after_the_last_step_leaves_a_finished_run(tmp_path):
    """Real CPU run: SIGTERM to moekit once the last step is recorded. The run is finished (status ok, exit 0), its
    manifest says when the stop came, and no step is missing or unrun."""
    import json
    import os
    import signal as sig

    from conftest import recorded_steps, start_moekit, wait_until

    run, steps = tmp_path / "run", 3
    command = ["train", "experiment=smoke", "precision=fp32", f"train.steps={steps}", "checkpoint.every=1000"]
    proc = start_moekit(command, run)
    wait_until(proc, lambda: max(recorded_steps(run / "metrics.jsonl"), default=-1) >= steps - 1, "the last step")
    os.kill(proc.pid, sig.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert proc.returncode == 0 and manifest["status"] == "ok" and manifest["failure"] is None, out[-3000:]
    assert (manifest["preemption"] or {}).get("after_the_last_step"), manifest  # the record says when it came
    assert "came after the last step: the run is finished" in out
    assert summary["missing_steps"] == [] and summary["steps_not_run"] == [], summary
