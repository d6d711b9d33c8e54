"""Which bucket of the step-time breakdown a traced operation belongs to: one ordered rule table (pure).

A traced operation is seen through what the trace and XLA's HLO dump say about it (`Op`): the kernel or thunk name,
the HLO instruction and its opcode, fused opcodes and custom-call target, JAX's op_name (with MaxText's named
scopes) and the Python functions that built it. The first rule that claims an operation decides its bucket;
what no rule claims is "other" compute. docs/profiling.md lists the rules with their reasons.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# (bucket, label, kind): display order; kind decides how overlapping time is shared (compute wins over the rest).
BUCKETS: tuple[tuple[str, str, str], ...] = (
    ("grouped_gemm", "routed-expert grouped GEMM", "compute"),
    ("mlp_act", "MLP activations and biases", "compute"),
    ("dispatch", "dispatch (router, sort/permute, gather)", "compute"),
    ("combine", "combine (unpermute, weighted sum, scatter)", "compute"),
    ("attention", "attention (core, masks, sinks, rotary)", "compute"),
    ("other_gemm", "other GEMMs", "compute"),
    ("norm", "normalization (RMSNorm)", "compute"),
    ("embed_loss", "embedding lookup and loss", "compute"),
    ("optimizer", "optimizer update and norms", "compute"),
    ("all_to_all", "all-to-all / ragged all-to-all", "collective"),
    ("all_gather", "all-gather", "collective"),
    ("reduce_scatter", "reduce-scatter", "collective"),
    ("all_reduce", "all-reduce", "collective"),
    ("collective_permute", "collective-permute / send-recv", "collective"),
    ("nccl_ep", "NCCL EP dispatch/combine", "collective"),
    ("offload", "host offload transfers", "transfer"),
    ("host_copy", "runtime host copies", "transfer"),
    ("other", "other compute", "compute"),
)
LABELS = {b: label for b, label, _ in BUCKETS}
KIND = {b: kind for b, _, kind in BUCKETS}
CONTAINERS = frozenset({"while", "conditional", "call"})  # control flow: its body's operations are traced themselves


@dataclass(frozen=True, slots=True)
class Op:
    """One traced operation, as the trace event and (when XLA dumped it) the HLO instruction describe it."""

    kernel: str = ""
    """Trace event name: the GPU kernel (ncclDevKernel_AllGather_RING_LL, nvjet_...) or the CPU thunk."""
    hlo_op: str = ""
    """HLO instruction the event ran for (event stat hlo_op): fusion.12, all-gather-start.3."""
    opcode: str = ""
    fused: frozenset[str] = frozenset()
    target: str = ""
    op_name: str = ""
    frames: tuple[str, ...] = ()
    details: str = ""
    """Memcpy details of a copy event (kind_src:pinned kind_dst:device size:...)."""

    @property
    def base(self) -> str:
        """The instruction name without its numeric suffixes (all-gather-start.8.g0 -> all-gather-start)."""
        return self.hlo_op.split(".", 1)[0]

    @property
    def hlo_kind(self) -> str:
        """The operation the instruction performs: its opcode (or, undumped, its name), async wrappers unwrapped."""
        code = self.opcode or self.base
        if code.startswith("async-") and self.fused:
            code = next((c for c in sorted(self.fused) if c in _COLLECTIVE_OPCODES), code)
        return re.sub(r"-(start|done|update)$", "", code)


_COLLECTIVE_OPCODES = frozenset(
    {"all-to-all", "ragged-all-to-all", "all-gather", "reduce-scatter", "all-reduce", "collective-permute"}
    | {f"{c}-start" for c in ("all-gather", "all-reduce", "collective-permute")}
)


def _kernel(*patterns: str) -> Callable[[Op], bool]:
    rx = re.compile("|".join(patterns), re.IGNORECASE)
    return lambda op: bool(rx.search(op.kernel))


def _hlo(*kinds: str) -> Callable[[Op], bool]:
    return lambda op: op.hlo_kind in kinds


def _either(*tests: Callable[[Op], bool]) -> Callable[[Op], bool]:
    return lambda op: any(t(op) for t in tests)


def _target(*prefixes: str) -> Callable[[Op], bool]:
    return lambda op: (op.target or op.base).startswith(prefixes)


def _frames(*functions: str) -> Callable[[Op], str | None]:
    """The innermost of an op's Python frames that is one of `functions` (exact names or Class. prefixes)."""

    def find(op: Op) -> str | None:
        for frame in op.frames:
            if any(frame == f or (f.endswith(".") and frame.startswith(f)) for f in functions):
                return frame
        return None

    return find


# MaxText 0.2.5 functions (layers/moe.py, layers/attention_op.py) -> bucket, looked up innermost frame first, so an
# op made by a shared helper (_sort_activations) counts where it was called from (permute or unpermute).
MAXTEXT_FRAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "grouped_gemm",
        (
            "RoutedMoE.sparse_matmul.<locals>.gmm",
            "RoutedMoE.sparse_matmul.<locals>.jax_ragged_dot_gmm",
            "RoutedMoE.sparse_matmul.<locals>.get_gmm_for_local_experts",
            "RoutedMoE.fused_moe_matmul",
        ),
    ),
    (
        "dispatch",
        (
            "RoutedMoE.permute",
            "RoutedMoE.local_permute",
            "RoutedMoE.sparse_matmul.<locals>.route",
            "RoutedMoE.sparse_matmul.<locals>.ra2a_and_route",
            "RoutedMoE.sparse_matmul.<locals>.roe_ag_and_route",
            "RoutedMoE.sparse_matmul.<locals>.quantize_and_all_gather_tokens",
            "RoutedMoE.get_all_to_all_params",
            "RoutedMoE.get_topk",
            "RoutedMoE.deepseek_routing",
            "RoutedMoE.generate_masks",
            "RoutedMoE.generate_masks_subgroup",
            "RoutedMoE.load_balance_loss",
            "GateLogit.__call__",
        ),
    ),
    ("combine", ("RoutedMoE.unpermute", "RoutedMoE.sparse_matmul.<locals>.unsort_output_and_ra2a")),
    # The routed experts' element-wise work between the GEMMs: bias rows (gathered per row, their gradient a
    # scatter-add), the activation (SwiGLU, clamped under mlp_activations_limit), the masks of padding rows.
    (
        "mlp_act",
        (
            "RoutedMoE.apply_ffn_activation",
            "RoutedMoE.transform_bias",
            "RoutedMoE.sparse_matmul.<locals>.gmm_up",
            "RoutedMoE.sparse_matmul.<locals>._moe_body",
            "MlpBlock.__call__",
        ),
    ),
    # The core (QK, masks: causal, sliding window, chunked; sinks; softmax; PV) and what Attention itself does
    # around it (rotary embedding of q and k); the projections run in DenseGeneral (below).
    ("attention", ("AttentionOp.", "Attention.", "MLA.")),
    # Every projection (q/k/v/out, a dense MLP's wi/wo, the output head), with the transposes of its operands.
    ("other_gemm", ("DenseGeneral.__call__",)),
    ("norm", ("RMSNorm.", "GlobalRMSNorm.", "Qwen3NextRMSNormGated.")),
    (
        "embed_loss",
        (
            "Embed.__call__",
            "cross_entropy_with_logits",
            "_cross_entropy_with_logits_fwd",
            "_cross_entropy_with_logits_bwd",
        ),
    ),
)
_FRAME_OF = {f: bucket for bucket, fs in MAXTEXT_FRAMES for f in fs}
_ANY_MAXTEXT_FRAME = _frames(*_FRAME_OF)


def _frame_bucket(op: Op) -> str | None:
    frame = _ANY_MAXTEXT_FRAME(op)
    if frame is None:
        return None
    return _FRAME_OF.get(frame) or next(b for f, b in _FRAME_OF.items() if f.endswith(".") and frame.startswith(f))


# The optimizer step around optax (flax's nnx.Optimizer / MaxText's TrainState) and MaxText's gradient clipping and
# norm metrics: any of these among the frames, since none of them calls model code.
OPTIMIZER_FRAMES = (
    "TrainStateNNX.apply_gradients",
    "TrainState.apply_gradients",
    "Optimizer.update",
    "apply_updates",
    "chain.<locals>.update_fn",
    "apply_gradient_clipping",
    "clip_by_global_norm.",
    "l2norm_pytree",
)
_OPTIMIZER = _frames(*OPTIMIZER_FRAMES)


def _scope(*names: str) -> Callable[[Op], bool]:
    """A MaxText named scope in the op_name path (moe.py's dense path: dispatch, wi_0, wi_1, wo, combine)."""
    rx = re.compile(r"(^|/)(" + "|".join(re.escape(n) for n in names) + r")(/|$)")
    return lambda op: bool(rx.search(op.op_name))


_MOVES = frozenset({"copy-start", "copy-done"})
_HOST_COPY = _kernel(r"^Memcpy(H2D|D2H)", r"memcpy.*(HtoD|DtoH)")
_GEMM_OPCODES = frozenset({"dot", "convolution", "ragged-dot"})
_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cudnn$convForward", "cublas-gemm", "cublas-lt-matmul")


def _is_gemm(op: Op) -> bool:
    return (
        op.hlo_kind in _GEMM_OPCODES
        or bool(op.fused & _GEMM_OPCODES)
        or (op.target or op.base).startswith(_GEMM_TARGETS)
        or bool(_GEMM_KERNEL.search(op.kernel))
        or op.base.startswith(("gemm_fusion", "triton_gemm", "cublas"))
    )


# cuBLAS / cuBLASLt (nvjet_* on Hopper and later, sm90_xmma_*), CUTLASS, and XLA's Triton GEMM fusions.
_GEMM_KERNEL = re.compile(r"nvjet|xmma_gemm|s\d+gemm|gemm_|_gemm|cutlass|cublas", re.IGNORECASE)


def is_gemm_kernel(name: str) -> bool:
    """A kernel name that is a GEMM's (cuBLAS, CUTLASS, XLA's Triton GEMM fusions)."""
    return bool(_GEMM_KERNEL.search(name))


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the table: its id, the bucket it assigns, why, and which operations it claims."""

    id: str
    bucket: str
    why: str
    claims: Callable[[Op], bool]


RULES: tuple[Rule, ...] = (
    # Collectives first: an all-to-all inside MaxText's permute is communication, whatever code issued it.
    Rule(
        "nccl-ep",
        "nccl_ep",
        "TransformerEngine's NCCL EP dispatch/combine custom calls (te_ep_*_ffi) and NCCL EP device kernels",
        _either(_target("te_ep_"), _kernel(r"nccl_?ep", r"ncclEp")),
    ),
    Rule(
        "all-to-all",
        "all_to_all",
        "HLO all-to-all and ragged-all-to-all (NCCL runs them as SendRecv kernels under that instruction)",
        _either(_hlo("all-to-all", "ragged-all-to-all"), _kernel(r"AllToAll")),
    ),
    Rule(
        "all-gather",
        "all_gather",
        "HLO all-gather(-start) or an NCCL AllGather kernel",
        _either(_hlo("all-gather"), _kernel(r"ncclDevKernel_AllGather", r"ncclKernel_AllGather")),
    ),
    Rule(
        "reduce-scatter",
        "reduce_scatter",
        "HLO reduce-scatter or an NCCL ReduceScatter kernel",
        _either(_hlo("reduce-scatter"), _kernel(r"ncclDevKernel_ReduceScatter", r"ncclKernel_ReduceScatter")),
    ),
    Rule(
        "all-reduce",
        "all_reduce",
        "HLO all-reduce(-start) or an NCCL AllReduce kernel",
        _either(_hlo("all-reduce"), _kernel(r"ncclDevKernel_AllReduce", r"ncclKernel_AllReduce")),
    ),
    Rule(
        "collective-permute",
        "collective_permute",
        "HLO collective-permute / send / recv, or an NCCL SendRecv kernel no all-to-all claimed",
        _either(_hlo("collective-permute", "send", "recv"), _kernel(r"ncclDevKernel_SendRecv", r"ncclKernel_SendRecv")),
    ),
    Rule(
        "host-offload",
        "offload",
        "host<->device copies inside the program: CUPTI MemcpyH2D/D2H events of an HLO instruction, XLA's "
        "copy-start/copy-done (memory-space moves)",
        _either(lambda op: bool(op.hlo_op) and _HOST_COPY(op), lambda op: (op.opcode or op.base) in _MOVES),
    ),
    Rule(
        "runtime-copies",
        "host_copy",
        "host<->device copies outside any program (the runtime reading the loss, placing inputs)",
        lambda op: not op.hlo_op and _HOST_COPY(op),
    ),
    # moe=te_gmm: moekit's hook names TE's grouped GEMM and the row layout around it (te_gmm/grouped.py), so they
    # are told apart although both sit inside MaxText's gmm frame.
    Rule(
        "te-gmm-scope",
        "grouped_gemm",
        "named scope moekit_grouped_gemm: TE's grouped GEMM as moe=te_gmm calls it (quantization included)",
        _scope("moekit_grouped_gemm"),
    ),
    Rule(
        "te-gmm-layout-scope",
        "dispatch",
        "named scope moekit_ragged_dot outside moekit_grouped_gemm: moe=te_gmm's row layout (padding rows zeroed, "
        "FP8 alignment) around the grouped GEMM",
        _scope("moekit_ragged_dot"),
    ),
    Rule(
        "te-gmm-bias-scope",
        "mlp_act",
        "named scope moekit_expert_bias: moe=te_gmm's expert-bias rows and their gradient (a one-hot matmul)",
        _scope("moekit_expert_bias"),
    ),
    # MaxText's own code: the Python function that built the op (HLO dump stack frames), innermost first.
    Rule(
        "maxtext-frames",
        "(by frame)",
        "the innermost MaxText function among the op's source frames: "
        + "; ".join(f"{b}: {', '.join(fs)}" for b, fs in MAXTEXT_FRAMES),
        lambda op: _frame_bucket(op) is not None,
    ),
    Rule(
        "optimizer-frames",
        "optimizer",
        "the optimizer step among the op's frames: " + ", ".join(OPTIMIZER_FRAMES),
        lambda op: _OPTIMIZER(op) is not None,
    ),
    # MaxText's named scopes (moe.py dense_matmul; GPU traces carry op names even without a dump).
    Rule(
        "moe-expert-scopes",
        "grouped_gemm",
        "named scopes wi_0 / wi_1 / wo of moe.py's dense (masked) expert path",
        _scope("wi_0", "wi_1", "wo"),
    ),
    Rule("moe-dispatch-scope", "dispatch", "named scope dispatch (moe.py dense path)", _scope("dispatch")),
    Rule("moe-combine-scopes", "combine", "named scopes combine, weight_sum (moe.py)", _scope("combine", "weight_sum")),
    Rule(
        "grouped-gemm-kernels",
        "grouped_gemm",
        "grouped-GEMM custom calls and kernels: TE te_grouped_gemm*_ffi (cuBLAS grouped GEMM), ragged-dot, "
        "tokamax/megablox gmm",
        _either(
            _target("te_grouped_gemm"),
            _hlo("ragged-dot"),
            _kernel(r"ragged_dot", r"grouped_?gemm", r"(?<![a-z])gmm"),  # not the wgmma of an attention kernel
            lambda op: "ragged_dot" in op.op_name,
        ),
    ),
    Rule(
        "attention-kernels",
        "attention",
        "fused attention: cuDNN SDPA / flash kernels and custom calls (__cudnn$fmha*), splash/flash op names",
        _either(
            _target("__cudnn$fmha", "cudnn$fmha", "te_fused_attn"),
            _kernel(r"sdpa", r"fmha", r"flash_(fprop|bprop)", r"flash_attn", r"fused_attn"),
            lambda op: bool(re.search(r"dot_product_attention|splash|flash_attention", op.op_name)),
        ),
    ),
    Rule("gemms", "other_gemm", "any other dot/convolution, cuBLAS/CUTLASS/Triton GEMM kernel", _is_gemm),
)


def classify(op: Op) -> tuple[str, str]:
    """(bucket, id of the rule that claimed it); ("other", "unclaimed") when no rule does."""
    for rule in RULES:
        if rule.claims(op):
            bucket = _frame_bucket(op) if rule.id == "maxtext-frames" else rule.bucket
            return bucket or "other", rule.id
    return "other", "unclaimed"


def is_container(op: Op) -> bool:
    """A control-flow instruction (while, conditional, call) whose traced span encloses its body's operations."""
    return op.hlo_kind in CONTAINERS
