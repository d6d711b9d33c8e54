"""docs/extending.md names, for each of the six everyday changes, files that exist and the test that guards it."""

from __future__ import annotations

import re

from conftest import REPO

GUIDE = REPO / "docs" / "extending.md"
CHANGES = [
    "A MoE back end",
    "A cluster kind",
    "A hardware generation",
    "A MoE family",
    "A failure class",
    "A plot in the report",
]


def test_each_change_has_its_guard_test():
    text = GUIDE.read_text()
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S))
    assert [c for c in CHANGES if not any(h.startswith(c) for h in sections)] == [], "changes with no section"
    for heading, body in sections.items():
        guard = re.search(r"Guard: `(tests/test_\w+\.py)`", body)
        assert guard and (REPO / guard.group(1)).is_file(), heading


def test_every_file_it_names_exists():
    named = set(re.findall(r"`((?:src|tests|conf|docs)/[\w/.]+\.(?:py|md|yaml|json))`", GUIDE.read_text()))
    assert named and [n for n in named if not (REPO / n).exists()] == []


def test_every_test_it_names_exists():
    """A guard named as `test_...` (alone or as `tests/<file>.py::test_...`) is a test function of tests/."""
    text = GUIDE.read_text()
    tests = {p.stem: p.read_text() for p in (REPO / "tests").glob("test_*.py")}
    named = set(re.findall(r"`(?:tests/(test_\w+)\.py::)?(test_\w+)`", text))
    assert named
    missing = [
        f"{file}::{name}" if file else name
        for file, name in sorted(named)
        if not any(f"def {name}(" in source for stem, source in tests.items() if not file or stem == file)
    ]
    assert missing == [], "docs/extending.md names tests that do not exist"
