"""A Hugging Face checkpoint folder read from disk: config.json and the safetensors headers, each within a bound.

Which file a tensor comes from: the index (`model.safetensors.index.json`'s weight_map) when the folder has one,
else every `*.safetensors` file; a tensor name found in two files is refused with both named (a leftover shard
must not override a weight without a word). A file that is empty, cut short or damaged is refused by name.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from moekit.base import bounded, parse
from moekit.checkpoint.model.hf import CheckpointError, HfCheckpoint
from moekit.checkpoint.model.hf_config import checked

CONFIG_BYTES = 4 * 2**20  # a published config.json is a few KiB
INDEX_BYTES = 64 * 2**20  # DeepSeek-V3's index: 9 MiB for 91k tensors
HEADER_BYTES = 100_000_000  # the safetensors format's own limit on a header
INDEX = "model.safetensors.index.json"


def _json(path: Path, limit: int, what: str) -> Any:
    try:
        return parse.json_file(path, limit, what, finite=False)  # one open, bounded: a device or pipe is refused
    except OSError as e:
        raise CheckpointError(f"{bounded.shown(path)}: cannot read it ({e.strerror}): a {what} is expected") from None
    except bounded.TooLarge as e:
        raise CheckpointError(str(e).splitlines()[0]) from None
    except parse.ParseError as e:
        raise CheckpointError(f"{e}: replace the file") from None


def _header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of one safetensors file, after checking that its header and data fit the file."""
    from safetensors import SafetensorError, safe_open

    size = path.stat().st_size
    damaged = f"{path}: not a complete safetensors file ({{}}): copy or download it again"
    try:
        with bounded.open_regular(path, None, "safetensors file") as f:  # a pipe or device is refused, not read
            head = f.read(8)
    except (OSError, bounded.TooLarge) as e:
        raise CheckpointError(f"{bounded.shown(path)}: {str(e).splitlines()[0]}") from None
    if len(head) < 8:
        raise CheckpointError(damaged.format(f"{size} bytes, shorter than the 8-byte header length"))
    (n,) = struct.unpack("<Q", head)
    if n > min(HEADER_BYTES, size - 8):
        raise CheckpointError(damaged.format(f"its header claims {n:,} bytes of a {size:,}-byte file"))
    out = {}
    try:
        with safe_open(str(path), framework="np") as s:
            for name in s.keys():
                sl = s.get_slice(name)
                out[name] = (tuple(sl.get_shape()), str(sl.get_dtype()))
    except SafetensorError as e:
        raise CheckpointError(damaged.format(e)) from None
    return out


def _files(folder: Path) -> tuple[list[Path], dict[str, Path] | None]:
    """The shards to read, and the index's tensor -> file map when the folder has an index."""
    index_file = folder / INDEX
    if not index_file.is_file():
        return sorted(f for f in folder.glob("*.safetensors") if f.is_file()), None
    index = _json(index_file, INDEX_BYTES, "safetensors index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_file}: no weight_map of tensor name -> file name: replace the file")
    wanted = {}
    for name, file in weight_map.items():
        path = folder / file
        if Path(file).name != file or not path.is_file():
            raise CheckpointError(f"{index_file}: {name} is in {file!r}, which is not a file of {folder}")
        wanted[name] = path
    return sorted(set(wanted.values())), wanted


def read(folder: Path) -> HfCheckpoint:
    """config.json (checked: moekit.checkpoint.model.hf_config) and the safetensors headers of a local folder."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json (a local Hugging Face checkpoint folder is expected)")
    config = checked(_json(folder / "config.json", CONFIG_BYTES, "config.json"), str(folder / "config.json"))
    files, index = _files(folder)
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors files (moekit imports safetensors only)")
    ckpt = HfCheckpoint(folder, config)
    for f in files:
        for name, meta in _header(f).items():
            if index is not None and index.get(name) != f:
                if name in index:
                    continue  # the index names another file for it; this copy is not read
                raise CheckpointError(f"{f}: tensor {name} is not in {INDEX}: the index and the files disagree")
            if name in ckpt.sources:
                raise CheckpointError(
                    f"tensor {name} is in both {ckpt.sources[name].name} and {f.name} of {folder}: "
                    f"remove the file that does not belong to this checkpoint (or add a {INDEX} naming one)"
                )
            ckpt.tensors[name], ckpt.sources[name] = meta, f
    if index is not None and (lost := sorted(set(index) - set(ckpt.sources))):
        raise CheckpointError(f"{folder / INDEX}: {lost[0]} is in {index[lost[0]].name} by the index, not in the file")
    return ckpt
