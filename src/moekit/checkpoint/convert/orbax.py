"""The conversion, through MaxText 0.2.5's own converter (effects: reads safetensors, writes Orbax and safetensors).

Import follows maxtext.checkpoint_conversion.to_maxtext.main's eager path with its own functions (the abstract
model, PARAM_MAPPING and HOOK_FNS of the family, the loaders that stack layers and experts, save_weights_to_checkpoint)
for a local folder and the checkpoint's own config.json (to_maxtext itself takes the full-size config of a model name
and a Hugging Face hub id). Export follows to_huggingface.main (its mappings with saving_to_hf=True,
_transform_weights_to_full_model) and writes the safetensors and config.json only (no tokenizer download).
The tensors keep the checkpoint's dtype (float32 stays float32), so import then export gives the same bytes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit.base import parse
from moekit.base.errors import MoekitError
from moekit.base.progress import Progress
from moekit.checkpoint.model.hf import CheckpointError, HfCheckpoint
from moekit.config.checks.checkpoint import ITEMS, RECORD


@contextlib.contextmanager
def _progress_for(module, what: str) -> Iterator[None]:
    """MaxText's converter loop (to_huggingface's MemoryMonitorTqdm) shown with moekit's Progress: a bar on a
    terminal, a line per tenth in a log (tqdm writes one line of carriage returns there, about 3 KB for a tiny
    model)."""

    def each(items, **_):
        items = list(items)
        progress = Progress(len(items), what)
        for i, item in enumerate(items):
            yield item
            progress.update(i + 1)

    bar = module.MemoryMonitorTqdm
    module.MemoryMonitorTqdm = each
    try:
        yield
    finally:
        module.MemoryMonitorTqdm = bar


def _as_created(path: Path) -> None:
    """Give a file the mode an ordinary new file gets under this umask (safetensors' writer makes it 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def _import_record(path: Path) -> dict[str, Any]:
    """An import's record (moekit-import.json) beside a checkpoint; empty when absent; CheckpointError when it is
    not one (read once, bounded: a pipe or a huge file is refused)."""
    if not path.exists():
        return {}
    try:
        record = parse.json_file(path, 16 << 20, "checkpoint import record", finite=False)
    except (OSError, MoekitError) as exc:
        raise CheckpointError(f"{str(exc).splitlines()[0]}: import the Hugging Face checkpoint again") from None
    return record if isinstance(record, dict) else {}


@dataclass(slots=True)
class Summary:
    """What an import or export wrote."""

    tensors: int
    parameters: int
    bytes: int
    seconds: float
    out: Path

    def text(self, what: str) -> str:
        return (
            f"{what}: {self.tensors} tensors, {self.parameters:,} parameters, {self.bytes / 2**20:,.1f} MiB "
            f"in {self.seconds:.1f} s\n  at {self.out}"
        )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """MaxText's, absl's and transformers' info and warning lines (dozens for a tiny import, several about the
    configs of other models) kept off the console while converting; errors still show. moekit's progress bar and
    summary are not logging. jaxlib's own C++ lines need TF_CPP_MIN_LOG_LEVEL before jax loads (`quiet_jax`)."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def quiet_jax() -> None:
    """Keep jaxlib's C++ info lines off the console; call before anything imports jax."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def published_config(values: dict[str, Any], mapping_key: str) -> dict[str, Any]:
    """config.json of the model MaxText builds from `values` (a run's resolved keys), on the family's published
    config (MaxText's hf_model_configs, the keys its mappings read); refused when a value has no form there."""
    from moekit.checkpoint.model.architecture import differences, from_hf, from_maxtext, to_hf

    with quiet():  # the table builds every model's transformers config, with warnings about other models
        from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

        published = HF_MODEL_CONFIGS[mapping_key].to_dict()
    hf_config = to_hf(values, published)
    diff = differences(from_maxtext(values), from_hf(hf_config))
    if diff:
        key, (ours, theirs) = next(iter(diff.items()))
        raise CheckpointError(f"the run's model has {key}={ours!r}, which its config.json would give as {theirs!r}")
    return hf_config


def _pyconfig(args: Sequence[str]):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from maxtext.configs import pyconfig

    return pyconfig.initialize(["train", *args, "skip_jax_distributed_system=true"])


def _save_dtype(ckpt: HfCheckpoint) -> str:
    dtypes = {d for _, d in ckpt.tensors.values()}
    if dtypes <= {"F32"}:
        return "float32"
    if dtypes <= {"BF16"}:
        return "bfloat16"
    raise CheckpointError(f"tensor dtypes {sorted(dtypes)}: moekit imports all-float32 or all-bfloat16 checkpoints")


def _alias_collections(mapping: dict, maxtext_keys) -> dict:
    """MaxText 0.2.5 keeps DeepSeek's selection bias in the MoEBiasVar collection while its param mapping still names
    it params-...-gate-bias: map each such key under the name the model (or checkpoint) has."""
    out = dict(mapping)
    for key in maxtext_keys:
        collection, _, rest = key.partition("-")
        if collection != "params" and key not in out and f"params-{rest}" in out:
            out[key] = out.pop(f"params-{rest}")
    return out


def _stack_layers(keys, getter, hooks, shape, axis):
    """A scanned layer stack (one Hugging Face tensor per layer along MaxText's param_scan_axis). to_maxtext's own
    _build_single_axis_stacked_tensor takes every per-layer tensor of a scanned MoE block (router, shared experts:
    their keys hold "MoeBlock") for unscanned experts and stacks it along axis 0, which fails; this is its scanned
    branch."""
    import numpy as np
    from maxtext.checkpoint_conversion.utils.tensor_handling import apply_hook_fns

    one = tuple(d for i, d in enumerate(shape) if i != axis)
    return np.stack([apply_hook_fns(getter(k), one, hooks) for k in keys], axis=axis)


def _flat_list(source) -> bool:
    return isinstance(source, list) and bool(source) and not isinstance(source[0], list)


def _load_tensors(ckpt: HfCheckpoint) -> dict[str, Any]:
    """Each tensor from the one file moekit.checkpoint.convert.files chose for it."""
    from safetensors import SafetensorError, safe_open

    out = {}
    for f in ckpt.files:
        try:
            with safe_open(str(f), framework="np") as s:
                for name in s.keys():
                    if ckpt.sources.get(name) == f:
                        out[name] = s.get_tensor(name)
        except SafetensorError as e:
            raise CheckpointError(f"{f}: its data cannot be read ({e}): copy or download it again") from None
    return out


def import_checkpoint(
    ckpt: HfCheckpoint, mapping_key: str, maxtext_args: Sequence[str], out: Path, record: dict[str, Any]
) -> Summary:
    """Convert the checkpoint into an Orbax checkpoint in the folder `out` (moekit.checkpoint.convert.target's
    `<out>.partial`, renamed into place by the caller)."""
    import jax
    from maxtext.checkpoint_conversion import to_maxtext as tm
    from maxtext.checkpoint_conversion.utils.param_mapping import HOOK_FNS, PARAM_MAPPING
    from maxtext.checkpoint_conversion.utils.utils import save_weights_to_checkpoint, validate_and_filter_param_map_keys

    start = time.monotonic()
    save_dtype = _save_dtype(ckpt)
    config = _pyconfig([*maxtext_args, f"weight_dtype={save_dtype}"])
    hf_config = dict(ckpt.config)
    abstract, treedef = tm.get_maxtext_model_info(config)
    param_map = _alias_collections(PARAM_MAPPING[mapping_key](hf_config, config, config.scan_layers), abstract)
    hooks = _alias_collections(
        HOOK_FNS[mapping_key](hf_config, config, config.scan_layers, saving_to_hf=False), abstract
    )
    keys = validate_and_filter_param_map_keys(param_map.keys(), abstract.keys())
    tensors = _load_tensors(ckpt)

    def getter(key):
        if key not in tensors:
            raise CheckpointError(f"tensor {key}: MaxText's mapping reads it, the checkpoint lacks it")
        return tensors[key]

    weights: list[Any] = [None] * len(abstract)
    progress = Progress(len(keys), "MaxText parameters")
    for i, mt_key in enumerate(keys):
        idx, shape = tm._get_maxtext_indices_and_shapes(mt_key, abstract)
        source = param_map[mt_key]
        key = str(mt_key)
        if config.scan_layers and "MoeBlock" in key and "MoEBiasVar" not in key and _flat_list(source):
            load = functools.partial(_stack_layers, source, getter, hooks.get(mt_key), shape, config.param_scan_axis)
        else:
            load = tm._get_hf_loading_function(source, getter, hooks.get(mt_key), shape, config, mt_key)
        tm._get_maxtext_weight(load, idx, shape, mt_key, weights, save_dtype, False)
        progress.update(i + 1)
    missing = [k for k, (idx, _) in abstract.items() if weights[idx] is None]
    if missing:
        raise CheckpointError(f"MaxText parameter {missing[0]}: no tensor of the checkpoint maps to it")
    params = jax.tree_util.tree_unflatten(treedef, weights)
    save_weights_to_checkpoint(
        str(out), params, 1, config.checkpoint_storage_use_ocdbt, config.checkpoint_storage_use_zarr3, config=config
    )
    (out / RECORD).write_text(
        json.dumps(record | {"dtype": save_dtype, "scan_layers": bool(config.scan_layers)}, indent=1, default=str),
        encoding="utf8",
    )
    return Summary(
        tensors=len(tensors),
        parameters=ckpt.parameters,
        bytes=sum(f.stat().st_size for f in out.rglob("*") if f.is_file()),
        seconds=time.monotonic() - start,
        out=out,
    )


def _split_layer_stacks(config, keys, state, param_map, hooks, shape_map) -> dict[str, Any]:
    """The Hugging Face tensors of each scanned layer stack outside the params collection (DeepSeek-V3's selection
    bias, MoEBiasVar, of shape (layers, experts)), taken out of `state`. MaxText stacks such a variable along axis 0,
    not along param_scan_axis (nnx_decoders.py says so; to_maxtext's import stacks it there too), but
    to_huggingface's process_maxtext_param slices every scanned tensor of 2 or more dimensions along
    param_scan_axis, which cuts it per expert and fails to reshape the (1,)-sized slice to (experts,)."""
    import jax
    from maxtext.checkpoint_conversion.utils.utils import _process

    out: list[tuple[str, Any]] = []
    for key in keys:
        source = param_map.get(key)
        if not (config.scan_layers and isinstance(key, str) and not key.startswith("params-") and _flat_list(source)):
            continue
        weight = state.pop(key)
        for i, hf_path in enumerate(source):
            part = jax.lax.index_in_dim(weight, i, axis=0, keepdims=False)
            _process(hf_path, part, out, hooks.get(key), shape_map, save_dtype=config.weight_dtype)
    return dict(out)


def _aux_variables(items: Path) -> dict[str, Any]:
    """A checkpoint `train` saved (NNX) keeps the variables that are not parameters, DeepSeek-V3's selection bias
    among them, under nnx_aux.model, which MaxText's load_orbax_checkpoint leaves out (it restores params only):
    each such bias restored here, under the name an import gives it (MoEBiasVar-<path>), which the mapping then
    finds (_alias_collections). Empty for an import's checkpoint (it has no nnx_aux)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    ckptr = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    tree = ckptr.metadata(items).item_metadata.tree
    aux = tree.get("nnx_aux") if isinstance(tree, dict) else None
    if not isinstance(aux, dict) or not isinstance(aux.get("model"), dict):
        return {}

    def biases(node, names):
        if isinstance(node, dict):
            kept = {k: biases(v, [*names, k]) for k, v in node.items()}
            return {k: v for k, v in kept.items() if v is not None} or None
        return node if names[-2:] == ["gate", "bias"] and hasattr(node, "shape") else None

    wanted = biases(aux["model"], [])
    if not wanted:
        return {}
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    one = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    item = {"nnx_aux": {"model": wanted}}
    restore_args = jax.tree_util.tree_map(lambda _: ocp.ArrayRestoreArgs(sharding=one), item)
    restored = ckptr.restore(items, args=ocp.args.PyTreeRestore(item, restore_args=restore_args, partial_restore=True))
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(restored["nnx_aux"]["model"])[0]:
        out["MoEBiasVar-" + "-".join(str(getattr(p, "key", p)) for p in path)] = leaf
    return out


def export_checkpoint(
    ckpt_dir: Path, hf_config: dict[str, Any], mapping_key: str, maxtext_args: Sequence[str], out: Path
) -> Summary:
    """Write the parameters of an Orbax checkpoint (`ckpt_dir`: an import, or a run's checkpoints/<step>) as
    Hugging Face safetensors + config.json into the empty folder `out` (target's `<out>.partial`)."""
    import numpy as np
    from maxtext.checkpoint_conversion import to_huggingface as th
    from maxtext.checkpoint_conversion.utils.utils import (
        detect_and_extract_checkpoint,
        load_orbax_checkpoint,
        validate_and_filter_param_map_keys,
    )
    from safetensors.numpy import save_file

    start = time.monotonic()
    items = ckpt_dir / ITEMS if (ckpt_dir / ITEMS).is_dir() else ckpt_dir / "items"
    record = _import_record(ckpt_dir / RECORD)
    dtype = record.get("dtype", "float32")
    config = _pyconfig([*maxtext_args, f"load_parameters_path={items}", f"weight_dtype={dtype}"])
    maps = th._get_model_mappings(mapping_key, config.scan_layers, dict(hf_config), config)
    state = detect_and_extract_checkpoint(load_orbax_checkpoint(config))
    state |= {k: v for k, v in _aux_variables(items).items() if k not in state}
    param_map = _alias_collections(maps["param_mapping"], state)
    hooks = _alias_collections(maps["hook_fn_mapping"], state)
    keys = validate_and_filter_param_map_keys(param_map, set(state))
    before = set(state)
    hf = _split_layer_stacks(config, keys, state, param_map, hooks, maps["shape_mapping"])
    keys = [k for k in keys if not (isinstance(k, str) and k in before - set(state))]
    with _progress_for(th, "MaxText parameters"):
        hf |= th._transform_weights_to_full_model(config, keys, state, param_map, hooks, maps["shape_mapping"])
    arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in sorted(hf.items())}
    save_file(arrays, str(out / "model.safetensors"), metadata={"format": "pt"})
    _as_created(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(hf_config, indent=2, default=str), encoding="utf8")
    return Summary(
        tensors=len(arrays),
        parameters=sum(int(a.size) for a in arrays.values()),
        bytes=(out / "model.safetensors").stat().st_size,
        seconds=time.monotonic() - start,
        out=out,
    )
