"""Hostile file shapes at every file input moekit reads, generated (hypothesis): aliases, depth, non-finite numbers,
pipes, devices, links, huge files, names with control codes.

Each property: a one-line refusal naming the file, or the right value; no traceback (no exception but moekit's);
memory bounded (the worst shapes are read in a child under an address-space cap); nothing written outside a run
directory; nothing of the user's deleted. `make test` runs a small budget of examples (the `quick` cases),
`make test-soak` a large one (the `soak` cases).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moekit import rundir
from moekit.base import bounded, parse
from moekit.base.errors import MoekitError
from moekit.rundir import claims, records

BUDGETS = [pytest.param(25, id="quick"), pytest.param(500, id="soak", marks=pytest.mark.soak)]


def run_property(budget: int, strategy: st.SearchStrategy, check) -> None:
    """`check` over `budget` examples of `strategy` (no deadline: the shared CI host is slow)."""
    settings(max_examples=budget, deadline=None, suppress_health_check=list(HealthCheck), database=None)(
        given(strategy)(check)
    )()


def one_line_naming(exc: BaseException, name: str) -> None:
    """A refusal's first line names the file (escaped) and holds no control character."""
    first = str(exc).split("\n", 1)[0]
    assert bounded.shown(name) in first, (name, str(exc))
    assert first.isprintable(), first


# ---- YAML: aliases, depth, non-finite numbers, any text ----


def alias_bomb(width: int, levels: int) -> str:
    lines = ["a0: &a0 [x, y]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def nested(depth: int, flow: bool) -> str:
    return "[" * depth + "]" * depth if flow else "".join(f"{'  ' * i}k:\n" for i in range(depth)) + "  " * depth + "v"


def expanded_size(value, seen=None) -> int:
    """Values `value` stands for with every shared object counted each time it appears."""
    if isinstance(value, dict):
        return 1 + sum(expanded_size(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(expanded_size(v) for v in value)
    return 1


yaml_shapes = st.one_of(
    st.builds(alias_bomb, st.integers(1, 12), st.integers(1, 12)),
    st.builds(nested, st.integers(1, 3000), st.booleans()),
    st.sampled_from([".inf", "-.inf", ".nan", "x: .NaN", "[1, 2, .inf]", "a: {b: [1e999]}", "&a [*a]", "*nope"]),
    st.text(max_size=200),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=30,
    ).map(json.dumps),
)


@pytest.mark.parametrize("budget", BUDGETS)
def test_yaml_gives_a_bounded_value_or_a_one_line_refusal(budget):
    def check(text):
        try:
            value = parse.yaml_text(text, "config\n\x1b[31m.yaml")
        except parse.ParseError as exc:
            one_line_naming(exc, "config\n\x1b[31m.yaml")
            return
        assert expanded_size(value) <= 2 * parse.MAX_NODES
        assert parse._nonfinite(value) is None  # noqa: SLF001 (the rule's own check, applied to the result)

    run_property(budget, yaml_shapes, check)


def test_an_alias_bomb_and_deep_nesting_are_refused_by_name():
    with pytest.raises(parse.TooComplex, match="aliases expand to more than"):
        parse.yaml_text(alias_bomb(9, 9), "crd.yaml")
    with pytest.raises(parse.TooComplex, match="nested deeper than"):
        parse.yaml_text(nested(5000, True), "deep.yaml")
    with pytest.raises(parse.TooComplex, match="refers to itself"):
        parse.yaml_text("&a [*a]", "loop.yaml")
    assert parse.yaml_text(alias_bomb(3, 3), "small.yaml")["a3"][0][0][0] == ["x", "y"]  # small aliases: kept


# ---- JSON: non-finite numbers, depth, huge integers ----

json_shapes = st.one_of(
    st.sampled_from(["Infinity", "-Infinity", "NaN", '{"step": Infinity}', "[1e999]", '{"a": -1e400}', "1" * 5000]),
    st.integers(1, 20000).map(lambda n: "[" * n + "]" * n),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=30,
    ).map(lambda v: json.dumps(v)),
    st.text(max_size=100),
)


@pytest.mark.parametrize("budget", BUDGETS)
def test_json_gives_the_finite_value_or_a_one_line_refusal(budget):
    def check(text):
        try:
            value = parse.json_text(text, "fabric.json")
        except parse.ParseError as exc:
            one_line_naming(exc, "fabric.json")
            return
        assert parse._nonfinite(value) is None  # noqa: SLF001
        assert value == json.loads(text)

    run_property(budget, json_shapes, check)


# ---- the worst shapes, read under an address-space cap ----

CAPPED = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB: the issue's bombs grew to 3.8 GB
    from pathlib import Path
    from moekit.base import parse
    from moekit.rundir import records
    from moekit.render import validate
    folder = Path(sys.argv[1])
    outcomes = []
    for name in ("bomb.yaml", "deep.yaml", "deep.json"):
        try:
            parse.yaml_file(folder / name, 64 << 20, "file") if name.endswith("yaml") else parse.json_file(
                folder / name, 64 << 20, "file")
            outcomes.append("read")
        except parse.ParseError as exc:
            outcomes.append(str(exc).splitlines()[0])
    run = folder / "run"
    for reader in (records.read_config, records.read_fabric, records.read_profile):
        try:
            reader(run)
            outcomes.append("read")
        except records.Unreadable as exc:
            outcomes.append(str(exc).splitlines()[0])
    try:
        validate.crd_schema(folder / "bomb.yaml")
    except validate.ValidationSetupError as exc:
        outcomes.append(str(exc).splitlines()[0])
    print("\\n".join(outcomes))
    """
)


def test_alias_bombs_and_deep_files_are_refused_within_a_memory_cap(tmp_path):
    (tmp_path / "bomb.yaml").write_text(alias_bomb(10, 10))
    (tmp_path / "deep.yaml").write_text(nested(200_000, True))
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.CONFIG).write_text(alias_bomb(10, 10))
    (run / "fabric.json").write_text('{"results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (run / rundir.PROFILE).write_text('{"step_ms": Infinity}')
    p = subprocess.run([sys.executable, "-c", CAPPED, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert len(lines) == 7 and "read" not in lines, lines
    assert "aliases expand" in lines[0] and "nested deeper" in lines[1] and "nested deeper" in lines[2], lines
    assert "config.yaml" in lines[3] and "fabric.json" in lines[4] and "not a finite number" in lines[5], lines
    assert "bomb.yaml" in lines[6] and "aliases expand" in lines[6], lines


# ---- one open: pipes, devices, links, huge files, names with control codes ----


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def in_time(fn, seconds: float = 10.0):
    """fn() run in a thread that must end within `seconds` (a pipe opened for reading would block forever)."""
    out: dict[str, object] = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the reader blocked"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")


names = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=20
).filter(lambda s: s not in (".", "..") and len(s.encode()) < 200)


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_pipe_device_link_or_huge_file_is_refused_in_one_line_without_blocking(budget, tmp_path_factory):
    def check(name, shape):
        folder = tmp_path_factory.mktemp("one_open")
        path = folder / name
        if shape == "fifo":
            fifo(path)
        elif shape == "device":
            path.symlink_to("/dev/zero")
        elif shape == "link":
            (folder / "real").write_text("{}")
            path.symlink_to(folder / "real")
        elif shape == "huge":
            with open(path, "wb") as fh:
                fh.truncate(1025)
        else:
            path.write_text('{"a": 1}')
        try:
            value = in_time(lambda: parse.json_file(path, 1024, "record", follow=shape != "link"))
        except bounded.TooLarge as exc:
            assert shape in ("fifo", "device", "link", "huge"), shape
            one_line_naming(exc, str(path))
            return
        assert shape == "file" and value == {"a": 1}

    run_property(
        budget, st.tuples(names, st.sampled_from(["fifo", "device", "link", "huge", "file"])), lambda a: check(*a)
    )


def test_a_stop_flag_that_is_a_pipe_or_infinite_never_blocks_nor_stops_the_worker(tmp_path, monkeypatch):
    from moekit.worker import step_events

    for body in (None, '{"step": Infinity}', '{"step": 1e999}', '{"step": true}', "[" * 10_000):
        flag = tmp_path / f"stop{hash(body)}.json"
        fifo(flag) if body is None else flag.write_text(body)
        monkeypatch.setattr(step_events, "_stop_file", str(flag))
        monkeypatch.setattr(step_events, "_stop_at", None)
        monkeypatch.setattr(step_events, "_stopping", None)
        in_time(lambda: step_events._stop_here(5))  # noqa: SLF001
        assert step_events._stopping is None  # noqa: SLF001
    flag.write_text('{"step": 3}')  # the real flag still works
    in_time(lambda: step_events._stop_here(5))  # noqa: SLF001
    assert step_events._stopping == 5  # noqa: SLF001


def test_an_infinite_step_in_metrics_or_events_is_a_refusal_or_a_skipped_line(tmp_path):
    from moekit.observe.runs import events, metrics

    m = tmp_path / "metrics.jsonl"
    m.write_text('{"step": 0, "loss": NaN}\n{"step": Infinity, "loss": 1.0}\n{"step": 2, "loss": 1.0}\n')
    with pytest.raises(metrics.MetricsError) as exc:
        metrics.read(m)
    assert "metrics.jsonl:2" in str(exc.value) and "\n" not in str(exc.value)
    m.write_text('{"step": 0, "loss": NaN}\n{"step": 1, "loss": 2.0}\n{"step": Infin')  # a NaN loss is kept
    got = metrics.read(m)
    assert [r["step"] for r in got.rows] == [0, 1] and math.isnan(got.rows[0]["loss"]) and got.truncated_tail
    e = tmp_path / "events.jsonl"
    e.write_text(
        '{"event": "step_end", "step": Infinity, "t": 1.0}\n{"event": "stop", "step": 1e999}\n'
        '{"event": "step_end", "step": 1, "t": Infinity}\n{"event": "step_end", "step": 2, "t": 5.0}\n'
    )
    assert events.read(e).step_end == {2: 5.0}
    pipe = fifo(tmp_path / "events.1.jsonl")
    with pytest.raises(bounded.TooLarge, match="not a regular file"):  # a pipe: refused by name, no hang
        in_time(lambda: events.read(pipe))
    assert events.lines(pipe) == []  # the watchdog's reader: nothing, no hang


def test_utf16_text_is_named_so_not_called_binary(tmp_path):
    from moekit.prepare import text_shards

    for data in ("hello world\n".encode("utf-16"), "hello world\n".encode("utf-16-le")):
        path = tmp_path / "notes.txt"
        path.write_bytes(data)
        with pytest.raises(text_shards.PrepareError, match="UTF-16") as exc:
            text_shards.read_text(path)
        assert "binary" not in str(exc.value)


# ---- the config tree: read once, checked decoded, composed from the checked bytes ----


@pytest.fixture()
def conf(tmp_path) -> Path:
    import shutil

    from moekit.config.compose import config_dir

    copy = tmp_path / "conf"
    shutil.copytree(config_dir(), copy)
    return copy


def test_a_defaults_entry_leaving_the_tree_is_refused_even_written_with_escapes(conf, tmp_path):
    from moekit.base.errors import ConfigError
    from moekit.config import compose

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil7.yaml").write_text("train:\n  steps: 7\n")
    (conf / "experiment" / "sneaky.yaml").write_text(
        '# @package _global_\ndefaults:\n  - "/experiment/\\x2e\\x2e/\\x2e\\x2e/outside/evil7"\n'
    )
    with pytest.raises(ConfigError, match="outside the config tree"):
        compose.compose_raw(["experiment=sneaky"], conf)


@pytest.mark.parametrize("shape", ["fifo", "deep", "bomb", "utf16"])
def test_a_config_file_of_a_hostile_shape_is_refused_by_name(conf, shape):
    from moekit.base.errors import ConfigError
    from moekit.config import compose

    path = conf / "model" / "hostile.yaml"
    if shape == "fifo":
        fifo(path)
    elif shape == "deep":
        path.write_text(nested(50_000, True))
    elif shape == "bomb":
        path.write_text(alias_bomb(10, 10))
    else:
        path.write_bytes("model:\n  name: x\n".encode("utf-16"))
    with pytest.raises(ConfigError) as exc:
        in_time(lambda: compose.compose_raw([], conf), 60)
    assert str(path) in str(exc.value).splitlines()[0]
    assert shape != "utf16" or "UTF-16" in str(exc.value)


def test_hydra_composes_the_checked_bytes_not_a_file_swapped_after_the_check(conf, monkeypatch):
    from moekit.config import compose

    real = compose.checked_tree

    def swap_after_check(tree):
        with real(tree) as copy:
            (tree / "config.yaml").unlink()
            (tree / "config.yaml").symlink_to("/dev/zero")  # swapped between moekit's check and Hydra's read
            yield copy

    monkeypatch.setattr(compose, "checked_tree", __import__("contextlib").contextmanager(swap_after_check))
    cfg = in_time(lambda: compose.compose_raw(["train.steps=3"], conf), 60)
    assert cfg.train.steps == 3


# ---- one confinement: no write leaves a run directory or passes through a link ----

parts = st.lists(st.sampled_from(["a", "b", "..", ".", "run_name", "checkpoints", "/", "x"]), min_size=1, max_size=6)


@pytest.mark.parametrize("budget", BUDGETS)
def test_confined_never_returns_a_path_outside_the_run_or_through_a_link(budget, tmp_path_factory):
    def check(args):
        words, link_at = args
        base = tmp_path_factory.mktemp("confine")
        run = base / "run"
        (run / "a" / "b").mkdir(parents=True)
        (base / "elsewhere").mkdir()
        if link_at:
            (run / link_at).symlink_to(base / "elsewhere")
        rel = os.path.join(*words)
        try:
            got = rundir.confined(run, rel)
        except rundir.OutsideRunDir as exc:
            assert "\n" in str(exc) and str(exc).split("\n")[0].isprintable()
            return
        assert got.is_relative_to(run) and got != run
        here = run
        for part in got.relative_to(run).parts:
            here = here / part
            assert not here.is_symlink()

    run_property(budget, st.tuples(parts, st.sampled_from([None, "run_name", "checkpoints", "x"])), check)


def test_a_link_at_the_runs_checkpoints_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "moe").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (run / "moe" / "checkpoints").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(rundir.OutsideRunDir, match="checkpoints is a symbolic link"):
        rundir.maxtext_outputs(run, "moe")
    from moekit.rundir import attempts

    with pytest.raises(rundir.OutsideRunDir):
        attempts.latest_checkpoint(run, "moe")


# ---- claimed output folders: a live one kept, a dead one removed, a user's never ----

HOLD = (
    "import sys, time; from pathlib import Path; from moekit.rundir import claims; "
    "c = claims.claim(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
)


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_folder_without_moekits_claim_is_never_removed(budget, tmp_path_factory):
    from moekit.prepare import text_shards

    def check(args):
        suffix, age_days, with_files = args
        base = tmp_path_factory.mktemp("users")
        mine = base / f".out.tmp-{suffix}"
        mine.mkdir()
        if with_files:
            (mine / "notes.txt").write_text("keep me")
        os.utime(mine, (time.time() - age_days * 86400, time.time() - age_days * 86400))
        text_shards.remove_stale(base / "out")
        assert mine.is_dir() and (not with_files or (mine / "notes.txt").read_text() == "keep me")

    run_property(budget, st.tuples(names, st.integers(0, 400), st.booleans()), check)


def test_a_live_claim_is_kept_and_a_dead_ones_folder_is_removed(tmp_path):
    folder = tmp_path / "o.partial"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert claims.state(folder).kind == "live" and not claims.remove_if_stale(folder)
        with pytest.raises(claims.Claimed, match=f"process {holder.pid}"):
            with claims.claimed(folder, "checkpoint"):
                pass
        assert folder.is_dir()
    finally:
        holder.kill()
        holder.wait()
    assert claims.state(folder).kind == "stale"  # the kernel dropped the dead writer's lock; its pid is gone
    with claims.claimed(folder, "checkpoint") as held:
        assert held.folder == folder
    another_host = tmp_path / "p.partial"
    another_host.mkdir()
    (another_host / claims.MARKER).write_text(json.dumps({"pid": 1, "host": socket.gethostname() + "-other"}))
    assert claims.state(another_host).kind == "unknown" and not claims.remove_if_stale(another_host)


def test_two_imports_to_one_out_never_remove_each_others_folder(tmp_path):
    from moekit.checkpoint.convert import target
    from moekit.checkpoint.model.hf import CheckpointError

    out = tmp_path / "ckpt"
    with target.writing(out, "import") as tmp:
        (tmp / "weights").write_text("live")
        with pytest.raises(CheckpointError, match="being written by process"):
            with target.writing(out, "import"):
                pass
        assert (tmp / "weights").read_text() == "live"
    assert (out / "weights").read_text() == "live" and not target.partial(out).exists()


def test_nothing_is_written_outside_and_no_error_is_a_traceback(tmp_path):
    """A MoekitError is what the CLI prints as one line; every refusal above is one (TooLarge, ParseError, ...)."""
    for cls in (bounded.TooLarge, parse.ParseError, parse.TooComplex, rundir.OutsideRunDir, claims.Claimed):
        assert issubclass(cls, MoekitError)
    assert issubclass(records.Unreadable, MoekitError)
