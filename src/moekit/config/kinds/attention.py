"""moekit's own attention kernels (`model.attention=<name>` of `KERNELS`): the table the checks and the translation
read. The hook that runs them in each worker is moekit/attention/."""

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
    # unequal q/k and v head dims (MLA's 192/128) without padding v: the fastest forward at the MLA shape, 0.95x
    # cuDNN in training (docs/performance/attention_h200.md).
    "tokamax_mosaic": Kernel(
        "cudnn_flash_jax", "tokamax.dot_product_attention(implementation='mosaic'), causal, no segment ids", 80
    ),
}


def maxtext_kernel(name: str | None) -> str | None:
    """The attention kernel MaxText is given for `model.attention=name`."""
    return KERNELS[name].carrier if name in KERNELS else name
