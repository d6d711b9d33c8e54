"""Every public function, method and class of the run path carries a docstring.

Read with `ast` from the source files, so nothing of moekit is imported. Public: a module-level name not starting
with `_`, or a method, property or nested class of a public class whose name does not start with `_`. Functions
nested inside functions do not count, and neither do property setters and deleters (the getter holds the docstring).
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "moekit"

# The run path: packages walked whole, and single modules.
RUN_PATH_PACKAGES = (
    "base",
    "rundir",
    "config",
    "te_gmm",
    "translate",
    "render",
    "plan",
    "observe",
    "bench",
    "worker",
    "preflight",
    "run",
    "series",
    "commands",
)
RUN_PATH_MODULES = ("cli.py",)


def run_path_files() -> list[Path]:
    """The run path's source files, sorted by their path relative to the package."""
    files = [PACKAGE / name for name in RUN_PATH_MODULES]
    for package in RUN_PATH_PACKAGES:
        files.extend((PACKAGE / package).rglob("*.py"))
    return sorted(files, key=lambda path: path.relative_to(PACKAGE).as_posix())


def _is_setter_or_deleter(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        isinstance(decorator, ast.Attribute) and decorator.attr in ("setter", "deleter")
        for decorator in node.decorator_list
    )


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """`body` with the statements of its `if`/`try`/`with` blocks spliced in, where definitions can hide."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            out.extend(_statements(node.body) + _statements(node.orelse))
        elif isinstance(node, ast.Try | ast.TryStar):
            blocks = [node.body, node.orelse, node.finalbody] + [handler.body for handler in node.handlers]
            for block in blocks:
                out.extend(_statements(block))
        elif isinstance(node, ast.With | ast.AsyncWith):
            out.extend(_statements(node.body))
        else:
            out.append(node)
    return out


def missing_docstrings(source: str) -> list[str]:
    """Qualified names of the public functions, methods and classes in `source` that have no docstring."""
    missing: list[str] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in _statements(body):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if node.name.startswith("_"):
                continue
            if not isinstance(node, ast.ClassDef) and _is_setter_or_deleter(node):
                continue
            name = prefix + node.name
            if ast.get_docstring(node) is None:
                missing.append(name)
            if isinstance(node, ast.ClassDef):
                walk(node.body, name + ".")

    walk(ast.parse(source).body, "")
    return missing


@pytest.mark.parametrize("path", run_path_files(), ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_run_path_has_docstrings(path: Path) -> None:
    missing = missing_docstrings(path.read_text())
    assert not missing, f"{path.relative_to(PACKAGE)}: no docstring on " + ", ".join(missing)


def test_run_path_is_found() -> None:
    files = run_path_files()
    assert all(path.is_file() for path in files)
    names = {path.relative_to(PACKAGE).as_posix() for path in files}
    assert {"cli.py", "translate/rendezvous.py", "translate/job.py", "config/schema.py", "run/execute.py"} <= names


PLANTED = '''
"""A module."""


def documented():
    """Has one."""


def undocumented():
    return 1


async def undocumented_async():
    pass


def _private():
    pass


def outer():
    """Documented; its nested function does not count."""

    def inner():
        pass


class Public:
    """A class."""

    x: int
    """An attribute docstring, which is not a method."""

    def __init__(self):
        pass

    def method(self):
        pass

    def _helper(self):
        pass

    @property
    def value(self):
        """The value."""

    @value.setter
    def value(self, new):
        pass

    @property
    def bare(self):
        return 1

    class Nested:
        pass


class Bare:
    def documented(self):
        """Has one."""


class _Private:
    def method(self):
        pass


if True:
    def in_if():
        pass
else:
    class InElse:
        pass

try:
    def in_try():
        pass
except ImportError:
    def in_except():
        pass
'''


def test_walker_finds_planted_gaps() -> None:
    assert missing_docstrings(PLANTED) == [
        "undocumented",
        "undocumented_async",
        "Public.method",
        "Public.bare",
        "Public.Nested",
        "Bare",
        "in_if",
        "InElse",
        "in_try",
        "in_except",
    ]


def test_walker_passes_a_documented_module() -> None:
    assert missing_docstrings('def f():\n    """Does f."""\n\n\nclass C:\n    """A C."""\n') == []


def test_walker_flags_a_docstring_removed_from_a_real_module() -> None:
    source = (PACKAGE / "run" / "execute.py").read_text()
    assert missing_docstrings(source) == []
    function = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and len(node.body) > 1
    )
    docstring = function.body[0]
    lines = source.splitlines(keepends=True)
    stripped = "".join(lines[: docstring.lineno - 1] + lines[docstring.end_lineno :])
    assert missing_docstrings(stripped) == [function.name]
