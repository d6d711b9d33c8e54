"""Hostile values for every surface that reads a number, a MaxText key or a URL: each property holds for whatever
hypothesis draws — a one-line refusal (a MoekitError) or a correct result, never a traceback.

The number rule (base/quantities.py), the checks on what MaxText receives (config/checks/maxtext_view.py), the URL and
name redactor (base/redact.py), the sweep and search counts, and the readers of the stop flag, events and metrics.
`make test` runs each property with a small budget; the `soak` marker runs the same properties at length.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import compose
from moekit.base import quantities, redact
from moekit.base.errors import ConfigError, MoekitError
from moekit.config import sweeps
from moekit.config.checks import maxtext_view, problems
from moekit.config.schema import Config, Hardware
from moekit.observe.runs import events, metrics
from moekit.plan import inputs
from moekit.worker import step_events

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SOAK = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Numbers as a hostile file or override gives them: every float (inf, nan, subnormal 5e-324, 1e308), huge and
# negative integers, booleans, text and nothing.
HOSTILE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e-7, 1e308, 2.0**53, 2**31, 2**63, 10**400, -1, True, False]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8),
    st.none(),
)


def one_line_refusal(exc: BaseException) -> None:
    """A refusal the CLI prints as it is: a MoekitError whose first line says what is wrong (no traceback)."""
    assert isinstance(exc, MoekitError), f"{type(exc).__name__}: {exc}"
    first = str(exc).splitlines()[0]
    assert first and len(first) < 1000


# ---- the table of quantities ----


def _quantity_property(name: str, value: object) -> None:
    q = quantities.QUANTITIES[name]
    why = quantities.problem(name, value)
    if why is None:  # accepted: a number of its kind, finite, in range
        assert not isinstance(value, bool) and isinstance(value, int | float)
        assert math.isfinite(value) and q.low <= value <= q.high
        assert not q.integer or isinstance(value, int)
        assert quantities.check(name, value, "x") is value
    else:
        assert "\n" not in why and q.unit in why
        with pytest.raises(ConfigError) as caught:
            quantities.check(name, value, "the.key")
        one_line_refusal(caught.value)
        assert str(caught.value).startswith("the.key=")
        assert len(str(caught.value).splitlines()[0]) < 400  # a 400-digit number is shortened, not printed


@FAST
@given(name=st.sampled_from(sorted(quantities.QUANTITIES)), value=HOSTILE)
def test_every_quantity_refuses_in_one_line_or_accepts_a_possible_value(name, value):
    _quantity_property(name, value)


@pytest.mark.soak
@SOAK
@given(name=st.sampled_from(sorted(quantities.QUANTITIES)), value=HOSTILE)
def test_every_quantity_refuses_in_one_line_or_accepts_a_possible_value_at_length(name, value):
    _quantity_property(name, value)


def test_each_quantity_states_its_unit_range_and_why():
    for name, q in quantities.QUANTITIES.items():
        assert q.unit and q.why and q.low < q.high and math.isfinite(q.high), name
    assert quantities.MAX_GPUS == inputs.MAX_GPUS


# ---- results: JSON stays RFC 8259 ----

TREES = st.recursive(
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=4), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=20,
)


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} written into JSON")

    return json.loads(text, parse_constant=refuse)


@FAST
@given(tree=TREES)
def test_results_are_written_finite_or_refused_naming_the_number(tree):
    try:
        text = quantities.dumps(tree, "plan")
    except quantities.NotFinite as exc:
        one_line_refusal(exc)
        assert quantities.finite(tree, "plan") and str(exc).startswith(quantities.finite(tree, "plan")[0])
    else:
        assert _strict_json(text) is not None or tree is None


# ---- hardware rows ----


@functools.cache
def h100_row() -> dict:
    return compose(None, ["hardware=h100"]).hardware.model_dump()


ROW_FIELDS = {
    "peak_tflops.fp8": "peak_tflops",
    "peak_tflops.bf16": "peak_tflops",
    "hbm_gib": "hbm_gib",
    "hbm_tb_per_s": "hbm_tb_per_s",
    "host_gib_per_gpu": "host_gib_per_gpu",
    "nvlink_domain": "nvlink_domain",
    "sm": "sm",
}


def _row_with(path: str, value: object) -> dict:
    row = json.loads(json.dumps(h100_row()))
    node = row
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    return row


@FAST
@given(field=st.sampled_from(sorted(ROW_FIELDS)), value=HOSTILE.filter(lambda v: v is not None))
def test_a_hardware_row_takes_only_possible_numbers(field, value):
    from pydantic import ValidationError

    try:
        row = Hardware.model_validate(_row_with(field, value))
    except ValidationError as exc:
        assert len(exc.errors()) >= 1
        assert quantities.problem(ROW_FIELDS[field], value) is not None or isinstance(value, str)
    else:
        got = row.model_dump()
        for part in field.split("."):
            got = got[part]
        assert quantities.problem(ROW_FIELDS[field], got) is None


@pytest.mark.parametrize(
    "override",
    [
        "hardware.peak_tflops.fp8=1e-300",
        "hardware.hbm_gib=1e308",
        "hardware.nvlink_domain=true",
    ],
)
def test_the_numbers_of_a_hardware_row_are_refused_in_one_message(override):
    with pytest.raises(ConfigError) as caught:
        compose("dsv3_blog", [override])
    assert override.split("=")[0] in str(caught.value)


def _conf_with_row(tmp_path: Path, name: str, text: str) -> Path:
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(Path(__file__).resolve().parents[1] / "conf", conf)
    (conf / "hardware" / f"{name}.yaml").write_text(text)
    return conf


def test_a_hardware_row_carries_its_file_name(tmp_path):
    from moekit.config.compose import compose as compose_at

    h100 = (Path(__file__).resolve().parents[1] / "conf" / "hardware" / "h100.yaml").read_text()
    conf = _conf_with_row(tmp_path, "hname", h100)
    with pytest.raises(ConfigError) as caught:
        compose_at(["hardware=hname"], conf)
    assert "hname.yaml" in str(caught.value) and "name: hname" in str(caught.value)
    no_sm = "\n".join(
        line for line in h100.replace("name: h100", "name: nosm").splitlines() if not line.startswith("sm:")
    )
    (conf / "hardware" / "nosm.yaml").write_text(no_sm)
    with pytest.raises(ConfigError) as caught:
        compose_at(["hardware=nosm"], conf)
    assert "lacks sm" in str(caught.value) and "nosm.yaml" in str(caught.value)


# ---- plan's flags, fabric.json and search ----


@FAST
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_compute_tflops_is_a_possible_rate_or_refused(value):
    try:
        inputs.check_numbers(value, [8])
    except ConfigError as exc:
        one_line_refusal(exc)
        assert str(exc).startswith("--compute-tflops ")
    else:
        assert quantities.valid("compute_tflops", value)


FABRIC_RESULT = st.fixed_dictionaries(
    {"size_bytes": HOSTILE, "time_s": HOSTILE, "ratio": HOSTILE}, optional={"gb_per_s": HOSTILE}
)


@FAST
@given(result=FABRIC_RESULT)
def test_fabric_json_numbers_are_measurements_or_refused(result, tmp_path):
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps({"results": [result]}, default=str))  # Infinity and NaN as Python writes them
    try:
        record = inputs.fabric_record(path)
    except ConfigError as exc:
        one_line_refusal(exc)
        assert str(exc).startswith(f"--fabric {path}")
    else:
        r = record["results"][0]
        assert quantities.valid("fabric_size_bytes", r["size_bytes"])
        if r["time_s"] is not None:
            assert quantities.valid("fabric_bytes_per_s", r["size_bytes"] / r["time_s"])
        assert r["ratio"] is None or quantities.valid("fabric_ratio", r["ratio"])


def test_a_one_byte_collective_of_an_hour_is_no_measurement(tmp_path):
    path = tmp_path / "fabric.json"
    for result in ({"size_bytes": 1, "time_s": 3600, "ratio": None}, {"size_bytes": 1, "time_s": 599, "ratio": None}):
        path.write_text(json.dumps({"results": [result]}))
        with pytest.raises(ConfigError):
            inputs.fabric_record(path)


@FAST
@given(devices=st.integers(min_value=-(2**40), max_value=2**40))
def test_the_searched_gpu_count_is_bounded_before_any_layout_is_listed(devices):
    try:
        inputs.check_search(devices)
    except ConfigError as exc:
        one_line_refusal(exc)
        assert f"{devices:,}" in str(exc)
    else:
        assert 1 <= devices <= quantities.MAX_GPUS


# ---- sweeps are counted before they are expanded ----


@FEW
@given(
    axes=st.lists(
        st.tuples(st.integers(-(10**9), 10**9), st.integers(-(10**9), 10**9), st.integers(-(10**6), 10**6)),
        min_size=1,
        max_size=3,
    )
)
def test_a_sweep_is_counted_before_it_is_expanded(axes):
    keys = ["train.seed", "train.steps", "train.per_device_batch_size"]
    overrides = [f"{k}=range({a},{b},{s})" for k, (a, b, s) in zip(keys, axes, strict=False)]
    sizes = [len(range(a, b, s)) if s else None for a, b, s in axes]
    try:
        runs = sweeps.expand(overrides)
    except ConfigError as exc:
        one_line_refusal(exc)
        if None not in sizes:
            assert 0 in sizes or math.prod(sizes) > quantities.QUANTITIES["sweep_runs"].high
    else:
        assert None not in sizes and len(runs) == math.prod(sizes) <= quantities.QUANTITIES["sweep_runs"].high


def test_the_issue_sweep_is_refused_with_its_count():
    with pytest.raises(ConfigError) as caught:
        sweeps.expand(["train.seed=range(0,100000)", "train.per_device_batch_size=range(1,100000)"])
    assert "9,999,900,000 runs" in str(caught.value)


# ---- what a run reads back: the stop flag, events, metrics ----


@FAST
@given(step=HOSTILE)
def test_the_stop_flag_stops_only_at_a_real_step(step, tmp_path, monkeypatch):
    flag = tmp_path / "stop.json"
    flag.write_text(json.dumps({"step": step}, default=str))
    monkeypatch.setattr(step_events, "_stop_file", str(flag))
    monkeypatch.setattr(step_events, "_stop_at", None)
    monkeypatch.setattr(step_events, "_stopping", None)
    step_events._stop_here(3)  # never raises: a worker that crashed here would lose the run's steps
    if quantities.valid("step", step):
        assert step_events._stop_at == step and (step_events._stopping == 3) == (step <= 3)
    else:
        assert step_events._stop_at is None and step_events._stopping is None


def test_an_infinite_stop_step_leaves_the_worker_training(tmp_path, monkeypatch):
    flag = tmp_path / "stop.json"
    flag.write_text('{"step": Infinity}')
    monkeypatch.setattr(step_events, "_stop_file", str(flag))
    monkeypatch.setattr(step_events, "_stop_at", None)
    monkeypatch.setattr(step_events, "_stopping", None)
    step_events._stop_here(5)
    assert step_events._stopping is None


@FAST
@given(step=HOSTILE, t=HOSTILE)
def test_an_unreadable_events_line_is_skipped(step, t):
    lines = [
        json.dumps({"event": events.STEP_END, "step": step, "t": t}, default=str),
        json.dumps({"event": events.SAVE, "step": step, "start": t, "end": t}, default=str),
        json.dumps({"event": events.STOP, "step": step}, default=str),
        '{"event": "step_end", "step": 1, "t": 100.0}',
    ]
    got = events.parse(lines)
    for s, when in got.step_end.items():
        assert quantities.valid("step", s) and math.isfinite(when)
    assert got.stopped_at is None or quantities.valid("step", got.stopped_at)
    assert got.step_end[1] == 100.0
    events.last_io(lines)
    span = events.span(lines)
    assert span is None or all(math.isfinite(x) for x in span)


@FAST
@given(step=HOSTILE)
def test_a_metrics_step_is_a_step_or_the_file_is_refused(step, tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": step, "learning/loss": 1.0}, default=str) + "\n")
    try:
        got = metrics.read(path)
    except MoekitError as exc:
        one_line_refusal(exc)
    else:
        assert [r["step"] for r in got.rows] == [step] and quantities.valid("step", int(step))


# ---- checks judge what MaxText receives ----


@functools.cache
def gpu() -> Config:
    return compose(None, ["hardware=h100", "model.attention=cudnn_flash_te"])


# MaxText key -> values a user might put in either place (moekit's key, or the escape hatch)
MERGED = {
    "max_segments_per_seq": st.integers(-4, 64),
    "packing": st.booleans(),
    "attention": st.sampled_from(["cudnn_flash_te", "cudnn_flash_jax", "dot_product", "flash"]),
    "dataset_type": st.sampled_from(["synthetic", "hf", "grain"]),
    "num_experts": st.integers(1, 300),
    "num_experts_per_tok": st.integers(1, 16),
    "capacity_factor": st.sampled_from([-1.0, 0.0, 1.0, 1.25]),
    "per_device_batch_size": st.integers(1, 8),
    "ici_expert_parallelism": st.integers(1, 8),
    "steps": st.integers(-2, 20),
}


def _set(cfg: Config, path: str, value: object) -> Config | None:
    data = cfg.model_dump()
    *parents, leaf = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[leaf] = value
    try:
        return Config.model_validate(data)
    except ValueError:
        return None


def _whats(found) -> set[str]:
    return {p.what.split(" (set through ")[0] for p in found}


def _merged_property(key: str, value: object) -> None:
    path = maxtext_view.FIELDS[key]
    direct = _set(gpu(), path, value)
    hatched = _set(gpu(), "maxtext.extra", {key: value})
    assert hatched is not None  # the escape hatch takes any scalar; the checks judge it
    through_hatch = problems(hatched)
    if direct is None:  # not a value of moekit's key: refused through the hatch too, naming it
        assert any(p.key == f"maxtext.extra.{key}" for p in through_hatch)
        return
    assert _whats(problems(direct)) <= _whats(through_hatch)
    assert all(p.key.startswith("maxtext.extra") or p.key not in {path} for p in through_hatch)


@FEW
@given(data=st.data())
def test_an_escape_hatch_gets_the_refusals_of_the_key_it_replaces(data):
    key = data.draw(st.sampled_from(sorted(MERGED)))
    _merged_property(key, data.draw(MERGED[key]))


@pytest.mark.soak
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_an_escape_hatch_gets_the_refusals_of_the_key_it_replaces_at_length(data):
    key = data.draw(st.sampled_from(sorted(MERGED)))
    _merged_property(key, data.draw(MERGED[key]))


def test_maxtext_extra_segments_get_the_te_synthetic_refusal():
    found = problems(
        compose(None, ["hardware=h100", "model.attention=cudnn_flash_te", "maxtext.extra.max_segments_per_seq=8"])
    )
    assert any(p.key == "maxtext.extra.max_segments_per_seq" and "cudnn_flash_te on synthetic" in p.what for p in found)


def test_every_field_the_view_maps_is_a_moekit_key():
    dump = gpu().model_dump()
    for key, path in maxtext_view.FIELDS.items():
        node = dump
        for part in path.split("."):
            assert part in node, f"{key} -> {path}"
            node = node[part]


def test_a_back_end_key_set_through_the_hatch_is_refused():
    found = problems(compose("smoke", ["moe=dense", "maxtext.extra.sparse_matmul=true"]))
    assert any(p.key == "maxtext.extra.sparse_matmul" for p in found)


# ---- secrets by structure ----

UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
SUB_DELIMS = "!$&'()*+,;="
USERINFO = st.text(alphabet=UNRESERVED + SUB_DELIMS + "%", min_size=1, max_size=24)


@FAST
@given(user=st.text(alphabet=UNRESERVED, max_size=8), password=USERINFO.filter(lambda p: ":" not in p))
def test_a_url_password_of_any_rfc3986_character_is_redacted(user, password):
    url = f"https://{user}:{password}@data.example.com/train-*.arrayrecord"
    for text in (url, f"x='{url}' y", f'"{url}"', f"a={url},{url}"):
        shown = redact.redact_urls(text)
        assert f"{user}:{redact.REDACTED}@data.example.com" in shown
        assert f":{password}@" not in shown
    assert password in redact.url_passwords(url)


@FAST
@given(token=st.text(alphabet=UNRESERVED, min_size=16, max_size=40))
def test_a_token_given_as_the_url_user_is_redacted(token):
    url = f"https://{token}@github.com/org/repo.git"
    assert redact.redact_urls(f"git clone {url}") == f"git clone https://{redact.REDACTED}@github.com/org/repo.git"
    assert token in redact.url_passwords(url)


def test_short_logins_and_at_signs_outside_the_authority_are_kept():
    for text in ("ssh://git@github.com/a/b", "https://example.com/a:b@c", "mail me@example.com", "https://h/x?u=a@b"):
        assert redact.redact_urls(text) == text


@FAST
@given(
    prefix=st.sampled_from(["", "MY_", "GITHUB_", "db_", "Svc"]),
    word=st.sampled_from(
        [
            "TOKEN",
            "SECRET",
            "PASS",
            "PASSWORD",
            "PASSWD",
            "PASSPHRASE",
            "PAT",
            "API_KEY",
            "KEY",
            "CREDENTIAL",
            "CREDENTIALS",
            "CREDS",
            "AUTH",
            "COOKIE",
        ]
    ),
)
def test_credential_like_names_are_secret(prefix, word):
    assert redact.is_secret_name(f"{prefix}{'_' if prefix and not prefix.endswith('_') else ''}{word}")


@pytest.mark.parametrize(
    "name", ["xla_disable_hlo_passes", "key_proj", "MAX_TOKENS", "tokenizer_path", "PATH", "PATCH_SIZE"]
)
def test_names_that_only_look_like_credentials_are_not(name):
    assert not redact.is_secret_name(name)


# ---- schema-checked renders ----


@FAST
@given(value=st.integers(min_value=-(2**64), max_value=2**64))
def test_render_check_applies_the_crd_int32_format(value):
    from moekit.render import validate

    schema = {"type": "object", "properties": {"maxRestarts": {"type": "integer", "format": "int32"}}}
    found = validate.crd_problems({"maxRestarts": value}, schema)
    assert bool(found) == (not -(2**31) <= value < 2**31)


# ---- partials: refused before anything runs ----


@pytest.mark.parametrize("flag", ["--rtol=-1", "--atol=nan", "--rtol=inf"])
def test_verify_refuses_an_impossible_tolerance_before_training(flag):
    from conftest import moekit

    proc = moekit("verify", "experiment=smoke", "--candidate", "moe=dense", flag, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") <= 3 and flag.split("=")[0] in proc.stderr and "Traceback" not in proc.stderr
