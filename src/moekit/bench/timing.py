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
