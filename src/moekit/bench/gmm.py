"""Grouped-GEMM microbenchmark: one expert GEMM of an MoE layer, per back end, against the ceiling.

The ceiling is the same FLOPs as an equal-group batched matmul (one cuBLAS/XLA dot per group, all groups the
same size), which is what a grouped GEMM would reach if ragged groups cost nothing. Shapes follow the
routed-expert GEMM: rows = tokens x top-k (each token copy lands in one group), K = hidden, N = expert FFN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from moekit.base.figures import significant
from moekit.bench.timing import median_seconds

BACKENDS = ("tokamax", "tokamax_triton", "ragged_dot", "te", "te_gmm", "te_gmm_fp8")
# Largest error against the batched matmul a back end may show on balanced groups, relative to the result's scale.
TOLERANCE = {"te_gmm_fp8": 0.15}  # E4M3 operands: a few percent per element


@dataclass(frozen=True, slots=True)
class Shape:
    """One grouped GEMM: a `rows` x `k` input against `groups` expert weights of `k` x `n` each."""

    groups: int
    """Local experts (G)."""
    rows: int
    """Routed token copies (M = tokens x top-k)."""
    k: int
    """Contraction (model hidden size)."""
    n: int
    """Output width (expert FFN size)."""

    @property
    def flop(self) -> float:
        """Floating-point operations of one call: 2 x rows x k x n (a multiply and an add each)."""
        return 2.0 * self.rows * self.k * self.n


def group_sizes(rows: int, groups: int, skew: str, seed: int = 1) -> np.ndarray:
    """Rows per group: 'balanced' (equal), or 'dirichlet:ALPHA' (smaller ALPHA = more skew), summing to rows."""
    if skew == "balanced":
        sizes = np.full(groups, rows // groups, np.int64)
    elif skew.startswith("dirichlet:"):
        alpha = float(skew.split(":", 1)[1])
        p = np.random.default_rng(seed).dirichlet(np.full(groups, alpha))
        sizes = np.floor(p * rows).astype(np.int64)
    else:
        raise ValueError(f"unknown skew {skew!r}: use 'balanced' or 'dirichlet:ALPHA' (e.g. dirichlet:1.0)")
    sizes[-1] += rows - sizes.sum()
    return sizes.astype(np.int32)


def _tokamax(implementation: str | None) -> Callable:
    from tokamax import ragged_dot

    return lambda x, w, gs: ragged_dot(x, w, gs, implementation=implementation)


def _te() -> Callable:
    from transformer_engine.jax.dense import grouped_dense  # ImportError where TE is absent

    return lambda x, w, gs: grouped_dense(x, w, gs)


def _te_gmm(fp8: bool) -> Callable:
    from moekit.te_gmm import grouped

    gemm = grouped.te_gemm(fp8)  # ImportError where TE is absent
    align = grouped.ALIGN_FP8 if fp8 else 1
    return lambda x, w, gs: grouped.ragged_dot(x, w, gs, x.dtype, gemm, align=align)


def backend_fn(name: str, platform: str) -> tuple[Callable, str]:
    """(x, w, group_sizes) -> y for a back end, and what it runs as. Raises ImportError/ValueError if unavailable."""
    import jax

    if name == "tokamax":
        # Mosaic GPU kernel on GPUs (what moe=tokamax trains with); tokamax's portable default elsewhere.
        impl = "mosaic" if platform == "gpu" else None
        return _tokamax(impl), f"tokamax.ragged_dot implementation={impl or 'default'}"
    if name == "tokamax_triton":
        if platform != "gpu":
            raise ValueError("the Triton kernel needs a GPU")
        return _tokamax("triton"), "tokamax.ragged_dot implementation=triton"
    if name == "ragged_dot":
        return jax.lax.ragged_dot, "jax.lax.ragged_dot (XLA)"
    if name == "te":
        return _te(), "transformer_engine.jax.dense.grouped_dense"
    if name in ("te_gmm", "te_gmm_fp8"):  # what moe=te_gmm trains with: moekit's row layout around grouped_dense
        fp8 = name == "te_gmm_fp8"
        return _te_gmm(fp8), f"moe=te_gmm: grouped_dense{' FP8 current scaling' if fp8 else ''} + moekit's row layout"
    raise ValueError(f"unknown back end {name!r}: choose from {', '.join(BACKENDS)}")


def available(name: str, platform: str) -> bool:
    """Whether back end `name` can run here (its library imports and it supports the platform)."""
    try:
        backend_fn(name, platform)
    except (ImportError, ValueError):
        return False
    return True


def run(
    shape: Shape,
    backends: list[str],
    skews: list[str],
    dtype: str = "bfloat16",
    iters: int = 20,
    warmup: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time the ceiling and every (back end, skew) pair; a back end that fails is reported, not fatal.

    `progress` gets one line per kernel as it finishes ([i/n] what, ms, seconds so far).
    """
    import time

    import jax
    import jax.numpy as jnp

    # Every back end is looked up before anything is timed, so the counter's total holds from the first line.
    found: dict[str, tuple[Callable, str] | Exception] = {}
    for name in backends:
        try:
            found[name] = backend_fn(name, jax.devices()[0].platform)
        except (ImportError, ValueError) as exc:
            found[name] = exc
    started = time.monotonic()
    total = 1 + sum(1 if isinstance(f, Exception) else len(skews) for f in found.values())

    def done(row: dict[str, Any]) -> None:
        if progress is not None:
            took = f"{significant(row['ms'])} ms" if row["ms"] is not None else (row["error"] or "failed").split(":")[0]
            since = time.monotonic() - started
            progress(f"[{len(rows)}/{total}] {row['backend']} {row['groups']}: {took} ({since:.0f} s)")

    if shape.rows % shape.groups:
        raise ValueError(f"rows {shape.rows} must be a multiple of groups {shape.groups} for the equal-group ceiling")
    kx, kw = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, (shape.rows, shape.k), dtype)
    w = jax.random.normal(kw, (shape.groups, shape.k, shape.n), dtype) * 0.02

    per = shape.rows // shape.groups
    ceiling = jax.jit(lambda x, w: jnp.einsum("gmk,gkn->gmn", x.reshape(shape.groups, per, shape.k), w))
    ceiling_s = median_seconds(ceiling, x, w, warmup=warmup, iters=iters)
    rows: list[dict[str, Any]] = [
        _row("ceiling", "equal-group batched matmul (jnp.einsum)", "balanced", ceiling_s, shape, ceiling_s)
    ]
    done(rows[-1])
    reference = ceiling(x, w).reshape(shape.rows, shape.n)

    for name in backends:
        if isinstance(found[name], Exception):
            rows.append(_row(name, "", "-", None, shape, ceiling_s, error=f"unavailable: {found[name]}"))
            done(rows[-1])
            continue
        fn, what = found[name]
        jitted = jax.jit(fn)
        for skew in skews:
            gs = jnp.asarray(group_sizes(shape.rows, shape.groups, skew))
            try:
                if skew == "balanced":  # same math as the ceiling: check the kernel before timing it
                    err = float(jnp.max(jnp.abs(jitted(x, w, gs).astype(jnp.float32) - reference.astype(jnp.float32))))
                    scale = float(jnp.max(jnp.abs(reference.astype(jnp.float32))))
                    if not err <= TOLERANCE.get(name, 0.02) * scale:
                        raise ArithmeticError(f"result differs from the batched matmul (max abs error {err:.3g})")
                t = median_seconds(jitted, x, w, gs, warmup=warmup, iters=iters)
                rows.append(_row(name, what, skew, t, shape, ceiling_s))
            except Exception as exc:  # a kernel's failure is a result here (e.g. OOM, unsupported shape)
                rows.append(_row(name, what, skew, None, shape, ceiling_s, error=f"{type(exc).__name__}: {exc}"[:300]))
            done(rows[-1])
    return {"shape": asdict(shape) | {"tflop_per_call": shape.flop / 1e12}, "dtype": dtype, "rows": rows}


def _row(
    backend: str, what: str, skew: str, seconds: float | None, shape: Shape, ceiling_s: float, error: str | None = None
) -> dict[str, Any]:
    return {
        "backend": backend,
        "runs_as": what,
        "groups": skew,
        "ms": None if seconds is None else seconds * 1e3,
        "tflops": None if seconds is None else shape.flop / seconds / 1e12,
        "of_ceiling": None if seconds is None else ceiling_s / seconds,
        "error": error,
    }


def format_table(result: dict[str, Any]) -> str:
    """`run`'s result as a markdown table: ms, TFLOP/s and fraction of the ceiling per back end and skew."""
    s = result["shape"]
    lines = [
        f"grouped GEMM: G={s['groups']} M={s['rows']} K={s['k']} N={s['n']} {result['dtype']}, "
        f"{s['tflop_per_call']:.3g} TFLOP per call",
        "| back end | groups | ms | TFLOP/s | of ceiling | runs as |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if r["error"]:
            lines.append(f"| {r['backend']} | {r['groups']} | - | - | - | {r['error']} |")
        else:
            lines.append(
                f"| {r['backend']} | {r['groups']} | {significant(r['ms'])} | {significant(r['tflops'])} "
                f"| {significant(r['of_ceiling'] * 100, 2)}% "
                f"| {r['runs_as']} |"
            )
    return "\n".join(lines)
