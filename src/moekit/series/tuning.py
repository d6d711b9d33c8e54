"""Pure parts of a tuning sweep: candidate sets, the loss-trajectory gate, outcome classes, the winner.

A candidate is a list of Hydra overrides applied on top of the base experiment. Candidates are compared
only with a reference that trains on the same tokens per step (same per-device batch and sequence
length): a different batch legitimately changes the loss curve.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from moekit.base import failures
from moekit.config import sweeps, training_step
from moekit.config.schema import Config
from moekit.observe.reports import comparable, compare

# The loss gate's tolerance (the rule itself is observe.reports.compare's).
RTOL, ATOL = compare.TUNE.rtol, compare.TUNE.atol


def expand(axes: Sequence[str]) -> list[list[str]]:
    """Cartesian product of axes given as KEY=V1,V2,... (Hydra's sweep grammar, moekit.config.sweeps)."""
    for axis in axes:
        key, sep, values = axis.partition("=")
        if not sep or not key or not values:
            raise ValueError(f"axis {axis!r} is not KEY=V1,V2,...")
    return sweeps.expand(axes) if axes else []


def parse_candidate(text: str) -> list[str]:
    """'moe=dense train.per_device_batch_size=8' -> the override list (whitespace separated)."""
    overrides = text.split()
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"candidate {text!r}: {bad} are not KEY=VALUE overrides")
    return overrides


def label(overrides: Sequence[str]) -> str:
    """Overrides as one line for tables and logs; the base is '(base)'."""
    return " ".join(overrides) or "(base)"


def classify(failure: failures.Failure | None) -> str:
    """ok | oom | timeout | failed, from the class a trial's failure has (failures.of_child: the class the run
    recorded in its manifest, never the log read again)."""
    if failure is None:
        return "ok"
    return failures.BY_NAME.get(failure.name, failures.OTHER).trial_status


def batch_key(cfg: Config) -> tuple[float, int]:
    """What must match for a loss comparison: tokens per step on each device."""
    return (float(cfg.train.per_device_batch_size), cfg.train.seq_len)


def training(cfg: Config) -> dict[str, Any]:
    """The keys of a candidate that reach the training step (config/training_step.py): two candidates equal in these are
    one candidate, and one equal to its reference is the reference."""
    return training_step.keys(cfg.model_dump())


def setup(cfg: Config) -> comparable.Setup:
    """What must match for two runs to compare (observe.reports.comparable): model, tokens per step, hardware."""
    return comparable.Setup.of(cfg.model_dump(), cfg.num_devices)


def versus(cfg: Config, reference: dict[str, Any], result: dict[str, Any]) -> comparable.Comparison:
    """A candidate's speed against its reference (trial results; `cfg`: the candidate's config, whose setup its
    reference shares): a speed-up, or why there is none (another host load, within noise)."""
    shared = dataclasses.replace(setup(cfg), configuration=None)  # the candidate's own: its configuration differs
    return comparable.compare(shared, measured(reference), shared, measured(result))


def measured(r: dict[str, Any]) -> comparable.Measured:
    """What a trial result (series.trial) measured, as a speed comparison needs it."""
    return comparable.Measured(r.get("tokens_per_s_per_device"), r.get("spread"), r.get("others_share"))


def fastest(results: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The accepted result with the highest tokens/s per device (throughput; fair across batch sizes)."""
    ok = [r for r in results if r.get("accepted") and r.get("tokens_per_s_per_device")]
    return max(ok, key=lambda r: r["tokens_per_s_per_device"], default=None)


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """tree[a][b][c] = value for key 'a.b.c', making the levels on the way."""
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
