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
    got = comparable.compare(SETUP, quiet, SETUP, busy)  # the "0.37x": a smoke run beside other work
    assert got.speedup is None and got.ratio == pytest.approx(0.37)
    assert got.text() == "n/a (different host load: others took 5% vs 55% of the CPU; ratio 0.37)"
    noisy = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.10, 0.0), SETUP, comparable.Measured(108.0, 0.03, 0.1)
    )
    assert noisy.speedup is None and "within the runs' own spread (±10%)" in noisy.text()
    real = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.03, 0.0), SETUP, comparable.Measured(141.0, 0.03, 0.1)
    )
    assert real.text() == "1.41x"
    one = comparable.compare(
        SETUP, comparable.Measured(100.0, 0.01, None), SETUP, comparable.Measured(200.0, 0.01, 0.0)
    )
    assert one.why == "host load recorded for one run only"
    assert comparable.compare(SETUP, comparable.Measured(None), SETUP, quiet).why == "too few steady steps"


def test_measured_reads_a_summary_and_a_host_load_record():
    stats = {"tokens_per_s_per_device": 80.0, "step_time_s": {"median": 2.0, "stdev": 0.1, "min": 1.9, "max": 2.2}}
    m = comparable.Measured.of(stats, {"others_share": 0.3})
    assert (m.rate, m.spread, m.others_share) == (80.0, pytest.approx(0.05), 0.3)
    assert comparable.Measured.of({}, None) == comparable.Measured(None, None, None)


def _sample(load1: float, busy: int, total: int, procs: dict) -> host_load.Sample:
    return host_load.Sample(load1, busy, total, procs)


def test_a_host_load_record_names_other_busy_processes_not_the_run_own():
    first = _sample(0.5, 0, 1000, {10: ("moekit", 1, 0), 11: ("python", 10, 0), 20: ("other", 1, 100)})
    last = _sample(
        2.5, 900, 2000, {10: ("moekit", 1, 50), 11: ("python", 10, 400), 20: ("other", 1, 500), 21: ("new", 1, 30)}
    )
    got = host_load.record(first, last, [0.5, 1.5, 2.5], {10, 11}, cpus=2, interval_s=5)
    assert got["busy_share"] == 0.9 and got["others_share"] == pytest.approx(0.43)
    assert [o["name"] for o in got["others"]] == ["other", "new"]  # the run's own tree is not "other"
    assert got["load1"] == {"min": 0.5, "median": 1.5, "max": 2.5} and got["samples"] == 3
    assert host_load.own_tree(last.procs, 10) == {10, 11}
    assert host_load.record(first, first, [0.5], set(), 2) is None


def test_the_sampler_sees_a_busy_process_beside_the_run(monkeypatch):
    """Real /proc: a busy process started outside this test's own tree shows in others (every other process is
    listed here: the shared host has busier ones than the top 5)."""
    monkeypatch.setattr(host_load, "TOP", 100_000)
    outside = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -c 'while True: pass' & echo $!"], stdout=subprocess.PIPE
    )
    pid = int(outside.stdout.readline())  # orphaned to init: not in this process's tree
    try:
        sampler = host_load.Sampler(interval_s=0.2)
        with sampler.running():
            time.sleep(1.5)
    finally:
        subprocess.run(["kill", str(pid)], check=False)
        outside.wait()
    got = sampler.result
    assert got is not None and got["samples"] >= 3 and got["cpus"] >= 1
    mine = [o for o in got["others"] if o["pid"] == pid]
    assert mine and mine[0]["cpu_share"] >= 0.1 / got["cpus"], got
    assert got["others_share"] >= mine[0]["cpu_share"]


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
