"""`moekit plan`: per-device memory, FLOPs, communication and step-time estimate; launches nothing.

The plan's modules are imported inside `run`, so that `moekit --help` and the parser do not pay for them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from moekit.base import quantities
from moekit.base.errors import ConfigError

HELP = "estimate memory, FLOPs and communication per device before launch"


EPILOG = """\
the forecast: one device's step time, TFLOP/s, tokens/s and MFU, built from parts measured on one H200 (each
part prints its source), each with a band [low-high]. The band is the wider of the parameters' band (each
parameter at the ends of its range) and the validation residuals of the forecast's domain: how far the
configuration is from the nearest measured point (same configuration, other batch, other settings, other
family, other hardware, other scale; docs/plan.md "Forecast validation"). Beyond what any validation point
spans, the band reads "band not validated"; a configuration whose memory estimate does not fit is forecast
as "does not fit: hypothetical". --search marks layouts whose bands overlap the first's as ties.

example: moekit plan experiment=dsv3_proxy_h200 moe=te_gmm train.per_device_batch_size=8
  step 1.287 s [1.217-1.376]   444 TFLOP/s [415-469]   25,469 tokens/s [23,822-26,930]   MFU 44.9% ...
  band -5.4%/+6.9% of the step: the parameters' band, wider than the 'other batch' width +-4.9% (...)
  domain: interpolated (other batch): nearest measured point te_gmm (...; 0.965 s/step, run C); ...
    batch x sequence: 8 x 4096 (te_gmm: 6 x 4096)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The overrides, --format, --scale, --compute-tflops, --fabric, --fabric-any, --search and --validate; the
    epilog says what the forecast, its band and its domain are, with an example."""
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
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
        "--fabric-any",
        action="store_true",
        help="with --fabric: use a fabric.json measured on other hardware or on a CPU backend",
    )
    p.add_argument(
        "--search", action="store_true", help="rank meshes and per-device batches for this GPU count by forecast"
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="forecast every measured and published point (data/forecast_points.yaml) and print the table",
    )


def run(args: argparse.Namespace) -> int:
    """Compose and check the config, then print its plan (text or JSON); or, with --validate, the validation table.
    Returns 0. Launches nothing."""
    if args.validate:
        from moekit.plan import validate

        print(validate.report(args.format))
        return 0
    if args.fabric_any and args.fabric is None:
        raise ConfigError(
            "--fabric-any goes with --fabric PATH: moekit plan … --fabric RUN_DIR/fabric.json --fabric-any"
        )
    try:
        scale = [int(x) for x in args.scale.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--scale {args.scale!r}: give GPU counts separated by commas, e.g. --scale 128,1024"
        ) from None
    from moekit import plan
    from moekit.config.checks import warnings
    from moekit.config.load import load
    from moekit.plan import forecast, inputs, tables, text

    inputs.check_numbers(args.compute_tflops, scale)
    record = inputs.fabric_record(args.fabric)  # refused, if it must be, before anything is composed
    cfg = load(args.overrides, warn=False)  # the plan lists the warnings itself
    if args.search:
        inputs.check_search(cfg.num_devices)
    if record is not None and not args.fabric_any:
        why = forecast.fabric_mismatch(record, cfg.hardware.name)
        if why:
            raise ConfigError(
                f"--fabric {args.fabric}: {why}.\n"
                f"  fix: give the fabric.json of a run on {cfg.hardware.name} (moekit fabric), or add --fabric-any "
                "to use these measurements anyway"
            )
    options = plan.Options(args.compute_tflops, tuple(scale), record, args.search)
    try:
        out = plan.build(cfg, tables.shipped(), options)
    except ValueError as exc:  # a model that cannot be planned
        raise ConfigError(str(exc)) from None
    out["config_warnings"] = [str(w) for w in warnings(cfg)]
    quantities.dumps(out, "plan")  # every number finite before any is printed (JSON or text)
    print(json.dumps(out, indent=2) if args.format == "json" else text.format_text(out))
    return 0
