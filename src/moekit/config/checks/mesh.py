"""The mesh: its axes fill the job's devices, experts and the batch divide over them, ICI stays in one NVLink domain."""

from __future__ import annotations

import math
from collections.abc import Iterator

from moekit.config.checks.problem import Problem
from moekit.config.schema import Config


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


def experts_divide_over_ep(cfg: Config) -> Iterator[Problem]:
    """Each expert-parallel rank holds the same number of experts."""
    ep = cfg.expert_parallel_size
    if ep > 0 and cfg.model.num_experts % ep:
        yield Problem(
            "parallelism.ici.expert",
            f"{cfg.model.num_experts} experts do not divide evenly over expert parallelism {ep}",
            f"an expert-parallel size that divides {cfg.model.num_experts}: "
            f"{expert_axis_fix(cfg, math.gcd(cfg.model.num_experts, ep))} (or change model.num_experts)",
        )


def expert_axis_fix(cfg: Config, size: int) -> str:
    """parallelism.ici.expert=SIZE, plus an axis at -1 to fill the devices when no other axis does."""
    others = [k for k, v in cfg.parallelism.ici.items() if v == -1 and k != "expert"]
    return f"parallelism.ici.expert={size}" + ("" if others else " parallelism.ici.fsdp=-1")


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


def _smallest_factor(n: int) -> int:
    return next(p for p in range(2, n + 1) if n % p == 0)


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
