"""`moekit plan`'s model: memory, FLOPs, communication and step time per device (pure).

`build` takes the typed config plus the facts read at the edge (MaxText's base.yml and model file, the
link table, the calibration) and returns plain data; plan/tables.py's `plan_of` reads the files for it,
plan/text.py writes the result as text and commands/plan.py prints it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from moekit.config.schema import Config
from moekit.plan import calibrate, domain, forecast, memory, network
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims, maxtext_values
from moekit.translate.env import env
from moekit.translate.maxtext_args import maxtext_args

GIB = memory.GIB


def resolved_values(cfg: Config, base: Mapping[str, Any], model_file: Mapping[str, Any]) -> dict[str, Any]:
    """MaxText's keys for this config: base.yml < model file < the translated arguments."""
    args = {a.key: a.value for a in maxtext_args(cfg, "<run.dir>", "<run.dir>/metrics.jsonl")}
    return maxtext_values(base, model_file, args)


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


def build(
    cfg: Config,
    base: Mapping[str, Any],
    model_file: Mapping[str, Any],
    links_table: Mapping[str, Any],
    calibration: Mapping[str, Any],
    compute_tflops: float | None = None,
    scale: Sequence[int] = (),
    forecast_table: Mapping[str, Any] | None = None,
    fabric: Mapping[str, Any] | None = None,
    bands: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole plan as plain data: mesh, model sizes, memory items and totals (GiB), training FLOPs, collectives
    (GB), the no-overhead bound at a compute rate, and, with `forecast_table` (data/forecast.yaml) and GPU hardware,
    the forecast (plan.forecast) and its weak scaling to each GPU count in `scale`; `fabric`: a run's fabric.json,
    whose measured link fractions replace the defaults; `bands` (data/forecast_bands.yaml): where the forecast sits
    among the measured points, and its band widened to the residuals there (plan.domain)."""
    values = resolved_values(cfg, base, model_file)
    dims = Dims.from_values(values)
    mesh = Mesh.from_config(cfg)
    factor = float(calibration.get("device_factor", 1.0))
    mem = memory.estimate(dims, values, mesh, cfg.hardware.hbm_gib, env(cfg), cfg.hardware.host_gib_per_gpu, factor)
    flows = network.traffic(dims, values, mesh)
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
        "memory": {
            "items": [
                {"name": i.name, "gib": i.bytes / GIB, "place": i.place, "phase": i.phase, "how": i.how}
                for i in mem.items
            ],
            "device_gib": mem.total("device") / GIB,
            "phases_gib": {ph: mem.phase_total(ph) / GIB for ph in ("step", "loss", "layers")},
            "host_gib": mem.total("host") / GIB,
            "device_limit_gib": mem.device_limit / GIB if mem.device_limit else None,
            "host_limit_gib": mem.host_limit / GIB if mem.host_limit else None,
            "fits": not mem.warnings,
            "warnings": mem.warnings,
            "notes": mem.notes,
            "calibration": {"device_factor": factor, "status": calibration.get("status", "uncalibrated")},
        },
        "flops": {"train_tflop_per_device_step": dims.train_flops() / 1e12},
        "communication": [
            {
                "name": f.name,
                "ici_gb": f.ici_bytes / 1e9,
                "dcn_gb": f.dcn_bytes / 1e9,
                "exposed": f.exposed,
                "how": f.how,
            }
            for f in flows
        ],
        "provenance": f"analytic estimate (moekit plan); the hardware row conf/hardware/{cfg.hardware.name}.yaml, "
        "its link classes' rates: src/moekit/data/links.yaml",
    }
    links = network.Links.from_table(links_table, cfg.hardware)
    rate, rate_source = compute_rate(cfg, compute_tflops)
    if forecast_table is not None and links is not None:
        su = calibrate.setup(cfg, values, links_table, forecast_table, mem.total("host"), not mem.warnings)
        params = forecast.params_from(forecast_table, fabric)
        fc, placed = forecast.forecast(su, params), {}
        if bands is not None:
            fc, placed = domain.place(fc, domain.position(cfg, values, dims, mesh.devices), bands)
        out["forecast"] = (
            fc.to_dict()
            | placed
            | {
                "links": forecast.links_label(params),
                "provenance": "forecast from measured one-GPU parts (data/breakdowns.yaml, data/forecast.yaml); "
                "docs/plan.md holds its validation table",
            }
        )
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
                        "against_gpus": mesh.devices,
                        "where_it_goes": why,
                    }
                )
    if links is not None and rate:
        model = network.step_model(dims, values, mesh, links, rate)
        out["step"] = _step(model) | {"compute_tflops": rate, "compute_source": rate_source}
        if scale and "scaling" not in out:
            out["scaling"] = [
                {"gpus": m.mesh.devices, "mesh": m.mesh.describe(), **_step(m), "efficiency": eff}
                for m, eff in network.scaling(dims, values, mesh, links, rate, list(scale))
            ]
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
