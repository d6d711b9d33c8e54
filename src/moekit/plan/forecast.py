"""The forecast of one device's training step, built from measured parts (pure).

Compute is split into op classes (routed-expert grouped GEMM, other GEMMs, attention, other compute, recompute);
each class's time is its work on this configuration (FLOPs, or bytes for memory-bound work) over a rate: the
hardware's datasheet peak (or HBM bandwidth) times a named efficiency measured on one H200 (data/forecast.yaml,
derived from the breakdowns in data/breakdowns.yaml by plan/calibrate.py). Communication is per link class
latency + bytes / achieved bandwidth; overlap rules decide what of it lands on the step. Routing imbalance,
host-offload traffic and a synchronisation term that grows with the number of devices complete the step.

Every parameter has a value, a low-high range and a source; the band of the forecast combines the step-time
effect of each parameter at the ends of its range in quadrature (each taken as independent). docs/plan.md
gives every formula and the validation table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from moekit.config.kinds.backends import BACKENDS
from moekit.plan import memory, network
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims, dtype_bytes

LOW_PRECISION = ("fp8", "mxfp8")


@dataclass(frozen=True, slots=True)
class Param:
    """One named parameter: its value, the ends of its stated uncertainty, and where it comes from."""

    value: float
    low: float
    high: float
    source: str


def params_from(table: Mapping[str, Any], fabric: Mapping[str, Any] | None = None) -> dict[str, Param]:
    """The parameters of data/forecast.yaml (`params:`), with the achieved link fractions a fabric.json measured
    replacing the defaults where it has them."""
    out = {}
    for name, e in table["params"].items():
        v = float(e["value"])
        if "spread" in e:
            low, high = sorted((v * (1 - float(e["spread"])), v * (1 + float(e["spread"]))))
        else:
            low, high = float(e.get("low", v)), float(e.get("high", v))
        out[name] = Param(v, low, high, e["source"])
    if fabric:
        out |= fabric_params(fabric)
    return out


# fabric.json collective -> the parameter its measured fraction replaces, per link class
_FABRIC = {
    ("all_to_all", "scale_up"): "link.scale_up.all_to_all",
    ("all_to_all", "scale_out"): "link.scale_out.all_to_all",
    ("all_gather", "scale_up"): "link.scale_up.collective",
    ("all_gather", "scale_out"): "link.scale_out.collective",
}


def fabric_params(record: Mapping[str, Any]) -> dict[str, Param]:
    """Achieved fractions of the nominal link rate from a run's fabric.json: per collective and link class, the
    ratio at the largest size measured (smaller sizes measure latency), with the smallest size's time as the
    latency. The band is +-10% of the measured fraction (run-to-run spread of nccl-tests-style timings)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    small: dict[tuple[str, str], dict[str, Any]] = {}
    for r in record.get("results", []):
        key = (r.get("collective"), r.get("link_class"))
        if key not in _FABRIC or r.get("time_s") is None:
            continue
        if r.get("ratio") is not None and (key not in best or r["size_bytes"] > best[key]["size_bytes"]):
            best[key] = r
        if key not in small or r["size_bytes"] < small[key]["size_bytes"]:
            small[key] = r
    out = {}
    for key, r in best.items():
        f = float(r["ratio"])
        src = f"{FABRIC_SOURCE}: {key[0]} of {r['size_bytes']:,} B on {key[1]} ({f:.0%} of nominal)"
        out[_FABRIC[key]] = Param(f, 0.9 * f, min(1.0, 1.1 * f), src)
    for key, r in small.items():
        name = f"latency.{key[1]}_us"
        t = float(r["time_s"]) * 1e6
        src = f"{FABRIC_SOURCE}: {key[0]} of {r['size_bytes']:,} B on {key[1]} took {t:.3g} us"
        out[name] = Param(t, 0.5 * t, 1.5 * t, src)
    return out


FABRIC_SOURCE = "measured by the run's fabric check"


def links_label(params: Mapping[str, Param]) -> str:
    """Which link parameters a fabric.json measured (the rest keep data/forecast.yaml's defaults)."""
    measured = sorted(n for n, q in params.items() if q.source.startswith(FABRIC_SOURCE))
    if not measured:
        return "default link fractions (data/forecast.yaml)"
    return f"measured by --fabric: {', '.join(measured)}; other link parameters: defaults (data/forecast.yaml)"


def fabric_mismatch(record: Mapping[str, Any], hardware: str) -> str | None:
    """Why a fabric.json cannot stand for the links of `hardware` (measured on other hardware, on a CPU backend, or
    on hardware it does not name), or None when it can."""
    measured_on = record.get("hardware")
    names = " ".join(str(v) for v in (record.get("link_names") or {}).values())
    if measured_on == "cpu" or (names and "NVLink" not in names):
        return f"it was measured on a CPU backend (hardware={measured_on}), whose links say nothing of {hardware}'s"
    if measured_on is None:
        return f"it does not name the hardware it was measured on, so it may not be {hardware}'s"
    if measured_on != hardware:
        return f"it was measured on hardware={measured_on}, not on {hardware}, whose links differ"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """What the forecast needs to know about one configuration, read from the composed config at the edge."""

    dims: Dims
    values: Mapping[str, Any]
    mesh: Mesh
    hardware: str
    arch: str
    peak_bf16: float
    """TFLOP/s."""
    peak_fp8: float | None
    hbm_tb_s: float
    backend: str
    precision: str
    expert_precision: str
    multistream: bool
    """XLA multi-stream collectives (xla=blog): FSDP/DP collectives overlap compute and each other."""
    links: network.Links | None
    host_gb_s: float | None
    """Host link, GB/s per GPU per direction."""
    offload_bytes: float = 0.0
    """Activations offloaded to pinned host memory per step (bytes, each way)."""
    fits: bool = True


@dataclass(frozen=True, slots=True)
class Part:
    """One term of the step: its name, seconds, what it is made of and the sources of its parameters."""

    name: str
    seconds: float
    how: str
    source: str
    kind: str = "compute"
    """compute, communication, imbalance, offload or synchronisation."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """The step of one device: its parts, FLOPs (MaxText's count) and the band."""

    parts: list[Part]
    flops: float
    tokens: float
    peak_tflops: float
    step_low_s: float = 0.0
    step_high_s: float = 0.0
    band: list[dict[str, Any]] = field(default_factory=list)
    """The parameters that move the step most (name, seconds each way)."""

    @property
    def step_s(self) -> float:
        """The forecast step time: the sum of its parts' seconds."""
        return sum(p.seconds for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        """The JSON `forecast` object. The bands of TFLOP/s (`low`, `high`), tokens/s and MFU are the step-time band's
        ends (`step_high_s` gives each low end, `step_low_s` each high end)."""
        tf = self.flops / self.step_s / 1e12
        return {
            "step_s": self.step_s,
            "step_low_s": self.step_low_s,
            "step_high_s": self.step_high_s,
            "tflops_per_device": tf,
            "low": self.flops / self.step_high_s / 1e12,
            "high": self.flops / self.step_low_s / 1e12,
            "tokens_per_s_per_device": self.tokens / self.step_s,
            "tokens_per_s_per_device_low": self.tokens / self.step_high_s,
            "tokens_per_s_per_device_high": self.tokens / self.step_low_s,
            "mfu": tf / self.peak_tflops,
            "mfu_low": self.flops / self.step_high_s / 1e12 / self.peak_tflops,
            "mfu_high": self.flops / self.step_low_s / 1e12 / self.peak_tflops,
            "mfu_peak_tflops": self.peak_tflops,
            "parts": [
                {"name": p.name, "seconds": p.seconds, "kind": p.kind, "how": p.how, "source": p.source}
                for p in self.parts
            ],
            "band_drivers": self.band,
        }


# ---- work per class ----


def _saved(values: Mapping[str, Any]) -> set[str]:
    saved, offloaded = memory.tensor_places(values)
    return saved | offloaded


@dataclass(frozen=True, slots=True)
class Work:
    """Forward FLOPs per class (x3 for a training step, MaxText's convention) and what the policy recomputes."""

    grouped: float
    """Routed-expert GEMMs over the routed rows (sparse back ends)."""
    other: float
    """Attention projections, dense and shared MLPs, router, unembedding."""
    dense_experts: float
    """The masked dense path: every expert on every token."""
    attention: float
    recompute: dict[str, float]
    """Forward FLOPs recomputed in the backward, per class."""


def work(d: Dims, values: Mapping[str, Any], backend: str) -> Work:
    """The forward FLOPs per class of one device's step, and the forward FLOPs the remat policy recomputes."""
    t = d.tokens
    in_proj, out_proj, attention = d.attention_flops()
    mlp_dense = d.dense_layers * 2 * t * d.mlp_params(d.mlp)
    routed = shared = router = dense_experts = 0.0
    if d.experts > 1:
        shared = d.moe_layers * 2 * t * d.shared * d.mlp_params(d.moe_mlp)
        router = d.moe_layers * 2 * t * d.emb * d.experts
        if not BACKENDS[backend].sparse:  # every expert on every token, or each expert on its capacity's rows
            b = BACKENDS[backend]
            rows = d.experts if b.dropless else d.top_k * float(values.get("capacity_factor", 1.0))
            dense_experts = d.moe_layers * 2 * t * rows * d.mlp_params(d.moe_mlp)
        else:
            routed = d.moe_layers * 2 * t * d.top_k * d.mlp_params(d.moe_mlp)
    unembed = 2 * t * d.emb * d.vocab
    other = d.layers * (in_proj + out_proj) + mlp_dense + shared + router + unembed
    kept = _saved(values)
    in_kept = {"query_proj", "qkv_proj"} & kept
    rc_other = router
    rc_other += 0 if in_kept else d.layers * in_proj
    rc_other += 0 if "out_proj" in kept else d.layers * out_proj
    mlp_in = bool({"mlpwi_0", "mlpwi"} & kept)
    rc_other += (mlp_dense + shared) * ((0 if mlp_in else 2 / 3) + (0 if "mlpwo" in kept else 1 / 3))
    routed_in = bool({"moe_mlpwi_0", "mlpwi_0"} & kept)
    routed_out = bool({"moe_mlpwo", "mlpwo"} & kept) or bool(values.get("te_moe_block"))
    rc_grouped = routed * ((0 if routed_in else 2 / 3) + (0 if routed_out else 1 / 3))
    rc_dense = dense_experts * ((0 if routed_in else 2 / 3) + (0 if routed_out else 1 / 3))
    rc_attention = 0 if "context" in kept else d.layers * attention
    return Work(
        routed,
        other,
        dense_experts,
        d.layers * attention,
        {"grouped": rc_grouped, "other": rc_other + rc_dense, "attention": rc_attention},
    )


def _matrices(d: Dims) -> list[tuple[int, int, float]]:
    """(K, N, how many per step's layers) of the dense GEMM weights: what FP8 quantizes besides the experts."""
    out: list[tuple[int, int, float]] = []
    if d.mla:
        qk = d.qk_nope + d.qk_rope
        out += [(d.emb, d.q_lora, d.layers), (d.q_lora, d.heads * qk, d.layers)] if d.q_lora else []
        out += [(d.emb, d.heads * qk, d.layers)] if not d.q_lora else []
        out += [(d.emb, d.kv_lora + d.qk_rope, d.layers), (d.kv_lora, d.heads * (d.qk_nope + d.v_head), d.layers)]
        out += [(d.heads * d.v_head, d.emb, d.layers)]
    else:
        out += [(d.emb, (d.heads + 2 * d.kv_heads) * d.head_dim, d.layers), (d.heads * d.head_dim, d.emb, d.layers)]
    if d.dense_layers:
        out += [(d.emb, d.mlp, 2 * d.dense_layers), (d.mlp, d.emb, d.dense_layers)]
    if d.shared and d.moe_layers:
        out += [(d.emb, d.moe_mlp, 2 * d.shared * d.moe_layers), (d.moe_mlp, d.emb, d.shared * d.moe_layers)]
    return out


def _quant_elements(t: float, mats: list[tuple[int, int, float]]) -> float:
    """Elements FP8 casts per step for GEMMs over t rows: input (t x K), output gradient (t x N), weight (K x N)."""
    return sum(n * (t * k + t * nn + k * nn) for k, nn, n in mats)


def expected_max(n: int) -> float:
    """Expected largest of n standard normal draws (Blom's approximation); 0 for n <= 1."""
    if n <= 1:
        return 0.0
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def dedup(ep: int, k: int) -> float:
    """Bytes NCCL EP sends per token over a per-expert all-to-all's: a token goes once to each rank holding one of its
    k experts, ep x (1 - (1 - 1/ep)^k) ranks on average under uniform routing, instead of k copies."""
    return ep * (1 - (1 - 1 / ep) ** k) / k if ep > 1 and k > 0 else 1.0


def rows_per_expert(d: Dims, mesh: Mesh) -> float:
    """Routed rows each local expert's GEMM sees on average: tokens x top_k x EP / experts."""
    return d.tokens * d.top_k * mesh.size("expert") / max(1, d.experts)


def _tile(m: float, tile: float) -> float:
    """Share of a grouped GEMM's work that is not padding: each group pads half a tile of rows on average."""
    return m / (m + tile / 2)


# ---- the step ----


def evaluate(su: Setup, p: Callable[[str], float], src: Callable[[str], str] | None = None) -> list[Part]:
    """The parts of one device's step with the parameters `p(name)` (sources from `src(name)`)."""
    src = src or (lambda _n: "")
    d, v, mesh = su.dims, su.values, su.mesh
    w = work(d, v, su.backend)
    bw = su.hbm_tb_s * 1e12 * p("hbm.fraction")
    bw_ref = p("hbm.h200_tb_s") * 1e12 * p("hbm.fraction")
    peak16 = su.peak_bf16 * 1e12
    peak8 = (su.peak_fp8 or su.peak_bf16) * 1e12
    low = su.precision in LOW_PRECISION
    quant = "quant.mxfp8_bytes" if su.precision == "mxfp8" else "quant.current_bytes"
    quant_bytes = p(quant)
    parts: list[Part] = []

    # other GEMMs (attention projections, dense/shared MLPs, router, unembedding)
    other_rate = peak16 * p("eff.other_gemm")
    other_s = 3 * w.other / other_rate
    how_other = f"{3 * w.other / 1e12:.4g} TFLOP at {p('eff.other_gemm'):.0%} of the BF16 peak"
    if low:
        unembed = 3 * 2 * d.tokens * d.emb * d.vocab
        q_el = _quant_elements(d.tokens, _matrices(d))
        eff8 = p("eff.other_gemm") * p("lowp.relative_eff")
        other_s = unembed / other_rate + (3 * w.other - unembed) / (peak8 * eff8) + q_el * quant_bytes / bw
        how_other = (
            f"{3 * w.other / 1e12:.4g} TFLOP at {eff8:.0%} of the FP8 peak (unembedding BF16) + "
            f"casting {q_el / 1e9:.3g} G elements x {quant_bytes:g} B at HBM bandwidth"
        )
    dense_s = 0.0
    if w.dense_experts:
        dense_s = 3 * w.dense_experts / (peak16 * p("eff.dense_experts"))
        el = d.moe_layers * d.tokens * d.experts * d.moe_mlp
        dense_s += el * p("dense.overhead_s_per_elem") * p("hbm.h200_tb_s") / su.hbm_tb_s
        how_other += f"; masked dense experts {3 * w.dense_experts / 1e12:.4g} TFLOP + [tokens x experts x FFN] traffic"
    parts.append(
        Part(
            "other GEMMs",
            other_s + dense_s,
            how_other,
            "eff.other_gemm: "
            + src("eff.other_gemm")
            + ("; eff.dense_experts: " + src("eff.dense_experts") if w.dense_experts else "")
            + (f"; lowp.relative_eff: {src('lowp.relative_eff')}; {quant}: {src(quant)}" if low else ""),
        )
    )

    # routed-expert grouped GEMM
    gg_s = 0.0
    if w.grouped:
        m = rows_per_expert(d, mesh)
        tile = _tile(m, p("gemm.tile_rows")) / _tile(p("gemm.ref_rows"), p("gemm.tile_rows"))
        eff = p(f"eff.grouped.{su.backend}") * tile
        expert_low = low and su.expert_precision != "bf16" and BACKENDS[su.backend].te_experts
        how = f"{3 * w.grouped / 1e12:.4g} TFLOP, {m:,.0f} rows per local expert"
        if expert_low:
            rows = d.tokens * d.top_k
            el = d.moe_layers * (rows * (d.emb + 2 * d.moe_mlp) + rows * (d.emb + d.moe_mlp))
            el += d.moe_layers * d.experts / mesh.size("expert") * d.emb * d.moe_mlp * 3
            eff *= p("lowp.relative_eff")
            gg_s = 3 * w.grouped / (peak8 * eff) + el * quant_bytes / bw
            how += f", {su.precision.upper()} at {eff:.0%} of the FP8 peak + casting {el / 1e9:.3g} G elements"
        else:
            gg_s = 3 * w.grouped / (peak16 * eff)
            how += f" at {eff:.0%} of the BF16 peak"
        gg_src = f"eff.grouped.{su.backend}: " + src(f"eff.grouped.{su.backend}")
        if expert_low:
            gg_src += f"; lowp.relative_eff: {src('lowp.relative_eff')}; {quant}: {src(quant)}"
        gg_src += f"; gemm.tile_rows: {src('gemm.tile_rows')}"
        parts.append(Part("grouped GEMM", gg_s, how, gg_src))

    # attention
    attn_kind = str(v.get("attention", "autoselected"))
    att_s = 3 * w.attention / (peak16 * p("eff.attention"))
    how = f"{3 * w.attention / 1e12:.4g} TFLOP (causal, MaxText's count) at {p('eff.attention'):.0%} of the BF16 peak"
    att_src = "eff.attention: " + src("eff.attention")
    if attn_kind == "dot_product":
        el = d.layers * d.batch * d.heads * d.seq * d.seq
        att_s += el * p("attention.dot_product_s_per_elem") * p("hbm.h200_tb_s") / su.hbm_tb_s
        how += f" + unfused softmax over {el / 1e9:.3g} G logits at HBM bandwidth"
        att_src += "; attention.dot_product_s_per_elem: " + src("attention.dot_product_s_per_elem")
    parts.append(Part("attention", att_s, how, att_src))

    # other compute (memory-bound): elementwise work per layer, dispatch/combine, optimizer, expert-bias scatter
    elem = d.layers * d.tokens * d.emb * p("other.s_per_elem") * bw_ref / bw
    perm = 0.0
    if d.experts > 1 and BACKENDS[su.backend].sparse:
        perm = d.moe_layers * d.tokens * d.top_k * d.emb * p("other.permute_s_per_elem") * bw_ref / bw
    wb = dtype_bytes(v.get("weight_dtype", "float32"))
    mu = dtype_bytes(v.get("mu_dtype") or v.get("weight_dtype", "float32"))
    local = d.expert_params() / (mesh.size("expert") * mesh.size("fsdp") * mesh.size("tensor"))
    local += d.other_params() / (mesh.size("fsdp") * mesh.size("expert") * mesh.size("tensor"))
    opt = local * (4 * wb + 2 * mu + wb) / bw
    bias = 0.0
    # Grouped back ends without a hook scatter the expert biases' gradient (te_gmm's hook: a matmul, te_gmm/bias.py)
    b = BACKENDS[su.backend]
    if v.get("mlp_bias") and d.experts > 1 and b.grouped and b.hook is None:
        bias = d.moe_layers * d.tokens * d.top_k * (2 * d.moe_mlp + d.emb) * p("bias.scatter_s_per_elem")
    compute = sum(x.seconds for x in parts) + elem + perm + opt + bias
    idle = compute * p("other.idle_fraction")
    how = (
        f"elementwise {elem * 1e3:.4g} ms + dispatch/combine {perm * 1e3:.4g} ms + optimizer {opt * 1e3:.4g} ms "
        f"({local / 1e9:.3g}B local params) + launch gaps {p('other.idle_fraction'):.1%}"
    )
    if bias:
        how += f" + expert-bias gradient as scatter-add {bias * 1e3:.4g} ms"
    parts.append(
        Part(
            "other compute",
            elem + perm + opt + bias + idle,
            how,
            "other.s_per_elem: " + src("other.s_per_elem") + "; other.idle_fraction: " + src("other.idle_fraction"),
        )
    )

    # recompute: the forward the remat policy does again, at each class's rate, times the share measured to cost
    rc = w.recompute
    rc_s = rc["other"] / (peak16 * p("eff.other_gemm")) + rc["attention"] / (peak16 * p("eff.attention"))
    if w.grouped:
        rc_s += rc["grouped"] / w.grouped * gg_s / 3
    rc_s *= p("recompute.cost_share")
    parts.append(
        Part(
            "recompute",
            rc_s,
            f"{sum(rc.values()) / 1e12:.4g} TFLOP recomputed (remat policy) x {p('recompute.cost_share'):.2f} "
            "measured cost share",
            "recompute.cost_share: " + src("recompute.cost_share"),
        )
    )
    compute_s = sum(x.seconds for x in parts)
    parts += communication(su, p, src, compute_s, gg_s)
    return parts


def _link_sources(src: Callable[[str], str], kind: str, flows: list[network.Traffic]) -> str:
    """The sources of the achieved fraction and the latency of each link class the `flows` use."""
    use = (("scale_up", sum(f.ici_bytes for f in flows)), ("scale_out", sum(f.dcn_bytes for f in flows)))
    classes = [c for c, b in use if b] or ["scale_up"]
    names = [n for c in classes for n in (f"link.{c}.{kind}", f"latency.{c}_us")]
    return "; ".join(f"{n}: {src(n)}" for n in names)


def _hop(n: int, mesh: Mesh) -> str:
    """The latency parameter of the synchronisation's barrier hops."""
    return "latency.scale_out_us" if n > mesh.slice_devices else "latency.scale_up_us"


def _rate(su: Setup, p: Callable[[str], float], link: str, kind: str) -> float:
    """Achieved bytes/s per GPU per direction on a link class for a collective kind."""
    assert su.links is not None
    nominal = su.links.scale_up if link == "scale_up" else su.links.scale_out
    return nominal * p(f"link.{link}.{kind}")


def communication(
    su: Setup, p: Callable[[str], float], src: Callable[[str], str], compute_s: float, gg_s: float
) -> list[Part]:
    """EP dispatch/combine, FSDP/DP collectives under the overlap rules, their latency, the contention of hidden
    collectives with compute, routing imbalance, host offload and synchronisation."""
    d, v, mesh = su.dims, su.values, su.mesh
    out: list[Part] = []
    n = mesh.devices
    ep = mesh.size("expert")
    flows = network.traffic(d, v, mesh) if su.links else []
    lat_up, lat_out = p("latency.scale_up_us") * 1e-6, p("latency.scale_out_us") * 1e-6
    ep_s = 0.0
    for f in flows:
        if not f.exposed:
            continue
        dispatch = "nccl_ep" if v.get("te_moe_block") else ("ring" if v.get("use_ring_of_experts") else "ragged")
        scale = dedup(ep, d.top_k) if dispatch == "nccl_ep" else 1.0
        t = scale * (
            f.ici_bytes / _rate(su, p, "scale_up", "all_to_all") + f.dcn_bytes / _rate(su, p, "scale_out", "all_to_all")
        )
        dedup_text = f", x{scale:.2f} deduplicated" if scale != 1 else ""
        passes = 3 if "3 passes" in f.how else 2
        calls = 2 * passes * d.moe_layers
        t += calls * (lat_out if f.dcn_bytes else lat_up)
        share = p("ep.nccl_ep_exposed") if dispatch == "nccl_ep" else 1.0
        ep_s = t * share
        out.append(
            Part(
                "EP dispatch + combine",
                ep_s,
                f"{(f.ici_bytes + f.dcn_bytes) / 1e9:.4g} GB ({dispatch}{dedup_text}) "
                f"+ {calls} x latency; {share:.0%} exposed",
                _link_sources(src, "all_to_all", [f])
                + ("; ep.nccl_ep_exposed: " + src("ep.nccl_ep_exposed") if dispatch == "nccl_ep" else ""),
                "communication",
            )
        )
    hidden = [f for f in flows if not f.exposed]
    if hidden:
        up, net = _rate(su, p, "scale_up", "collective"), _rate(su, p, "scale_out", "collective")
        coll_s = sum(f.ici_bytes / up + f.dcn_bytes / net for f in hidden)
        calls = 3 * d.layers * (1 if su.multistream else p("xla.default_calls_per_layer"))
        dcn_n = n // mesh.slice_devices
        per_call = lat_up + (lat_out * max(0, dcn_n - 1) if dcn_n > 1 else 0.0)
        lat_s = calls * per_call
        edge = (coll_s + lat_s) * 2 / (3 * d.layers)
        if su.multistream:
            exposed = edge + max(0.0, coll_s + lat_s - edge - compute_s)
            rule = "multi-stream collectives: hidden but for the loop's edges (first gather, last reduce-scatter)"
            rule_src = "overlap rule (xla=blog: collective multi-streaming)"
        else:
            share = p("xla.default_exposed")
            exposed = edge + share * (coll_s + lat_s - edge) + max(0.0, (1 - share) * (coll_s + lat_s) - compute_s)
            rule = f"one collective stream (default XLA flags): {share:.0%} exposed beyond the edges"
            rule_src = "xla.default_exposed: " + src("xla.default_exposed")
        gb = sum(f.ici_bytes + f.dcn_bytes for f in hidden) / 1e9
        out.append(
            Part(
                "FSDP/DP collectives (exposed)",
                exposed,
                f"{gb:.4g} GB, {coll_s:.3g} s at achieved rates + {calls:.0f} calls x {per_call * 1e6:.3g} us; {rule}",
                _link_sources(src, "collective", hidden) + "; " + rule_src,
                "communication",
            )
        )
        hidden_s = max(0.0, min(compute_s, coll_s - exposed))
        out.append(
            Part(
                "overlap contention",
                hidden_s * p("overlap.contention"),
                f"{hidden_s:.3g} s of collectives under compute x {p('overlap.contention'):.0%} of the SMs they take",
                "overlap.contention: " + src("overlap.contention"),
                "communication",
            )
        )
    if ep > 1 and gg_s:
        cv = p("routing.rank_cv")
        z = expected_max(ep)
        out.append(
            Part(
                "routing imbalance",
                (gg_s + ep_s) * cv * z,
                f"the busiest of {ep} EP ranks: load CV {cv:.0%} x {z:.2f} (expected max of {ep}) on grouped GEMM + EP",
                "routing.rank_cv: " + src("routing.rank_cv"),
                "imbalance",
            )
        )
    if su.offload_bytes and su.host_gb_s:
        one_way = su.offload_bytes / (su.host_gb_s * 1e9 * p("host.fraction"))
        fwd, bwd = compute_s / 3, 2 * compute_s / 3
        exposed = max(0.0, one_way - fwd) + max(0.0, one_way - bwd)
        out.append(
            Part(
                "host offload (exposed)",
                exposed,
                f"{su.offload_bytes / 1e9:.4g} GB each way at {su.host_gb_s * p('host.fraction'):.0f} GB/s: "
                f"{one_way:.3g} s, "
                "hidden under the forward / backward compute it overlaps",
                "host.fraction: " + src("host.fraction") + "; host link: data/links.yaml",
                "offload",
            )
        )
    if n > 1:
        sigma = math.hypot(p("sync.step_cv"), p("sync.static_cv"))
        z = expected_max(n)
        step = compute_s + sum(x.seconds for x in out)
        lat = 2 * math.log2(n) * p(_hop(n, mesh)) * 1e-6
        out.append(
            Part(
                "synchronisation",
                step * sigma * z + lat,
                f"slowest of {n} devices: speed CV {sigma:.2%} (step jitter {p('sync.step_cv'):.2%}, device spread "
                f"{p('sync.static_cv'):.1%}) x {z:.2f} (expected max of {n}) + barrier latency 2 log2({n}) hops",
                "sync.step_cv: "
                + src("sync.step_cv")
                + "; sync.static_cv: "
                + src("sync.static_cv")
                + (f"; {hop}: {src(hop)}" if (hop := _hop(n, mesh)) else ""),
                "synchronisation",
            )
        )
    return out


def forecast(su: Setup, params: Mapping[str, Param]) -> Forecast:
    """The step with every parameter at its value, and the band: each parameter at the ends of its range, the
    step-time changes combined in quadrature."""
    central = {k: q.value for k, q in params.items()}

    def run(values: Mapping[str, float]) -> list[Part]:
        return evaluate(su, lambda k: values[k], lambda k: params[k].source)

    parts = run(central)
    step = sum(x.seconds for x in parts)
    up = down = 0.0
    drivers = []
    for name, q in params.items():
        if q.low == q.high:
            continue
        ends = [sum(x.seconds for x in run(central | {name: e})) - step for e in (q.low, q.high)]
        slow, fast = max(0.0, *ends), min(0.0, *ends)
        up, down = up + slow**2, down + fast**2
        if slow - fast > 1e-3 * step:
            drivers.append({"param": name, "slower_s": slow, "faster_s": fast, "source": q.source})
    drivers.sort(key=lambda r: r["faster_s"] - r["slower_s"])
    peak = su.peak_fp8 if su.precision in LOW_PRECISION and su.peak_fp8 else su.peak_bf16
    return Forecast(
        parts,
        su.dims.train_flops(),
        su.dims.tokens,
        peak,
        step - math.sqrt(down),
        step + math.sqrt(up),
        drivers[:6],
    )


def grown(su: Setup, gpus: int) -> Setup:
    """The setup grown to `gpus` along DCN FSDP at fixed tokens per device (weak scaling)."""
    mesh = su.mesh
    if gpus % mesh.slice_devices:
        raise ValueError(f"{gpus} GPUs is not a multiple of the {mesh.slice_devices} devices of one slice")
    flat = Mesh(mesh.ici, dict.fromkeys(mesh.dcn, 1), mesh.domain)
    return replace(su, mesh=flat.with_dcn("fsdp", gpus // mesh.slice_devices))


def efficiency(base: Setup, top: Setup, params: Mapping[str, Param]) -> tuple[float, float, float, str]:
    """Weak-scaling efficiency of `top` against `base` (step time ratio), its band (each parameter's effect on the
    ratio combined in quadrature) and where the loss goes (the parts that grew, as shares of top's step)."""
    central = {k: q.value for k, q in params.items()}

    def ratio(values: Mapping[str, float]) -> tuple[float, list[Part], list[Part]]:
        a = evaluate(base, lambda k: values[k])
        b = evaluate(top, lambda k: values[k])
        return sum(x.seconds for x in a) / sum(x.seconds for x in b), a, b

    eff, a, b = ratio(central)
    up = down = 0.0
    for name, q in params.items():
        if q.low == q.high:
            continue
        ends = [ratio(central | {name: e})[0] - eff for e in (q.low, q.high)]
        up, down = up + max(0.0, *ends) ** 2, down + min(0.0, *ends) ** 2
    before = {x.name: x.seconds for x in a}
    step = sum(x.seconds for x in b)
    grew = sorted(((x.name, x.seconds - before.get(x.name, 0.0)) for x in b), key=lambda g: -g[1])
    why = ", ".join(f"{n} {sec / step:+.2%}" for n, sec in grew if abs(sec) > 1e-4 * step) or "nothing grows"
    return eff, eff - math.sqrt(down), eff + math.sqrt(up), why
