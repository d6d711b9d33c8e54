"""Whether this host can run a sweep's base at all (effects: the host probes), asked before any folder or run."""

from __future__ import annotations

from moekit.base.errors import MoekitError
from moekit.config.schema import Config
from moekit.series import tuning

# What tune runs on a host without the base's accelerator: the same sweep on the CPU smoke model.
CPU_FORM = "moekit tune experiment=smoke --axis train.per_device_batch_size=2,4"


def runs_here(base: list[str], cfg: Config) -> None:
    """Refuse, before any folder or run, a sweep whose base needs what this host lacks (GPUs, TransformerEngine):
    every trial would be refused one by one."""
    import os

    from moekit.preflight import host as preflight

    host = preflight.Host(dict(os.environ))
    probes = (preflight.gpus_present, preflight.packages_present, preflight.hook_ready)
    found = [p for probe in probes for p in probe(cfg, host) if not isinstance(p, str)]
    if found:
        body = "\n".join(f"  - {p}" for p in found)
        raise MoekitError(
            f"the sweep's base ({tuning.label(base)}) cannot run on this host; nothing was launched:\n{body}\n"
            f"  fix: run the tune on a host that has them, or tune the CPU form here: {CPU_FORM}"
        )
