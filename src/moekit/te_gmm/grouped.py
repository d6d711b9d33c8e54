"""`jax.lax.ragged_dot` semantics from a grouped GEMM that takes every row it is given (TransformerEngine's).

ragged_dot(lhs[M, K], rhs[G, K, N], group_sizes[G]) multiplies the first sum(group_sizes) rows group by group
and returns zeros for the rows after them. TE's grouped GEMM (V1, Hopper) requires sum(group_sizes) == M, and
its FP8 GEMMs want every group a multiple of ALIGN_FP8 rows (TE aligns its own MoE groups for quantized GEMMs).
MaxText's rows after the routed tokens are tile padding (zeros) or, with expert parallelism, the unused tail of
the ragged all-to-all receive buffer (uninitialized, and EP x larger than the routed rows in the worst case).
So: the rows handed to the GEMM are cut to the smallest of `buckets` static sizes that holds the routed rows
(one `lax.switch` branch per size), rows past the routed ones are zeroed and given to the last group, and the
result is padded back with zeros. With alignment, rows are moved into aligned group slots by a gather whose
gradient is the inverse gather. Everything here is exact: the same products as ragged_dot, the same zeros.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

ALIGN_FP8 = 32  # rows per group slot for FP8 (TE's FP8 grouped GEMM tests align groups to 32)
GEMM_SCOPE = "moekit_grouped_gemm"  # named scope of the grouped GEMM itself (profiles group its kernels by it)
ADAPTER_SCOPE = "moekit_ragged_dot"

# (x[R, K], w[G, K, N], group_sizes[G] int32 summing to R, out dtype) -> [R, N]
Gemm = Callable[[jax.Array, jax.Array, jax.Array, jnp.dtype], jax.Array]


def row_sizes(rows: int, groups: int, buckets: int, align: int) -> list[int]:
    """The static row counts a call may hand to the GEMM, ascending; the last holds every routed row."""
    upper = rows if align == 1 else _round_up(rows + groups * (align - 1), align)
    step = align if align > 1 else 128
    sizes = {min(upper, _round_up(math.ceil(upper * j / buckets), step)) for j in range(1, buckets + 1)}
    return sorted(sizes | {upper})


def ragged_dot(
    lhs: jax.Array,
    rhs: jax.Array,
    group_sizes: jax.Array,
    out_dtype: jnp.dtype,
    gemm: Gemm,
    buckets: int = 1,
    align: int = 1,
) -> jax.Array:
    """jax.lax.ragged_dot(lhs, rhs, group_sizes) computed by `gemm` on at most len(row_sizes) static shapes."""
    rows, groups = lhs.shape[0], rhs.shape[0]
    gs = group_sizes.astype(jnp.int32)
    aligned = gs if align == 1 else _round_up(gs, align)
    sizes = row_sizes(rows, groups, buckets, align)
    branches = [functools.partial(_on_rows, size, align, gemm, out_dtype) for size in sizes]
    with jax.named_scope(ADAPTER_SCOPE):
        if len(branches) == 1:
            return branches[0](lhs, rhs, gs, aligned)
        needed = jnp.sum(aligned)  # the smallest size that holds every (aligned) routed row
        index = jnp.minimum(jnp.sum(jnp.asarray(sizes, jnp.int32) < needed), len(sizes) - 1)
        return jax.lax.switch(index, branches, lhs, rhs, gs, aligned)


def _on_rows(size: int, align: int, gemm: Gemm, out_dtype, lhs, rhs, gs, aligned) -> jax.Array:
    rows = lhs.shape[0]
    if align == 1:
        total = jnp.sum(gs)
        x = lhs[:size] if size < rows else lhs
        x = jnp.where((jnp.arange(size) < total)[:, None], x, jnp.zeros((), x.dtype))
        with jax.named_scope(GEMM_SCOPE):
            y = gemm(x, rhs, gs.at[-1].add(size - total), out_dtype)
        return y if size == rows else jnp.pad(y, ((0, rows - size), (0, 0)))
    src, src_ok, dst, dst_ok = _aligned_layout(gs, aligned, rows, size)
    x = _move_rows(lhs, src, src_ok, dst, dst_ok)  # row d of x is row src[d] of lhs (or zero)
    with jax.named_scope(GEMM_SCOPE):
        y = gemm(x, rhs, aligned.at[-1].add(size - jnp.sum(aligned)), out_dtype)
    return _move_rows(y, dst, dst_ok, src, src_ok)


def _aligned_layout(gs, aligned, rows: int, size: int):
    """For each of `size` slots the source row (and whether it holds one); for each source row its slot."""
    ends, slot_ends = jnp.cumsum(gs), jnp.cumsum(aligned)
    starts, slot_starts = ends - gs, slot_ends - aligned
    last = gs.shape[0] - 1
    d = jnp.arange(size, dtype=jnp.int32)
    g = jnp.minimum(jnp.searchsorted(slot_ends, d, side="right"), last)
    offset = d - slot_starts[g]
    src_ok = offset < gs[g]
    src = jnp.clip(starts[g] + offset, 0, rows - 1)
    r = jnp.arange(rows, dtype=jnp.int32)
    g = jnp.minimum(jnp.searchsorted(ends, r, side="right"), last)
    dst_ok = r < ends[-1]
    dst = jnp.clip(r - starts[g] + slot_starts[g], 0, size - 1)
    return src, src_ok, dst, dst_ok


@jax.custom_vjp
def _move_rows(x, index, ok, inverse, inverse_ok):
    """out[i] = x[index[i]] where ok[i], else 0; a partial permutation, so its gradient is the inverse gather."""
    return jnp.where(ok[:, None], x[index], jnp.zeros((), x.dtype))


def _move_rows_fwd(x, index, ok, inverse, inverse_ok):
    return _move_rows(x, index, ok, inverse, inverse_ok), (index, ok, inverse, inverse_ok)


def _move_rows_bwd(res, g):
    index, ok, inverse, inverse_ok = res
    return _move_rows(g, inverse, inverse_ok, index, ok), None, None, None, None


_move_rows.defvjp(_move_rows_fwd, _move_rows_bwd)


def _round_up(x, multiple: int):
    return (x + multiple - 1) // multiple * multiple


def reference_gemm(x, w, gs, out_dtype) -> jax.Array:
    """The grouped GEMM as XLA computes it (what the wiring test and the CPU checks run the layout on)."""
    return jax.lax.ragged_dot(x, w, gs, preferred_element_type=out_dtype)


def te_gemm(fp8: bool) -> Gemm:
    """TransformerEngine's grouped_dense, in the input dtype or FP8 with current (per-group, just-in-time) scaling.

    Imported at the first call, inside tracing: TE must load after jax's backend (and its cuDNN) is up.
    """
    from transformer_engine.jax.dense import grouped_dense
    from transformer_engine.jax.quantize import QuantizerFactory, ScalingMode, noop_quantizer_set

    def run(x, w, gs, out_dtype):
        quantizers = noop_quantizer_set
        if fp8:  # E4M3 forward, E5M2 gradients: the HYBRID format of TE's Float8CurrentScaling recipe
            quantizers = QuantizerFactory.create_set(
                scaling_mode=ScalingMode.CURRENT_TENSOR_SCALING,
                fwd_dtype=jnp.float8_e4m3fn,
                bwd_dtype=jnp.float8_e5m2,
                n_groups=w.shape[0],
            )
        return grouped_dense(x, w, gs, preferred_element_type=out_dtype, quantizer_set=quantizers)

    return run
