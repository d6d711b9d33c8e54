"""Translate a typed config into MaxText's command line (pure).

Every argument carries its origin (the group option or key that set it), so --dry-run can show which
optimization set what. Later entries win; output order is deterministic.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import yaml

from moekit.config.schema import Config, Scalar

# Strings that every YAML reader keeps as strings when unquoted (no number, bool or null look-alikes).
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:@+-]*")

TRAIN_MODULE = "maxtext.trainers.pre_train.train"

# moe=<backend> -> MaxText keys. One row per back end; the dropless/capacity value comes from moe.capacity_factor.
MOE_KEYS: dict[str, dict[str, Scalar]] = {
    "te": {"sparse_matmul": True, "megablox": False, "te_moe_block": True},
    "tokamax": {"sparse_matmul": True, "megablox": False, "use_tokamax_gmm": True},
    "ragged_dot": {"sparse_matmul": True, "megablox": False, "use_tokamax_gmm": False},
    "dense": {"sparse_matmul": False},
    "capacity": {"sparse_matmul": False},
    "megablox": {"sparse_matmul": True, "megablox": True},
}

# precision=<name> -> MaxText keys (activation dtype; quantization of dense and expert GEMMs).
PRECISION_KEYS: dict[str, dict[str, Scalar]] = {
    "fp32": {"dtype": "float32"},
    "bf16": {"dtype": "bfloat16"},
    "fp8": {"dtype": "bfloat16", "quantization": "te_fp8_currentscaling"},
    "mxfp8": {"dtype": "bfloat16", "quantization": "te_fp8_currentscaling", "te_gmm_quantization": "te_mxfp8"},
}


class Arg(NamedTuple):
    key: str
    value: Scalar
    origin: str

    def render(self) -> str:
        return f"{self.key}={format_value(self.value)}"


def format_value(value: Scalar) -> str:
    """MaxText reads each value as a YAML scalar: keep strings strings (`off` would become False)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and yaml.safe_load(text) == text:
        return text
    return "'" + text.replace("'", "''") + "'"


def maxtext_args(cfg: Config, run_dir: str, metrics_file: str) -> list[Arg]:
    """The MaxText key=value arguments for this config, deduplicated (last writer wins)."""
    args: list[Arg] = []

    def put(origin: str, **kv: Scalar) -> None:
        args.extend(Arg(k, v, origin) for k, v in kv.items())

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
    put(f"data={cfg.data.dataset_type}", dataset_type=cfg.data.dataset_type)
    put(f"moe={cfg.moe.backend}", **MOE_KEYS[cfg.moe.backend], capacity_factor=cfg.moe.capacity_factor)
    put(f"precision={cfg.precision.name}", **PRECISION_KEYS[cfg.precision.name])
    put(f"memory (remat_policy={cfg.memory.remat_policy})", remat_policy=cfg.memory.remat_policy)
    put("memory.tensors", **cfg.memory.tensors)
    ici, dcn = cfg.ici_filled, cfg.parallelism.dcn
    put("parallelism.ici", **{f"ici_{k}_parallelism": v for k, v in ici.items()})
    put("parallelism.dcn", **{f"dcn_{k}_parallelism": v for k, v in dcn.items()})
    every = cfg.checkpoint.every
    put("checkpoint", enable_checkpointing=every > 0, **({"checkpoint_period": every} if every else {}))
    if cfg.num_processes == 1:
        # One process: no coordinator to wait for.
        put("cluster (one process)", skip_jax_distributed_system=True)
    put("maxtext.extra", **cfg.maxtext.extra)

    merged: dict[str, Arg] = {}
    for arg in args:
        merged.pop(arg.key, None)
        merged[arg.key] = arg
    return list(merged.values())


def command(cfg: Config, run_dir: str, metrics_file: str, python: str = "python3") -> list[str]:
    """The full MaxText command line for one process."""
    return [python, "-m", TRAIN_MODULE, *(a.render() for a in maxtext_args(cfg, run_dir, metrics_file))]
