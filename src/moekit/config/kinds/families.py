"""The MoE families (model.decoder_block): one row each, what MaxText 0.2.5's decoder does with the MoE keys.

Each fact names the MaxText code it was read from (maxtext/configs/types.py validation, maxtext/layers/moe.py
routing, maxtext/layers/nnx_decoders.py layer construction, maxtext/models/<family>.py). Pure data, read by the
family checks (config/checks/family.py), by the schema (its DecoderBlock choice) and by the Hugging Face side
(checkpoint/model/: HF_FAMILIES, the MaxText mapping of each model_type; tests/reference/: the tiny parity references).
Adding a family (docs/extending.md): its published sizes' conf/model options, its row here (its tiny size included:
config/compose.py stores it as a conf/model option), its layout and proxy experiments (the proxy sets its few layers
and experts itself) and its reader in checkpoint/model/architecture.py (_HF_READERS); tests/test_families.py ties
them. docs/adapting.md's family table (scripts/families_docs.py) and the tests' lists of full-size models, published
parameter counts and parity references are read from the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """A full-size conf/model option of the family: the published model it is."""

    option: str
    """The conf/model option (tests/test_config_tie.py compares its architecture with the published config)."""
    total_params: float
    """Total parameters as published (tests/test_families.py: moekit plan's count within 4%)."""
    source: str
    """Where total_params is published."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HfModel:
    """One Hugging Face model_type of the family: how its checkpoints convert, and the tiny reference its logits
    parity runs on."""

    model_type: str
    """transformers' config.model_type (checkpoint/model/architecture.py HF_FAMILIES maps it to this family)."""
    reference_class: str
    """The transformers class the parity test compares logits with (tests/reference/parity.py)."""
    mapping: str = ""
    """MaxText 0.2.5's parameter mapping (the PARAM_MAPPING/HOOK_FNS/HF_SHAPE key) `moekit checkpoint import` and
    `export` convert with; "" = MaxText has none, and no_mapping says why."""
    no_mapping: str = ""
    """Why `moekit checkpoint import` refuses this model_type (MaxText has no mapping for it)."""
    per_expert: bool = False
    """The mapping's HF_SHAPE names each expert's tensors apart (gpt-oss stacks a layer's experts in one tensor):
    checkpoint/model/hf_config.bound_by_tensors bounds the tensor count by it."""
    tiny: str | None = None
    """The parity reference's name (its rows in docs/adapting.md); None = no parity row (parity.py says why)."""
    tiny_config: Mapping[str, Any] | None = None
    """The tiny reference's transformers config (tests/reference/hf_tiny.py builds it with random weights): 2
    layers, small widths, few experts; routing, rope and norms as the published full-size ones."""
    option: str = ""
    """The full-size conf/model option the tiny reference is imported as (its MaxText model name)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tiny:
    """The family's CPU-test size, a conf/model option of its own that no file holds: config/compose.py stores it in
    Hydra's ConfigStore as `model=<Family.tiny>` (a full-size option cut to few layers, experts and small widths)."""

    of: str
    """The full-size conf/model option it cuts: its routing, norms and attention pattern carry over."""
    keys: Mapping[str, Any]
    """The model keys it sets on that option (num_layers, num_experts, extra's widths)."""
    says: str
    """What it is, in words (the comment a file of it would open with)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """A full-size model of the family laid out on a cluster, and its one-GPU proxy: a line of docs/adapting.md's
    family table (scripts/families_docs.py writes it from these and the composed experiments)."""

    experiment: str
    """The conf/experiment laying it out on a cluster (it climbs the shared ladder: tests/test_families.py)."""
    proxy: str
    """The conf/experiment of its per-GPU share on one H200: full layer widths, the experts one GPU holds."""
    model: str
    """The published model's name, as the guide names it."""
    options: tuple[str, ...]
    """The full-size conf/model options this layout runs (each passes both validators on it)."""
    routing: str
    """Its routing in words, for the guide."""
    tiny: str
    """The family's tiny conf/model option closest to it (the tiny or a reduced one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """What MaxText's decoder for one MoE family reads, accepts and refuses."""

    decoder_block: str
    """MaxText decoder_block."""
    models: str
    """The MaxText model files of this family that moekit has options for."""
    reads: frozenset[str]
    """Routing keys whose non-default value this decoder reads; a non-default value of any other is ignored."""
    layer_cycle: int = 1
    """inhomogeneous_layer_cycle_interval of the family's model files: the scanned decoder builds
    num_layers / cycle blocks (nnx_decoders.py), so num_layers must be a multiple of it."""
    max_top_k: int | None = None
    """The most experts per token MaxText's decoder accepts (types.py)."""
    te_moe_block: str | None = None
    """Why the TE MoE block cannot run this family (MaxText's refusal in types.py, or what it would change);
    None = it can."""
    dropless_only: tuple[str, str] | None = None
    """(where, MaxText's refusal) when MaxText refuses token dropping for this family: "always" (capacity_factor >= 0),
    or "dense_matmul" (capacity_factor != -1 on the sparse_matmul=false paths: moe=dense, moe=capacity)."""
    attention_sinks: bool = False
    """The family's attention uses learned sinks: on GPU only attention=cudnn_flash_te or dot_product run them
    (attention_op.validate_gpu_flash_attention raises for the other kernels, at trace time)."""
    leading_dense: bool = False
    """The decoder builds first_num_dense_layers dense layers before the MoE ones (model.first_dense_layers); other
    decoders ignore that key."""
    dense_layers: str = ""
    """Where this family's dense layers come from instead, for the message refusing model.first_dense_layers."""
    interleaved_moe: bool = False
    """Every interleave_moe_layer_step-th layer is MoE, the others dense (llama4.py determine_is_moe_layer)."""
    has_shared_experts: bool = False
    """The decoder builds shared_experts always-on experts beside the routed ones; other decoders ignore the key."""
    routing_weights: Literal["deepseek_scaled", "llama4_sigmoid_top1", "softmax"] = "softmax"
    """How the chosen experts' weights are computed (moe.py get_topk): "deepseek_scaled" = deepseek_scale_weights
    (routed_score_func's weights, renormalized when sigmoid, times routed_scaling_factor); "llama4_sigmoid_top1" = the
    top logit through a sigmoid, nothing renormalized; "softmax" = softmax over the top-k logits."""
    group_routing: bool = False
    """Group-limited routing (n_routing_groups/topk_routing_group) runs for this decoder, for the model names in
    GROUP_ROUTING_MODELS (moe.py get_topk deepseek_routing)."""
    selection_bias: bool = False
    """routed_bias is a bias for choosing experts only (loss-free balancing); other decoders add it to the logits the
    weights come from."""
    activation_limit: bool = False
    """The expert MLP clamps its GLU at mlp_activations_limit (gpt-oss's clamped GLU); other decoders ignore it."""
    qk_norm_always: bool = False
    """The attention always normalizes q and k (Qwen3's q_norm/k_norm), whatever use_qk_norm says."""
    sliding_every_other_layer: bool = False
    """sliding_window_size applies to every other layer from the first (gpt_oss.py GPT_OSS_ATTENTION_PATTERN)."""
    chunked_attention: bool = False
    """The decoder reads chunk_attn_window_size: attention within chunks of that many tokens (llama4.py)."""
    nope_layers: bool = False
    """Every nope_layer_interval-th layer skips RoPE (llama4.py); other decoders ignore the key."""
    temperature_tuning: bool = False
    """The decoder reads temperature_tuning: attention temperature scaled with position (llama4.py)."""
    tiny: str
    """Its conf/model option small enough to train on CPU (tests/test_families.py trains each)."""
    tiny_size: Tiny
    """That option's keys: the row holds them, no conf/model file."""
    layouts: tuple[Layout, ...]
    """Its layouts of full-size models on a cluster, each with its one-GPU proxy (docs/adapting.md's table)."""
    reduced: tuple[str, ...] = ()
    """Its other conf/model options that are no published model: deepseek3_proxy (kept as an option: recorded tuning
    results name it) and a further tiny one (deepseek3_tiny, the smoke model's). A proxy experiment sets its few
    layers and experts itself on a full-size option, so a new family has none."""
    full_size: tuple[Published, ...]
    """Its conf/model options of published models; with tiny and reduced, every option of the family."""
    hf: tuple[HfModel, ...]
    """Its Hugging Face model types (checkpoint import, logits parity)."""


# The tiny parity references' transformers configs (HfModel.tiny_config): 2 layers, small widths, few experts.
_TINY_COMMON = {"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 256, "tie_word_embeddings": False}
_TINY_DEEPSEEK3 = _TINY_COMMON | {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "intermediate_size": 96,
    "moe_intermediate_size": 32,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
    "num_key_value_heads": 4,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 163840,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}
_TINY_DEEPSEEK2 = {k: v for k, v in _TINY_DEEPSEEK3.items() if k not in ("q_lora_rank", "n_group", "topk_group")} | {
    "model_type": "deepseek_v2",
    "q_lora_rank": None,
    "n_shared_experts": 2,
    "scoring_func": "softmax",
    "topk_method": "greedy",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
    "rope_parameters": _TINY_DEEPSEEK3["rope_parameters"] | {"mscale": 0.707, "mscale_all_dim": 0.707},
}
_TINY_QWEN3_MOE = _TINY_COMMON | {
    "model_type": "qwen3_moe",
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 96,
    "moe_intermediate_size": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
}
_TINY_MIXTRAL = _TINY_COMMON | {
    "model_type": "mixtral",
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 32,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "rms_norm_eps": 1e-5,
    "sliding_window": None,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
}
_TINY_GPT_OSS = _TINY_COMMON | {
    "model_type": "gpt_oss",
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 32,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention"],
    "rms_norm_eps": 1e-5,
    "swiglu_limit": 7.0,
    "attention_bias": True,
    "max_position_embeddings": 131072,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 150000.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
    },
}

# Keys every decoder reads through the shared router (moe.py GateLogit and get_topk).
COMMON = frozenset({"routed_score_func", "routed_bias", "load_balance_loss_weight"})

FAMILIES: dict[str, Family] = {
    f.decoder_block: f
    for f in (
        Family(
            decoder_block="deepseek",
            models="deepseek3-671b, deepseek3-tiny, deepseek2-16b",
            # deepseek_scale_weights scales by routed_scaling_factor and skips norm_topk_prob; the DeepSeek decoder is
            # the only one with first_num_dense_layers and loss-free bias updates (routed_bias_update_rate).
            reads=COMMON
            | {
                "routed_scaling_factor",
                "routed_bias_update_rate",
                "shared_experts",
                "n_routing_groups",
                "topk_routing_group",
            },
            leading_dense=True,
            has_shared_experts=True,
            routing_weights="deepseek_scaled",
            group_routing=True,
            selection_bias=True,
            tiny="deepseek2_tiny",
            tiny_size=Tiny(
                of="deepseek2_16b",
                says=(
                    "Tiny DeepSeek-V2-Lite (1 dense + 2 MoE layers, 8 experts top-2, 2 shared, MLA, softmax routing): "
                    "CPU test size."
                ),
                keys={"num_layers": 3, "num_experts": 8, "experts_per_token": 2,
                      "extra": {
                          "base_emb_dim": 64, "base_mlp_dim": 64, "base_moe_mlp_dim": 64, "base_num_query_heads": 4,
                          "base_num_kv_heads": 4, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                          "v_head_dim": 16, "vocab_size": 1024,
                      }},
            ),
            layouts=(
                Layout(experiment="dsv3_baseline", proxy="dsv3_proxy_h200", model="DeepSeek-V3",
                       options=("deepseek3_671b",), routing="sigmoid, selection bias, top-8 x 2.5, 1 shared",
                       tiny="deepseek3_tiny"),
                Layout(experiment="dsv2_lite_8gpu", proxy="dsv2_lite_proxy_h200", model="DeepSeek-V2-Lite",
                       options=("deepseek2_16b",), routing="softmax over all experts, top-6 unnormalized, 2 shared",
                       tiny="deepseek2_tiny"),
            ),
            reduced=("deepseek3_tiny", "deepseek3_proxy"),
            full_size=(
                Published(option="deepseek3_671b", total_params=671e9, source="DeepSeek-V3 technical report "
                          "(arXiv 2412.19437): 671B total, 37B active"),
                Published(option="deepseek2_16b", total_params=15.7e9, source="DeepSeek-V2-Lite model card: "
                          "15.7B total, 2.4B active"),
            ),
            hf=(
                HfModel(model_type="deepseek_v3", reference_class="DeepseekV3ForCausalLM", mapping="deepseek3-671b",
                        per_expert=True, tiny="deepseek3", tiny_config=_TINY_DEEPSEEK3, option="deepseek3_671b"),
                HfModel(model_type="deepseek_v2", reference_class="DeepseekV2ForCausalLM", mapping="deepseek2-16b",
                        per_expert=True, tiny="deepseek2", tiny_config=_TINY_DEEPSEEK2, option="deepseek2_16b"),
            ),
        ),
        Family(
            decoder_block="qwen3_moe",
            models="qwen3-30b-a3b, qwen3-235b-a22b",
            reads=COMMON | {"norm_topk_prob"},
            te_moe_block="MaxText refuses it: 'te_moe_block=True does not currently support norm_topk_prob=True' "
            "(Qwen3's routing)",
            qk_norm_always=True,
            tiny="qwen3_moe_tiny",
            tiny_size=Tiny(
                of="qwen3_30b_a3b",
                says="Tiny Qwen3-MoE (2 layers, 8 experts top-2, Qwen3 routing and QK-norm): CPU test size.",
                keys={"num_layers": 2, "num_experts": 8, "experts_per_token": 2,
                      "extra": {
                          "base_emb_dim": 64, "base_mlp_dim": 64, "base_moe_mlp_dim": 64, "base_num_query_heads": 4,
                          "base_num_kv_heads": 2, "head_dim": 16, "vocab_size": 1024,
                      }},
            ),
            layouts=(
                Layout(experiment="qwen3_235b_64gpu", proxy="qwen3_235b_proxy_h200", model="Qwen3-MoE",
                       options=("qwen3_30b_a3b", "qwen3_235b_a22b"),
                       routing="softmax of the top-8 logits, `norm_topk_prob`", tiny="qwen3_moe_tiny"),
            ),
            full_size=(
                Published(option="qwen3_30b_a3b", total_params=30.5e9, source="Qwen3-30B-A3B model card: 30.5B total"),
                Published(option="qwen3_235b_a22b", total_params=235e9, source="Qwen3 technical report: 235B total, "
                          "22B active"),
            ),
            hf=(
                HfModel(model_type="qwen3_moe", reference_class="Qwen3MoeForCausalLM", mapping="qwen3-30b-a3b",
                        per_expert=True, tiny="qwen3_moe", tiny_config=_TINY_QWEN3_MOE, option="qwen3_30b_a3b"),
            ),
        ),
        Family(
            decoder_block="mixtral",
            models="mixtral-8x7b, mixtral-8x22b",
            reads=COMMON | {"norm_topk_prob"},
            tiny="mixtral_tiny",
            tiny_size=Tiny(
                of="mixtral_8x7b",
                says="Tiny Mixtral (2 layers, 4 experts top-2, Mixtral routing): CPU test size.",
                keys={"num_layers": 2, "num_experts": 4,
                      "extra": {
                          "base_emb_dim": 64, "base_mlp_dim": 64, "base_moe_mlp_dim": 64, "base_num_query_heads": 4,
                          "base_num_kv_heads": 2, "head_dim": 16, "vocab_size": 1024,
                      }},
            ),
            layouts=(
                Layout(experiment="mixtral_8x22b_32gpu", proxy="mixtral_8x22b_proxy_h200", model="Mixtral",
                       options=("mixtral_8x7b", "mixtral_8x22b"), routing="softmax of the top-2 logits",
                       tiny="mixtral_tiny"),
            ),
            full_size=(
                Published(option="mixtral_8x7b", total_params=46.7e9, source="Mixtral of Experts (arXiv 2401.04088): "
                          "47B total"),
                Published(option="mixtral_8x22b", total_params=141e9, source="Mistral AI, Mixtral 8x22B "
                          "announcement: 141B total, 39B active"),
            ),
            hf=(
                HfModel(model_type="mixtral", reference_class="MixtralForCausalLM", mapping="mixtral-8x7b",
                        per_expert=True, tiny="mixtral", tiny_config=_TINY_MIXTRAL, option="mixtral_8x7b"),
            ),
        ),
        Family(
            decoder_block="gpt_oss",
            models="gpt-oss-20b, gpt-oss-120b",
            reads=COMMON | {"norm_topk_prob"},
            layer_cycle=2,
            dropless_only=("dense_matmul", "GPT-OSS MoE only supports dropless (capacity_factor=-1) with dense matmul"),
            attention_sinks=True,
            # MaxText accepts it, but hands TE only the activation's name ("sigmoid") and the router bias as TE's
            # selection-only expert_bias (moe.py _te_moe_block); its own path computes gpt-oss's clamped GLU.
            te_moe_block="the TE MoE block would train another model: MaxText passes TE the activation name only, "
            "not gpt-oss's clamped GLU (x*sigmoid(1.702x)*(up+1), limit 7), and the router bias as a selection-only "
            "bias",
            activation_limit=True,
            sliding_every_other_layer=True,
            tiny="gpt_oss_tiny",
            tiny_size=Tiny(
                of="gpt_oss_20b",
                says=(
                    "Tiny gpt-oss (2 layers: one sliding-window, one full attention with sinks; 8 experts top-2): CPU "
                    "test size."
                ),
                keys={"num_layers": 2, "num_experts": 8, "experts_per_token": 2,
                      "extra": {
                          "base_emb_dim": 64, "base_mlp_dim": 64, "base_moe_mlp_dim": 64, "base_num_query_heads": 4,
                          "base_num_kv_heads": 2, "head_dim": 16, "sliding_window_size": 32, "vocab_size": 1024,
                      }},
            ),
            layouts=(
                Layout(experiment="gpt_oss_120b_16gpu", proxy="gpt_oss_120b_proxy_h200", model="gpt-oss",
                       options=("gpt_oss_20b", "gpt_oss_120b"),
                       routing="softmax of the top-4 logits, router bias; attention sinks", tiny="gpt_oss_tiny"),
            ),
            full_size=(
                Published(option="gpt_oss_20b", total_params=21e9, source="OpenAI gpt-oss model card: 21B total"),
                Published(option="gpt_oss_120b", total_params=117e9, source="OpenAI gpt-oss model card: 117B total, "
                          "5.1B active"),
            ),
            hf=(
                HfModel(model_type="gpt_oss", reference_class="GptOssForCausalLM", mapping="gpt-oss-20b",
                        tiny="gpt_oss", tiny_config=_TINY_GPT_OSS, option="gpt_oss_20b"),
            ),
        ),
        Family(
            decoder_block="llama4",
            models="llama4-17b-16e (Scout), llama4-17b-128e (Maverick)",
            reads=COMMON | {"shared_experts", "interleave_moe_layer_step"},
            layer_cycle=4,
            max_top_k=1,
            te_moe_block="MaxText refuses it: 'te_moe_block=True does not currently support Llama4 routing semantics'",
            dropless_only=("always", "Llama4 decoder has not been tested with capacity_factor >= 0"),
            dense_layers="Llama 4 interleaves dense and MoE layers: model.routing.interleave_moe_layer_step",
            interleaved_moe=True,
            has_shared_experts=True,
            routing_weights="llama4_sigmoid_top1",
            chunked_attention=True,
            nope_layers=True,
            temperature_tuning=True,
            tiny="llama4_tiny",
            tiny_size=Tiny(
                of="llama4_maverick",
                says=(
                    "Tiny Llama 4 (one 4-layer cycle: dense/MoE alternating, 4 experts top-1 + 1 shared): CPU test "
                    "size."
                ),
                keys={"num_layers": 4, "num_experts": 4,
                      "extra": {
                          "base_emb_dim": 64, "base_mlp_dim": 64, "base_moe_mlp_dim": 64, "base_num_query_heads": 4,
                          "base_num_kv_heads": 2, "head_dim": 16, "vocab_size": 1024,
                      }},
            ),
            layouts=(
                Layout(experiment="llama4_maverick_64gpu", proxy="llama4_maverick_proxy_h200", model="Llama 4",
                       options=("llama4_scout", "llama4_maverick"),
                       routing="top-1 logit through a sigmoid, 1 shared; Maverick: every 2nd layer MoE",
                       tiny="llama4_tiny"),
            ),
            full_size=(
                Published(option="llama4_scout", total_params=109e9, source="Meta Llama 4 model card: 109B total"),
                Published(option="llama4_maverick", total_params=400e9, source="Meta Llama 4 model card: 400B total, "
                          "17B active"),
            ),
            # No parity row: MaxText 0.2.5 cannot import a Llama 4 checkpoint.
            hf=(
                HfModel(
                    model_type="llama4_text",
                    reference_class="Llama4ForCausalLM",
                    no_mapping="MaxText 0.2.5 has no to_maxtext mapping for Llama 4 (PARAM_MAPPING has none); its "
                    "standalone script checkpoint_conversion/standalone_scripts/llama4_ckpt_unscanned.py reads Meta's "
                    "original .pth checkpoint, not Hugging Face safetensors, and writes unscanned layers only",
                ),
            ),
        ),
    )
}

# The routing fields' MaxText defaults (base.yml): a value other than these is a choice the decoder must read.
ROUTING_DEFAULTS = {
    "routed_score_func": "",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
    "routed_bias": False,
    "routed_bias_update_rate": 0.0,
    "shared_experts": 0,
    "n_routing_groups": -1,
    "topk_routing_group": -1,
    "interleave_moe_layer_step": 1,
    "load_balance_loss_weight": 0.0,
}

# moe.py get_topk runs group-limited routing (deepseek_routing) only for these model names; the TE MoE block passes
# n_routing_groups/topk_routing_group to TE for every model.
GROUP_ROUTING_MODELS = ("deepseek3", "deepseek4", "kimi-k2")
