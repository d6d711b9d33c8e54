"""Run a benchmark script under a Python that has moekit's stack (imported first by each script in this folder).

`python benchmarks/<script>.py` with the system Python (no Hydra, pydantic, or an older Python) re-runs itself with
the repository's .venv/bin/python (made by `make venv`); without one it says how to make it and stops. A Python that
has the stack (the GPU machine's, the venv's own) runs the script as it is.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
NEEDED = ("hydra", "omegaconf", "pydantic", "yaml")  # what `import moekit`'s commands need besides the stdlib


def missing() -> list[str]:
    """What this Python lacks for moekit: the modules, or its version when it is older than 3.12."""
    out = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    return out + ([f"Python >= 3.12 (this is {sys.version.split()[0]})"] if sys.version_info < (3, 12) else [])


def ensure() -> None:
    """Re-run this script with the repository's .venv Python when this one lacks moekit's stack; exit 2 with the
    fix when there is none."""
    lacks = missing()
    if not lacks:
        return
    if VENV_PYTHON.is_file() and Path(sys.executable).resolve() != VENV_PYTHON.resolve():
        print(f"{sys.executable} lacks {', '.join(lacks)}; running with {VENV_PYTHON}", file=sys.stderr)
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), *sys.argv])
    script = Path(sys.argv[0]).name
    print(
        f"error: {sys.executable} lacks {', '.join(lacks)}, which moekit needs.\n"
        f"  fix: make venv (in {REPO}), then: .venv/bin/python benchmarks/{script} ...",
        file=sys.stderr,
    )
    raise SystemExit(2)


ensure()
