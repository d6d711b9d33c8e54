"""The MoE back end: dropless unless meant, each back end where it runs (platforms, precision, processes), and
a dispatch the back end reads."""

from __future__ import annotations

from collections.abc import Iterator

from moekit.config.checks.mesh import expert_axis_fix
from moekit.config.checks.problem import Problem
from moekit.config.schema import Config


def dropless(cfg: Config) -> Iterator[Problem]:
    """No setting drops tokens (a capacity factor, a capped receive buffer) unless moe.allow_token_dropping says it
    is meant."""
    # The TE MoE block never reads capacity_factor; its receive buffer is checked by te_moe_requirements.
    b = cfg.backend
    drops = not b.dropless or (cfg.moe.capacity_factor > 0 and not b.te_block)
    if not b.te_block and cfg.moe.ragged_buffer_factor > 0 and not cfg.moe.allow_token_dropping:
        yield Problem(
            "moe.ragged_buffer_factor",
            f"ragged_buffer_factor={cfg.moe.ragged_buffer_factor} caps each expert-parallel rank's receive buffer; "
            f"with moe={cfg.moe.backend} MaxText silently drops the tokens that do not fit",
            "leave moe.ragged_buffer_factor=-1 (worst-case buffer), use moe=te (which counts an overflowing step "
            "and stops the run at its next check), or set moe.allow_token_dropping=true for a deliberate baseline",
        )
    if drops and not cfg.moe.allow_token_dropping:
        yield Problem(
            "moe.capacity_factor",
            f"capacity_factor={cfg.moe.capacity_factor} (moe={cfg.moe.backend}) drops tokens past expert capacity: "
            "this is not dropless training",
            _dropless_fix(cfg) + " or moe.allow_token_dropping=true for a deliberate baseline",
        )


def _dropless_fix(cfg: Config) -> str:
    """Ways to dropless training from this config, each one complete (it passes the checks as written)."""
    if cfg.backend.dropless:  # a dropless back end with a capacity set
        return "moe.capacity_factor=-1 (dropless)"
    return "a dropless back end: " + dropless_choices(cfg)


def dropless_choices(cfg: Config) -> str:
    """The dropless back ends of MaxText's own MoE layer that run on this config's platform."""
    gpu = cfg.hardware.platform == "gpu"
    return " or ".join(["moe=tokamax", "moe=dense"] if gpu else ["moe=ragged_dot", "moe=dense"])


def backend_runs_here(cfg: Config) -> Iterator[Problem]:
    """A back end of MaxText's own MoE layer runs on this config's platform (moe=te and moe=te_gmm: their own
    checks, which also name the GPU generation)."""
    b, hw = cfg.backend, cfg.hardware
    if b.te_block or b.hook or b.runs_on(hw.platform):
        return
    yield Problem(
        "moe",
        f"moe={b.name} runs on {'/'.join(p.upper() for p in b.platforms)} only, not hardware={hw.name}"
        + (f": {b.elsewhere}" if b.elsewhere else ""),
        f"{dropless_choices(cfg)} (MaxText's own MoE layer, dropless, runs here), "
        "or hardware=h100|h200|b200|gb200|gb300",
    )


def megablox_on_gpu(cfg: Config) -> Iterator[Problem]:
    """megablox is a TPU kernel: on a GPU it runs interpreted, about 9x slower, so it needs moe.force."""
    if cfg.backend.gpu_interpreted and cfg.hardware.platform == "gpu" and not cfg.moe.force:
        yield Problem(
            "moe",
            "moe=megablox is MaxText's TPU Pallas kernel; on GPU it runs in interpret mode "
            "(measured 31 TFLOP/s/device vs 278 for moe=tokamax on one H200, MaxText 0.2.5, 2026-12-02)",
            "moe=te_gmm or moe=tokamax, or moe.force=true to run it anyway (TE's MoE block needs one process "
            "per GPU and at least 2 of them)",
        )


def tokamax_gpu_takes_half_precision(cfg: Config) -> Iterator[Problem]:
    """tokamax's GPU grouped GEMM takes bf16/fp16 inputs only: precision=fp32 cannot run it."""
    if not cfg.backend.gpu_fp32 and cfg.hardware.platform == "gpu" and cfg.precision.name == "fp32":
        yield Problem(
            "precision",
            "moe=tokamax on GPU runs tokamax's Mosaic GPU grouped GEMM, which takes only bf16/fp16 inputs "
            "(NotImplementedError on one H200, tokamax 0.0.17, 2026-12-03)",
            "precision=bf16, or moe=ragged_dot / moe=dense for an fp32 run "
            "(moekit verify uses fp32 unless an override sets precision=)",
        )


def te_moe_requirements(cfg: Config) -> Iterator[Problem]:
    """moe=te needs SM >= 90, one process per GPU and at least 2 processes, NCCL EP dispatch and a receive buffer of
    at least the balanced load."""
    b = cfg.backend
    if not b.te_block:
        return
    hw, c = cfg.hardware, cfg.cluster
    if hw.platform not in b.platforms or (hw.sm or 0) < (b.min_sm or 0):
        yield Problem(
            "moe",
            f"moe=te (TransformerEngine MoE block with NCCL EP) needs an NVIDIA GPU with SM >= 90 and the NGC image; "
            f"hardware={hw.name} is not one",
            "use moe=tokamax (GPU) or moe=ragged_dot (anywhere), or choose hardware=h100|h200|b200|gb200|gb300",
        )
    elif c.processes_per_node != c.gpus_per_node:
        yield Problem(
            "cluster.processes_per_node",
            f"moe=te needs one GPU per process (MaxText hardware=gpu_multiprocess; NCCL EP binds one rank per GPU), "
            f"but {c.processes_per_node} process(es) drive {c.gpus_per_node} GPUs per node",
            f"cluster.processes_per_node={c.gpus_per_node}",
        )
    elif cfg.num_processes < 2:
        # Measured on one H200 (TE 2.20.2, 2026-12-03): ep_bootstrap raises "requires world_size >= 2".
        yield Problem(
            "cluster",
            "moe=te needs at least 2 GPU processes: TE's NCCL EP forms a group of >= 2 ranks and refuses a "
            f"world of 1, but this job has {cfg.num_processes}",
            "cluster.gpus_per_node=2 cluster.processes_per_node=2 (or more GPUs), or moe=tokamax on one GPU",
        )
    if cfg.moe.dispatch != "nccl_ep":
        yield Problem(
            "moe.dispatch",
            f"the TE MoE block always dispatches and combines through NCCL EP; moe.dispatch={cfg.moe.dispatch} "
            "needs MaxText's own MoE layer",
            "moe.dispatch=nccl_ep, or keep the dispatch and use moe=tokamax",
        )
    if 0 < cfg.moe.ragged_buffer_factor < 1:
        yield Problem(
            "moe.ragged_buffer_factor",
            f"ragged_buffer_factor={cfg.moe.ragged_buffer_factor}: the TE MoE block needs a receive buffer of at "
            "least the balanced load (>= 1.0), or <= 0 for the worst case",
            "moe.ragged_buffer_factor=2.0 (the blog's) or moe.ragged_buffer_factor=-1",
        )


def te_gmm_requirements(cfg: Config) -> Iterator[Problem]:
    """moe=te_gmm needs MaxText on its ragged_dot path (no `maxtext.extra` key taking it off) and an NVIDIA GPU of
    SM 90 or newer."""
    b = cfg.backend
    if not b.hook:
        return
    off_path = {k: v for k, v in cfg.maxtext.extra.items() if k in b.pinned and v != b.pinned[k]}
    if off_path:
        yield Problem(
            "maxtext.extra",
            f"{', '.join(f'{k}={v}' for k, v in off_path.items())} takes MaxText off the ragged_dot path that "
            "moe=te_gmm hands to TE's grouped GEMM: its expert GEMMs would not run on TE",
            f"drop {', '.join(f'maxtext.extra.{k}' for k in off_path)}, or choose the back end with moe=",
        )
    hw = cfg.hardware
    if hw.platform not in b.platforms or (hw.sm or 0) < (b.min_sm or 0):
        yield Problem(
            "moe",
            "moe=te_gmm runs MaxText's expert GEMMs on TransformerEngine's grouped GEMM: an NVIDIA GPU with "
            f"SM >= 90; hardware={hw.name} is not one",
            "moe=ragged_dot (the same MaxText path with XLA's ragged_dot; runs anywhere), moe=tokamax (GPU), or "
            "hardware=h100|h200|b200|gb200|gb300",
        )


def dispatch_fits_backend(cfg: Config) -> Iterator[Problem]:
    """The dispatch is one the back end reads and the platform runs: NCCL EP only with moe=te, ring only with expert
    parallelism > 1 and a grouped-GEMM back end, no ragged all-to-all on CPU."""
    moe, ep = cfg.moe, cfg.expert_parallel_size
    if moe.dispatch == "nccl_ep" and not cfg.backend.te_block:
        yield Problem(
            "moe.dispatch",
            f"NCCL EP dispatch/combine is reached through the TE MoE block only; moe={moe.backend} has none",
            "moe=te (NGC image, SM >= 90), or moe.dispatch=ragged_all_to_all",
        )
    if moe.dispatch == "ring" and ep <= 1:
        yield Problem(
            "moe.dispatch",
            "ring of experts passes tokens around the expert-parallel ranks, but expert parallelism is 1",
            "set parallelism.ici.expert (or parallelism.dcn.expert) above 1, or moe.dispatch=ragged_all_to_all",
        )
    grouped = cfg.backend.grouped
    if moe.dispatch == "ring" and not grouped and not cfg.backend.te_block:  # te: te_moe_requirements says it
        yield Problem(
            "moe.dispatch",
            f"ring of experts is part of MaxText's grouped-GEMM layer; moe={moe.backend} never reads it",
            "moe=tokamax|ragged_dot|megablox with moe.dispatch=ring, or moe.dispatch=ragged_all_to_all",
        )
    if cfg.hardware.platform == "cpu" and grouped and ep > 1 and not cfg.ring_of_experts:
        yield Problem(
            "moe.dispatch",
            f"expert parallelism {ep} with the ragged all-to-all dispatch: XLA:CPU does not implement "
            "ragged_all_to_all",
            "moe=megablox moe.dispatch=ring (ring of experts, the expert-parallel dispatch XLA:CPU runs), or "
            f"{expert_axis_fix(cfg, 1)}",
        )
