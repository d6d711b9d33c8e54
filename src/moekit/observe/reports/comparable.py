"""Whether two runs compare, and what their speed comparison may say (pure): the one rule of report, tune and verify.

Two runs compare when they train the same model on the same tokens per step per device, on the same hardware
(its name and device count): otherwise a speed-up measures the change of setup. Two runs of the same *training
configuration* (every key that reaches the training step equal; config/training_step.py lists, with reasons, the keys
that only place, watch, check or trace a run) measure the host's noise, never a speed-up: the comparison says
"same training configuration" with how far apart they measured. Two measured rates then make a speed-up only when
the host was as busy for both (the share of the host's CPU other processes took, from each run's manifest:
run/host_load.py, within LOAD_GAP; an unknown share, as a killed attempt leaves, is never compared) and their
ratio lies outside the noise measured on this host for these configurations: a run's noise is the larger of the
spread of repeats of its configuration (`repeats`, where there are some) and the spread of its own steady step
times; the larger of the two runs' noise counts. Otherwise the comparison says which ("within noise (±N%)"),
never a speed-up. docs/metrics.md, "Comparing runs", states the rule with its measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moekit.config import training_step as training
from moekit.observe.runs.rundata import Run

LOAD_GAP = 0.15  # others' share of the host's CPU (0-1) that may differ between two compared runs


@dataclass(frozen=True, slots=True)
class Setup:
    """What a run trains and on what: its model section, tokens per step on each device, hardware and devices, and
    its training configuration (config/training_step.py's keys that reach the step; None where unknown)."""

    model: Any
    tokens_per_step: float | None
    hardware: str | None
    devices: int | None
    configuration: str | None = None

    @classmethod
    def of(cls, config: Mapping[str, Any], devices: int | None) -> Setup:
        """From a run's resolved config (config.yaml's mapping, or Config.model_dump()) and its device count."""
        train = config.get("train") or {}
        try:
            tokens = float(train["per_device_batch_size"]) * int(train["seq_len"])
        except (KeyError, TypeError, ValueError):
            tokens = None
        whole = _key(training.keys(config)) if config else None
        return cls(config.get("model"), tokens, (config.get("hardware") or {}).get("name"), devices, whole)


@dataclass(frozen=True, slots=True)
class Measured:
    """What a run measured, as a comparison needs it: steady tokens/s per device, the relative spread of its steady
    step times (stdev / median), others' share of the host's CPU over the run, and the relative spread of the
    rates of repeats of its training configuration on this host (max / min - 1; None without repeats)."""

    rate: float | None
    spread: float | None = None
    others_share: float | None = None
    repeats: float | None = None

    @property
    def noise(self) -> float | None:
        """The relative difference this host produced for this configuration: the larger of its repeats' spread
        and its own steady steps' spread (None when neither was measured)."""
        return max((x for x in (self.repeats, self.spread) if x is not None), default=None)

    @classmethod
    def of(cls, stats: Mapping[str, Any], host_load: Mapping[str, Any] | None) -> Measured:
        """From a summary's statistics (observe.runs.summary) and the manifest's host_load record."""
        st = stats.get("step_time_s") or {}
        spread = st["stdev"] / st["median"] if st.get("median") and st.get("stdev") is not None else None
        return cls(stats.get("tokens_per_s_per_device"), spread, (host_load or {}).get("others_share"))


def repeats(rates: Sequence[float | None]) -> float | None:
    """The relative spread of the rates of repeats of one configuration (max / min - 1), None for fewer than two."""
    known = [r for r in rates if r]
    return max(known) / min(known) - 1 if len(known) > 1 else None


def percent(x: float) -> str:
    """A relative figure as a percentage with a sensible precision ('12%', '0.4%')."""
    return f"{x:.0%}" if abs(x) >= 0.01 or x == 0 else f"{x:.1%}"


def differs(base: Setup, other: Setup) -> str | None:
    """Why `other` does not compare with `base` (another model, other tokens per step, other hardware), or None."""
    if _key(base.model) != _key(other.model):
        return "another model"
    if base.tokens_per_step is None or base.tokens_per_step != other.tokens_per_step:
        return f"other tokens per step ({_g(other.tokens_per_step)} vs {_g(base.tokens_per_step)} per device)"
    if (base.hardware, base.devices) != (other.hardware, other.devices):
        return f"other hardware ({other.hardware} x{other.devices} vs {base.hardware} x{base.devices})"
    return None


@dataclass(frozen=True, slots=True)
class Comparison:
    """A speed comparison: the ratio (other / base), and why it is no speed-up (`why`), if it is not."""

    ratio: float | None
    why: str | None = None

    @property
    def speedup(self) -> float | None:
        """The ratio, when it is a speed-up the runs can stand behind."""
        return None if self.why else self.ratio

    def text(self) -> str:
        """'1.23x', or 'n/a (why)' with the ratio where there is one."""
        if self.why is None and self.ratio is not None:
            return f"{self.ratio:.2f}x"
        seen = f"; ratio {self.ratio:.2f}" if self.ratio is not None else ""
        return f"n/a ({self.why}{seen})"


def compare(base_setup: Setup, base: Measured, setup: Setup, other: Measured) -> Comparison:
    """The speed of `other` relative to `base`, or why it is none: the setups differ, a rate is missing, the two are
    one training configuration, the host was busier for one run, or the ratio lies within the noise measured."""
    if why := differs(base_setup, setup):
        return Comparison(None, why)
    same = base_setup.configuration is not None and base_setup.configuration == setup.configuration
    if same and base.rate and other.rate:
        ratio = other.rate / base.rate
        apart = percent(max(ratio, 1 / ratio) - 1)
        return Comparison(ratio, f"same training configuration: the two measured {apart} apart, this host's noise")
    return rates(base, other)  # a missing rate is named there


def rates(base: Measured, other: Measured) -> Comparison:
    """The speed of `other` relative to `base` for two runs the caller knows to compare (same model, tokens per step
    and hardware; other training configurations): a speed-up, or why none (a rate missing, another host load, within
    the noise measured)."""
    if not base.rate or not other.rate:
        return Comparison(None, "too few steady steps")
    ratio = other.rate / base.rate
    unknown = [n for n, m in (("the base run", base), ("this run", other)) if m.others_share is None]
    if unknown:
        load = f"host load unknown for {' and '.join(unknown)} (a killed attempt, or recorded before it was measured)"
    elif abs(base.others_share - other.others_share) > LOAD_GAP:
        load = f"different host load: others took {base.others_share:.0%} vs {other.others_share:.0%} of the CPU"
    else:
        load = None
    if load:
        return Comparison(ratio, load)
    noise = max((m.noise for m in (base, other) if m.noise is not None), default=None)
    if noise is None:
        return Comparison(ratio, "noise not measured (no spread of steady steps, no repeat)")
    if max(ratio, 1 / ratio) - 1 <= noise:
        return Comparison(ratio, f"within noise (±{percent(noise)})")
    return Comparison(ratio)


def runs(base: Run, other: Run, noise: Mapping[str, float] | None = None) -> Comparison:
    """compare() of two loaded run directories: their configs, summaries and manifests' host load; `noise`: the
    spread of repeats by training configuration (repeats_by_configuration), where the caller has repeats."""
    noise = noise or {}

    def side(r: Run) -> tuple[Setup, Measured]:
        setup = Setup.of(r.config, r.devices)
        m = Measured.of(r.summary, r.manifest.host_load)
        return setup, Measured(m.rate, m.spread, m.others_share, noise.get(setup.configuration or ""))

    return compare(*side(base), *side(other))


def repeats_by_configuration(loaded: Sequence[Run]) -> dict[str, float]:
    """The spread of the rates of the runs that share a training configuration (two or more), by configuration:
    the noise this host produced for it, measured."""
    groups: dict[str, list[float | None]] = {}
    for r in loaded:
        key = Setup.of(r.config, r.devices).configuration
        if key is not None:
            groups.setdefault(key, []).append(r.summary.get("tokens_per_s_per_device"))
    return {k: spread for k, rates in groups.items() if (spread := repeats(rates)) is not None}


def against_first(loaded: Sequence[Run]) -> list[Comparison]:
    """Every run's comparison with the first one, with the noise measured by the repeats among them."""
    noise = repeats_by_configuration(loaded)
    return [runs(loaded[0], r, noise) for r in loaded]


def _key(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_key(v)}" for k, v in sorted(value.items())) + "}"
    return repr(value)


def _g(v: float | None) -> str:
    return "?" if v is None else format(v, "g")
