"""`moekit plan`'s model: memory, FLOPs, communication and step time per device (pure apart from reading MaxText's
files).

`build` takes the typed config, the plan's data tables (plan/tables.py: one value, read once) and the user's
options, and returns plain data; commands/plan.py reads the options (plan/inputs.py), prints the result as text
(plan/text.py) or JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moekit.config.schema import Config
from moekit.plan import calibrate, domain, forecast, memory, network, search
from moekit.plan.calibrate import resolved_values as resolved_values  # other rooms read MaxText's keys here
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims
from moekit.plan.tables import Tables

GIB = memory.GIB
HYPOTHETICAL = "does not fit: hypothetical"
"""The forecast's status where the memory estimate says the configuration does not fit a device."""


@dataclass(frozen=True, slots=True)
class Options:
    """What the user asks of a plan beyond the config (`moekit plan`'s flags, checked by plan/inputs.py)."""

    compute_tflops: float | None = None
    """TFLOP/s per device while computing, for the no-overhead bound; None: the datasheet peak."""
    scale: tuple[int, ...] = ()
    """GPU counts to grow the layout to along DCN FSDP (weak scaling)."""
    fabric: Mapping[str, Any] | None = None
    """A run's fabric.json, parsed: its measured link fractions replace the forecast's defaults."""
    search: bool = False
    """Rank meshes and per-device batches for this GPU count by forecast (needs `tables.forecast`)."""


def compute_rate(cfg: Config, override: float | None) -> tuple[float | None, str]:
    """TFLOP/s per device while computing: given (at most the datasheet peak), else the datasheet peak of the GEMM
    precision."""
    fp8 = cfg.precision.name in ("fp8", "mxfp8")
    peak = cfg.hardware.peak_tflops.fp8 if fp8 else cfg.hardware.peak_tflops.bf16
    if override is not None:
        if peak is not None and override > peak:
            raise ValueError(
                f"--compute-tflops {override:g} is above hardware={cfg.hardware.name}'s {'FP8' if fp8 else 'BF16'} "
                f"dense peak ({peak:g} TFLOP/s); fix: give at most {peak:g}, or leave it out for the peak"
            )
        return override, "given with --compute-tflops"
    if peak is None:
        return None, "no peak for this hardware"
    return peak, f"datasheet {'FP8' if fp8 else 'BF16'} dense peak ({cfg.hardware.peak_source}): a lower bound on time"


def build(cfg: Config, tables: Tables, options: Options = Options()) -> dict[str, Any]:
    """The whole plan as plain data: mesh, model sizes, memory items and totals (GiB), training FLOPs, collectives
    (GB), the no-overhead bound at a compute rate, and, with `tables.forecast` and GPU hardware, the forecast
    (plan.forecast) and its weak scaling to each GPU count in `options.scale`; `options.fabric`: a run's fabric.json,
    whose measured link fractions replace the defaults; `tables.bands`: where the forecast sits among the measured
    points, and its band widened to the residuals there (plan.domain); `options.search`: the ranked layouts."""
    values = calibrate.values_of(cfg)
    dims = Dims.from_values(values)
    mesh = Mesh.from_config(cfg)
    mem = calibrate.memory_of(cfg, values, dims, mesh, tables)
    out: dict[str, Any] = {
        "experiment": cfg.experiment_name,
        "hardware": cfg.hardware.name,
        "mesh": {"ici": mesh.ici, "dcn": mesh.dcn, "devices": mesh.devices, "text": mesh.describe()},
        "model": {
            "name": cfg.model.name,
            "total_params": dims.total_params(),
            "active_params": dims.active_params(),
            "expert_params": dims.expert_params(),
            "tokens_per_device": dims.tokens,
            "layers": dims.layers,
            "moe_layers": dims.moe_layers,
        },
        "memory": _memory_out(mem, tables.calibration),
        "flops": {"train_tflop_per_device_step": dims.train_flops() / 1e12},
        "communication": [
            {
                "name": f.name,
                "ici_gb": f.ici_bytes / 1e9,
                "dcn_gb": f.dcn_bytes / 1e9,
                "exposed": f.exposed,
                "how": f.how,
            }
            for f in network.traffic(dims, values, mesh)
        ],
        "provenance": f"analytic estimate (moekit plan); the hardware row conf/hardware/{cfg.hardware.name}.yaml, "
        "its link classes' rates: src/moekit/data/links.yaml",
    }
    links = network.Links.from_table(tables.links, cfg.hardware)
    if tables.forecast is not None and links is not None:
        su = calibrate.setup(cfg, values, tables.links, mem.total("host"), not mem.warnings)
        params = forecast.params_from(tables.forecast, options.fabric)
        out |= _forecast_out(cfg, su, params, tables.bands, options.scale)
    rate, rate_source = compute_rate(cfg, options.compute_tflops)
    if links is not None and rate:
        model = network.step_model(dims, values, mesh, links, rate)
        out["step"] = _step(model) | {"compute_tflops": rate, "compute_source": rate_source}
        if options.scale and "scaling" not in out:
            out["scaling"] = [
                {"gpus": m.mesh.devices, "mesh": m.mesh.describe(), **_step(m), "efficiency": eff}
                for m, eff in network.scaling(dims, values, mesh, links, rate, list(options.scale))
            ]
    if options.search:
        if tables.forecast is None:
            raise ValueError("the layout search ranks by forecast: it needs the forecast's table (data/forecast.yaml)")
        su0 = calibrate.setup(cfg, values, tables.links)  # a row that is no GPU's is refused here
        params = forecast.params_from(tables.forecast, options.fabric)
        out["search"] = search.rank(cfg, su0, params, float(tables.calibration.get("device_factor", 1.0)))
        f = out.get("forecast")
        if f and f.get("band_validated", True):  # the configuration's own band: layouts inside it are not ordered by it
            band = (1 - f["step_low_s"] / f["step_s"], f["step_high_s"] / f["step_s"] - 1)
            out["search_ties"] = search.mark_ties(out["search"], *band)
    return out


def _memory_out(mem: memory.MemoryPlan, calibration: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's memory section: each item, the totals per place and phase (GiB), the limits and the fit."""
    return {
        "items": [
            {"name": i.name, "gib": i.bytes / GIB, "place": i.place, "phase": i.phase, "how": i.how} for i in mem.items
        ],
        "device_gib": mem.total("device") / GIB,
        "phases_gib": {ph: mem.phase_total(ph) / GIB for ph in ("step", "loss", "layers")},
        "host_gib": mem.total("host") / GIB,
        "device_limit_gib": mem.device_limit / GIB if mem.device_limit else None,
        "host_limit_gib": mem.host_limit / GIB if mem.host_limit else None,
        "fits": not mem.warnings,
        "warnings": mem.warnings,
        "notes": mem.notes,
        "te_ep": mem.te_ep.to_dict() if mem.te_ep else None,
        "calibration": {
            "device_factor": float(calibration.get("device_factor", 1.0)),
            "status": calibration.get("status", "uncalibrated"),
        },
    }


def _forecast_out(
    cfg: Config,
    su: forecast.Setup,
    params: Mapping[str, forecast.Param],
    bands: Mapping[str, Any] | None,
    scale: Sequence[int],
) -> dict[str, Any]:
    """The plan's forecast section (placed among the measured points where `bands` is given) and, with `scale`,
    its weak scaling from the config's GPU count to each count there."""
    fc, placed = forecast.forecast(su, params), {}
    if bands is not None:
        fc, placed = domain.place(fc, domain.position(cfg, su.values, su.dims, su.mesh.devices), bands)
    out: dict[str, Any] = {
        "forecast": fc.to_dict()
        | placed
        | {
            # a layout the memory estimate says cannot run still gets its step, marked as one that cannot be measured
            "fits": su.fits,
            "status": "fits" if su.fits else HYPOTHETICAL,
            "links": forecast.links_label(params),
            "provenance": "forecast from measured one-GPU parts (data/breakdowns.yaml, data/forecast.yaml); "
            "docs/plan.md holds its validation table",
        }
    }
    if scale:
        out["scaling"] = []
        for n in scale:
            top = forecast.grown(su, n)
            eff, lo, hi, why = forecast.efficiency(su, top, params)
            f = forecast.forecast(top, params).to_dict()
            out["scaling"].append(
                {
                    "gpus": n,
                    "mesh": top.mesh.describe(),
                    "step_s": f["step_s"],
                    "tflops_per_device": f["tflops_per_device"],
                    "efficiency": eff,
                    "efficiency_low": lo,
                    "efficiency_high": hi,
                    "against_gpus": su.mesh.devices,
                    "where_it_goes": why,
                }
            )
    return out


def _step(m: network.StepModel) -> dict[str, float]:
    return {
        "compute_s": m.compute_s,
        "exposed_comm_s": m.exposed_s,
        "overlapped_comm_s": m.hidden_s,
        "edge_comm_s": m.edge_s,
        "step_s": m.step_s,
        "tflops_per_device": m.tflops_per_device,
    }
