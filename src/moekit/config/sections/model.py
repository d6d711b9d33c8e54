"""The model and how it computes: decoder family and routing, MoE back end, precision, remat/offload, XLA."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from moekit.config.kinds.families import FAMILIES
from moekit.config.sections.base import Scalar, Section

# The families' decoder blocks, one per row of config/kinds/families.py (pydantic's refusal of another lists them).
DecoderBlock = Literal[tuple(FAMILIES)]  # type: ignore[valid-type]


class Routing(Section):
    """How a token picks its experts, in MaxText's own keys: each one is passed to MaxText as written.

    Every field is required: a model option states its family's routing, so moekit's checks see what MaxText
    will run (a default here would silently replace the MaxText model file's value).
    """

    routed_score_func: Literal["", "softmax", "sigmoid"]
    """Router score: "" = top-k of the logits, then softmax over the k (Mixtral, Qwen3, gpt-oss, Llama 4 applies a
    sigmoid to the top-1 instead); "softmax" = softmax over all experts, then top-k, no renormalization
    (DeepSeek-V2); "sigmoid" = per-expert sigmoid, top-k, renormalized (DeepSeek-V3)."""
    norm_topk_prob: bool
    """Renormalize the top-k weights to sum to 1 (Qwen3). The TE MoE block refuses it."""
    routed_scaling_factor: float
    """Multiplier of the routed experts' weights (DeepSeek decoder only; DeepSeek-V3: 2.5)."""
    routed_bias: bool
    """A learnable per-expert bias on the router logits (DeepSeek-V3's selection bias, gpt-oss's router bias)."""
    routed_bias_update_rate: float = Field(ge=0)
    """Auxiliary-loss-free balancing: per-step update of the selection bias (DeepSeek decoder only; 0 = off)."""
    shared_experts: int = Field(ge=0)
    """Always-active experts beside the routed ones (read by the DeepSeek and Llama 4 decoders only)."""
    n_routing_groups: int
    """Group-limited routing: experts split into this many groups; -1 = off (DeepSeek-V3-style routing only)."""
    topk_routing_group: int
    """Group-limited routing: a token's experts come from its top this-many groups; -1 = off."""
    interleave_moe_layer_step: int = Field(ge=1)
    """Every n-th layer is an MoE layer, the others dense (read by the Llama 4 decoder only; Maverick: 2)."""
    load_balance_loss_weight: float = Field(ge=0)
    """Weight of the auxiliary load-balancing loss (0 = none)."""


class Model(Section):
    """The model: MaxText model file, decoder family, layer and expert counts, routing."""

    name: str
    """MaxText model_name (a file in MaxText's configs/models/)."""
    decoder_block: DecoderBlock
    """MaxText decoder_block: the family's layer code (what moekit's family checks key on)."""
    num_layers: int = Field(ge=1)
    """Decoder layers (MaxText base_num_decoder_layers)."""
    first_dense_layers: int = Field(ge=0)
    """Leading layers with a dense MLP instead of MoE (MaxText first_num_dense_layers)."""
    num_experts: int = Field(ge=1)
    """Routed experts per MoE layer."""
    experts_per_token: int = Field(ge=1)
    """Routed experts each token goes to (top-k)."""
    routing: Routing
    """Router and expert-layout keys of the family (MaxText's names)."""
    extra: dict[str, Scalar] = {}
    """Further MaxText model keys (widths, vocab) overriding the model file."""
    attention: str | None = None
    """MaxText attention kernel (cudnn_flash_te needs TransformerEngine); None = MaxText's choice."""

    @model_validator(mode="after")
    def _check(self) -> Model:
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token={self.experts_per_token} exceeds num_experts={self.num_experts}")
        if self.first_dense_layers >= self.num_layers:
            raise ValueError(f"first_dense_layers={self.first_dense_layers} leaves no MoE layer of {self.num_layers}")
        return self


class Moe(Section):
    """How the routed experts are computed: back end, dispatch, capacity and receive buffers."""

    backend: Literal["te", "te_gmm", "tokamax", "ragged_dot", "dense", "capacity", "megablox"]
    """Routed-expert compute path; see docs/optimizations.md."""
    capacity_factor: float = -1.0
    """Expert capacity as a multiple of the balanced load; <= 0 means dropless."""
    allow_token_dropping: bool = False
    """Must be true to run a token-dropping (capacity_factor > 0) configuration."""
    force: bool = False
    """Run a back end even where it is known to be pathological (megablox on GPU), or a moe=te layout whose memory
    estimate with TE's receive buffers does not fit (plan/launch.py)."""
    dispatch: Literal["ragged_all_to_all", "ring", "nccl_ep"] = "ragged_all_to_all"
    """Expert-parallel dispatch/combine: MaxText's ragged all-to-all, ring of experts, or NCCL EP (moe=te only)."""
    ragged_buffer_factor: float = -1.0
    """Receive buffer per EP rank as a multiple of the balanced load; <= 0 sizes it for the worst case."""
    overflow_check_every: int = Field(20, ge=1)
    """moe=te: steps between MaxText's host checks of NCCL EP receive-buffer overflow; an overflow found stops the run
    (docs/plan.md, "The TE block's receive buffers")."""
    expert_precision: Literal["auto", "bf16"] = "auto"
    """moe=te_gmm: the expert GEMMs' precision; auto follows precision= (fp8: FP8 current scaling per expert), bf16
    keeps them bf16 while precision=fp8 still quantizes the dense GEMMs."""


class Precision(Section):
    """The GEMM precision (option precision=)."""

    name: Literal["fp32", "bf16", "fp8", "mxfp8"]
    """GEMM precision set."""


class Memory(Section):
    """Remat and offload of activations (option memory=)."""

    name: str = "custom"
    """Option name (conf/memory/<name>.yaml); shown as the origin of what it sets."""
    remat_policy: str
    """MaxText remat_policy (full, minimal, save_dot_except_mlp, custom, ...)."""
    tensors: dict[str, Literal["device", "remat", "offload"]] = {}
    """Per-tensor choices for remat_policy=custom (MaxText keys such as moe_mlpwi_0)."""
    env: dict[str, Scalar] = {}
    """Runtime environment the policy needs (pinned-host pool for offloaded activations)."""


class Xla(Section):
    """XLA flags and JAX compiler settings (option xla=)."""

    name: str = "custom"
    """Option name (conf/xla/<name>.yaml); shown as the origin of each flag."""
    flags: dict[str, Scalar] = {}
    """XLA flag name (without --) to value."""
    env: dict[str, Scalar] = {}
    """JAX compiler settings read from the environment (JAX_ENABLE_PGLE)."""
