"""Where a module compares something with a literal name of a table's row (a cluster kind, a family, a failure
class, ...): each table's test asks for none outside the table's own module."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "moekit"


def pattern(names: Iterable[str]) -> re.Pattern[str]:
    """`x == "name"`, `x != 'name'`, `x in ("name", ...)`, `"name" == x` for any of `names`."""
    alt = "|".join(map(re.escape, names))
    return re.compile(rf"(==|!=|\bin)\s*[(\[{{]?\s*[\"']({alt})[\"']|[\"']({alt})[\"']\s*(==|!=|\bin\b)")


def compared(names: Iterable[str], owners: Iterable[str]) -> list[str]:
    """Every source line outside the `owners` (paths relative to src/moekit) comparing with one of `names`."""
    rx, skip = pattern(names), set(owners)
    return [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).as_posix() not in skip
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if rx.search(line)
    ]
