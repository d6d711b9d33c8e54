"""The one number rule: every number moekit reads is finite and physically possible, every number it writes finite.

A number read from anywhere (an override, a hardware row, a fabric result, a plan flag, the stop flag's step, a
metrics or events line read back) is one of the quantities below: a unit, the least and the most any real hardware
or run can give, and why those bounds. `problem()` says what is wrong with a value (None when nothing is), `check()`
turns that into one ConfigError line naming where the value came from, `Field()` puts the same rule on a schema
field. Results pass `finite()`/`dumps()` before they are printed or written, so JSON stays RFC 8259 (no Infinity or
NaN) and no 300-digit step time reaches a table. Counts that would be expanded (a sweep's runs, the layouts a plan
search ranks) are quantities too, counted before anything is built.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from moekit.base.errors import ConfigError, MoekitError


@dataclass(frozen=True, slots=True)
class Quantity:
    """One kind of number: its unit, the closed range a real value lies in, and why that range."""

    unit: str
    low: float
    high: float
    why: str
    integer: bool = False
    """Counts and steps: an int (True, 8.5 and "8" are not one)."""


MAX_GPUS = 1 << 20  # a million GPUs: beyond any cluster built (the largest announced are a few hundred thousand)

QUANTITIES: dict[str, Quantity] = {
    # hardware rows (conf/hardware/<name>.yaml) and the plan flags that stand in for them
    "peak_tflops": Quantity(
        "TFLOP/s per device", 0.01, 1e5, "a dense datasheet peak: GB300 FP4 is 15,000; 100,000 leaves room to grow"
    ),
    "compute_tflops": Quantity(
        "TFLOP/s per device", 0.01, 1e5, "the rate one device computes at: at most a datasheet peak (GB300: 15,000)"
    ),
    "hbm_gib": Quantity("GiB per device", 0.5, 65536, "device memory: GB300 has 288 GiB; 64 TiB is beyond any"),
    "hbm_tb_per_s": Quantity("TB/s per device", 0.01, 1000, "HBM bandwidth: B300 is 8 TB/s; 1,000 is beyond any"),
    "host_gib_per_gpu": Quantity(
        "GiB per GPU", 0.5, 1 << 20, "host memory per GPU: a DGX gives 256 GiB; a PiB per GPU is beyond any host"
    ),
    "nvlink_domain": Quantity("GPUs", 1, MAX_GPUS, "GPUs on one NVLink fabric: 8 (HGX) to 576 (NVL576)", True),
    "sm": Quantity("compute capability x 10", 10, 1000, "CUDA compute capability: 90 is Hopper, 100 Blackwell", True),
    "link_gb_per_s": Quantity("GB/s per GPU", 0.01, 1e5, "a link class's nominal rate: NVLink 5 is 900 GB/s"),
    # what the fabric check measured (fabric.json)
    "fabric_size_bytes": Quantity("bytes", 1, 1 << 40, "one collective's payload: a TiB is beyond any GPU's memory"),
    "fabric_time_s": Quantity(
        "s",
        1e-7,
        600,
        "one timed collective: under 100 ns no network answers; over 10 minutes (5 times the check's "
        "default timeout) it hung",
    ),
    "fabric_ratio": Quantity(
        "measured bus bandwidth / nominal rate",
        1e-6,
        1.5,
        "above 1.5 it measured something other than the link; below a millionth it timed a stall, not a transfer",
    ),
    "fabric_bytes_per_s": Quantity(
        "bytes/s", 1, 1e14, "payload over time: under a byte a second a collective stalled; 100 TB/s is beyond any link"
    ),
    # a run's own numbers read back (stop flag, metrics, events)
    "step": Quantity("steps", 0, 1 << 53, "a training step: an integer a float still counts exactly", True),
    "seconds": Quantity("s", 0, 1e9, "a duration of a run: 30 years is beyond any"),
    # verify's tolerances (observe/reports/compare.py)
    "rtol": Quantity("relative difference", 0, 10, "a loss 10 times off is no equivalence; below 0 nothing passes"),
    "atol": Quantity("loss units", 0, 1000, "a loss is a few nats; below 0 nothing passes"),
    # counts counted before they are expanded
    "sweep_runs": Quantity(
        "runs", 1, 1024, "one multirun starts every run it lists, one after another: a thousand is days of GPUs", True
    ),
    "search_layouts": Quantity(
        "layouts", 1, 100_000, "plan --search forecasts each one: 100,000 is about a minute", True
    ),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def problem(name: str, value: Any) -> str | None:
    """What keeps `value` from being a `name` (the quantity's unit and range in words), or None when it is one."""
    q = QUANTITIES[name]
    want = f"want {'an integer' if q.integer else 'a number'} from {_num(q.low)} to {_num(q.high)} {q.unit} ({q.why})"
    if not _is_number(value) or (q.integer and not isinstance(value, int)):
        return f"not {'an integer' if q.integer else 'a number'}; {want}"
    if isinstance(value, float) and not math.isfinite(value):  # an int is finite, however long
        return f"not finite; {want}"
    if not q.low <= value <= q.high:
        return f"out of range; {want}"
    return None


def _num(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def valid(name: str, value: Any) -> bool:
    """Whether `value` is a `name` (problem() found nothing)."""
    return problem(name, value) is None


def check(name: str, value: Any, where: str, fix: str = "") -> Any:
    """`value` when it is a `name`; otherwise a one-line ConfigError naming `where` (a key, flag or file)."""
    why = problem(name, value)
    if why is None:
        return value
    raise ConfigError(f"{where}={_shown(value)}: {why}" + (f".\n  fix: {fix}" if fix else ""))


def _shown(value: Any) -> str:
    """A value as a message shows it: never a 300-digit number or a page of text."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validator(name: str):
    """A pydantic validator (mode 'before') holding a field to the quantity `name`; None passes (a CPU row)."""

    def validate(value: Any) -> Any:
        if value is None:
            return None
        why = problem(name, value)
        if why:
            raise ValueError(f"{_shown(value)}: {why}")
        return value

    return validate


def Field(name: str, **kwargs: Any) -> Any:  # noqa: N802 - reads like pydantic's Field at the call site
    """The type of a schema field held to the quantity `name`: `sm: quantities.Field("sm") | None`."""
    from typing import Annotated

    from pydantic import BeforeValidator

    return Annotated[int if QUANTITIES[name].integer else float, BeforeValidator(validator(name))]


def finite(value: Any, where: str = "result") -> list[str]:
    """The paths of the numbers in `value` (nested mappings, lists, tuples) that are not finite: [] when all are."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, float) and not math.isfinite(node):
            found.append(path)
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list | tuple):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(value, where)
    return found


class NotFinite(MoekitError, ValueError):
    """A result holds a number that is not finite: printing or writing it would give a wrong number or bad JSON."""


def dumps(value: Any, where: str = "result", **kwargs: Any) -> str:
    """json.dumps that refuses what RFC 8259 has no place for (Infinity, NaN), naming the first such number's path."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        bad = finite(value, where)
        raise NotFinite(
            f"{', '.join(bad[:3]) or where} is not finite: moekit does not write a number it cannot stand behind "
            "(an input beyond what hardware gives leads here; check the values this result was computed from)"
        ) from None
