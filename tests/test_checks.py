"""Cross-field checks: each names the problem and the fix; nothing launches."""

from __future__ import annotations

import math

import pytest

from conftest import compose, moekit
from moekit.base.errors import ConfigError
from moekit.config.checks import ensure_valid, problems, warnings

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
    ("tokamax-cpu", ["moe=tokamax"], "moe", "Unsupported TPU device kind: cpu"),
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


# ---- persistent outputs for cluster jobs ----

PVC = "cluster.volumes=[{name: runs, path: /workspace/outputs, claim: moekit-runs}]"
VOLUME_CASES = [  # id, overrides (on cluster=jobset unless they choose another), key, words
    ("ckpt-pod-local", ["checkpoint.every=5"], "cluster.output", "lost with the pod"),
    ("ckpt-slurm-folders", ["cluster=slurm", "checkpoint.every=5"], "cluster.output", "a new folder on every node"),
    ("output-unknown", [PVC, "cluster.output=data"], "cluster.output", "names volume 'data'"),
    ("no-source", ["cluster.volumes=[{name: r, path: /o}]"], "cluster.volumes[0]", "exactly one source"),
    (
        "slurm-pvc",
        ["cluster=slurm", "cluster.volumes=[{name: r, path: /o, claim: x}]"],
        "cluster.volumes[0].claim",
        "Slurm",
    ),
    ("relative", ["cluster.volumes=[{name: r, path: out, claim: x}]"], "cluster.volumes[0].path", "not an absolute"),
    ("read-only", [PVC.replace("}]", ", read_only: true}]"), "cluster.output=runs"], "cluster.output", "read_only"),
]


@pytest.mark.parametrize("case, overrides, key, words", VOLUME_CASES, ids=[c[0] for c in VOLUME_CASES])
def test_cluster_output_problems(case, overrides, key, words):
    cluster = [] if any(o.startswith("cluster=") for o in overrides) else ["cluster=jobset"]
    found = problems(compose("smoke", [*cluster, *overrides]))
    assert any(p.key == key and words in p.what for p in found), found


def test_checkpoints_on_a_volume_pass_and_name_the_run_directory():

    cfg = compose("smoke", ["cluster=jobset", "checkpoint.every=5", PVC, "cluster.output=runs"])
    assert problems(cfg) == []
    assert cfg.run_dir == "/workspace/outputs/smoke"  # the same for every pod and every restart
    named = compose("smoke", ["cluster=jobset", PVC, "cluster.output=runs", "cluster.name=exp-7"])
    assert named.run_dir == "/workspace/outputs/exp-7"
    shared = compose("smoke", ["cluster=slurm", "checkpoint.every=5", "cluster.volumes=[{name: r, path: /lustre/m}]",
                               "cluster.output=r"])  # fmt: skip
    assert problems(shared) == [] and shared.run_dir == "/lustre/m/smoke"
    assert compose("smoke", []).run_dir is None  # local: a new timestamped folder per run


# ---- NVLink domains ----


def test_hardware_files_state_their_nvlink_domain():
    sizes = {hw: compose("smoke", [f"hardware={hw}"]).hardware.nvlink_domain for hw in HARDWARE}
    assert sizes == {"cpu": None, "h100": 8, "h200": 8, "b200": 8, "gb200": 72, "gb300": 72}


HARDWARE = ("cpu", "h100", "h200", "b200", "gb200", "gb300")
# The blog's 128-GPU layout (ICI fsdp 8 x expert 8 = 64 GPUs per slice) moved to 8-GPU H100 nodes.
ON_H100 = ["hardware=h100", "precision=fp8", "cluster.gpus_per_node=8", "cluster.processes_per_node=8",
           "cluster.nodes=16", "network=ib"]  # fmt: skip


def test_ici_beyond_one_nvlink_domain_warns_with_a_fix_that_works():
    cfg = ensure_valid(compose("dsv3_blog", ON_H100))  # it runs, so it is a warning, not a refusal
    (w,) = [p for p in warnings(cfg) if p.key == "parallelism.ici"]
    assert "span 64 GPUs (8 nodes)" in w.what and "holds 8" in w.what
    fix = w.fix.split(" (")[0].split()
    assert fix == ["parallelism.ici.fsdp=1", "parallelism.dcn.fsdp=16"]
    fixed = ensure_valid(compose("dsv3_blog", [*ON_H100, *fix]))
    assert warnings(fixed) == [] and fixed.num_devices == cfg.num_devices == 128
    assert math.prod(fixed.ici_filled.values()) == 8


def test_gb300_experiments_get_the_network_their_layout_needs():
    for experiment in ("dsv3_blog", "dsv3_blog_1024", "dsv3_baseline", "dsv3_ladder_3_mxfp8"):
        cfg = compose(experiment)
        # the one warning left is the known issue of EP groups across racks (test_known_issues.py)
        assert cfg.network.name == "nvl72_ib", experiment
        assert [p.key for p in warnings(cfg)] == ["parallelism"] and "#2937" in warnings(cfg)[0].what, experiment
        assert cfg.network.resource_claim_template and cfg.network.resources  # NVLink across nodes + RDMA
    bare = [p for p in warnings(compose("dsv3_blog", ["network=none"])) if p.key != "parallelism"]
    assert {p.fix.split(" ")[0] for p in bare} == {"network=nvl72_ib", "network=ib"}
    assert any("no multi-node NVLink" in p.what for p in bare) and any("no RDMA" in p.what for p in bare)
    # One rack, one slice: everything is on NVLink, so the ComputeDomain alone is enough.
    rack = ["cluster.nodes=16", "parallelism.dcn.fsdp=1", "network=gb200_computedomain"]
    assert warnings(compose("dsv3_blog", rack)) == []


@pytest.mark.integration  # spawns the CLI
def test_render_and_train_print_the_warning_before_anything_runs(tmp_path):
    # moe.force: the TE block's receive buffers do not fit 80 GB at this layout (plan/launch.py refuses it first)
    proc = moekit("render", "experiment=dsv3_blog", "target=jobset", *ON_H100, "moe.force=true")
    assert proc.returncode == 0 and "moekit: warning: parallelism.ici" in proc.stderr
    dry = moekit("train", "experiment=dsv3_blog", *ON_H100, "moe.force=true", "--dry-run", "--format", "json")
    assert dry.returncode == 0 and "fix: parallelism.ici.fsdp=1 parallelism.dcn.fsdp=16" in dry.stderr


def test_a_custom_policy_that_names_one_tag_of_two_is_warned_about():
    partial = ["memory.remat_policy=custom", "memory.tensors.moe_mlpwi_0=device", "memory.tensors.moe_mlpwi_1=device"]
    (w,) = [p for p in warnings(compose("smoke", partial)) if p.key == "memory.tensors"]
    assert "mlpwi_0, mlpwi_1" in w.what and "memory.tensors.mlpwi_0=device" in w.fix
    assert [p for p in warnings(compose("smoke", ["memory=offload_blog"])) if p.key == "memory.tensors"] == []
