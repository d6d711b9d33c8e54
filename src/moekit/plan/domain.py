"""Where a configuration sits among the measured points, and the forecast band that distance earns (pure).

A configuration's domain is its distance from the nearest point whose measurement set the forecast's parameters
(the calibration points of data/forecast_points.yaml), in six levels: the same configuration; another batch (or
sequence length); other settings (back end, precision, memory policy, XLA flags, attention, data); another model
family or shape; other hardware; another number of devices. Level 0 is `calibrated`, 1-2 `interpolated`, 3-5
`extrapolated`.

The band's width at each level comes from the validation residuals: the 90th percentile of |error| of the
validation points at that level (at least the width of the level before it; a level with fewer than three points
takes the width of the level before). A forecast's band is the wider of that and its parameters' band.
data/forecast_bands.yaml holds the calibration points' positions and the widths (scripts/forecast_docs.py
regenerates them; tests/test_forecast.py checks they are current).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from moekit.config.schema import Config
from moekit.plan.forecast import Forecast
from moekit.plan.model import Dims

LEVELS = ("same configuration", "other batch", "other settings", "other family", "other hardware", "other scale")
KINDS = ("calibrated", "interpolated", "interpolated", "extrapolated", "extrapolated", "extrapolated")
QUANTILE = 0.9
"""Which quantile of a level's |error| sets its band's half-width."""
MIN_POINTS = 3
"""A level with fewer validation points takes the width of the level before it."""
MAX_WIDTH = 0.9
"""A half-width is capped below 1 so the fast end of a step band stays positive."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """What places one configuration among the measured ones."""

    model: str
    """The model's name and shape (layers, width, experts)."""
    hardware: str
    devices: int
    batch: float
    """Sequences per device per step."""
    seq: int
    settings: dict[str, str]
    """Back end, precision, memory policy, XLA flags, attention and data: what a step's time depends on besides
    the shape, the batch and the hardware."""
    tflop: float
    """Training TFLOP per device per step (MaxText's count)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (data/forecast_bands.yaml)."""
        return asdict(self)


def position(cfg: Config, values: Mapping[str, Any], dims: Dims, devices: int) -> Position:
    """The position of a composed config (`values`: MaxText's resolved keys, `dims` their shape)."""
    tensors = ",".join(f"{k}={v}" for k, v in sorted(cfg.memory.tensors.items()))
    if len(cfg.memory.tensors) > 3:  # one line stays readable; the digest still tells two placements apart
        tensors = f"{len(cfg.memory.tensors)} tensors placed #{hashlib.sha256(tensors.encode()).hexdigest()[:8]}"
    flags = ",".join(f"{k}={v}" for k, v in sorted(cfg.xla.flags.items()))
    xla = f"{cfg.xla.name} ({len(cfg.xla.flags)} flags #{hashlib.sha256(flags.encode()).hexdigest()[:8]})"
    settings = {
        "moe": cfg.moe.backend + ("" if cfg.moe.dispatch == "ragged_all_to_all" else f" ({cfg.moe.dispatch})"),
        "precision": cfg.precision.name + ("" if cfg.moe.expert_precision == "auto" else ", experts bf16"),
        "memory": f"{cfg.memory.remat_policy}" + (f" [{tensors}]" if tensors else ""),
        "xla": xla if flags else "default flags",
        "attention": str(values.get("attention", "autoselected")),
        "data": cfg.data.dataset_type,
    }
    shape = f"{dims.layers} layers, emb {dims.emb}, {dims.experts} experts top-{dims.top_k}"
    return Position(
        model=f"{cfg.model.name} ({shape})",
        hardware=cfg.hardware.name,
        devices=int(devices),
        batch=float(dims.batch),
        seq=int(dims.seq),
        settings=settings,
        tflop=dims.train_flops() / 1e12,
    )


def _parts(text: str) -> tuple[str, list[str]]:
    """'name (a, b)' -> ('name', ['a', 'b']); a value with no parenthesis is its own name."""
    name, _, rest = text.partition(" (")
    return name, [x.strip() for x in rest.rstrip(")").split(",")] if rest else []


def _contrast(key: str, mine: Any, theirs: Any, nearest: str) -> str:
    """One difference as 'key: this (nearest: that)', naming only the parts that differ: never 'X, not X'."""
    a, b = _parts(str(mine)), _parts(str(theirs))
    if a[1] and b[1] and len(a[1]) == len(b[1]):
        pairs = [(x, y) for x, y in zip([a[0], *a[1]], [b[0], *b[1]], strict=True) if x != y]
        mine, theirs = ", ".join(x for x, _ in pairs), ", ".join(y for _, y in pairs)
    return f"{key}: {mine} ({nearest}: {theirs})"


def differences(a: Position, b: Position, nearest: str = "nearest") -> list[tuple[int, str]]:
    """(level, what differs) for each way `a` differs from `b` (named `nearest` in the text)."""
    out = []
    if a.devices != b.devices:
        out.append((5, _contrast("devices", a.devices, b.devices, nearest)))
    if a.hardware != b.hardware:
        out.append((4, _contrast("hardware", a.hardware, b.hardware, nearest)))
    if a.model != b.model:
        out.append((3, _contrast("model", a.model, b.model, nearest)))
    for key in sorted(a.settings.keys() | b.settings.keys()):
        if a.settings.get(key) != b.settings.get(key):
            out.append((2, _contrast(key, a.settings.get(key), b.settings.get(key), nearest)))
    if (a.batch, a.seq) != (b.batch, b.seq):
        out.append((1, _contrast("batch x sequence", f"{a.batch:g} x {a.seq}", f"{b.batch:g} x {b.seq}", nearest)))
    return out


@dataclass(frozen=True, slots=True)
class Domain:
    """A configuration's level, its kind, the nearest calibration point and how the configuration differs from
    it."""

    level: int
    nearest: Mapping[str, Any]
    """The calibration point: name, run, measured step_s, overrides and position."""
    differs: list[str]
    work_ratio: float
    """Training FLOPs per device per step over the nearest point's."""

    @property
    def kind(self) -> str:
        """calibrated, interpolated or extrapolated."""
        return KINDS[self.level]

    @property
    def name(self) -> str:
        """The level's name (same configuration, other batch, ...)."""
        return LEVELS[self.level]


def _distance(a: Position, b: Position) -> tuple[int, int, float]:
    diff = differences(a, b)
    level = max((lv for lv, _ in diff), default=0)
    return level, len(diff), abs(math.log(max(a.tflop, 1e-12) / max(b.tflop, 1e-12)))


def classify(pos: Position, anchors: Sequence[Mapping[str, Any]]) -> Domain:
    """The domain of `pos` against the calibration points `anchors` (each with `position`, a dict): the nearest is
    the one at the lowest level, then with the fewest differences, then with the closest work per step."""
    if not anchors:
        raise ValueError("no calibration point to place the forecast against (data/forecast_bands.yaml)")
    best = min(anchors, key=lambda a: _distance(pos, Position(**a["position"])))
    near = Position(**best["position"])
    diff = differences(pos, near, str(best["name"]))
    level = max((lv for lv, _ in diff), default=0)
    ratio = pos.tflop / near.tflop if near.tflop else 0.0
    return Domain(level, best, [text for _, text in sorted(diff, key=lambda d: -d[0])], ratio)


def widths(residuals: Iterable[tuple[int, float]]) -> list[dict[str, Any]]:
    """The band's half-width per level from (level, error) pairs of validation points: per level the `QUANTILE` of
    |error| over its points, at least the width of the level before; a level with fewer than `MIN_POINTS` points
    takes the width of the level before. Each: level, name, width, points (how many set it), how."""
    pairs = list(residuals)
    by = [[abs(e) for lv, e in pairs if lv == i] for i in range(len(LEVELS))]
    out: list[dict[str, Any]] = []
    before = 0.0
    for i, errs in enumerate(by):
        if len(errs) >= MIN_POINTS:
            own = statistics.quantiles(errs, n=100, method="inclusive")[round(QUANTILE * 100) - 1]
            width = max(own, before)
            how = f"{QUANTILE:.0%} quantile of |error| over {len(errs)} points: {own:.1%}"
            if width > own:
                how += f"; the level before's {before:.1%} is wider"
        else:
            width = before
            how = f"{len(errs)} point(s), fewer than {MIN_POINTS}: the level before's width"
        width = min(width, MAX_WIDTH)
        out.append({"level": i, "name": LEVELS[i], "width": width, "points": len(errs), "how": how})
        before = width
    return out


def widen(low_s: float, high_s: float, step_s: float, width: float) -> tuple[float, float]:
    """The step band: the wider of the parameters' band (`low_s`-`high_s`) and step x (1 -+ width)."""
    return min(low_s, step_s * (1 - width)), max(high_s, step_s * (1 + width))


def band_text(fc: Forecast, params_low: float, params_high: float, level: Mapping[str, Any]) -> str:
    """How the printed step band was chosen, in the band's own numbers: each end from the level's width (`level`: a
    row of `widths`) or from the parameters' band, whichever is wider there."""
    low, high = 1 - fc.step_low_s / fc.step_s, fc.step_high_s / fc.step_s - 1
    shown = f"+-{low:.1%}" if f"{low:.1%}" == f"{high:.1%}" else f"-{low:.1%}/+{high:.1%}"
    width, n = float(level["width"]), int(level["points"])
    why = (
        f"{QUANTILE:.0%} quantile of |error| over {n} validation points"
        if n >= MIN_POINTS
        else (f"{n} validation point(s): the level before's")
    )
    named = f"the '{level['name']}' width +-{width:.1%} ({why})"
    by_width = (params_low > fc.step_s * (1 - width), params_high < fc.step_s * (1 + width))
    if all(by_width):
        return f"band {shown} of the step: {named}; the parameters' band is narrower"
    if not any(by_width):
        return f"band {shown} of the step: the parameters' band, wider than {named}"
    ends = ("fast", "slow") if by_width[0] else ("slow", "fast")
    return f"band {shown} of the step: its {ends[0]} end {named}, its {ends[1]} end the parameters' band"


def place(fc: Forecast, pos: Position, table: Mapping[str, Any]) -> tuple[Forecast, dict[str, Any]]:
    """A forecast placed among the calibration points of `table`
    (data/forecast_bands.yaml): the forecast with its step band widened to its level's width, and the JSON fields
    `domain` (calibrated, interpolated or extrapolated), `domain_level`, `nearest_measured`, `band_width`,
    `band_method`, `band_validated` and the text: `domain_text` (one line), `band_text` (one line) and
    `domain_differs` (one line per difference)."""
    d = classify(pos, table["anchors"])
    level = table["widths"][d.level]
    width = float(level["width"])
    lo, hi = table["work_ratio"]
    beyond = d.level > 0 and not lo <= d.work_ratio <= hi
    low, high = widen(fc.step_low_s, fc.step_high_s, fc.step_s, width)
    placed = replace(fc, step_low_s=low, step_high_s=high)
    n = d.nearest
    differs = list(d.differs)
    if d.work_ratio and not 0.5 <= d.work_ratio <= 2:
        differs.append(f"work per step: {d.work_ratio:.3g}x {n['name']}'s")
    if beyond:
        band = (
            f"band not validated: its work per step ({d.work_ratio:.3g}x {n['name']}'s) is beyond what any "
            f"validation point spans ({lo:.3g}x-{hi:.3g}x of its nearest calibration point's)"
        )
    else:
        band = band_text(placed, fc.step_low_s, fc.step_high_s, level)
    return placed, {
        "domain": d.kind,
        "domain_level": d.name,
        "nearest_measured": {
            "name": n["name"],
            "overrides": list(n["overrides"]),
            "step_s": n["step_s"],
            "run": n["run"],
            "hardware": n["position"]["hardware"],
            "differs": d.differs,
            "work_ratio": d.work_ratio,
        },
        "band_width": width,
        "band_method": f"the wider of the parameters' band and +-{width:.1%}: "
        f"{level['how']} at level '{d.name}' (docs/plan.md, 'Forecast validation')",
        "beyond_validation": beyond,
        "band_validated": not beyond,
        "domain_text": f"{d.kind} ({d.name}): nearest measured point {n['name']} ({' '.join(n['overrides'])}; "
        f"{n['step_s']:g} s/step, run {n['run']})" + (f"; it differs in {len(differs)} way(s):" if differs else ""),
        "band_text": band,
        "domain_differs": differs,
    }
