"""Every structured file moekit reads goes through base/parse.py, every file through base/bounded.py's one open.

The guard reads the source: a new `yaml.safe_load`, `json.loads`, `open(...)`, `Path.read_text` or `os.open` for
reading anywhere under src/moekit fails here until it is routed through moekit.base.parse / moekit.base.bounded
(which bound its size, refuse a pipe or device, cap YAML aliases and nesting, and name the file in one line), or is
listed below with the reason it reads no file a user or a run directory names.
"""

from __future__ import annotations

import ast
import os
from collections import Counter
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "moekit"

OWNERS = {"base/bounded.py", "base/parse.py"}  # the one open and the one parser
NOT_A_USERS_FILE = {
    ("base/redact.py", "yaml.safe_load"): 1,  # a config value (a string) typed as YAML would type it; no file
    ("translate/values.py", "yaml.safe_load"): 1,  # the same, for a value written into MaxText's argv
    ("worker/process.py", "yaml.safe_load"): 1,  # the same, for a value passed to MaxText by environment
    ("cli.py", ".read_text"): 1,  # moekit's own command module, parsed for its imports
    ("cli.py", "open"): 1,  # a standard stream's file descriptor, reopened as text
    ("observe/reports/published.py", ".read_text"): 1,  # moekit's packaged data (then parse.yaml_text)
    ("render/validate.py", ".read_text"): 3,  # packaged schemas of moekit and kubernetes-validate (then parse)
    ("run/host_load.py", ".read_text"): 3,  # /proc/loadavg, /proc/stat, /proc/<pid>/stat: the kernel's
    ("series/trial.py", ".read_bytes"): 1,  # /proc/<pid>/cmdline: the kernel's
    ("te_gmm/call_site.py", ".read_bytes"): 1,  # the installed MaxText source file hashed
    ("preflight/host.py", "os.open"): 1,  # a lock file opened to probe its flock; nothing read
    ("rundir/__init__.py", "os.open"): 1,  # the same (lock_held)
}
_RAW = {("yaml", n) for n in ("safe_load", "load", "safe_load_all", "load_all", "full_load", "unsafe_load")}
_RAW |= {("json", "load"), ("json", "loads"), ("os", "open"), ("os", "fdopen"), ("io", "open")}


def _writes(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")


def raw_readers(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) of every call that reads a file or decodes YAML/JSON without the bounded reader or parser."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open" and not _writes(node):
            found.append((node.lineno, "open"))
        elif isinstance(f, ast.Attribute):
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            if owner in ("bounded", "parse"):
                continue
            if (owner, f.attr) in _RAW:
                flags = ast.unparse(node.args[1]) if f.attr == "open" and len(node.args) > 1 else ""
                if not any(w in flags for w in ("O_WRONLY", "O_CREAT", "O_RDWR")) and not _writes(node):
                    found.append((node.lineno, f"{owner}.{f.attr}"))
            elif f.attr in ("read_text", "read_bytes"):
                found.append((node.lineno, f".{f.attr}"))
            elif f.attr == "open" and owner not in ("os", "io", "tarfile", "zipfile") and not _writes(node):
                found.append((node.lineno, ".open"))
    return found


def test_every_reader_goes_through_the_bounded_open_and_the_one_parser():
    seen: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name in OWNERS:
            continue
        for line, call in raw_readers(ast.parse(path.read_text(encoding="utf8"))):
            seen[name, call] += 1
            where.setdefault((name, call), []).append(line)
    extra = {k: where[k] for k, n in seen.items() if n > NOT_A_USERS_FILE.get(k, 0)}
    assert not extra, (
        f"raw file readers outside moekit.base.bounded/parse: {extra}; read files with bounded.read_bytes/"
        "open_regular/lines and decode YAML/JSON with parse.yaml_file/json_file/json_line (or list a file that no "
        "user or run directory names, with its reason, in NOT_A_USERS_FILE)"
    )
    stale = {k for k, n in NOT_A_USERS_FILE.items() if seen[k] < n}
    assert not stale, f"NOT_A_USERS_FILE lists readers that are gone: {stale}; remove them from the list"


def test_the_guard_sees_each_kind_of_raw_reader():
    code = (
        "import json, os, yaml\n"
        "yaml.safe_load(t)\njson.loads(t)\nopen(p)\np.read_text()\np.open('rb')\nos.open(p, os.O_RDONLY)\n"
        "open(p, 'w')\nos.open(p, os.O_WRONLY | os.O_CREAT)\nbounded.read_text(p, 1)\nparse.json_text(t, 'x')\n"
    )
    assert [c for _, c in raw_readers(ast.parse(code))] == [
        "yaml.safe_load",
        "json.loads",
        "open",
        ".read_text",
        ".open",
        "os.open",
    ]


def test_a_bounded_read_holds_the_file_not_its_limit(tmp_path):
    """read_bytes of a small file under a GiB limit allocates about the file (Python sizes a read's buffer by what
    is asked, so read(limit + 1) reserved the whole limit on every read); a file that grew after the size check is
    still read to its end, or refused past the limit."""
    import tracemalloc

    from moekit.base import bounded

    small = tmp_path / "small"
    small.write_bytes(b"x" * 1000)
    tracemalloc.start()
    try:
        assert bounded.read_bytes(small, 2**30) == b"x" * 1000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak

    grown = tmp_path / "grown"
    grown.write_bytes(b"y" * (3 * 2**20))
    real_fstat = bounded.os.fstat  # the checked size says 10 bytes; 3 MiB are there when it is read
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bounded.os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 10, *real_fstat(fd)[7:])))
        assert bounded.read_bytes(grown, 2**30) == b"y" * (3 * 2**20)
        with pytest.raises(bounded.TooLarge):
            bounded.read_bytes(grown, 2**20 + 5)
