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
        "--compute-tflops", type=float, default=None, help="achieved TFLOP/s per device while computing (default: peak)"
    )


def data_file(name: str) -> dict[str, Any]:
    """A YAML file shipped in moekit/data (link speeds, plan calibration), parsed."""
    return yaml.safe_load((DATA / name).read_text())


def run(args: argparse.Namespace) -> int:
    """Compose and check the config, then print its plan (text or JSON); returns 0. Launches nothing."""
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
    if "step" in p:
        s = p["step"]
        lines += [
            "",
            f"## step-time model at {s['compute_tflops']:g} TFLOP/s while computing ({s['compute_source']})",
            f"  compute {s['compute_s']:.3f} s + exposed comm {s['exposed_comm_s']:.3f} s"
            f" + unhidden FSDP/DP {s['step_s'] - s['compute_s'] - s['exposed_comm_s']:.3f} s"
            f" (of {s['overlapped_comm_s']:.3f} s overlappable) = {s['step_s']:.3f} s/step,"
            f" {s['tflops_per_device']:.0f} TFLOP/s per device",
        ]
    for row in p.get("scaling", []):
        lines.append(
            f"  {row['gpus']:>6} GPUs  {row['step_s']:.4f} s/step  weak-scaling efficiency vs one slice "
            f"{row['efficiency']:.2%}  ({row['mesh']})"
        )
    lines += [f"WARNING: {w}" for w in p.get("config_warnings", [])]
    lines += ["", f"provenance: {p['provenance']}"]
    return "\n".join(lines)
