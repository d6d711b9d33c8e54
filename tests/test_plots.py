"""The plot table (observe/reports/plots.py PLOTS): each chart is one row, named in docs/metrics.md, written by
`report` when it has runs to draw, and no other module names its file."""

from __future__ import annotations

from conftest import REPO
from moekit.observe.reports.plots import PLOTS
from name_compares import compared


def test_every_plot_is_in_the_metrics_guide():
    guide = (REPO / "docs" / "metrics.md").read_text()
    assert [p.file for p in PLOTS if f"`{p.file}`" not in guide] == []


def test_rows_are_distinct_pngs():
    files = [p.file for p in PLOTS]
    assert len(set(files)) == len(files) and all(f.endswith(".png") for f in files)
    assert all(p.shows and p.draw.__doc__ for p in PLOTS)


def test_no_module_names_a_plot_file():
    files = [p.file for p in PLOTS]
    assert compared(files, ["observe/reports/plots.py"]) == []
    src = REPO / "src" / "moekit"
    named = [f"{q.relative_to(src)}: {f}" for q in src.rglob("*.py") if q.name != "plots.py" for f in files
             if f in q.read_text()]  # fmt: skip
    assert named == []
