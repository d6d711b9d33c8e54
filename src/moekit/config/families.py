"""The MoE families (model.decoder_block): one row each, what MaxText 0.2.5's decoder does with the MoE keys.

Each fact names the MaxText code it was read from (maxtext/configs/types.py validation, maxtext/layers/moe.py
routing, maxtext/layers/nnx_decoders.py layer construction, maxtext/models/<family>.py). Pure data, read by the
family checks (config/checks/family.py) and by the architecture read from MaxText's keys
(checkpoint/model/architecture.py).
Adding a family (docs/extending.md): its conf/model options, its row here, the schema's choice (schema.DecoderBlock),
its layout experiment and its line in docs/adapting.md; tests/test_families.py ties them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
    layouts: tuple[str, ...]
    """Its conf/experiment files laying a full-size model out on a cluster (each climbs the shared ladder)."""


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
            layouts=("dsv3_baseline", "dsv2_lite_8gpu"),
        ),
        Family(
            decoder_block="qwen3_moe",
            models="qwen3-30b-a3b, qwen3-235b-a22b",
            reads=COMMON | {"norm_topk_prob"},
            te_moe_block="MaxText refuses it: 'te_moe_block=True does not currently support norm_topk_prob=True' "
            "(Qwen3's routing)",
            qk_norm_always=True,
            tiny="qwen3_moe_tiny",
            layouts=("qwen3_235b_64gpu",),
        ),
        Family(
            decoder_block="mixtral",
            models="mixtral-8x7b, mixtral-8x22b",
            reads=COMMON | {"norm_topk_prob"},
            tiny="mixtral_tiny",
            layouts=("mixtral_8x22b_32gpu",),
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
            layouts=("gpt_oss_120b_16gpu",),
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
            layouts=("llama4_maverick_64gpu",),
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
