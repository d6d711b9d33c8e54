"""`moekit plan --search`: meshes and per-device batches for one GPU count and hardware, ranked by forecast (pure).

Candidates keep the tensor axis at 1 and the expert axis inside one NVLink domain (EP traffic stays on NVLink): an
ICI slice of `s` GPUs (s divides the GPU count, s <= the domain) split into FSDP x EP, the slices joined by DCN FSDP
or DCN data parallelism (at most DCN_SPLITS degrees of it, spread in log scale), and per-device batches up to twice
the configured one. Those whose memory estimate does not fit are left out; the rest are ranked by forecast tokens/s
per device (the same model, so the same order as TFLOP/s). The count of layouts tried depends on the divisors of the
GPU count up to the domain, not on its size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from moekit.base import quantities
from moekit.config.schema import Config
from moekit.plan import forecast, memory
from moekit.plan.forecast import Param, Setup
from moekit.plan.mesh import AXES, Mesh
from moekit.plan.model import Dims
from moekit.translate.env import env

BATCHES = (1, 2, 3, 4, 6, 8, 10, 12, 16, 24, 32)
# DCN data-parallel degrees tried per ICI slice: every divisor of the slice count would make the search grow with
# the GPU count's divisors (thousands at 645,120 GPUs); a few, spread from all-FSDP to all-data, bound it.
DCN_SPLITS = 6


def _divisors(n: int) -> list[int]:
    """The divisors of n in increasing order, in about sqrt(n) steps (a million GPUs: a thousand)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def candidates(cfg: Config, experts: int) -> list[tuple[dict[str, int], dict[str, int]]]:
    """(ICI axes, DCN axes) of every layout considered for the config's GPU count."""
    n = cfg.num_devices
    domain = cfg.hardware.nvlink_domain or n
    ones = dict.fromkeys(AXES, 1)
    out = []
    for s in _divisors(n):
        if s > domain:
            continue
        for ep in _divisors(s):
            if experts % ep:
                continue
            ici = ones | {"fsdp": s // ep, "expert": ep}
            rest = n // s
            for dp in _spread(_divisors(rest), DCN_SPLITS):
                out.append((ici, ones | {"fsdp": rest // dp, "data": dp}))
    return out


def _spread(choices: list[int], k: int) -> list[int]:
    """At most k of the increasing `choices`, the ends included, the rest nearest to even steps in log scale."""
    if len(choices) <= k:
        return choices
    top = math.log(choices[-1])
    picked = {min(choices, key=lambda c: abs(math.log(c) - top * i / (k - 1))) for i in range(k)}
    return sorted(picked)


def rank(
    cfg: Config, su0: Setup, params: Mapping[str, Param], device_factor: float, top: int = 12
) -> list[dict[str, Any]]:
    """The `top` layouts that fit, best forecast first. `su0`: the forecast's setup of the config as composed (its
    MaxText keys, rates and back end; each layout replaces the shape, mesh and offload); `params`: the forecast's
    parameters (plan.forecast.params_from, with a run's fabric.json where given); `device_factor`: the memory
    estimate's calibration (data/plan_calibration.yaml)."""
    values0 = su0.values
    central = {k: q.value for k, q in params.items()}
    host = cfg.hardware.host_gib_per_gpu
    biggest = max(2 * float(cfg.train.per_device_batch_size), 1.0)
    rows = []
    layouts = candidates(cfg, int(values0.get("num_experts", 1)))
    batches = [b for b in BATCHES if b <= biggest]
    if why := quantities.problem("search_layouts", len(layouts) * len(batches)):  # counted before any is forecast
        raise ValueError(f"plan --search: {len(layouts):,} meshes x {len(batches)} batches: {why}")
    for ici, dcn in layouts:
        mesh = Mesh(ici, dcn, cfg.hardware.nvlink_domain)
        for batch in batches:
            keys = {f"ici_{a}_parallelism": ici[a] for a in AXES} | {f"dcn_{a}_parallelism": dcn[a] for a in AXES}
            values = {**values0, **keys, "per_device_batch_size": batch}
            dims = Dims.from_values(values)
            mem = memory.estimate(dims, values, mesh, cfg.hardware.hbm_gib, env(cfg), host, device_factor)
            if mem.warnings:
                continue
            su = dataclasses.replace(su0, dims=dims, values=values, mesh=mesh, offload_bytes=mem.total("host"))
            step = sum(x.seconds for x in forecast.evaluate(su, lambda k: central[k]))
            over = [f"parallelism.ici.{a}={ici[a]}" for a in ("fsdp", "expert")]
            over += [f"parallelism.dcn.{a}={dcn[a]}" for a in ("fsdp", "data") if dcn[a] > 1]
            rows.append(
                {
                    "mesh": mesh.describe(),
                    "per_device_batch_size": batch,
                    "step_s": step,
                    "tokens_per_s_per_device": dims.tokens / step,
                    "tflops_per_device": dims.train_flops() / step / 1e12,
                    "device_gib": mem.total("device") / memory.GIB,
                    "overrides": " ".join([*over, f"train.per_device_batch_size={batch}"]),
                }
            )
    rows.sort(key=lambda r: -r["tokens_per_s_per_device"])
    return rows[:top]


def mark_ties(rows: list[dict[str, Any]], low: float, high: float) -> dict[str, Any]:
    """Mark each ranked layout whose step band overlaps the first's (`tie_with_first`): the band (`low`, `high`: the
    forecast's step band as fractions of its step, the configuration's own) says the forecast cannot order them.
    Returns the summary the plan prints: the band, how many tie, and how far apart their forecasts are."""
    if not rows:
        return {"low": low, "high": high, "tied": 0, "spread": 0.0}
    first = rows[0]["step_s"]
    for r in rows:
        r["tie_with_first"] = r["step_s"] * (1 - low) <= first * (1 + high)
    tied = [r for r in rows if r["tie_with_first"]]
    spread = max(r["step_s"] for r in tied) / first - 1
    return {"low": low, "high": high, "tied": len(tied), "spread": spread}
