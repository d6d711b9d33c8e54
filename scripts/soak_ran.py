"""Whether every soak case ran: `python scripts/soak_ran.py <pytest junit xml> <soak node ids, one a line>`.

.ci/run collects the soak cases (pytest -m soak --collect-only -q), runs the suite with --junitxml, then asks this:
a soak case absent from the report or skipped there did not run, and CI fails naming it (exit 1). It also prints
how long the cases of `make test` (not soak) and the soak cases took in the session (junit's times: setup, call and
teardown; a session fixture counts in the first case that uses it).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

MAX_BYTES = 64 * 2**20  # a report of a few thousand cases is well under a megabyte


def junit_id(node_id: str) -> str:
    """pytest's node id (tests/test_x.py::Class::test_y[p]) as junit names it (tests.test_x.Class::test_y[p])."""
    path, *middle, name = node_id.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *middle]) + "::" + name


def not_run(report: str, soak: list[str]) -> list[str]:
    """The soak node ids that the junit `report` does not show as run (absent, or skipped)."""
    ran = set()
    for case in ET.fromstring(report).iter("testcase"):
        if case.find("skipped") is None:
            ran.add(f"{case.get('classname')}::{case.get('name')}")
    return [n for n in soak if junit_id(n) not in ran]


def minutes(report: str, soak: list[str]) -> tuple[float, float]:
    """(minutes the cases not in `soak` took, minutes the soak cases took) in the junit `report`."""
    ids, times = {junit_id(n) for n in soak}, [0.0, 0.0]
    for case in ET.fromstring(report).iter("testcase"):
        times[f"{case.get('classname')}::{case.get('name')}" in ids] += float(case.get("time") or 0.0)
    return times[0] / 60, times[1] / 60


def main(argv: list[str]) -> int:
    report, listed = (Path(a) for a in argv)
    for path in (report, listed):
        if path.stat().st_size > MAX_BYTES:
            print(f"soak_ran: {path} is over {MAX_BYTES} bytes", file=sys.stderr)
            return 2
    soak = [line.strip() for line in listed.read_text().splitlines() if "::" in line]
    if not soak:
        print("soak_ran: no soak case was collected", file=sys.stderr)
        return 1
    text = report.read_text()
    missing = not_run(text, soak)
    rest, soaked = minutes(text, soak)
    print(f"soak_ran: make test's cases took {rest:.1f} min, the soak cases {soaked:.1f} min", file=sys.stderr)
    for node in missing:
        print(f"soak_ran: did not run: {node}", file=sys.stderr)
    print(f"soak_ran: {len(soak) - len(missing)} of {len(soak)} soak cases ran", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
