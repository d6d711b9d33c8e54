"""The MoE back-end table (config/backends.py) is the one place a back end is described: the schema's choices, the
conf/moe files and the rows name the same back ends, and no other module tells back ends apart by name."""

import re
import typing
from pathlib import Path

import yaml

from moekit.config.backends import BACKENDS
from moekit.config.schema import Moe

REPO = Path(__file__).resolve().parents[1]


def test_the_schema_choices_are_the_rows():
    assert typing.get_args(Moe.model_fields["backend"].annotation) == tuple(BACKENDS)


def test_every_conf_option_is_a_row():
    files = {p.stem: yaml.safe_load(p.read_text())["backend"] for p in (REPO / "conf" / "moe").glob("*.yaml")}
    assert files == {name: name for name in BACKENDS}


def test_rows_are_consistent():
    for b in BACKENDS.values():
        assert not (b.grouped and not b.sparse), b.name  # the grouped layer is one of MaxText's sparse paths
        assert not (b.te_block and b.grouped), b.name
        assert not (b.pinned and not b.hook), b.name
        assert all(b.maxtext.get(k, v) == v for k, v in b.pinned.items()), b.name  # its own keys keep its path
        assert b.min_sm is None or b.platforms == ("gpu",), b.name


# A comparison of moe.backend (or a row's name) with a literal back-end name.
BY_NAME = re.compile(r"backend(\.name)?\s*(==|!=|in|not in)\s*[(\"']|[\"']\s*(==|!=|in)\s*[\w.]*backend\b")


def test_no_module_tells_back_ends_apart_by_name():
    src = REPO / "src" / "moekit"
    found = [
        f"{path.relative_to(src)}:{n}: {line.strip()}"
        for path in src.rglob("*.py")
        if path.name != "backends.py" and "bench" not in path.parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BY_NAME.search(line)
    ]
    assert found == []
