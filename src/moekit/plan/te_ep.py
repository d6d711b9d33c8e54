"""The TE MoE block's NCCL EP receive buffers per rank (moe=te): the one place moekit sizes them (pure).

Source, read from TransformerEngine 2.20.2 (the wheel moekit's GPU runs use) and MaxText 0.2.5:

- MaxText `utils/max_utils.py` `maybe_bootstrap_te_moe` bootstraps NCCL EP once per process with
  `max_tokens_per_rank = (batch // (fsdp x ep)) x seq` (batch: the global batch of one model call, so a data or
  tensor axis does not shrink it), `recv_capacity_per_rank = get_moe_recv_capacity_per_rank(..., factor)` where
  factor is `ragged_buffer_factor` when > 0, else None (the worst case), and `drop_on_overflow = capacity < the
  worst case`.
- TE `transformer_engine/jax/moe.py` `get_moe_recv_capacity_per_rank` (mirrored by `capacity` below):
  worst case = min(local experts x align(ep x T), align(ep x T x min(top_k, local experts) + 127 x nonempty
  local experts)); with a factor, align(local experts x align(ceil(T x top_k / local experts))) x factor, capped at
  the worst case; alignment 128 rows (`_ALIGN_SIZE`, NCCL EP's expert-major slab).
- TE `transformer_engine/jax/cpp_extensions/ep.py` (`EpDispatchPrimitive.abstract`): dispatch returns
  `recv_tokens [capacity, hidden]` in bf16 (`ep_bootstrap` accepts only bf16) and `recv_topk_weights [capacity]`
  in fp32; the combine's backward returns a `[capacity, hidden]` gradient. These are XLA buffers of every MoE layer
  call; NCCL EP's own staging buffers (`ncclEpCreateGroup`, sized inside libnccl_ep) are not counted.
- What an overflowing step does (TE `jax/ep.py` `ep_bootstrap`, MaxText `trainers/pre_train/train.py`): with
  drop_on_overflow NCCL EP drops the tokens past the capacity and counts them in `total_recv_tokens`; MaxText logs
  `learning/te_moe_capacity_overflow` each step and, at its host check every
  `te_ep_overflow_check_every_n_steps` steps (moe.overflow_check_every), stops the run with "TE MoE receive
  capacity overflow at training step N". Its message says the update was skipped; MaxText 0.2.5's train step
  feeds the flag only to the metrics and that check, so moekit does not count on a skipped update.
  Without drop_on_overflow (the worst case reserved) no step can overflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moekit.plan.model import Dims

ALIGN = 128
"""Rows per expert slab in NCCL EP's expert-major receive buffer (TE 2.20.2 jax/moe.py `_ALIGN_SIZE`)."""
TOKEN_BYTES = 2
"""bf16: the only dispatch dtype `ep_bootstrap` accepts (TE 2.20.2 jax/ep.py)."""
WEIGHT_BYTES = 4
"""fp32 top-k weight per receive slot."""
SOURCE = "TransformerEngine 2.20.2 transformer_engine/jax/moe.py get_moe_recv_capacity_per_rank"


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def capacity(experts: int, top_k: int, tokens_per_rank: int, ep: int, factor: float | None = None) -> int:
    """Receive slots of one EP rank, as TE 2.20.2 reserves them: the dropless worst case when `factor` is None,
    else the balanced load x `factor` (>= 1), capped at the worst case."""
    if experts <= 0 or top_k <= 0 or tokens_per_rank <= 0 or ep <= 0 or experts % ep:
        raise ValueError(f"no receive capacity for {experts} experts, top-{top_k}, {tokens_per_rank} tokens, EP {ep}")
    local = experts // ep
    group = ep * tokens_per_rank
    assignments = group * min(top_k, local)
    padded = assignments + (ALIGN - 1) * min(local, assignments)
    worst = min(local * _align(group), _align(padded))
    if factor is None:
        return worst
    balanced = local * _align(-(-tokens_per_rank * top_k // local))
    return min(_align(math.ceil(balanced * factor)), worst)


@dataclass(frozen=True, slots=True)
class Buffers:
    """The TE block's receive buffers of one EP rank and one MoE layer call."""

    ep: int
    tokens_per_rank: int
    """Tokens one rank dispatches per call (MaxText's max_tokens_per_rank)."""
    top_k: int
    hidden: int
    factor: float | None
    """ragged_buffer_factor, or None: the worst case reserved."""
    capacity: int
    """Receive slots TE reserves (recv_capacity_per_rank)."""
    worst: int
    """TE's exact dropless worst case (its alignment included)."""
    check_every: int
    """Steps between MaxText's host checks of the overflow flag."""

    @property
    def drops(self) -> bool:
        """drop_on_overflow: the capacity is below the worst case, so a step can overflow."""
        return self.capacity < self.worst

    @property
    def naive_rows(self) -> int:
        """The no-drop bound as ep_bootstrap's docstring states it: ep x tokens per rank x top_k."""
        return self.ep * self.tokens_per_rank * self.top_k

    def bytes_of(self, rows: int) -> int:
        """Bytes of the receive buffer: rows x hidden in bf16 plus one fp32 weight per row."""
        return rows * (self.hidden * TOKEN_BYTES + WEIGHT_BYTES)

    def lines(self) -> list[str]:
        """What the plan prints: the capacity with its formula and source, the worst case beside it, an overflow."""
        gib = 2**30
        how = (
            f"balanced load x ragged_buffer_factor {self.factor:g}, capped at the worst case"
            if self.factor is not None
            else "the dropless worst case (ragged_buffer_factor <= 0)"
        )
        out = [
            f"TE NCCL EP receive buffer per rank and MoE layer: {self.capacity:,} rows x (hidden {self.hidden} x "
            f"{TOKEN_BYTES} B + {WEIGHT_BYTES} B) = {self.bytes_of(self.capacity) / gib:.2f} GiB ({how}; {SOURCE})",
            f"no-drop worst case: {self.worst:,} rows = {self.bytes_of(self.worst) / gib:.2f} GiB (EP {self.ep} x "
            f"{self.tokens_per_rank:,} tokens per rank x top_k {self.top_k} x {self.hidden} x {TOKEN_BYTES} B = "
            f"{self.naive_rows * self.hidden * TOKEN_BYTES / gib:.2f} GiB before TE's 128-row alignment)",
        ]
        if self.drops:
            out.append(
                "an overflowing step: NCCL EP drops the tokens past the capacity (drop_on_overflow) and counts them; "
                f"MaxText logs learning/te_moe_capacity_overflow and stops the run at its next check (every "
                f"{self.check_every} steps: moe.overflow_check_every) naming the step; moekit's failure class: "
                "TE receive buffer overflow"
            )
        else:
            out.append("no step can overflow: the worst case is reserved (drop_on_overflow off)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data for `moekit plan --format json` (memory.te_ep)."""
        return {
            "ep": self.ep,
            "tokens_per_rank": self.tokens_per_rank,
            "top_k": self.top_k,
            "hidden": self.hidden,
            "ragged_buffer_factor": self.factor,
            "capacity_rows": self.capacity,
            "capacity_gib": self.bytes_of(self.capacity) / 2**30,
            "worst_case_rows": self.worst,
            "worst_case_gib": self.bytes_of(self.worst) / 2**30,
            "drop_on_overflow": self.drops,
            "overflow_check_every": self.check_every,
            "source": SOURCE,
        }


def buffers(dims: Dims, values: Mapping[str, Any], ep: int, fsdp: int, devices: int) -> Buffers | None:
    """The receive buffers of a config whose MaxText keys `values` (shape: `dims`) turn on the TE MoE block, None
    otherwise; `ep`, `fsdp`: the mesh's expert and FSDP sizes (ICI x DCN), `devices` all of them."""
    if not values.get("te_moe_block") or dims.experts <= 1:
        return None
    ga = max(int(values.get("gradient_accumulation_steps", 1) or 1), 1)
    batch = int(round(dims.batch * devices)) // ga
    tokens = batch // max(fsdp * ep, 1) * dims.seq
    given = int(values.get("moe_expert_input_dim", -1) or -1)
    hidden = given if given > 0 else dims.emb
    raw = float(values.get("ragged_buffer_factor", -1.0) or -1.0)
    factor = raw if raw > 0 else None
    if ep < 1 or tokens <= 0 or dims.experts % ep:
        return None  # refused by the config checks (experts divide over EP; a batch of whole sequences per rank)
    return Buffers(
        ep=ep,
        tokens_per_rank=tokens,
        top_k=dims.top_k,
        hidden=hidden,
        factor=factor,
        capacity=capacity(dims.experts, dims.top_k, tokens, ep, factor),
        worst=capacity(dims.experts, dims.top_k, tokens, ep),
        check_every=int(values.get("te_ep_overflow_check_every_n_steps", 20)),
    )
