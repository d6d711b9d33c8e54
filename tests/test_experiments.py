"""Every experiment composes, passes moekit's checks and is accepted by MaxText's own validator.

Pure and fast enough to run on every `make test` (never marked slow): a broken experiment fails here.
"""

from __future__ import annotations

import pytest

from conftest import EXPERIMENTS, compose
from moekit.config.checks import problems
from moekit.maxtext_validate import MaxTextRejected, validate
from moekit.translate.job import build


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_is_valid_and_maxtext_accepts_it(experiment):
    cfg = compose(experiment)
    assert problems(cfg) == []
    job = build(cfg, "/tmp/moekit-validate", "/tmp/moekit-validate/metrics.jsonl")
    validate(job.maxtext_args, cfg.num_devices, cfg.num_slices)


def test_validator_rejects_an_unknown_maxtext_key():
    cfg = compose("smoke", ["maxtext.extra.no_such_maxtext_key=1"])
    job = build(cfg, "/tmp/x", "/tmp/x/m.jsonl")
    with pytest.raises(MaxTextRejected, match="no_such_maxtext_key"):
        validate(job.maxtext_args, cfg.num_devices, cfg.num_slices)
