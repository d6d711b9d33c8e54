"""Before a run starts from `checkpoint.init_from`, check the folder on the host that runs `moekit train`.

MaxText reads load_parameters_path=<init_from>/0/items only after start-up and compilation, minutes in, and a
checkpoint of another model fails there with a tree or shape error of Orbax. Here, before anything starts: the
folder exists, holds `0/items` (the layout `moekit checkpoint import` writes), and, where the import left its
record (moekit-import.json), the checkpoint's model is the configured one: the same family (MaxText decoder block)
and every architectural value that sets a parameter's shape (moekit.checkpoint.model.architecture, read from the
recorded config.json and from the keys MaxText runs with). A value that changes what the model computes but no shape
(rope, routing, norm epsilon) is reported as a note: the weights load, the model is not the imported one. A folder
without a record (an Orbax checkpoint another tool wrote) is checked for its layout only, and the note says so.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from moekit.base import bounded, maxtext_files, parse
from moekit.base.errors import MoekitError
from moekit.checkpoint.model.architecture import HF_FAMILIES, differences, from_hf, from_maxtext
from moekit.checkpoint.model.hf_config import ConfigJsonError, checked
from moekit.config.checks import Problem
from moekit.config.checks.checkpoint import ITEMS, RECORD
from moekit.config.schema import Config
from moekit.plan import resolved_values

KEY = "checkpoint.init_from"
RECORD_BYTES = 64 * 2**20  # moekit-import.json: config.json (at most 4 MiB) and a few counts
REMOTE = ("gs://", "s3://", "hf://", "http://", "https://")
# The architectural values (moekit.checkpoint.model.architecture) that decide the shape or the presence of a parameter.
SHAPE_KEYS = frozenset(
    {
        "layers",
        "moe_layers",
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "experts",
        "expert_ffn",
        "dense_ffn",
        "shared_experts",
        "vocab",
        "tied_embeddings",
        "attention_bias",
        "mlp_bias",
        "qk_norm",
        "attention_sinks",
        "selection_bias",
        "router_bias",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    }
)
IMPORT = "moekit checkpoint import --family <model option> <Hugging Face folder> --out <folder>"


def _record(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The import's record, or None; and why it cannot be read (None when it can, or is absent)."""
    path = folder / RECORD
    if not path.exists() and not path.is_symlink():
        return None, None
    try:
        record = parse.json_file(path, RECORD_BYTES, "checkpoint import record", finite=False)
    except (OSError, MoekitError) as exc:
        return None, f"{bounded.shown(path)} cannot be read: {str(exc).splitlines()[0]}"
    if not isinstance(record, dict) or not isinstance(record.get("hf_config"), dict):
        return None, f"{path} has no hf_config (not a record `moekit checkpoint import` wrote)"
    try:  # its counts are read (from_hf) only once they are in range
        checked(record["hf_config"], f"{path} hf_config")
    except ConfigJsonError as exc:
        return None, str(exc)
    return record, None


def _layout(folder: Path, host: str) -> Problem | None:
    fix = f"checkpoint.init_from=<the --out folder of `{IMPORT}`>"
    if not folder.exists():
        return Problem(KEY, f"{folder} does not exist on {host}", f"{fix}, or import the checkpoint there first")
    if not folder.is_dir():
        return Problem(KEY, f"{folder} is a file, not a checkpoint folder", fix)
    if (folder / ITEMS).is_dir():
        return None
    if folder.name == "items" and folder.parent.name == "0":
        seen = f"{folder} is the checkpoint's items folder itself; MaxText would read {folder / ITEMS}"
        return Problem(KEY, seen, f"checkpoint.init_from={folder.parent.parent}")
    if (folder / "items").is_dir():
        seen = f"{folder} holds items/ but no {ITEMS} (a run's checkpoints/<step> folder?); MaxText reads {ITEMS}"
        return Problem(KEY, seen, f"{fix}; a run's own checkpoints resume with run.dir=<that run>")
    return Problem(KEY, f"{folder} has no {ITEMS}: it is not a checkpoint `moekit checkpoint import` wrote", fix)


def problems(cfg: Config) -> tuple[list[Problem], list[str]]:
    """What is wrong with checkpoint.init_from for this config on this host, and notes of what was seen."""
    given = cfg.checkpoint.init_from
    if not given or given.startswith(REMOTE):
        return [], []
    folder = Path(given.rstrip("/"))
    if not folder.is_absolute():  # Orbax refuses a relative path, after MaxText has started and compiled
        seen = f"{given} is a relative path; MaxText's Orbax reads checkpoints from absolute paths only"
        return [Problem(KEY, seen, f"checkpoint.init_from={folder.absolute()}")], []
    if found := _layout(folder, socket.gethostname()):
        return [found], []
    record, unreadable = _record(folder)
    if record is None:
        why = unreadable or f"no {RECORD}"
        return [], [
            f"checkpoint: {folder} has {ITEMS}; {why}, so its model is not checked against model={cfg.model.name}"
        ]
    hf_config, option = record["hf_config"], record.get("family", "?")
    kind = hf_config.get("model_type", "?")
    # the import's own minimal list (older records hold only every shape override)
    given = record.get("train_overrides", record.get("overrides"))
    listed = isinstance(given, list) and all(isinstance(g, str) for g in given)
    redo = f"model={option} " + (" ".join(given) if listed else "")
    block = HF_FAMILIES.get(kind)
    if block != cfg.model.decoder_block:
        return [
            Problem(
                KEY,
                f"{folder} holds a {kind} checkpoint (imported with --family {option}; MaxText decoder {block}), "
                f"but the configured model is decoder {cfg.model.decoder_block} (model.name={cfg.model.name})",
                f"train the checkpoint's model ({redo.strip()}), or import a checkpoint of this model with `{IMPORT}`",
            )
        ], []
    values = resolved_values(cfg, *maxtext_files.model_values(cfg.model.name))
    diff = differences(from_maxtext(values), from_hf(hf_config))
    shaped = {k: d for k, d in diff.items() if k in SHAPE_KEYS}
    out: list[Problem] = []
    if shaped:
        key, (ours, theirs) = next(iter(shaped.items()))
        more = f" (and {len(shaped) - 1} more shape key(s): {', '.join(list(shaped)[1:])})" if len(shaped) > 1 else ""
        out.append(
            Problem(
                KEY,
                f"{folder} holds another model: at {key!r} the configured model has {ours!r}, the imported "
                f"checkpoint {theirs!r}{more}; its parameters would not fit",
                f"give the run the import's model: {redo.strip()}",
            )
        )
    scanned = record.get("scan_layers")
    if scanned is not None and bool(scanned) != bool(values.get("scan_layers")):
        out.append(
            Problem(
                KEY,
                f"{folder} was imported with scan_layers={scanned}, the run has scan_layers={values.get('scan_layers')}"
                " (the parameter tree differs)",
                f"maxtext.extra.scan_layers={str(bool(scanned)).lower()}, or import again with the run's setting",
            )
        )
    if out:
        return out, []
    notes = [
        f"checkpoint: {folder} ({kind}, {record.get('tensors', '?')} tensors imported) fits model={cfg.model.name}"
    ]
    rest = {k: d for k, d in diff.items() if k not in SHAPE_KEYS}
    if rest:
        key, (ours, theirs) = next(iter(rest.items()))
        notes.append(
            f"checkpoint: the run computes otherwise than the imported model at {', '.join(rest)} (e.g. {key}: "
            f"{ours!r} here, {theirs!r} imported); the parameters load"
        )
    return [], notes
