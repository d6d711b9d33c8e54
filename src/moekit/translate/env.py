"""Translate a config into the process environment (pure): one entry per concern, with its origin.

Values that belong to one group option live in that option's file (hardware, network, memory, xla env);
the two tables below are the environment that follows from a choice made elsewhere.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from moekit.config.kinds import attention
from moekit.config.schema import Config, Scalar
from moekit.translate import values
from moekit.translate.xla_flags import xla_flags

# model.attention -> env: TE's cuDNN fused attention is off unless NVTE_FUSED_ATTN=1 (the blog sets it).
ATTENTION_ENV: dict[str, dict[str, str]] = {"cudnn_flash_te": {"NVTE_FUSED_ATTN": "1"}}

# moe.dispatch=nccl_ep across nodes: NCCL EP's GPU-initiated networking type (the blog's multi-node setting).
NCCL_EP_MULTI_NODE_ENV: dict[str, str] = {"NCCL_GIN_TYPE": "3"}


class EnvVar(NamedTuple):
    """One environment variable and the config choice it comes from."""

    name: str
    value: str
    origin: str


def env_vars(cfg: Config) -> list[EnvVar]:
    """Environment shared by every process of the job (rendezvous env is added per process)."""
    out: list[EnvVar] = []

    def put(origin: str, entries: dict[str, Scalar]) -> None:
        out.extend(EnvVar(k, values.env(v), origin) for k, v in entries.items())

    if cfg.hardware.platform == "cpu":
        put("hardware=cpu", {"JAX_PLATFORMS": "cpu"})
    put(f"hardware={cfg.hardware.name}", cfg.hardware.env)
    put(f"memory={cfg.memory.name}", cfg.memory.env)
    put(f"xla={cfg.xla.name}", cfg.xla.env)
    if cfg.model.attention in ATTENTION_ENV:
        put(f"model.attention={cfg.model.attention}", ATTENTION_ENV[cfg.model.attention])
    if cfg.model.attention in attention.KERNELS:  # moekit's own kernel takes over its carrier's call (moekit.attention)
        put(f"model.attention={cfg.model.attention}", {attention.ENV: cfg.model.attention})
    if cfg.backend.hook:  # the back end's own package sets what its workers read (config/kinds/backends.py)
        job_env = importlib.import_module(cfg.backend.hook_module("job_env"))
        out.extend(EnvVar(name, value, origin) for name, value, origin in job_env.entries(cfg))
    if cfg.moe.dispatch == "nccl_ep" and cfg.cluster.nodes > 1:
        put("moe.dispatch=nccl_ep (multi-node)", NCCL_EP_MULTI_NODE_ENV)
    put(f"network={cfg.network.name}", cfg.network.env)
    flags = xla_flags(cfg)
    if flags:
        out.append(EnvVar("XLA_FLAGS", " ".join(flags), "xla"))
    merged: dict[str, EnvVar] = {}
    for var in out:
        merged.pop(var.name, None)
        merged[var.name] = var
    return list(merged.values())


def env(cfg: Config) -> dict[str, str]:
    """The process environment as a mapping, name -> value (later entries already won in `env_vars`)."""
    return {v.name: v.value for v in env_vars(cfg)}
