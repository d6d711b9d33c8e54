"""Measurement integrity on the paths users take: the summary of an interrupted, resumed run measures what an
uninterrupted run of the same config measures, and the records hold every step exactly once.

Uninterrupted references before and after one run interrupted three times, each attempt stopped another way at another
point (the cells of the stop table this covers, 1 process):
- attempt 1: SIGTERM to moekit while MaxText compiles (before step 0): a preemption, saved at the first step
  boundary JAX's preemption sync reaches (step 0 or 1);
- attempt 2: SIGKILL of moekit between steps, two steps after the checkpoint of step 5: steps 6-7 run again;
- attempt 3: SIGKILL of the worker right after the checkpoint of step 10 is committed;
- attempt 4: runs to the end.
Throughput is a ratio within this test (CPU time is noisy between machines, less within one test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, live_workers, losses, moekit, recorded_steps, start_moekit, wait_until

STEPS = 20
# Saves at 0, 5, 10, 15: steps 1, 6, 11, 16 pay them, the steps after refill the pipeline, 0 starts; 8 are steady.
# Each resumed attempt loses its first three (start, the step with its first compilations, refill): 20 steps leave
# the interrupted run enough steady steps.
COMMON = ["train", "experiment=smoke", "precision=fp32", f"train.steps={STEPS}", "checkpoint.every=5"]
RATIO = 1.5


def _events(run: Path) -> list[dict]:
    out = []
    for line in (run / "events.jsonl").read_text().splitlines() if (run / "events.jsonl").is_file() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _start(run: Path) -> subprocess.Popen:
    return start_moekit(COMMON, run)


def _first_of_each_attempt(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for i, r in enumerate(rows) if i == 0 or rows[i - 1]["moekit/attempt"] != r["moekit/attempt"]]


def _checkpoint(run: Path, step: int) -> bool:
    return (run / "smoke" / "checkpoints" / str(step)).is_dir()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("integrity") / "reference"
    proc = moekit(*COMMON, f"run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    return run


@pytest.fixture(scope="module")
def reference_after(tmp_path_factory, chain) -> Path:
    """The same uninterrupted run again, right after the interrupted one: the shared CPU's load drifts between
    minutes (1.9x between two runs of this config on 2026-12-04), so the interrupted run is bracketed."""
    run = tmp_path_factory.mktemp("integrity") / "reference_after"
    proc = moekit(*COMMON, f"run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    return run


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> tuple[Path, list[str]]:
    run = tmp_path_factory.mktemp("integrity") / "chain"
    outputs = []

    proc = _start(run)  # 1: SIGTERM while compiling (the restore attempt is done, no step yet)
    wait_until(proc, lambda: any(e["event"] == "restore" for e in _events(run)), "restoring")
    os.kill(proc.pid, signal.SIGTERM)
    outputs.append(proc.communicate(timeout=300)[0])

    proc = _start(run)  # 2: SIGKILL of moekit two steps after the checkpoint of step 5
    wait_until(
        proc, lambda: _checkpoint(run, 5) and max(recorded_steps(run / "metrics.jsonl"), default=-1) >= 7, "step 7"
    )
    os.killpg(proc.pid, signal.SIGKILL)  # moekit only: the workers run in sessions of their own and die with it
    outputs.append(proc.communicate(timeout=60)[0])
    deadline = time.monotonic() + 30
    while live_workers(run) and time.monotonic() < deadline:
        time.sleep(0.2)

    proc = _start(run)  # 3: the worker killed right after the save of step 10 was committed
    wait_until(proc, lambda: _checkpoint(run, 10), "the checkpoint of step 10")
    for pid in live_workers(run).values():
        os.kill(pid, signal.SIGKILL)
    outputs.append(proc.communicate(timeout=120)[0])

    last = moekit(*COMMON, f"run.dir={run}")  # 4: to the end
    outputs.append(last.stdout + last.stderr)
    assert last.returncode == 0, outputs[-1][-3000:]
    return run, outputs


@pytest.mark.integration
def test_resumed_run_has_every_step_once_and_the_reference_losses(reference, chain):
    run, outputs = chain
    manifest = json.loads((run / "manifest.json").read_text())
    statuses = [(a["status"], (a.get("failure") or {}).get("class")) for a in manifest["attempts"]]
    print(f"\nattempts: {statuses}")
    assert [s for s, _ in statuses] == ["preempted", "failed", "failed", "ok"], (statuses, outputs[0][-2000:])
    assert statuses[1][1] == "killed"
    # The notice reaches MaxText's sync point at the first step boundary after compiling: it saves there and
    # stops; that step has its record (it used to be missing), so nothing is run twice.
    stop = manifest["attempts"][0]["preemption"]
    assert stop["checkpoint_saved"] and stop["last_step"] == stop["checkpoint_step"] <= 1, stop
    assert stop["steps_lost"] == 0, stop

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [int(r["step"]) for r in rows] == list(range(STEPS))
    # Each step's record comes from the last attempt that ran it: 0 from the preempted one, the rest after.
    assert rows[0]["moekit/attempt"] == 1 and rows[-1]["moekit/attempt"] == 4
    a, b = losses(reference), losses(run)
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3, (a, b)


@pytest.mark.integration
def test_resumed_run_measures_what_an_uninterrupted_run_measures(reference, chain, reference_after):
    run, _ = chain
    refs = [json.loads((r / "summary.json").read_text()) for r in (reference, reference_after)]
    got = json.loads((run / "summary.json").read_text())
    for name, s in (("before", refs[0]), ("resumed", got), ("after", refs[1])):
        print(f"\n{name}: {s['tokens_per_s_per_device']:.1f} tokens/s over {s['counted_steps']}; left out "
              f"{s['excluded']}")  # fmt: skip
    assert got["missing_steps"] == [] and got["attempts"] == 4
    assert set(got["evidence"].values()) == {"events"}
    # Within RATIO of an uninterrupted run of the same config, measured before or after it in this test.
    ratios = [got["tokens_per_s_per_device"] / r["tokens_per_s_per_device"] for r in refs]
    ratio = min(ratios, key=lambda x: max(x, 1 / x))
    assert 1 / RATIO <= ratio <= RATIO, ratios
    reasons = {e["step"]: e["reason"] for e in got["excluded"]}
    # Each attempt's first step is left out; so is the save of step 0 (paid by step 1 in the first attempt).
    firsts = sorted({int(r["step"]) for r in _first_of_each_attempt(run)})
    assert all(reasons.get(s) == "attempt start" for s in firsts) and reasons.get(1) == "checkpoint save", reasons
    # `moekit report` recomputes the same figures from the run directory, also after it was moved.
    moved = run.parent / "moved"
    import shutil

    shutil.copytree(run, moved, ignore=shutil.ignore_patterns("smoke"))
    baseline = (reference, reference_after)[ratios.index(ratio)]
    proc = moekit("report", str(baseline), str(moved), "--out", str(run.parent / "report"))
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ") and "moved" in ln and "x |" in ln)
    assert f"{ratio:.2f}x" in line, line


def _plain(smoke_run) -> dict:
    """The plain run's summary (test_train_cpu adds a 2-step run under the same base directory: not that one)."""
    base, proc = smoke_run
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    found = [json.loads((p / "summary.json").read_text()) for p in (base / "smoke").iterdir()]
    return next(s for s in found if s["steps"] == 10)


@pytest.mark.integration
@pytest.mark.parametrize("path", ["profile=on", "train -m member"])
def test_profiled_and_sweep_runs_measure_what_a_plain_run_measures(path, smoke_run, profiled_smoke, smoke_sweep):
    """experiment=smoke three ways, each a fixture other tests share: plain, with profile=on (the trace edges and
    the steps after them are left out by the trace events), and as run 0 of a `train -m` sweep."""
    plain = _plain(smoke_run)
    if path == "profile=on":
        run, proc = profiled_smoke
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads((run / "summary.json").read_text())
        reasons = {e["step"]: e["reason"] for e in got["excluded"]}
        # MaxText traces steps 3..5: starting the trace falls in step 3, stopping it in step 6.
        assert reasons.get(3) == reasons.get(6) == "profile window edge", reasons
    else:
        folder, proc = smoke_sweep
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads((folder / "0" / "summary.json").read_text())
    print(f"\n{path}: {got['tokens_per_s_per_device']:.1f} tokens/s over {got['counted_steps']}; plain "
          f"{plain['tokens_per_s_per_device']:.1f} over {plain['counted_steps']}")  # fmt: skip
    assert got["missing_steps"] == [] and got["steps"] == 10
    ratio = got["tokens_per_s_per_device"] / plain["tokens_per_s_per_device"]
    assert 1 / RATIO <= ratio <= RATIO, ratio


@pytest.mark.integration
def test_two_processes_stopped_during_a_save_resume_with_every_step_once(tmp_path, local_two_process_run):
    """The 2-process cell: SIGTERM to moekit while the checkpoint of step 3 is being written. JAX's preemption
    service agrees on a later step boundary in both processes, they save there and stop; the relaunch finishes
    with every step recorded once (in both processes' files) and the uninterrupted 2-process run's losses."""
    from conftest import TWO_PROCESS_OVERRIDES, free_port

    ref_dir, ref = local_two_process_run
    assert ref.returncode == 0, ref.stderr[-2000:]
    run = tmp_path / "two"
    command = ["train", "experiment=smoke", *TWO_PROCESS_OVERRIDES, "cluster.processes_per_node=2",
               "checkpoint.every=3"]  # fmt: skip
    port = f"cluster.coordinator_port={free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moekit", *command, port, f"run.dir={run}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    folder = run / "smoke" / "checkpoints"
    wait_until(proc, lambda: folder.is_dir() and any(p.name.startswith("3") for p in folder.iterdir()), "saving step 3")
    os.kill(proc.pid, signal.SIGTERM)
    first, _ = proc.communicate(timeout=300)
    stop = json.loads((run / "manifest.json").read_text()).get("preemption") or {}
    assert proc.returncode == 128 + signal.SIGTERM and stop.get("checkpoint_saved"), (stop, first[-3000:])
    again = moekit(*command, f"cluster.coordinator_port={free_port()}", f"run.dir={run}")
    assert again.returncode == 0, again.stderr[-3000:] + again.stdout[-2000:]
    print(f"\n2 processes, SIGTERM during the save of step 3: {stop}")
    for name in ("metrics.jsonl", "metrics.1.jsonl"):
        assert recorded_steps(run / name) == list(range(6)), name
    a, b = losses(ref_dir), losses(run)
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3, (a, b)
    summary = json.loads((run / "summary.json").read_text())
    # The stop may land in the last step's save (step 5): then the relaunch trains nothing and the records hold
    # one attempt that trained; else the second attempt trains the rest.
    finished = stop["checkpoint_step"] == 5
    assert ("nothing left to train" in again.stdout) == finished, again.stdout[-2000:]
    assert summary["missing_steps"] == [] and summary["attempts"] == (1 if finished else 2), summary
    assert stop["steps_lost"] == stop["last_step"] - stop["checkpoint_step"] == 0, stop
