"""`moekit fabric`: the fabric check as a job of its own (no training), for testing nodes before a run."""

from __future__ import annotations

import argparse
import os
import sys

from moekit.base.errors import ConfigError
from moekit.config.checks import format_warnings, warnings
from moekit.config.load import load
from moekit.run import execute

HELP = "check and time the job's collectives on its processes, without training (fabric.json)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The overrides (the same as `moekit train`'s) and --dry-run."""
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, a.b=value (as for train)")
    p.add_argument("--dry-run", action="store_true", help="print what would run; launch nothing")
    p.epilog = (
        "On a cluster: moekit render ... target=jobset|slurm fabric.only=true renders the same check as a job. "
        "fabric.mode=enforce unless set: a problem ends it with exit status 1."
    )


def run(args: argparse.Namespace) -> int:
    """Compose with fabric.only=true (and fabric.mode=enforce unless the overrides set it), check, then run the
    job's processes through the rendezvous and the fabric phase only."""
    overrides = ["fabric.mode=enforce", *args.overrides, "fabric.only=true"]
    cfg = load(overrides, warn=False)
    if cfg.fabric.mode == "off":
        raise ConfigError("fabric.mode=off: `moekit fabric` would check nothing; drop fabric.mode=off")
    if found := warnings(cfg):
        print(format_warnings(found), file=sys.stderr)
    if args.dry_run:
        print(execute.dry_run(cfg, dict(os.environ)))
        return 0
    return execute.train(cfg, overrides, dict(os.environ)).returncode
