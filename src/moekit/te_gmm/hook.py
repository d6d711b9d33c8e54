"""Put a grouped GEMM behind the one `jax.lax.ragged_dot` call of MaxText's sparse MoE path (in each process).

Only `maxtext.layers.moe` sees the change: its module-level name `jax` becomes a view of jax whose
`lax.ragged_dot` is moekit's; every other attribute is jax's own, and no other module is touched. The sparse
path's per-row expert biases (`RoutedMoE.transform_bias`, families with `mlp_bias`) get a gradient computed as
a matmul instead of a scatter (`bias`). The worker installs both before the trainer starts, when the
launcher's environment asks for it (translate/env.py).
"""

from __future__ import annotations

import functools
import os
import sys
import types
from typing import Any

from moekit.te_gmm import BUCKETS_ENV, MODE_ENV, bias, call_site, grouped

MARKER = "moekit te_gmm: engaged"  # one line in each process's log when the hook is in place
CALL = "moekit te_gmm: ragged_dot"  # one line per traced call (shapes; printed while compiling)

# mode -> (what runs the grouped GEMM, FP8 row alignment)
MODES: dict[str, tuple[str, int]] = {
    "te": ("transformer_engine.jax.dense.grouped_dense", 1),
    "te_fp8": ("transformer_engine.jax.dense.grouped_dense, FP8 current scaling (E4M3/E5M2)", grouped.ALIGN_FP8),
    # The same row layouts around XLA's own ragged_dot: what CPU tests run to check the wiring, not the kernel.
    "reference": ("jax.lax.ragged_dot (reference)", 1),
    "reference_fp8_layout": ("jax.lax.ragged_dot on the FP8 row layout (reference)", grouped.ALIGN_FP8),
}


class HookError(RuntimeError):
    """The hook cannot be installed, or was handed a call it does not take."""


class _View(types.ModuleType):
    """A module whose attributes are another module's, except the ones given."""

    def __init__(self, real: types.ModuleType, **replaced: Any):
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(replaced)
        self.__dict__["_moekit_real"] = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_moekit_real"], name)


def install_from_env(environ: dict[str, str]) -> bool:
    """Install the hook if the environment names a mode; True when installed."""
    mode = environ.get(MODE_ENV)
    if not mode:
        return False
    buckets = environ.get(BUCKETS_ENV, "1") or "1"
    if not buckets.isdigit():
        raise HookError(f"{BUCKETS_ENV}={buckets}: a positive number of row sizes")
    install(mode, int(buckets))
    return True


def install(mode: str, buckets: int = 1) -> None:
    """Route maxtext.layers.moe's jax.lax.ragged_dot to `mode`'s grouped GEMM, or raise HookError."""
    if mode not in MODES:
        raise HookError(f"{MODE_ENV}={mode}: choose one of {', '.join(MODES)}")
    if buckets < 1:
        raise HookError(f"{BUCKETS_ENV}={buckets}: a positive number of row sizes")
    found = call_site.problem(call_site.moe_source(), call_site.installed_version())
    if found:
        raise HookError(f"moe=te_gmm refuses to patch MaxText: {found}. Fix: {call_site.FIX}")
    import maxtext.layers.moe as moe

    checked = call_site.moe_source()
    if not os.path.samefile(moe.__file__, checked):
        raise HookError(f"maxtext.layers.moe was imported from {moe.__file__}, not from the checked {checked}")
    real = moe.jax.__dict__["_moekit_real"] if isinstance(moe.jax, _View) else moe.jax  # installed twice: once
    hooked = functools.partial(_ragged_dot, mode=mode, buckets=buckets)
    moe.jax = _View(real, lax=_View(real.lax, ragged_dot=hooked))
    moe.RoutedMoE.transform_bias = bias.transform_bias
    print(f"{MARKER}: maxtext.layers.moe jax.lax.ragged_dot -> {MODES[mode][0]} (row sizes per call: {buckets})")
    sys.stdout.flush()


def _ragged_dot(
    lhs, rhs, group_sizes, precision=None, preferred_element_type=None, group_offset=None, *, mode, buckets
):
    """jax.lax.ragged_dot's signature; MaxText 0.2.5 calls it with lhs, rhs, group_sizes, preferred_element_type."""
    if group_offset is not None or lhs.ndim != 2 or rhs.ndim != 3 or group_sizes.shape != (rhs.shape[0],):
        raise HookError(
            f"moe=te_gmm takes ragged_dot(lhs[M,K], rhs[G,K,N], group_sizes[G]) without group_offset; got lhs "
            f"{lhs.shape}, rhs {rhs.shape}, group_sizes {group_sizes.shape}, group_offset {group_offset is not None}"
        )
    if lhs.dtype != rhs.dtype or str(lhs.dtype) not in ("bfloat16", "float16", "float32"):
        raise HookError(
            f"moe=te_gmm takes unquantized bf16/fp16/fp32 operands of one dtype; got {lhs.dtype} x {rhs.dtype} "
            "(MaxText's own quantization of the expert weights is not supported with it)"
        )
    out_dtype = preferred_element_type or lhs.dtype
    what, align = MODES[mode]
    print(
        f"{CALL} {lhs.dtype}[{lhs.shape[0]},{lhs.shape[1]}] x {rhs.dtype}[{rhs.shape[0]},{rhs.shape[1]},"
        f"{rhs.shape[2]}] group_sizes {group_sizes.dtype}[{group_sizes.shape[0]}] -> {out_dtype} via {what}",
        flush=True,
    )
    if mode.startswith("reference"):
        gemm = grouped.reference_gemm
    else:
        gemm = grouped.te_gemm(fp8=mode == "te_fp8")
    del precision  # TE's grouped GEMM has no precision knob; MaxText passes none
    return grouped.ragged_dot(lhs, rhs, group_sizes, out_dtype, gemm, buckets=buckets, align=align)
