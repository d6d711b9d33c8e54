"""Every experiment composes, passes moekit's checks and is accepted by MaxText's own validator.

Pure and fast enough to run on every `make test` (never marked slow): a broken experiment fails here. MaxText's
validator runs once per device count for all the command lines of that count (importing MaxText dominates).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from conftest import EXPERIMENTS, compose
from moekit.config.checks import problems
from moekit.maxtext_validate import MaxTextRejected, rejections, validate
from moekit.translate.job import build


def maxtext_verdicts(cases: dict[str, list[str]]) -> dict[str, str | None]:
    """case id -> MaxText's refusal (None = accepted) of the composed overrides, one validator per device count."""
    by_shape: dict[tuple[int, int], list[tuple[str, list[str]]]] = defaultdict(list)
    for case, overrides in cases.items():
        cfg = compose(None, overrides)
        args = build(cfg, "/tmp/moekit-validate", "/tmp/moekit-validate/metrics.jsonl").maxtext_args
        by_shape[(cfg.num_devices, cfg.num_slices)].append((case, args))
    verdicts: dict[str, str | None] = {}
    for (devices, slices), group in by_shape.items():
        found = rejections([a for _, a in group], devices, slices)
        verdicts |= {c: str(r) if r else None for (c, _), r in zip(group, found, strict=True)}
    return verdicts


@pytest.fixture(scope="session")
def experiment_verdicts() -> dict[str, str | None]:
    return maxtext_verdicts({e: [f"experiment={e}"] for e in EXPERIMENTS})


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_is_valid_and_maxtext_accepts_it(experiment, experiment_verdicts):
    assert problems(compose(experiment)) == []
    assert experiment_verdicts[experiment] is None


def test_validator_rejects_an_unknown_maxtext_key():
    cfg = compose("smoke", ["maxtext.extra.no_such_maxtext_key=1"])
    job = build(cfg, "/tmp/x", "/tmp/x/m.jsonl")
    with pytest.raises(MaxTextRejected, match="no_such_maxtext_key"):
        validate(job.maxtext_args, cfg.num_devices, cfg.num_slices)
