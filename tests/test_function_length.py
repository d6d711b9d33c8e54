"""No function under src/ runs past 80 lines, except the few named below, and those stay few.

A function's length is `end_lineno - lineno + 1` of its ast node (decorators excluded, docstring included); nested
functions count on their own, named `outer.inner`. A long function reads as one block where a reader wants named
phases: split it into helpers with docstrings, then take it off the list.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "moekit"
LIMIT = 80  # lines per function
MOST_ALLOWED = 8  # the goal of issue 48: at most 8 functions over LIMIT

# Functions still over LIMIT, by "<file stem>.<qualified name>" (a package's __init__.py by the package's name), so
# that moving a module to another room does not change its key, each with the most lines it may have: a listed
# function may shrink, never grow. Shrink this list as functions are split; never add to it (split the new long
# function instead). Listed on 2026-12-07; run/execute.py's _attempt (165 lines then) is left off on purpose: its
# goal is <= 80 lines. Two grew while listed without a bound (text_shards.prepare 101 -> 106, forecast.communication
# 119 -> 122, 2026-12-07): their bounds are where they stand.
ALLOWED = {
    "tune.run": 90,  # commands/tune.py
    "forecast.evaluate": 131,  # plan/forecast.py
    "forecast.communication": 122,  # plan/forecast.py
    "memory.estimate": 112,  # plan/memory.py
    "text_shards.prepare": 94,  # prepare/text_shards.py
    "launch.run": 94,  # run/launch.py
}


def long_functions(root: Path, limit: int = LIMIT) -> dict[str, int]:
    """Every function under `root` longer than `limit` lines, by key ("<file stem>.<qualified name>"), with its
    length."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}.{child.name}"
                length = child.end_lineno - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and length > limit:
                    out[name] = length
                visit(child, name)
            else:
                visit(child, prefix)

    for path in sorted(root.rglob("*.py")):
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        visit(ast.parse(path.read_text(), str(path)), stem)
    return out


def test_no_function_outside_the_list_runs_past_the_limit():
    over = {key: n for key, n in long_functions(SRC).items() if key not in ALLOWED}
    assert not over, (
        f"functions over {LIMIT} lines: {over}; split each into named phases (helpers with docstrings) rather than "
        "adding it to ALLOWED"
    )


def test_no_listed_function_grows():
    grown = {key: (n, ALLOWED[key]) for key, n in long_functions(SRC).items() if key in ALLOWED and n > ALLOWED[key]}
    assert not grown, f"listed functions grew (lines now, most allowed): {grown}; split them instead"


def test_the_list_stays_within_the_goal():
    assert len(ALLOWED) <= MOST_ALLOWED, (
        f"{len(ALLOWED)} functions allowed over {LIMIT} lines (goal: <= {MOST_ALLOWED})"
    )


def _body(lines: int, indent: int) -> str:
    return "\n".join(" " * indent + f"x{i} = {i}" for i in range(lines))


def test_planted_long_functions_are_found(tmp_path):
    """At the limit passes; one line more is found, by its key, in a package's __init__, a class and a nest."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(f"def long():\n{_body(LIMIT, 4)}\n")
    (tmp_path / "pkg" / "mod.py").write_text(
        f"def at_limit():\n{_body(LIMIT - 1, 4)}\n\n"
        f"class C:\n    def method(self):\n{_body(LIMIT, 8)}\n\n"
        f"def outer():\n    def inner():\n{_body(LIMIT - 1, 8)}\n"
    )
    found = long_functions(tmp_path)
    assert found == {"pkg.long": LIMIT + 1, "mod.C.method": LIMIT + 1, "mod.outer": LIMIT + 1}, found
