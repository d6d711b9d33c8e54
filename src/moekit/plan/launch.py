"""What the plan refuses before launch (`moekit train`, `--dry-run`, `moekit render`): a layout of the TE MoE block
(moe=te) whose memory estimate, with the block's NCCL EP receive buffers as TE reserves them (plan/te_ep.py), does
not fit a device. The plan itself only warns (it is the tool for finding a layout that fits); a run or a manifest
of such a layout would fail at its first step on the cluster, after the nodes were paid for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moekit.base.errors import ConfigError
from moekit.config.schema import Config
from moekit.plan import calibrate, memory, tables
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims
from moekit.plan.tables import Tables
from moekit.translate.env import env

GIB = memory.GIB
BLOG_FACTOR = 2.0
"""The blog's ragged_buffer_factor: a receive capacity of twice the balanced load."""


def _estimate(cfg: Config, values: Mapping[str, Any], mesh: Mesh, factor: float) -> memory.MemoryPlan:
    hw = cfg.hardware
    return memory.estimate(Dims.from_values(values), values, mesh, hw.hbm_gib, env(cfg), hw.host_gib_per_gpu, factor)


def refusal(cfg: Config, tables: Tables) -> str | None:
    """Why a moe=te layout cannot launch (its estimate with the TE receive buffers over a device's usable memory),
    with the changes that make it fit; None when it fits or the config is not moe=te on a GPU row."""
    if not cfg.backend.te_block or not cfg.hardware.hbm_gib:
        return None
    values = calibrate.values_of(cfg)
    mesh = Mesh.from_config(cfg)
    factor = float(tables.calibration.get("device_factor", 1.0))
    mem = _estimate(cfg, values, mesh, factor)
    te = mem.te_ep
    if te is None or mem.device_limit is None or mem.total("device") <= mem.device_limit or cfg.moe.force:
        return None
    what = "the dropless worst case" if te.factor is None else f"{te.factor:g} x the balanced load"
    fixes = []
    if te.factor is None or te.factor > BLOG_FACTOR:
        trial = _estimate(cfg, {**values, "ragged_buffer_factor": BLOG_FACTOR}, mesh, factor)
        if trial.device_limit is not None and trial.total("device") <= trial.device_limit:
            fixes.append(
                f"moe.ragged_buffer_factor={BLOG_FACTOR:g} (the blog's: a step that overflows it drops tokens, and "
                "MaxText stops the run at its next overflow check)"
            )
    batch = float(values["per_device_batch_size"])
    for smaller in sorted({b for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32) if b < batch}, reverse=True):
        trial = _estimate(cfg, {**values, "per_device_batch_size": smaller}, mesh, factor)
        if trial.device_limit is not None and trial.total("device") <= trial.device_limit:
            fixes.append(f"train.per_device_batch_size={smaller:g}")
            break
    fixes.append("more expert or FSDP parallelism (parallelism.*): `moekit plan … --search` ranks the layouts that fit")
    fixes.append("moe.force=true to launch anyway (the estimate is calibrated on one H200 point: docs/plan.md)")
    routed = next((i.bytes for i in mem.items if i.name.startswith("TE NCCL EP")), 0.0) * mem.calibration
    return (
        f"moe=te: this layout does not fit a device with the TE block's NCCL EP receive buffers: {te.capacity:,} "
        f"rows per rank and MoE layer ({what}: {te.bytes_of(te.capacity) / GIB:.1f} GiB; no-drop worst case "
        f"{te.worst:,} rows, {te.bytes_of(te.worst) / GIB:.1f} GiB); with the expert GEMMs over them "
        f"({routed / GIB:.1f} GiB) the estimate is {mem.total('device') / GIB:.1f} GiB per device, "
        f"{mem.device_limit / GIB:.1f} GiB usable on hardware={cfg.hardware.name} (`moekit plan` lists every item)\n"
        "  fix: " + "; or ".join(fixes)
    )


def ensure(cfg: Config) -> None:
    """Raise ConfigError (the refusal and its fix) where `refusal` finds one; the commands that launch or write a
    job call it once the config is loaded."""
    if cfg.backend.te_block and (why := refusal(cfg, tables.shipped())):
        raise ConfigError(why)
