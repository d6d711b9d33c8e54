"""Checkpoint resume on CPU: a run killed with SIGKILL after a checkpoint, relaunched with the same run.dir,
finishes with the losses of an uninterrupted run and one metrics record per step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, losses, moekit

pytestmark = pytest.mark.integration

STEPS = 8
# fp32: the comparison is about resuming, not about bf16 reduction order.
COMMON = ["train", "experiment=smoke", "precision=fp32", f"train.steps={STEPS}", "checkpoint.every=2"]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _alive_workers(run: Path) -> list[int]:
    """Processes whose command line names the run directory (moekit's workers)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if "moekit.worker" in cmd and str(run) in cmd and state != "Z":
            found.append(int(proc.name))
    return found


def _kill_after_checkpoint(run: Path, timeout_s: float = 420) -> None:
    """Start the run, SIGKILL moekit once the checkpoint of step 2 is committed and step 3 has run."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "moekit", *COMMON, f"run.dir={run}"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the run ended before it could be killed"
            ckpt = (run / "smoke" / "checkpoints" / "2").is_dir()
            metrics = run / "metrics.jsonl"
            if ckpt and metrics.is_file() and max(_steps_partial(metrics), default=-1) >= 3:
                break
            time.sleep(0.1)
        else:
            pytest.fail("no checkpoint of step 2 within the time limit")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # moekit only: its workers run in sessions of their own
        proc.wait()


def _steps_partial(path: Path) -> list[int]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue
    return out


def test_killed_run_resumes_with_the_same_losses(tmp_path):
    ref = moekit(*COMMON, f"run.dir={tmp_path / 'ref'}")
    assert ref.returncode == 0, ref.stderr + ref.stdout[-2000:]

    run = tmp_path / "resumed"
    _kill_after_checkpoint(run)
    # The workers die with their launcher (PR_SET_PDEATHSIG): nothing is left holding the run.
    deadline = time.monotonic() + 30
    while _alive_workers(run) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive_workers(run) == []
    killed_steps = _steps_partial(run / "metrics.jsonl")
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"  # moekit got no chance to record

    again = moekit(*COMMON, f"run.dir={run}")
    assert again.returncode == 0, again.stderr + again.stdout[-2000:]
    assert "attempt 2" in again.stdout and "resuming from the checkpoint of step" in again.stdout

    # Exactly one record per step, all steps present, although the killed attempt ran past its checkpoint.
    assert _steps(run / "metrics.jsonl") == list(range(STEPS))
    assert max(killed_steps) >= 3
    assert _steps_partial(run / "attempts" / "1" / "metrics.jsonl") == killed_steps
    a, b = losses(tmp_path / "ref"), losses(run)
    assert len(a) == len(b) == STEPS
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3, (a, b)

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["attempt"] == 2
    assert manifest["resumed_from_checkpoint"] >= 2
    assert [h["status"] for h in manifest["attempts"]] == ["failed", "ok"]
    assert manifest["attempts"][0]["failure"]["class"] == "killed"
    assert json.loads((run / "summary.json").read_text())["steps"] == STEPS

    # A finished run directory is never overwritten.
    before = (run / "metrics.jsonl").read_bytes()
    third = moekit(*COMMON, f"run.dir={run}")
    assert third.returncode != 0 and "finished run" in third.stderr and "Traceback" not in third.stderr
    assert (run / "metrics.jsonl").read_bytes() == before
