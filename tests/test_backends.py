"""The MoE back-end table (config/kinds/backends.py) is the one place a back end is described: the schema's choices, the
conf/moe files and the rows name the same back ends, and no other module tells back ends apart by name."""

import re
import typing
from pathlib import Path

import yaml

from moekit.config.kinds.backends import BACKENDS
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


def test_a_backends_own_package_keeps_the_contract_and_sits_below_translate():
    """The row's `hook` names a package that translate, the worker and preflight load by that name alone."""
    import importlib

    from test_layers import FLOOR

    hooked = [b for b in BACKENDS.values() if b.hook]
    assert hooked  # moe=te_gmm
    for b in hooked:
        assert FLOOR[b.hook] < FLOOR["translate"], b.name  # loaded by name, so never an import upward
        assert callable(importlib.import_module(b.hook_module("")).engaged)
        assert callable(importlib.import_module(b.hook_module("job_env")).entries)
        assert callable(importlib.import_module(b.hook_module("hook")).install_from_env)
        assert callable(importlib.import_module(b.hook_module("preflight")).problems)


def test_no_module_names_a_backends_own_package_outside_it():
    """Only the package itself (and the bench, which times its GEMM) imports it; everyone else goes through the row."""
    src = REPO / "src" / "moekit"
    for b in BACKENDS.values():
        if not b.hook:
            continue
        rx = re.compile(rf"\bmoekit(\.|\s+import\s+){b.hook}\b")
        found = [
            f"{path.relative_to(src)}:{n}"
            for path in src.rglob("*.py")
            if b.hook not in path.parts and "bench" not in path.parts
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if rx.search(line)
        ]
        assert found == [], b.hook
