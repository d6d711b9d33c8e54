"""The package's shape: an import graph read from the source (ast), checked against one order of rooms.

Rooms (README "Layout") stand in one strict order, ground floor first; a room imports only rooms on floors below
its own (and itself). Rooms on one floor never import each other. The package root holds only cli, __main__ and
__init__. A room split by concern (SPLIT) holds only sub-packages, and each of those is a room of its own
("observe.runs"). Lazy imports inside functions count like any other.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Floors, ground first: each a tuple of rooms (a sub-package of moekit, or "cli" / "entry" for the root's modules).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("base",),  # errors, redaction, failure classes, versions, cache, console notices, MaxText's files
    ("rundir",),  # run directory files and records
    ("config",),  # compose, schema, kind tables (kinds/), checks, load
    ("te_gmm", "attention"),  # moe=te_gmm's own code (hook, grouped GEMM, host probe); moekit's attention hook
    ("translate",),  # config -> MaxText args, XLA flags, env, rendezvous, the fabric spec
    # pure rooms beside each other (observe.runs: summaries, steady steps; checkpoint.model: a checkpoint's model)
    ("render", "plan", "observe.runs", "bench", "checkpoint.model"),
    ("observe.profiles",),  # traced profiles and their rules
    ("observe.reports",),  # reports, plots and comparisons
    ("worker",),  # inside each training process
    ("preflight",),  # host probes
    ("prepare",),  # data prepared on the host
    ("checkpoint.convert",),  # Hugging Face checkpoints in and out (MaxText's converter)
    ("run",),  # one run
    ("series",),  # trials, sweeps, tuning
    ("commands",),
    ("cli",),  # commands are imported by name (importlib), one per invocation
    ("entry",),  # moekit/__main__.py
)
FLOOR = {room: i for i, floor in enumerate(FLOORS) for room in floor}
SPLIT = ("observe", "checkpoint")  # rooms split by concern into sub-packages, each a room of the order


def allowed(room: str) -> set[str]:
    """The rooms `room` may import: every room on a lower floor, itself, and the package root (its version)."""
    return {r for r, f in FLOOR.items() if f < FLOOR[room]} | {room, "root"}


def room(module: str) -> str:
    """The room of a module name under moekit."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if parts[1] in SPLIT and len(parts) > 2:
        return f"{parts[1]}.{parts[2]}"
    return {"cli": "cli", "__main__": "entry"}.get(parts[1], parts[1])


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
    """Every edge against the order, every command importing another command, and every room not in the order."""
    out = []
    for importer, imported in sorted(edges):
        a, b = room(importer), room(imported)
        for r, m in ((a, importer), (b, imported)):
            if r not in FLOOR and r != "root":
                out.append(f"{m} is in no room of the order: add its room to FLOORS, or move it into one")
        if a not in FLOOR or (b not in FLOOR and b != "root"):
            continue
        if a == "cli" and b not in ("cli", "base", "root"):
            out.append(f"{importer} imports {imported}: cli imports a command by name (importlib), one per invocation")
        elif a == "commands" and b == "commands":
            out.append(f"{importer} imports {imported}: a command imports no other command (share through run/)")
        elif b not in allowed(a):
            out.append(f"{importer} ({a}) imports {imported} ({b}): {a} may import only {sorted(allowed(a))}")
    return out


def test_the_source_follows_the_layers():
    edges = import_graph(SRC)
    assert ("moekit.commands.train", "moekit.run.execute") in edges  # the graph is really read
    assert ("moekit.observe.runs.rundata", "moekit.rundir.records") in edges
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
            "rundir/__init__.py": "",
            "rundir/records.py": "from moekit.rundir import attempts\n",
            "rundir/attempts.py": "",
            "config/__init__.py": "",
            "config/schema.py": "def f():\n    from moekit.run import execute  # lazy, still counted\n",
            "run/__init__.py": "",
            "run/execute.py": "from moekit import rundir\nfrom moekit.commands import train\n",
            "observe/__init__.py": "",
            "observe/runs/rundata.py": "from moekit.rundir import records\nfrom moekit.render import jobset\n",
            "render/__init__.py": "",
            "render/jobset.py": "",
            "commands/__init__.py": "",
            "commands/train.py": "from moekit.run import execute\n",
            "commands/verify.py": "import moekit.commands.train\n",
            "helpers.py": "from moekit.base import errors\n",
            "cli.py": "from moekit.base import errors\nfrom moekit.run import execute\n",
            "base/__init__.py": "",
            "base/errors.py": "",
        },
    )
    found = violations(import_graph(src))
    assert found == [
        "moekit.cli imports moekit.run.execute: cli imports a command by name (importlib), one per invocation",
        "moekit.commands.verify imports moekit.commands.train: a command imports no other command (share through run/)",
        f"moekit.config.schema (config) imports moekit.run.execute (run): config may import only "
        f"{sorted(allowed('config'))}",
        "moekit.helpers is in no room of the order: add its room to FLOORS, or move it into one",
        f"moekit.observe.runs.rundata (observe.runs) imports moekit.render.jobset (render): observe.runs may import "
        f"only {sorted(allowed('observe.runs'))}",
        f"moekit.run.execute (run) imports moekit.commands.train (commands): run may import only "
        f"{sorted(allowed('run'))}",
    ]


def test_the_order_runs_one_way():
    assert allowed("base") == {"base", "root"}
    for a in FLOOR:
        for b in FLOOR:
            assert not (a != b and b in allowed(a) and a in allowed(b)), (a, b)


def test_the_package_root_holds_only_the_entry():
    root = {p.name for p in (SRC / "moekit").glob("*.py")}
    assert root == {"__init__.py", "__main__.py", "cli.py"}
    packages = {p.name for p in (SRC / "moekit").iterdir() if (p / "__init__.py").is_file()}
    rooms = packages - set(SPLIT)
    for name in SPLIT:  # a split room holds only its sub-packages (and an empty __init__.py)
        split = SRC / "moekit" / name
        assert {p.name for p in split.glob("*.py")} == {"__init__.py"}
        assert (split / "__init__.py").read_text(encoding="utf8") == ""
        rooms |= {f"{name}.{p.name}" for p in split.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(FLOOR) - {"cli", "entry"}  # every sub-package is a room of the order, and only those


def test_no_module_imports_itself_back():
    edges = import_graph(SRC)
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            assert visit(start, [start]) is None


def test_pure_rooms_never_reach_run():
    synthetic = {
        ("moekit.rundir.records", "moekit.run.execute"),
        ("moekit.render.jobset", "moekit.preflight.host"),
        ("moekit.plan.memory", "moekit.commands.plan"),
        ("moekit.worker.process", "moekit.run.execute"),
        ("moekit.config.checks.cluster", "moekit.translate.rendezvous"),
    }
    assert len(violations(synthetic)) == 5


def test_the_readme_draws_the_order():
    text = (SRC.parent / "README.md").read_text(encoding="utf8")
    layout = text[text.index("## Layout") :]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", layout, flags=re.M)
    drawn = [tuple(r.replace("/", ".") for r in re.findall(r"`([\w/]+?)/`", rooms)) for _, rooms in rows]
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    assert drawn[:-1] == list(FLOORS[:-2])  # the last row: cli.py, then __main__.py


def test_commands_stay_thin():
    """A command parses its arguments and passes the config down: its work lives in the rooms below (200 lines at
    most; `commands/train.py` is the model)."""
    long = {
        p.name: n
        for p in sorted((SRC / "moekit" / "commands").glob("*.py"))
        if (n := len(p.read_text().splitlines())) > 200
    }
    assert not long, long
