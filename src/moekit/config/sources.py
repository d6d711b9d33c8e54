"""What composes a config: the options of each group, and which file (or override) set each value.

Hydra merges the files of its defaults list in order, a later file replacing what an earlier one set, and
then the command-line overrides; `sources` replays that order over the files themselves to name the last
writer of every key. Reads conf/ only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from moekit.base import bounded, parse
from moekit.base.errors import ConfigError
from moekit.config.compose import (
    CONFIG_MAX_BYTES,
    GROUPS,
    OPEN_MAPPINGS,
    checked_tree,
    config_dir,
    group_options,
    hydra_at,
    in_tree,
    stored_models,
    yaml_problem,
)

SCHEMA_DEFAULT = "schema default (src/moekit/config/schema.py)"


def description(path: Path) -> str:
    """The first comment line of an option file (a `# @package` directive is not one), with the comment lines
    that continue its sentence (they start in lower case), so that no description stops mid-sentence."""
    found: list[str] = []
    for line in bounded.read_text(path, CONFIG_MAX_BYTES, "config file", errors="replace").splitlines():
        text = line.strip()
        if text.startswith("# @package") and not found:
            continue
        words = text.lstrip("#").strip()
        if not text.startswith("#") or (found and not words[:1].islower()):
            break
        found.append(words)
    return " ".join(found) or "(no description: its first line should say what it is)"


def groups(conf: Path | None = None) -> dict[str, dict[str, str]]:
    """group -> option -> one-line description, for every group of conf/."""
    conf = conf or config_dir()
    stored = stored_models()  # a family's tiny size has no file: its row says what it is

    def said(group: str, option: str) -> str:
        if group == "model" and option in stored and not (conf / group / f"{option}.yaml").is_file():
            return stored[option].says
        return description(conf / group / f"{option}.yaml")

    return {g: {o: said(g, o) for o in group_options(g, conf)} for g in GROUPS}


@dataclass(frozen=True, slots=True)
class Choice:
    """Which option a config group got, and what chose it."""

    group: str
    option: str | None
    chosen_by: str
    """'command line', 'conf/config.yaml' or the file whose defaults list picked it."""


@dataclass(frozen=True, slots=True)
class Composition:
    """How a set of overrides composes: the files merged, the group choices and each key's last writer."""

    files: list[str]
    """The config files in Hydra's merge order (later wins), relative to conf/."""
    packages: dict[str, str]
    """File -> the key its content lands under ('' = the top level)."""
    choices: list[Choice]
    sources: dict[str, str]
    """Dotted key -> the file or override that set it last."""


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of every leaf of a nested mapping (an empty mapping is a leaf)."""
    if isinstance(node, Mapping) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: node}


def composition(overrides: Sequence[str], conf: Path | None = None) -> Composition:
    """Replay Hydra's defaults list for these overrides (compose() checks the overrides themselves)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    conf = conf or config_dir()
    hydra_overrides = [f"++{o}" if o.startswith(OPEN_MAPPINGS) else o for o in overrides]
    try:
        with checked_tree(conf) as copy:  # the bytes moekit checked, read once each
            with hydra_at(copy):
                loader = GlobalHydra.instance().config_loader()
                found = loader.compute_defaults_list("config", hydra_overrides, RunMode.RUN)
            bodies = {
                f"{d.config_path}.yaml": parse.yaml_file(copy / f"{d.config_path}.yaml", CONFIG_MAX_BYTES, finite=False)
                for d in found.defaults
                if d.config_path is not None and (copy / f"{d.config_path}.yaml").is_file()
            }
    except yaml.YAMLError as exc:
        raise ConfigError(in_tree(yaml_problem(exc), conf)) from None
    except parse.ParseError as exc:
        raise ConfigError(in_tree(str(exc), conf)) from None
    files, packages, sources = [], {}, {}
    for d in found.defaults:
        if d.config_path is None or d.config_path.startswith("hydra/") or d.package is None:
            continue
        path = f"{d.config_path}.yaml"
        if path not in bodies:  # the schema's defaults (compose.hydra_at): SCHEMA_DEFAULT names them
            continue
        files.append(path)
        packages[path] = d.package
        body = bodies[path] or {}
        body.pop("defaults", None)
        for key in flatten(body, d.package):
            parts = key.split(".")
            for n in range(1, len(parts)):  # a value set whole before (expect: null) is now a mapping
                sources.pop(".".join(parts[:n]), None)
            sources[key] = path
    for o in found.overrides.config_overrides:
        key = o.key_or_group.lstrip("+~")
        sources = {k: v for k, v in sources.items() if not k.startswith(f"{key}.")}  # a mapping replaced whole
        sources[key] = f"command line: {o.input_line}"
    choices = []
    for group, option in found.overrides.override_choices.items():
        meta = found.overrides.override_metadata.get(group)
        by = "command line" if meta is None or meta.external_override else f"{meta.containing_config_path}.yaml"
        choices.append(Choice(group, option, by))
    seen = {c.group for c in choices}
    choices += [
        Choice(g, found.overrides.known_choices.get(g), "config.yaml")
        for g in GROUPS
        if g not in seen and g in found.overrides.known_choices
    ]
    order = {g: i for i, g in enumerate(GROUPS)}
    return Composition(files, packages, sorted(choices, key=lambda c: order.get(c.group, 99)), sources)


def source_of(key: str, sources: Mapping[str, str]) -> str:
    """The recorded writer of `key`, or of the nearest mapping above it that was set whole."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = sources.get(".".join(parts[:n]))
        if found:
            return found
    return SCHEMA_DEFAULT


def annotated(config: Mapping[str, Any], comp: Composition) -> list[tuple[str, Any, str]]:
    """(dotted key, value, where it was set) for every leaf of the typed config, in its own order."""
    return [(k, v, source_of(k, comp.sources)) for k, v in flatten(config, "").items()]
