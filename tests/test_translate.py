"""Translation tables: config -> MaxText args, XLA flags, env."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import compose
from moekit.translate.job import build, per_process
from moekit.translate.values import maxtext as format_value

CASES = [  # id, overrides, args that must appear, args that must not
    ("grouped-default", [], ["sparse_matmul=true", "megablox=false", "capacity_factor=-1.0"], ["megablox=true"]),
    ("dense-dropless", ["moe=dense"], ["sparse_matmul=false", "capacity_factor=-1.0"], ["sparse_matmul=true"]),
    ("tokamax", ["moe=tokamax"], ["megablox=false", "use_tokamax_gmm=true"], ["megablox=true"]),
    ("str-not-bool", ["run.name=off"], ["run_name='off'"], ["run_name=off"]),
    ("str-not-number", ["run.name=123"], ["run_name='123'"], ["run_name=123"]),
    ("one-process-skips-rendezvous", [], ["skip_jax_distributed_system=true"], []),
    (
        "two-processes-rendezvous",
        ["cluster.processes_per_node=2"],
        ["ici_fsdp_parallelism=2"],
        ["skip_jax_distributed_system=true"],
    ),
    ("extra-wins", ["maxtext.extra.sparse_matmul=false"], ["sparse_matmul=false"], ["sparse_matmul=true"]),
    ("fp32", ["precision=fp32"], ["dtype=float32"], ["dtype=bfloat16"]),
    ("checkpointing", ["checkpoint.every=5"], ["enable_checkpointing=true", "checkpoint_period=5"], []),
    ("profile-off", [], [], ["profiler=xplane", "jax_cache_dir=''"]),
    (
        "profile-on",
        ["profile=on", "profile.skip_steps=4", "profile.steps=2"],
        [
            "profiler=xplane",
            "skip_first_n_steps_for_profiler=4",
            "profiler_steps=2",
            "upload_all_profiler_results=true",
        ],
        [],
    ),
]


@pytest.mark.parametrize("case, overrides, present, absent", CASES, ids=[c[0] for c in CASES])
def test_maxtext_args(case, overrides, present, absent):
    args = build(compose("smoke", overrides), "/r", "/r/metrics.jsonl").maxtext_args
    for a in present:
        assert a in args
    for a in absent:
        assert a not in args
    keys = [a.split("=", 1)[0] for a in args]
    assert len(keys) == len(set(keys)), "a key appears twice"


@pytest.mark.parametrize(
    "value, text",
    [
        (True, "true"),
        (None, "null"),
        (3, "3"),
        (0.5, "0.5"),
        ("off", "'off'"),
        ("yes", "'yes'"),
        ("1e3", "'1e3'"),
        ("", "''"),
        ("bfloat16", "bfloat16"),
        ("it's", "'it''s'"),
        ("/tmp/run-1", "/tmp/run-1"),
    ],
)
def test_format_value_keeps_strings_strings(value, text):
    assert format_value(value) == text


# What a job is built into (argv of two processes, XLA flags, environment), printed by a fresh interpreter.
_BUILD = """
import json, sys
from moekit.config.compose import compose
from moekit.translate.job import build
cfg = compose(["experiment=smoke", *sys.argv[1:]])
job = build(cfg, "/r", "/r/m")
print(json.dumps([job.argv(0), job.argv(1), job.xla_flags, sorted(job.env_dict.items())]))
"""


MANY_PARTS = ["profile=on", "checkpoint.every=5", "cluster.processes_per_node=2", "xla=blog"]


@pytest.mark.parametrize("overrides", [[], MANY_PARTS], ids=["smoke", "many-parts"])
def test_translation_is_deterministic(overrides):
    """The same config gives the same job in interpreters whose string hashes differ (set and dict order)."""
    built = {
        seed: subprocess.run(
            [sys.executable, "-c", _BUILD, *overrides],
            capture_output=True, text=True, check=True, env=os.environ | {"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert len(set(built.values())) == 1, built
    assert json.loads(built["1"])[0] == build(compose("smoke", overrides), "/r", "/r/m").argv(0)


def test_cpu_env_and_host_devices():
    job = build(compose("smoke", ["cluster.gpus_per_node=4", "cluster.processes_per_node=2"]), "/r", "/r/m")
    assert job.env_dict["JAX_PLATFORMS"] == "cpu"
    assert "--xla_force_host_platform_device_count=2" in job.xla_flags


def test_other_processes_get_their_own_metrics_file():
    job = build(compose("smoke"), "/r", "/r/metrics.jsonl")
    assert "metrics_file=/r/metrics.jsonl" in job.argv(0)
    assert "metrics_file=/r/metrics.3.jsonl" in job.argv(3)
    assert per_process("maxtext.log", 2) == "maxtext.2.log"


def test_profile_on_tells_each_process_where_to_trace():
    on = build(compose("smoke", ["profile=on"]), "/r", "/r/metrics.jsonl")
    assert on.env_dict["MOEKIT_PROFILE_DIR"] == "/r/profile"
    assert "jax_cache_dir=''" in on.maxtext_args  # compiled, not restored from the cache: XLA then dumps its HLO
    assert "MOEKIT_PROFILE_DIR" not in build(compose("smoke"), "/r", "/r/m").env_dict
