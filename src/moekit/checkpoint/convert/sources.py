"""Where an export reads its model from: the record `checkpoint import` left beside an import, or the config.yaml
of the run that saved the checkpoint (`<run.dir>/<run.name>/checkpoints/<step>`). Each file read within a bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moekit.base import parse
from moekit.base.errors import MoekitError
from moekit.base.maxtext_files import model_values
from moekit.checkpoint.convert.orbax import published_config
from moekit.checkpoint.model.architecture import hf_model_type
from moekit.checkpoint.model.hf import MAPPING_KEYS, NO_MAPPING, CheckpointError
from moekit.checkpoint.model.hf_config import checked
from moekit.config.checks.checkpoint import RECORD
from moekit.config.schema import Config
from moekit.plan import resolved_values
from moekit.rundir import CONFIG
from moekit.rundir.records import read_config

RECORD_BYTES = 64 * 2**20  # moekit-import.json: the config.json (bounded at 4 MiB) and a few counts


def import_record(folder: Path) -> dict[str, Any] | None:
    """moekit-import.json of an imported checkpoint; None when the folder has none."""
    path = folder / RECORD
    if not path.exists() and not path.is_symlink():
        return None
    try:
        record = parse.json_file(path, RECORD_BYTES, "checkpoint import record", finite=False)
    except (OSError, MoekitError):
        record = None
    if not isinstance(record, dict) or not {"family", "overrides", "hf_config", "mapping"} <= set(record):
        raise CheckpointError(f"{path} is damaged or not moekit's: import the Hugging Face checkpoint again")
    checked(record["hf_config"], f"{path} hf_config")  # written back as config.json by export
    return record


def run_checkpoint(src: Path) -> tuple[Config, dict[str, Any], str]:
    """The run's config, config.json and MaxText mapping key of a checkpoint a run saved at `src`."""
    run = src.parents[2] if src.parent.name == "checkpoints" and len(src.parents) > 2 else None
    if run is None or not (src / "items").is_dir() or not (run / CONFIG).is_file():
        raise CheckpointError(
            f"{src}: neither a folder `moekit checkpoint import` wrote nor a run's checkpoint "
            "(<run.dir>/<run.name>/checkpoints/<step>, with items/ in it and the run's config.yaml three levels up)"
        )
    try:
        cfg = Config.model_validate(read_config(run))
    except (ValueError, TypeError) as e:  # pydantic's ValidationError is a ValueError
        raise CheckpointError(f"{run / CONFIG} does not describe a run moekit can read ({type(e).__name__})") from None
    if cfg.checkpoint.init_from and (record := import_record(Path(cfg.checkpoint.init_from))) is not None:
        return cfg, record["hf_config"], record["mapping"]  # the run started from an import: the same model
    values = resolved_values(cfg, *model_values(cfg.model.name))
    kind = hf_model_type(values)
    if kind in NO_MAPPING:
        raise CheckpointError(f"{kind}: {NO_MAPPING[kind]}")
    mapping = MAPPING_KEYS[kind]
    return cfg, published_config(values, mapping), mapping
