"""Cross-field checks of a typed config, run before anything launches.

Each check returns Problems (key, what is wrong, the override that fixes it); `check` runs all of
them so a user sees every problem at once. Pure: no environment, files or clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from moekit.config.schema import Config
from moekit.errors import ConfigError
from moekit.redact import is_secret_name


class Problem(NamedTuple):
    key: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}\n    fix: {self.fix}"


Check = Callable[[Config], Iterator[Problem]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


@check
def mesh_matches_devices(cfg: Config) -> Iterator[Problem]:
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
            "set one ICI axis to -1 (e.g. parallelism.ici.fsdp=-1) or make the product equal the devices per slice",
        )


@check
def processes_fit_devices(cfg: Config) -> Iterator[Problem]:
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
def experts_divide_over_ep(cfg: Config) -> Iterator[Problem]:
    ep = cfg.ici_filled["expert"] * cfg.parallelism.dcn.expert
    if ep > 0 and cfg.model.num_experts % ep:
        yield Problem(
            "parallelism.ici.expert",
            f"{cfg.model.num_experts} experts do not divide evenly over expert parallelism {ep}",
            f"choose an expert-parallel size that divides {cfg.model.num_experts} "
            f"(e.g. parallelism.ici.expert={math.gcd(cfg.model.num_experts, ep)}) or change model.num_experts",
        )


@check
def batch_divides(cfg: Config) -> Iterator[Problem]:
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
            "use a dropless back end (moe=tokamax, moe=dense, moe=te) or set moe.allow_token_dropping=true "
            "for a deliberate baseline",
        )


@check
def megablox_on_gpu(cfg: Config) -> Iterator[Problem]:
    if cfg.moe.backend == "megablox" and cfg.hardware.platform == "gpu" and not cfg.moe.force:
        yield Problem(
            "moe",
            "moe=megablox is MaxText's TPU Pallas kernel; on GPU it runs in interpret mode "
            "(measured 31 TFLOP/s/device vs 278 for moe=tokamax on one H200, MaxText 0.2.5, 2026-12-02)",
            "use moe=tokamax (or moe=te on the NGC image); moe.force=true runs it anyway",
        )


@check
def tokamax_gpu_takes_half_precision(cfg: Config) -> Iterator[Problem]:
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
    return cfg.ici_filled["expert"] * cfg.parallelism.dcn.expert


def uses_ring_of_experts(cfg: Config) -> bool:
    """moe.dispatch=ring, or the raw MaxText key (maxtext.extra wins over the translated value)."""
    return bool(cfg.maxtext.extra.get("use_ring_of_experts", cfg.moe.dispatch == "ring"))


@check
def te_moe_requirements(cfg: Config) -> Iterator[Problem]:
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


@check
def dispatch_fits_backend(cfg: Config) -> Iterator[Problem]:
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
    grouped = moe.backend in ("tokamax", "ragged_dot", "megablox")
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
            "moe.dispatch=ring (ring of experts; with moe=megablox on CPU), or parallelism.ici.expert=1",
        )


@check
def memory_policy_consistent(cfg: Config) -> Iterator[Problem]:
    mem = cfg.memory
    if mem.tensors and mem.remat_policy != "custom":
        yield Problem(
            "memory.remat_policy",
            f"per-tensor choices ({', '.join(mem.tensors)}) are read by MaxText only with remat_policy=custom; "
            f"remat_policy={mem.remat_policy} ignores them",
            "memory.remat_policy=custom, or choose a memory option without tensors (memory=remat_full)",
        )


@check
def attention_supported(cfg: Config) -> Iterator[Problem]:
    if cfg.model.attention == "cudnn_flash_te" and cfg.hardware.platform != "gpu":
        yield Problem(
            "model.attention",
            f"attention=cudnn_flash_te is TransformerEngine's cuDNN fused attention: NVIDIA GPUs only, "
            f"hardware={cfg.hardware.name}",
            "model.attention=dot_product (or null for MaxText's choice)",
        )


# Kubernetes names: a JobSet name is a DNS-1035 label, a namespace a DNS-1123 label (both <= 63 characters).
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Process 0's hostname <name>-workers-0-0.<name> (render/jobset.py) must itself fit in 63 characters.
_JOBSET_NAME_MAX = (63 - len("-workers-0-0.")) // 2


@check
def jobset_names(cfg: Config) -> Iterator[Problem]:
    c = cfg.cluster
    if c.kind != "jobset":
        return
    name = c.name or cfg.experiment_name.replace("_", "-").lower()
    if not _DNS1035.fullmatch(name) or len(name) > _JOBSET_NAME_MAX:
        yield Problem(
            "cluster.name",
            f"JobSet name '{name}' is not a DNS-1035 label of at most {_JOBSET_NAME_MAX} characters "
            "(lower-case letters, digits and '-', starting with a letter; pod hostnames repeat it twice)",
            f"cluster.name={(re.sub(r'[^a-z0-9-]+', '-', name.lower()).strip('-') or 'moe')[:_JOBSET_NAME_MAX]}",
        )
    if not _DNS1123.fullmatch(c.namespace) or len(c.namespace) > 63:
        yield Problem(
            "cluster.namespace",
            f"namespace '{c.namespace}' is not a DNS-1123 label (lower-case letters, digits and '-', <= 63)",
            "cluster.namespace=default, or the name `kubectl get namespaces` shows",
        )


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
    return [p for fn in CHECKS for p in fn(cfg)]


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
