"""Real MaxText training on CPU through `moekit train` (1 and 2 processes)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import TWO_PROCESS_OVERRIDES, losses, moekit

pytestmark = pytest.mark.integration


def _run_dir(stdout: str):
    from pathlib import Path

    line = [s for s in stdout.splitlines() if s.startswith("moekit: run directory ")][-1]
    return Path(line.removeprefix("moekit: run directory ").strip())


def test_smoke_trains_and_summarizes(smoke_run):
    tmp_path, proc = smoke_run
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    run = _run_dir(proc.stdout)
    assert run.parent == tmp_path / "smoke"
    assert "step 9 (10/10 done)" in proc.stdout and "final loss" in proc.stdout
    assert "left out         0 (attempt start)" in proc.stdout  # the summary says which steps it did not count
    # Start-up says what it is doing, with the time of day and the seconds since the command started.
    phases = [line for line in proc.stderr.splitlines() if re.match(r"moekit: \d\d:\d\d:\d\d \(\+[\d.]+ s\) ", line)]
    said = " | ".join(phases)
    for phase in ("composing the config", "checking it", "launching 1 process(es)", "compiling the train step",
                  "compiled (MaxText's estimate"):  # fmt: skip
        assert phase in said, (phase, said)
    for name in ("config.yaml", "job.json", "versions.json", "metrics.jsonl", "maxtext.log", "summary.json"):
        assert (run / name).is_file(), name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 10 and summary["step_time_s"]["median"] > 0
    assert summary["provenance"]["kind"] == "measured" and "jax" in summary["provenance"]["versions"]
    loss = losses(run)
    assert len(loss) == 10 and loss[-1] < loss[0]
    # A second run never reuses the first one's directory.
    again = moekit("train", "experiment=smoke", f"run.base_dir={tmp_path}", "train.steps=2")
    assert again.returncode == 0 and _run_dir(again.stdout) != run


def test_two_processes_match_one(tmp_path, local_two_process_run):
    """jax.distributed across 2 real processes (FSDP=2) gives the single process's losses.

    Same global batch (2 sequences) both ways; fp32 so that reduction order (bf16 moves it by ~1e-3) is not
    mistaken for a wiring difference.
    """
    two_dir, two = local_two_process_run
    one = moekit(
        "train",
        "experiment=smoke",
        *TWO_PROCESS_OVERRIDES,
        f"run.dir={tmp_path / 'one'}",
        "train.per_device_batch_size=2",
    )
    assert one.returncode == 0, one.stderr + one.stdout[-2000:]
    assert two.returncode == 0, two.stderr + two.stdout[-2000:]
    job = json.loads((two_dir / "job.json").read_text())
    assert [p["JAX_PROCESS_ID"] for p in job["processes"]] == ["0", "1"]
    assert "ici_fsdp_parallelism=2" in job["maxtext_args"]
    a, b, b1 = losses(tmp_path / "one"), losses(two_dir), losses(two_dir, "metrics.1.jsonl")
    assert len(a) == len(b) == 6
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3
    assert b == b1  # both processes saw the same global step results
    assert "rendezvous complete: every process joined" in two.stderr


def test_dry_run_json_launches_nothing(tmp_path):
    proc = moekit("train", "experiment=smoke", f"run.base_dir={tmp_path}", "--dry-run", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    for key in ("maxtext_args", "xla_flags", "env", "processes", "hardware"):
        assert key in view
    assert view["env"]["JAX_PLATFORMS"] == "cpu"
    assert not any(tmp_path.iterdir())


def test_config_error_exits_before_launch(tmp_path):
    proc = moekit("train", "experiment=smoke", "moe=capacity", f"run.base_dir={tmp_path}")
    assert proc.returncode == 2
    assert "drops tokens" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())
