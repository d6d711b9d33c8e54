"""`moekit plan`'s command-line inputs, checked before anything is planned: the numbers (--compute-tflops,
--scale) and a run's fabric.json (--fabric), read within its bound."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from moekit.base import bounded, parse, quantities
from moekit.base.errors import ConfigError

FABRIC_MAX_BYTES = 32 << 20  # a fabric.json lists every rank's times: about 2 MB at 1,024 GPUs, so 16k GPUs fit
MAX_GPUS = quantities.MAX_GPUS  # --scale and the searched GPU count: a million GPUs is beyond any cluster built


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
    """What is impossible in one fabric.json result: a time, size, ratio or rate out of what a measurement gives
    (base/quantities.py: a 1-byte collective of an hour is a stall, not a measurement)."""
    if not isinstance(r, dict):
        return ["not a mapping"]
    wrong = []
    for key, name, none_ok in (
        ("size_bytes", "fabric_size_bytes", False),
        ("time_s", "fabric_time_s", True),
        ("ratio", "fabric_ratio", True),
    ):
        if r.get(key) is None and none_ok:
            continue
        if why := quantities.problem(name, r.get(key)):
            wrong.append(f"{key}={_short(r.get(key))}: {why}")
    if not wrong and r.get("time_s") is not None:
        rate = r["size_bytes"] / r["time_s"]
        if why := quantities.problem("fabric_bytes_per_s", rate):
            wrong.append(f"size_bytes/time_s={rate:.3g}: {why}")
    return wrong


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_numbers(compute_tflops: float | None, scale: Sequence[int]) -> None:
    """Refuse `moekit plan`'s command-line numbers that no hardware has: a compute rate outside what a device gives
    (base/quantities.py), GPU counts under 1 or beyond MAX_GPUS (before anything is composed)."""
    if compute_tflops is not None and (why := quantities.problem("compute_tflops", compute_tflops)):
        raise ConfigError(
            f"--compute-tflops {compute_tflops:g}: {why}.\n"
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


def check_search(devices: int) -> None:
    """`plan --search` ranks layouts for the config's GPU count: refuse a count beyond MAX_GPUS before any layout is
    listed (the search's work grows with the count's divisors)."""
    if not 1 <= devices <= MAX_GPUS:
        raise ConfigError(
            f"plan --search over {devices:,} GPUs: the search takes from 1 to {MAX_GPUS:,} GPUs.\n"
            "  fix: set cluster.nodes and cluster.gpus_per_node to the cluster you plan for"
        )
