"""Translate a config into the process environment (pure): one entry per concern, with its origin."""

from __future__ import annotations

from typing import NamedTuple

from moekit.config.schema import Config, Scalar
from moekit.translate.xla_flags import xla_flags


class EnvVar(NamedTuple):
    name: str
    value: str
    origin: str


def _str(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def env_vars(cfg: Config) -> list[EnvVar]:
    """Environment shared by every process of the job (rendezvous env is added per process)."""
    out: list[EnvVar] = []
    if cfg.hardware.platform == "cpu":
        out.append(EnvVar("JAX_PLATFORMS", "cpu", "hardware=cpu"))
    out += [EnvVar(k, _str(v), f"hardware={cfg.hardware.name}") for k, v in cfg.hardware.env.items()]
    out += [EnvVar(k, _str(v), f"network={cfg.network.name}") for k, v in cfg.network.env.items()]
    flags = xla_flags(cfg)
    if flags:
        out.append(EnvVar("XLA_FLAGS", " ".join(flags), "xla"))
    merged: dict[str, EnvVar] = {}
    for var in out:
        merged.pop(var.name, None)
        merged[var.name] = var
    return list(merged.values())


def env(cfg: Config) -> dict[str, str]:
    return {v.name: v.value for v in env_vars(cfg)}
