"""Attention kernels moekit runs inside MaxText's own attention call (`model.attention=<name>` of `KERNELS`).

MaxText 0.2.5 has no option for them. Each takes over the call of one MaxText kernel (its carrier): MaxText is
given the carrier's name, so its config, sharding rules and remat names stay MaxText's, and each worker's hook
(`hook`) replaces that one method of `AttentionOp` before the trainer starts. translate/ sets the environment
variable below; the worker reads it.
"""

from __future__ import annotations

from typing import NamedTuple

ENV = "MOEKIT_ATTENTION"  # launcher -> worker: which of KERNELS takes over its carrier's call


class Kernel(NamedTuple):
    """One moekit attention kernel: the MaxText kernel whose call it takes over, and what runs instead."""

    carrier: str
    runs: str
    min_sm: int  # oldest NVIDIA architecture its package ships kernels for


KERNELS: dict[str, Kernel] = {
    # tokamax 0.0.17's Pallas Mosaic GPU flash attention: forward and backward kernels for SM90 (and SM80/SM100),
    # unequal q/k and v head dims (MLA's 192/128) without padding v. Chosen by benchmarks/attention_survey.py.
    "tokamax_mosaic": Kernel(
        "cudnn_flash_jax", "tokamax.dot_product_attention(implementation='mosaic'), causal, no segment ids", 80
    ),
}


def maxtext_kernel(name: str | None) -> str | None:
    """The attention kernel MaxText is given for `model.attention=name`."""
    return KERNELS[name].carrier if name in KERNELS else name


def engaged(environ: dict[str, str]) -> bool:
    """Whether this worker's environment asks for one of moekit's attention kernels."""
    return bool(environ.get(ENV))
