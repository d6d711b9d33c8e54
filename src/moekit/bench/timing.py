"""Timing of jitted functions and the provenance of a measurement."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moekit.base.versions import versions


def median_seconds(fn: Callable[..., Any], *args: Any, warmup: int = 3, iters: int = 20) -> float:
    """Median wall time of fn(*args) after compilation and warm-up, waiting for the device each time."""
    import jax

    jax.block_until_ready(fn(*args))  # compile
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def provenance() -> dict[str, Any]:
    """Measured here and now: device, versions, date."""
    import jax

    dev = jax.devices()[0]
    return {
        "kind": "measured",
        "date": datetime.now(UTC).date().isoformat(),
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '?')}",
        "device_count": jax.device_count(),
        "versions": versions(),
    }


def probe(shape, dtype: str = "bfloat16") -> tuple[float, float]:
    """(seconds per call of the equal-group batched matmul of `shape`, bytes/s of a row gather of its input) on the
    first device, each timed after compilation and 3 warm-up calls: what the estimate scales by.

    The benchmark's own shape, not a stand-in: a small matmul leaves a large GPU mostly idle (a 1024^3 one measured
    15.9 TFLOP/s on an H200 that does ~790 at the DeepSeek-V3 shape), so its rate says nothing about this one's.
    """
    import jax
    import jax.numpy as jnp

    per = shape.rows // shape.groups
    x = jnp.ones((shape.groups, per, shape.k), dtype)
    w = jnp.ones((shape.groups, shape.k, shape.n), dtype)
    ceiling = jax.jit(lambda x, w: jnp.einsum("gmk,gkn->gmn", x, w))
    gemm_s = median_seconds(ceiling, x, w, warmup=3, iters=5)  # warmed up as the benchmark's own calls are
    flat = x.reshape(shape.rows, shape.k)
    rows = jnp.arange(shape.rows)[::-1]
    gather = jax.jit(lambda x, i: x[i] + 1)
    moved = median_seconds(gather, flat, rows, warmup=3, iters=5)
    return gemm_s, 2.0 * flat.nbytes / moved


def least_seconds(shape, dtype: str, kernels: int, iters: int) -> tuple[float, float]:
    """(the least seconds the probe and the benchmark take at this device's dense matmul rate, that rate in FLOP/s),
    from a matmul of 256 of the shape's rows, timed in well under a second. On a CPU, where a small matmul already
    runs at the full rate, this bounds the wait before the probe of a large shape starts it."""
    import jax
    import jax.numpy as jnp

    n = min(shape.n, 1024)
    x = jnp.ones((256, shape.k), dtype)
    w = jnp.ones((shape.k, n), dtype)
    rate = 2.0 * 256 * shape.k * n / median_seconds(jax.jit(jnp.matmul), x, w, warmup=1, iters=3)
    calls = 8 + kernels * (iters + 5)  # the probe's 8 calls, then each kernel's (estimate's count)
    return calls * shape.flop / rate, rate


def cpu_bytes(shape, dtype: str) -> int:
    """The least bytes a grouped GEMM of `shape` holds at once on a CPU: its operands and output, plus one masked copy
    of its input per group (groups x rows x k), since JAX's ragged_dot has no CPU kernel and its fallback
    (lax._ragged_dot_general_impl) expands the ragged input to dense before a batched matmul."""
    item = 4 if dtype == "float32" else 2
    operands = shape.rows * shape.k + shape.groups * shape.k * shape.n + shape.rows * shape.n
    return (operands + shape.groups * shape.rows * shape.k) * item


def seconds(x: float) -> str:
    """A duration as a person reads it: '40 ms', '3.2 s', '12 s', '4.5 min'."""
    if x < 0.01:
        return f"{x * 1e3:.2g} ms"
    if x < 1:
        return f"{x * 1e3:.0f} ms"
    if x < 10:
        return f"{x:.2g} s"
    if x < 120:
        return f"{x:.0f} s"
    return f"{x / 60:.2g} min"


# Grouped kernels against a dense matmul of the same FLOPs, as measured: on one H200 tokamax's Mosaic kernel
# reached 42% of the equal-group ceiling (docs/performance.md, 2026-12-02); on a 2-core x86-64 CPU (jax 0.12.0.1,
# 2026-12-03) XLA's ragged_dot took about 10x the ceiling's time. The estimate's upper end uses these factors.
GROUPED_SLOWDOWN = {"gpu": 2.5, "cpu": 10.0}


def estimate(
    shape, dtype: str, kernels: int, iters: int, gemm_s: float, bandwidth: float, platform: str, layer=None
) -> str:
    """One line: the operands' size, the work per call, and about how long the timed calls take, from the probe's
    warmed-up timing of this shape (compilation comes on top). `layer` (a dispatch Layer) adds the permutations."""
    item = 4 if dtype == "float32" else 2
    operands = (shape.rows * shape.k + shape.groups * shape.k * shape.n + shape.rows * shape.n) * item
    calls = iters + 5  # compile, a correctness check, 3 warm-up, then the timed ones
    slow = GROUPED_SLOWDOWN.get(platform, 10.0)
    if layer is None:
        low, high, what = kernels * calls * gemm_s, calls * gemm_s * (1 + (kernels - 1) * slow), f"{kernels} kernel(s)"
    else:
        moved = 3 * layer.tokens * layer.topk * layer.hidden * item  # gather, then two combines over the copies
        low = calls * (gemm_s + moved / bandwidth)
        high, what = calls * (gemm_s * slow + moved / bandwidth), "dispatch, 2 combines, 1 grouped GEMM"
    return (
        f"G={shape.groups} M={shape.rows} K={shape.k} N={shape.n} {dtype}: operands {operands / 2**20:.1f} MiB, "
        f"{shape.flop / 1e9:.3g} GFLOP per GEMM call; {what} x {calls} calls: about {seconds(low)} to "
        f"{seconds(high)} plus compilation, from this shape's equal-group matmul measured here after warm-up "
        f"({seconds(gemm_s)} per call, {shape.flop / gemm_s / 1e12:.3g} TFLOP/s; gather {bandwidth / 1e9:.3g} GB/s; "
        f"grouped kernels up to {slow:g}x slower than a dense GEMM here)"
    )
