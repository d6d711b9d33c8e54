"""`moekit tune`: the sweep's gate and winner (pure), and a real sweep of CPU trainings through moekit train."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, moekit
from moekit.base import failures
from moekit.commands.tune import preset_yaml
from moekit.config.compose import compose
from moekit.observe.reports import compare
from moekit.series import tuning


def test_axes_expand_to_their_product():
    got = tuning.expand(["moe=dense,tokamax", "train.per_device_batch_size=6,8"])
    assert got == [
        ["moe=dense", "train.per_device_batch_size=6"],
        ["moe=dense", "train.per_device_batch_size=8"],
        ["moe=tokamax", "train.per_device_batch_size=6"],
        ["moe=tokamax", "train.per_device_batch_size=8"],
    ]
    with pytest.raises(ValueError, match="KEY=V1,V2"):
        tuning.expand(["moe"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        tuning.parse_candidate("moe=dense xla")


# Loss trajectories measured on one H200 (2026-12-02, MaxText 0.2.5, jax 0.11.2; docs/metrics.md): the
# reference path, a path that agrees to 1e-3, and the host-offload run that drifts from the second step on.
REF = [10.3800, 10.3253, 9.90, 9.40, 8.90, 8.40, 8.00, 7.80, 7.70, 7.685]
SAME = [10.3800, 10.3258, 9.9004, 9.4009, 8.9003, 8.4006, 8.0008, 7.8004, 7.7005, 7.684]
OFFLOAD = [10.3800, 10.3523, 9.95, 9.47, 8.99, 8.50, 8.11, 7.93, 7.85, 7.848]


def test_loss_gate_passes_equal_paths_and_rejects_the_offload_drift():
    ok, diff, bad = compare.compare_losses(REF, SAME)
    assert ok and diff < 2e-3 and bad is None
    ok, diff, bad = compare.compare_losses(REF, OFFLOAD)
    assert not ok and bad == 1 and diff > 0.1
    assert not compare.compare_losses(REF, REF[:1])[0]  # one common step proves nothing


@pytest.mark.parametrize(
    "returncode, recorded, console, timed_out, status",
    [
        (0, None, "", False, "ok"),
        (1, {"class": "out_of_memory", "title": "out of memory", "evidence": "RESOURCE_EXHAUSTED"}, "", False, "oom"),
        (1, {"class": "error", "title": "error in the training program", "evidence": "bad key"}, "", False, "failed"),
        (2, None, "moekit: error: 1 configuration problem(s); nothing was launched:\n  - moe: no", False, "failed"),
        (None, None, "", True, "timeout"),
    ],
)
def test_outcome_classes_come_from_the_recorded_class(returncode, recorded, console, timed_out, status):
    failure = failures.of_child(returncode, 60, timed_out, recorded, console)
    assert tuning.classify(failure) == status
    assert failure is None or failure.name in {c.name for c in failures.ALL}


def test_fastest_is_the_accepted_run_with_most_tokens_per_second():
    runs = [
        {"accepted": True, "tokens_per_s_per_device": 100.0, "overrides": ["a=1"]},
        {"accepted": False, "tokens_per_s_per_device": 900.0, "overrides": ["b=1"]},  # fast but diverged
        {"accepted": True, "tokens_per_s_per_device": 150.0, "overrides": ["c=1"]},
    ]
    assert tuning.fastest(runs)["overrides"] == ["c=1"]
    assert tuning.fastest([runs[1]]) is None


def test_written_preset_composes_to_the_winning_config(tmp_path, monkeypatch):
    winner = ["experiment=smoke", "moe=dense", "train.per_device_batch_size=4", "maxtext.extra.attention=dot_product"]
    best = {
        "overrides": winner,
        "tflops_per_device": 0.5,
        "step_time_s": 1.25,
        "run_dir": "/runs/c1",
        "date": "2026-12-03",
        "versions": {"jax": "0.12.0.1", "host": "h", "platform": "p"},
    }
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    monkeypatch.setenv("MOEKIT_CONF_DIR", str(conf))
    (conf / "experiment" / "smoke_tuned.yaml").write_text(preset_yaml("smoke_tuned", best))
    tuned = compose(["experiment=smoke_tuned"])
    direct = compose(winner)
    assert tuned.moe == direct.moe and tuned.train == direct.train and tuned.maxtext == direct.maxtext
    assert tuned.experiment_name == "smoke_tuned"
    assert tuned.expect.provenance.kind == "measured" and tuned.expect.step_time_s == 1.25
    assert "/runs" not in (conf / "experiment" / "smoke_tuned.yaml").read_text()  # no machine path in the preset
    assert "candidate c1 of the sweep" in tuned.expect.provenance.source


def test_invalid_candidates_stop_the_sweep_before_any_run(tmp_path):
    proc = moekit("tune", "experiment=smoke", "--candidate", "moe=capacity", "--out", str(tmp_path))
    assert proc.returncode == 2 and "drops tokens" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


def test_a_candidate_of_another_model_is_refused_before_any_run(tmp_path):
    """A smaller model always trains more tokens/s: ranking it against the base would mislead."""
    proc = moekit("tune", "experiment=smoke", "--candidate", "model.num_layers=2", "--out", str(tmp_path))
    assert proc.returncode == 2 and "changes the model (model.num_layers)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())


@pytest.mark.soak
@pytest.mark.integration
def test_sweep_discards_failed_and_diverging_runs_and_writes_the_winner(tmp_path):
    """Real CPU trainings: the base (also the loss reference), an equivalent path, a learning rate 1000x
    larger (trains, but its losses leave the reference's), a key MaxText rejects and data files this host lacks
    (moekit train refuses both before launching: MaxText's validator and the data probe). Then the printed
    instructions, run as printed. (Other hardware is another setup: tune refuses it before anything runs.)"""
    conf = tmp_path / "conf"  # the printed `cp` installs the preset here, not in this checkout
    shutil.copytree(REPO / "conf", conf)
    env = {"MOEKIT_CONF_DIR": str(conf), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    base = ["experiment=smoke", "precision=fp32", "train.steps=8"]  # 8: enough steady steps for a number
    proc = moekit(
        "tune", *base,
        "--candidate", "moe=dense",
        "--candidate", "train.learning_rate=0.03",
        "--candidate", "maxtext.extra.no_such_maxtext_key=1",
        "--candidate", "data=grain data.files=/nonexistent/*.arrayrecord",
        "--name", "smoke_tuned", "--out", str(tmp_path / "tune"), "--timeout-s", "400",
        env=env, timeout=1500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    (out,) = (tmp_path / "tune" / "smoke_tuned").iterdir()  # <--out>/<name>/<timestamp>
    assert f"runs in {out}" in proc.stdout
    record = json.loads((out / "tune.json").read_text())
    by = {tuning.label(r["overrides"][len(base) :]): r for r in record["runs"] if r["role"] != "reference"}
    assert by["(base)"]["accepted"] and by["moe=dense"]["accepted"]
    assert by["train.learning_rate=0.03"]["status"] == "ok" and not by["train.learning_rate=0.03"]["accepted"]
    bad_key = by["maxtext.extra.no_such_maxtext_key=1"]
    no_data = by["data=grain data.files=/nonexistent/*.arrayrecord"]
    assert bad_key["status"] == "failed" and bad_key["failure"]["class"] == "refused"
    assert "MaxText has no key 'no_such_maxtext_key'" in bad_key["failure"]["evidence"]
    assert no_data["status"] == "failed" and no_data["failure"]["class"] == "refused"
    assert "data.files: no file matches '/nonexistent/*.arrayrecord'" in no_data["failure"]["evidence"]
    # The table names each failure's class; the lines below it give the evidence.
    row = next(
        line for line in proc.stdout.splitlines() if "`experiment=smoke precision=fp32 train.steps=8 data=grain" in line
    )
    assert "| failed | refused before launch |" in row
    assert "evidence: [data] data.files: no file matches" in proc.stdout
    assert f"evidence: {bad_key['failure']['evidence']}" in proc.stdout
    assert record["winner"] in (by["(base)"]["overrides"], by["moe=dense"]["overrides"])
    # The two accepted candidates ran again before the winner was named against the noise they measured.
    assert (out / "repeat0").is_dir() and (out / "repeat1").is_dir() and record["winner_against_noise"]
    assert f"fastest: {tuning.label(record['winner'])} (mean of " in proc.stdout
    preset = yaml.safe_load((out / "smoke_tuned.yaml").read_text())
    assert preset["experiment_name"] == "smoke_tuned" and preset["expect"]["provenance"]["kind"] == "measured"

    # Without --write-preset the preset is not an experiment yet; the printed commands make it one and run it.
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "to run it" in line)
    commands = [line.strip() for line in lines[at + 1 : at + 3]]
    assert commands[0].startswith("cp ") and commands[1] == "moekit train experiment=smoke_tuned"
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=os.environ | env, capture_output=True, text=True,
                              timeout=900)  # fmt: skip
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert "moekit: run directory" in done.stdout


@pytest.mark.integration
def test_every_sweep_gets_a_new_folder(tmp_path):
    """Two sweeps into one --out: two folders, the first left as it was (runs refused at once: the coordinator
    port they name is taken, which only the launch of each run finds out)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        base = ["experiment=smoke", "cluster.processes_per_node=2", f"cluster.coordinator_port={port}"]
        args = ["tune", *base, "--name", "again", "--out", str(tmp_path), "--timeout-s", "60"]
        first = moekit(*args, timeout=300)
        assert first.returncode == 1 and "no candidate finished" in first.stdout, first.stdout + first.stderr
        (folder,) = (tmp_path / "again").iterdir()
        before = (folder / "tune.json").read_text()
        second = moekit(*args, timeout=300)
    assert second.returncode == 1
    assert len(list((tmp_path / "again").iterdir())) == 2 and (folder / "tune.json").read_text() == before
    assert "refused before launch" in second.stdout
    assert f"cluster.coordinator_port={port}" in second.stdout


def test_a_cpu_preset_records_no_gpus_and_no_tflops(tmp_path):
    """A CPU run has no GPU count and no model-FLOP peak: its preset expects only a step time."""
    run = tmp_path / "c0"
    run.mkdir()
    (run / "config.yaml").write_text("hardware: {platform: cpu}\n")
    best = {
        "overrides": ["experiment=smoke", "train.per_device_batch_size=4"],
        "run_dir": str(run),
        "tflops_per_device": 0.0,
        "step_time_s": 0.4242,
        "devices": 1,
        "versions": {"host": "h", "platform": "Linux"},
        "date": "2026-12-04",
    }
    expect = yaml.safe_load(preset_yaml("smoke_cpu_tuned", best))["expect"]
    assert expect["tflops_per_gpu"] is None and expect["provenance"]["gpus"] is None
    assert expect["step_time_s"] == 0.424
