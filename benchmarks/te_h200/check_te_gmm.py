"""On the GPU: moe=te_gmm's grouped GEMM (moekit's row layout around TE's grouped_dense) against jax.lax.ragged_dot.

    python benchmarks/te_h200/check_te_gmm.py               (TE importable; one line per case, exit 1 on a miss)
    python benchmarks/te_h200/check_te_gmm.py --reference   (anywhere: XLA's ragged_dot in TE's place)

Forward and both gradients, bf16 and FP8 (current scaling), with rows after the routed ones filled with NaN
(the expert-parallel receive buffer's tail) and with several row sizes per call, at a small MoE shape.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from moekit.te_gmm import grouped

M, K, N, G, ROUTED = 2048, 512, 256, 8, 1500


def main() -> int:
    gemm = (lambda fp8: grouped.reference_gemm) if "--reference" in sys.argv else grouped.te_gemm
    rng = np.random.default_rng(0)
    sizes = rng.multinomial(ROUTED, np.full(G, 1 / G)).astype(np.int32)
    sizes[1] = 0  # an empty expert
    sizes[0] += ROUTED - sizes.sum()
    gs = jnp.asarray(sizes)
    x = jnp.asarray(rng.normal(size=(M, K)), jnp.bfloat16).at[ROUTED:].set(jnp.nan)
    w = jnp.asarray(rng.normal(size=(G, K, N)) / np.sqrt(K), jnp.bfloat16)
    keep = (jnp.arange(M) < ROUTED)[:, None]

    def reference(x, w):
        return jax.lax.ragged_dot(jnp.where(keep, x, 0).astype(jnp.float32), w.astype(jnp.float32), gs)

    def loss(f):
        return lambda x, w: jnp.sum(jnp.sin(f(x, w).astype(jnp.float32)))

    ry, (rdx, rdw) = reference(x, w), jax.grad(loss(reference), (0, 1))(x, w)
    failed = False
    for fp8, buckets, tol in [(False, 1, 0.02), (False, 4, 0.02), (True, 1, 0.15), (True, 4, 0.15)]:
        align = grouped.ALIGN_FP8 if fp8 else 1

        def ours(x, w, fp8=fp8, buckets=buckets, align=align):
            return grouped.ragged_dot(x, w, gs, jnp.bfloat16, gemm(fp8), buckets, align)

        try:
            y = jax.jit(ours)(x, w).astype(jnp.float32)
            dx, dw = jax.jit(jax.grad(loss(ours), (0, 1)))(x, w)
            errs = [_rel(y, ry), _rel(dx, rdx), _rel(dw, rdw)]
            ok = all(e <= tol for e in errs) and not bool(jnp.any(y[ROUTED:])) and bool(jnp.all(jnp.isfinite(dx)))
            name = f"te_gmm {'fp8' if fp8 else 'bf16'} row sizes {buckets}"
            print(
                f"{name}: relative error y {errs[0]:.3g} dx {errs[1]:.3g} dw {errs[2]:.3g} (tolerance {tol}), "
                f"tail rows zero, finite gradients: {'ok' if ok else 'MISS'}"
            )
        except Exception as exc:  # report every case, then fail
            ok = False
            print(f"te_gmm {'fp8' if fp8 else 'bf16'} row sizes {buckets}: {type(exc).__name__}: {str(exc)[:400]}")
        failed |= not ok
    return 1 if failed else 0


def _rel(a, b) -> float:
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-30))


if __name__ == "__main__":
    sys.exit(main())
