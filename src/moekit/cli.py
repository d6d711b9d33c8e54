"""moekit's command line: thin dispatch to commands/<name>.py, user errors printed without a traceback.

Each command module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
import warnings
from pathlib import Path

from moekit.errors import MoekitError

# name -> module under moekit.commands. Only the command that runs is imported, with its dependencies:
# `moekit --help` and every other command stay fast and need nothing that one command alone needs.
COMMANDS = {
    "train": "train",
    "render": "render",
    "bench": "bench",
    "tune": "tune",
    "report": "report",
    "verify": "verify",
    "plan": "plan",
    "config": "config",
}


def command_help(module: str) -> str:
    """A command module's HELP, read from its source without importing it."""
    spec = importlib.util.find_spec(f"moekit.commands.{module}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "HELP" for t in node.targets):
            return ast.literal_eval(node.value)
    return ""


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moekit", description="Dropless MoE training with JAX + TE + MaxText.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, module in COMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=command_help(module))
            continue
        mod = importlib.import_module(f"moekit.commands.{module}")
        mod.add_arguments(sub.add_parser(name, help=mod.HELP, description=mod.HELP))
    return p


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", module="hydra")
    warnings.filterwarnings("ignore", category=UserWarning)
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
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
