"""The six optimizations as config: the blog's experiment key for key, the ladder, each toggle's footprint.

Pure tests compose and translate; one subprocess asks the installed jaxlib to accept every XLA flag moekit can
emit; the integration test trains the smoke model under each CPU-runnable toggle and compares losses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, VERIFY_STEPS, compose, losses, moekit
from moekit.config.checks import problems
from moekit.config.compose import group_options
from moekit.observe.reports import published
from moekit.translate.job import build
from moekit.translate.xla_flags import flag_entries

LADDER = [  # rung, the group it changes (blog order: NVIDIA tech blog 2026-09-14)
    ("dsv3_ladder_0_baseline", None),
    ("dsv3_ladder_1_grouped_gemm", "moe"),
    ("dsv3_ladder_2_multistream", "xla"),
    ("dsv3_ladder_3_mxfp8", "precision"),
    ("dsv3_ladder_4_offload", "memory"),
    ("dsv3_ladder_5_nccl_ep", "moe"),
]
# What names the run rather than configures it (cluster.name too, removed in settings()).
NAMING = {"experiment_name", "expect"}


def translated(experiment: str | None, overrides=()) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(MaxText key -> rendered value, XLA flag name -> value, env) of a composed config."""
    job = build(compose(experiment, overrides), "/r", "/r/metrics.jsonl")
    args = dict(a.split("=", 1) for a in job.maxtext_args)
    flags = dict(f.removeprefix("--").split("=", 1) for f in job.xla_flags)
    env = {k: v for k, v in job.env_dict.items() if k != "XLA_FLAGS"}
    return args, flags, env


def settings(experiment: str) -> dict:
    """The composed config without what only names the run (experiment name, expectations, JobSet name)."""
    d = {k: v for k, v in compose(experiment).to_dict().items() if k not in NAMING}
    d["cluster"].pop("name")
    return d


def changed(a: dict, b: dict) -> set[str]:
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


# ---- the blog's configuration, key for key ----


def test_dsv3_blog_matches_the_published_configuration_key_for_key():
    blog = published.entry(published.load(), "blog_gb300_1024")["configuration"]
    cfg = compose("dsv3_blog")
    args, flags, env = translated("dsv3_blog")
    for key, value in blog["maxtext"].items():
        assert key in args, f"{key} missing from the translation"
        assert yaml.safe_load(args[key]) == value, f"{key}: {args[key]} != blog's {value!r}"
    for flag, value in blog["xla_flags"].items():
        assert yaml.safe_load(flags[flag]) == value, flag
    assert flags["xla_gpu_experimental_enable_collective_multi_streaming"] == "true"  # named in the blog's text
    for name, value in blog["env"].items():
        assert env[name] == value, name
    assert env["NCCL_GIN_TYPE"] == blog["nccl_ep"]["multi_node"]["NCCL_GIN_TYPE"]
    # Launcher-only keys become moekit config, never MaxText arguments.
    launcher = blog["launcher_only"]
    assert cfg.cluster.nodes == launcher["nodes"] and cfg.num_devices == 128
    assert env["JAX_ENABLE_PGLE"] == "true" and launcher["pgle"] is True
    assert args["remat_policy"] == "custom" and launcher["custom_remat_enabled"] is True
    assert not set(launcher) & set(args)


def test_dsv3_blog_1024_scales_only_nodes_and_dcn():
    small, big = compose("dsv3_blog").to_dict(), compose("dsv3_blog_1024").to_dict()
    assert compose("dsv3_blog_1024").num_devices == 1024
    diff = {k for k in small if small[k] != big[k]} - NAMING
    assert diff == {"cluster", "parallelism"}
    assert changed(small["cluster"], big["cluster"]) == {"nodes"}
    assert changed(small["parallelism"]["dcn"], big["parallelism"]["dcn"]) == {"fsdp"}
    assert small["parallelism"]["ici"] == big["parallelism"]["ici"]


def test_dry_run_json_of_dsv3_blog_on_this_machine():
    out = moekit("train", "experiment=dsv3_blog", "--dry-run", "--format", "json", timeout=120)
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert view["devices"] == 128 and view["hardware"]["name"] == "gb300"
    assert len(view["processes"]) == 4  # node 0: one process per GPU
    assert {p["JAX_NUM_PROCESSES"] for p in view["processes"]} == {"128"}
    assert [p["JAX_LOCAL_DEVICE_IDS"] for p in view["processes"]] == ["0", "1", "2", "3"]
    assert set(view["xla_flag_origins"].values()) == {"xla=blog"}
    assert view["xla_flag_origins"].keys() == set(view["xla_flags"])
    origins = view["maxtext_arg_origins"]
    assert origins["te_moe_block"] == "moe=te" and origins["quantization"] == "precision=mxfp8"
    assert origins["te_gmm_quantization"] == "moe=te, precision=mxfp8 (expert GEMMs)"
    assert origins["moe_mlpwi_0"] == "memory=offload_blog"
    assert view["env_origins"]["XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"] == "memory=offload_blog"


# ---- the ablation ladder ----


@pytest.mark.parametrize("i", range(1, len(LADDER)), ids=[r for r, _ in LADDER[1:]])
def test_ladder_rung_differs_from_the_previous_by_its_optimization_only(i):
    (prev, _), (rung, group) = LADDER[i - 1], LADDER[i]
    a, b = settings(prev), settings(rung)
    assert {k for k in a if a[k] != b[k]} == {group}
    # The translation follows: every MaxText key, XLA flag and env var that changes was set by that group.
    before, after = footprint(prev), footprint(rung)
    moved = changed({k: v for k, (v, _) in before.items()}, {k: v for k, (v, _) in after.items()}) - {"arg run_name"}
    assert moved, "the rung changes nothing that reaches MaxText, XLA or the environment"
    for name in moved:
        origin = (after.get(name) or before[name])[1]
        assert origin.startswith(group), f"{name} changed, set by {origin}"


def footprint(experiment: str) -> dict[str, tuple[str, str]]:
    """'arg KEY' / 'flag NAME' / 'env NAME' -> (value, origin) of an experiment's translation."""
    cfg = compose(experiment)
    job = build(cfg, "/r", "/r/m.jsonl")
    out = {f"arg {a.key}": (a.render(), a.origin) for a in job.args}
    out |= {f"flag {f.name}": (f.render(), f.origin) for f in flag_entries(cfg)}
    out |= {f"env {v.name}": (v.value, v.origin) for v in job.env if v.name != "XLA_FLAGS"}
    return out


def test_ladder_ends_at_dsv3_blog_and_sweeps_in_blog_order():
    strip = ("run_name=",)
    last = [a for a in build(compose(LADDER[-1][0]), "/r", "/r/m").maxtext_args if not a.startswith(strip)]
    blog = [a for a in build(compose("dsv3_blog"), "/r", "/r/m").maxtext_args if not a.startswith(strip)]
    assert last == blog
    assert settings(LADDER[0][0]) == settings("dsv3_baseline")
    from moekit.config.sweeps import expand

    assert [o[0].split("=")[1] for o in expand(["experiment=glob(dsv3_ladder_*)"])] == [r for r, _ in LADDER]


# ---- each toggle changes exactly its own keys, flags and env ----

BASE = "dsv3_baseline"  # GB300, 32 x 4 GPUs, EP 8: every toggle is valid on it
TOGGLES = [  # overrides, MaxText keys that change, XLA flags that change, env vars that change
    (["moe=tokamax"], {"use_tokamax_gmm"}, set(), set()),
    (["moe=te_gmm"], set(), set(), {"MOEKIT_RAGGED_DOT", "MOEKIT_RAGGED_DOT_BUCKETS"}),  # MaxText's path, TE's GEMM
    (["moe=te_gmm", "precision=fp8"], {"quantization"}, set(), {"MOEKIT_RAGGED_DOT", "MOEKIT_RAGGED_DOT_BUCKETS"}),
    (
        ["moe=te"],
        {
            "te_moe_block",
            "prefuse_moe_weights",
            "capacity_factor",
            "ragged_buffer_factor",
            "te_ep_overflow_check_every_n_steps",
            "te_gmm_quantization",
            "use_tokamax_gmm",
            "use_ring_of_experts",
        },
        set(),
        {"NCCL_GIN_TYPE"},
    ),
    (["moe=dense"], {"sparse_matmul", "megablox", "use_tokamax_gmm", "use_ring_of_experts"}, set(), set()),
    (["moe.dispatch=ring"], {"use_ring_of_experts"}, set(), set()),
    (["precision=fp8"], {"quantization"}, set(), set()),
    (["precision=mxfp8"], {"quantization"}, set(), set()),  # expert MXFP8 needs moe=te (next case)
    (["moe=te", "precision=mxfp8"], None, set(), {"NCCL_GIN_TYPE"}),
    (["memory=remat_minimal"], {"remat_policy"}, set(), set()),
    (
        ["memory=remat_keep_gemms"],
        {"remat_policy"} | set(yaml.safe_load((REPO / "conf/memory/remat_keep_gemms.yaml").read_text())["tensors"]),
        set(),
        set(),
    ),
    (
        ["memory=offload_blog"],
        {"remat_policy"} | set(yaml.safe_load((REPO / "conf/memory/offload_blog.yaml").read_text())["tensors"]),
        set(),
        {"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB", "XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE"},
    ),
    (
        ["xla=blog"],
        set(),
        set(yaml.safe_load((REPO / "conf/xla/blog.yaml").read_text())["flags"]),
        {"JAX_ENABLE_PGLE"},
    ),
    # The fabric check's spec names the hardware whose link rates it is judged against.
    (["hardware=h200", "precision=bf16"], set(), set(), {"CUDA_DEVICE_MAX_CONNECTIONS", "MOEKIT_FABRIC"}),
    (["model.attention=null"], {"attention"}, set(), {"NVTE_FUSED_ATTN"}),
]


@pytest.mark.parametrize("overrides, keys, flags, env", TOGGLES, ids=[" ".join(t[0]) for t in TOGGLES])
def test_toggle_changes_exactly_its_own_keys_flags_env(overrides, keys, flags, env):
    assert problems(compose(BASE, overrides)) == []
    args0, flags0, env0 = translated(BASE)
    args1, flags1, env1 = translated(BASE, overrides)
    if keys is None:  # moe=te with MXFP8: the expert GEMMs are now quantized
        assert args1["te_gmm_quantization"] == "te_mxfp8" and args1["quantization"] == "te_fp8_currentscaling"
    else:
        assert changed(args0, args1) == keys
    assert changed(flags0, flags1) == flags
    assert changed(env0, env1) == env


# ---- guard rails ----

GUARDS = [  # id, experiment, overrides, key of the problem, words in it
    ("te-on-cpu", "smoke", ["moe=te"], "moe", "SM >= 90"),
    (
        "te-one-process-per-node",
        BASE,
        ["moe=te", "cluster.processes_per_node=1"],
        "cluster.processes_per_node",
        "one GPU per process",
    ),
    ("te-one-gpu", "dsv3_proxy_h200", ["moe=te"], "cluster", "at least 2 GPU processes"),
    ("te-needs-nccl-ep", BASE, ["moe=te", "moe.dispatch=ring"], "moe.dispatch", "always dispatches"),
    ("te-small-buffer", BASE, ["moe=te", "moe.ragged_buffer_factor=0.5"], "moe.ragged_buffer_factor", ">= 1.0"),
    ("nccl-ep-without-te", BASE, ["moe.dispatch=nccl_ep"], "moe.dispatch", "TE MoE block only"),
    ("ring-without-ep", "smoke", ["moe.dispatch=ring"], "moe.dispatch", "expert parallelism is 1"),
    ("ring-needs-grouped", BASE, ["moe=dense", "moe.dispatch=ring"], "moe.dispatch", "never reads it"),
    (
        "cpu-ragged-all-to-all",
        "smoke",
        [
            "cluster.gpus_per_node=2",
            "parallelism.ici.expert=2",
            "parallelism.ici.fsdp=1",
            "train.per_device_batch_size=1",
        ],
        "moe.dispatch",
        "does not implement ragged_all_to_all",
    ),
    ("buffer-drops", BASE, ["moe.ragged_buffer_factor=1.0"], "moe.ragged_buffer_factor", "drops"),
    (
        "tensors-need-custom",
        "smoke",
        ["memory=offload_blog", "memory.remat_policy=full"],
        "memory.remat_policy",
        "custom",
    ),
    ("te-attention-on-cpu", "smoke", ["model.attention=cudnn_flash_te"], "model.attention", "NVIDIA GPUs only"),
    ("mxfp8-on-hopper", BASE, ["hardware=h200", "precision=mxfp8"], "precision", "Blackwell"),
]


@pytest.mark.parametrize("case, experiment, overrides, key, words", GUARDS, ids=[g[0] for g in GUARDS])
def test_guard_rail_names_the_requirement_and_the_fix(case, experiment, overrides, key, words):
    found = problems(compose(experiment, overrides))
    assert any(p.key == key and words in p.what for p in found), found
    assert all(p.fix for p in found)


def test_cpu_expert_parallelism_with_ring_passes():
    ring = ["moe=megablox", "moe.dispatch=ring", "cluster.gpus_per_node=2", "parallelism.ici.expert=2"]
    ring += ["parallelism.ici.fsdp=1", "train.per_device_batch_size=1"]
    assert problems(compose("smoke", ring)) == []


def test_te_ignores_capacity_factor_but_other_back_ends_drop():
    assert problems(compose(BASE, ["moe=te"])) == []  # capacity_factor=1.0 as the blog sets it, unread by TE
    assert any(p.key == "moe.capacity_factor" for p in problems(compose(BASE, ["moe.capacity_factor=1.0"])))


# ---- every XLA flag moekit can emit starts the installed jaxlib ----


def _start_jax(flags: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(flags)}
    code = "import jax; print(len(jax.devices()))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_every_emittable_xla_flag_is_accepted_by_jaxlib():
    flags = set()
    for option in group_options("xla"):
        flags |= set(build(compose("smoke", [f"xla={option}"]), "/r", "/r/m").xla_flags)
    flags |= set(build(compose("smoke", ["cluster.gpus_per_node=2"]), "/r", "/r/m").xla_flags)  # host devices
    assert len(flags) > 10
    ok = _start_jax(sorted(flags))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip() == "2"
    bad = _start_jax(["--xla_gpu_no_such_flag_for_moekit=1"])  # the control: jaxlib does reject unknown flags
    assert bad.returncode != 0 and "xla_gpu_no_such_flag_for_moekit" in bad.stderr


# ---- CPU loss equivalence under each CPU-runnable toggle ----

STEPS = VERIFY_STEPS
# The reference, XLA's ragged_dot grouped GEMM with full remat, and moe=dense are dense_vs_grouped's runs (moekit
# verify trains them with the same overrides: experiment=smoke precision=fp32 train.steps=4).
EQUIVALENT = [
    ("remat_minimal", ["memory=remat_minimal"]),
    ("offload_blog", ["memory=offload_blog"]),
    ("remat_keep_gemms", ["memory=remat_keep_gemms"]),
]


@pytest.mark.soak
@pytest.mark.integration
def test_smoke_losses_agree_under_each_cpu_toggle(tmp_path, dense_vs_grouped):
    common = ["train", "experiment=smoke", "precision=fp32", f"train.steps={STEPS}"]
    verified, proc = dense_vs_grouped
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # verify's verdict is test_verify's; the runs are used here
    reference = json.loads((verified / "verify.json").read_text())["reference"]["overrides"]
    assert sorted(reference) == sorted(common[1:])
    runs = {"ragged_dot": losses(verified / "reference"), "dense": losses(verified / "candidate-1")}
    for name, overrides in EQUIVALENT:
        out = moekit(*common, *overrides, f"run.dir={tmp_path / name}")
        assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-2000:]
        runs[name] = losses(tmp_path / name)
    ref = runs["ragged_dot"]
    assert len(ref) == STEPS and ref[-1] < ref[0]  # it trained
    for name, got in runs.items():
        # Measured 2026-12-03 (2-core CPU, fp32, MaxText 0.2.5, jax 0.12.0.1): dense identical to ragged_dot,
        # remat_minimal within 9.5e-7, offload_blog within 1.9e-6; a training step moves the loss by ~1e-2.
        assert max(abs(x - y) for x, y in zip(ref, got, strict=True)) <= 1e-4, (name, ref, got)
    job = json.loads((tmp_path / "offload_blog" / "job.json").read_text())
    assert "moe_mlpwi_0=offload" in job["maxtext_args"] and "remat_policy=custom" in job["maxtext_args"]
