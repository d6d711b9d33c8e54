"""A run's shape: run/ in modules of one phase each, none over MOST_LINES, and the corpus asked for at one door.

Read with `ast` from the source, so nothing of moekit is imported. `train` asks prepare/ once for a ready corpus
(prepare.corpus.for_run, which prepares, places, checks and describes it); no other module of run/ reaches into
prepare/, so that a run's data is one phase, not visits spread over the run's setup.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "src" / "moekit" / "run"
MOST_LINES = 300  # a module a reader takes in at one sitting; split one that grows past it along its phases
DOOR = ("execute.py", "corpus", "for_run")  # the one module of run/ that uses prepare/, and what it uses


def prepare_uses(source: str) -> tuple[set[str], set[str]]:
    """(modules of moekit.prepare imported, attributes used on them) in `source`."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moekit.prepare"):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name.startswith("moekit.prepare")}
    used = {
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names
    }
    return names, used


def test_no_module_of_run_is_over_the_bound():
    sizes = {p.name: len(p.read_text(encoding="utf8").splitlines()) for p in RUN.glob("*.py")}
    assert {n: s for n, s in sizes.items() if s > MOST_LINES} == {}


def test_the_corpus_is_asked_for_at_one_door():
    uses = {p.name: prepare_uses(p.read_text(encoding="utf8")) for p in sorted(RUN.glob("*.py"))}
    reaching = {name: used for name, (imported, used) in uses.items() if imported}
    module, imported, attribute = DOOR
    assert reaching == {module: {f"{imported}.{attribute}"}}, reaching


def test_the_reader_sees_a_second_door():
    """The check above can fail: a planted second use of prepare/ is found."""
    planted = "from moekit.prepare import corpus, text_shards\n\nx = corpus.for_run(1)\ny = text_shards.prepare(2)\n"
    assert prepare_uses(planted) == ({"corpus", "text_shards"}, {"corpus.for_run", "text_shards.prepare"})
