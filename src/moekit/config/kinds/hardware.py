"""The link-class table a hardware row names (src/moekit/data/links.yaml), and a hardware row by option name.

A GPU generation is one row, conf/hardware/<option>.yaml (typed by schema.Hardware): peaks, HBM size and bandwidth,
NVLink domain, link classes, host memory, env. The link classes' rates live once in links.yaml because several
generations share them (NVLink 5 on B200, GB200, GB300).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from moekit.base import bounded, parse
from moekit.base.errors import ConfigError

MAX_BYTES = 1 << 20  # a hardware row or the link table is a page of YAML; anything larger is not one


def read_yaml(path: Path, what: str) -> Any:
    """A small YAML file (at most MAX_BYTES), parsed; a larger or unreadable one is a ConfigError naming it."""
    try:
        return parse.yaml_file(path, MAX_BYTES, what)
    except bounded.TooLarge as exc:
        raise ConfigError(f"{what} {str(exc).splitlines()[0]}; give the file itself") from None
    except parse.ParseError as exc:
        raise ConfigError(f"{what} {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{what} {bounded.shown(path)}: cannot read it ({exc.strerror})") from None


@cache
def link_table() -> dict[str, dict[str, Any]]:
    """links.yaml's `links:`: link class -> {gb_per_s (per GPU, one direction), source}. The one reader of the file:
    the schema's link classes, the plan's tables (plan/tables.py) and the fabric check's verdict all take it here."""
    path = Path(str(resources.files("moekit") / "data" / "links.yaml"))
    return dict(read_yaml(path, "link table")["links"])


def link_classes() -> list[str]:
    """The link class names a hardware row may use."""
    return list(link_table())


def row(name: str, conf: Path) -> dict[str, Any]:
    """conf/hardware/<name>.yaml as a mapping (the row as it stands today); {} when there is none."""
    path = conf / "hardware" / f"{name}.yaml"
    if not name.isidentifier() or not path.is_file():
        return {}
    found = read_yaml(path, "hardware row")
    return found if isinstance(found, dict) else {}


def misnamed(option: str | None, name: object, conf: Path) -> str | None:
    """Why the hardware row chosen as `option` (conf/hardware/<option>.yaml) is not that row: its `name:` must be the
    file's, since the plan, MFU and provenance name the row's file by it. None when it is (or no row was chosen)."""
    if option is None or name == option:
        return None
    path = conf / "hardware" / f"{option}.yaml"
    return (
        f"hardware row {path}: its name is {name!r}, but a row carries its file's name (plan, MFU and provenance "
        f"cite conf/hardware/<name>.yaml).\n  fix: write `name: {option}` in {path}, or name the file after the row"
    )
