"""The forecast's setup from a composed config, and the efficiencies derived from measured breakdowns (pure apart
from reading MaxText's base.yml and model file, once per model and process).

`values_of` resolves a composed config's MaxText keys, `memory_of` its memory estimate, and `setup` turns the
config (plus those keys and the link rates) into what plan.forecast.evaluate reads; `setup_of` does all three
over the plan's data tables (plan.tables.Tables). `derive` computes the efficiencies of data/forecast.yaml from
the one-GPU breakdowns of data/breakdowns.yaml: each class's measured time over its work on that configuration,
with the recompute share included (the profiled runs recompute the whole forward, remat_policy=full). The derived
numbers are written into data/forecast.yaml with their derivation; tests/test_forecast.py checks they agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from moekit.base import maxtext_files
from moekit.config.schema import Config
from moekit.plan import memory, network
from moekit.plan.forecast import Setup, evaluate, work
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims, dtype_bytes, maxtext_values
from moekit.plan.tables import Tables
from moekit.translate.env import env
from moekit.translate.maxtext_args import maxtext_args


def resolved_values(cfg: Config, base: Mapping[str, Any], model_file: Mapping[str, Any]) -> dict[str, Any]:
    """MaxText's keys for this config: base.yml < model file < the translated arguments."""
    args = {a.key: a.value for a in maxtext_args(cfg, "<run.dir>", "<run.dir>/metrics.jsonl")}
    return maxtext_values(base, model_file, args)


@cache
def _maxtext(model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return maxtext_files.model_values(model)


def values_of(cfg: Config) -> dict[str, Any]:
    """resolved_values over the installed MaxText's base.yml and model file (read once per model and process)."""
    return resolved_values(cfg, *_maxtext(cfg.model.name))


def memory_of(cfg: Config, values: Mapping[str, Any], dims: Dims, mesh: Mesh, tables: Tables) -> memory.MemoryPlan:
    """The memory estimate of a composed config, scaled by the calibrated device factor (Tables.calibration)."""
    factor = float(tables.calibration.get("device_factor", 1.0))
    hw = cfg.hardware
    return memory.estimate(dims, values, mesh, hw.hbm_gib, env(cfg), hw.host_gib_per_gpu, factor)


def setup_of(cfg: Config, tables: Tables) -> Setup:
    """The forecast's setup of a composed config (offload bytes and fit from the memory estimate)."""
    values = values_of(cfg)
    mem = memory_of(cfg, values, Dims.from_values(values), Mesh.from_config(cfg), tables)
    return setup(cfg, values, tables.links, mem.total("host"), not mem.warnings)


def setup(
    cfg: Config,
    values: Mapping[str, Any],
    links: Mapping[str, Mapping[str, Any]],
    offload_bytes: float = 0.0,
    fits: bool = True,
) -> Setup:
    """The forecast's view of a composed config: shape, mesh, hardware rates, back end, precision, overlap. `links`:
    the link classes' rates (plan.tables.Tables.links)."""
    hw = cfg.hardware
    if hw.links is None or hw.hbm_tb_per_s is None or hw.peak_tflops.bf16 is None:
        raise ValueError(f"no forecast for hardware={hw.name}: its row (conf/hardware/{hw.name}.yaml) is not a GPU's")
    host_gb_s = float(links[hw.links.host]["gb_per_s"])
    flags = cfg.xla.flags
    return Setup(
        dims=Dims.from_values(values),
        values=values,
        mesh=Mesh.from_config(cfg),
        hardware=hw.name,
        arch=hw.arch,
        peak_bf16=float(hw.peak_tflops.bf16),
        peak_fp8=float(hw.peak_tflops.fp8) if hw.peak_tflops.fp8 else None,
        hbm_tb_s=hw.hbm_tb_per_s,
        backend=cfg.moe.backend,
        precision=cfg.precision.name,
        expert_precision=cfg.moe.expert_precision,
        multistream=bool(flags.get("xla_gpu_experimental_enable_collective_multi_streaming")),
        links=network.Links.from_table(links, hw),
        host_gb_s=host_gb_s,
        offload_bytes=offload_bytes,
        fits=fits,
    )


def _optimizer_s(su: Setup, p: Callable[[str], float]) -> float:
    d, v = su.dims, su.values
    wb = dtype_bytes(v.get("weight_dtype", "float32"))
    mu = dtype_bytes(v.get("mu_dtype") or v.get("weight_dtype", "float32"))
    return d.total_params() * (4 * wb + 2 * mu + wb) / (su.hbm_tb_s * 1e12 * p("hbm.fraction"))


def derive(setups: Mapping[str, Setup], measured: Mapping[str, Any], p: Callable[[str], float]) -> dict[str, float]:
    """The efficiencies the breakdowns imply. `setups`: name -> Setup of each breakdown's configuration (one GPU);
    `measured`: data/breakdowns.yaml; `p`: the other parameters (fixed ones: recompute share, tile, HBM fraction)."""
    out: dict[str, float] = {}
    phi = p("recompute.cost_share")
    te, b = setups["te_gmm_p"], measured["breakdowns"]["te_gmm_p"]["buckets_ms"]
    w = work(te.dims, te.values, te.backend)
    peak = te.peak_bf16 * 1e12
    ms = 1e-3
    out["eff.other_gemm"] = (3 * w.other + phi * w.recompute["other"]) / (b["other_gemm"] * ms) / peak
    out["eff.grouped.te_gmm"] = (3 * w.grouped + phi * w.recompute["grouped"]) / (b["grouped_gemm"] * ms) / peak
    out["eff.attention"] = (3 * w.attention + phi * w.recompute["attention"]) / (b["attention"] * ms) / peak
    step_ms = measured["breakdowns"]["te_gmm_p"]["step_ms"]
    out["other.idle_fraction"] = b["idle"] / (step_ms - b["idle"])
    d = te.dims
    out["other.permute_s_per_elem"] = (b["dispatch"] + b["combine"]) * ms / (d.moe_layers * d.tokens * d.top_k * d.emb)
    out["other.s_per_elem"] = (b["other"] * ms - _optimizer_s(te, p)) / (d.layers * d.tokens * d.emb)

    g = measured["gmm_tflops"]
    out["eff.grouped.te"] = out["eff.grouped.te_gmm"] * g["te"] / g["te_gmm"]
    out["eff.grouped.ragged_dot"] = out["eff.grouped.te_gmm"] * g["ragged_dot"] / g["te_gmm"]

    # tokamax: its grouped GEMM and the operations around it no other path runs (other compute beyond te_gmm_p's:
    # its Mosaic kernel's operand layout and casts) make one effective rate
    tk, bt = setups["tokamax"], measured["breakdowns"]["tokamax"]["buckets_ms"]
    wt = work(tk.dims, tk.values, tk.backend)
    tok_ms = bt["grouped_gemm"] + bt["other"] - b["other"]
    out["eff.grouped.tokamax"] = (3 * wt.grouped + phi * wt.recompute["grouped"]) / (tok_ms * ms) / peak

    de, bd = setups["dense"], measured["breakdowns"]["dense"]["buckets_ms"]
    wd = work(de.dims, de.values, de.backend)
    dense_gemm_ms = bd["other_gemm"] - b["other_gemm"]
    rc_dense = wd.recompute["other"] - work(de.dims, de.values, "te_gmm").recompute["other"]
    out["eff.dense_experts"] = (3 * wd.dense_experts + phi * rc_dense) / (dense_gemm_ms * ms) / peak
    # the masked path's own elementwise work; its idle beyond te_gmm_p's share (137 ms) is not attributed to
    # any mechanism (launch gaps are modelled as a share of compute for every path alike)
    extra_ms = bd["other"] - b["other"]
    dd = de.dims
    out["dense.overhead_s_per_elem"] = extra_ms * ms / (dd.moe_layers * dd.tokens * dd.experts * dd.moe_mlp)

    go, bg = setups["gpt_oss_te_gmm"], measured["breakdowns"]["gpt_oss_te_gmm"]
    wg = work(go.dims, go.values, go.backend)
    gpeak = go.peak_bf16 * 1e12
    flash_ms = (3 * wg.attention + phi * wg.recompute["attention"]) / (gpeak * out["eff.attention"]) / ms
    bb = bg["buckets_ms"]
    idle_extra = bb["idle"] - out["other.idle_fraction"] * (bg["step_ms"] - bb["idle"])
    gd = go.dims
    out["attention.dot_product_s_per_elem"] = (
        (bb["attention"] + idle_extra - flash_ms) * ms / (gd.layers * gd.batch * gd.heads * gd.seq * gd.seq)
    )
    bs = measured["bias_scatter"]
    out["bias.scatter_s_per_elem"] = bs["ms"] * ms / (bs["rows"] * bs["width"])
    out["sync.step_cv"] = float(measured["step_cv"])

    # parameters set by the step time of a measurement: megablox (interpret mode: its only measurement), then the
    # efficiency of FP8 GEMMs relative to BF16 ones (te_gmm_fp8: FP8 on the dense and the expert GEMMs)
    out["lowp.relative_eff"] = p("lowp.relative_eff")
    for name, param, lo, hi in (
        ("maxtext_default", "eff.grouped.megablox", 1e-4, 1.0),
        ("te_gmm_fp8", "lowp.relative_eff", 0.05, 2.0),
    ):
        su, target = setups[name], measured["steps"][name]["step_s"]
        for _ in range(60):
            mid = (lo * hi) ** 0.5
            q = {**out, param: mid}
            step = sum(x.seconds for x in evaluate(su, lambda k, q=q: q[k] if k in q else p(k)))
            lo, hi = (mid, hi) if step > target else (lo, mid)
        out[param] = (lo * hi) ** 0.5
    return out


def fixed(table: Mapping[str, Any]) -> Callable[[str], float]:
    """Parameter lookup over data/forecast.yaml's values (for derive: the parameters it does not derive)."""
    params = {k: float(e["value"]) for k, e in table["params"].items()}
    return lambda k: params[k]


def rewrite(text: str, derived: Mapping[str, float]) -> str:
    """data/forecast.yaml's text with the `value:` of each derived parameter replaced (4 significant digits);
    comments, order and the other keys stay as they are."""
    out, current = [], None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("    ") and stripped.endswith(":"):
            current = stripped[:-1]
        elif current in derived and line.startswith("    value: "):
            line = f"    value: {derived[current]:.4g}\n"
        out.append(line)
    return "".join(out)
