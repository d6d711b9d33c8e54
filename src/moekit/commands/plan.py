"""`moekit plan`: per-device memory, FLOPs, communication and step-time estimate; launches nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from moekit.base.errors import ConfigError
from moekit.config.load import load
from moekit.plan import tables, text, validate

HELP = "estimate memory, FLOPs and communication per device before launch"


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


def run(args: argparse.Namespace) -> int:
    """Compose and check the config, then print its plan (text or JSON); or, with --validate, the validation table.
    Returns 0. Launches nothing."""
    if args.validate:
        print(validate.report(args.write, args.format))
        return 0
    if args.write:
        raise ConfigError("--write goes with --validate: moekit plan --validate --write")
    try:
        scale = [int(x) for x in args.scale.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--scale {args.scale!r}: give GPU counts separated by commas, e.g. --scale 128,1024"
        ) from None
    tables.check_numbers(args.compute_tflops, scale)
    cfg = load(args.overrides, warn=False)  # the plan lists the warnings itself
    out = tables.plan_of(cfg, args.compute_tflops, scale, args.fabric, args.search)
    print(json.dumps(out, indent=2) if args.format == "json" else text.format_text(out))
    return 0
