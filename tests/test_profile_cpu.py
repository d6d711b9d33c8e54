"""profile=on for real: MaxText traces the smoke experiment on CPU, moekit breaks the traced steps down and reports.

About 2-4 minutes of CPU training in all (one 1-process and one 2-process run, shared by the tests below): a
profiled run compiles without the persistent cache, so that XLA dumps the train step's HLO.
"""

from __future__ import annotations

import json
import socket

import pytest

from conftest import moekit
from moekit.observe.profiles.profile_rules import BUCKETS

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def one(profiled_smoke):
    """The documented command: `moekit train experiment=smoke profile=on` (traces steps 3..5 of 10)."""
    return profiled_smoke


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Two processes (FSDP over 2 CPU devices), steps 1..2 of 4 traced."""
    run = tmp_path_factory.mktemp("profile") / "two"
    proc = moekit(
        "train",
        "experiment=smoke",
        "profile=on",
        "cluster.processes_per_node=2",
        "train.per_device_batch_size=1",
        "train.steps=4",
        "profile.skip_steps=1",
        "profile.steps=2",
        f"cluster.coordinator_port={_free_port()}",
        f"run.dir={run}",
        timeout=1200,
    )
    return run, proc


def _profile(run):
    return json.loads((run / "profile.json").read_text())


def test_smoke_breakdown_has_the_moe_buckets_and_adds_up(one):
    run, proc = one
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    assert "step-time breakdown (traced steps 3..5" in proc.stdout and "routed-expert grouped GEMM" in proc.stdout
    prof = _profile(run)
    assert prof["provenance"]["kind"] == "measured" and "jax" in prof["provenance"]["versions"]
    (device,) = prof["devices"]
    assert device["process"] == 0 and device["module"] == "jit_train_step" and device["hlo_dump"]
    assert device["segmentation"] == "run_id" and [s["step"] for s in device["steps"]] == [3, 4, 5]
    mean = prof["mean"]
    # What the smoke model runs besides its MoE layers has named buckets too (MaxText's frames in XLA:CPU's dump).
    for bucket in ("grouped_gemm", "dispatch", "combine", "mlp_act", "attention", "norm", "embed_loss", "optimizer"):
        assert mean["buckets_s"][bucket] > 0, bucket
    for step in device["steps"]:
        total = sum(step["buckets_s"].values()) + step["idle_s"]
        assert abs(total - step["window_s"]) <= 0.05 * step["window_s"], step
        assert set(step["buckets_s"]) == {b for b, _, _ in BUCKETS}
    # The raw material stays in the run directory: the trace (JAX's reader opened it) and XLA's dump.
    assert [p.endswith(".xplane.pb") for p in prof["sources"]["traces"]] == [True]
    assert (run / "profile" / "hlo" / "process_0").is_dir() and prof["sources"]["hlo_dumps"]
    assert prof["maxtext_step_time"]["untraced_steps"] and 4 in prof["maxtext_step_time"]["traced_steps"]


def test_two_processes_give_one_breakdown_each(two):
    run, proc = two
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    prof = _profile(run)
    assert sorted(d["process"] for d in prof["devices"]) == [0, 1]
    for device in prof["devices"]:
        assert [s["step"] for s in device["steps"]] == [1, 2]
        assert device["mean"]["buckets_s"]["all_gather"] > 0  # FSDP gathers the weights across the processes
        assert device["mean"]["communication_share_of_kernel_time"] > 0


def test_report_compares_the_breakdowns(one, two, tmp_path):
    proc = moekit("report", str(one[0]), str(two[0]), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "breakdown.png" in proc.stdout and "routed-expert grouped GEMM" in proc.stdout
    text = (tmp_path / "report.md").read_text()
    assert "## Step-time breakdown" in text and "![breakdown](breakdown.png)" in text
    assert (tmp_path / "breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
