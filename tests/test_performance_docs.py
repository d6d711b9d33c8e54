"""docs/performance.md is an index (goals, headline tables, a link to every page) over one page per campaign or family
in docs/performance/; scripts/performance_docs.py writes its generated parts and checks the rules, and the recording
scripts write each table into the page that holds its section."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys

import pytest

from conftest import REPO


def _load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs = _load("performance_docs", REPO / "scripts" / "performance_docs.py")
sys.path.insert(0, str(REPO / "benchmarks"))
run_presets = _load("run_presets", REPO / "benchmarks" / "run_presets.py")
run_portability = _load("run_portability", REPO / "benchmarks" / "run_portability.py")
RECORDED = re.compile(r"<!-- BEGIN (presets|portability|profile)(?: ([\w-]+))? \(benchmarks/(run_\w+\.py) --record")


def test_index_is_current_and_the_rules_hold():
    want = docs.index()
    assert want == docs.INDEX.read_text(), "run `python scripts/performance_docs.py` and commit docs/performance.md"
    assert docs.problems(want) == []


def test_index_is_at_most_300_lines_and_links_every_page():
    text = docs.INDEX.read_text()
    assert text.count("\n") <= 300
    assert len(docs.pages()) >= 5
    assert [p.name for p in docs.pages() if f"](performance/{p.name})" not in text] == []


def test_index_keeps_the_goals_and_an_attention_parity_section():
    text = docs.INDEX.read_text()
    assert "\n## Goals\n" in text and "\n## Attention parity\n" in text
    assert text.count("<!-- BEGIN attention parity -->") == 1 and text.count("<!-- END attention parity -->") == 1
    assert text.index("<!-- BEGIN attention parity -->") < text.index("<!-- END attention parity -->")


def test_every_recorded_section_is_found_on_the_one_page_that_holds_it():
    found = 0
    for page in docs.pages():
        for kind, section, script in RECORDED.findall(page.read_text()):
            begin = run_presets.markers(section, kind, script)[0]
            assert begin in page.read_text(), (page.name, begin)  # the recording script writes this very marker
            assert run_presets.doc_for(begin) == page
            found += 1
    assert found >= 14  # the 14 tables --record wrote into the one 912-line page before it was split


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of docs/ that the checker reads instead of the repository's."""
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    monkeypatch.setattr(docs, "REPO", tmp_path)
    monkeypatch.setattr(docs, "INDEX", tmp_path / "docs" / "performance.md")
    monkeypatch.setattr(docs, "PAGES", tmp_path / "docs" / "performance")
    assert docs.problems(docs.index()) == []
    return tmp_path / "docs"


def test_the_checker_finds_each_broken_rule(tree):
    page = tree / "performance" / "families_h200.md"
    text = page.read_text()
    page.write_text(text + "\n<!-- BEGIN presets (benchmarks/run_presets.py --record) -->\n")
    assert any("<!-- BEGIN presets --> stands 2 times" in p for p in docs.problems(docs.index()))
    page.write_text(text + "\nsee [nowhere](dsv3_proxy_h200.md#no-such-heading)\n")
    assert any("no such heading" in p for p in docs.problems(docs.index()))
    page.write_text(text)
    (tree / "performance" / "new_campaign.md").write_text("# A new campaign\n")
    stale = docs.INDEX.read_text()
    assert "docs/performance/new_campaign.md is not linked from the index" in docs.problems(stale)
    assert docs.problems(docs.index()) == []  # regenerating the index links it
    assert any("over 300" in p for p in docs.problems(stale + "x\n" * 300))


def test_record_writes_the_page_that_holds_its_section_and_refuses_an_ambiguous_one(tree, tmp_path):
    results = {
        "qwen3": {
            "experiment": "qwen3_235b_proxy_h200",
            "reference": "dense",
            "presets": {"dense": {"overrides": ["moe=dense"], "status": "failed", "error": "x", "batch": [4, 4096]}},
        }
    }
    (tmp_path / "p.json").write_text(json.dumps(results))
    begin = run_presets.markers("tokamax_h100", "portability", "run_portability.py")[0]
    page = run_presets.doc_for(begin, tree)
    assert page == tree / "performance" / "h100_2026-12-06.md"
    before = {p.name: p.read_text() for p in (tree / "performance").glob("*.md")}
    assert run_portability.record([tmp_path / "p.json"], page, "tokamax_h100") == page
    after = {p.name: p.read_text() for p in (tree / "performance").glob("*.md")}
    assert [n for n in before if before[n] != after[n]] == [page.name] and "| qwen3 |" in after[page.name]
    (tree / "performance" / "copy.md").write_text(begin + "\n")
    with pytest.raises(SystemExit, match="stands on 2 pages"):
        run_presets.doc_for(begin, tree)
    with pytest.raises(SystemExit, match="stands on no page"):
        run_presets.doc_for("<!-- BEGIN presets nowhere (benchmarks/run_presets.py --record) -->", tree)
