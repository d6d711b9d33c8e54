"""Cross-field checks: each names the problem and the fix; nothing launches."""

from __future__ import annotations

import pytest

from conftest import compose
from moekit.config.checks import ensure_valid, problems
from moekit.errors import ConfigError

CASES = [  # id, overrides, key of the problem, words the message must contain
    ("mesh-product", ["cluster.processes_per_node=2", "parallelism.ici.fsdp=3"], "parallelism.ici", "mesh product"),
    ("two-fills", ["parallelism.ici.data=-1"], "parallelism.ici", "more than one axis"),
    (
        "ep-divides-experts",
        ["cluster.gpus_per_node=3", "parallelism.ici.fsdp=1", "parallelism.ici.expert=3"],
        "parallelism.ici.expert",
        "do not divide evenly",
    ),
    ("batch-whole", ["train.per_device_batch_size=0.3"], "train.per_device_batch_size", "not a whole number"),
    (
        "batch-dp",
        ["cluster.processes_per_node=2", "train.per_device_batch_size=0.5", "parallelism.ici.fsdp=2"],
        "train.per_device_batch_size",
        "does not divide over 2",
    ),
    ("capacity-drops", ["moe=capacity"], "moe.capacity_factor", "drops tokens"),
    ("capacity-factor", ["moe.capacity_factor=1.0"], "moe.capacity_factor", "not dropless"),
    ("megablox-gpu", ["hardware=h200", "moe=megablox"], "moe", "interpret mode"),
    ("mxfp8-hopper", ["hardware=h200", "precision=mxfp8", "moe=tokamax"], "precision", "Blackwell"),
    ("fp8-cpu", ["precision=fp8"], "precision", "FP8 tensor cores"),
    ("tokamax-fp32-gpu", ["hardware=h200", "moe=tokamax", "precision=fp32"], "precision", "bf16/fp16 inputs"),
    (
        "gpu-procs",
        ["hardware=h200", "moe=tokamax", "cluster.gpus_per_node=8", "cluster.processes_per_node=4"],
        "cluster.processes_per_node",
        "one process per node or one per GPU",
    ),
    ("profile-window", ["profile=on", "train.steps=5"], "profile.steps", "do not fit in train.steps=5"),
]


@pytest.mark.parametrize("case, overrides, key, words", CASES, ids=[c[0] for c in CASES])
def test_problem_is_reported(case, overrides, key, words):
    found = problems(compose("smoke", overrides))
    assert any(p.key == key and words in p.what for p in found), found
    assert all(p.fix for p in found)
    with pytest.raises(ConfigError, match="nothing was launched"):
        ensure_valid(compose("smoke", overrides))


def test_escape_hatches_silence_their_check():
    assert problems(compose("smoke", ["moe=capacity", "moe.allow_token_dropping=true"])) == []
    assert problems(compose("smoke", ["hardware=h200", "moe=megablox", "moe.force=true"])) == []


def test_smoke_has_no_problem():
    assert problems(compose("smoke")) == []
