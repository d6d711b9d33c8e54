"""What a run starts from: `checkpoint.init_from` names the folder `moekit checkpoint import` wrote.

Pure like the other checks; whether the folder exists and holds the configured model is a host probe
(moekit.preflight.checkpoint), run where the files are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

from moekit.config.checks.problem import Problem
from moekit.config.schema import Config

# The folder `moekit checkpoint import` writes: MaxText's save_weights_to_checkpoint saves step 0, and
# load_parameters_path points at its items; beside them, moekit's record of what was imported.
ITEMS = "0/items"
RECORD = "moekit-import.json"


def init_from_names_the_import(cfg: Config) -> Iterator[Problem]:
    """MaxText reads <init_from>/0/items: a path that already ends in 0/items (or items) would be read one level too
    deep, on every host, wherever the folder is mounted."""
    given = cfg.checkpoint.init_from
    if given is None:
        return
    path = PurePosixPath(given.rstrip("/") or "/")
    if not given.strip():
        yield Problem(
            "checkpoint.init_from",
            "is empty: no folder to start from",
            "checkpoint.init_from=<the --out folder of `moekit checkpoint import`>, or checkpoint.init_from=null",
        )
    elif path.name == "items":
        top = path.parent.parent if path.parent.name == "0" else path.parent
        yield Problem(
            "checkpoint.init_from",
            f"{given} names the checkpoint's items folder; MaxText would read {path}/0/items",
            f"checkpoint.init_from={top} (the folder `moekit checkpoint import --out` wrote)",
        )
