"""moekit's command line: thin dispatch to commands/<name>.py, user errors printed without a traceback.

Each command module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from moekit.errors import MoekitError

# name -> module under moekit.commands (imported lazily: `moekit --help` stays fast)
COMMANDS = {
    "train": "train",
    "render": "render",
    "bench": "bench",
    "tune": "tune",
    "report": "report",
    "verify": "verify",
    "plan": "plan",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moekit", description="Dropless MoE training with JAX + TE + MaxText.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"moekit.commands.{module}")
        mod.add_arguments(sub.add_parser(name, help=mod.HELP, description=mod.HELP))
    return p


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", module="hydra")
    warnings.filterwarnings("ignore", category=UserWarning)
    args = _parser().parse_args(argv)
    try:
        return importlib.import_module(f"moekit.commands.{COMMANDS[args.command]}").run(args)
    except MoekitError as exc:
        print(f"moekit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("moekit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
