"""Translate a typed config into MaxText's command line (pure).

Every argument carries its origin (the group option or key that set it), so --dry-run can show which
optimization set what. Later entries win; output order is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from moekit.config.checks.checkpoint import ITEMS
from moekit.config.kinds import attention
from moekit.config.schema import Config, Scalar
from moekit.translate import profile, values
from moekit.translate.data_keys import data_keys

TRAIN_MODULE = "maxtext.trainers.pre_train.train"

# moe.dispatch -> MaxText keys of the grouped (sparse_matmul) paths. NCCL EP lives inside te_moe_block: no key.
DISPATCH_KEYS: dict[str, dict[str, Scalar]] = {
    "ragged_all_to_all": {"use_ring_of_experts": False},
    "ring": {"use_ring_of_experts": True},
    "nccl_ep": {},
}

# precision=<name> -> MaxText keys (activation dtype; quantization of the dense GEMMs).
PRECISION_KEYS: dict[str, dict[str, Scalar]] = {
    "fp32": {"dtype": "float32"},
    "bf16": {"dtype": "bfloat16"},
    "fp8": {"dtype": "bfloat16", "quantization": "te_fp8_currentscaling"},
    "mxfp8": {"dtype": "bfloat16", "quantization": "te_fp8_currentscaling"},
}

# precision=<name> -> the expert grouped GEMMs' quantization. Only the TE MoE block reads it (MaxText 0.2.5), and
# it must be set there; other back ends run their expert GEMMs in the activation dtype.
EXPERT_GEMM_KEYS: dict[str, dict[str, Scalar]] = {
    "fp32": {"te_gmm_quantization": "te_no_quant"},
    "bf16": {"te_gmm_quantization": "te_no_quant"},
    "fp8": {"te_gmm_quantization": "te_no_quant"},  # TE's grouped GEMM offers MXFP8 or nothing
    "mxfp8": {"te_gmm_quantization": "te_mxfp8"},
}


class Arg(NamedTuple):
    """One MaxText argument and the config choice it comes from."""

    key: str
    value: Scalar | list[str]
    origin: str

    def render(self) -> str:
        """The argument as MaxText reads it: `key=value`, the value as YAML that reads back unchanged."""
        return f"{self.key}={values.maxtext(self.value)}"


# A phase of maxtext_args adds its arguments through `put(origin, **key_values)`, in order.
_Put = Callable[..., None]


def maxtext_args(cfg: Config, run_dir: str, metrics_file: str) -> list[Arg]:
    """The MaxText key=value arguments for this config, deduplicated (last writer wins).

    The groups write in a fixed order (model and data, the MoE block and precision, memory and layout, checkpoints
    and processes, then profiling and maxtext.extra last, so that an explicit extra key wins).
    """
    args: list[Arg] = []

    def put(origin: str, **kv: Scalar) -> None:
        args.extend(Arg(k, v, origin) for k, v in kv.items())

    _model_and_data(cfg, run_dir, metrics_file, put)
    _moe_and_precision(cfg, put)
    _memory_and_layout(cfg, put)
    _checkpoint_and_processes(cfg, put)
    put("profile=on", **profile.maxtext_keys(cfg))
    put("maxtext.extra", **cfg.maxtext.extra)

    merged: dict[str, Arg] = {}
    for arg in args:
        merged.pop(arg.key, None)
        merged[arg.key] = arg
    return list(merged.values())


def _model_and_data(cfg: Config, run_dir: str, metrics_file: str, put: _Put) -> None:
    """The run's outputs, the model's shape and routing, the hardware, the training schedule and the data."""
    m, t = cfg.model, cfg.train
    put(
        "run",
        run_name=cfg.run_name,
        base_output_directory=run_dir,
        metrics_file=metrics_file,
        log_period=1,
    )
    put(f"model={m.name}", model_name=m.name, override_model_config=True)
    put(
        "model",
        base_num_decoder_layers=m.num_layers,
        first_num_dense_layers=m.first_dense_layers,
        num_experts=m.num_experts,
        num_experts_per_tok=m.experts_per_token,
    )
    put("model.routing", decoder_block=m.decoder_block, **m.routing.model_dump())
    put("model.extra", **m.extra)
    put(f"hardware={cfg.hardware.name}", hardware=cfg.maxtext_hardware)
    put(
        "train",
        steps=t.steps,
        per_device_batch_size=t.per_device_batch_size,
        max_target_length=t.seq_len,
        learning_rate=t.learning_rate,
        warmup_steps_fraction=t.warmup_steps_fraction,
        init_weights_seed=t.seed,
        data_shuffle_seed=t.seed,
    )
    put(f"data={cfg.data.dataset_type}", **data_keys(cfg.data))


def _moe_and_precision(cfg: Config, put: _Put) -> None:
    """The MoE back end and its dispatch, the TE block's buffers and expert GEMMs, and the precision's keys."""
    moe = cfg.moe
    put(f"moe={moe.backend}", **cfg.backend.maxtext, capacity_factor=moe.capacity_factor)
    if cfg.backend.sparse:
        put(f"moe.dispatch={moe.dispatch}", **DISPATCH_KEYS[moe.dispatch])
    if cfg.backend.te_block:
        put(
            f"moe={moe.backend}",
            ragged_buffer_factor=moe.ragged_buffer_factor,
            te_ep_overflow_check_every_n_steps=moe.overflow_check_every,
        )
        put(f"moe=te, precision={cfg.precision.name} (expert GEMMs)", **EXPERT_GEMM_KEYS[cfg.precision.name])
    elif moe.ragged_buffer_factor > 0:
        put("moe.ragged_buffer_factor", ragged_buffer_factor=moe.ragged_buffer_factor)
    put(f"precision={cfg.precision.name}", **PRECISION_KEYS[cfg.precision.name])


def _memory_and_layout(cfg: Config, put: _Put) -> None:
    """Rematerialization and offload, the attention kernel, and the mesh (ICI and DCN axes)."""
    mem = f"memory={cfg.memory.name}"
    put(mem, remat_policy=cfg.memory.remat_policy, **cfg.memory.tensors)
    if cfg.model.attention:
        put("model.attention", attention=attention.maxtext_kernel(cfg.model.attention))
    ici, dcn = cfg.ici_filled, cfg.parallelism.dcn
    put("parallelism.ici", **{f"ici_{k}_parallelism": v for k, v in ici.items()})
    put("parallelism.dcn", **{f"dcn_{k}_parallelism": v for k, v in dcn.items()})


def _checkpoint_and_processes(cfg: Config, put: _Put) -> None:
    """Checkpointing (period, initial weights, save on preemption) and what the number of processes asks of JAX."""
    every = cfg.checkpoint.every
    put("checkpoint", enable_checkpointing=every > 0, **({"checkpoint_period": every} if every else {}))
    if cfg.checkpoint.init_from:
        put("checkpoint.init_from", load_parameters_path=cfg.checkpoint.init_from.rstrip("/") + "/" + ITEMS)
    if every:
        # On SIGTERM (JAX's preemption notice) save at the next step boundary, then stop (run/preemption.py).
        put("checkpoint (preemption)", enable_autocheckpoint=True)
    if cfg.num_processes == 1:
        # One process: no coordinator to wait for.
        put("cluster (one process)", skip_jax_distributed_system=True)
    else:
        # moekit's worker joins the rendezvous before MaxText (worker/process.py) and MaxText 0.2.5 then skips its own
        # jax.distributed.initialize; should it ever be the one to join, it waits this long too. MaxText reads only this
        # key (max_utils.maybe_initialize_jax_distributed_system; its default 300), never an environment variable.
        put("cluster.rendezvous_timeout_s", jax_distributed_initialization_timeout=cfg.cluster.rendezvous_timeout_s)
    if cfg.num_processes > 1 and cfg.hardware.platform == "cpu":
        # Only process 0 writes JAX's persistent compilation cache, so only process 0 finds its executable there: it
        # starts the first step minutes before the others finish compiling, and XLA:CPU's Gloo gives up after 30 s
        # (measured on this 2-core machine, 2026-12-03). Compile every time instead.
        put("cluster (CPU processes)", jax_cache_dir="")
