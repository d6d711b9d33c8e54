"""Replace MaxText's `AttentionOp.cudnn_jax_flash_attention` with one of moekit's kernels (in each worker).

Only training calls are taken over: MaxText's decode paths keep the carrier. The replacement returns what the
carrier returns in training (the output, tagged "context" for the remat policies, and no log-sum-exp: MaxText
reads it only when it joins prefill and decode caches).
"""

from __future__ import annotations

import sys

from moekit.attention import ENV, KERNELS

MARKER = "moekit attention: engaged"  # one line in each process's log when the hook is in place


class HookError(RuntimeError):
    """The hook cannot be installed."""


def install_from_env(environ: dict[str, str]) -> bool:
    """Install the hook if the environment names a kernel; True when installed."""
    name = environ.get(ENV)
    if not name:
        return False
    install(name)
    return True


def install(name: str) -> None:
    """Route MaxText's carrier kernel call to `name` (KERNELS), or raise HookError."""
    if name not in KERNELS:
        raise HookError(f"{ENV}={name}: choose one of {', '.join(KERNELS)}")
    from maxtext.layers import attention_op

    op = attention_op.AttentionOp
    method = "cudnn_jax_flash_attention"
    if KERNELS[name].carrier != "cudnn_flash_jax" or not hasattr(op, method):
        raise HookError(f"MaxText's AttentionOp has no {method}: this MaxText is not the one moekit was written for")
    real = getattr(getattr(op, method), "_moekit_real", getattr(op, method))  # installed twice: wrap once

    def call(self, query, key, value, decoder_segment_ids, model_mode=attention_op.MODEL_MODE_TRAIN):
        if model_mode != attention_op.MODEL_MODE_TRAIN:
            return real(self, query, key, value, decoder_segment_ids, model_mode)
        if self.dropout_rate:
            raise HookError(f"model.attention={name} has no attention dropout (dropout_rate={self.dropout_rate})")
        import tokamax

        out = tokamax.dot_product_attention(query, key, value, scale=1.0, is_causal=True, implementation="mosaic")
        return attention_op.checkpoint_name(out, "context"), None

    call._moekit_real = real
    setattr(op, method, call)
    print(f"{MARKER}: MaxText attention={KERNELS[name].carrier} -> {KERNELS[name].runs}")
    sys.stdout.flush()
