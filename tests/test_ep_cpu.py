"""Expert parallelism across 2 real processes on CPU gives the single process's losses.

XLA:CPU has no ragged all-to-all, so EP on CPU uses MaxText's ring of experts (tokens all-gathered over
the expert axis, each process computes its local experts, results reduce-scattered) with the megablox
grouped GEMM. The control is the plain one-process smoke run with the same global batch (2 sequences);
fp32 so that reduction order is not mistaken for a routing or sharding difference.
"""

from __future__ import annotations

import json

import pytest

from conftest import losses, moekit
from moekit.observe.runs import routing

pytestmark = [pytest.mark.integration, pytest.mark.soak]

STEPS = 5
EP2 = [
    "moe=megablox",
    "moe.dispatch=ring",
    "cluster.processes_per_node=2",
    "parallelism.ici.expert=2",
    "parallelism.ici.fsdp=1",
    "train.per_device_batch_size=1",
]


def test_expert_parallel_two_processes_match_one(tmp_path):
    common = ["train", "experiment=smoke", "precision=fp32", f"train.steps={STEPS}"]
    one = moekit(*common, f"run.dir={tmp_path / 'one'}", "train.per_device_batch_size=2")
    two = moekit(*common, f"run.dir={tmp_path / 'ep2'}", *EP2)
    assert one.returncode == 0, one.stderr + one.stdout[-2000:]
    assert two.returncode == 0, two.stderr + two.stdout[-2000:]

    job = json.loads((tmp_path / "ep2" / "job.json").read_text())
    assert len(job["processes"]) == 2
    for arg in ("ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "use_ring_of_experts=true", "megablox=true"):
        assert arg in job["maxtext_args"], arg

    a, b = losses(tmp_path / "one"), losses(tmp_path / "ep2")
    b1 = losses(tmp_path / "ep2", "metrics.1.jsonl")
    assert len(a) == len(b) == STEPS
    assert a[-1] < a[0]  # it trained
    # Measured 2026-12-03 (2-core CPU, MaxText 0.2.5, jax 0.12.0.1): largest difference 1e-6 over 6 steps.
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-4
    assert b == b1

    # The routing load per EP rank: the same counts as one process at step 0 (same weights, same batch), and the
    # summary's rank measures for EP 2 (experts 0-3 on rank 0, 4-7 on rank 1).
    one_rec, ep_rec = (routing.read(tmp_path / d / routing.FILE) for d in ("one", "ep2"))
    assert ep_rec[0]["ep"] == 2 and ep_rec[0]["counts"][0] == one_rec[0]["counts"][0]
    section = json.loads((tmp_path / "ep2" / "summary.json").read_text())[routing.KEY]
    assert section["ep"] == 2 and 1.0 <= section["rank_max_over_mean"]["max"] <= section["max_over_mean"]["max"]
