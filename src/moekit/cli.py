"""moekit's command line: thin dispatch to commands/<name>.py, user errors printed without a traceback.

Each command module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`. A command's options and
its overrides may come in any order (`train experiment=smoke --dry-run run.dir=X`).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import errno
import importlib
import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path

from moekit.base import redact
from moekit.base.errors import MoekitError

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
    "data": "data",
    "fabric": "fabric",
    "checkpoint": "checkpoint",
}


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped option, choice or command (difflib)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """argparse's usage error (exit status 2), plus the closest option, choice or command when one is near."""
        super().error(message + _did_you_mean(self, message))


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    unknown = re.search(r"unrecognized arguments: (.+)", message)
    if unknown:
        flags = [s for a in parser._actions for s in a.option_strings]
        hints = []
        for word in unknown.group(1).split():
            name = word.split("=", 1)[0]
            close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6) if name.startswith("-") else []
            if close:
                hints.append(f"{close[0]} (for {word})")
        return f"\n  did you mean {', '.join(hints)}?" if hints else ""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.+)\)", message)
    if choice:
        options = re.findall(r"'?([^',\s]+)'?", choice.group(2))
        close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
        return f"\n  did you mean {close[0]}?" if close else ""
    return ""


def command_help(module: str) -> str:
    """A command module's HELP, read from its source without importing it."""
    spec = importlib.util.find_spec(f"moekit.commands.{module}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "HELP" for t in node.targets):
            return ast.literal_eval(node.value)
    return ""


def _command_parser(name: str) -> argparse.ArgumentParser:
    mod = importlib.import_module(f"moekit.commands.{COMMANDS[name]}")
    p = Parser(prog=f"moekit {name}", description=mod.HELP)
    mod.add_arguments(p)
    return p


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="moekit", description="Dropless MoE training with JAX + TE + MaxText.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for name, module in COMMANDS.items():
        sub.add_parser(name, help=command_help(module))  # each command's own parser is _command_parser's
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """The command's arguments; options may stand between overrides (argparse's intermixed parsing)."""
    if not argv or argv[0] not in COMMANDS:
        return _parser().parse_args(argv)  # --help, or an unknown command: argparse explains
    p = _command_parser(argv[0])
    nested = any(isinstance(a, argparse._SubParsersAction) for a in p._actions)  # `bench gmm`: argparse cannot mix
    args = p.parse_args(argv[1:]) if nested else p.parse_intermixed_args(argv[1:])
    args.command = argv[0]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names; returns its exit status. User errors print one line, not a traceback; an
    interrupt returns 130 and a closed stdout pipe 141."""
    warnings.filterwarnings("ignore", module="hydra")
    warnings.filterwarnings("ignore", category=UserWarning)
    _fill_closed_streams()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = redact.RedactingStream(sys.stdout), redact.RedactingStream(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        code = importlib.import_module(f"moekit.commands.{COMMANDS[args.command]}").run(args)
        sys.stdout.flush()  # a full disk under a redirected stdout fails here, where it is explained below
        return code
    except MoekitError as exc:
        print(f"moekit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("moekit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`moekit ... | head`): nothing more to say, no traceback
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose pipe closed
    except OSError as exc:
        if exc.errno not in _OUTPUT_FULL or exc.filename is not None:
            raise
        _silence_stdout()  # what could not be written is lost; the interpreter's last flush must not fail again
        print(
            f"moekit: error: could not write standard output ({exc.strerror}).\n"
            "  fix: free space where it is redirected, or redirect it to another file system",
            file=sys.stderr,
        )
        return 2


# A write to standard output failed for want of space (a redirect to a full disk or quota).
_OUTPUT_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _fill_closed_streams() -> None:
    """Put /dev/null where standard input, output or error was closed (`moekit plan ... >&-`): what would be printed
    is discarded as the user asked, and no file moekit opens later (a log, a lock) takes descriptor 0, 1 or 2, where
    a print or a child process would write into it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            if getattr(sys, name) is not None:
                continue
        except OSError:
            devnull = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
        setattr(sys, name, open(fd, mode, encoding="utf8", closefd=False))  # noqa: SIM115 (lives as long as moekit)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
