"""`moekit bench gmm|dispatch` at tiny shapes on CPU: real kernels, real timings, checked results."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, moekit
from moekit.bench import dispatch, gmm

TINY = ["--experts", "4", "--tokens", "64", "--topk", "2", "--hidden", "32", "--ffn", "16", "--iters", "3"]


@pytest.mark.parametrize("skew", ["balanced", "dirichlet:1.0", "dirichlet:0.1"])
def test_group_sizes_cover_every_row(skew):
    sizes = gmm.group_sizes(1000, 8, skew)
    assert sizes.sum() == 1000 and len(sizes) == 8 and (sizes >= 0).all()


def test_skewed_groups_are_uneven_and_balanced_are_not():
    assert len(set(gmm.group_sizes(1024, 8, "balanced"))) == 1
    assert np.ptp(gmm.group_sizes(1024, 8, "dirichlet:0.3")) > 100


def test_unknown_skew_is_rejected():
    with pytest.raises(ValueError, match="dirichlet:ALPHA"):
        gmm.group_sizes(10, 2, "zipf")


def test_gmm_backends_match_the_ceiling_and_report_absent_ones():
    result = gmm.run(gmm.Shape(groups=4, rows=128, k=32, n=16), ["ragged_dot", "tokamax", "te"], ["balanced"], iters=2)
    rows = {r["backend"]: r for r in result["rows"]}
    assert rows["ceiling"]["of_ceiling"] == 1.0 and rows["ceiling"]["tflops"] > 0
    for name in ("ragged_dot", "tokamax"):  # each passed the numerical check against the batched matmul
        assert rows[name]["error"] is None and rows[name]["ms"] > 0, rows[name]
    try:
        import transformer_engine.jax  # noqa: F401
    except ImportError:
        assert rows["te"]["error"].startswith("unavailable")


def test_dispatch_combines_agree_and_compare_with_a_gmm():
    result = dispatch.run(dispatch.Layer(tokens=64, hidden=32, experts=4, topk=2, ffn=16), "ragged_dot", iters=2)
    assert set(result["ms"]) == {"dispatch", "scatter_add", "gather_sum"}
    assert result["combines_agree_max_abs"] < 0.1  # bf16 sums of ~unit values, two summation orders
    assert result["gmm"]["ms"] > 0 and set(result["ratio_to_gmm"]) == {"dispatch+scatter_add", "dispatch+gather_sum"}


def test_default_shapes_suit_the_device():
    from argparse import Namespace

    from moekit.commands import bench

    none = Namespace(shape="auto", **dict.fromkeys(bench.DIMS))
    assert bench.resolve_shape(none, "cpu") == ("small", dict(zip(bench.DIMS, bench.SHAPES["small"], strict=True)))
    name, dims = bench.resolve_shape(none, "gpu")
    assert name == "dsv3" and (dims["experts"], dims["tokens"], dims["topk"], dims["hidden"], dims["ffn"]) == (
        32, 24576, 8, 7168, 2048,
    )  # fmt: skip
    one = Namespace(shape="dsv3", **(dict.fromkeys(bench.DIMS) | {"tokens": 4096}))
    assert bench.resolve_shape(one, "cpu") == ("dsv3 with --tokens 4096", dims | {"tokens": 4096})


@pytest.mark.integration
@pytest.mark.parametrize("which", ["gmm", "dispatch"])
def test_readme_bench_commands_finish_quickly_here_and_show_progress(which):
    """`moekit bench dispatch` as the README gives it (no shape flags): the size and time estimate comes first,
    then a line per kernel, and it ends within a few minutes on this loaded 2-core CPU."""
    assert f".venv/bin/moekit bench {which}" in (REPO / "README.md").read_text()
    started = time.monotonic()
    proc = moekit("bench", which, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 240
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("moekit bench: shape small on cpu")
    assert "operands" in lines[1] and "calls: about" in lines[1] and "measured" in lines[1]
    assert any(line.startswith("moekit bench: [1/") for line in lines[2:])
    assert "| " in proc.stdout and "measured" in proc.stdout


@pytest.mark.integration
def test_bench_commands_run_through_moekit(tmp_path):
    proc = moekit("bench", "gmm", *TINY, "--backends", "ragged_dot,te", "--out", str(tmp_path / "g.json"))
    assert proc.returncode == 0, proc.stderr
    assert "| ceiling | balanced |" in proc.stdout and "| ragged_dot | dirichlet:1.0 |" in proc.stdout
    saved = json.loads((tmp_path / "g.json").read_text())
    assert saved["provenance"]["kind"] == "measured" and saved["provenance"]["versions"]["jax"]
    proc = moekit("bench", "dispatch", *TINY, "--gmm-backend", "ragged_dot", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ms"]["dispatch"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["gmm", "--topk", "9", "--experts", "8"], "exceeds --experts"),
        (["gmm", "--backends", "cutlass"], "unknown back end"),
        (["gmm", "--skews", "zipf"], "dirichlet:ALPHA"),
        (["gmm", "--experts", "5", "--tokens", "3", "--topk", "1"], "multiple of --experts"),
    ],
)
def test_bench_user_errors_exit_before_running(args, message):
    proc = moekit("bench", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("which", ["dispatch", "gmm"])
def test_the_dsv3_shape_on_a_cpu_is_refused_up_front(which):
    """--shape dsv3 on a CPU would run the full shape's probe for about an hour before printing an estimate: it is
    refused within seconds, with the compute it needs and the fix."""
    if Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    start = time.monotonic()
    proc = moekit("bench", which, "--shape", "dsv3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"bench {which} --shape dsv3 on cpu: at least " in proc.stderr and "fix: --shape small" in proc.stderr
    assert time.monotonic() - start < 120
