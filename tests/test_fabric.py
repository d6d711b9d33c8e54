"""The fabric check: the verdict on what ranks measured (pure), its translation, and the phase itself in real
local multi-process jobs (moekit fabric, and the phase before training), with planted faults."""

from __future__ import annotations

import json
import socket
import time

import pytest

from conftest import compose, live_workers, moekit
from moekit.base import failures
from moekit.config.kinds.hardware import link_table
from moekit.observe.reports import fabric_report
from moekit.translate import fabric as tfabric
from moekit.translate import fabric_verdict as fv
from moekit.worker import fabric

H200_LINKS = tfabric.spec(compose("smoke", ["hardware=h200"]), "<run.dir>")["links"]  # the h200 row's link classes
H200 = fv.expected_rates(link_table(), H200_LINKS)
SMALL = ("experiment=smoke", "cluster.processes_per_node=2")


def _ranks(times, correct=None, cls=fv.SCALE_UP, group_size=2):
    correct = correct or [True] * len(times)
    return [
        fv.RankResult(r, f"h{r // 8}", r // group_size, cls, group_size, t, ok)
        for r, (t, ok) in enumerate(zip(times, correct, strict=True))
    ]


def test_collectives_follow_the_mesh():
    names = lambda mesh: [(c.name, c.axes) for c in fv.collectives(mesh)]  # noqa: E731
    assert names({"data": 1, "fsdp": 2, "tensor": 1, "expert": 1}) == [
        ("all_reduce", ("fsdp",)),
        ("all_gather", ("fsdp",)),
    ]
    assert names({"data": 1, "fsdp": 4, "tensor": 1, "expert": 8}) == [
        ("all_reduce", ("fsdp", "expert")),
        ("all_to_all", ("expert",)),
        ("all_gather", ("fsdp",)),
    ]
    assert names({"data": 1, "fsdp": 1, "tensor": 1, "expert": 1}) == []


def test_bus_bandwidth_is_nccl_tests_convention():
    ar, a2a = fv.Collective("all_reduce", ("fsdp",)), fv.Collective("all_to_all", ("expert",))
    assert fv.bus_gb_per_s(ar, 1 << 30, 8, 1.0) == pytest.approx((1 << 30) * 2 * 7 / 8 / 1e9)
    assert fv.bus_gb_per_s(a2a, 1 << 30, 8, 1.0) == pytest.approx((1 << 30) * 7 / 8 / 1e9)
    assert fv.bus_gb_per_s(ar, 1 << 30, 1, 1.0) is None


def test_link_class_and_expected_rates_are_plans():
    assert fv.link_class([0, 0, 0]) == fv.SCALE_UP and fv.link_class([0, 1]) == fv.SCALE_OUT
    assert H200[fv.SCALE_UP]["gb_per_s"] == 450 and H200[fv.SCALE_UP]["link"] == "nvlink4"
    assert H200[fv.SCALE_OUT]["gb_per_s"] == 50 and "ConnectX-7" in H200[fv.SCALE_OUT]["source"]
    assert fv.expected_rates(link_table(), tfabric.spec(compose("smoke"), "<run.dir>")["links"]) == {}


def test_a_slow_group_is_named_with_its_rank_host_and_link_class():
    a2a = fv.Collective("all_to_all", ("expert",))
    size = 256 << 20
    fast = size * 0.5 / (400e9)  # 400 GB/s bus bandwidth in a group of 2
    ranks = _ranks([fast, fast, fast, fast * 4], group_size=2)  # group 1 (ranks 2, 3) at a quarter
    out = fv.judge(a2a, size, ranks, H200, 0.5, judge_rate=True)
    (problem,) = out["problems"]
    assert problem["kind"] == fv.SLOW and problem["rank"] == 3 and problem["host"] == "h0"
    assert problem["link_class"] == fv.SCALE_UP and "ranks [2, 3]" in problem["what"]
    assert out["ratio"] == pytest.approx(100 / 450) and out["expected_gb_per_s"] == 450
    assert fv.judge(a2a, size, ranks, H200, 0.5, judge_rate=False)["problems"] == []  # small sizes: latency
    assert fv.judge(a2a, size, ranks, H200, 0.2, judge_rate=True)["problems"] == []


def test_a_wrong_result_is_named_and_cpu_has_no_rate_verdict():
    ar = fv.Collective("all_reduce", ("fsdp",))
    out = fv.judge(ar, 1 << 20, _ranks([1.0, 1.0], [True, False]), {}, 0.5, judge_rate=True)
    (problem,) = out["problems"]
    assert problem["kind"] == fv.WRONG and problem["rank"] == 1 and "1 MiB" in problem["what"]
    assert out["ratio"] is None and out["gb_per_s"] > 0


def test_report_rows_put_the_bandwidth_beside_plans_rate():
    a2a = fv.Collective("all_to_all", ("expert",))
    size = 256 << 20
    result = fv.judge(a2a, size, _ranks([size * 0.5 / 225e9] * 2), H200, 0.5, judge_rate=True)
    record = {"results": [result], "link_names": fv.link_names("gpu")}
    (row,) = fabric_report.rows("A", record)
    assert row[:5] == ["A", "all_to_all", "256 MiB", "1 x 2", "within an NVLink domain"]
    assert row[6:] == ["225", "450", "50%", "all ranks"]


def test_the_failure_line_is_the_fabric_class():
    assert failures.classify(3, f"{fv.FAILURE} rank 2 (host n1) did not enter all_to_all/1MiB").name == "fabric"
    assert failures.classify(1, f"{fv.WARNING} all_reduce of 1 MiB ran at 1 GB/s").name == "error"  # report mode


def test_spec_follows_the_config():
    cfg = compose("smoke", ["cluster.processes_per_node=2"])
    spec = tfabric.spec(cfg, "/r")
    assert spec["ici"]["fsdp"] * spec["dcn"]["fsdp"] == 2 and spec["file"] == "/r/fabric.json"
    assert spec["mode"] == "report" and spec["sizes"] == [65536, 1048576]  # the smoke experiment's small sizes
    (var,) = tfabric.env_vars(cfg, "/r")
    assert var.name == fv.FABRIC_ENV and json.loads(var.value) == spec
    assert tfabric.env_vars(compose("smoke", ["fabric.mode=off"]), "/r") == []


def test_bad_fabric_values_are_refused_before_launch(tmp_path):
    proc = moekit("fabric", *SMALL, "fabric.mode=off", f"run.dir={tmp_path}")
    assert proc.returncode == 2 and "fabric.mode=off" in proc.stderr, proc.stderr
    proc = moekit("train", *SMALL, "fabric.sizes=[2]", f"run.dir={tmp_path}")
    assert proc.returncode == 2 and "fabric.sizes" in proc.stderr, proc.stderr


@pytest.mark.integration
def test_two_process_training_runs_the_phase_at_small_cost(local_two_process_run, tmp_path):
    """The phase ran in the training processes (after the rendezvous, before the model), wrote fabric.json with
    every rank's numbers, and took at most 5% of the run's wall time."""
    run, proc = local_two_process_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((run / fv.RECORD).read_text())
    assert [r["collective"] for r in record["results"]] == ["all_reduce"] * 2 + ["all_gather"] * 2
    assert all(p["correct"] for r in record["results"] for p in r["per_rank"]) and not record["problems"]
    assert {p["rank"] for p in record["results"][0]["per_rank"]} == {0, 1}
    assert "fabric check: 2 devices" in proc.stderr
    wall = json.loads((run / "summary.json").read_text())["wall_s"]
    assert record["wall_s"] <= 0.05 * wall, (record["wall_s"], wall)
    log = (run / "maxtext.log").read_text()
    assert log.index("moekit: rendezvous complete") < log.index(fv.SUMMARY) < log.index("completed step")
    shown = moekit("report", str(run), "--out", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "| all_gather | 1 MiB | 1 x 2 | within a node |" in shown.stdout, shown.stdout
    assert "## Fabric check" in (tmp_path / "report.md").read_text()


@pytest.mark.integration
def test_one_process_says_what_it_checked(smoke_sweep):
    folder, proc = smoke_sweep
    record = json.loads((folder / "0" / fv.RECORD).read_text())
    assert record["checked"] == "1 device(s): no collective to check" and record["results"] == []


@pytest.mark.integration
def test_four_processes_check_the_expert_all_to_all(tmp_path):
    """moekit fabric alone (no training): 4 processes on an fsdp=2 x expert=2 mesh, every collective checked. The
    smoke experiment's MoE layer (ragged all-to-all, which XLA:CPU cannot run) does not matter: nothing trains."""
    run = tmp_path / "ep"
    proc = moekit(
        "fabric", "experiment=smoke", "cluster.processes_per_node=4", "parallelism.ici.expert=2",
        "parallelism.ici.fsdp=2", f"run.dir={run}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fabric check: rendezvous, then each collective" in proc.stderr and "compiles" not in proc.stderr
    record = json.loads((run / fv.RECORD).read_text())
    got = {(r["collective"], r["groups"], r["group_size"]) for r in record["results"]}
    assert got == {("all_reduce", 1, 4), ("all_to_all", 2, 2), ("all_gather", 2, 2)}
    assert all(p["correct"] for r in record["results"] for p in r["per_rank"]) and not record["problems"]
    assert not (run / "metrics.jsonl").exists()  # fabric.only: no training


@pytest.mark.integration
@pytest.mark.parametrize(
    "fault, said",
    [
        pytest.param("stop", "did not arrive at", marks=pytest.mark.soak),
        ("hang", "did not enter"),
        pytest.param("stop_early", "did not arrive at start", marks=pytest.mark.soak),
    ],
)
def test_a_rank_that_stops_inside_the_check_is_named_within_the_bound(tmp_path, fault, said):
    """stop: rank 1 never reaches a collective (the others wait at the meeting); hang: it reaches it and never
    takes part (the others block inside it, the watchdog bounds them). Either way rank 1 and its host are named."""
    run, timeout_s = tmp_path / fault, 8
    start = time.monotonic()
    proc = moekit(
        "fabric", *SMALL, f"fabric.timeout_s={timeout_s}", f"run.dir={run}", env={fabric.FAULT_ENV: f"{fault}:1"}
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["failure"]["class"] == "fabric", manifest["failure"]
    assert f"rank 1 (host {socket.gethostname()}) {said}" in manifest["failure"]["evidence"], manifest["failure"]
    assert "link class scale_up" in manifest["failure"]["evidence"]
    assert elapsed < timeout_s + 60, elapsed
    assert live_workers(run) == {}
    assert json.loads((run / fv.RECORD).read_text())["problems"][0]["kind"] == fv.MISSING


@pytest.mark.integration
def test_a_planted_wrong_result_refuses_to_train_in_enforce_mode(tmp_path):
    run = tmp_path / "wrong"
    proc = moekit("train", *SMALL, "fabric.mode=enforce", f"run.dir={run}", env={fabric.FAULT_ENV: "wrong_result:1"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    failure = json.loads((run / "manifest.json").read_text())["failure"]
    assert failure["class"] == "fabric" and "wrong result on rank 1" in failure["evidence"], failure
    assert not (run / "metrics.jsonl").exists()  # nothing trained
    assert failures.classify(1, (run / "maxtext.log").read_text()).name == "fabric"
    assert live_workers(run) == {}


@pytest.mark.integration
def test_a_rank_on_a_wrong_coordinator_is_classified_within_the_bound(tmp_path):
    """Rank 1 joins a coordinator address where no job listens: the run fails as a rendezvous timeout within
    cluster.rendezvous_timeout_s (plus start-up), before the fabric check or training, with no process left."""
    run, timeout_s = tmp_path / "lost", 10
    start = time.monotonic()
    proc = moekit(
        "fabric", *SMALL, f"cluster.rendezvous_timeout_s={timeout_s}", f"run.dir={run}",
        env={fabric.FAULT_ENV: "coordinator:1"},
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert proc.returncode == failures.RENDEZVOUS_TIMEOUT.exit_status, proc.stderr[-3000:]  # 75: a JobSet fails on it
    failure = json.loads((run / "manifest.json").read_text())["failure"]
    assert failure["class"] == "rendezvous_timeout", failure
    assert elapsed < timeout_s + 90, elapsed
    assert live_workers(run) == {}
    assert not (run / fv.RECORD).exists()
