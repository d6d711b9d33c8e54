"""The failure-class table (base/failures.py): every class has its troubleshooting section, a class read from a log
has a log it is read from (tests/test_failures.py CASES), and no other module compares a class's name."""

from __future__ import annotations

import re

from conftest import REPO
from moekit.base import failures
from name_compares import compared
from test_failures import CASES


def test_every_class_has_a_troubleshooting_section():
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    anchors = {failures.anchor(h) for h in re.findall(r"^## (.+)$", text, flags=re.M)}
    assert [c.title for c in failures.ALL if failures.anchor(c.title) not in anchors] == []


def test_every_class_read_from_a_log_has_a_case():
    cased = {expected for _, _, _, expected in CASES}
    assert [c.name for c in failures.CLASSES if c.name not in cased] == []


def test_rows_are_consistent():
    assert {c.trial_status for c in failures.ALL} <= {"failed", "oom", "timeout"}
    for c in failures.CLASSES:
        assert c.patterns and all(re.compile(p) for p in c.patterns), c.name
    assert failures.BY_NAME["error"] is failures.OTHER


# Lines that compare a word that happens to be a class's name with something else.
NOT_CLASSES = ('fault == "hang"',)  # worker/fabric.py: the kinds of its test-only fault switch


def test_no_module_tells_failure_classes_apart_by_name():
    found = compared([c.name for c in failures.ALL], ["base/failures.py"])
    assert [f for f in found if not any(n in f for n in NOT_CLASSES)] == []
