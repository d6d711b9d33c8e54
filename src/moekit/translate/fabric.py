"""fabric=... -> the worker's fabric phase spec (pure): mesh, sizes, bounds and where process 0 records it."""

from __future__ import annotations

import json

from moekit.config.schema import Config
from moekit.translate.env import EnvVar
from moekit.translate.fabric_verdict import AXES, FABRIC_ENV, RECORD


def spec(cfg: Config, run_dir: str) -> dict[str, object]:
    """What every process of the job checks (moekit.worker.fabric reads it): the mesh as MaxText builds it from the
    parallelism config, the sizes and bounds, the hardware whose link rates it is judged against."""
    f = cfg.fabric
    dcn = dict(cfg.parallelism.dcn.items())
    return {
        "mode": f.mode,
        "min_fraction": f.min_fraction,
        "sizes": sorted(set(f.sizes)),
        "iterations": f.iterations,
        "timeout_s": f.timeout_s,
        "ici": {a: cfg.ici_filled[a] for a in AXES},
        "dcn": {a: dcn[a] for a in AXES},
        "hardware": cfg.hardware.name,
        "links": cfg.hardware.links.model_dump() if cfg.hardware.links else None,
        "platform": cfg.hardware.platform,
        "nvlink_domain": cfg.hardware.nvlink_domain,
        "nodes": cfg.cluster.nodes,
        "file": f"{run_dir}/{RECORD}",
        "only": f.only,
    }


def env_vars(cfg: Config, run_dir: str) -> list[EnvVar]:
    """The worker's switch: the check's spec as one JSON line (nothing with fabric.mode=off)."""
    if cfg.fabric.mode == "off":
        return []
    return [EnvVar(FABRIC_ENV, json.dumps(spec(cfg, run_dir), separators=(",", ":")), f"fabric.mode={cfg.fabric.mode}")]
