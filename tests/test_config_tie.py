"""Every full-size model moekit composes is the published model: each architectural value equal, or named.

Ours: the keys MaxText runs with (base.yml < MaxText's model file < moekit's arguments), read by
moekit.checkpoint.model.architecture.from_maxtext. Published: MaxText 0.2.5's copies of the Hugging Face configs
(maxtext/checkpoint_conversion/utils/hf_model_configs.py, HF_MODEL_CONFIGS[model name]: transformers config
objects), and for Llama 4, which MaxText has no copy of, the values of Meta's config.json written below with
their source; both read by from_hf. A difference kept on purpose is a line of docs/adapting.md's "kept
differences" list (model option, key, reason); the test reads that list, and an entry that no longer differs fails.
"""

from __future__ import annotations

import re

import pytest

from conftest import REPO, compose
from moekit.base.maxtext_files import model_values
from moekit.checkpoint.model.architecture import differences, from_hf, from_maxtext
from moekit.plan import resolved_values

FULL_SIZE = [
    "deepseek3_671b",
    "deepseek2_16b",
    "qwen3_30b_a3b",
    "qwen3_235b_a22b",
    "mixtral_8x7b",
    "mixtral_8x22b",
    "gpt_oss_20b",
    "gpt_oss_120b",
    "llama4_scout",
    "llama4_maverick",
]

# Meta's Llama 4 text_config values, each with where it was checked. meta-llama's Hugging Face repositories are gated,
# so the values are read from public copies of them and from the script that wrote them:
#   [convert] transformers' converter that wrote Meta's config.json files (write_model: intermediate_size=8192,
#             intermediate_size_mlp=16384, vocab_size=202048, tie_word_embeddings=False, rope_theta/norm_eps/heads/
#             layers/experts from Meta's params.json; max_context_length: "256K for base, 1M for 128E instruct, 10M for
#             16E instruct"): https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama4/convert_llama4_weights_to_hf.py
#   [scout]   torchprime's scaled-down copy of the base Scout config.json (widths, layers and vocabulary scaled down;
#             it keeps max_position_embeddings 262144, rope factor 16 / low 1 / high 1, rope_theta, rms_norm_eps, silu,
#             attention_bias false, use_qk_norm true, attn_temperature_tuning true, attention_chunk_size 8192,
#             interleave_moe_layer_step 1, 16 experts, top-1, intermediate_size_mlp 16384):
#             https://github.com/AI-Hypercomputer/torchprime/blob/main/torchprime/torch_xla_models/configs/model/llama-4-text-only-dummy.yaml
#   [maverick] TensorRT-LLM's copy of the Maverick (Instruct) text_config, layers "reduced to 2 from 48" and
#             no_rope_layer_interval changed to 2 there (hidden 5120, 40/8 heads, head_dim 128, 8192/16384, 128 experts,
#             top-1, interleave_moe_layer_step 2, use_qk_norm false, rope_scaling null, rope_theta 500000, rms_norm_eps
#             1e-05, vocab 202048, attention_chunk_size 8192, silu, attention_bias false):
#             https://github.com/NVIDIA/TensorRT-LLM/blob/main/tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py
_LLAMA4_COMMON = {
    "model_type": "llama4_text",
    "hidden_size": 5120,  # [maverick]
    "intermediate_size": 8192,  # each routed expert and the shared expert; [convert], [maverick]
    "intermediate_size_mlp": 16384,  # the dense layers' FFN; [convert], [scout], [maverick]
    "num_hidden_layers": 48,  # [maverick] ("reduced to 2 layers from 48")
    "num_attention_heads": 40,  # [maverick]
    "num_key_value_heads": 8,  # [maverick]
    "head_dim": 128,  # [maverick]
    "num_experts_per_tok": 1,  # [scout], [maverick]
    "vocab_size": 202048,  # [convert], [maverick]
    "rms_norm_eps": 1e-05,  # [scout], [maverick]
    "hidden_act": "silu",  # [scout], [maverick]
    "attention_bias": False,  # [scout], [maverick]
    "tie_word_embeddings": False,  # [convert] ("Constant set to False")
    "attention_chunk_size": 8192,  # [scout], [maverick]
    # Every 4th layer NoPE (config.json lists them as no_rope_layers, 1 = RoPE): [convert] takes the interval from
    # Meta's params.json (nope_layer_interval), not seen here; [scout]'s 2 layers are both RoPE, as interval 4 gives.
    # No public copy of the full 48-entry list was found; 4 is also transformers' default.
    "no_rope_layer_interval": 4,
    # [scout] true; not in [maverick]'s copy, which then loads with transformers' default, true.
    "attn_temperature_tuning": True,
    "rope_theta": 500000.0,  # [scout], [maverick]
}
# Published: text_config of https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json (the base
# model; the Instruct release has max_position_embeddings 10485760, [convert]).
LLAMA4_SCOUT = _LLAMA4_COMMON | {
    "num_local_experts": 16,  # [scout]
    "interleave_moe_layer_step": 1,  # [scout]
    "use_qk_norm": True,  # [scout]
    "max_position_embeddings": 262144,  # [scout], [convert] (256K for a base model)
    "rope_scaling": {  # [scout]; original_max_position_embeddings 8192: [convert]'s constant, not in [scout]'s copy
        "rope_type": "llama3",
        "factor": 16.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
}
# Published: text_config of https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E/blob/main/config.json (the
# base model). No public copy of the base config.json was found: the values are [maverick]'s copy of the Instruct
# release, except max_position_embeddings, which [convert] gives as 256K for a base model (the Instruct's 1048576).
LLAMA4_MAVERICK = _LLAMA4_COMMON | {
    "num_local_experts": 128,  # [maverick]
    "interleave_moe_layer_step": 2,  # [maverick]
    "use_qk_norm": False,  # [maverick]
    "max_position_embeddings": 262144,  # [convert]
    "rope_scaling": None,  # [maverick]
}


def published(option: str, model_name: str) -> dict:
    """The published config of a full-size option, as a dict."""
    if option == "llama4_scout":
        return LLAMA4_SCOUT
    if option == "llama4_maverick":
        return LLAMA4_MAVERICK
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    return HF_MODEL_CONFIGS[model_name].to_dict()


KEPT = re.compile(r"^- `(?P<option>\w+)` `(?P<key>\w+)`: (?P<reason>.+)$")


def kept_differences() -> dict[tuple[str, str], str]:
    """(option, key) -> reason, from docs/adapting.md's kept-differences list."""
    text = (REPO / "docs" / "adapting.md").read_text(encoding="utf8")
    block = text.split("<!-- BEGIN kept differences -->")[1].split("<!-- END kept differences -->")[0]
    out = {}
    for line in block.strip().splitlines():
        m = KEPT.match(line)
        assert m, f"docs/adapting.md kept differences: not '- `option` `key`: reason': {line!r}"
        out[(m["option"], m["key"])] = m["reason"]
    return out


def ours_and_published(option: str) -> tuple[dict, dict]:
    cfg = compose("smoke", [f"model={option}"])
    ours = from_maxtext(resolved_values(cfg, *model_values(cfg.model.name)))
    return ours, from_hf(published(option, cfg.model.name))


@pytest.mark.parametrize("option", FULL_SIZE)
def test_full_size_model_is_the_published_one(option):
    ours, pub = ours_and_published(option)
    assert set(ours) == set(pub), "both sides read the same keys"
    kept = {key for (o, key) in kept_differences() if o == option}
    unexplained = {k: d for k, d in differences(ours, pub).items() if k not in kept}
    assert not unexplained, f"{option}: (ours, published) differ, not listed in docs/adapting.md: {unexplained}"


def test_every_kept_difference_still_differs():
    for (option, key), reason in kept_differences().items():
        assert option in FULL_SIZE, option
        ours, pub = ours_and_published(option)
        assert key in differences(ours, pub), f"{option} {key} is listed as kept but equals the published value"
        assert len(reason) > 20, reason


def test_the_tie_reads_what_it_compares():
    """The comparison can fail: a width, the routing and a rope value each change the architecture it reads."""
    ours, pub = ours_and_published("mixtral_8x7b")
    assert not differences(ours, pub)
    cfg = compose("smoke", ["model=mixtral_8x7b", "model.routing.routed_score_func=sigmoid"])
    v = resolved_values(cfg, *model_values(cfg.model.name))
    assert "score" in differences(from_maxtext(v), pub)
    base = resolved_values(compose("smoke", ["model=mixtral_8x7b"]), *model_values("mixtral-8x7b"))
    assert set(differences(from_maxtext(base | {"base_emb_dim": 4095}), pub)) == {"hidden"}
    other_rope = published("mixtral_8x7b", "mixtral-8x7b") | {"rope_parameters": None, "rope_theta": 1e4}
    assert set(differences(ours, from_hf(other_rope))) == {"rope_theta"}
