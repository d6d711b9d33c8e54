"""`moekit train -m`: Hydra sweep expansion, one run directory per run, one combined report."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import losses, moekit
from moekit.base.errors import ConfigError
from moekit.config.compose import group_options
from moekit.config.sweeps import expand

EXPANSIONS = [  # id, overrides, expected runs (cartesian product, keys in the order given)
    ("single", ["experiment=smoke"], [["experiment=smoke"]]),
    (
        "product",
        ["moe=dense,ragged_dot", "train.steps=2,3"],
        [
            ["moe=dense", "train.steps=2"],
            ["moe=dense", "train.steps=3"],
            ["moe=ragged_dot", "train.steps=2"],
            ["moe=ragged_dot", "train.steps=3"],
        ],
    ),
    ("range", ["train.seq_len=range(128,385,128)"], [[f"train.seq_len={n}"] for n in (128, 256, 384)]),
    ("choice", ["train.seed=choice(1,7)"], [["train.seed=1"], ["train.seed=7"]]),
    (
        "open-mapping",
        ["maxtext.extra.scan_layers=true,false"],
        [["maxtext.extra.scan_layers=true"], ["maxtext.extra.scan_layers=false"]],
    ),
]


@pytest.mark.parametrize("overrides,runs", [c[1:] for c in EXPANSIONS], ids=[c[0] for c in EXPANSIONS])
def test_expand(overrides, runs):
    assert expand(overrides) == runs


def test_glob_lists_the_group_options():
    got = expand(["moe=glob(*,exclude=te)"])
    assert got == [[f"moe={o}"] for o in group_options("moe") if o != "te"]
    assert len(got) >= 4


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["moe=dense", "moe=ragged_dot"], "given twice"),
        (["train.learning_rate=interval(1e-5,1e-4)"], "interval"),
        (["moe=glob(nothing*)"], "matches no option"),
        (["train.steps=1,,2"], "could not parse"),
    ],
)
def test_expand_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        expand(overrides)


def test_dry_run_lists_runs_and_bad_member_stops_the_sweep(tmp_path):
    dry = moekit("train", "-m", "experiment=smoke", "moe=dense,ragged_dot", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "[0] experiment=smoke moe=dense" in dry.stdout and "[1] experiment=smoke moe=ragged_dot" in dry.stdout
    # moe=capacity drops tokens: refused before the dense run starts, nothing is created.
    bad = moekit("train", "-m", "experiment=smoke", "moe=dense,capacity", f"run.base_dir={tmp_path}")
    assert bad.returncode == 2 and "drops tokens" in bad.stderr and "Traceback" not in bad.stderr
    assert not any(tmp_path.iterdir())


def test_the_ladders_dry_run_shows_what_each_rung_changes_and_whether_it_fits():
    """docs/optimizations.md's ladder as typed: each rung's MaxText keys and environment that differ between the
    rungs (grouped GEMM is an environment switch, multistream XLA flags, MXFP8 a quantization key) and the plan's
    memory verdict for each (the offload rung as configured does not fit)."""
    dry = moekit("train", "-m", "experiment=glob(dsv3_ladder_*)", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    rungs = dry.stdout.split("\n[")[1:]
    assert len(rungs) == 6, dry.stdout
    changes = [
        next(ln for ln in r.splitlines() if ln.startswith("  differs (MaxText keys, environment): ")) for r in rungs
    ]
    assert "MOEKIT_RAGGED_DOT=te" in changes[1] and "MOEKIT_RAGGED_DOT=te" not in changes[0]
    assert "XLA_FLAGS:--xla_gpu_experimental_enable_collective_multi_streaming=true" in changes[2]
    assert "quantization=te_fp8_currentscaling" in changes[3] and "quantization=" not in changes[2]
    fits = [next(ln for ln in r.splitlines() if ln.startswith("  memory (the plan's estimate): ")) for r in rungs]
    assert "fits: " in fits[0] and "will not fit: " in fits[4], fits


@pytest.mark.integration
def test_sweep_gives_one_run_dir_per_run_and_a_combined_report(smoke_sweep):
    folder, proc = smoke_sweep
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    record = json.loads((folder / "sweep.json").read_text())
    assert [r["overrides"] for r in record] == [
        ["experiment=smoke", "train.steps=10", "moe=ragged_dot"],
        ["experiment=smoke", "train.steps=10", "moe=dense"],
    ]
    assert [r["returncode"] for r in record] == [0, 0]
    assert [r["status"] for r in record] == ["ok", "ok"]  # the record tune's runner gives every run (series/trial.py)
    for i, backend in enumerate(("ragged_dot", "dense")):
        run = folder / str(i)
        assert yaml.safe_load((run / "config.yaml").read_text())["moe"]["backend"] == backend
        assert len(losses(run)) == 10
    report = (folder / "report.md").read_text()
    assert "| moe=ragged_dot |" in report and "| moe=dense |" in report
    assert "speed-up relative to the first run: moe=ragged_dot" in report
    for png in ("step_time.png", "tflops.png", "loss.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "combined report" in proc.stdout


@pytest.mark.integration
def test_a_failed_run_is_classified_and_the_sweep_goes_on(tmp_path):
    """Each run is a `moekit train` of its own (series/trial.py): MaxText's validator refuses both runs at launch, and
    sweep.json says so for each, with the class and evidence tune would record."""
    folder = tmp_path / "sweep"
    proc = moekit("train", "-m", "experiment=smoke", "maxtext.extra.no_such_maxtext_key=1,2", f"run.dir={folder}")
    assert proc.returncode == 1, proc.stderr + proc.stdout[-2000:]
    record = json.loads((folder / "sweep.json").read_text())
    assert [r["index"] for r in record] == [0, 1]
    for r in record:
        assert r["status"] == "failed" and r["failure"]["class"] == "refused", r
        assert "no_such_maxtext_key" in r["failure"]["evidence"]
    assert "multirun 0 of 2 ok" in proc.stdout
