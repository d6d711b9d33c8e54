"""Cross-field checks of a typed config, run before anything launches.

Each check returns Problems (key, what is wrong, the override that fixes it); `check` runs all of
them so a user sees every problem at once. Pure: no environment, files or clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

from moekit import rundir
from moekit.config import formats
from moekit.config.schema import Config
from moekit.errors import ConfigError
from moekit.redact import is_secret_name


class Problem(NamedTuple):
    """One thing wrong with a config: the key, what is wrong and the override that fixes it (may be empty)."""

    key: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}" + (f"\n    fix: {self.fix}" if self.fix else "")


Check = Callable[[Config], Iterator[Problem]]
CHECKS: list[Check] = []
WARNINGS: list[Check] = []  # what runs, but not as the user likely means (slow, not refused); printed before launch


def check(fn: Check) -> Check:
    """Register `fn` as a check: its problems refuse the config."""
    CHECKS.append(fn)
    return fn


def warning(fn: Check) -> Check:
    """Register `fn` as a warning: its problems are printed before launch, never refused."""
    WARNINGS.append(fn)
    return fn


@check
def mesh_matches_devices(cfg: Config) -> Iterator[Problem]:
    """The ICI axes (at most one -1, filled) times the DCN axes (none -1) give exactly the job's devices, split
    evenly into slices."""
    ici, dcn = cfg.parallelism.ici, cfg.parallelism.dcn
    if sum(v == -1 for _, v in ici.items()) > 1:
        yield Problem("parallelism.ici", "more than one axis is -1", "leave at most one ICI axis at -1")
        return
    if any(v == -1 for _, v in dcn.items()):
        yield Problem("parallelism.dcn", "-1 is not supported across slices", "set every DCN axis explicitly")
        return
    if cfg.num_devices % cfg.num_slices:
        yield Problem(
            "parallelism.dcn",
            f"{cfg.num_devices} devices do not split into {cfg.num_slices} slices (product of the DCN axes)",
            f"make the DCN product divide cluster.nodes x devices per node ({cfg.num_devices})",
        )
        return
    filled = cfg.ici_filled
    per_slice = cfg.num_devices // cfg.num_slices
    product = math.prod(filled.values())
    if -1 in filled.values() or product != per_slice:
        axes = " x ".join(f"{k}={v}" for k, v in ici.items())
        yield Problem(
            "parallelism.ici",
            f"mesh product {axes} does not match {per_slice} devices per slice "
            f"({cfg.cluster.nodes} nodes x {cfg.devices_per_process * cfg.cluster.processes_per_node} devices "
            f"/ {cfg.num_slices} slices)",
            _mesh_fix(dict(ici.items()), per_slice),
        )


def _mesh_fix(ici: dict[str, int], per_slice: int) -> str:
    """Axis sizes that make the mesh fit `per_slice` devices: with an axis at -1 already, the fixed axes shrunk
    (greedily, each to what still divides the devices left); else one axis to -1."""
    fill = [k for k, v in ici.items() if v == -1]
    if not fill:
        return "set one ICI axis to -1 (e.g. parallelism.ici.fsdp=-1) or make the product equal the devices per slice"
    left, changes = per_slice, []
    for axis, size in ici.items():
        if size == -1:
            continue
        fits = math.gcd(size, left)
        if fits != size:
            changes.append(f"parallelism.ici.{axis}={fits}")
        left //= fits
    if not changes:
        return f"make the product of the fixed ICI axes divide {per_slice}"
    return f"{' '.join(changes)} (the axis at -1, {fill[0]}, then fills the remaining devices)"


@check
def processes_fit_devices(cfg: Config) -> Iterator[Problem]:
    """JAX on GPUs runs one process per node or one per GPU; CPU host devices split evenly over the processes."""
    c = cfg.cluster
    if cfg.hardware.platform == "gpu" and c.processes_per_node not in (1, c.gpus_per_node):
        yield Problem(
            "cluster.processes_per_node",
            f"{c.processes_per_node} processes for {c.gpus_per_node} GPUs per node: JAX needs one process per node "
            "or one per GPU",
            f"cluster.processes_per_node=1 or cluster.processes_per_node={c.gpus_per_node}",
        )
    if cfg.hardware.platform == "cpu" and c.gpus_per_node % c.processes_per_node and c.gpus_per_node > 1:
        yield Problem(
            "cluster.gpus_per_node",
            f"{c.gpus_per_node} host devices do not split evenly over {c.processes_per_node} processes",
            "make cluster.gpus_per_node a multiple of cluster.processes_per_node",
        )


@check
def local_is_one_host(cfg: Config) -> Iterator[Problem]:
    """cluster=local runs on this host only, so it has one node."""
    if cfg.cluster.kind == "local" and cfg.cluster.nodes != 1:
        yield Problem(
            "cluster.nodes",
            f"cluster=local runs on one host but cluster.nodes={cfg.cluster.nodes}",
            "cluster.nodes=1, or cluster=jobset / cluster=slurm for a multi-node job (moekit render ... target=jobset)",
        )


@check
def experts_divide_over_ep(cfg: Config) -> Iterator[Problem]:
    """Each expert-parallel rank holds the same number of experts."""
    ep = cfg.ici_filled["expert"] * cfg.parallelism.dcn.expert
    if ep > 0 and cfg.model.num_experts % ep:
        yield Problem(
            "parallelism.ici.expert",
            f"{cfg.model.num_experts} experts do not divide evenly over expert parallelism {ep}",
            f"an expert-parallel size that divides {cfg.model.num_experts}: "
            f"{_expert_axis_fix(cfg, math.gcd(cfg.model.num_experts, ep))} (or change model.num_experts)",
        )


def _expert_axis_fix(cfg: Config, size: int) -> str:
    """parallelism.ici.expert=SIZE, plus an axis at -1 to fill the devices when no other axis does."""
    others = [k for k, v in cfg.parallelism.ici.items() if v == -1 and k != "expert"]
    return f"parallelism.ici.expert={size}" + ("" if others else " parallelism.ici.fsdp=-1")


@check
def batch_divides(cfg: Config) -> Iterator[Problem]:
    """The global batch is a whole number of sequences and divides over the data-parallel ranks."""
    batch = cfg.global_batch
    if abs(batch - round(batch)) > 1e-9 or round(batch) < 1:
        yield Problem(
            "train.per_device_batch_size",
            f"{cfg.train.per_device_batch_size} x {cfg.num_devices} devices = {batch:g} sequences per step, "
            "not a whole number",
            "choose a per-device batch that makes the global batch a whole number",
        )
        return
    filled = cfg.ici_filled
    dp = filled["data"] * filled["fsdp"] * cfg.parallelism.dcn.data * cfg.parallelism.dcn.fsdp
    if dp > 0 and round(batch) % dp:
        yield Problem(
            "train.per_device_batch_size",
            f"global batch {round(batch)} does not divide over {dp} data-parallel ranks (data x fsdp)",
            f"use a per-device batch that makes the global batch a multiple of {dp}",
        )


@check
def dropless(cfg: Config) -> Iterator[Problem]:
    """No setting drops tokens (a capacity factor, a capped receive buffer) unless moe.allow_token_dropping says it
    is meant."""
    # The TE MoE block never reads capacity_factor; its receive buffer is checked by te_moe_requirements.
    drops = cfg.moe.backend == "capacity" or (cfg.moe.capacity_factor > 0 and cfg.moe.backend != "te")
    if cfg.moe.backend != "te" and cfg.moe.ragged_buffer_factor > 0 and not cfg.moe.allow_token_dropping:
        yield Problem(
            "moe.ragged_buffer_factor",
            f"ragged_buffer_factor={cfg.moe.ragged_buffer_factor} caps each expert-parallel rank's receive buffer; "
            f"with moe={cfg.moe.backend} MaxText silently drops the tokens that do not fit",
            "leave moe.ragged_buffer_factor=-1 (worst-case buffer), use moe=te (which skips an overflowing step "
            "loudly), or set moe.allow_token_dropping=true for a deliberate baseline",
        )
    if drops and not cfg.moe.allow_token_dropping:
        yield Problem(
            "moe.capacity_factor",
            f"capacity_factor={cfg.moe.capacity_factor} (moe={cfg.moe.backend}) drops tokens past expert capacity: "
            "this is not dropless training",
            _dropless_fix(cfg) + " or moe.allow_token_dropping=true for a deliberate baseline",
        )


def _dropless_fix(cfg: Config) -> str:
    """Ways to dropless training from this config, each one complete (it passes the checks as written)."""
    if cfg.moe.backend != "capacity":  # a dropless back end with a capacity set
        return "moe.capacity_factor=-1 (dropless)"
    gpu = cfg.hardware.platform == "gpu"
    return "a dropless back end: " + (
        " or ".join(["moe=tokamax", "moe=dense"] if gpu else ["moe=ragged_dot", "moe=dense"])
    )


@check
def megablox_on_gpu(cfg: Config) -> Iterator[Problem]:
    """megablox is a TPU kernel: on a GPU it runs interpreted, about 9x slower, so it needs moe.force."""
    if cfg.moe.backend == "megablox" and cfg.hardware.platform == "gpu" and not cfg.moe.force:
        yield Problem(
            "moe",
            "moe=megablox is MaxText's TPU Pallas kernel; on GPU it runs in interpret mode "
            "(measured 31 TFLOP/s/device vs 278 for moe=tokamax on one H200, MaxText 0.2.5, 2026-12-02)",
            "moe=te_gmm or moe=tokamax, or moe.force=true to run it anyway (TE's MoE block needs one process "
            "per GPU and at least 2 of them)",
        )


@check
def tokamax_gpu_takes_half_precision(cfg: Config) -> Iterator[Problem]:
    """tokamax's GPU grouped GEMM takes bf16/fp16 inputs only: precision=fp32 cannot run it."""
    if cfg.moe.backend == "tokamax" and cfg.hardware.platform == "gpu" and cfg.precision.name == "fp32":
        yield Problem(
            "precision",
            "moe=tokamax on GPU runs tokamax's Mosaic GPU grouped GEMM, which takes only bf16/fp16 inputs "
            "(NotImplementedError on one H200, tokamax 0.0.17, 2026-12-03)",
            "precision=bf16, or moe=ragged_dot / moe=dense for an fp32 run "
            "(moekit verify uses fp32 unless an override sets precision=)",
        )


@check
def precision_supported(cfg: Config) -> Iterator[Problem]:
    """fp8 and mxfp8 need tensor cores the hardware has."""
    p, f = cfg.precision.name, cfg.hardware.features
    if p == "mxfp8" and not f.mxfp8:
        yield Problem(
            "precision",
            f"precision=mxfp8 needs block-scaled MXFP8 tensor cores (Blackwell); hardware={cfg.hardware.name} has none",
            "use precision=fp8 (Hopper) or precision=bf16, or choose Blackwell hardware (hardware=b200|gb200|gb300)",
        )
    if p == "fp8" and not f.fp8:
        yield Problem(
            "precision",
            f"precision=fp8 needs FP8 tensor cores; hardware={cfg.hardware.name} has none",
            "use precision=bf16",
        )


def expert_parallel_size(cfg: Config) -> int:
    """Ranks the experts are spread over: the ICI expert axis (filled) times the DCN one."""
    return cfg.ici_filled["expert"] * cfg.parallelism.dcn.expert


def uses_ring_of_experts(cfg: Config) -> bool:
    """moe.dispatch=ring, or the raw MaxText key (maxtext.extra wins over the translated value)."""
    return bool(cfg.maxtext.extra.get("use_ring_of_experts", cfg.moe.dispatch == "ring"))


@check
def te_moe_requirements(cfg: Config) -> Iterator[Problem]:
    """moe=te needs SM >= 90, one process per GPU and at least 2 processes, NCCL EP dispatch and a receive buffer of
    at least the balanced load."""
    if cfg.moe.backend != "te":
        return
    hw, c = cfg.hardware, cfg.cluster
    if hw.platform != "gpu" or (hw.sm or 0) < 90:
        yield Problem(
            "moe",
            f"moe=te (TransformerEngine MoE block with NCCL EP) needs an NVIDIA GPU with SM >= 90 and the NGC image; "
            f"hardware={hw.name} is not one",
            "use moe=tokamax (GPU) or moe=ragged_dot (anywhere), or choose hardware=h100|h200|b200|gb200|gb300",
        )
    elif c.processes_per_node != c.gpus_per_node:
        yield Problem(
            "cluster.processes_per_node",
            f"moe=te needs one GPU per process (MaxText hardware=gpu_multiprocess; NCCL EP binds one rank per GPU), "
            f"but {c.processes_per_node} process(es) drive {c.gpus_per_node} GPUs per node",
            f"cluster.processes_per_node={c.gpus_per_node}",
        )
    elif cfg.num_processes < 2:
        # Measured on one H200 (TE 2.20.2, 2026-12-03): ep_bootstrap raises "requires world_size >= 2".
        yield Problem(
            "cluster",
            "moe=te needs at least 2 GPU processes: TE's NCCL EP forms a group of >= 2 ranks and refuses a "
            f"world of 1, but this job has {cfg.num_processes}",
            "cluster.gpus_per_node=2 cluster.processes_per_node=2 (or more GPUs), or moe=tokamax on one GPU",
        )
    if cfg.moe.dispatch != "nccl_ep":
        yield Problem(
            "moe.dispatch",
            f"the TE MoE block always dispatches and combines through NCCL EP; moe.dispatch={cfg.moe.dispatch} "
            "needs MaxText's own MoE layer",
            "moe.dispatch=nccl_ep, or keep the dispatch and use moe=tokamax",
        )
    if 0 < cfg.moe.ragged_buffer_factor < 1:
        yield Problem(
            "moe.ragged_buffer_factor",
            f"ragged_buffer_factor={cfg.moe.ragged_buffer_factor}: the TE MoE block needs a receive buffer of at "
            "least the balanced load (>= 1.0), or <= 0 for the worst case",
            "moe.ragged_buffer_factor=2.0 (the blog's) or moe.ragged_buffer_factor=-1",
        )


# The MaxText keys that lead to the one ragged_dot call moe=te_gmm hands to TE (moekit.te_gmm).
TE_GMM_PATH = {"sparse_matmul": True, "megablox": False, "use_tokamax_gmm": False, "te_moe_block": False}


@check
def te_gmm_requirements(cfg: Config) -> Iterator[Problem]:
    """moe=te_gmm needs MaxText on its ragged_dot path (no `maxtext.extra` key taking it off) and an NVIDIA GPU of
    SM 90 or newer."""
    if cfg.moe.backend != "te_gmm":
        return
    off_path = {k: v for k, v in cfg.maxtext.extra.items() if k in TE_GMM_PATH and v != TE_GMM_PATH[k]}
    if off_path:
        yield Problem(
            "maxtext.extra",
            f"{', '.join(f'{k}={v}' for k, v in off_path.items())} takes MaxText off the ragged_dot path that "
            "moe=te_gmm hands to TE's grouped GEMM: its expert GEMMs would not run on TE",
            f"drop {', '.join(f'maxtext.extra.{k}' for k in off_path)}, or choose the back end with moe=",
        )
    hw = cfg.hardware
    if hw.platform != "gpu" or (hw.sm or 0) < 90:
        yield Problem(
            "moe",
            "moe=te_gmm runs MaxText's expert GEMMs on TransformerEngine's grouped GEMM: an NVIDIA GPU with "
            f"SM >= 90; hardware={hw.name} is not one",
            "moe=ragged_dot (the same MaxText path with XLA's ragged_dot; runs anywhere), moe=tokamax (GPU), or "
            "hardware=h100|h200|b200|gb200|gb300",
        )


@check
def dispatch_fits_backend(cfg: Config) -> Iterator[Problem]:
    """The dispatch is one the back end reads and the platform runs: NCCL EP only with moe=te, ring only with expert
    parallelism > 1 and a grouped-GEMM back end, no ragged all-to-all on CPU."""
    moe, ep = cfg.moe, expert_parallel_size(cfg)
    if moe.dispatch == "nccl_ep" and moe.backend != "te":
        yield Problem(
            "moe.dispatch",
            f"NCCL EP dispatch/combine is reached through the TE MoE block only; moe={moe.backend} has none",
            "moe=te (NGC image, SM >= 90), or moe.dispatch=ragged_all_to_all",
        )
    if moe.dispatch == "ring" and ep <= 1:
        yield Problem(
            "moe.dispatch",
            "ring of experts passes tokens around the expert-parallel ranks, but expert parallelism is 1",
            "set parallelism.ici.expert (or parallelism.dcn.expert) above 1, or moe.dispatch=ragged_all_to_all",
        )
    grouped = moe.backend in ("te_gmm", "tokamax", "ragged_dot", "megablox")
    if moe.dispatch == "ring" and not grouped and moe.backend != "te":  # te: te_moe_requirements says it
        yield Problem(
            "moe.dispatch",
            f"ring of experts is part of MaxText's grouped-GEMM layer; moe={moe.backend} never reads it",
            "moe=tokamax|ragged_dot|megablox with moe.dispatch=ring, or moe.dispatch=ragged_all_to_all",
        )
    if cfg.hardware.platform == "cpu" and grouped and ep > 1 and not uses_ring_of_experts(cfg):
        yield Problem(
            "moe.dispatch",
            f"expert parallelism {ep} with the ragged all-to-all dispatch: XLA:CPU does not implement "
            "ragged_all_to_all",
            "moe=megablox moe.dispatch=ring (ring of experts, the expert-parallel dispatch XLA:CPU runs), or "
            f"{_expert_axis_fix(cfg, 1)}",
        )


@check
def memory_policy_consistent(cfg: Config) -> Iterator[Problem]:
    """Per-tensor remat choices take effect only with remat_policy=custom."""
    mem = cfg.memory
    if mem.tensors and mem.remat_policy != "custom":
        yield Problem(
            "memory.remat_policy",
            f"per-tensor choices ({', '.join(mem.tensors)}) are read by MaxText only with remat_policy=custom; "
            f"remat_policy={mem.remat_policy} ignores them",
            "memory.remat_policy=custom, or choose a memory option without tensors (memory=remat_full)",
        )


# MaxText tags a routed expert's up-projection output twice (`mlpwi_0` inside `moe_mlpwi_0`). A custom policy that
# names the outer tags without the inner ones changed the bf16 loss from step 2 on, with nothing offloaded (one H200,
# 2026-12-04, docs/metrics.md); memory=offload_blog, which names both, agrees with the reference.
_TAGGED_TWICE = {"moe_mlpwi_0": "mlpwi_0", "moe_mlpwi_1": "mlpwi_1"}


@warning
def custom_policy_names_both_tags(cfg: Config) -> Iterator[Problem]:
    """A custom remat policy that names a routed tensor's outer tag should name its inner one too."""
    tensors = cfg.memory.tensors
    if cfg.memory.remat_policy != "custom":
        return
    missing = [inner for outer, inner in _TAGGED_TWICE.items() if outer in tensors and inner not in tensors]
    if missing:
        fix = " ".join(f"memory.tensors.{m}=device" for m in missing)
        yield Problem(
            "memory.tensors",
            f"remat_policy=custom names {', '.join(o for o in _TAGGED_TWICE if o in tensors)} but not "
            f"{', '.join(missing)} (the same activation's inner tag): measured to change the loss from step 2 on "
            "(docs/metrics.md)",
            f"{fix}, or start from memory=offload_blog, which names every tensor",
        )


@check
def attention_supported(cfg: Config) -> Iterator[Problem]:
    """cudnn_flash_te attention runs on NVIDIA GPUs only."""
    if cfg.model.attention == "cudnn_flash_te" and cfg.hardware.platform != "gpu":
        yield Problem(
            "model.attention",
            f"attention=cudnn_flash_te is TransformerEngine's cuDNN fused attention: NVIDIA GPUs only, "
            f"hardware={cfg.hardware.name}",
            "model.attention=dot_product (or null for MaxText's choice)",
        )


@check
def profile_window_fits(cfg: Config) -> Iterator[Problem]:
    """The profiled steps (skip_steps, then steps) end within train.steps."""
    p, steps = cfg.profile, cfg.train.steps
    need = p.skip_steps + p.steps
    if p.enabled and need > steps:
        fewer = f" or profile.steps={steps - p.skip_steps}" if steps > p.skip_steps else ""
        yield Problem(
            "profile.steps",
            f"the traced steps {p.skip_steps}..{need - 1} (profile.skip_steps={p.skip_steps}, profile.steps="
            f"{p.steps}) do not fit in train.steps={steps}",
            f"train.steps={need}{fewer}",
        )


@check
def job_names(cfg: Config) -> Iterator[Problem]:
    """One rule for the names a cluster job gets (JobSet, pods, Compose services, Slurm job)."""
    c = cfg.cluster
    if c.kind == "local":
        return
    name = formats.job_name(cfg)
    why = formats.JOB_NAME.problem(name)
    if why:
        source = "" if c.name else f" (from experiment_name={cfg.experiment_name})"
        yield Problem("cluster.name", f"job name {name!r}{source} {why}", f"cluster.name={formats.job_name_fix(name)}")


# Field (dotted path; '*' is any mapping key or list index) -> the kind of text it holds, and the fix to print
# ({path}: the field). A field not listed holds any one-line printable text (each file quotes it for its format).
F = formats
FIELD_FORMATS: tuple[tuple[str, formats.Format, str], ...] = (
    ("experiment_name", F.EXPERIMENT_NAME, "experiment_name=smoke (or leave it to the experiment file)"),
    ("run.name", F.PATH_COMPONENT, "run.name=my-run"),
    ("run.secrets.*", F.OPTION_NAME, "name it as written in the environment or config, e.g. run.secrets=[HF_TOKEN]"),
    ("model.name", F.OPTION_NAME, "model.name=deepseek3-tiny (a file in MaxText's configs/models/)"),
    ("model.attention", F.OPTION_NAME, "model.attention=dot_product"),
    ("memory.name", F.OPTION_NAME, "memory.name=custom"),
    ("memory.remat_policy", F.OPTION_NAME, "memory.remat_policy=full"),
    ("xla.name", F.OPTION_NAME, "xla.name=custom"),
    ("xla.flags.*", F.XLA_FLAG_VALUE, "write {path} as one word (a list as items joined by ',', e.g. FUSION,CUBLAS)"),
    ("hardware.name", F.OPTION_NAME, "hardware=cpu (choose an option file rather than naming one)"),
    ("hardware.arch", F.OPTION_NAME, "hardware.arch=hopper"),
    ("network.name", F.OPTION_NAME, "network=none (choose an option file rather than naming one)"),
    ("network.capabilities.*", F.CAPABILITY, "network.capabilities=[IPC_LOCK]"),
    ("network.resource_claim_template", F.DNS_SUBDOMAIN, "network.resource_claim_template=moekit-compute-domain"),
    ("network.min_kubernetes", F.VERSION, "network.min_kubernetes=1.30"),
    ("cluster.image", F.IMAGE, "cluster.image=moekit:latest"),
    ("cluster.namespace", F.DNS_LABEL, "cluster.namespace=default"),
    ("cluster.queue", F.DNS_LABEL, "cluster.queue=team-a (the LocalQueue's name)"),
    ("cluster.service_account", F.DNS_SUBDOMAIN, "cluster.service_account=trainer"),
    ("cluster.node_selector.*", F.LABEL_VALUE, "give {path} a label value, e.g. NVIDIA-H200"),
    ("cluster.tolerations.*.key", F.LABEL_KEY, "give {path} a taint key, e.g. nvidia.com/gpu"),
    ("cluster.tolerations.*.value", F.LABEL_VALUE, "give {path} a taint value, e.g. ml"),
    ("cluster.secrets.*.env", F.ENV_NAME, "give {path} a variable name, e.g. HF_TOKEN"),
    ("cluster.secrets.*.secret", F.DNS_SUBDOMAIN, "give {path} the Secret's name, e.g. hf-token"),
    ("cluster.secrets.*.key", F.SECRET_KEY, "give {path} the key inside the Secret, e.g. token"),
    ("cluster.partition", F.SLURM_NAME, "cluster.partition=gpu (the name `sinfo` shows)"),
    ("cluster.account", F.SLURM_NAME, "cluster.account=ml (the name `sacctmgr show assoc` shows)"),
    ("cluster.time_limit", F.SLURM_TIME, "cluster.time_limit=02:00:00"),
    ("cluster.container_workdir", F.CONTAINER_PATH, "cluster.container_workdir=/workspace"),
    ("cluster.container_mounts.*", F.CONTAINER_MOUNT, "write {path} as /SRC:/DST, e.g. /data:/data"),
    ("cluster.volumes.*.claim", F.DNS_SUBDOMAIN, "give {path} the PersistentVolumeClaim's name, e.g. training-runs"),
)
KEY_FORMATS: tuple[tuple[str, formats.Format, str], ...] = (  # mapping, format of its keys, example key
    ("maxtext.extra", F.MAXTEXT_KEY, "log_period"),
    ("model.extra", F.MAXTEXT_KEY, "base_emb_dim"),
    ("memory.tensors", F.MAXTEXT_KEY, "moe_mlpwi_0"),
    ("xla.flags", F.XLA_FLAG_NAME, "xla_gpu_enable_latency_hiding_scheduler"),
    ("cluster.node_selector", F.LABEL_KEY, "nvidia.com/gpu.product"),
    ("network.resources", F.RESOURCE_NAME, "rdma/rdma_shared_device_a"),
    *((f"{section}.env", F.ENV_NAME, "NCCL_DEBUG") for section in ("memory", "xla", "hardware", "network", "cluster")),
)
# XLA_FLAGS is built from xla.flags, where every flag is checked; an env entry of that name would bypass it.
RESERVED_ENV = {"XLA_FLAGS": "xla.flags.NAME=VALUE (each flag is checked)"}


def _texts(node: object, path: str = "") -> Iterator[tuple[str, str, bool]]:
    """(dotted path, text, is a mapping key) for every string in a config tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{path}.{k}" if path else str(k)
            yield where, str(k), True
            yield from _texts(v, where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _texts(v, f"{path}.{i}")
    elif isinstance(node, str):
        yield path, node, False


def _matches(path: str, pattern: str) -> bool:
    parts, want = path.split("."), pattern.split(".")
    return len(parts) == len(want) and all(w in ("*", p) for p, w in zip(parts, want, strict=True))


@check
def text_fits_its_format(cfg: Config) -> Iterator[Problem]:
    """Every string is one line of printable text, and identifiers have their format (config/formats.py)."""
    for path, text, is_key in _texts(cfg.to_dict()):
        bad = formats.unprintable(text)
        if bad:
            what = "key" if is_key else "value"
            yield Problem(
                path,
                f"the {what} {text!r} holds {bad}: moekit writes every config value into one-line places (the "
                "`# render:` line of each rendered file, #SBATCH options, XLA_FLAGS, command lines)",
                f"write {path} without it (one line of printable text)",
            )
            continue
        if is_key:
            parent = path.rsplit(".", 1)[0]
            for mapping, fmt, example in KEY_FORMATS:
                if _matches(parent, mapping) and (why := fmt.problem(text)):
                    yield Problem(path, f"the key {text!r} {why}", f"name it like {mapping}.{example}")
            if parent.endswith(".env") and text in RESERVED_ENV:
                yield Problem(path, f"{text} is built by moekit", f"set it through {RESERVED_ENV[text]}")
            continue
        for field, fmt, fix in FIELD_FORMATS:
            if _matches(path, field) and (why := fmt.problem(text)):
                yield Problem(path, f"{text!r} {why}", fix.format(path=path))


@check
def volumes_valid(cfg: Config) -> Iterator[Problem]:
    """Volumes have unique DNS-label names and absolute paths, one source each on JobSet and none on Slurm;
    cluster.output names a writable one."""
    c = cfg.cluster
    names = [v.name for v in c.volumes]
    for i, v in enumerate(c.volumes):
        key = f"cluster.volumes[{i}]"
        if names.count(v.name) > 1 or v.name == "dshm":
            yield Problem(f"{key}.name", f"volume name '{v.name}' is taken (dshm is /dev/shm's)", "give it a new name")
        if why := formats.DNS_LABEL.problem(v.name):
            yield Problem(f"{key}.name", f"'{v.name}' {why}", f"{key}.name=data")
        if not v.path.startswith("/"):
            yield Problem(f"{key}.path", f"'{v.path}' is not an absolute path", f"{key}.path=/{v.path.lstrip('./')}")
        source = [k for k in ("claim", "host_path") if getattr(v, k)]
        if c.kind == "jobset" and len(source) != 1:
            yield Problem(
                f"{key}.{source[-1]}" if source else key,
                f"volume '{v.name}' needs exactly one source for the pods, got {source or 'none'}",
                f"{key}.claim=PVC_NAME (a PersistentVolumeClaim; ReadWriteMany for several pods) or "
                f"{key}.host_path=/NODE/PATH",
            )
        if c.kind == "slurm" and source:
            yield Problem(
                f"{key}.{source[0]}",
                f"Slurm mounts nothing: {source[0]} applies to JobSet pods only",
                f"drop it and give {key}.path a file system path that every node of the allocation sees",
            )
    if c.output is not None:
        vol = c.output_volume
        if vol is None:
            yield Problem(
                "cluster.output",
                f"names volume '{c.output}', but cluster.volumes has {names or 'none'}",
                "cluster.volumes=[{name: runs, path: /workspace/outputs, claim: PVC_NAME}] cluster.output=runs",
            )
        elif vol.read_only:
            yield Problem("cluster.output", f"volume '{vol.name}' is read_only", f"drop read_only of '{vol.name}'")


def _persistent(cfg: Config) -> bool:
    """Whether the run directory outlives the job's pods (JobSet) or is one shared path (Slurm)."""
    where = rundir.configured_dir(cfg)
    if where is None:
        return False
    if cfg.cluster.kind == "slurm":
        return True
    return any(
        not v.read_only and (where == v.path or where.startswith(v.path.rstrip("/") + "/")) for v in cfg.cluster.volumes
    )


@check
def checkpoints_persist(cfg: Config) -> Iterator[Problem]:
    """A cluster job's checkpoints must survive its pods and be one set for all nodes, or a restart starts over."""
    c = cfg.cluster
    if cfg.checkpoint.every == 0 or c.kind == "local" or _persistent(cfg):
        return
    where = "each pod's own filesystem, lost with the pod" if c.kind == "jobset" else "a new folder on every node"
    source = "claim: PVC_NAME" if c.kind == "jobset" else "no claim: a path every node sees"
    yield Problem(
        "cluster.output",
        f"checkpoint.every={cfg.checkpoint.every} on cluster={c.kind}, but the run directory is in {where}: "
        "a restarted job would start again at step 0",
        f"cluster.volumes=[{{name: runs, path: /shared/runs, {source}}}] cluster.output=runs",
    )


def _smallest_factor(n: int) -> int:
    return next(p for p in range(2, n + 1) if n % p == 0)


@warning
def ici_within_nvlink_domain(cfg: Config) -> Iterator[Problem]:
    """ICI axes are the mesh inside one NVLink domain: beyond it their collectives cross the slower network."""
    domain, ici = cfg.hardware.nvlink_domain, cfg.ici_filled
    per_slice = math.prod(ici.values())
    if not domain or -1 in ici.values() or per_slice <= domain:
        return
    moved, dcn = dict(ici), dict(cfg.parallelism.dcn.items())
    for axis in ("fsdp", "data", "tensor", "expert"):  # FSDP's gathers overlap with compute best
        while math.prod(moved.values()) > domain and moved[axis] > 1:
            f = _smallest_factor(moved[axis])
            moved[axis], dcn[axis] = moved[axis] // f, dcn[axis] * f
    fix = " ".join(f"parallelism.ici.{a}={moved[a]} parallelism.dcn.{a}={dcn[a]}" for a in moved if moved[a] != ici[a])
    axes = " x ".join(f"{k} {v}" for k, v in ici.items() if v > 1)
    nodes = per_slice // max(1, cfg.cluster.gpus_per_node)
    yield Problem(
        "parallelism.ici",
        f"the ICI axes ({axes}) span {per_slice} GPUs ({nodes} nodes), but one NVLink domain of "
        f"hardware={cfg.hardware.name} holds {domain}: their collectives between domains run over the network "
        "(moekit plan counts them so)",
        f"{fix} (the same mesh, the part beyond one domain as DCN axes)",
    )


@warning
def network_fits_the_layout(cfg: Config) -> Iterator[Problem]:
    """A JobSet over several nodes needs the pods' fabric: multi-node NVLink (NVL72) and RDMA between domains."""
    c, net = cfg.cluster, cfg.network
    domain = cfg.hardware.nvlink_domain
    if c.kind != "jobset" or c.nodes == 1 or not domain:
        return
    per_slice = math.prod(cfg.ici_filled.values())
    multi_node_nvlink = domain > c.gpus_per_node and per_slice > c.gpus_per_node
    if multi_node_nvlink and not net.resource_claim_template:
        yield Problem(
            "network",
            f"the ICI axes span {per_slice // c.gpus_per_node} nodes of an NVL72 rack, but network={net.name} "
            "gives the pods no multi-node NVLink (an IMEX channel of an NVIDIA ComputeDomain)",
            "network=nvl72_ib (NVLink within each rack, InfiniBand between racks) or network=gb200_computedomain",
        )
    all_on_nvlink = multi_node_nvlink and cfg.num_slices == 1 and per_slice <= domain
    if not all_on_nvlink and not net.resources:
        yield Problem(
            "network",
            f"collectives cross nodes over the network, but network={net.name} requests no RDMA devices for the "
            "pods (NCCL would fall back to TCP sockets)",
            "network=ib (InfiniBand), network=efa (AWS), or network=nvl72_ib (GB200/GB300 racks)",
        )


INT64_MAX = 2**63 - 1
# JAX without 64-bit mode (MaxText's) keeps a seed's low 32 bits: seeds that differ above them train alike.
SEED_MAX = 2**32 - 1


def _schema_default(key: str) -> object:
    """The schema's default for a dotted key, or None (a free-form mapping's key has none)."""
    from pydantic import BaseModel

    model: object = Config
    value: object = None
    for part in key.split("."):
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        if not fields or part not in fields:
            return None
        field = fields[part]
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        model = field.annotation
    return None if isinstance(value, (BaseModel, dict, list)) else value


def _number_fix(key: str, kind: str) -> str:
    default = _schema_default(key)
    return f"{key}={default}" if default is not None else f"give {key} {kind}"


def numbers_in_range(cfg: Config) -> Iterator[Problem]:
    """Every number is finite and fits the 64-bit integers MaxText and JAX compute with (the seed, 32 bits):
    inf, nan or 10**20 would pass composition and fail only after launch, or train on silently."""
    for key, value in _numbers(cfg.to_dict()):
        if isinstance(value, float) and not math.isfinite(value):
            yield Problem(key, f"{value} is not a finite number", _number_fix(key, "a finite number"))
        elif isinstance(value, int) and key == "train.seed" and not 0 <= value <= SEED_MAX:
            yield Problem(
                key,
                f"{value} is outside 0..{SEED_MAX}: JAX (32-bit mode) keeps only a seed's low 32 bits",
                "train.seed=0 (any whole number from 0 to 4294967295)",
            )
        elif isinstance(value, int) and abs(value) > INT64_MAX:
            yield Problem(
                key,
                f"{value} does not fit in a 64-bit integer (at most {INT64_MAX})",
                _number_fix(key, "a smaller value"),
            )


# Linux: a file name holds at most 255 bytes, a path 4095; a run directory gets its own files and folders below.
NAME_BYTES, PATH_BYTES = 255, 3800


@check
def paths_fit_the_file_system(cfg: Config) -> Iterator[Problem]:
    """run.dir and run.base_dir fit a Linux file system's limits, or the run would fail once launched."""
    for key in ("run.dir", "run.base_dir"):
        value = cfg.run.dir if key == "run.dir" else cfg.run.base_dir
        if not value:
            continue
        long = [part for part in value.split("/") if len(part.encode("utf8")) > NAME_BYTES]
        if long:
            yield Problem(
                key,
                f"the folder name {long[0][:40]!r}... is {len(long[0].encode('utf8'))} bytes; a file system allows "
                f"at most {NAME_BYTES}",
                f"give {key} shorter folder names",
            )
        elif len(value.encode("utf8")) > PATH_BYTES:
            yield Problem(
                key,
                f"is {len(value.encode('utf8'))} bytes long; at most {PATH_BYTES} leaves room for the run's own "
                "files below it (Linux allows 4095 in all)",
                f"give {key} a shorter path",
            )


def _numbers(node: object, path: str = "") -> Iterator[tuple[str, int | float]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, f"{path}.{i}")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, node


@check
def no_inline_secrets(cfg: Config) -> Iterator[Problem]:
    """A rendered manifest or batch script is a file people share: secrets go in by reference only."""
    if cfg.cluster.kind == "local":
        return  # a local run passes them to its processes and redacts them from everything it writes
    sections = {"cluster.env": cfg.cluster.env, "hardware.env": cfg.hardware.env, "network.env": cfg.network.env}
    sections |= {"memory.env": cfg.memory.env, "xla.env": cfg.xla.env, "maxtext.extra": cfg.maxtext.extra}
    for where, mapping in sections.items():
        for name, value in mapping.items():
            if isinstance(value, str) and value and is_secret_name(name, cfg.run.secrets):
                yield Problem(
                    f"{where}.{name}",
                    f"a secret value would be written in plain text into the cluster={cfg.cluster.kind} job",
                    f"remove it and reference a Kubernetes Secret: cluster.secrets=[{{env: {name.upper()}, "
                    "secret: SECRET_NAME, key: KEY}] (Slurm: export it in the submitting shell)",
                )


def problems(cfg: Config) -> list[Problem]:
    """Every check's problems, in registration order; empty for a valid config. Numbers out of range (inf, nan,
    beyond 64 bits) come alone: the other checks compute with them."""
    if found := list(numbers_in_range(cfg)):
        return found
    return [p for fn in CHECKS for p in fn(cfg)]


def warnings(cfg: Config) -> list[Problem]:
    """What runs, but probably not as meant; each with its fix. Callers print them before launching."""
    return [p for fn in WARNINGS for p in fn(cfg)]


def format_warnings(found: list[Problem]) -> str:
    """One `moekit: warning:` line (and its fix) per warning."""
    return "\n".join(f"moekit: warning: {p}" for p in found)


def ensure_valid(cfg: Config) -> Config:
    """Raise one ConfigError listing every problem, or return the config unchanged."""
    found = problems(cfg)
    if found:
        body = "\n".join(f"  - {p}" for p in found)
        raise ConfigError(f"{len(found)} configuration problem(s); nothing was launched:\n{body}")
    return cfg


# The family and data checks live in their own modules and register into CHECKS when imported.
from moekit.config import data_checks as _data_checks  # noqa: E402,F401
from moekit.config import family_checks as _family_checks  # noqa: E402,F401
