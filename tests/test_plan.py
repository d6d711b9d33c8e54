"""`moekit plan`: dimensions from MaxText's files, FLOPs against MaxText's own count, memory and traffic."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import compose, moekit
from moekit import plan
from moekit.base.errors import ConfigError
from moekit.base.maxtext_files import model_values as maxtext_files
from moekit.config.kinds.hardware import link_table
from moekit.plan import inputs, memory, network, tables
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims

GIB = 2**30
# the shipped tables without the forecast: the analytic plan and its no-overhead bound alone
TABLES = dataclasses.replace(tables.shipped(), forecast=None, bands=None)
CALIBRATION = TABLES.calibration


def build(experiment: str | None, overrides=(), **kw) -> dict:
    return plan.build(compose(experiment, overrides), TABLES, plan.Options(**kw))


def dims_values(experiment: str | None, overrides=()):
    cfg = compose(experiment, overrides)
    values = plan.resolved_values(cfg, *maxtext_files(cfg.model.name))
    return Dims.from_values(values), values, Mesh.from_config(cfg)


# ---- dimensions and FLOPs ----

_PROBE = r"""
import json, sys
from maxtext.configs import pyconfig
from maxtext.utils import maxtext_utils
cfg = pyconfig.initialize(["train"] + sys.argv[1:])
print("RESULT " + json.dumps(maxtext_utils.calculate_tflops_training_per_device(cfg, log=False)[0]))
"""


@pytest.mark.parametrize("experiment", ["smoke", "dsv3_proxy_h200", "dsv3_blog"])
def test_flops_match_maxtexts_count(experiment):
    """The analytic FLOPs equal MaxText's calculate_tflops_training_per_device on the same arguments."""
    cfg = compose(experiment)
    out = build(experiment)
    args = [f"{k}={v}" for k, v in _args(cfg).items() if k not in ("skip_jax_distributed_system",)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={cfg.num_devices}"}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args, "skip_jax_distributed_system=true", f"num_slices={cfg.num_slices}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    assert line, proc.stderr[-3000:]
    maxtext_tflops = json.loads(line[0].removeprefix("RESULT "))
    assert out["flops"]["train_tflop_per_device_step"] == pytest.approx(maxtext_tflops, rel=1e-6)


def _args(cfg) -> dict[str, str]:
    from moekit.translate.maxtext_args import maxtext_args

    return {a.key: a.render().split("=", 1)[1] for a in maxtext_args(cfg, "/tmp/plan-probe", "/tmp/plan-probe/m.jsonl")}


def test_deepseek_v3_parameter_counts_match_the_published_sizes():
    # Published: DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated per token
    # (main model; the 14B multi-token-prediction module is not part of MaxText's model).
    d, _, _ = dims_values("dsv3_blog")
    assert 665e9 < d.total_params() < 680e9
    assert 36e9 < d.active_params() < 39e9


def test_dimensions_come_from_the_installed_model_file():
    base, model_file = maxtext_files("deepseek3-671b")
    d, values, _ = dims_values("dsv3_blog")
    assert (d.emb, d.moe_mlp, d.q_lora, d.kv_lora) == (
        model_file["base_emb_dim"],
        model_file["base_moe_mlp_dim"],
        model_file["q_lora_rank"],
        model_file["kv_lora_rank"],
    )
    # moekit's own keys win over the model file (MaxText's override_model_config precedence)
    d2, _, _ = dims_values("smoke", ["model.num_experts=4", "model.num_layers=3"])
    assert (d2.experts, d2.layers) == (4, 3)


# ---- memory ----


def _items(out: dict) -> dict[str, float]:
    return {i["name"]: i["gib"] for i in out["memory"]["items"]}


def test_remat_policies_order_device_memory():
    full = build("dsv3_proxy_h200", ["memory=remat_full"])["memory"]["device_gib"]
    save_dot = build("dsv3_proxy_h200", ["memory=remat_save_dot_except_mlp"])["memory"]["device_gib"]
    minimal = build("dsv3_proxy_h200", ["memory=remat_minimal"])["memory"]["device_gib"]
    assert full < save_dot < minimal


def test_offload_moves_activations_from_device_to_host():
    keep = ["memory.remat_policy=custom", "memory.tensors.moe_mlpwi_0=device", "memory.tensors.moe_mlpwi_1=device"]
    off = ["memory.remat_policy=custom", "memory.tensors.moe_mlpwi_0=offload", "memory.tensors.moe_mlpwi_1=offload"]
    a, b = build("dsv3_proxy_h200", keep)["memory"], build("dsv3_proxy_h200", off)["memory"]
    assert a["host_gib"] == 0 and b["host_gib"] > 0
    factor = CALIBRATION["device_factor"]  # applies to the device total only
    assert a["device_gib"] - b["device_gib"] == pytest.approx(b["host_gib"] * factor, rel=1e-9)
    # 3 MoE layers x 24,576 tokens x top-8 rows x 2048 x 2 tensors x 2 bytes (bf16)
    assert b["host_gib"] * GIB == pytest.approx(3 * 24576 * 8 * 2048 * 2 * 2)


@pytest.mark.parametrize(
    ("ep", "factor", "ring", "rows"),
    [
        (1, -1.0, False, 8),  # no EP: routed rows stay local (top_k per token)
        (8, -1.0, False, 8 * 4),  # worst case min(EP 8, 32 experts / top-8 = 4)
        (8, 2.0, False, 8 * 2),  # receive capacity = 2 x balanced
        (4, -1.0, True, 8 * 4),  # ring of experts: tokens of every EP rank gathered
    ],
)
def test_dropless_receive_buffer_rows(ep, factor, ring, rows):
    d, values, _ = dims_values("dsv3_proxy_h200")
    mesh = Mesh(dict(data=1, fsdp=1, tensor=1, expert=ep), dict.fromkeys(("data", "fsdp", "tensor", "expert"), 1))
    got, why = memory.routed_rows_per_token(
        d, values | {"ragged_buffer_factor": factor, "use_ring_of_experts": ring}, mesh
    )
    assert got == rows and why


def test_too_large_a_batch_warns_it_will_not_fit():
    out = build("dsv3_proxy_h200", ["train.per_device_batch_size=24"])
    assert not out["memory"]["fits"]
    assert "will not fit" in out["memory"]["warnings"][0]
    assert build("dsv3_proxy_h200")["memory"]["fits"]


@pytest.mark.parametrize("experiment", ["dsv3_blog", "dsv3_blog_1024"])
def test_published_layout_fits_its_hardware(experiment):
    """The blog's configuration ran on GB300, so a sound estimate fits its HBM and its 180 GB host pool."""
    mem = build(experiment)["memory"]
    assert mem["fits"], mem["warnings"]
    assert mem["host_gib"] > 100  # the expert up-projections it offloads
    assert mem["device_gib"] > 0.5 * mem["device_limit_gib"]


@pytest.mark.parametrize("point", CALIBRATION.get("points") or [], ids=lambda p: p["preset"])
def test_estimate_within_15_percent_of_measured_peak(point):
    out = build(None, point["overrides"])
    measured = point["measured_peak_gib"]
    assert abs(out["memory"]["device_gib"] - measured) <= 0.15 * measured, (out["memory"]["device_gib"], measured)


# ---- communication and step time ----


def test_ep_traffic_formulas():
    d, values, _ = dims_values("dsv3_proxy_h200", ["memory=remat_full"])
    mesh = Mesh(dict(data=1, fsdp=1, tensor=1, expert=4), dict.fromkeys(("data", "fsdp", "tensor", "expert"), 1))
    flows = {f.name: f for f in network.traffic(d, values, mesh)}
    ep = flows["EP dispatch + combine"]
    # 2 (dispatch + combine) x tokens x top_k x emb x 2 B x 3/4, three passes (forward, recompute, backward)
    assert ep.ici_bytes == pytest.approx(2 * 24576 * 8 * 7168 * 2 * 3 / 4 * 3 * 3) and ep.dcn_bytes == 0
    ring = {f.name: f for f in network.traffic(d, values | {"use_ring_of_experts": True}, mesh)}
    assert ring["EP dispatch + combine"].ici_bytes == pytest.approx(2 * 24576 * 7168 * 2 * 3 * 3 * 3)
    kept = values | {"remat_policy": "custom", "moe_x_sorted": "device"}
    assert {f.name: f for f in network.traffic(d, kept, mesh)}["EP dispatch + combine"].ici_bytes == pytest.approx(
        ep.ici_bytes * 2 / 3
    )


def test_fsdp_traffic_crosses_the_network_only_between_slices():
    d, values, mesh = dims_values("dsv3_blog")
    one_slice = Mesh(mesh.ici, dict.fromkeys(mesh.dcn, 1))
    f1 = {f.name: f for f in network.traffic(d, values, one_slice)}["FSDP all-gather x2 + reduce-scatter"]
    f2 = {f.name: f for f in network.traffic(d, values, mesh)}["FSDP all-gather x2 + reduce-scatter"]
    f16 = {f.name: f for f in network.traffic(d, values, mesh.with_dcn("fsdp", 16))}[
        "FSDP all-gather x2 + reduce-scatter"
    ]
    assert f1.dcn_bytes == 0 < f2.dcn_bytes < f16.dcn_bytes < 2 * f2.dcn_bytes
    assert f1.ici_bytes == pytest.approx(f2.ici_bytes) == pytest.approx(f16.ici_bytes)


def test_weak_scaling_to_the_published_layouts():
    out = build("dsv3_blog", scale=(128, 1024), compute_tflops=1068)
    rows = {r["gpus"]: r for r in out["scaling"]}
    assert set(rows) == {128, 1024}
    assert 0 < rows[1024]["efficiency"] <= rows[128]["efficiency"] <= 1.0
    assert out["step"]["exposed_comm_s"] > 0  # EP dispatch/combine sits on the critical path
    assert "1024 devices" in rows[1024]["mesh"]


# ---- command line ----


def test_cli_text_and_json(tmp_path):
    text = moekit("plan", "experiment=dsv3_blog", "--scale", "128,1024", "--compute-tflops", "1068")
    assert text.returncode == 0, text.stderr
    for needle in ("memory per device", "EP dispatch + combine", "efficiency", "provenance"):
        assert needle in text.stdout
    js = moekit("plan", "experiment=dsv3_proxy_h200", "train.per_device_batch_size=24", "--format", "json")
    assert js.returncode == 0, js.stderr
    out = json.loads(js.stdout)
    assert out["memory"]["fits"] is False and out["hardware"] == "h200"
    assert not list(Path(tmp_path).iterdir())  # plans launch and write nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["experiment=dsv3_blog", "--scale", "100"], "not a multiple"),
        (["experiment=dsv3_blog", "--scale", "many"], "--scale"),
        (["experiment=smoke", "memory.remat_policy=sometimes"], "not a MaxText remat policy"),
        (["experiment=smoke", "model.num_experts=3", "parallelism.ici.expert=2"], "configuration problem"),
    ],
)
def test_cli_user_errors(args, message):
    proc = moekit("plan", *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr


# ---- what crosses NVLink domains goes over the network ----

ON_H100 = ["hardware=h100", "precision=fp8", "cluster.gpus_per_node=8", "cluster.processes_per_node=8",
           "cluster.nodes=16", "network=ib"]  # fmt: skip


def test_off_domain_share_follows_the_mesh_order():
    """Devices are numbered node by node and the expert axis varies fastest (MaxText's mesh order)."""
    blog = Mesh({"data": 1, "fsdp": 8, "tensor": 1, "expert": 8}, {"data": 1, "fsdp": 2, "tensor": 1, "expert": 1}, 8)
    assert blog.off_domain(("expert",)) == 0.0  # 8 experts fill one 8-GPU node
    assert blog.off_domain(("fsdp",)) == 1.0  # each FSDP peer sits on another node
    assert blog.off_domain(("fsdp", "expert")) == pytest.approx(56 / 63)
    ones = dict.fromkeys(("data", "fsdp", "tensor", "expert"), 1)
    wide = Mesh(ones | {"fsdp": 4, "expert": 16}, ones, 8)
    assert wide.off_domain(("expert",)) == pytest.approx(8 / 15)  # half the EP group is on the next node
    assert dataclasses.replace(blog, domain=72).off_domain(("fsdp",)) == 0.0  # one NVL72 rack holds the slice


def test_plan_sends_cross_node_traffic_over_the_network():
    out = build("dsv3_blog", ON_H100)
    flows = {c["name"]: c for c in out["communication"]}
    fsdp = flows["FSDP all-gather x2 + reduce-scatter"]
    dims, values, mesh = dims_values("dsv3_blog", ON_H100)
    one_domain = {f.name: f for f in network.traffic(dims, values, dataclasses.replace(mesh, domain=None))}
    same = one_domain["FSDP all-gather x2 + reduce-scatter"]
    assert fsdp["ici_gb"] + fsdp["dcn_gb"] == pytest.approx((same.ici_bytes + same.dcn_bytes) / 1e9)
    assert fsdp["dcn_gb"] > 10 * same.dcn_bytes / 1e9  # the ICI FSDP stage crosses nodes: InfiniBand, not NVLink
    assert flows["EP dispatch + combine"]["dcn_gb"] == 0.0  # expert axis inside a node
    links = network.Links.from_table(TABLES.links, compose("smoke", ["hardware=h100"]).hardware)
    rate = out["step"]["compute_tflops"]
    as_nvlink = network.step_model(dims, values, dataclasses.replace(mesh, domain=None), links, rate)
    assert out["step"]["step_s"] > 1.5 * as_nvlink.step_s
    cli = moekit("plan", "experiment=dsv3_blog", *ON_H100, "--format", "json")
    assert cli.returncode == 0, cli.stderr
    assert any("NVLink domain" in w for w in json.loads(cli.stdout)["config_warnings"])


# ---- numbers no hardware has are refused before anything is planned ----

FABRIC_RESULT = {
    "collective": "all_gather",
    "link_class": "scale_out",
    "size_bytes": 1 << 26,
    "time_s": 2e-3,
    "ratio": 0.6,
}


@pytest.mark.parametrize(
    ("compute", "scale", "message"),
    [
        (-0.5, [], "--compute-tflops -0.5"),
        (0.0, [], "--compute-tflops 0"),
        (float("inf"), [], "--compute-tflops inf"),
        (None, [256, -64], "--scale -64"),
        (None, [0], "--scale 0"),
        (None, [3 << 20], "--scale 3145728"),
        (None, list(range(8, 8 * 70, 8)), "at most 64"),
    ],
)
def test_cli_numbers_out_of_range_are_refused(compute, scale, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        inputs.check_numbers(compute, scale)
    inputs.check_numbers(700.0, [128, 1024])  # the documented forms pass


def test_cli_refuses_impossible_numbers_before_composing():
    for args, message in (
        (["--scale=-96"], "--scale -96"),
        (["--compute-tflops=-3"], "--compute-tflops -3"),
        (["--compute-tflops", "6000"], "above hardware=gb300's FP8 dense peak (5000"),
    ):
        proc = moekit("plan", "experiment=dsv3_blog", *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ratio", -0.4),
        ("ratio", 7.0),
        ("time_s", float("nan")),
        ("time_s", -2e-3),
        ("size_bytes", 1e25),
        ("ratio", "x"),
    ],
)
def test_a_fabric_record_no_measurement_gives_is_refused(tmp_path, field, value):
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps({"results": [FABRIC_RESULT]}))
    assert inputs.fabric_record(path)["results"] == [FABRIC_RESULT]  # the well-formed record passes
    path.write_text(json.dumps({"results": [FABRIC_RESULT, FABRIC_RESULT | {field: value}]}))
    with pytest.raises(ConfigError, match=re.escape(f"results[1].{field}=")):
        inputs.fabric_record(path)


def test_a_fabric_record_is_read_up_to_its_bound(tmp_path):
    """A file past the bound is refused by its size, never read whole: here valid JSON after 33 MiB of blank lines."""
    path = tmp_path / "fabric.json"
    path.write_text("\n" * (inputs.FABRIC_MAX_BYTES + 1024) + json.dumps({"results": [FABRIC_RESULT]}))
    proc = moekit("plan", "experiment=dsv3_blog", "--fabric", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"holds more than {inputs.FABRIC_MAX_BYTES:,} bytes" in proc.stderr
    # refused before anything is composed: the file, not the config nothing has composed yet, is named
    proc = moekit("plan", "experiment=dsv3_blog", "model.num_experts=7", "--fabric", str(path))
    assert proc.returncode == 2 and f"holds more than {inputs.FABRIC_MAX_BYTES:,} bytes" in proc.stderr, proc.stderr


def test_search_tries_a_bounded_number_of_layouts_at_any_gpu_count():
    """725,760 GPUs (a count with 216 divisors) once made thousands of layouts, one per DCN data degree; now a few
    per ICI slice, and the ranking still returns the best that fit."""
    from moekit.plan import search

    cfg = compose("dsv3_blog", ["cluster.nodes=181440", "parallelism.dcn.fsdp=11340"])
    assert cfg.num_devices == 725760
    layouts = search.candidates(cfg, 256)
    assert 50 < len(layouts) <= 600
    assert {d["data"] for _, d in layouts} >= {1, 11340}  # all-FSDP and all-data both tried
    rows = plan.build(cfg, tables.shipped(), plan.Options(search=True))["search"]
    assert rows and all("725760 devices" in r["mesh"] for r in rows)


def test_a_run_recorded_before_the_row_held_every_fact_still_forecasts():
    """A GPU run's config.yaml from before the row carried bandwidth, links and host memory: report's forecast
    takes them from today's row, so it equals the forecast of the same config recorded now."""
    from moekit.observe.reports import versus

    recorded = compose("dsv3_proxy_h200").to_dict()
    new_keys = ("hbm_tb_per_s", "hbm_source", "links", "host_gib_per_gpu", "host_source")
    old = recorded | {"hardware": {k: v for k, v in recorded["hardware"].items() if k not in new_keys}}
    now, why_now = versus.run_forecast(recorded)
    then, why_then = versus.run_forecast(old)
    assert now is not None and then is not None, (why_now, why_then)
    assert then.step_s == now.step_s


# ---- the data tables: one reader each ----


def _file_names_in_code(path: Path, names: set[str]) -> set[str]:
    """The names of `names` that a module's code (not its docstrings) spells as a string."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and n.value in names
    }


def test_each_data_table_is_read_in_one_module():
    """links.yaml was read by config/kinds/hardware.py, plan/tables.py and worker/fabric.py, forecast.yaml by three plan
    modules: now each file of moekit/data is named by one module's code, which the others take it from."""
    src = Path(plan.__file__).resolve().parents[1]
    names = {p.name for p in tables.DATA.iterdir()}
    readers: dict[str, list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        for name in _file_names_in_code(path, names):
            readers.setdefault(name, []).append(str(path.relative_to(src)))
    assert readers["links.yaml"] == ["config/kinds/hardware.py"]
    assert readers["forecast.yaml"] == ["plan/tables.py"]
    assert {n: r for n, r in readers.items() if len(r) > 1} == {}
    # the one value they are read into is what `moekit plan` builds from: the link rates are the hardware's table
    assert tables.shipped().links is link_table()


def test_plan_modules_never_import_the_package_face():
    """Inside plan/ the arrows run one way: `build` (plan/__init__.py) imports the modules that compute, and none of
    them imports it back (plan/tables.py called build from below it; a config's setup was reached through it)."""
    from test_layers import SRC, import_graph

    inside = {(a, b) for a, b in import_graph(SRC) if a.startswith("moekit.plan.") and b.startswith("moekit.plan")}
    assert {a for a, b in inside if b == "moekit.plan"} == set()
    assert ("moekit.plan.validate", "moekit.plan.calibrate") in inside  # the graph is really read


def test_measured_vs_forecast_names_an_error_the_runs_own_noise_covers():
    """The report's error column says "within noise" when the run's steady steps spread as far as the error, and
    whether the measurement lies inside the forecast's band, on either side of the forecast."""
    from moekit.observe.reports import versus

    f, why = versus.run_forecast(compose("dsv3_proxy_h200").to_dict())
    assert f is not None, why
    near, far = f.step_s * 1.02, f.step_high_s * 1.5
    assert versus.error(near, f, 0.05) == "+2.0% (within noise ±5%; inside the band)"
    assert versus.error(near, f, 0.01) == "+2.0% (inside the band)"
    assert versus.error(near, f, None) == "+2.0% (inside the band)"
    assert versus.error(far, f, 0.05).endswith("(outside the band)") and "noise" not in versus.error(far, f, 0.05)
    assert versus.error(f.step_low_s * 0.9, f, None).startswith("-") and "outside" in versus.error(
        f.step_low_s * 0.9, f, None
    )
    summary = {"step_time_s": {"median": near, "stdev": near * 0.04, "per_window": near}}
    row = versus._row("a", summary, f, "")
    assert row[-1] == "+2.0% (within noise ±4%; inside the band)"
