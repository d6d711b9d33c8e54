"""The MoE back ends (moe=<name>): one row each, read by the checks, translate, preflight and the worker.

A row says what MaxText runs for the back end, whether it is MaxText's grouped-GEMM layer and dropless, where it
runs, what the host needs and what moekit adds around it. Adding a back end: its conf/moe/<name>.yaml, its row
here, the schema's choice (tests/test_backends.py ties them), and its own package where it has one (its `hook`,
te_gmm/ for moe=te_gmm). docs/extending.md lists the steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Key = str | int | float | bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Backend:
    """One MoE back end: its MaxText keys, its kind of layer, where it runs and what it needs."""

    name: str
    """The option name (moe=<name>, conf/moe/<name>.yaml)."""
    maxtext: Mapping[str, Key]
    """MaxText keys that select its compute path (translate adds capacity_factor from moe.capacity_factor)."""
    grouped: bool
    """MaxText's grouped-GEMM layer: tokens sorted by expert, dispatched by moe.dispatch (ragged all-to-all or
    ring of experts), each expert GEMM one grouped call."""
    dropless: bool = True
    """False: it drops the tokens past expert capacity by design (a baseline, refused unless allowed)."""
    te_block: bool = False
    """TransformerEngine's MoE block: NCCL EP dispatch inside, one process per GPU and at least 2 of them, its own
    receive buffer (it never reads capacity_factor; it counts an overflowing step, and MaxText stops the run at its
    next check)."""
    platforms: tuple[Literal["cpu", "gpu"], ...] = ("cpu", "gpu")
    """Where it runs."""
    elsewhere: str = ""
    """What it does on a platform it does not run on (the reason the check gives when it refuses one)."""
    min_sm: int | None = None
    """Oldest NVIDIA compute capability it runs on (90 = 9.0); None: any the platforms have."""
    packages: tuple[str, ...] = ()
    """Python modules the training host must import beyond MaxText's stack (probed before launch)."""
    install: str = ""
    """How to get `packages` where they are missing (the host probe's fix)."""
    hook: str | None = None
    """moekit's own package for this back end (moekit.<hook>), which takes over a MaxText call in each worker. Its
    modules keep one contract (hook_module): job_env.entries(cfg) gives the workers' environment (translate/env.py),
    engaged(environ) in its __init__ says a worker has it and hook.install_from_env(environ) puts it in place
    (worker/process.py), preflight.problems(cfg) probes the host (preflight/host.py); `pinned` keys keep MaxText on
    the call it takes over. The package sits on a floor below translate (tests/test_layers.py)."""
    pinned: Mapping[str, Key] = field(default_factory=dict)
    """MaxText keys that maxtext.extra may not set otherwise: they keep MaxText on the path the back end relies on."""
    gpu_interpreted: bool = False
    """On a GPU it runs a TPU kernel in interpret mode (pathologically slow): refused unless moe.force."""
    gpu_fp32: bool = True
    """False: its GPU kernel takes bf16/fp16 inputs only (precision=fp32 is refused on GPU)."""
    te_experts: bool = False
    """Its expert GEMMs run in TransformerEngine (its block, or its grouped GEMM through the hook): they take
    precision's low-precision format unless moe.expert_precision keeps them in bf16."""

    def runs_on(self, platform: str) -> bool:
        """Whether it runs on `platform` (cpu, gpu)."""
        return platform in self.platforms

    def hook_module(self, part: str) -> str:
        """The module of the back end's own package that does `part` (job_env, hook, preflight)."""
        if not self.hook:
            raise ValueError(f"moe={self.name} has no package of its own")
        return f"moekit.{self.hook}.{part}" if part else f"moekit.{self.hook}"

    @property
    def sparse(self) -> bool:
        """MaxText's sparse_matmul path (the grouped layer and TE's block); False: dense matmuls over every expert."""
        return bool(self.maxtext.get("sparse_matmul"))


_RAGGED_DOT = {"sparse_matmul": True, "megablox": False, "use_tokamax_gmm": False}

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        # TE's block needs the fused gate/up weight layout (MaxText refuses te_moe_block without prefuse_moe_weights).
        Backend(
            name="te",
            maxtext={"sparse_matmul": True, "megablox": False, "te_moe_block": True, "prefuse_moe_weights": True},
            grouped=False,
            te_block=True,
            te_experts=True,
            platforms=("gpu",),
            min_sm=90,
            packages=("transformer_engine",),
            install="run in moekit's image (its NGC JAX base ships TE with NCCL EP), install TE for JAX "
            "(transformer-engine[jax], NCCL >= 2.30.4), or use moe=tokamax",
        ),
        # MaxText's own jax.lax.ragged_dot path; moekit's worker hands that call to TE's grouped GEMM.
        Backend(
            name="te_gmm",
            maxtext=_RAGGED_DOT,
            grouped=True,
            platforms=("gpu",),
            min_sm=90,
            packages=("transformer_engine",),
            install="run in moekit's image (its NGC JAX base ships TE), install TE for JAX (transformer-engine[jax]; "
            "no NCCL EP needed), or use moe=tokamax",
            hook="te_gmm",
            te_experts=True,
            pinned={**_RAGGED_DOT, "te_moe_block": False},
        ),
        Backend(
            name="tokamax",
            maxtext={"sparse_matmul": True, "megablox": False, "use_tokamax_gmm": True},
            grouped=True,
            gpu_fp32=False,
            platforms=("gpu",),
            elsewhere="on CPU tokamax picks its TPU Mosaic kernel and the first step stops with "
            "'ValueError: Unsupported TPU device kind: cpu' (tokamax 0.0.17, jax 0.12.0.1, measured on CPU "
            "2026-12-07)",
        ),
        Backend(name="ragged_dot", maxtext=_RAGGED_DOT, grouped=True),
        Backend(name="dense", maxtext={"sparse_matmul": False}, grouped=False),
        Backend(name="capacity", maxtext={"sparse_matmul": False}, grouped=False, dropless=False),
        Backend(name="megablox", maxtext={"sparse_matmul": True, "megablox": True}, grouped=True, gpu_interpreted=True),
    )
}
