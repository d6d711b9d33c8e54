"""moekit's command line: thin dispatch to commands/, user errors printed without a traceback."""

from __future__ import annotations

import argparse
import sys
import warnings

from moekit.errors import MoekitError

COMMANDS = ("train", "render", "plan", "report", "verify", "tune", "bench")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moekit", description="Dropless MoE training with JAX + TE + MaxText.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("train", help="compose, validate, launch MaxText, summarize")
    t.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, a.b=value")
    t.add_argument("--dry-run", action="store_true", help="print config, MaxText command and env; launch nothing")
    t.add_argument("--format", choices=("text", "json"), default="text", help="dry-run output format")
    return p


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", module="hydra")
    warnings.filterwarnings("ignore", category=UserWarning)
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            from moekit.commands.train import train

            return train(args.overrides, dry_run=args.dry_run, fmt=args.format)
        raise MoekitError(f"'moekit {args.command}' is not available in this version.")
    except MoekitError as exc:
        print(f"moekit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("moekit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
