"""The environment every training process of a moe=te_gmm job gets (pure): which grouped GEMM takes MaxText's
ragged_dot call, and its static row counts. translate/env.py adds it through the back end's row (its `hook`)."""

from __future__ import annotations

from moekit.config.schema import Config
from moekit.te_gmm import BUCKETS_ENV, MODE_ENV

# Precision -> the grouped GEMM the worker puts behind MaxText's ragged_dot (hook.py). Only precision=fp8 quantizes
# the expert GEMMs (TE's FP8 current scaling); MXFP8 expert GEMMs come with moe=te only, so precision=mxfp8 keeps
# them in bf16 here, as every back end but te does.
MODE: dict[str, str] = {"fp32": "te", "bf16": "te", "fp8": "te_fp8", "mxfp8": "te"}


def row_buckets(expert_parallelism: int) -> int:
    """Static row counts per expert GEMM: with EP the ragged receive buffer is up to EP x the routed rows, so
    2 x EP sizes (at most 16) keep the rows computed, up to EP 8, within half a balanced load of the routed ones."""
    return 1 if expert_parallelism <= 1 else min(2 * expert_parallelism, 16)


def entries(cfg: Config) -> list[tuple[str, str, str]]:
    """(variable, value, the choice it comes from) for every process of the job."""
    auto = cfg.moe.expert_precision == "auto"
    precision = cfg.precision.name if auto else cfg.moe.expert_precision
    origin = f"precision={precision}" if auto else f"moe.expert_precision={precision}"
    ep = cfg.expert_parallel_size
    return [
        (MODE_ENV, MODE[precision], f"moe={cfg.moe.backend}, {origin} (expert GEMMs)"),
        (BUCKETS_ENV, str(row_buckets(ep)), f"moe={cfg.moe.backend}, expert parallelism {ep}"),
    ]
