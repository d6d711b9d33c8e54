"""moe=te_gmm on CPU: composition, translation, checks, host probes and refusals, the row layout, and the wiring.

TE's grouped GEMM itself runs only on an SM >= 90 GPU (benchmarks/run_presets.py te_gmm rows). Here the layout
around it is checked against jax.lax.ragged_dot, and the hook is run inside real MaxText training with XLA's
ragged_dot in TE's place (the wiring, not the kernel).
"""

from __future__ import annotations

import json
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import compose, losses, moekit
from moekit.base.errors import MoekitError
from moekit.config.checks import problems
from moekit.observe.reports import compare
from moekit.observe.runs import routing
from moekit.preflight import host as run_preflight
from moekit.preflight.maxtext_validate import validate
from moekit.te_gmm import BUCKETS_ENV, MODE_ENV, bias, call_site, grouped, hook, preflight
from moekit.translate.job import build
from moekit.translate.maxtext_args import maxtext_args

PROXY = "dsv3_proxy_h200"


def env_of(experiment: str, overrides=()) -> dict[str, str]:
    return build(compose(experiment, overrides), "/r", "/r/m.jsonl").env_dict


# ---- composition and translation ----


def test_te_gmm_is_maxtexts_ragged_dot_path_plus_the_hook_env():
    te_gmm, ragged = compose(PROXY, ["moe=te_gmm"]), compose(PROXY, ["moe=ragged_dot"])
    assert problems(te_gmm) == []
    args = [a.render() for a in maxtext_args(te_gmm, "/r", "/r/m")]
    assert args == [a.render() for a in maxtext_args(ragged, "/r", "/r/m")]
    assert {"sparse_matmul=true", "megablox=false", "use_tokamax_gmm=false", "capacity_factor=-1.0"} <= set(args)
    assert not [a for a in args if a.startswith(("te_moe_block=", "te_gmm_quantization="))]
    env = env_of(PROXY, ["moe=te_gmm"])
    assert (env[MODE_ENV], env[BUCKETS_ENV]) == ("te", "1")
    assert MODE_ENV not in env_of(PROXY, ["moe=ragged_dot"]) and MODE_ENV not in env_of(PROXY)


@pytest.mark.parametrize(
    "experiment, overrides, mode, quantization",
    [
        (PROXY, ["precision=bf16"], "te", None),
        (PROXY, ["precision=fp8"], "te_fp8", "te_fp8_currentscaling"),  # expert GEMMs FP8 on Hopper too
        ("dsv3_ladder_3_mxfp8", [], "te", "te_fp8_currentscaling"),  # MXFP8 experts only with moe=te
    ],
)
def test_precision_picks_the_expert_gemm(experiment, overrides, mode, quantization):
    cfg = compose(experiment, ["moe=te_gmm", *overrides])
    assert problems(cfg) == []
    args = {a.key: a.value for a in maxtext_args(cfg, "/r", "/r/m")}
    assert args.get("quantization") == quantization
    assert env_of(experiment, ["moe=te_gmm", *overrides])[MODE_ENV] == mode


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_composes_with_expert_parallelism_on_any_number_of_gpus(ep):
    overrides = ["moe=te_gmm", f"cluster.gpus_per_node={ep}", f"parallelism.ici.expert={ep}", "parallelism.ici.fsdp=1"]
    cfg = compose(PROXY, overrides)
    assert problems(cfg) == [] and cfg.num_devices == ep
    env = env_of(PROXY, overrides)
    assert env[BUCKETS_ENV] == str(1 if ep == 1 else 2 * ep)
    args = {a.key: a.value for a in maxtext_args(cfg, "/r", "/r/m")}
    assert args["use_ring_of_experts"] is False and args["ici_expert_parallelism"] == ep  # MaxText's ragged a2a


@pytest.mark.parametrize("ep", [2, 4])  # EP 8 on 128 GPUs: ladder rung 1, in test_experiments.py
def test_maxtext_accepts_the_expert_parallel_args(ep):
    overrides = ["moe=te_gmm", f"cluster.gpus_per_node={ep}", f"parallelism.ici.expert={ep}", "parallelism.ici.fsdp=1"]
    cfg = compose(PROXY, overrides)
    validate([a.render() for a in maxtext_args(cfg, "/tmp/r", "/tmp/r/m.jsonl")], cfg.num_devices)


# ---- config checks (before anything launches) ----


@pytest.mark.parametrize(
    "experiment, overrides, key, words",
    [
        ("smoke", ["moe=te_gmm"], "moe", "SM >= 90"),
        (PROXY, ["moe=te_gmm", "hardware.sm=80"], "moe", "SM >= 90"),
        (PROXY, ["moe=te_gmm", "moe.dispatch=nccl_ep"], "moe.dispatch", "TE MoE block only"),
        (PROXY, ["moe=te_gmm", "precision=mxfp8"], "precision", "Blackwell"),
        ("smoke", ["moe=te_gmm", "precision=fp8"], "precision", "FP8 tensor cores"),
        (PROXY, ["moe=te_gmm", "moe.ragged_buffer_factor=1.0"], "moe.ragged_buffer_factor", "drops"),
        (PROXY, ["moe=te_gmm", "maxtext.extra.use_tokamax_gmm=true"], "maxtext.extra", "off the ragged_dot path"),
    ],
    ids=["cpu", "sm80", "nccl-ep", "mxfp8-on-hopper", "fp8-on-cpu", "capped-buffer", "extra-leaves-the-path"],
)
def test_config_refusals_name_the_requirement_and_a_fix(experiment, overrides, key, words):
    found = problems(compose(experiment, overrides))
    assert any(p.key == key and words in p.what for p in found), found
    assert all(p.fix for p in found)


# ---- host probes (moekit train runs them after the config checks, before launching) ----


def ok_probes(**changes):
    probes = {"te_present": lambda: True, "maxtext": lambda: None, "capabilities": lambda: [9.0]}
    return probes | changes


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"te_present": lambda: False}, "transformer_engine is not importable"),
        ({"maxtext": lambda: "MaxText 9.9 has a moe.py ... not written against"}, "pip install maxtext==0.2.5"),
        ({"capabilities": lambda: [8.0, 8.0]}, "SM >= 90"),
    ],
    ids=["no-te", "unknown-maxtext", "ampere"],
)
def test_host_probe_refusals(changes, words):
    found = preflight.problems(compose(PROXY, ["moe=te_gmm"]), **ok_probes(**changes))
    assert len(found) == 1 and words in found[0] and "Fix:" in found[0]


def test_host_probes_pass_where_all_is_there_and_skip_other_back_ends():
    assert preflight.problems(compose(PROXY, ["moe=te_gmm"]), **ok_probes(capabilities=lambda: None)) == []
    assert preflight.problems(compose(PROXY), **ok_probes(te_present=lambda: False)) == []


def test_real_probes_on_this_host_know_its_maxtext_and_miss_te():
    assert call_site.problem(call_site.moe_source(), call_site.installed_version()) is None  # MaxText 0.2.5
    if shutil.which("nvidia-smi") is None and "transformer_engine" not in sys.modules:
        with pytest.raises(MoekitError, match="transformer_engine is not importable"):
            run_preflight.ensure(compose(PROXY, ["moe=te_gmm"]), run_preflight.Host({}), dry_run=False)


# ---- the MaxText source the hook patches ----


@pytest.fixture
def edited_moe(tmp_path):
    """A copy of the installed moe.py with the ragged_dot call changed (as a newer MaxText might)."""
    src = call_site.moe_source().read_text()
    assert src.count("jax.lax.ragged_dot(") == 1
    path = tmp_path / "moe.py"
    path.write_text(src.replace("preferred_element_type=self.dtype,\n        )", "precision=None,\n        )", 1))
    return path


def test_call_site_refuses_unknown_sources_and_mixed_installs(edited_moe, tmp_path):
    assert "not written against" in call_site.problem(edited_moe, "0.2.5")
    assert "not installed" in call_site.problem(tmp_path / "missing.py", None)
    assert "mixed installation" in call_site.problem(call_site.moe_source(), "0.2.6")


def test_hook_refuses_an_unknown_maxtext_and_an_unknown_mode(edited_moe, monkeypatch):
    with pytest.raises(hook.HookError, match="choose one of te, te_fp8"):
        hook.install("te_fp16")
    monkeypatch.setattr(call_site, "moe_source", lambda: edited_moe)
    with pytest.raises(hook.HookError, match="refuses to patch MaxText.*not written against.*maxtext==0.2.5"):
        hook.install("te")


def test_hook_changes_what_maxtext_moe_sees_as_ragged_dot_and_nothing_else(capsys):
    import maxtext.layers.moe as moe
    from maxtext.layers import linears

    original, ragged, transform_bias = moe.jax, jax.lax.ragged_dot, moe.RoutedMoE.transform_bias
    try:
        hook.install("reference")
        assert hook.MARKER in capsys.readouterr().out
        assert moe.RoutedMoE.transform_bias is bias.transform_bias
        assert moe.jax.lax.ragged_dot is not ragged and moe.jax.lax.ragged_dot.func is hook._ragged_dot
        assert jax.lax.ragged_dot is ragged and linears.jax is jax  # the module itself and other modules: as is
        assert moe.jax.numpy is jax.numpy and moe.jax.lax.psum is jax.lax.psum and moe.jax.Array is jax.Array
        hook.install("reference")  # a second install replaces the first, it does not nest
        assert moe.jax.__dict__["_moekit_real"] is jax
        x, w, gs = jnp.ones((8, 4)), jnp.ones((2, 4, 3)), jnp.array([3, 5], jnp.int32)
        assert jnp.array_equal(moe.jax.lax.ragged_dot(x, w, gs), ragged(x, w, gs))
        with pytest.raises(hook.HookError, match="without group_offset"):
            moe.jax.lax.ragged_dot(x, w, gs, group_offset=jnp.array([0]))
        with pytest.raises(hook.HookError, match="unquantized"):
            moe.jax.lax.ragged_dot(x.astype(jnp.int8), w.astype(jnp.int8), gs)
    finally:
        moe.jax = original
        moe.RoutedMoE.transform_bias = transform_bias


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_expert_bias_rows_are_the_gather_and_their_gradient_its_transpose(dtype):
    """The forward is MaxText's gather; the gradient (a one-hot matmul) equals the gather's scatter-add."""
    rng = np.random.default_rng(0)
    table = jnp.asarray(rng.normal(size=(5, 3, 4)), dtype)
    index = jnp.asarray(np.sort(rng.integers(0, 5, size=37)), jnp.int32)  # sorted by expert, as MaxText's rows
    index = index.at[4].set(0)  # and one repeated expert out of order: the sum does not rely on sorting
    upstream = jnp.asarray(rng.normal(size=(37, 3, 4)), dtype)

    def loss(fn, t):
        return jnp.sum(fn(t, index).astype(jnp.float32) * upstream.astype(jnp.float32))

    assert jnp.array_equal(bias.expert_rows(table, index), table[index])
    mine = jax.grad(lambda t: loss(bias.expert_rows, t))(table)
    gather = jax.grad(lambda t: loss(lambda b, i: b[i], t))(table)
    assert mine.dtype == table.dtype
    tol = 1e-6 if dtype == jnp.float32 else 2e-2  # bf16: the scatter rounds after every add, the matmul once
    np.testing.assert_allclose(np.asarray(mine, np.float32), np.asarray(gather, np.float32), rtol=tol, atol=tol)
    b0, b1 = bias.transform_bias(None, index, table, 2 * table)
    assert jnp.array_equal(b0, table[index]) and jnp.array_equal(b1, (2 * table)[index])


# ---- the row layout TE's grouped GEMM is given (checked against jax.lax.ragged_dot) ----

M, K, N, G, ROUTED = 300, 16, 8, 4, 173
SIZES = np.array([37, 0, 91, 45], np.int32)  # 173 routed rows; an empty group; the 127 rows after them are garbage


def contract_checked(seen):
    """XLA's ragged_dot, recording what TE's contract requires: group sizes summing to the rows given."""

    def gemm(x, w, gs, out_dtype):
        jax.debug.callback(lambda total, rows: seen.append((int(total), rows)), jnp.sum(gs), x.shape[0])
        return grouped.reference_gemm(x, w, gs, out_dtype)

    return gemm


@pytest.mark.parametrize("buckets, align", [(1, 1), (4, 1), (1, grouped.ALIGN_FP8), (6, grouped.ALIGN_FP8)])
def test_layout_is_ragged_dot_exactly_with_garbage_rows_after_the_routed_ones(buckets, align):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(M, K)), jnp.float32).at[ROUTED:].set(jnp.nan)
    w = jnp.asarray(rng.normal(size=(G, K, N)), jnp.float32)
    gs = jnp.asarray(SIZES)
    seen: list[tuple[int, int]] = []

    def ours(x, w):
        return grouped.ragged_dot(x, w, gs, jnp.float32, contract_checked(seen), buckets, align)

    def theirs(x, w):  # ragged_dot ignores the rows after the groups (NaN * 0 would not)
        return jax.lax.ragged_dot(jnp.where(jnp.arange(M)[:, None] < ROUTED, x, 0), w, gs)

    def loss(f):
        return lambda x, w: jnp.sum(jnp.sin(f(x, w)))

    y, (dx, dw) = jax.jit(ours)(x, w), jax.jit(jax.grad(loss(ours), (0, 1)))(x, w)
    assert jnp.array_equal(y, theirs(x, w)) and not jnp.any(y[ROUTED:])
    rx, rw = jax.grad(loss(theirs), (0, 1))(x, w)
    assert jnp.array_equal(dx, rx) and bool(jnp.all(jnp.isfinite(dx)))
    np.testing.assert_allclose(dw, rw, rtol=1e-5, atol=1e-5)  # the same sums, maybe in another order
    sizes = grouped.row_sizes(M, G, buckets, align)
    assert seen and all(total == rows for total, rows in seen)  # TE's contract held at every call
    assert all(rows == min(s for s in sizes if s >= -(-SIZES // align * align).sum()) for _, rows in seen)


def test_row_sizes_hold_the_worst_case_and_stay_aligned():
    assert grouped.row_sizes(4096, 32, 1, 1) == [4096]
    ep8 = grouped.row_sizes(8 * 24576 * 8, 32, 16, 1)  # EP 8 receive buffer, 16 sizes: steps of half a load
    assert ep8[-1] == 8 * 24576 * 8 and len(ep8) == 16 and ep8[0] == 24576 * 8 // 2
    fp8 = grouped.row_sizes(1000, 8, 4, 32)
    assert fp8[-1] >= 1000 + 8 * 31 and all(s % 32 == 0 for s in fp8)


# ---- the wiring: real MaxText training with the hook in place ----

# wi and wo differ in shape (FFN 32 vs hidden 64); a 384-row tile pads the 512 routed rows to 768, so calls carry
# rows after the routed ones, as with expert parallelism. fp32: the layout changes how XLA blocks the weight
# gradient's sums, which in bf16 moved the third loss by 2e-5 (2-core CPU, 2026-12-03); in fp32 that is within
# moekit verify's tolerance.
WIRING = ["experiment=smoke", "train.steps=3", "precision=fp32", "model.extra.base_moe_mlp_dim=32"]
WIRING += ["maxtext.extra.wi_tile_fwd_batch_seq=384"]


@pytest.fixture(scope="module")
def wiring_runs(tmp_path_factory):
    out = {}
    for name, env in [
        ("plain", {}),
        ("reference", {MODE_ENV: "reference", BUCKETS_ENV: "4"}),
        ("reference_fp8_layout", {MODE_ENV: "reference_fp8_layout", BUCKETS_ENV: "2"}),
    ]:
        run = tmp_path_factory.mktemp("wiring") / name
        proc = moekit("train", *WIRING, f"run.dir={run}", env=env, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out[name] = run
    return out


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["reference", "reference_fp8_layout"])
def test_te_gmm_wiring_cpu_routes_maxtexts_ragged_dot_and_keeps_the_losses(wiring_runs, mode):
    log = (wiring_runs[mode] / "maxtext.log").read_text()
    assert sum(line.startswith(hook.MARKER) for line in log.splitlines()) == 1
    calls = [line.split(" via ")[0] for line in log.splitlines() if line.startswith(hook.CALL)]
    wi = f"{hook.CALL} float32[768,64] x float32[8,64,32] group_sizes int32[8] -> float32"
    wo = f"{hook.CALL} float32[768,32] x float32[8,32,64] group_sizes int32[8] -> float32"
    assert calls == [wi, wi, wo]  # wi_0, wi_1, wo of the scanned MoE layer, traced once
    assert "moekit te_gmm" not in (wiring_runs["plain"] / "maxtext.log").read_text()
    # The routing load is recorded through the hook too: step 0 (run.routing_every's default) of the scanned layers,
    # the first MoE layer routed as the plain run routes it (same weights and batch before it).
    hooked, plain = (routing.read(wiring_runs[n] / routing.FILE) for n in (mode, "plain"))
    assert sorted(hooked) == [0] and hooked[0]["counts"][0] == plain[0]["counts"][0]
    hooked, plain = losses(wiring_runs[mode]), losses(wiring_runs["plain"])
    assert len(hooked) == len(plain) == 3
    assert hooked == pytest.approx(plain, rel=compare.RTOL, abs=compare.ATOL)
    manifest = json.loads((wiring_runs[mode] / "manifest.json").read_text())
    assert manifest["status"] == "ok"


# gpt-oss has expert biases (mlp_bias): the hook also gives the sparse path's bias rows their matmul gradient.
BIASED = ["experiment=smoke", "model=gpt_oss_tiny", "train.steps=2", "precision=fp32"]


@pytest.mark.soak
@pytest.mark.integration
def test_te_gmm_wiring_cpu_with_expert_biases_keeps_the_losses(tmp_path):
    runs = {}
    for name, env in [("plain", {}), ("reference", {MODE_ENV: "reference"})]:
        runs[name] = tmp_path / name
        proc = moekit("train", *BIASED, f"run.dir={runs[name]}", env=env, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (runs["reference"] / "maxtext.log").read_text()
    assert any(line.startswith(bias.CALL) for line in log.splitlines())  # the biased path really ran
    assert bias.CALL not in (runs["plain"] / "maxtext.log").read_text()
    hooked, plain = losses(runs["reference"]), losses(runs["plain"])
    assert len(hooked) == len(plain) == 2
    assert hooked == pytest.approx(plain, rel=compare.RTOL, abs=compare.ATOL)
