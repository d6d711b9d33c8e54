"""Translate the xla group into XLA_FLAGS (pure). The flag table itself is conf/xla/<option>.yaml."""

from __future__ import annotations

from moekit.config.schema import Config, Scalar


def format_flag(name: str, value: Scalar) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"--{name}={value}"


def xla_flags(cfg: Config) -> list[str]:
    """Flags in the order conf/ lists them; the CPU host-device count comes first when needed."""
    flags = []
    if cfg.hardware.platform == "cpu" and cfg.devices_per_process > 1:
        flags.append(format_flag("xla_force_host_platform_device_count", cfg.devices_per_process))
    flags.extend(format_flag(k, v) for k, v in cfg.xla.flags.items())
    return flags
