"""scripts/soak_ran.py: .ci/run fails when a soak case did not run (cut off by the box, or skipped)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from conftest import REPO

SPEC = importlib.util.spec_from_file_location("soak_ran", REPO / "scripts" / "soak_ran.py")
soak_ran = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(soak_ran)

SOAK = ["tests/test_a.py::test_ran[x-1]", "tests/test_a.py::test_skipped", "tests/test_b.py::Chain::test_cut"]


def test_a_skipped_or_absent_soak_case_did_not_run():
    report = """<testsuites><testsuite name="pytest">
      <testcase classname="tests.test_a" name="test_ran[x-1]" time="1.0"/>
      <testcase classname="tests.test_a" name="test_skipped" time="0.0"><skipped message="no docker"/></testcase>
      <testcase classname="tests.test_a" name="test_not_soak" time="0.1"/>
    </testsuite></testsuites>"""
    assert soak_ran.not_run(report, SOAK) == ["tests/test_a.py::test_skipped", "tests/test_b.py::Chain::test_cut"]
    rest, soaked = soak_ran.minutes(report, SOAK)  # make test's share of the session, and the soak cases'
    assert (round(rest * 60, 3), round(soaked * 60, 3)) == (0.1, 1.0)


def test_the_ids_are_those_pytest_writes(tmp_path):
    """A real report of a real session: pytest's junit names, read back to the node ids it ran."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n\nclass TestC:\n    def test_m(self):\n        pass\n\n"
        "@pytest.mark.parametrize('p', ['a b', 2])\ndef test_p(p):\n    pass\n\n"
        "def test_s():\n    pytest.skip('no')\n"
    )
    junit = tmp_path / "junit.xml"
    ids = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "tests"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    ids = [i for i in ids if "::" in i]
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "tests"],
        cwd=tmp_path, capture_output=True, check=True,
    )  # fmt: skip
    assert len(ids) == 4
    assert soak_ran.not_run(junit.read_text(), ids) == ["tests/test_x.py::test_s"]
