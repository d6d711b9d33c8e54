"""Timing of jitted functions and the provenance of a measurement."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moekit.versions import versions


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


def probe(dtype: str = "bfloat16") -> tuple[float, float]:
    """(FLOP/s of a mid-sized matmul, bytes/s of a row gather) on the first device: what an estimate scales by.

    Takes well under a second; the numbers are this device's under its current load, not datasheet peaks.
    """
    import jax
    import jax.numpy as jnp

    n = 1024
    a = jnp.ones((n, n), dtype)
    matmul = jax.jit(lambda x: x @ x)
    seconds = median_seconds(matmul, a, warmup=1, iters=3)
    rows = jnp.arange(n)[::-1]
    gather = jax.jit(lambda x, i: x[i] + 1)
    moved = median_seconds(gather, a, rows, warmup=1, iters=3)
    return 2.0 * n**3 / seconds, 2.0 * a.nbytes / moved


# Grouped kernels against a dense matmul of the same FLOPs, as measured: on one H200 tokamax's Mosaic kernel
# reached 42% of the equal-group ceiling (docs/performance.md, 2026-12-02); on a 2-core x86-64 CPU (jax 0.12.0.1,
# 2026-12-03) XLA's ragged_dot took about 10x the ceiling's time. The estimate's upper end uses these factors.
GROUPED_SLOWDOWN = {"gpu": 2.5, "cpu": 10.0}


def estimate(
    shape, dtype: str, kernels: int, iters: int, rate: float, bandwidth: float, platform: str, layer=None
) -> str:
    """One line: the operands' size, the work per call, and about how long the timed calls take at the probed
    rates (compilation comes on top). `layer` (a dispatch Layer) adds the permutations around the GEMM."""
    item = 4 if dtype == "float32" else 2
    operands = (shape.rows * shape.k + shape.groups * shape.k * shape.n + shape.rows * shape.n) * item
    calls = iters + 5  # compile, a correctness check, 3 warm-up, then the timed ones
    gemm = shape.flop / rate
    slow = GROUPED_SLOWDOWN.get(platform, 10.0)
    if layer is None:
        low, high, what = kernels * calls * gemm, calls * gemm * (1 + (kernels - 1) * slow), f"{kernels} kernel(s)"
    else:
        moved = 3 * layer.tokens * layer.topk * layer.hidden * item  # gather, then two combines over the copies
        low = calls * (gemm + moved / bandwidth)
        high, what = calls * (gemm * slow + moved / bandwidth), "dispatch, 2 combines, 1 grouped GEMM"
    return (
        f"G={shape.groups} M={shape.rows} K={shape.k} N={shape.n} {dtype}: operands {operands / 2**20:.1f} MiB, "
        f"{shape.flop / 1e9:.3g} GFLOP per GEMM call; {what} x {calls} calls: about {low:.0f}-{high:.0f} s plus "
        f"compilation, at the {rate / 1e12:.3g} TFLOP/s and {bandwidth / 1e9:.3g} GB/s this device just measured "
        f"(grouped kernels up to {slow:g}x slower than a dense GEMM here)"
    )
