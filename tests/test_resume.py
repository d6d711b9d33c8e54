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

from conftest import REPO, live_workers, losses, moekit

STEPS = 12
# fp32: the comparison is about resuming, not about bf16 reduction order.
COMMON = ["train", "experiment=smoke", "precision=fp32", f"train.steps={STEPS}", "checkpoint.every=3"]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _kill_after_checkpoint(run: Path, timeout_s: float = 420, command: list[str] = COMMON, ckpt: int = 3) -> float:
    """Start the run, SIGKILL moekit once the checkpoint of step `ckpt` is committed and the step after it has run;
    returns the seconds from the start to the kill.

    Later checkpoints are still to come then, so the run cannot finish before the kill lands.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moekit", *command, f"run.dir={run}"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the run ended before it could be killed"
            committed = (run / "smoke" / "checkpoints" / str(ckpt)).is_dir()
            metrics = run / "metrics.jsonl"
            if committed and metrics.is_file() and max(_steps_partial(metrics), default=-1) >= ckpt + 1:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"no checkpoint of step {ckpt} within the time limit")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # moekit only: its workers run in sessions of their own
        killed = time.monotonic() - started
        proc.wait()
    return killed


def _steps_partial(path: Path) -> list[int]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue
    return out


def _write(path: Path, steps: range, tag: str, cut: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"step": s, "tag": tag}) + "\n" for s in steps)
    path.write_text(text + ('{"step": 9, "ta' if cut else ""))


@pytest.mark.parametrize(
    "first, second, expected",
    [
        # resumed from the checkpoint of step 3 after the first attempt got to step 5 (and was cut mid-line)
        (range(0, 6), range(4, 8), ["a"] * 4 + ["b"] * 4),
        # no checkpoint: the second attempt starts again at 0 and replaces everything, even steps it never reached
        (range(0, 6), range(0, 3), ["b"] * 3),
        # the second attempt died before its first step
        (range(0, 6), range(0, 0), ["a"] * 6),
    ],
    ids=["resumed", "restarted", "empty-retry"],
)
def test_merge_keeps_one_record_per_step(tmp_path, first, second, expected):
    from moekit.rundir import attempts

    _write(tmp_path / "metrics.jsonl", first, "a", cut=True)
    _write(tmp_path / "metrics.1.jsonl", first, "a")
    assert attempts.set_aside(tmp_path) == 2
    assert sorted(p.name for p in (tmp_path / "attempts" / "1").iterdir()) == ["metrics.1.jsonl", "metrics.jsonl"]
    _write(tmp_path / "metrics.jsonl", second, "b")
    _write(tmp_path / "metrics.1.jsonl", second, "b")
    assert attempts.merge_metrics(tmp_path) == ["metrics.1.jsonl", "metrics.jsonl"]
    for name in ("metrics.jsonl", "metrics.1.jsonl"):
        rows = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(len(expected)))
        assert [r["tag"] for r in rows] == expected
        assert [r["moekit/attempt"] for r in rows] == [1 if t == "a" else 2 for t in expected]  # who wrote it


@pytest.mark.integration
def test_killed_run_resumes_with_the_same_losses(tmp_path):
    """Killed after the checkpoint of step 6, whose files are then damaged (a partial copy): the relaunch fails
    restoring it (Orbax: "incompatible handler"), moekit classifies that, sets it aside, says so and resumes
    from the checkpoint of step 3, with the losses of an uninterrupted run."""
    ref = moekit(*COMMON, f"run.dir={tmp_path / 'ref'}")
    assert ref.returncode == 0, ref.stderr + ref.stdout[-2000:]

    run = tmp_path / "resumed"
    lived = _kill_after_checkpoint(run, ckpt=6)
    # The workers die with their launcher (PR_SET_PDEATHSIG): nothing is left holding the run.
    deadline = time.monotonic() + 30
    while live_workers(run) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_workers(run) == {}
    killed_steps = _steps_partial(run / "metrics.jsonl")
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"  # moekit got no chance to record
    (run / "smoke" / "checkpoints" / "6" / "items" / "_METADATA").unlink()

    again = moekit(*COMMON, f"run.dir={run}")
    assert again.returncode == 0, again.stderr + again.stdout[-2000:]
    assert "(attempt 2, resuming from the checkpoint of step 6)" in again.stdout
    assert "training failed: corrupt checkpoint" in again.stderr
    aside = run / "corrupt_checkpoints" / "6"
    assert f"the checkpoint of step 6 does not restore; it is kept aside in {aside}." in again.stderr
    assert "Resuming from the checkpoint of step 3 instead." in again.stderr
    assert "(attempt 3, resuming from the checkpoint of step 3)" in again.stdout
    assert (aside / "items").is_dir() and not (aside / "items" / "_METADATA").exists()
    assert (run / "smoke" / "checkpoints" / "6" / "items" / "_METADATA").is_file()  # saved anew after resuming

    # Exactly one record per step, all steps present, although the killed attempt ran past its checkpoint.
    assert _steps(run / "metrics.jsonl") == list(range(STEPS))
    assert max(killed_steps) >= 7  # steps past the checkpoint, run again after resuming
    assert _steps_partial(run / "attempts" / "1" / "metrics.jsonl") == killed_steps
    a, b = losses(tmp_path / "ref"), losses(run)
    assert len(a) == len(b) == STEPS
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3, (a, b)

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["attempt"] == 3
    assert manifest["resumed_from_checkpoint"] == 3
    history = manifest["attempts"]
    assert [h["status"] for h in history] == ["failed", "failed", "ok"]
    assert history[0]["failure"]["class"] == "killed"
    assert history[1]["failure"]["class"] == "corrupt_checkpoint"
    assert history[1]["failure"]["set_aside"] == {"checkpoint": 6, "moved_to": str(aside)}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == STEPS
    # One wall time over every attempt, in the manifest and the summary alike: the killed attempt's runs from its
    # first event to its last (a lower bound), and its host load is unknown, so the run's is too.
    print(f"\nkilled attempt: {history[0]['wall_s']} s recorded, {lived:.1f} s from launch to the kill")
    assert history[0]["wall_s_lower_bound"] and 0 < history[0]["wall_s"] <= lived, (history[0], lived)
    assert summary["wall_s_attempts"] == [h["wall_s"] for h in history]
    assert manifest["wall_s"] == summary["wall_s"] == pytest.approx(sum(h["wall_s"] for h in history), abs=0.02)
    assert manifest["wall_s_lower_bound"] and summary["wall_s_lower_bound"]
    assert history[0]["host_load"]["others_share"] is None and manifest["host_load"]["others_share"] is None
    # One attempt count in both files, and the killed attempt said where the run's numbers are printed.
    assert summary["attempts"] == len(history) == 3 and summary["killed_attempts"] == [1]
    assert "killed           attempt 1 of 3 was killed: the run's wall time is a lower bound" in again.stdout

    # A finished run directory is never overwritten.
    before = (run / "metrics.jsonl").read_bytes()
    third = moekit(*COMMON, f"run.dir={run}")
    assert third.returncode != 0 and "finished run" in third.stderr and "Traceback" not in third.stderr
    assert (run / "metrics.jsonl").read_bytes() == before


def _docs_example() -> list[list[str]]:
    """The two commands of docs/troubleshooting.md's resume example, as words after `moekit`."""
    text = (REPO / "docs" / "troubleshooting.md").read_text().split("## Resuming a failed run")[1]
    block = text.split("```")[1]
    commands = [line.split("#")[0].split() for line in block.strip().splitlines()]
    assert [c[0] for c in commands] == ["moekit", "moekit"] and commands[0] == commands[1]
    return [c[1:] for c in commands]


@pytest.mark.soak
@pytest.mark.integration
def test_docs_resume_example_works_as_printed(tmp_path):
    """The example's relative run.dir, from a working directory of its own: killed after step 5 (once the
    checkpoint of step 4 is committed), then run again as printed."""
    first, second = _docs_example()
    run = tmp_path / "outputs" / "my-run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moekit", *first],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 420
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the run ended before it could be killed"
            done = _steps_partial(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
            if (run / "smoke" / "checkpoints" / "4").is_dir() and max(done, default=-1) >= 5:
                break
            time.sleep(0.05)
        else:
            pytest.fail("no checkpoint of step 4 within the time limit")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    again = moekit(*second, cwd=tmp_path)
    assert again.returncode == 0, again.stderr + again.stdout[-2000:]
    assert f"-> {run} (attempt 2, resuming from the checkpoint of step" in again.stdout
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["resumed_from_checkpoint"] >= 4
    assert _steps(run / "metrics.jsonl") == list(range(10))


def test_a_third_attempt_keeps_who_wrote_each_record(tmp_path):
    """A merged file moves to attempts/2/ with the next attempt's start; the next merge keeps its marks."""
    from moekit.rundir import attempts

    _write(tmp_path / "metrics.jsonl", range(0, 6), "a")
    attempts.set_aside(tmp_path)
    _write(tmp_path / "metrics.jsonl", range(4, 8), "b")
    attempts.merge_metrics(tmp_path)
    assert attempts.set_aside(tmp_path) == 3
    _write(tmp_path / "metrics.jsonl", range(6, 10), "c")
    attempts.merge_metrics(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    expected = [(s, 1 if s < 4 else 2 if s < 6 else 3) for s in range(10)]
    assert [(r["step"], r["moekit/attempt"]) for r in rows] == expected


@pytest.mark.integration
def test_a_run_stopped_in_its_last_save_finishes_without_launching(tmp_path):
    """A stop that lands in the last step's save leaves every step trained and saved; MaxText refuses to train "up
    to" a step it has passed (seen with 2 processes and SIGTERM). The relaunch finishes from the records."""
    run = tmp_path / "run"
    first = moekit("train", "experiment=smoke", "train.steps=4", "checkpoint.every=3", f"run.dir={run}")
    assert first.returncode == 0 and (run / "smoke" / "checkpoints" / "3").is_dir(), first.stderr[-2000:]
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"status": "preempted"}))  # as a stop records it
    again = moekit("train", "experiment=smoke", "train.steps=4", "checkpoint.every=3", f"run.dir={run}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "the checkpoint of the last step (3) is saved: nothing left to train" in again.stdout
    assert "next step" not in again.stdout
    assert json.loads((run / "manifest.json").read_text())["status"] == "ok"
    assert _steps(run / "metrics.jsonl") == [0, 1, 2, 3]
