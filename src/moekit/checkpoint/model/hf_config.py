"""A Hugging Face config.json checked before any of its values is used: every count a whole number within bounds.

config.json is input: a count of 1e30 experts or layers would size the shape table, the layer lists and the model
before any comparison could refuse it. Each key moekit reads (moekit.checkpoint.model.architecture.from_hf) is checked
here for its type and range first, and the layer and expert counts against the tensors the safetensors headers name
(`bound_by_tensors`). Pure functions; each refusal names the key, the value found and what is expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from moekit.base.errors import MoekitError
from moekit.checkpoint.model.architecture import HF_FAMILIES, from_hf

# Upper bounds, well above every published model (DeepSeek-V3: 61 layers, 256 experts, hidden 7168, vocab 129280).
_LAYERS = 4096
_EXPERTS = 65536
_WIDTH = 2**20
_HEADS = 2**14
_VOCAB = 2**24
_POSITIONS = 2**31
# key -> (least, greatest): whole numbers; None (or absent) is left to from_hf (a default, or the key it lacks).
COUNTS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, _LAYERS),
    "hidden_size": (1, _WIDTH),
    "intermediate_size": (1, _WIDTH),
    "intermediate_size_mlp": (1, _WIDTH),
    "moe_intermediate_size": (1, _WIDTH),
    "head_dim": (1, _WIDTH),
    "q_lora_rank": (0, _WIDTH),
    "kv_lora_rank": (1, _WIDTH),
    "qk_nope_head_dim": (1, _WIDTH),
    "qk_rope_head_dim": (1, _WIDTH),
    "v_head_dim": (1, _WIDTH),
    "num_attention_heads": (1, _HEADS),
    "num_key_value_heads": (1, _HEADS),
    "vocab_size": (1, _VOCAB),
    "n_routed_experts": (1, _EXPERTS),
    "num_local_experts": (1, _EXPERTS),
    "num_experts": (1, _EXPERTS),
    "num_experts_per_tok": (1, _EXPERTS),
    "n_shared_experts": (0, _EXPERTS),
    "n_group": (1, _EXPERTS),
    "topk_group": (1, _EXPERTS),
    "first_k_dense_replace": (0, _LAYERS),
    "moe_layer_freq": (1, _LAYERS),
    "decoder_sparse_step": (1, _LAYERS),
    "interleave_moe_layer_step": (1, _LAYERS),
    "no_rope_layer_interval": (1, _LAYERS),
    "max_position_embeddings": (1, _POSITIONS),
    "original_max_position_embeddings": (1, _POSITIONS),
    "sliding_window": (0, _POSITIONS),
    "attention_chunk_size": (0, _POSITIONS),
}
NUMBERS = (
    "rms_norm_eps",
    "rope_theta",
    "routed_scaling_factor",
    "swiglu_limit",
    "factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
)
LAYER_LISTS = ("mlp_only_layers", "moe_layers")  # layer indices
PER_LAYER_LISTS = ("no_rope_layers", "layer_types")  # one entry per layer
ROPE = ("rope_parameters", "rope_scaling")
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


class ConfigJsonError(MoekitError):
    """config.json holds a value moekit cannot read as the model it describes."""


def _where(key: str, name: str) -> str:
    return f"{name}: {key}"


def _count(value: Any, key: str, name: str) -> None:
    least, most = COUNTS[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigJsonError(
            f"{_where(key, name)} is {value!r} ({type(value).__name__}); a whole number from {least} to {most:,} "
            "is expected: fix or replace the file"
        )
    if not least <= value <= most:
        raise ConfigJsonError(
            f"{_where(key, name)} is {value:,}; moekit reads {least} to {most:,}: fix or replace the file"
        )


def _number(value: Any, key: str, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigJsonError(f"{_where(key, name)} is {value!r}; a finite number is expected: fix or replace the file")


def _mapping_values(c: Mapping[str, Any], name: str) -> None:
    for key, value in c.items():
        if value is None:
            continue
        if key in COUNTS:
            _count(value, key, name)
        elif key in NUMBERS:
            _number(value, key, name)


def _layer_lists(c: Mapping[str, Any], name: str) -> None:
    layers = c["num_hidden_layers"]
    for key in (*LAYER_LISTS, *PER_LAYER_LISTS):
        value = c.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or len(value) > layers:
            raise ConfigJsonError(
                f"{_where(key, name)}: a list of at most num_hidden_layers={layers} entries is expected, "
                f"found {type(value).__name__}" + (f" of {len(value):,}" if isinstance(value, list) else "")
            )
        if key in LAYER_LISTS and not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value
        ):
            raise ConfigJsonError(f"{_where(key, name)}: layer indices from 0 to {layers - 1} are expected")


def checked(config: Any, name: str = "config.json") -> dict[str, Any]:
    """The model's config (a multimodal checkpoint's text_config) once every value moekit reads is in range, and
    from_hf reads it; ConfigJsonError names the first key that is not."""
    if not isinstance(config, dict):
        raise ConfigJsonError(f"{name} holds a JSON {type(config).__name__}, not an object: replace the file")
    c = config.get("text_config", config)  # a multimodal checkpoint (Llama 4) nests its text model's config
    if not isinstance(c, dict):
        raise ConfigJsonError(f"{name}: text_config is a {type(c).__name__}, not an object: replace the file")
    kind = c.get("model_type")
    if not isinstance(kind, str) or kind not in HF_FAMILIES:
        raise ConfigJsonError(
            f"{name}: model_type {kind!r}: moekit has no family for it (known: {', '.join(HF_FAMILIES)})"
        )
    if "num_hidden_layers" not in c:
        raise ConfigJsonError(f"{name} has no num_hidden_layers, which a {kind} config holds: replace the file")
    _mapping_values(c, name)
    for key in ROPE:
        rope = c.get(key)
        if rope is not None and not isinstance(rope, dict):
            raise ConfigJsonError(f"{_where(key, name)} is {type(rope).__name__}; an object or null is expected")
        _mapping_values(rope or {}, f"{name} {key}")
    _layer_lists(c, name)
    try:
        from_hf(c)
    except KeyError as e:
        raise ConfigJsonError(f"{name} has no {e.args[0]}, which a {kind} config holds: replace the file") from None
    except (TypeError, ValueError) as e:
        raise ConfigJsonError(f"{name} ({kind}): {e}") from None
    return c


def experts(config: Mapping[str, Any]) -> int:
    """The routed expert count of a checked config."""
    return next(int(config[k]) for k in EXPERT_KEYS if config.get(k) is not None)


def bound_by_tensors(config: Mapping[str, Any], tensors: int, per_expert: bool, name: str = "config.json") -> None:
    """Refuse counts the checkpoint cannot hold: a Hugging Face checkpoint stores at least one tensor per layer and,
    where each expert has tensors of its own (`per_expert`), at least one per expert of each MoE layer; the shape
    table built from config.json would otherwise grow with counts the headers never back."""
    moe_layers = len(from_hf(config)["moe_layers"])
    layers = int(config["num_hidden_layers"])
    need = max(layers, moe_layers * experts(config) if per_expert else 0)
    if need > tensors:
        what = f"{layers} layers" + (f", {moe_layers} x {experts(config)} experts" if per_expert else "")
        raise ConfigJsonError(
            f"{name} describes {what}, so at least {need:,} tensors, and the safetensors files hold {tensors:,}: "
            "the config is not this checkpoint's"
        )
