"""Failures that users of moekit's stack reported on real clusters, caught from the configuration before launch.

Each check names its public source; docs/known-issues.md lists every known failure, what moekit does about it and
the test that shows it. These are warnings: the job can run, but on the stack the source names it breaks or slows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from moekit.config.checks.problem import Problem
from moekit.config.schema import Config

DOC = "docs/known-issues.md"


def _ep_spans_racks(cfg: Config) -> bool:
    """Whether an expert-parallel group may hold GPUs of two multi-node NVLink domains (NVL72 racks).

    ICI axes are one slice; DCN axes join slices. An EP group on a DCN axis spans slices; an ICI slice larger than
    a domain spans domains; and a job larger than one domain has slices the scheduler may place across two racks.
    """
    domain, c = cfg.hardware.nvlink_domain, cfg.cluster
    if cfg.expert_parallel_size <= 1 or not domain or domain <= c.gpus_per_node:
        return False  # no EP, or NVLink ends at the node: the EP group's network traffic is by design
    return cfg.parallelism.dcn.expert > 1 or cfg.num_devices > domain


def _ep_on_the_network(cfg: Config) -> bool:
    """Whether the EP all-to-all may run over the scale-out network (not only NVLink)."""
    if cfg.expert_parallel_size <= 1:
        return False
    domain = cfg.hardware.nvlink_domain or cfg.cluster.gpus_per_node
    slice_devices = math.prod(v for v in cfg.ici_filled.values() if v > 0)
    # A slice that a scheduler may place across two racks is ep_group_within_one_nvlink_domain's: its fix (one
    # rack per slice) keeps the all-to-all on NVLink.
    return cfg.parallelism.dcn.expert > 1 or slice_devices > domain


def spcx_plugin_at_high_ep(cfg: Config) -> Iterator[Problem]:
    """NCCL 2.30.5 with the SPCX network plug-in corrupts grouped variable-split all-to-all payloads at high EP
    (NVIDIA-NeMo/Megatron-Bridge #5462; its 0.6.2 release notes' known issues)."""
    if cfg.hardware.platform != "gpu" or "NCCL_IB_DISABLE" not in cfg.network.env or not _ep_on_the_network(cfg):
        return
    if "NCCL_NET_PLUGIN" in cfg.cluster.env or "NCCL_NET" in cfg.cluster.env:
        return
    yield Problem(
        "network",
        f"expert parallelism {cfg.expert_parallel_size} can send its all-to-all over InfiniBand (network="
        f"{cfg.network.name}); with NCCL 2.30.5 and the SPCX network plug-in (HPC-X) the payloads can arrive "
        f"corrupted at high EP (Megatron-Bridge #5462; {DOC})",
        "cluster.env.NCCL_NET_PLUGIN=none cluster.env.NCCL_NET=IB (NCCL's own IB transport), unless the image's "
        "NCCL is not 2.30.5",
    )


def ep_group_within_one_nvlink_domain(cfg: Config) -> Iterator[Problem]:
    """EP all-to-alls hang when the EP group spans two NVL72 racks (NVIDIA-NeMo/RL #2937; workaround
    NCCL_PXN_DISABLE=1, and topology-aware placement in NVIDIA-NeMo/RL PR #2986)."""
    if not _ep_spans_racks(cfg) or "NCCL_PXN_DISABLE" in cfg.cluster.env or "NCCL_P2P_PXN_LEVEL" in cfg.cluster.env:
        return
    domain = cfg.hardware.nvlink_domain
    yield Problem(
        "parallelism",
        f"{cfg.num_devices} GPUs fill more than one {domain}-GPU NVLink domain of hardware={cfg.hardware.name}, and "
        f"an expert-parallel group of {cfg.expert_parallel_size} ranks may hold GPUs of two racks: EP all-to-alls "
        f"across racks hung in NVIDIA-NeMo/RL #2937 ({DOC})",
        "place each slice's pods in one rack (Kueue topology-aware scheduling on the NVLink-domain label), or "
        "cluster.env.NCCL_PXN_DISABLE=1 (NeMo RL's workaround: about 16% slower, not enough for its largest run)",
    )


def cpu_binding_for_tp_ep(cfg: Config) -> Iterator[Problem]:
    """NCCL 2.30 restores each process's own CPU affinity after init (NVIDIA/nccl #2033): unbound processes then
    float across NUMA nodes, which slowed training after 2.29 -> 2.30 there and slows TP+EP per Megatron-Bridge."""
    c = cfg.cluster
    if not cfg.backend.te_block or c.processes_per_node <= 1 or cfg.ici_filled["tensor"] <= 1:
        return
    yield Problem(
        "cluster.processes_per_node",
        f"tensor parallelism {cfg.ici_filled['tensor']} with expert parallelism on {c.processes_per_node} processes "
        f"per node: moe={cfg.moe.backend} needs NCCL >= 2.30, which no longer leaves each process bound to its GPU's "
        f"CPUs (NVIDIA/nccl #2033), and TP+EP slows when processes float across NUMA nodes ({DOC})",
        "bind each process to its GPU's NUMA node: Slurm srun --cpu-bind (cluster=slurm), or the kubelet's static "
        "CPU manager with the single-numa-node topology policy (cluster=jobset)",
    )
