"""The step-time breakdown's classification rules, one case per rule (pure), and the time accounting.

GPU cases use kernel and instruction names as XLA:GPU, cuBLAS, cuDNN, NCCL and TransformerEngine name them; they
are checked against a real H200 trace by benchmarks/h200/run.sh's profile phase.
"""

from __future__ import annotations

import os

import jax.profiler
import pytest

from conftest import REPO
from moekit.observe.profiles import breakdown, hlo, profile
from moekit.observe.profiles.profile_rules import BUCKETS, RULES, Op, classify, is_container
from moekit.observe.profiles.trace import Event
from moekit.worker import process as worker

GMM = ("RoutedMoE.sparse_matmul.<locals>.jax_ragged_dot_gmm", "RoutedMoE.sparse_matmul.<locals>.gmm", "train_step")
SORT_IN_PERMUTE = ("_sort_activations", "RoutedMoE.permute", "RoutedMoE.sparse_matmul.<locals>.route")
SORT_IN_UNPERMUTE = ("_sort_activations", "RoutedMoE.unpermute", "RoutedMoE.sparse_matmul.<locals>._moe_body")
NCCL_SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
# gpt-oss proxy, moe=te_gmm, on one H200 (jax 0.11.2, MaxText 0.2.5, 2026-12-04): what XLA's dump says about the
# largest operations of its traced step (frames innermost first, cut after four).
OSS_BODY = "jit(train_step)/transpose(jvp())/while/body/eval_jaxpr/checkpoint"
MOE_BODY = ("RoutedMoE.sparse_matmul.<locals>._moe_body", "RoutedMoE.sparse_matmul")
ATTN_DOT = ("AttentionOp.apply_attention_dot", "AttentionOp.apply_attention", "AttentionOp.__call__")
ADAM = ("scale_by_adam.<locals>.update_fn", "with_extra_args_support.<locals>.update", "chain.<locals>.update_fn")

# (rule that must claim it, bucket, the operation)
CASES = [
    ("nccl-ep", "nccl_ep", Op(kernel="ep_kernel", hlo_op="te_ep_dispatch_ffi.10", target="te_ep_dispatch_ffi")),
    # NCCL runs an all-to-all as SendRecv kernels: the instruction decides, not the kernel.
    ("all-to-all", "all_to_all", Op(kernel=NCCL_SENDRECV, hlo_op="ragged-all-to-all.3")),
    ("all-to-all", "all_to_all", Op(kernel="all-to-all.1", hlo_op="all-to-all.1", opcode="all-to-all")),
    ("all-gather", "all_gather", Op(kernel="ncclDevKernel_AllGather_RING_LL(x)", hlo_op="all-gather-start.8.g0")),
    ("all-gather", "all_gather", Op(kernel="all-gather.12", hlo_op="all-gather.12", opcode="all-gather")),
    (
        "all-gather",
        "all_gather",  # an async wrapper around the collective
        Op(hlo_op="all-gather-start.2", opcode="async-start", fused=frozenset({"all-gather", "parameter"})),
    ),
    ("reduce-scatter", "reduce_scatter", Op(kernel="ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)")),
    ("all-reduce", "all_reduce", Op(kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", hlo_op="all-reduce-start.2")),
    ("collective-permute", "collective_permute", Op(kernel=NCCL_SENDRECV, hlo_op="collective-permute-start.1")),
    (
        "host-offload",
        "offload",
        Op(kernel="MemcpyD2H", hlo_op="copy-start.4", details="kind_src:device kind_dst:pinned"),
    ),
    ("host-offload", "offload", Op(hlo_op="copy-done.4", opcode="copy-done")),
    ("runtime-copies", "host_copy", Op(kernel="MemcpyD2H", hlo_op="")),
    (
        "te-gmm-scope",
        "grouped_gemm",  # inside MaxText's gmm frame too: the scope rule comes first
        Op(
            kernel="nvjet_hsh_256x128_2x1_v_bz_coopA_NNN",
            hlo_op="custom-call.7",
            target="te_grouped_gemm_ffi",
            op_name="jit(train_step)/moe/moekit_ragged_dot/moekit_grouped_gemm/te_grouped_gemm",
            frames=GMM,
        ),
    ),
    (
        "te-gmm-layout-scope",
        "dispatch",
        Op(hlo_op="select_fusion.3", opcode="fusion", op_name="jit(train_step)/moe/moekit_ragged_dot/select_n"),
    ),
    ("maxtext-frames", "grouped_gemm", Op(kernel="ynn_fusion.3", hlo_op="ynn_fusion.3", opcode="fusion", frames=GMM)),
    ("maxtext-frames", "dispatch", Op(hlo_op="gather_fusion.1", opcode="fusion", frames=SORT_IN_PERMUTE)),
    ("maxtext-frames", "combine", Op(hlo_op="gather_fusion.2", opcode="fusion", frames=SORT_IN_UNPERMUTE)),
    (
        "maxtext-frames",
        "dispatch",
        Op(hlo_op="dot.4", opcode="dot", frames=("GateLogit.__call__", "RoutedMoE.__call__")),
    ),
    (
        "maxtext-frames",
        "attention",
        Op(hlo_op="fusion.9", opcode="fusion", frames=("AttentionOp.apply_attention_dot",)),
    ),
    (
        "maxtext-frames",
        "grouped_gemm",  # tokamax's Mosaic GPU kernel: a custom call made inside MaxText's gmm
        Op(kernel="ragged_kernel", hlo_op="custom-call.55", opcode="custom-call", target="mosaic_gpu", frames=GMM),
    ),
    (
        "moe-expert-scopes",
        "grouped_gemm",  # moe=dense: every expert's GEMM under moe.py's named scopes
        Op(
            kernel="nvjet_tst_128x256",
            hlo_op="fusion.7",
            op_name="jit(train_step)/jvp()/wi_0/BSM,EMH->EBSH/dot_general",
        ),
    ),
    ("moe-dispatch-scope", "dispatch", Op(hlo_op="fusion.2", op_name="jit(train_step)/jvp()/dispatch/dot_general")),
    ("moe-combine-scopes", "combine", Op(hlo_op="fusion.3", op_name="jit(train_step)/jvp()/weight_sum/mul")),
    (
        "grouped-gemm-kernels",
        "grouped_gemm",  # TE's grouped GEMM runs cuBLAS kernels: the custom call, not the kernel name, decides
        Op(kernel="nvjet_tst_256x128_64x4", hlo_op="te_grouped_gemm_ffi.96.double_buffer_clone", opcode="custom-call"),
    ),
    (
        "attention-kernels",
        "attention",
        Op(kernel="cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128", hlo_op="fusion.1"),
    ),
    ("attention-kernels", "attention", Op(hlo_op="custom-call.3", opcode="custom-call", target="__cudnn$fmhaSoftmax")),
    ("grouped-gemm-kernels", "grouped_gemm", Op(kernel="tokamax_gmm_kernel", hlo_op="custom-call.8")),
    ("gemms", "other_gemm", Op(kernel="nvjet_tst_128x256_64x4_1x2_h_bz", hlo_op="custom-call.12")),
    ("gemms", "other_gemm", Op(kernel="sm90_xmma_gemm_bf16bf16_bf16f32", hlo_op="cublas-gemm.3")),
    (
        "gemms",
        "other_gemm",
        Op(kernel="ynn_fusion.169", hlo_op="ynn_fusion.169", fused=frozenset({"dot", "parameter"})),
    ),
    ("gemms", "other_gemm", Op(kernel="gemm_fusion_dot_12_0", hlo_op="gemm_fusion_dot.12")),
    (
        "te-gmm-bias-scope",
        "mlp_act",  # the expert-bias gradient as moe=te_gmm computes it: a one-hot matmul, yet bias work
        Op(
            kernel="gemm_fusion_dot_187",
            hlo_op="gemm_fusion_dot.187",
            opcode="fusion",
            fused=frozenset({"bitcast", "convert", "dot", "parameter"}),
            op_name=f"{OSS_BODY}/moekit_expert_bias/moekit_expert_bias/me,mf->ef/dot_general",
            frames=("transform_bias.<locals>.<genexpr>", "transform_bias", *MOE_BODY),
        ),
    ),
    (
        "maxtext-frames",
        "mlp_act",  # bias rows, padding-row mask and the clamped SwiGLU's gradient, fused in one kernel
        Op(
            kernel="loop_select_fusion_5",
            hlo_op="loop_select_fusion.5",
            opcode="fusion",
            fused=frozenset({"add", "clamp", "exponential", "divide", "gather", "select", "multiply"}),
            op_name=f"{OSS_BODY}/jit(_where)/select_n",
            frames=("RoutedMoE.sparse_matmul.<locals>.gmm_up", *MOE_BODY),
        ),
    ),
    (
        "maxtext-frames",
        "mlp_act",
        Op(hlo_op="loop_multiply_fusion.2", opcode="fusion", frames=("RoutedMoE.apply_ffn_activation", *MOE_BODY)),
    ),
    (
        "maxtext-frames",
        "attention",  # attention sinks: the sink logit concatenated to each row's scores
        Op(
            kernel="input_concatenate_fusion_7",
            hlo_op="input_concatenate_fusion.7",
            opcode="fusion",
            fused=frozenset({"concatenate", "exponential", "dynamic-slice", "pad", "subtract"}),
            op_name=f"{OSS_BODY}/mul",
            frames=("AttentionOp.compute_local_attention", *ATTN_DOT),
        ),
    ),
    (
        "maxtext-frames",
        "attention",  # the sliding-window / causal mask applied to the logits
        Op(
            kernel="input_transpose_fusion_19",
            hlo_op="input_transpose_fusion.19",
            opcode="fusion",
            fused=frozenset({"select", "slice", "transpose", "broadcast"}),
            op_name=f"{OSS_BODY}/jit(_where)/select_n",
            frames=("apply_mask_to_logits", *ATTN_DOT),
        ),
    ),
    (
        "maxtext-frames",
        "attention",  # unfused attention's QK GEMM (a Triton GEMM fusion) is attention, not another GEMM
        Op(
            kernel="gemm_fusion_dot_174",
            hlo_op="gemm_fusion_dot.174",
            opcode="fusion",
            fused=frozenset({"dot", "parameter", "select"}),
            op_name="jit(train_step)/jvp()/while/body/eval_jaxpr/btkgd,bskd->bkgts/dot_general",
            frames=("AttentionOp.qk_product", *ATTN_DOT),
        ),
    ),
    (
        "maxtext-frames",
        "attention",  # rotary embedding of q and k
        Op(
            kernel="input_transpose_fusion_18",
            hlo_op="input_transpose_fusion.18",
            opcode="fusion",
            op_name=f"{OSS_BODY}/mul",
            frames=("YarnRotaryEmbedding.__call__", "Attention.apply_rotary_embedding", "Attention.__call__"),
        ),
    ),
    (
        "maxtext-frames",
        "other_gemm",  # a projection's operand transpose: DenseGeneral is inner to Attention
        Op(
            kernel="input_transpose_fusion_6",
            hlo_op="input_transpose_fusion.6",
            opcode="fusion",
            fused=frozenset({"bitcast", "parameter", "slice", "transpose"}),
            op_name="jit(train_step)/jvp()/while/body/eval_jaxpr/dot_general",
            frames=("_compute_dot_general_nnx", "DenseGeneral.__call__", "Attention.query_projection"),
        ),
    ),
    (
        "maxtext-frames",
        "other_gemm",  # a dense MLP's GEMM stays a GEMM: DenseGeneral is inner to MlpBlock
        Op(
            kernel="nvjet_sm90_tst_192x192_64x3_2x1_v_bz_NNT",
            hlo_op="custom-call.41",
            opcode="custom-call",
            target="__cublas$lt$matmul",
            frames=("_compute_dot_general_nnx", "DenseGeneral.__call__", "MlpBlock.__call__"),
        ),
    ),
    (
        "maxtext-frames",
        "norm",
        Op(
            kernel="input_add_reduce_fusion_6",
            hlo_op="input_add_reduce_fusion.6",
            opcode="fusion",
            fused=frozenset({"add", "gather", "multiply", "reduce", "select"}),
            op_name=f"{OSS_BODY}/reduce_sum",
            frames=("RMSNorm.__call__", "GptOssDecoderLayer.__call__", "GptOssScannableBlock.__call__"),
        ),
    ),
    (
        "maxtext-frames",
        "embed_loss",
        Op(
            hlo_op="input_convert_reduce_fusion.2",
            opcode="fusion",
            op_name="jit(train_step)/jvp()/reduce_sum",
            frames=("_cross_entropy_with_logits_fwd", "loss_fn", "train_step.<locals>.diff_wrapper", "train_step"),
        ),
    ),
    (
        "maxtext-frames",
        "embed_loss",  # the embedding's gradient: a scatter-add of the token rows
        Op(
            hlo_op="input_scatter_fusion.14",
            opcode="fusion",
            op_name="jit(train_step)/transpose(jvp())/scatter-add",
            frames=("Embed.__call__", "NNXDecoder.embed_tokens", "NNXDecoder._apply_embedding", "NNXDecoder.__call__"),
        ),
    ),
    (
        "optimizer-frames",
        "optimizer",
        Op(
            kernel="input_add_reduce_fusion_42",
            hlo_op="input_add_reduce_fusion.42",
            opcode="fusion",
            op_name="jit(train_step)/add",
            frames=("tree_update_moment_per_elem_norm.<locals>.<lambda>", "tree_update_moment_per_elem_norm", *ADAM),
        ),
    ),
    (
        "optimizer-frames",
        "optimizer",  # MaxText's gradient / parameter norm metrics
        Op(
            hlo_op="input_add_reduce_fusion.16",
            opcode="fusion",
            op_name="jit(train_step)/reduce_sum",
            frames=("l2norm_pytree.<locals>.<lambda>", "l2norm_pytree", "train_step", "train_loop"),
        ),
    ),
    (
        "unclaimed",
        "other",  # a parameter's layout transpose: no frames, its op_name is the parameter's path
        Op(
            kernel="wrapped_transpose_11",
            hlo_op="wrapped_transpose.11",
            opcode="fusion",
            fused=frozenset({"parameter", "transpose"}),
            op_name="state['model']['decoder']['layers']['layers_0']['GptOssMlp']['wi_0'].value",
        ),
    ),
    (
        "unclaimed",
        "other",  # the residual add: the decoder layer itself is no bucket (outer frames never claim)
        Op(
            hlo_op="loop_add_fusion",
            opcode="fusion",
            op_name="jit(train_step)/jvp()/while/body/eval_jaxpr/add",
            frames=("GptOssDecoderLayer.__call__", "GptOssScannableBlock.__call__", "loss_fn", "train_step"),
        ),
    ),
    ("unclaimed", "other", Op(kernel="loop_add_fusion", hlo_op="loop_add_fusion.3", fused=frozenset({"add"}))),
    ("unclaimed", "other", Op(kernel="MemcpyD2D", hlo_op="copy.9", opcode="copy")),  # a device copy is no offload
]


@pytest.mark.parametrize("rule, bucket, op", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_claims_its_case(rule, bucket, op):
    assert classify(op) == (bucket, rule)


def test_every_rule_has_a_case():
    assert {r.id for r in RULES} | {"unclaimed"} == {c[0] for c in CASES}
    assert {b for b, _, _ in BUCKETS} >= {c[1] for c in CASES}


def test_every_bucket_has_its_own_color():
    assert len(BUCKETS) <= 20  # plots.py gives each bucket one of matplotlib's tab20 colors


def test_docs_list_every_rule():
    text = (REPO / "docs" / "profiling.md").read_text()
    assert [r.id for r in RULES if f"| `{r.id}` |" not in text] == []


def test_containers_are_control_flow():
    assert is_container(Op(hlo_op="while.5", opcode="while"))
    assert is_container(Op(hlo_op="conditional.2"))  # undumped: the name says it
    assert not is_container(Op(hlo_op="fusion.1", opcode="fusion", fused=frozenset({"while"})))


def _ns(s: float) -> float:
    return s * 1e9


def test_split_shares_overlap_and_adds_up():
    """Compute on one stream, a collective on another half under it: exposed half counts, idle is the rest."""
    spans = [
        breakdown.Span(_ns(0), _ns(10), "other_gemm", "compute"),
        breakdown.Span(_ns(5), _ns(15), "all_gather", "collective"),
        breakdown.Span(_ns(2), _ns(4), "attention", "compute"),  # concurrent compute: the instant is shared
    ]
    out = breakdown.split(spans, _ns(0), _ns(20))
    b = out["buckets_s"]
    assert b["other_gemm"] == pytest.approx(9.0) and b["attention"] == pytest.approx(1.0)
    assert b["all_gather"] == pytest.approx(5.0) and out["idle_s"] == pytest.approx(5.0)
    assert sum(b.values()) + out["idle_s"] == pytest.approx(out["window_s"])
    assert out["kernel_s"]["all_gather"] == pytest.approx(10.0)
    assert out["communication_share_of_kernel_time"] == pytest.approx(10 / 22)
    assert out["collective_hidden_share"] == pytest.approx(0.5)


def test_exclusive_cuts_nested_events_out_of_their_parent():
    """A CPU while thunk encloses its body's thunks on the same thread; only its own time stays with it."""
    spans = breakdown.exclusive([(0, 10, "other", "container"), (2, 5, "grouped_gemm", "compute"), (6, 7, "x", "c")])
    assert [(s.start, s.end, s.bucket) for s in spans] == [
        (0, 2, "other"),
        (2, 5, "grouped_gemm"),
        (5, 6, "other"),
        (6, 7, "x"),
        (7, 10, "other"),
    ]
    out = breakdown.split(
        breakdown.exclusive([(0, 10, "other", "container"), (2, 5, "grouped_gemm", "compute")]), 0, 10
    )
    assert out["buckets_s"]["grouped_gemm"] == pytest.approx(3e-9)
    assert out["kernel_s"]["other"] == 0.0  # control flow is no kernel time


def _gpu_step(t0: float, stream: str = "Stream #13(Kernel)") -> list[Event]:
    """One synthetic train step on a GPU: an input fusion once, a 4-iteration layer loop, an all-reduce."""
    evs = [Event("gpu:0", stream, t0, t0 + 1e6, "loop_convert_fusion", "fusion.1", "jit_train_step", 7)]
    for i in range(4):
        evs.append(Event("gpu:0", stream, t0 + (1 + 2 * i) * 1e6, t0 + (2 + 2 * i) * 1e6, "nvjet_x", "cublas-gemm.2",
                         "jit_train_step", 7))  # fmt: skip
    evs.append(Event("gpu:0", "Stream #20(Kernel)", t0 + 9e6, t0 + 10e6, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                     "all-reduce-start.1", "jit_train_step", 7))  # fmt: skip
    return evs


def test_gpu_steps_are_told_apart_by_a_once_per_step_instruction():
    events = _gpu_step(0) + _gpu_step(12e6) + _gpu_step(24e6)
    out = profile.device_breakdown(events, {}, first_step=3, expected=3)
    assert out["segmentation"] == "once-per-step instruction"
    assert [s["step"] for s in out["steps"]] == [3, 4, 5]
    first = out["steps"][0]
    assert first["window_s"] == pytest.approx(12e-3)  # up to the next step's start
    assert first["buckets_s"]["other_gemm"] == pytest.approx(4e-3)
    assert first["buckets_s"]["all_reduce"] == pytest.approx(1e-3)
    assert first["idle_s"] == pytest.approx(12e-3 - 4e-3 - 1e-3 - 1e-3)
    assert out["steps"][-1]["ends_at_next_step"] is False


def test_cpu_steps_are_told_apart_by_run_id():
    def thunk(t0, run):
        return Event("cpu:0", "tf_XLAEigen/1", t0, t0 + 5e5, "dot.3", "dot.3", "jit_train_step", 22, run)

    out = profile.device_breakdown([thunk(0, 11), thunk(1e6, 11), thunk(3e6, 12)], {}, first_step=2, expected=2)
    assert out["segmentation"] == "run_id" and [s["window_s"] for s in out["steps"]] == pytest.approx([3e-3, 5e-4])


def test_without_step_marks_the_window_is_averaged():
    events = [Event("gpu:0", "Stream #1", t, t + 1e6, "k", "fusion.2", "jit_train_step") for t in (0, 2e6, 4e6, 6e6)]
    out = profile.device_breakdown(events, {}, first_step=1, expected=3)
    assert out["segmentation"] == "whole window"
    (step,) = out["steps"]
    assert step["window_s"] == pytest.approx(7e-3 / 3) and step["buckets_s"]["other"] == pytest.approx(4e-3 / 3)


def test_each_process_traces_into_its_own_folder_and_dumps_the_train_step(monkeypatch, tmp_path):
    """MaxText names every process's trace <host>.xplane.pb in one folder: the worker gives each its own."""
    calls = []
    monkeypatch.setattr(jax.profiler, "start_trace", lambda log_dir, *a, **kw: calls.append(log_dir))
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    worker.trace_per_process({"MOEKIT_PROFILE_DIR": str(tmp_path), "JAX_PROCESS_ID": "1"})
    jax.profiler.start_trace("/run/smoke/tensorboard/")  # what MaxText's profiler calls
    assert calls == [str(tmp_path / "trace" / "process_1")]
    flags = os.environ["XLA_FLAGS"].split()
    assert flags[0] == "--xla_force_host_platform_device_count=2"  # the job's own flags stay
    assert (
        f"--xla_dump_to={tmp_path / 'hlo' / 'process_1'}" in flags
        and "--xla_dump_hlo_module_re=jit_train_step" in flags
    )


def test_without_the_switch_the_worker_changes_nothing(monkeypatch):
    before = jax.profiler.start_trace
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    worker.trace_per_process({})
    assert jax.profiler.start_trace is before and "XLA_FLAGS" not in os.environ


def test_untraced_steps_leave_out_warm_up_and_the_windows_edges():
    """Step 3 starts the trace, step 6 pays for writing it: the overhead compares steady steps outside both."""
    times = [30.0, 1.0, 1.1, 4.0, 1.2, 1.3, 5.0, 1.0, 1.1, 1.2]
    rows = [{"step": float(i), "perf/step_time_seconds": t} for i, t in enumerate(times)]
    out = profile.maxtext_step_times(rows, first_step=3, expected=3)  # no events: the times alone
    # Steps 1 and 2 refill the pipeline after the attempt start (observe/runs/steady.py): neither is compared.
    assert out["traced_steps"] == [4, 5] and out["untraced_steps"] == [7, 8, 9]
    assert out["untraced_median_s"] == pytest.approx(1.1)
    # With the run's own verdict (its events), exactly the steps it counted.
    out = profile.maxtext_step_times(rows, first_step=3, expected=3, counted=[2, 8, 9])
    assert out["untraced_steps"] == [2, 8, 9]


def test_a_command_buffers_kernels_are_told_apart_by_their_names():
    """XLA:GPU records runs of thunks as CUDA graphs: the trace's hlo_op then names the command buffer, and the
    kernel name (the instruction's, `.` made `_`) says which fusion ran (gpt-oss on an H200, 2026-12-04)."""
    table = {
        "input_concatenate_fusion.7": hlo.Instruction(
            "input_concatenate_fusion.7",
            "fusion",
            "jit(train_step)/transpose(jvp())/while/body/eval_jaxpr/checkpoint/mul",
            ("AttentionOp.compute_local_attention", "AttentionOp.apply_attention_dot"),
            frozenset({"concatenate", "exponential", "reduce"}),
        ),
        "fusion.1": hlo.Instruction("fusion.1", "fusion"),
        "fusion_1": hlo.Instruction("fusion_1", "fusion"),  # two instructions, one kernel name: left unresolved
    }
    assert set(hlo.by_kernel(table)) == {"input_concatenate_fusion_7"}
    cb = "command_buffer_415"
    events = [
        Event("gpu:0", "Stream #14(Kernel)", 0, 4e6, "input_concatenate_fusion_7", cb, "jit_train_step", 30526),
        Event("gpu:0", "Stream #14(Kernel)", 4e6, 5e6, "nvjet_sm90_tst_144x128_64x6_h_bz_TTN", cb, "jit_train_step"),
        Event("gpu:0", "Stream #14(Kernel)", 5e6, 6e6, "fusion_1", cb, "jit_train_step"),
    ]
    out = profile.device_breakdown(events, {"jit_train_step": table}, first_step=1, expected=1)
    b = out["steps"][0]["buckets_s"]
    assert b["attention"] == pytest.approx(4e-3) and b["other_gemm"] == pytest.approx(1e-3)
    assert b["other"] == pytest.approx(1e-3)
    assert [(o["op"], o["bucket"]) for o in out["largest_ops"]] == [
        ("input_concatenate_fusion.7", "attention"),
        (cb, "other_gemm"),
        (cb, "other"),
    ]


# XLA:GPU's thunk dumps beside the HLO (module_<id>.jit_train_step.thunk_*.txt), cut from the gpt-oss trace's.
THUNK_SEQUENCE = """\
000: kCommandBuffer [source       | next=074 (1)]
    001: kCustomKernel [source        | sink         ] loop_add_fusion_14 grid: [1, 1, 1] threads: [1, 1, 1]
074: kWhile         [prev=000 (1) | next=000 (1)]
    000: kCommandBuffer      [prev=106 (2)  | next=124 (2) ]
        110: kCustomKernel   [source       | next=112 (2)] input_transpose_fusion_6 grid: [1024, 1, 1]
        120: kCublasLtMatmul [prev=118 (2) | next=121 (1)] kCublasLtMatmul
    124: kCublasLtMatmul     [prev=000 (2)  | next=127 (3) ] kCublasLtMatmul
    000: kCommandBuffer      [prev=270 (2)  | next=300 (1) ]
        279: kCublasLtMatmul [source | next=280 (1)] kCublasLtMatmul
        280: kCublasLtMatmul [prev=279 (1) | sink] kCublasLtMatmul
"""
THUNK_METADATA = "".join(
    f'thunk_metadata {{\n  thunk_info {{\n    profile_annotation: "{name}"\n    thunk_id: {i}\n  }}\n'
    f'  thunk_kind: "kCublasLtMatmul"\n}}\n'
    for i, name in ((120, "custom-call.36"), (124, "custom-call.41"), (279, "custom-call.53"), (280, "custom-call.45"))
)


def test_a_command_buffers_cublas_kernels_take_the_bucket_its_gemms_agree_on():
    buffers = hlo.command_buffer_gemms(THUNK_SEQUENCE, THUNK_METADATA)
    assert buffers == {
        "command_buffer_1": (),
        "command_buffer_110": ("custom-call.36",),  # custom-call.41 runs outside any command buffer
        "command_buffer_279": ("custom-call.53", "custom-call.45"),
    }
    cublas = {"opcode": "custom-call", "target": "__cublas$lt$matmul"}
    table = {
        "custom-call.36": hlo.Instruction("custom-call.36", frames=("AttentionOp.wv_product", *ATTN_DOT), **cublas),
        "custom-call.45": hlo.Instruction("custom-call.45", frames=("AttentionOp.qk_product", *ATTN_DOT), **cublas),
        "custom-call.53": hlo.Instruction(
            "custom-call.53", frames=("_compute_dot_general_nnx", "DenseGeneral.__call__"), **cublas
        ),
    }
    line, nvjet = "Stream #14(Kernel)", "nvjet_sm90_tst_256x64_64x5_2x1_v_bz_TNT"
    events = [
        Event("gpu:0", line, 0, 3e6, nvjet, "command_buffer_110", "jit_train_step"),  # its one GEMM: attention's PV
        Event("gpu:0", line, 3e6, 4e6, "MemcpyD2D", "command_buffer_110", "jit_train_step"),  # no GEMM kernel
        Event("gpu:0", line, 4e6, 6e6, nvjet, "command_buffer_279", "jit_train_step"),  # QK or a projection: unknown
    ]
    out = profile.device_breakdown(events, {"jit_train_step": table}, 1, 1, {"jit_train_step": buffers})
    b = out["steps"][0]["buckets_s"]
    assert b["attention"] == pytest.approx(3e-3) and b["other"] == pytest.approx(1e-3)
    assert b["other_gemm"] == pytest.approx(2e-3)
    assert ("custom-call.36", "attention") in [(o["op"], o["bucket"]) for o in out["largest_ops"]]


def test_the_thunk_dumps_are_found_beside_the_hlo_dump(tmp_path):
    dump = tmp_path / "module_30526.jit_train_step.sm_9.0a_gpu_after_optimizations.txt"
    dump.write_text("HloModule jit_train_step\n")
    assert hlo.find_thunks(dump) is None  # XLA:CPU writes no thunk dumps
    for name in (hlo.THUNK_SEQUENCE, hlo.THUNK_METADATA):
        (tmp_path / f"module_30526.jit_train_step.{name}").write_text("")
    assert [p.name for p in hlo.find_thunks(dump)] == [
        "module_30526.jit_train_step.thunk_sequence_after_thunk_passes.txt",
        "module_30526.jit_train_step.thunk_metadata.txt",
    ]
