"""`moekit plan`'s command-line inputs, checked before anything is planned: the numbers (--compute-tflops,
--scale) and a run's fabric.json (--fabric), read within its bound."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from moekit.base import bounded, parse
from moekit.base.errors import ConfigError

FABRIC_MAX_BYTES = 32 << 20  # a fabric.json lists every rank's times: about 2 MB at 1,024 GPUs, so 16k GPUs fit
MAX_RATIO = 1.5  # measured bus bandwidth over the link's nominal rate: beyond this it measured something else
MAX_GPUS = 1 << 20  # --scale and the searched GPU count: a million GPUs is beyond any cluster built


def fabric_record(path: Path | None) -> dict[str, Any] | None:
    """A run's fabric.json (`--fabric PATH`, at most FABRIC_MAX_BYTES), parsed, each result's numbers checked; None
    without a path."""
    if path is None:
        return None
    fix = "  fix: give the fabric.json of a run directory (moekit fabric / train write it)"
    try:
        record = parse.json_file(path, FABRIC_MAX_BYTES, "fabric.json", finite=False)  # numbers: checked by field
    except bounded.TooLarge as exc:
        raise ConfigError(f"--fabric {str(exc).splitlines()[0]}\n{fix}") from None
    except parse.ParseError as exc:
        raise ConfigError(f"--fabric {exc}\n{fix}") from None
    except OSError as exc:
        raise ConfigError(f"--fabric {bounded.shown(path)}: cannot read it ({exc.strerror}).\n{fix}") from None
    if not isinstance(record, dict) or not record.get("results"):
        raise ConfigError(f"--fabric {path}: no measured results in it; the fabric check must have run to its end")
    results = record["results"]
    wrong = [] if isinstance(results, list) else ["results: not a list"]
    for i, r in enumerate(results if not wrong else []):
        wrong += [f"results[{i}].{w}" for w in _result_problems(r)]
    if wrong:
        raise ConfigError(
            f"--fabric {path}: not what the fabric check writes: {'; '.join(wrong[:3])}"
            + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
            + f".\n{fix}"
        )
    return record


def _result_problems(r: object) -> list[str]:
    """What is impossible in one fabric.json result: a time, size or ratio out of what a measurement gives."""
    if not isinstance(r, dict):
        return ["not a mapping"]

    def number(key: str, low: float, high: float, none_ok: bool) -> list[str]:
        v = r.get(key)
        if v is None and none_ok:
            return []
        if isinstance(v, bool) or not isinstance(v, int | float) or not low < v <= high:
            return [f"{key}={v!r}: want a number above {low:g} and at most {high:g}"]
        return []

    return number("size_bytes", 0, 2**40, False) + number("time_s", 0, 3600, True) + number("ratio", 0, MAX_RATIO, True)


def check_numbers(compute_tflops: float | None, scale: Sequence[int]) -> None:
    """Refuse `moekit plan`'s command-line numbers that no hardware has: a compute rate that is not a positive finite
    TFLOP/s, GPU counts under 1 or beyond MAX_GPUS (before anything is composed)."""
    if compute_tflops is not None and not (math.isfinite(compute_tflops) and compute_tflops > 0):
        raise ConfigError(
            f"--compute-tflops {compute_tflops:g}: a device computes at a positive, finite rate.\n"
            "  fix: give the TFLOP/s one device reaches while computing, e.g. --compute-tflops 700, or leave it out "
            "for the datasheet peak"
        )
    bad = [n for n in scale if not 1 <= n <= MAX_GPUS]
    if bad:
        raise ConfigError(
            f"--scale {','.join(map(str, bad))}: a GPU count is from 1 to {MAX_GPUS:,}.\n"
            "  fix: give GPU counts separated by commas, e.g. --scale 128,1024"
        )
    if len(scale) > 64:
        raise ConfigError(f"--scale: {len(scale)} GPU counts; give at most 64")
