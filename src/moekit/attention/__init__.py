"""Attention kernels moekit runs inside MaxText's own attention call (`model.attention=<name>`, the table in
config/kinds/attention.py).

MaxText 0.2.5 has no option for them. Each takes over the call of one MaxText kernel (its carrier): MaxText is
given the carrier's name, so its config, sharding rules and remat names stay MaxText's, and each worker's hook
(`hook`) replaces that one method of `AttentionOp` before the trainer starts. translate/ sets the environment
variable ENV; the worker reads it.
"""

from __future__ import annotations

from moekit.config.kinds.attention import ENV, KERNELS

__all__ = ["ENV", "KERNELS", "engaged"]


def engaged(environ: dict[str, str]) -> bool:
    """Whether this worker's environment asks for one of moekit's attention kernels."""
    return bool(environ.get(ENV))
