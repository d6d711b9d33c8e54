"""`moekit train`: compose, validate, translate, launch, summarize."""

from __future__ import annotations

import argparse
import os

from moekit.base.errors import MoekitError
from moekit.config.load import load
from moekit.config.schema import Config
from moekit.observe.runs import progress
from moekit.plan import launch
from moekit.run import execute
from moekit.series import sweep

HELP = "compose, validate, launch MaxText, summarize"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The overrides and --dry-run, --format, -m."""
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, a.b=value")
    p.add_argument("--dry-run", action="store_true", help="print config, MaxText command and env; launch nothing")
    p.add_argument("--format", choices=("text", "json"), default="text", help="dry-run output format")
    p.add_argument("-m", "--multirun", action="store_true", help="sweep (a=1,2; glob(*)): one run each + a report")
    p.epilog = "groups, options and keys: moekit config groups; the composed config and where each value comes from: "
    p.epilog += "moekit config show [overrides]"


def run(args: argparse.Namespace) -> int:
    """A sweep (-m) or one run; returns the exit status."""
    if args.format != "text" and (args.multirun or not args.dry_run):
        where = "a sweep (-m)" if args.multirun else "a run (it prints progress, then a summary)"
        raise MoekitError(
            f"--format {args.format} applies to one config's --dry-run only, not to {where}.\n"
            f"  fix: moekit train ... --dry-run --format {args.format}, or drop --format"
        )
    if args.multirun:
        return sweep.run_sweep(args.overrides, dry_run=args.dry_run)
    return train(args.overrides, dry_run=args.dry_run, fmt=args.format)


def checked(overrides: list[str], phase: progress.Phases) -> Config:
    """The config the overrides compose to, every check passed (warnings printed) and its TE receive buffers fitting
    a device (plan/launch.py), before anything else runs."""
    cfg = load(overrides, phase=phase)
    launch.ensure(cfg)
    return cfg


def train(overrides: list[str], dry_run: bool = False, fmt: str = "text", environ: dict[str, str] | None = None) -> int:
    """Compose and check once, then show the job (--dry-run) or run it; returns the exit status."""
    environ = dict(environ if environ is not None else os.environ)
    phase = progress.Phases()
    cfg = checked(overrides, phase)
    if dry_run:
        print(execute.dry_run(cfg, environ, fmt))
        return 0
    return execute.train(cfg, overrides, environ, phase).returncode
