"""The one way files in this checkout are regenerated from code: run a moekit command in this process and take
what it prints (`stdout_of`), then write each generated file, or with --check report the ones that differ
(`sync`). scripts/recipes.py (docs/recipes/), scripts/forecast_docs.py (docs/plan.md's validation table and
the forecast's derived data) and scripts/families_docs.py (docs/adapting.md's family table) use it; `make docs`
runs them. The package itself never writes into the checkout.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def stdout_of(*argv: str) -> str:
    """What `moekit ARGV` prints, run in this process through moekit's own command line; SystemExit with its
    error when the command fails."""
    from moekit import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    if code:
        raise SystemExit(f"moekit {' '.join(argv)} failed ({code}): {err.getvalue().strip()}")
    return out.getvalue()


def between(doc: str, begin: str, end: str, text: str) -> str:
    """`doc` with what lies between the markers `begin` and `end` replaced by `text` (the markers stay)."""
    if begin not in doc or end not in doc:
        raise SystemExit(f"the markers {begin!r} and {end!r} are not both in the page")
    head, rest = doc.split(begin, 1)
    return f"{head}{begin}\n{text.strip(chr(10))}\n{end}{rest.split(end, 1)[1]}"


def sync(files: Mapping[Path, str], check: bool, how: str, remove: tuple[Path, ...] = ()) -> int:
    """Write each file's text (and remove `remove`), or with `check` print each file that differs or should not
    exist; `how` names the command that regenerates them. Returns the exit status (1: stale, with --check)."""
    stale = [p for p, text in files.items() if not p.is_file() or p.read_text() != text] + list(remove)
    if check:
        for p in stale:
            print(f"{p.relative_to(REPO)} is stale: run `{how}` and commit the result", file=sys.stderr)
        return 1 if stale else 0
    for p in remove:
        p.unlink()
    for p in stale:
        if p in files:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(files[p])
    print(f"{how}: {len(stale)} of {len(files)} file(s) rewritten" + (f", {len(remove)} removed" if remove else ""))
    return 0
