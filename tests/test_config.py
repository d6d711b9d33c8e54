"""Composition and typing of the config tree."""

from __future__ import annotations

import pytest

from conftest import EXPERIMENTS, compose
from moekit.config.compose import GROUPS, config_dir
from moekit.errors import ConfigError


def test_groups_exist_with_options():
    conf = config_dir()
    for group in GROUPS:
        assert list((conf / group).glob("*.yaml")), f"conf/{group}/ has no option"


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(experiment):
    cfg = compose(experiment)
    assert cfg.experiment_name == experiment


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["train.stepz=3"], ["unknown config key 'train.stepz'", "steps", "seq_len"]),
        (["moe=fast"], ["valid options for moe=", "tokamax", "dense"]),
        (["experiment=nope"], ["valid options for experiment=", "smoke"]),
        (["train.steps=ten"], ["train.steps", "valid integer"]),
        (["precision.name=fp4"], ["precision.name", "'fp32', 'bf16', 'fp8' or 'mxfp8'"]),
        (["model.num_experts=0"], ["model.num_experts", "greater than or equal to 1"]),
        (["model.experts_per_token=16"], ["exceeds num_experts=8"]),
        (["parallelism.ici.expert=0"], ["an axis is a positive size"]),
    ],
)
def test_bad_keys_and_types_name_the_fix(overrides, expected):
    with pytest.raises(ConfigError) as err:
        compose("smoke", overrides)
    for text in expected:
        assert text in str(err.value)


def test_open_mappings_take_new_keys():
    cfg = compose("smoke", ["maxtext.extra.dtype=float32", "xla.flags.xla_dump_to=/tmp/d"])
    assert cfg.maxtext.extra == {"dtype": "float32"}
    assert cfg.xla.flags == {"xla_dump_to": "/tmp/d"}


def test_derived_mesh_fills_minus_one():
    cfg = compose("smoke", ["cluster.processes_per_node=2"])
    assert cfg.num_devices == 2
    assert cfg.ici_filled == {"data": 1, "fsdp": 2, "tensor": 1, "expert": 1}
