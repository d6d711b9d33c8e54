"""A model's architecture in one vocabulary, read from two sides: MaxText's keys and a Hugging Face config.

`from_maxtext(values)` reads the keys MaxText runs with (base.yml < model file < moekit's arguments);
`from_hf(config)` reads a Hugging Face `config.json` (a dict) the way transformers' modeling code uses it. Both
return the same keys, so that a model moekit composes can be compared with the published one key by key
(tests/test_config_tie.py), and an imported checkpoint with the family it is imported into (moekit.checkpoint).
`maxtext_model_keys(config)` is the other direction: the MaxText width and rope keys that build a model of a
Hugging Face config's shape (the family's model option supplies decoder block and routing).

Routing is compared by what it computes, not by key names: MaxText's "" score function (top-k of the logits,
softmax over the k) computes what Mixtral's softmax-then-renormalized-top-k computes. The reading of each key
names the MaxText code it follows (maxtext/layers/moe.py get_topk and deepseek_scale_weights,
maxtext/models/llama4.py determine_is_moe_layer, maxtext/models/gpt_oss.py GPT_OSS_ATTENTION_PATTERN,
maxtext/layers/embeddings.py LLaMARotaryEmbedding). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moekit.config.kinds.families import FAMILIES, Family

# MaxText's decoder block for each Hugging Face model_type moekit has a family for (the rows' hf).
HF_FAMILIES = {h.model_type: f.decoder_block for f in FAMILIES.values() for h in f.hf}

# moe.py get_topk: group-limited routing runs only for these model names (deepseek_routing).
_GROUP_ROUTING_MODELS = ("deepseek3", "deepseek4", "kimi-k2")
# embeddings.py LLaMARotaryEmbedding: the llama3.1 scaling MaxText applies, constants in its code.
_LLAMA31_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def from_maxtext(v: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture of the model MaxText builds from these resolved keys."""
    f = FAMILIES[v["decoder_block"]]  # what this family's decoder reads (config/kinds/families.py)
    n = int(v["base_num_decoder_layers"])
    if f.leading_dense:
        moe = [i >= int(v["first_num_dense_layers"]) for i in range(n)]
    elif f.interleaved_moe:
        step = int(v["interleave_moe_layer_step"])
        moe = [(i + 1) % step == 0 for i in range(n)]
    else:
        moe = [True] * n
    a: dict[str, Any] = {
        "layers": n,
        "moe_layers": tuple(i for i, m in enumerate(moe) if m),
        "hidden": int(v["base_emb_dim"]),
        "heads": int(v["base_num_query_heads"]),
        "kv_heads": int(v["base_num_kv_heads"]),
        "experts": int(v["num_experts"]),
        "top_k": int(v["num_experts_per_tok"]),
        "expert_ffn": int(v["base_moe_mlp_dim"]),
        "shared_experts": int(v["shared_experts"]) if f.has_shared_experts else 0,
        "vocab": int(v["vocab_size"]),
        "tied_embeddings": bool(v["logits_via_embedding"]),
        "norm_eps": float(v["normalization_layer_epsilon"]),
        "activation": str(v["mlp_activations"][0]),
        "activation_limit": float(v.get("mlp_activations_limit") or 0) if f.activation_limit else None,
        "attention_bias": bool(v["attention_bias"]) and v.get("attention_type") != "mla",
        "mlp_bias": bool(v["mlp_bias"]),
        "qk_norm": bool(v["use_qk_norm"]) or f.qk_norm_always,
        "attention_sinks": bool(v["attention_sink"]),
        "sliding_window": int(v["sliding_window_size"]) or None,
        "sliding_layers": tuple(range(0, n, 2)) if f.sliding_every_other_layer else (),
        "chunk_window": int(v["chunk_attn_window_size"]) or None if f.chunked_attention else None,
        "nope_layers": _every(n, int(v["nope_layer_interval"])) if f.nope_layers else (),
        "temperature_tuning": bool(v["temperature_tuning"]) if f.temperature_tuning else False,
    }
    if not all(moe):
        a["dense_ffn"] = int(v["base_mlp_dim"])
    a |= _routing_maxtext(v, f)
    a |= _attention_maxtext(v)
    a |= _rope_maxtext(v)
    return a


def _every(n: int, interval: int) -> tuple[int, ...]:
    return tuple(i for i in range(n) if interval > 0 and (i + 1) % interval == 0)


def _routing_maxtext(v: Mapping[str, Any], f: Family) -> dict[str, Any]:
    score = v["routed_score_func"]
    # deepseek_scale_weights: sigmoid weights renormalized, then x routed_scaling_factor
    if f.routing_weights == "deepseek_scaled":
        out = {"score": score, "normalize_topk": score == "sigmoid", "scale": float(v["routed_scaling_factor"])}
    elif f.routing_weights == "llama4_sigmoid_top1":  # top-1 logit through a sigmoid (llama4.py), nothing renormalized
        out = {"score": "sigmoid", "normalize_topk": False, "scale": 1.0}
    else:  # top-k of the logits, softmax over the k: the top-k weights of a softmax, renormalized
        out = {"score": "softmax" if score in ("", "softmax") else score, "normalize_topk": True, "scale": 1.0}
    groups = None
    if f.group_routing and int(v["n_routing_groups"]) != -1 and str(v["model_name"]).startswith(_GROUP_ROUTING_MODELS):
        groups = (int(v["n_routing_groups"]), int(v["topk_routing_group"]))
    out["routing_groups"] = groups
    out["selection_bias"] = f.selection_bias and bool(v["routed_bias"])  # bias for choosing only
    out["router_bias"] = not f.selection_bias and bool(v["routed_bias"])  # bias on the logits the weights come from
    return out


def _attention_maxtext(v: Mapping[str, Any]) -> dict[str, Any]:
    if v.get("attention_type") == "mla":
        return {
            "q_lora_rank": int(v["q_lora_rank"]),
            "kv_lora_rank": int(v["kv_lora_rank"]),
            "qk_nope_head_dim": int(v["qk_nope_head_dim"]),
            "qk_rope_head_dim": int(v["qk_rope_head_dim"]),
            "v_head_dim": int(v["v_head_dim"]),
        }
    return {"head_dim": int(v["head_dim"])}


def _rope_maxtext(v: Mapping[str, Any]) -> dict[str, Any]:
    kind = v["rope_type"]
    out: dict[str, Any] = {"rope_theta": float(v["rope_max_timescale"])}
    if kind == "yarn":
        out["rope"] = {
            "type": "yarn",
            "factor": float(v["rope_factor"]),
            "original_max_position_embeddings": int(v["original_max_position_embeddings"]),
            "beta_fast": float(v["beta_fast"]),
            "beta_slow": float(v["beta_slow"]),
            "truncate": bool(v["rope_truncate"]),
            "interleave": bool(v["rope_interleave"]),
            # rope_attention_scaling=false: MaxText scales the attention by mscale (DeepSeek's mscale and
            # mscale_all_dim); true: the rotary output by yarn's 0.1 ln(factor) + 1 (gpt-oss: no mscale given)
            "mscale": None if v["rope_attention_scaling"] else float(v["mscale"]),
            "max_position_embeddings": int(v["max_position_embeddings"]),
        }
    elif kind == "llama3.1" and v["rope_use_scale"]:
        out["rope"] = {"type": "llama3"} | {k: float(x) for k, x in _LLAMA31_SCALING.items()}
    else:
        out["rope"] = None
    return out


# ---- the Hugging Face side ----


def _rope_params(c: Mapping[str, Any]) -> dict[str, Any]:
    """transformers >= 5 keeps rope in rope_parameters; older configs in rope_theta + rope_scaling."""
    p = dict(c.get("rope_parameters") or {})
    if not p:
        p = dict(c.get("rope_scaling") or {}) | {"rope_theta": c.get("rope_theta")}
    p.setdefault("rope_type", p.get("type", "default"))
    return p


def from_hf(c: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture of the model transformers builds from this config dict (a text config for Llama 4): the
    keys every family's config.json has, then its model_type's own reading (_HF_READERS)."""
    kind = c["model_type"]
    if kind not in HF_FAMILIES:
        raise ValueError(f"model_type {kind!r}: moekit has no family for it (known: {', '.join(HF_FAMILIES)})")
    if kind not in _HF_READERS:  # a family row's model_type this module has no reading of yet
        raise ValueError(f"model_type {kind!r}: from_hf has no reading of its config.json (architecture.py)")
    n = int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    a: dict[str, Any] = {
        "layers": n,
        "hidden": int(c["hidden_size"]),
        "heads": heads,
        "kv_heads": int(c.get("num_key_value_heads") or heads),
        "top_k": int(c["num_experts_per_tok"]),
        "vocab": int(c["vocab_size"]),
        "tied_embeddings": bool(c.get("tie_word_embeddings", False)),
        "norm_eps": float(c["rms_norm_eps"]),
        "activation": c.get("hidden_act", "silu"),
        "activation_limit": None,
        "attention_bias": bool(c.get("attention_bias") or False),
        "mlp_bias": False,
        "qk_norm": False,
        "attention_sinks": False,
        "sliding_window": None,
        "sliding_layers": (),
        "chunk_window": None,
        "nope_layers": (),
        "temperature_tuning": False,
        "shared_experts": 0,
        "routing_groups": None,
        "selection_bias": False,
        "router_bias": False,
    }
    a |= _HF_READERS[kind](c, n)
    if len(a["moe_layers"]) < n:
        a["dense_ffn"] = int(c["intermediate_size_mlp"] if kind == "llama4_text" else c["intermediate_size"])
    a |= _rope_hf(c, kind)
    return a


def _head_dim(c: Mapping[str, Any]) -> int:
    return int(c.get("head_dim") or int(c["hidden_size"]) // int(c["num_attention_heads"]))


def _deepseek_hf(c: Mapping[str, Any], n: int) -> dict[str, Any]:
    """DeepSeek-V2 and -V3 (transformers' DeepseekV2/V3 configs): MLA attention, leading dense layers."""
    v3 = c["model_type"] == "deepseek_v3"
    first = int(c["first_k_dense_replace"])
    freq = int(c.get("moe_layer_freq") or 1)
    a = {
        "moe_layers": tuple(i for i in range(n) if i >= first and i % freq == 0),
        "experts": int(c["n_routed_experts"]),
        "expert_ffn": int(c["moe_intermediate_size"]),
        "shared_experts": int(c.get("n_shared_experts") or 0),
        # transformers' DeepseekV3TopkRouter always scores with a sigmoid; V2 reads scoring_func
        "score": "sigmoid" if v3 else c.get("scoring_func", "softmax"),
        "normalize_topk": bool(c.get("norm_topk_prob", False)),
        "scale": float(c.get("routed_scaling_factor", 1.0)),
        "q_lora_rank": int(c.get("q_lora_rank") or 0),
        "kv_lora_rank": int(c["kv_lora_rank"]),
        "qk_nope_head_dim": int(c["qk_nope_head_dim"]),
        "qk_rope_head_dim": int(c["qk_rope_head_dim"]),
        "v_head_dim": int(c["v_head_dim"]),
        "attention_bias": False,  # MLA projections carry no bias in either implementation
    }
    if v3:  # transformers' DeepseekV3TopkRouter: e_score_correction_bias, n_group/topk_group
        a["selection_bias"] = True
        a["routing_groups"] = (int(c["n_group"]), int(c["topk_group"])) if int(c.get("n_group") or 1) > 1 else None
    elif c.get("topk_method", "greedy") != "greedy" and int(c.get("n_group") or 1) > 1:
        a["routing_groups"] = (int(c["n_group"]), int(c["topk_group"]))
    return a


def _qwen3_moe_hf(c: Mapping[str, Any], n: int) -> dict[str, Any]:
    """Qwen3-MoE: MoE every decoder_sparse_step-th layer but the mlp_only_layers; q and k always normalized."""
    step = int(c.get("decoder_sparse_step") or 1)
    only_mlp = set(c.get("mlp_only_layers") or [])
    a = {
        "moe_layers": tuple(i for i in range(n) if i not in only_mlp and (i + 1) % step == 0),
        "experts": int(c.get("num_experts") or c["num_local_experts"]),
        "expert_ffn": int(c["moe_intermediate_size"]),
        "score": "softmax",
        "normalize_topk": bool(c["norm_topk_prob"]),
        "scale": 1.0,
        "head_dim": _head_dim(c),
        "qk_norm": True,  # Qwen3MoeAttention always has q_norm/k_norm
    }
    if c.get("use_sliding_window"):
        a["sliding_window"] = int(c["sliding_window"])
    return a


def _mixtral_hf(c: Mapping[str, Any], n: int) -> dict[str, Any]:
    """Mixtral: every layer MoE, softmax of the top-k logits."""
    return {
        "moe_layers": tuple(range(n)),
        "experts": int(c["num_local_experts"]),
        "expert_ffn": int(c["intermediate_size"]),
        "score": "softmax",
        "normalize_topk": True,  # MixtralSparseMoeBlock renormalizes the top-k softmax weights
        "scale": 1.0,
        "head_dim": _head_dim(c),
        "sliding_window": int(c["sliding_window"]) if c.get("sliding_window") else None,
    }


def _gpt_oss_hf(c: Mapping[str, Any], n: int) -> dict[str, Any]:
    """gpt-oss: a router bias, a clamped GLU with biases, attention sinks, sliding windows on some layers."""
    types = list(c.get("layer_types") or [])
    return {
        "moe_layers": tuple(range(n)),
        "experts": int(c["num_local_experts"]),
        "expert_ffn": int(c["intermediate_size"]),
        "score": "softmax",  # GptOssTopKRouter: top-k of the logits (with bias), softmax over the k
        "normalize_topk": True,
        "scale": 1.0,
        "router_bias": True,
        "head_dim": _head_dim(c),
        "activation": "sigmoid",  # GptOssExperts: gate * sigmoid(1.702 gate) * (up + 1), clamped
        "activation_limit": float(c["swiglu_limit"]),
        "mlp_bias": True,
        "attention_sinks": True,  # GptOssAttention.sinks
        "sliding_window": int(c["sliding_window"]),
        "sliding_layers": tuple(i for i, t in enumerate(types) if t == "sliding_attention"),
    }


def _llama4_text_hf(c: Mapping[str, Any], n: int) -> dict[str, Any]:
    """Llama 4's text model: interleaved MoE layers, a shared expert, chunked attention, NoPE layers."""
    step = int(c.get("interleave_moe_layer_step") or 1)
    moe_layers = c.get("moe_layers")
    no_rope = c.get("no_rope_layers")  # 1 = RoPE, 0 = NoPE, one entry per layer
    interval = int(c.get("no_rope_layer_interval") or 4)
    nope = [i for i, r in enumerate(no_rope) if not r] if no_rope else [i for i in range(n) if (i + 1) % interval == 0]
    return {
        "moe_layers": tuple(moe_layers) if moe_layers is not None else tuple(range(step - 1, n, step)),
        "experts": int(c["num_local_experts"]),
        "expert_ffn": int(c["intermediate_size"]),
        "shared_experts": 1,  # Llama4TextMoe.shared_expert
        "score": "sigmoid",  # Llama4Router: top-k of the logits, sigmoid of those
        "normalize_topk": False,
        "scale": 1.0,
        "head_dim": _head_dim(c),
        "qk_norm": bool(c.get("use_qk_norm", False)),
        "chunk_window": int(c["attention_chunk_size"]) if c.get("attention_chunk_size") else None,
        "nope_layers": tuple(nope),
        "temperature_tuning": bool(c.get("attn_temperature_tuning", False)),
    }


# Each Hugging Face model_type's own reading of its config.json (a family row's hf entry), after the common keys.
_HF_READERS = {
    "deepseek_v2": _deepseek_hf,
    "deepseek_v3": _deepseek_hf,
    "qwen3_moe": _qwen3_moe_hf,
    "mixtral": _mixtral_hf,
    "gpt_oss": _gpt_oss_hf,
    "llama4_text": _llama4_text_hf,
}


def _rope_hf(c: Mapping[str, Any], kind: str) -> dict[str, Any]:
    p = _rope_params(c)
    out: dict[str, Any] = {"rope_theta": float(p["rope_theta"])}
    rope_type = p["rope_type"]
    if rope_type == "yarn":
        mscale, mscale_all = p.get("mscale"), p.get("mscale_all_dim")
        if mscale is not None and mscale_all is not None and mscale != mscale_all:
            raise ValueError(f"yarn mscale {mscale} != mscale_all_dim {mscale_all}: MaxText has one mscale key")
        out["rope"] = {
            "type": "yarn",
            "factor": float(p["factor"]),
            "original_max_position_embeddings": int(p["original_max_position_embeddings"]),
            "beta_fast": float(p.get("beta_fast", 32.0)),
            "beta_slow": float(p.get("beta_slow", 1.0)),
            "truncate": bool(p.get("truncate", True)),
            # transformers' DeepSeek models rotate interleaved pairs (rope_interleave); gpt-oss rotates halves
            "interleave": kind.startswith("deepseek") and bool(c.get("rope_interleave", True)),
            "mscale": None if mscale is None else float(mscale),
            "max_position_embeddings": int(c["max_position_embeddings"]),
        }
    elif rope_type == "llama3":
        out["rope"] = {"type": "llama3"} | {k: float(p[k]) for k in _LLAMA31_SCALING}
    elif rope_type == "default":
        out["rope"] = None
    else:
        out["rope"] = {"type": rope_type}
    return out


def differences(ours: Mapping[str, Any], published: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """key -> (ours, published) for every key whose values differ (a key one side lacks counts as None)."""
    keys = sorted(set(ours) | set(published))
    return {k: (ours.get(k), published.get(k)) for k in keys if ours.get(k) != published.get(k)}


def model_overrides(c: Mapping[str, Any]) -> dict[str, Any]:
    """moekit model keys (`model.<key>`, widths under `model.extra`) that build a model of this config's shape.

    The family's model option supplies the decoder block and routing; `from_hf` and `from_maxtext` then say whether
    the result is the config's model (moekit.checkpoint refuses the import when they differ).
    """
    kind = c["model_type"]
    hidden, heads = int(c["hidden_size"]), int(c["num_attention_heads"])
    a = from_hf(c)
    extra: dict[str, Any] = {
        "base_emb_dim": hidden,
        "base_num_query_heads": heads,
        "base_num_kv_heads": a["kv_heads"],
        "base_moe_mlp_dim": a["expert_ffn"],
        "base_mlp_dim": a.get("dense_ffn", a["expert_ffn"]),
        "vocab_size": a["vocab"],
        "normalization_layer_epsilon": a["norm_eps"],
        "rope_max_timescale": a["rope_theta"],
    }
    if "head_dim" in a:
        extra["head_dim"] = a["head_dim"]
    else:
        mla = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        extra |= {k: a[k] for k in mla}
    rope = a["rope"]
    if rope and rope["type"] == "yarn":
        extra |= {
            "rope_factor": rope["factor"],
            "original_max_position_embeddings": rope["original_max_position_embeddings"],
            "beta_fast": rope["beta_fast"],
            "beta_slow": rope["beta_slow"],
            "max_position_embeddings": rope["max_position_embeddings"],
        }
        if rope["mscale"] is not None:
            extra["mscale"] = rope["mscale"]
    if a["sliding_window"]:
        extra["sliding_window_size"] = a["sliding_window"]
    first_dense = a["moe_layers"][0] if kind.startswith("deepseek") and a["moe_layers"] else 0
    return {
        "num_layers": a["layers"],
        "first_dense_layers": first_dense,
        "num_experts": a["experts"],
        "experts_per_token": a["top_k"],
        "extra": extra,
    }


def hf_model_type(v: Mapping[str, Any]) -> str:
    """The Hugging Face model_type of the model MaxText builds from these keys. Where model types share a decoder
    block (DeepSeek's V2 and V3), the MaxText model name tells them apart (deepseek2-16b is deepseek_v2)."""
    kinds = [kind for kind, block in HF_FAMILIES.items() if block == v["decoder_block"]]
    named = [kind for kind in kinds if str(v["model_name"]).startswith(kind.replace("_v", ""))]
    return (named or kinds)[-1]


def to_hf(v: Mapping[str, Any], published: Mapping[str, Any]) -> dict[str, Any]:
    """A Hugging Face config of the model MaxText builds from keys `v`: the family's `published` config (the keys
    the converter's mappings read) with every architectural value set from `v`. The caller compares from_hf of the
    result with from_maxtext(v): a value this does not carry over is then named, not written wrong."""
    a = from_maxtext(v)
    kind = hf_model_type(v)
    c = dict(published) | {
        "model_type": kind,
        "num_hidden_layers": a["layers"],
        "hidden_size": a["hidden"],
        "num_attention_heads": a["heads"],
        "num_key_value_heads": a["kv_heads"],
        "num_experts_per_tok": a["top_k"],
        "vocab_size": a["vocab"],
        "tie_word_embeddings": a["tied_embeddings"],
        "rms_norm_eps": a["norm_eps"],
    }
    dense = [i for i in range(a["layers"]) if i not in a["moe_layers"]]
    if "dense_ffn" in a:
        c["intermediate_size_mlp" if kind == "llama4_text" else "intermediate_size"] = a["dense_ffn"]
    if kind.startswith("deepseek"):
        c |= {
            "n_routed_experts": a["experts"],
            "moe_intermediate_size": a["expert_ffn"],
            "n_shared_experts": a["shared_experts"],
            "first_k_dense_replace": a["moe_layers"][0] if a["moe_layers"] else a["layers"],
            "moe_layer_freq": 1,
            "routed_scaling_factor": a["scale"],
            "norm_topk_prob": a["normalize_topk"],
            "q_lora_rank": a["q_lora_rank"] or None,
        }
        c |= {k: a[k] for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        groups = a["routing_groups"] or (1, 1)
        c |= {"n_group": groups[0], "topk_group": groups[1]}
        if kind == "deepseek_v2":
            c["scoring_func"] = a["score"]
            c["topk_method"] = "group_limited_greedy" if a["routing_groups"] else "greedy"
    else:
        c |= {"head_dim": a["head_dim"]}
        if kind == "qwen3_moe":
            c |= {"num_experts": a["experts"], "moe_intermediate_size": a["expert_ffn"], "decoder_sparse_step": 1}
            c |= {"mlp_only_layers": dense, "norm_topk_prob": a["normalize_topk"]}
            c |= {"use_sliding_window": bool(a["sliding_window"]), "sliding_window": a["sliding_window"]}
        else:  # mixtral, gpt_oss: the expert width is intermediate_size
            c |= {"num_local_experts": a["experts"], "intermediate_size": a["expert_ffn"]}
            c["sliding_window"] = a["sliding_window"]
            if kind == "gpt_oss":
                c["swiglu_limit"] = a["activation_limit"]
                n = a["layers"]
                c["layer_types"] = [
                    "sliding_attention" if i in a["sliding_layers"] else "full_attention" for i in range(n)
                ]
    return c | _rope_to_hf(a, published)


def _rope_to_hf(a: Mapping[str, Any], published: Mapping[str, Any]) -> dict[str, Any]:
    rope = a["rope"]
    p: dict[str, Any] = {"rope_theta": a["rope_theta"], "rope_type": "default"}
    if rope and rope["type"] == "yarn":
        p |= {k: rope[k] for k in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate")}
        p["rope_type"] = "yarn"
        if rope["mscale"] is not None:
            p |= {"mscale": rope["mscale"], "mscale_all_dim": rope["mscale"]}
    elif rope:
        p |= {k: v for k, v in rope.items() if k != "type"} | {"rope_type": rope["type"]}
    out: dict[str, Any] = (
        {"max_position_embeddings": rope["max_position_embeddings"]}
        if rope and "max_position_embeddings" in rope
        else {}
    )
    if published.get("rope_parameters"):  # transformers >= 5 keeps rope in one mapping
        return out | {"rope_parameters": p}
    theta = p.pop("rope_theta")
    return out | {
        "rope_theta": theta,
        "rope_scaling": None if p["rope_type"] == "default" else p | {"type": p["rope_type"]},
    }
