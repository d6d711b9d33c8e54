"""The package's shape: an import graph read from the source (ast), checked against the layers' allowed edges.

Rooms (README "Layout"): the pure layers config, translate, render, plan and observe; the run lifecycle (run/,
with run/records.py the leaf every reader of a run directory shares); the commands; the effects at the edge
(rundir, rendezvous, worker, failures, ...). Lazy imports inside functions count like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PURE = ("config", "translate", "render", "plan", "observe")

# room -> the rooms it may import (its own room always). "root" is the package itself (moekit.__version__).
ALLOWED: dict[str, set[str]] = {
    "config": {"edge", "root"},
    "translate": {"config", "edge", "root"},
    "render": {"config", "translate", "edge", "root"},
    "plan": {"config", "translate", "edge", "root"},
    "observe": {"config", "records", "edge", "root"},
    "records": {"edge", "root"},
    "run": {*PURE, "records", "edge", "root"},
    "commands": {*PURE, "run", "records", "edge", "root"},
    "cli": {"edge", "root"},  # commands are imported by name (importlib), one per invocation
    "edge": {*PURE, "edge", "root"},
    "entry": {"cli", "root"},  # moekit/__main__.py
}


def room(module: str) -> str:
    """The room of a module name under moekit."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if module == "moekit.run.records":
        return "records"
    if parts[1] in (*PURE, "run", "commands"):
        return parts[1]
    return {"cli": "cli", "__main__": "entry"}.get(parts[1], "edge")


def modules(src: Path) -> dict[str, Path]:
    """Module name -> file, for every module of the moekit package under `src`."""
    out = {}
    for path in (src / "moekit").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(src: Path) -> set[tuple[str, str]]:
    """(importer, imported) for every import of one moekit module by another, at any depth of the source.

    `from a import b` counts as an import of a.b when that is a module (the package a is then only a path to it).
    """
    mods = modules(src)
    edges = set()
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in mods] or [node.module]
                if len(targets) < len(subs):  # some names are attributes of the module itself
                    targets.append(node.module)
            edges |= {(name, t) for t in targets if t in mods and t != name}
    return edges


def violations(edges: set[tuple[str, str]]) -> list[str]:
    """Every edge the layer table does not allow, and every command importing another command."""
    out = []
    for importer, imported in sorted(edges):
        a, b = room(importer), room(imported)
        if a == "commands" and b == "commands":
            out.append(f"{importer} imports {imported}: a command imports no other command (share through run/)")
        elif a != b and b not in ALLOWED[a]:
            out.append(f"{importer} ({a}) imports {imported} ({b}): {a} may import only {sorted(ALLOWED[a])}")
    return out


def test_the_source_follows_the_layers():
    edges = import_graph(SRC)
    assert ("moekit.commands.train", "moekit.run.execute") in edges  # the graph is really read
    assert ("moekit.observe.rundata", "moekit.run.records") in edges
    assert violations(edges) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "moekit" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_upward_import_fails(tmp_path):
    src = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "rundir.py": "",
            "config/__init__.py": "",
            "config/schema.py": "def f():\n    from moekit.run import execute  # lazy, still counted\n",
            "run/__init__.py": "",
            "run/execute.py": "from moekit import rundir\nfrom moekit.commands import train\n",
            "run/records.py": "from moekit import rundir\n",
            "observe/__init__.py": "",
            "observe/rundata.py": "from moekit.run import records\n",
            "commands/__init__.py": "",
            "commands/train.py": "from moekit.run import execute\n",
            "commands/verify.py": "import moekit.commands.train\n",
        },
    )
    found = violations(import_graph(src))
    assert found == [
        "moekit.commands.verify imports moekit.commands.train: a command imports no other command (share through run/)",
        "moekit.config.schema (config) imports moekit.run.execute (run): config may import only ['edge', 'root']",
        "moekit.run.execute (run) imports moekit.commands.train (commands): run may import only "
        f"{sorted(ALLOWED['run'])}",
    ]


def test_records_is_a_leaf_and_pure_layers_never_reach_run():
    synthetic = {
        ("moekit.run.records", "moekit.run.execute"),
        ("moekit.render.jobset", "moekit.run.preflight"),
        ("moekit.plan.memory", "moekit.commands.plan"),
        ("moekit.worker", "moekit.run.execute"),
    }
    assert len(violations(synthetic)) == 4
