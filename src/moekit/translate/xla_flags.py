"""Translate the xla group into XLA_FLAGS (pure). The flag table itself is conf/xla/<option>.yaml."""

from __future__ import annotations

from typing import NamedTuple

from moekit.config.schema import Config, Scalar
from moekit.translate import values


class Flag(NamedTuple):
    """One XLA flag and the config choice it comes from."""

    name: str
    value: Scalar
    origin: str

    def render(self) -> str:
        """The flag as one XLA_FLAGS word, `--name=value`."""
        return values.xla_flag(self.name, self.value)


def flag_entries(cfg: Config) -> list[Flag]:
    """Each flag with the config choice that set it; the CPU host-device count comes first when needed."""
    flags = []
    if cfg.hardware.platform == "cpu" and cfg.devices_per_process > 1:
        flags.append(Flag("xla_force_host_platform_device_count", cfg.devices_per_process, "cluster (host devices)"))
    flags.extend(Flag(k, v, f"xla={cfg.xla.name}") for k, v in cfg.xla.flags.items())
    return flags


def xla_flags(cfg: Config) -> list[str]:
    """Flags in the order conf/ lists them."""
    return [f.render() for f in flag_entries(cfg)]


def flag_origins(cfg: Config) -> dict[str, str]:
    """Each rendered flag -> the config choice that set it (what --dry-run shows beside it)."""
    return {f.render(): f.origin for f in flag_entries(cfg)}
