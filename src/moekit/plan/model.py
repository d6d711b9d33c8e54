"""Model dimensions as MaxText resolves them, parameter counts and training FLOPs (pure).

The dimensions come from the same layers MaxText reads: its base.yml, then the model file
(configs/models/<model_name>.yml), then the translated command-line arguments. The caller reads the two
files from the installed MaxText; nothing here touches the file system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


def maxtext_values(base: Mapping[str, Any], model_file: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """MaxText's precedence: base.yml < model file < command line (override_model_config=true)."""
    return {**base, **model_file, **args}


def dtype_bytes(name: str) -> int:
    """Bytes per element of a MaxText dtype name; ValueError names the known ones."""
    try:
        return DTYPE_BYTES[str(name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Dims:
    """The shape of one MaxText decoder model and one device's share of a step."""

    emb: int
    vocab: int
    layers: int
    dense_layers: int
    mlp: int
    """Dense-layer MLP width."""
    moe_mlp: int
    """Width of one routed (and shared) expert."""
    experts: int
    top_k: int
    shared: int
    activations: int
    """Input projections per MLP (2 for a gated SiLU)."""
    heads: int
    kv_heads: int
    head_dim: int
    mla: bool
    q_lora: int
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_head: int
    tied_embedding: bool
    batch: float
    """Sequences per device per step."""
    seq: int

    @classmethod
    def from_values(cls, v: Mapping[str, Any]) -> Dims:
        """The dimensions from MaxText's resolved keys, widths scaled by global_parameter_scale."""
        scale = float(v.get("global_parameter_scale", 1))
        experts = int(v.get("num_experts", 1))
        layers = int(v["base_num_decoder_layers"])
        moe_mlp = int(v.get("base_moe_mlp_dim", -1))
        # DeepSeek: leading dense layers; Llama 4: every interleave-th layer is MoE (the others dense).
        first_dense = int(v.get("first_num_dense_layers", 0))
        moe_layers = (layers - first_dense) // max(1, int(v.get("interleave_moe_layer_step", 1)))
        return cls(
            emb=int(v["base_emb_dim"] * scale),
            vocab=int(v["vocab_size"]),
            layers=layers,
            dense_layers=layers - moe_layers if experts > 1 else layers,
            mlp=int(v["base_mlp_dim"] * scale),
            moe_mlp=int(moe_mlp * scale) if moe_mlp > 0 else int(v["base_mlp_dim"] * scale),
            experts=experts,
            top_k=int(v.get("num_experts_per_tok", 1)),
            shared=int(v.get("shared_experts", 0)),
            activations=len(v.get("mlp_activations", ["silu", "linear"])),
            heads=int(v["base_num_query_heads"]),
            kv_heads=int(v["base_num_kv_heads"]),
            head_dim=int(v.get("head_dim", 128)),
            mla=v.get("attention_type") == "mla",
            q_lora=int(v.get("q_lora_rank", 0)),
            kv_lora=int(v.get("kv_lora_rank", 0)),
            qk_nope=int(v.get("qk_nope_head_dim", 0)),
            qk_rope=int(v.get("qk_rope_head_dim", 0)),
            v_head=int(v.get("v_head_dim", 0)),
            tied_embedding=bool(v.get("logits_via_embedding", False)),
            batch=float(v["per_device_batch_size"]),
            seq=int(v["max_target_length"]),
        )

    @property
    def moe_layers(self) -> int:
        """Decoder layers with routed experts."""
        return self.layers - self.dense_layers

    @property
    def tokens(self) -> float:
        """Tokens per device per step."""
        return self.batch * self.seq

    # ---- parameters ----
    def attention_params(self) -> int:
        """Attention weights of one layer: query, key, value and output projections (MLA: its low-rank projections
        and their norm scales)."""
        if self.mla:
            qk = self.qk_nope + self.qk_rope
            q = (
                self.emb * self.q_lora + self.q_lora + self.q_lora * self.heads * qk
                if self.q_lora
                else self.emb * self.heads * qk
            )
            kv = (
                self.emb * (self.kv_lora + self.qk_rope)
                + self.kv_lora
                + self.kv_lora * self.heads * (self.qk_nope + self.v_head)
            )
            return q + kv + self.heads * self.v_head * self.emb
        return self.emb * self.head_dim * (self.heads + 2 * self.kv_heads) + self.heads * self.head_dim * self.emb

    def mlp_params(self, width: int) -> int:
        """Weights of one MLP `width` wide: an input projection per activation plus the output projection."""
        return self.emb * width * (self.activations + 1)

    def expert_params(self) -> int:
        """Routed-expert weights of the whole model (the part expert parallelism shards)."""
        return self.moe_layers * self.experts * self.mlp_params(self.moe_mlp)

    def layer_params(self, moe: bool) -> int:
        """One decoder layer without its routed experts (attention, norms, dense or shared MLP, router)."""
        common = self.attention_params() + 2 * self.emb
        if not moe:
            return common + self.mlp_params(self.mlp)
        return common + self.shared * self.mlp_params(self.moe_mlp) + self.emb * self.experts + self.experts

    def other_params(self) -> int:
        """Everything but the routed experts."""
        embed = self.vocab * self.emb * (1 if self.tied_embedding else 2) + self.emb
        return embed + self.dense_layers * self.layer_params(False) + self.moe_layers * self.layer_params(True)

    def total_params(self) -> int:
        """Parameters of the whole model: routed experts plus everything else."""
        return self.expert_params() + self.other_params()

    def active_params(self) -> int:
        """Parameters one token uses (top-k of the routed experts)."""
        return self.other_params() + self.moe_layers * self.top_k * self.mlp_params(self.moe_mlp)

    # ---- FLOPs (MaxText's count: 3x the forward matmuls, causal attention halved) ----
    def attention_flops(self) -> tuple[float, float, float]:
        """Forward FLOPs of one layer's attention per device step: the input projections (q, k, v; MLA's low-rank
        ones), the output projection, and the causal score/value matmuls (halved)."""
        t, s = self.tokens, self.seq
        if self.mla:
            qk = self.qk_nope + self.qk_rope
            q = self.emb * self.q_lora + self.q_lora * self.heads * qk if self.q_lora else self.emb * self.heads * qk
            kv = self.emb * (self.kv_lora + self.qk_rope) + self.kv_lora * self.heads * (self.qk_nope + self.v_head)
            attention = 2 * t * s * self.heads * (qk + self.v_head) / 2
            return 2 * t * (q + kv), 2 * t * self.emb * self.heads * self.v_head, attention
        in_proj = 2 * t * self.emb * (self.heads + 2 * self.kv_heads) * self.head_dim
        return in_proj, 2 * t * self.emb * self.heads * self.head_dim, 4 * t * s * self.heads * self.head_dim / 2

    def train_flops(self) -> float:
        """Training FLOPs per device per step, counted as MaxText's calculate_tflops_training_per_device does."""
        t = self.tokens
        qkv, proj, attention = self.attention_flops()
        ffn = self.dense_layers * 2 * t * self.mlp_params(self.mlp)
        if self.experts > 1:
            per_moe = 2 * t * (self.emb * self.experts + (self.shared + self.top_k) * self.mlp_params(self.moe_mlp))
            ffn += self.moe_layers * per_moe
        unembed = 2 * t * self.emb * self.vocab
        return 3 * (ffn + (qkv + proj) * self.layers + unembed) + 3 * attention * self.layers
