"""The user contract, pinned: config groups and their options, config keys, CLI subcommands and their flags.

Users type these names (docs, scripts, CI jobs); a change to any of them must be deliberate. When it is,
regenerate the expected file and commit it with the change:

    MOEKIT_UPDATE_SURFACE=1 .venv/bin/python -m pytest tests/test_surface.py
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pydantic import BaseModel

from moekit import cli
from moekit.config.compose import GROUPS, group_options
from moekit.config.kinds.families import FAMILIES
from moekit.config.schema import Config

EXPECTED = Path(__file__).parent / "data" / "surface.json"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted config keys: every field, and the fields of the sections below it."""
    out = []
    for name, field in model.model_fields.items():
        out.append(prefix + name)
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out += _keys(kind, f"{prefix}{name}.")
    return out


def _flags(parser: argparse.ArgumentParser) -> dict:
    """Options and positionals of a parser, and those of its subcommands (bench gmm)."""
    out: dict = {"options": [], "positionals": []}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out["subcommands"] = {name: _flags(p) for name, p in sorted(action.choices.items())}
        elif action.option_strings:
            out["options"].append(sorted(action.option_strings))
        else:
            out["positionals"].append(action.dest)
    out["options"].sort()
    return out


# A model family's options and experiments are pinned by its row (tests/test_families.py: each one a row names exists
# and every conf/model option is some row's), so adding a family changes the rows and leaves this file as it is.
OF_A_FAMILY = {
    *(o for f in FAMILIES.values() for o in (f.tiny, *f.reduced, *(p.option for p in f.full_size))),
    *(e for f in FAMILIES.values() for lay in f.layouts for e in (lay.experiment, lay.proxy)),
}


def surface() -> dict:
    return {
        "groups": {g: [o for o in group_options(g) if o not in OF_A_FAMILY] for g in GROUPS},
        "config_keys": _keys(Config),
        "commands": {name: _flags(cli._command_parser(name)) for name in cli.COMMANDS},
    }


def test_the_user_contract_is_unchanged():
    got = surface()
    if os.environ.get("MOEKIT_UPDATE_SURFACE"):
        EXPECTED.write_text(json.dumps(got, indent=1) + "\n")
    expected = json.loads(EXPECTED.read_text())
    for part in ("groups", "config_keys", "commands"):
        assert got[part] == expected[part], (
            f"the user-facing {part} changed; if that is deliberate, regenerate {EXPECTED.name} "
            "(MOEKIT_UPDATE_SURFACE=1, see this file's docstring) and say so in docs/"
        )


def test_the_contract_names_of_the_design_are_in_it():
    got = surface()
    assert {"moe", "precision", "memory", "xla", "hardware", "cluster", "network", "data"} <= set(got["groups"])
    assert {"model.num_experts", "train.steps", "run.dir", "maxtext.extra", "cluster.nodes"} <= set(got["config_keys"])
    train = got["commands"]["train"]
    assert ["--dry-run"] in train["options"] and ["--format"] in train["options"]
    commands = {
        "train",
        "render",
        "plan",
        "report",
        "verify",
        "tune",
        "bench",
        "config",
        "data",
        "fabric",
        "checkpoint",
    }
    assert commands == set(got["commands"])
