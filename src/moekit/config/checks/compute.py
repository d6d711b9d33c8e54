"""What the accelerator computes: precision formats, attention kernel, remat policy, the profiled window."""

from __future__ import annotations

from collections.abc import Iterator

from moekit.config.checks.problem import Problem
from moekit.config.kinds import attention
from moekit.config.schema import Config

# TE's quantized GEMMs (cuBLAS) need each contracting dimension a multiple of 16. MaxText quantizes the router's
# GEMM with the dense ones; its input gradient contracts over the experts, so 8 experts fail at compile: "LHS
# tensor's contracting dimension must be a multiple of 16 when using quantized inputs. Got contracting_size=8"
# (mixtral and dsv2_lite proxies, moe=te_gmm, precision=fp8, also with bf16 expert GEMMs; one H100, TE 2.20.2,
# 2026-12-05). The TE MoE block (moe=te) routes with its own code: not measured, not refused.
QUANTIZED_MULTIPLE = 16


def precision_supported(cfg: Config) -> Iterator[Problem]:
    """fp8 and mxfp8 need tensor cores the hardware has."""
    p, f = cfg.precision.name, cfg.hardware.features
    if p == "mxfp8" and not f.mxfp8:
        yield Problem(
            "precision",
            f"precision=mxfp8 needs block-scaled MXFP8 tensor cores (Blackwell); hardware={cfg.hardware.name} has none",
            "use precision=fp8 (Hopper) or precision=bf16, or choose Blackwell hardware (hardware=b200|gb200|gb300)"
            if cfg.model.num_experts % QUANTIZED_MULTIPLE == 0
            else "use precision=bf16, or choose Blackwell hardware (hardware=b200|gb200|gb300)",
        )
    if p == "fp8" and not f.fp8:
        yield Problem(
            "precision",
            f"precision=fp8 needs FP8 tensor cores; hardware={cfg.hardware.name} has none",
            "use precision=bf16",
        )


def quantized_router_fits(cfg: Config) -> Iterator[Problem]:
    """fp8/mxfp8 quantize the router's GEMM, whose gradient contracts over the experts: a multiple of 16 is needed."""
    p, n = cfg.precision.name, cfg.model.num_experts
    if p in ("fp8", "mxfp8") and not cfg.backend.te_block and n % QUANTIZED_MULTIPLE:
        yield Problem(
            "precision",
            f"precision={p} quantizes the router's GEMM, whose gradient contracts over the {n} experts; "
            f"TransformerEngine's quantized GEMMs need a multiple of {QUANTIZED_MULTIPLE} (the compile fails)",
            f"precision=bf16, or model.num_experts a multiple of {QUANTIZED_MULTIPLE}",
        )


def memory_policy_consistent(cfg: Config) -> Iterator[Problem]:
    """Per-tensor remat choices take effect only with remat_policy=custom."""
    mem = cfg.memory
    if mem.tensors and mem.remat_policy != "custom":
        yield Problem(
            "memory.remat_policy",
            f"per-tensor choices ({', '.join(mem.tensors)}) are read by MaxText only with remat_policy=custom; "
            f"remat_policy={mem.remat_policy} ignores them",
            "memory.remat_policy=custom, or choose a memory option without tensors (memory=remat_full)",
        )


# MaxText tags a routed expert's up-projection output twice (`mlpwi_0` inside `moe_mlpwi_0`). A custom policy that
# names the outer tags without the inner ones changed the bf16 loss from step 2 on, with nothing offloaded (one H200,
# 2026-12-04, docs/metrics.md); memory=offload_blog, which names both, agrees with the reference.
_TAGGED_TWICE = {"moe_mlpwi_0": "mlpwi_0", "moe_mlpwi_1": "mlpwi_1"}


def custom_policy_names_both_tags(cfg: Config) -> Iterator[Problem]:
    """A custom remat policy that names a routed tensor's outer tag should name its inner one too."""
    tensors = cfg.memory.tensors
    if cfg.memory.remat_policy != "custom":
        return
    missing = [inner for outer, inner in _TAGGED_TWICE.items() if outer in tensors and inner not in tensors]
    if missing:
        fix = " ".join(f"memory.tensors.{m}=device" for m in missing)
        yield Problem(
            "memory.tensors",
            f"remat_policy=custom names {', '.join(o for o in _TAGGED_TWICE if o in tensors)} but not "
            f"{', '.join(missing)} (the same activation's inner tag): measured to change the loss from step 2 on "
            "(docs/metrics.md)",
            f"{fix}, or start from memory=offload_blog, which names every tensor",
        )


def attention_supported(cfg: Config) -> Iterator[Problem]:
    """cudnn_flash_te attention runs on NVIDIA GPUs only."""
    if cfg.model.attention == "cudnn_flash_te" and cfg.hardware.platform != "gpu":
        yield Problem(
            "model.attention",
            f"attention=cudnn_flash_te is TransformerEngine's cuDNN fused attention: NVIDIA GPUs only, "
            f"hardware={cfg.hardware.name}",
            "model.attention=dot_product (or null for MaxText's choice)",
        )
    yield from _moekit_attention(cfg)


def _moekit_attention(cfg: Config) -> Iterator[Problem]:
    """A moekit attention kernel (moekit.attention) runs where its package ships kernels, on one device per job (a
    Pallas kernel is not partitioned by XLA: measured on one GPU only), and only while MaxText is handed its carrier."""
    name = cfg.model.attention
    if name not in attention.KERNELS:
        return
    kernel, fix = attention.KERNELS[name], "model.attention=cudnn_flash_jax"
    sm = cfg.hardware.sm or 0
    if cfg.hardware.platform != "gpu" or sm < kernel.min_sm:
        yield Problem(
            "model.attention",
            f"attention={name} is a Pallas Mosaic GPU kernel: NVIDIA GPUs of SM "
            f"{kernel.min_sm} or newer, hardware={cfg.hardware.name}",
            fix,
        )
    if cfg.num_devices > 1:
        yield Problem(
            "model.attention",
            f"attention={name} on {cfg.num_devices} devices: its Pallas call is not "
            "partitioned across devices (measured on one GPU only)",
            fix,
        )
    extra = cfg.maxtext.extra.get("attention")
    if extra is not None and extra != kernel.carrier:
        yield Problem(
            "maxtext.extra.attention",
            f"maxtext.extra.attention={extra} overrides "
            f"model.attention={name}, which MaxText runs as attention={kernel.carrier}",
            "~maxtext.extra.attention (remove the raw key)",
        )


def profile_window_fits(cfg: Config) -> Iterator[Problem]:
    """The profiled steps (skip_steps, then steps) end within train.steps."""
    p, steps = cfg.profile, cfg.train.steps
    need = p.skip_steps + p.steps
    if p.enabled and need > steps:
        fewer = f" or profile.steps={steps - p.skip_steps}" if steps > p.skip_steps else ""
        yield Problem(
            "profile.steps",
            f"the traced steps {p.skip_steps}..{need - 1} (profile.skip_steps={p.skip_steps}, profile.steps="
            f"{p.steps}) do not fit in train.steps={steps}",
            f"train.steps={need}{fewer}",
        )
