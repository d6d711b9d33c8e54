"""Pure parts of a tuning sweep: candidate sets, the loss-trajectory gate, outcome classes, the winner.

A candidate is a list of Hydra overrides applied on top of the base experiment. Candidates are compared
only with a reference that trains on the same tokens per step (same per-device batch and sequence
length): a different batch legitimately changes the loss curve.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any

# Loss gate: every step's loss within RTOL x |reference| + ATOL. Measured on one H200 (2026-12-02, MaxText 0.2.5,
# jax 0.11.2; docs/metrics.md): dense, tokamax, remat and XLA-flag variants agree to 1e-3
# over 12 bf16 steps (loss ~10.3 -> 7.68), while a host-offload split (docs/metrics.md) was 0.027 off at the
# second step and 0.16 at the twelfth. 2e-3 relative (0.015-0.02 absolute here) passes the first and rejects the second.
RTOL = 2e-3
ATOL = 0.0

# Evidence of an out-of-memory failure in a training log (XLA/JAX GPU and host allocators).
_OOM = re.compile(r"RESOURCE_EXHAUSTED|[Oo]ut of memory|CUDA_ERROR_OUT_OF_MEMORY|\bOOM\b|MemoryError")


def expand(axes: Sequence[str]) -> list[list[str]]:
    """Cartesian product of axes given as KEY=V1,V2,... (each a Hydra override with alternatives)."""
    choices = []
    for axis in axes:
        key, sep, values = axis.partition("=")
        if not sep or not key or not values:
            raise ValueError(f"axis {axis!r} is not KEY=V1,V2,...")
        choices.append([f"{key}={v}" for v in values.split(",")])
    return [list(combo) for combo in itertools.product(*choices)] if choices else []


def parse_candidate(text: str) -> list[str]:
    """'moe=dense train.per_device_batch_size=8' -> the override list (whitespace separated)."""
    overrides = text.split()
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"candidate {text!r}: {bad} are not KEY=VALUE overrides")
    return overrides


def label(overrides: Sequence[str]) -> str:
    return " ".join(overrides) or "(base)"


def classify(returncode: int | None, log_tail: str, timed_out: bool) -> str:
    """ok | oom | timeout | failed, from how the training process ended."""
    if timed_out:
        return "timeout"
    if returncode == 0:
        return "ok"
    return "oom" if _OOM.search(log_tail) else "failed"


def compare_losses(reference: Sequence[float], candidate: Sequence[float], rtol: float = RTOL, atol: float = ATOL):
    """(ok, max_abs_diff, first_bad_step) over the steps both ran; fewer than 2 common steps is not ok."""
    n = min(len(reference), len(candidate))
    diffs = [abs(c - r) for r, c in zip(reference[:n], candidate[:n], strict=True)]
    bad = next((i for i, (r, d) in enumerate(zip(reference, diffs, strict=False)) if d > atol + rtol * abs(r)), None)
    return (n >= 2 and bad is None), max(diffs, default=float("nan")), bad


def batch_key(cfg_dict: dict[str, Any]) -> tuple[float, int]:
    """What must match for a loss comparison: tokens per step on each device."""
    t = cfg_dict["train"]
    return (float(t["per_device_batch_size"]), int(t["seq_len"]))


def fastest(results: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The accepted result with the highest tokens/s per device (throughput; fair across batch sizes)."""
    ok = [r for r in results if r.get("accepted") and r.get("tokens_per_s_per_device")]
    return max(ok, key=lambda r: r["tokens_per_s_per_device"], default=None)


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
