"""`moekit plan`: per-device memory, FLOPs, communication and step-time estimate; launches nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from moekit import plan
from moekit.base import maxtext_files
from moekit.base.errors import ConfigError
from moekit.config.checks import warnings
from moekit.config.load import load

HELP = "estimate memory, FLOPs and communication per device before launch"
DATA = Path(__file__).resolve().parents[1] / "data"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The overrides, --format, --scale and --compute-tflops."""
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, a.b=value")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--scale", default="", metavar="GPUS", help="comma-separated GPU counts: grow the layout along DCN FSDP"
    )
    p.add_argument(
        "--compute-tflops",
        type=float,
        default=None,
        help="TFLOP/s per device while computing for the no-overhead bound (default: the datasheet peak)",
    )
    p.add_argument(
        "--fabric", type=Path, metavar="PATH", help="a run's fabric.json: its measured link fractions for the forecast"
    )
    p.add_argument(
        "--search", action="store_true", help="rank meshes and per-device batches for this GPU count by forecast"
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="forecast every measured and published point (data/forecast_points.yaml) and print the table",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="with --validate: re-derive the calibrated parameters and rewrite docs/plan.md's validation table",
    )


def data_file(name: str) -> dict[str, Any]:
    """A YAML file shipped in moekit/data (link speeds, plan calibration), parsed."""
    return yaml.safe_load((DATA / name).read_text())


def _fabric(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"--fabric {path}: cannot read it as fabric.json ({exc}).\n"
            "  fix: give the fabric.json of a run directory (moekit fabric / train write it)"
        ) from None
    if not isinstance(record, dict) or not record.get("results"):
        raise ConfigError(f"--fabric {path}: no measured results in it; the fabric check must have run to its end")
    return record


DOC = Path(__file__).resolve().parents[3] / "docs" / "plan.md"


def _validate(write: bool, fmt: str) -> int:
    """--validate: every point's forecast, printed; with --write, the calibrated parameters re-derived into
    data/forecast.yaml and the table written into docs/plan.md (a source checkout)."""
    from moekit.plan import tables, validate

    if write:
        if not DOC.is_file():
            raise ConfigError(f"--write rewrites {DOC}, which this installation does not have (a source checkout does)")
        text, _ = validate.recalibrate()
        (tables.DATA / "forecast.yaml").write_text(text)
        tables.data.cache_clear()
    rows = validate.rows()
    rungs, ordered = validate.ladder()
    if fmt == "json":
        med, worst = validate.stats(rows)
        print(
            json.dumps(
                {
                    "points": [
                        {
                            "name": r.name,
                            "kind": r.kind,
                            "unit": r.unit,
                            "measured": r.measured,
                            "forecast": r.forecast,
                            "low": r.low,
                            "high": r.high,
                            "error": r.error,
                            "calibration": r.calibration,
                            "source": r.source,
                            "note": r.note,
                        }
                        for r in rows
                    ],
                    "ladder": [{"experiment": n, "tflops_per_device": t, "fits": fits} for n, t, fits in rungs],
                    "ladder_ordered": ordered,
                    "median_abs_error": med,
                    "largest": None if worst is None else {"name": worst.name, "error": worst.error},
                },
                indent=2,
            )
        )
        return 0
    section = f"{validate.BEGIN}\n{validate.table(rows, rungs, ordered)}\n{validate.END}"
    print(section)
    if write:
        DOC.write_text(validate.replace_section(DOC.read_text(), section))
        print(f"moekit: wrote {DOC} and {tables.DATA / 'forecast.yaml'}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Compose and check the config, then print its plan (text or JSON); returns 0. Launches nothing."""
    if args.validate:
        return _validate(args.write, args.format)
    if args.write:
        raise ConfigError("--write goes with --validate: moekit plan --validate --write")
    try:
        scale = [int(x) for x in args.scale.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--scale {args.scale!r}: give GPU counts separated by commas, e.g. --scale 128,1024"
        ) from None
    cfg = load(args.overrides, warn=False)  # the plan lists the warnings itself
    base, model_file = maxtext_files.model_values(cfg.model.name)
    try:
        out = plan.build(
            cfg,
            base,
            model_file,
            data_file("links.yaml"),
            data_file("plan_calibration.yaml"),
            args.compute_tflops,
            scale,
            data_file("forecast.yaml"),
            fabric := _fabric(args.fabric),
        )
        if args.search:
            from moekit.plan import search

            out["search"] = search.rank(
                cfg, base, model_file, data_file("links.yaml"), data_file("forecast.yaml"), fabric=fabric
            )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out["config_warnings"] = [str(w) for w in warnings(cfg)]
    print(json.dumps(out, indent=2) if args.format == "json" else format_text(out))
    return 0


def format_text(p: dict[str, Any]) -> str:
    """The plan as text: memory items per device, FLOPs and collectives, step-time model and scaling."""
    m, mem = p["model"], p["memory"]
    lines = [
        f"# moekit plan: {p['experiment']} on {p['hardware']}, {p['mesh']['text']}",
        f"model {m['name']}: {m['total_params'] / 1e9:.3g}B params ({m['active_params'] / 1e9:.3g}B active), "
        f"{m['tokens_per_device']:,.0f} tokens per device per step",
        "",
        "## memory per device (analytic estimate)",
    ]
    width = max(len(i["name"]) for i in mem["items"])
    for i in mem["items"]:
        where = i["place"] if i["place"] == "host" else i["phase"]
        lines.append(f"  {i['name']:<{width}}  {i['gib']:9.2f} GiB  {where:<6}  {i['how']}")
    ph = mem["phases_gib"]
    lines.append(
        f"  {'device peak':<{width}}  = step {ph['step']:.2f} GiB"
        f" + max(loss {ph['loss']:.2f}, layers {ph['layers']:.2f}) GiB"
    )
    limit = f" of {mem['device_limit_gib']:.1f} GiB usable" if mem["device_limit_gib"] else ""
    cal = mem["calibration"]
    lines.append(
        f"  {'device total':<{width}}  {mem['device_gib']:9.2f} GiB{limit}"
        f"  (x{cal['device_factor']:g}: {cal['status']})"
    )
    if mem["host_gib"] or mem["host_limit_gib"]:
        pool = f" of {mem['host_limit_gib']:.0f} GiB pinned pool" if mem["host_limit_gib"] else ""
        lines.append(f"  {'pinned host total':<{width}}  {mem['host_gib']:9.2f} GiB{pool}")
    lines += [f"  note: {n}" for n in mem["notes"]]
    lines += [f"WARNING: {w}" for w in mem["warnings"]]
    lines += ["", "## compute and communication per device per step"]
    lines.append(f"  training FLOPs  {p['flops']['train_tflop_per_device_step']:.4g} TFLOP (MaxText's count)")
    for c in p["communication"]:
        kind = "exposed" if c["exposed"] else "overlappable"
        lines.append(f"  {c['name']:<36} ICI {c['ici_gb']:9.3f} GB  DCN {c['dcn_gb']:8.3f} GB  {kind}; {c['how']}")
    if not p["communication"]:
        lines.append("  (no cross-device collectives on this mesh)")
    if "forecast" in p:
        lines += ["", *format_forecast(p["forecast"], p.get("scaling", []))]
    else:
        lines += [
            "",
            f"## forecast: none for hardware={p['hardware']} (no peak or HBM bandwidth in data/forecast.yaml)",
        ]
    if "search" in p:
        lines += ["", *format_search(p["search"])]
    if "step" in p:
        s = p["step"]
        lines += [
            "",
            f"## no-overhead bound at {s['compute_tflops']:g} TFLOP/s while computing ({s['compute_source']})",
            f"  compute {s['compute_s']:.3f} s + exposed comm {s['exposed_comm_s']:.3f} s"
            f" + unhidden FSDP/DP {s['step_s'] - s['compute_s'] - s['exposed_comm_s']:.3f} s"
            f" (of {s['overlapped_comm_s']:.3f} s overlappable) = {s['step_s']:.3f} s/step,"
            f" {s['tflops_per_device']:.0f} TFLOP/s per device",
        ]
    for row in [] if "forecast" in p else p.get("scaling", []):
        lines.append(
            f"  {row['gpus']:>6} GPUs  {row['step_s']:.4f} s/step  weak-scaling efficiency vs one slice "
            f"{row['efficiency']:.2%}  ({row['mesh']})"
        )
    lines += [f"WARNING: {w}" for w in p.get("config_warnings", [])]
    lines += ["", f"provenance: {p['provenance']}"]
    return "\n".join(lines)


def format_forecast(f: dict[str, Any], scaling: list[dict[str, Any]]) -> list[str]:
    """The forecast section: step, TFLOP/s with its band, tokens/s, MFU, each part with its source, scaling."""
    lines = [
        f"## forecast per device ({f['links']})",
        f"  step {f['step_s']:.4g} s [{f['step_low_s']:.4g}-{f['step_high_s']:.4g}]   "
        f"{f['tflops_per_device']:.0f} TFLOP/s [{f['low']:.0f}-{f['high']:.0f}]   "
        f"{f['tokens_per_s_per_device']:,.0f} tokens/s [{f['tokens_per_s_per_device_low']:,.0f}-"
        f"{f['tokens_per_s_per_device_high']:,.0f}]   MFU {f['mfu']:.1%} [{f['mfu_low']:.1%}-{f['mfu_high']:.1%}] "
        f"of {f['mfu_peak_tflops']:g}",
    ]
    width = max(len(x["name"]) for x in f["parts"])
    for x in f["parts"]:
        lines.append(f"  {x['name']:<{width}}  {x['seconds']:8.4f} s  {x['how']}")
        lines.append(f"  {'':<{width}}  {'':8}    source: {x['source']}")
    if f["band_drivers"]:
        lines.append(
            "  band (parameters at the ends of their range, combined in quadrature); widest: "
            + ", ".join(f"{d['param']} {d['faster_s']:+.3g}/{d['slower_s']:+.3g} s" for d in f["band_drivers"][:4])
        )
    for row in scaling:
        lines.append(
            f"  {row['gpus']:>6} GPUs  {row['step_s']:.4g} s/step  {row['tflops_per_device']:.0f} TFLOP/s  "
            f"weak-scaling efficiency vs {row['against_gpus']} GPUs {row['efficiency']:.1%} "
            f"[{row['efficiency_low']:.1%}-{row['efficiency_high']:.1%}]  ({row['mesh']})"
        )
        if row["efficiency"] < 0.99995:
            lines.append(f"         where {1 - row['efficiency']:.1%} goes: {row['where_it_goes']}")
    lines.append(f"  provenance: {f['provenance']}")
    return lines


def format_search(rows: list[dict[str, Any]]) -> list[str]:
    """The ranked layouts."""
    lines = ["## layouts ranked by forecast tokens/s per device (those that do not fit left out)"]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"  {i:>2}. {r['mesh']:<48} batch {r['per_device_batch_size']:>4g}  {r['tokens_per_s_per_device']:>9,.0f} "
            f"tokens/s  {r['tflops_per_device']:.0f} TFLOP/s  {r['device_gib']:.0f} GiB  {r['overrides']}"
        )
    if not rows:
        lines.append("  none fits: fewer tokens per device, more remat or offload, or more GPUs")
    return lines
