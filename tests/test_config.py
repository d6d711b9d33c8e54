"""Composition and typing of the config tree."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import compose, moekit
from moekit.base.errors import ConfigError
from moekit.config import sources
from moekit.config.compose import GROUPS, config_dir, stored_models
from moekit.config.schema import defaults


def test_groups_exist_with_options():
    conf = config_dir()
    for group in GROUPS:
        assert list((conf / group).glob("*.yaml")), f"conf/{group}/ has no option"


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


# ---- discoverability: moekit config groups | show ----


def test_config_groups_lists_every_option_with_its_one_line_description():
    found = sources.groups()
    assert list(found) == list(GROUPS)
    for group, options in found.items():
        files = {p.stem for p in (config_dir() / group).glob("*.yaml")}
        stored = set(stored_models()) if group == "model" else set()  # a family's tiny size: its row, no file
        assert sorted(options) == sorted(files | stored)
        for option, text in options.items():
            assert "no description" not in text, f"conf/{group}/{option}.yaml does not open with a comment line"
    assert found["moe"]["tokamax"].startswith("Dropless grouped GEMM through tokamax")
    assert found["network"]["nvl72_ib"].startswith("GB200/GB300 NVL72 racks")
    proc = moekit("config", "groups")
    assert proc.returncode == 0, proc.stderr
    assert "\nmoe=\n" in proc.stdout
    for group, option in (("moe", "tokamax"), ("experiment", "smoke_gpu")):  # smoke_gpu's: the line after @package
        assert re.search(rf"^  {option} +{re.escape(found[group][option])}$", proc.stdout, re.M), option


def _as_written(written, typed) -> bool:
    """The typed value is what the file wrote (the schema may add defaults to items of a list)."""
    if isinstance(written, list) and isinstance(typed, list) and len(written) == len(typed):
        return all(_as_written(w, t) for w, t in zip(written, typed, strict=True))
    if isinstance(written, dict) and isinstance(typed, dict):
        return all(_as_written(v, typed.get(k)) for k, v in written.items())
    return written == typed or str(written) == str(typed)


def test_config_show_names_the_file_or_override_behind_every_value():
    overrides = ["experiment=dsv3_blog", "train.steps=3", "moe.ragged_buffer_factor=1.5"]
    comp = sources.composition(overrides)
    rows = {k: (v, src) for k, v, src in sources.annotated(compose(None, overrides).to_dict(), comp)}
    assert rows["train.steps"] == (3, "command line: train.steps=3")
    assert rows["train.per_device_batch_size"][1] == "experiment/dsv3_baseline.yaml"
    assert rows["experiment_name"] == ("dsv3_blog", "experiment/dsv3_blog.yaml")
    assert rows["moe.backend"] == ("te", "moe/te.yaml")
    assert rows["network.resource_claim_template"][1] == "network/gb200_computedomain.yaml"
    assert rows["train.seed"][1] == sources.SCHEMA_DEFAULT  # defaults live in the schema alone
    assert rows["network.host_network"][1] == sources.SCHEMA_DEFAULT  # no file sets it
    # Every value said to come from a file is that file's value (a later file or override would have won).
    for key, (value, src) in rows.items():
        if src.endswith(".yaml"):
            body = yaml.safe_load((config_dir() / src).read_text()) or {}
            body.pop("defaults", None)
            prefix = comp.packages[src]
            node = body
            for part in key.removeprefix(prefix).lstrip(".").split("."):
                node = node[part]
            if m := re.fullmatch(r"\$\{([\w.]+)\}", str(node)):  # an interpolation: the value it names
                node = rows[m.group(1)][0]
            assert _as_written(node, value), (key, src, node, value)
    choice = {c.group: c for c in comp.choices}
    assert choice["experiment"].chosen_by == "command line" and choice["moe"].chosen_by == "ladder/5_nccl_ep.yaml"
    assert choice["data"].chosen_by == "config.yaml"
    proc = moekit("config", "show", *overrides)
    assert proc.returncode == 0, proc.stderr
    assert "#   moe=te  (ladder/5_nccl_ep.yaml)" in proc.stdout
    assert re.search(r"^train\.steps: 3 +# command line: train\.steps=3$", proc.stdout, re.M)
    bad = moekit("config", "show", "experiment=smoke", "train.stepz=3")
    assert bad.returncode == 2 and "unknown config key 'train.stepz'" in bad.stderr


# ---- defaults in one place: the schema ----


def test_no_option_file_restates_a_schema_default():
    """An option writes only what it chooses: a key it leaves alone gets the schema's default, so a default is
    written once. Experiments and ladder rungs are deltas that pin their own setup, and may name any value."""
    schema_defaults = sources.flatten(defaults())
    restated = []
    for group in GROUPS:
        if group in ("experiment", "ladder"):
            continue
        for path in sorted((config_dir() / group).glob("*.yaml")):
            body = yaml.safe_load(path.read_text()) or {}
            restated += [
                f"conf/{group}/{path.name}: {key}: {value!r}"
                for key, value in sources.flatten(body, group).items()
                if key in schema_defaults and schema_defaults[key] == value
            ]
    assert restated == [], "these values are the schema's defaults already; delete them from the files"


def test_every_key_is_settable_from_its_default():
    """The schema's defaults are composed first, so a key no option file names can still be set (a.b=value)."""
    cfg = compose("smoke", ["cluster.image=registry.example/moekit:1", "profile.steps=4", "data.column=body"])
    assert (cfg.cluster.image, cfg.profile.steps, cfg.data.column) == ("registry.example/moekit:1", 4, "body")
    assert not (config_dir() / "base_config.yaml").exists()
