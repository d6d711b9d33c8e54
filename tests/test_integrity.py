"""Measurement integrity on the paths users take: the summary of an interrupted, resumed run measures what an
uninterrupted run of the same config measures, and the records hold every step exactly once.

The stop table (docs/metrics.md, "Stopped and resumed runs"): a stop at compile, between steps, during a save or
right after a save x SIGTERM to moekit, SIGKILL of moekit or SIGKILL of one worker x 1 or 2 processes. Two chains
run here, each one run stopped again and again, every attempt another way, then run to the end:
- 1 process (`chain`, 40 steps, checkpoints at 0, 5, ..., 35, 39), between uninterrupted references run before
  and after it: SIGTERM, worker killed and moekit killed while compiling; moekit killed between steps and during
  a save; worker killed and SIGTERM right after a save;
- 2 processes (`two_chain`, 6 steps, checkpoints at 0, 3, 5), against the uninterrupted 2-process run: worker and
  moekit killed while compiling, worker killed during a save, moekit killed between steps, SIGTERM right after a
  save.
Each stop waits for its point in the attempt under way, read from what the run recorded (events.jsonl, committed
checkpoints, step records) with its workers frozen, and is sent while they are (`interrupt`): a slow machine
changes when a stop lands, never where. An attempt that went past every point its stop could use is killed there
and the chain places the stop again from where the run is, while the run has room (`run_chain`). Each stop is
checked to have landed where it was meant (`landed`), else the test names the cell it hit.
Throughput is a ratio within this test (CPU time is noisy between machines, less within one test).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import (
    frozen,
    hold_steps_until_stopped,
    live_workers,
    losses,
    moekit,
    pending,
    recorded_steps,
    start_moekit,
    wait_until,
)

STEPS, EVERY = 40, 5
# Saves at 0, 5, ..., 35 and 39: the step after each pays it, the two after that refill the pipeline, 0 starts.
# Each resumed attempt loses its first three (start, the step with its first compilations, refill). 40 steps
# leave the interrupted run enough steady steps and the chain seven saves to place its stops at (see CHAIN);
# a CPU step costs about 0.5 s, an attempt's start-up 15 s.
COMMON = ["train", "experiment=smoke", "precision=fp32", f"train.steps={STEPS}", f"checkpoint.every={EVERY}"]
RATIO = 1.5
# Between runs made minutes apart a shared 2-core CI machine's speed has moved by up to 1.72x with like host load
# (CI, 2026-12-05: steal time no process owns): runs compared across minutes are held to DRIFT, runs compared
# within seconds of each other to RATIO. Both catch what they are for: a counted trace edge or compile is 3x+.
DRIFT = 2.0


def _events(run: Path, name: str = "events.jsonl") -> list[dict]:
    out = []
    for line in (run / name).read_text().splitlines() if (run / name).is_file() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _first_of_each_attempt(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for i, r in enumerate(rows) if i == 0 or rows[i - 1]["moekit/attempt"] != r["moekit/attempt"]]


def _committed(run: Path) -> set[int]:
    """The steps of the committed checkpoints (a save under way has a non-numeric folder name)."""
    folder = run / "smoke" / "checkpoints"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


def _running(run: Path, attempt: int) -> bool:
    """moekit has set the earlier attempts' files aside and launched attempt `attempt` (its manifest says so)."""
    try:
        m = json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return m.get("status") == "running" and m.get("attempt") == attempt


SIGTERM, KILL_MOEKIT, WORKER = "SIGTERM", "SIGKILL of moekit", "worker killed"


def _saves(events: list[dict], before: float, last: int) -> list[int]:
    """The steps of the saves begun before wall time `before` (MaxText's save on completion names no step: it is
    the last step's)."""
    return [
        last if e.get("step") is None else e["step"] for e in events if e["event"] == "save_begin" and e["t"] <= before
    ]


def landed(events: list[dict], sent: float, committed: set[int], recorded: int | None, last: int) -> str:
    """Where a stop sent at wall time `sent` landed, from the attempt's events (process 0) and what the run held
    at that moment (committed checkpoints, the attempt's last recorded step):
    - at compile: no step stamped yet;
    - during a save: the attempt's last save had begun and its checkpoint was not committed;
    - right after a save: that checkpoint was committed, is the newest, and no step after it had a record yet
      (a relaunch runs nothing twice);
    - between steps: otherwise (a relaunch runs the recorded steps after the newest checkpoint again)."""
    if not any(e["event"] == "step_end" and e["t"] <= sent for e in events):
        return "compile"
    begun = _saves(events, sent, last)
    if begun and begun[-1] not in committed:
        return "during a save"
    if begun and begun[-1] == max(committed, default=None) and (recorded is None or recorded <= begun[-1]):
        return "right after a save"
    return "between steps"


@dataclass
class Stop:
    """One interrupted attempt: how it was stopped, where it was meant to land and where it did."""

    how: str  # SIGTERM | SIGKILL of moekit | worker killed
    meant: str
    save_of: int | None = None  # during or right after a save: the save of this step (else any save up to `limit`)
    limit: int | None = None  # the latest save it may use: the steps after it are room for the rest of the chain
    replanned: bool = False  # the test stopped this attempt because it went past the point meant (see interrupt)
    where: str = ""
    save: int | None = None  # the step of the attempt's last save begun before the stop
    committed: set[int] = field(default_factory=set)  # the committed checkpoints when it was sent
    committed_after: set[int] = field(default_factory=set)
    recorded: int | None = None  # the attempt's last recorded step when it was sent
    output: str = ""
    returncode: int | None = None  # moekit's exit status
    wall_s: float = 0.0


@dataclass(frozen=True)
class State:
    """What the attempt under way holds at one moment: its events, the committed checkpoints, its last recorded
    step, and where a stop sent now would land (see landed)."""

    events: list[dict]
    committed: set[int]
    recorded: int | None
    t: float
    cell: str
    save: int | None  # the attempt's last save begun


def _state(run: Path, last: int) -> State:
    events, committed = _events(run), _committed(run)
    recorded, t = max(recorded_steps(run / "metrics.jsonl"), default=None), time.time()
    cell = landed(events, t, committed, recorded, last)
    return State(events, committed, recorded, t, cell, (_saves(events, t, last) or [None])[-1])


def _latest(stop: Stop, last: int) -> int:
    """The latest save a stop at a save may use."""
    return stop.save_of if stop.save_of is not None else stop.limit if stop.limit is not None else last


def _eligible(stop: Stop, save: int | None, last: int) -> bool:
    return save is not None and save <= _latest(stop, last) and stop.save_of in (None, save)


def _ready(s: State, stop: Stop, last: int) -> bool:
    """Whether the attempt is at the point `stop.meant` (see landed): at compile once MaxText restored (or found
    no checkpoint); between steps once a step after the newest checkpoint has its record; during or right after
    a save of a step the stop may use."""
    if s.cell != stop.meant:
        return False
    if stop.meant == "compile":
        return any(e["event"] == "restore" for e in s.events)
    if stop.meant == "between steps":
        return s.recorded is not None and s.recorded > max(s.committed, default=-1)
    return _eligible(stop, s.save, last)


def _near(s: State, stop: Stop, last: int) -> bool:
    """Whether the point is at hand: from then on the test lets the run go on only in short slices (see
    interrupt). Right after a save: once the save it may use began."""
    if stop.meant == "right after a save":
        return s.cell in ("during a save", stop.meant) and _eligible(stop, s.save, last)
    return _ready(s, stop, last)


def _passed(s: State, stop: Stop, last: int) -> bool:
    """Whether the attempt went past every point it could have been stopped at for `stop`."""
    if stop.meant == "compile":
        return s.cell != "compile"
    if stop.meant == "between steps":
        return False
    latest = _latest(stop, last)
    return (s.recorded is not None and s.recorded > latest) or (stop.meant == "during a save" and latest in s.committed)


def _room(stop: Stop, resume: int | None, every: int, last: int) -> bool:
    """Whether an attempt resuming from the checkpoint of step `resume` can still reach the point of `stop`."""
    start = -1 if resume is None else resume
    if stop.meant in ("compile", "between steps"):
        return start < last - 1
    saves = [s for s in range(start + 1, last + 1) if s % every == 0 or s == last]
    return any(_eligible(stop, s, last) for s in saves)


SLICE_S = 0.02  # near the point the run goes on in slices this long, frozen in between


def interrupt(command: list[str], run: Path, attempt: int, stop: Stop, steps: int, processes: int = 1) -> Stop:
    """Start attempt `attempt` of `command`, wait for the point `stop.meant` and stop the attempt the way
    `stop.how` says (a worker: the highest-numbered process); wait for it to end and record where it landed.

    The stop is placed by what the run records, never by time: each check freezes the workers (SIGSTOP: their
    records, events and checkpoints stand still), reads where the attempt is, and sends the stop while they are
    frozen, so it lands in the state read; near the point the run goes on only in slices of SLICE_S between
    checks, so a loaded machine that starves this test cannot carry the run past it. SIGTERM goes to moekit; the
    workers stay frozen until moekit passed it on to them, then are held after each step until they stopped for
    it (conftest.hold_steps_until_stopped). If the attempt still went past every point the stop
    may use (a window shorter than a slice), moekit is SIGKILLed there instead (`replanned`: a kill commits
    nothing, and the chain places the stop again in a later attempt)."""
    began, last = time.monotonic(), steps - 1
    proc = start_moekit(command, run)
    wait_until(proc, lambda: _running(run, attempt) and len(live_workers(run)) == processes, "the workers")
    pids = live_workers(run)
    stepping, held, deadline = False, False, time.monotonic() + 600
    while True:
        if proc.poll() is not None:
            pytest.fail(f"attempt {attempt} ended before {stop.meant}:\n{proc.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"attempt {attempt} not at {stop.meant} within 600 s")
        if not stepping and not _near(_state(run, last), stop, last):
            time.sleep(0.05)
            continue
        with frozen(pids.values()):
            now = _state(run, last)
            act = _ready(now, stop, last)
            if not act and _passed(now, stop, last):
                stop = dataclasses.replace(stop, how=KILL_MOEKIT, meant=now.cell, replanned=True)
                act = True
            if act:
                stop.committed, stop.recorded, sent = now.committed, now.recorded, time.time()
                if stop.how == SIGTERM:
                    os.kill(proc.pid, signal.SIGTERM)  # moekit only, as a pod's PID 1 or a Slurm task gets it
                    passed_on = lambda: all(pending(p, signal.SIGTERM) for p in pids.values())  # noqa: E731
                    wait_until(proc, passed_on, "moekit passing SIGTERM on", timeout_s=60)
                    held = True
                elif stop.how == KILL_MOEKIT:
                    os.killpg(proc.pid, signal.SIGKILL)  # moekit only: its workers die with it (PDEATHSIG)
                else:
                    os.kill(pids[max(pids)], signal.SIGKILL)
                break
            stepping = _near(now, stop, last)
        time.sleep(SLICE_S)
    if held:
        hold_steps_until_stopped(proc, pids.values(), run)
    stop.output, stop.returncode = proc.communicate(timeout=300)[0], proc.returncode
    deadline = time.monotonic() + 30
    while live_workers(run) and time.monotonic() < deadline:
        time.sleep(0.2)
    events = _events(run)
    stop.where = landed(events, sent, stop.committed, stop.recorded, last)
    stop.save = (_saves(events, sent, last) or [None])[-1]
    stop.committed_after, stop.wall_s = _committed(run), time.monotonic() - began
    print(f"\nattempt {attempt}: {stop.how}, meant {stop.meant}{' (re-planned)' if stop.replanned else ''}, landed "
          f"{stop.where} (save {stop.save}, recorded {stop.recorded}, committed {sorted(stop.committed)}; "
          f"{stop.wall_s:.0f} s)")  # fmt: skip
    return stop


def run_chain(
    command: list[str], run: Path, plan: list[Stop], steps: int, every: int, processes: int = 1
) -> tuple[list[Stop], list[Stop]]:
    """Stop attempts of one run the ways `plan` says, in order, each from where the one before left the run; an
    attempt that went past its point (see interrupt) is followed by another for the same stop while the run has
    room for it. Returns the stops sent and the planned ones that found no room (the tests name them)."""
    stops: list[Stop] = []
    todo, unplaced = list(plan), []
    while todo:
        resume = max(_committed(run), default=None)
        if not _room(todo[0], resume, every, steps - 1):
            print(f"\nnot placed: {todo[0].how} {todo[0].meant}: the run resumes from step {resume}")
            unplaced.append(todo.pop(0))
            continue
        got = interrupt(command, run, len(stops) + 1, dataclasses.replace(todo[0]), steps, processes)
        stops.append(got)
        if not got.replanned:
            todo.pop(0)
    return stops, unplaced


def check_stops(run: Path, stops: list[Stop]) -> list[dict]:
    """Each stop landed where it was meant to (else the cell it really hit is named) and left what its kind
    leaves: a SIGTERM a checkpoint saved after it with every recorded step in it; a kill nothing committed after
    it (a save it cut short counts for nothing), the next attempt resuming from the newest checkpoint before it.
    Returns the manifest's attempts."""
    attempts = json.loads((run / "manifest.json").read_text())["attempts"]
    for a in attempts:
        print(f"\nattempt {a['attempt']}: {a['status']}, {a.get('preemption') or a.get('failure')}")
    assert [(s.how, s.where) for s in stops] == [(s.how, s.meant) for s in stops], [s.output[-1500:] for s in stops]
    # A SIGTERM that came once the last step had run leaves a finished run (its stop kept on the attempt's record).
    late = (
        bool(stops) and stops[-1].how == SIGTERM and (attempts[-1].get("preemption") or {}).get("after_the_last_step")
    )
    assert len(attempts) == len(stops) + (0 if late else 1) and attempts[-1]["status"] == "ok", attempts
    for n, (stop, this, following) in enumerate(zip(stops, attempts, [*attempts[1:], None], strict=False), 1):
        if stop.how == SIGTERM and following is None:
            assert late and this["status"] == "ok", (n, this)
        elif stop.how == SIGTERM:
            p = this.get("preemption") or {}
            assert this["status"] == "preempted" and p["checkpoint_saved"], (n, this)
            assert p["steps_lost"] == 0 and p["last_step"] == p["checkpoint_step"], (n, p)  # counted from records
            assert following["resumed_from_checkpoint"] == p["checkpoint_step"], (n, this, following)
        else:
            assert this["status"] == "failed" and this["failure"]["class"] == "killed", (n, this)
            assert stop.committed_after == stop.committed, (n, stop.committed, stop.committed_after)
            assert following["resumed_from_checkpoint"] == max(stop.committed, default=None), (n, following)
    return attempts


def records_reconciled(run: Path, steps: int, name: str = "metrics.jsonl") -> None:
    """The merged records hold each step once, from the last attempt that recorded it: the steps an attempt
    recorded after the checkpoint the next one resumed from (its steps lost, counted from the records) were run
    again and recorded again. attempts/<n>/ holds attempt n's own records; the last attempt ran every step after
    the checkpoint it resumed from."""
    merged = {int(r["step"]): r["moekit/attempt"] for r in map(json.loads, (run / name).read_text().splitlines())}
    folders = [p for p in (run / "attempts").iterdir() if p.name.isdigit()]
    # An attempt's file holds the records merged after it ended (each marked with the attempt that wrote it).
    own = {
        int(p.name): [int(r["step"]) for r in _rows(p / name) if r.get("moekit/attempt", int(p.name)) == int(p.name)]
        for p in folders
    }
    manifest = json.loads((run / "manifest.json").read_text())
    resumed = {a["attempt"]: a.get("resumed_from_checkpoint") for a in manifest["attempts"]}
    last = max(resumed)
    own[last] = list(range(0 if resumed[last] is None else resumed[last] + 1, steps))
    for n, recorded in own.items():
        if n + 1 in resumed:  # None: the next attempt started again from step 0
            lost = [s for s in recorded if resumed[n + 1] is None or s > resumed[n + 1]]
            assert all(merged[s] > n for s in lost), (name, n, lost, merged)
    expected = {s: max(n for n, recorded in own.items() if s in recorded) for s in range(steps)}
    assert merged == expected, (name, merged, expected)


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


# The 1-process chain: each attempt stopped one way at one point (checkpoints every EVERY steps and at the last),
# then one to the end. Each stop waits for its point in the attempt under way, wherever the attempt before left the
# run. A stop right after a save has one short window per save (the checkpoint's background commit, then the next
# step's record: 0.1 s on 2026-12-05, and none at all when the commit comes later), so it may use any save up to
# its limit; the limits leave the steps after them to the stops that follow and to the preemption's own save.
CHAIN = [
    Stop(SIGTERM, "compile"),
    Stop(WORKER, "compile"),
    Stop(KILL_MOEKIT, "compile"),
    Stop(KILL_MOEKIT, "between steps"),
    Stop(KILL_MOEKIT, "during a save", limit=15),
    Stop(WORKER, "right after a save", limit=20),
    Stop(SIGTERM, "right after a save", limit=30),
]


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> tuple[Path, list[Stop], subprocess.CompletedProcess]:
    run = tmp_path_factory.mktemp("integrity") / "chain"
    stops, unplaced = run_chain(COMMON, run, CHAIN, STEPS, EVERY)
    return run, stops, to_the_end(COMMON, run, stops), unplaced


def to_the_end(command: list[str], run: Path, stops: list[Stop]) -> subprocess.CompletedProcess | None:
    """The attempt after the chain's stops, run to the end; None where the last stop, a SIGTERM right after a save,
    came once the last step had run and left the run finished (moekit never relaunches a finished run)."""
    if json.loads((run / "manifest.json").read_text()).get("status") == "ok":
        return None
    began = time.monotonic()
    last = moekit(*command, f"run.dir={run}")
    print(f"attempt {len(stops) + 1}: to the end ({time.monotonic() - began:.0f} s)")
    assert last.returncode == 0, (last.stdout + last.stderr)[-3000:]
    return last


@pytest.mark.soak
@pytest.mark.integration
def test_resumed_run_has_every_step_once_and_the_reference_losses(reference, chain):
    run, stops, last, unplaced = chain
    assert not unplaced, f"no room left in the run for {[(s.how, s.meant) for s in unplaced]}"
    attempts = check_stops(run, stops)
    # The notice reaches MaxText's sync point at the first step boundary after compiling: it saves there and
    # stops; that step has its record (it used to be missing), so nothing is run twice.
    assert attempts[0]["preemption"]["checkpoint_step"] <= 1, attempts[0]
    # SIGTERM right after a save: the workers save again at a later step boundary.
    n = next(i for i, s in enumerate(stops) if (s.how, s.meant) == (SIGTERM, "right after a save"))
    assert attempts[n]["preemption"]["checkpoint_step"] > stops[n].save, (attempts[n], stops[n])

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [int(r["step"]) for r in rows] == list(range(STEPS))
    records_reconciled(run, STEPS)
    # Each step's record comes from the last attempt that ran it: 0 from the preempted one, the rest after; the
    # last from the attempt to the end, unless the last stop's own save was the last step's (then that attempt
    # found nothing left to train).
    if last is None:  # the last SIGTERM came once the last step had run: no attempt after it
        finished = True
    else:
        finished = (attempts[-2].get("preemption") or {}).get("checkpoint_step") == STEPS - 1
        assert ("nothing left to train" in last.stdout) == finished, last.stdout[-2000:]
    assert rows[0]["moekit/attempt"] == 1 and rows[-1]["moekit/attempt"] == len(stops) + 1 - finished
    a, b = losses(reference), losses(run)
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3, (a, b)


@pytest.mark.soak
@pytest.mark.integration
def test_resumed_run_measures_what_an_uninterrupted_run_measures(reference, chain, reference_after):
    run = chain[0]
    refs = [json.loads((r / "summary.json").read_text()) for r in (reference, reference_after)]
    got = json.loads((run / "summary.json").read_text())
    for name, s in (("before", refs[0]), ("resumed", got), ("after", refs[1])):
        print(f"\n{name}: {s['tokens_per_s_per_device']:.1f} tokens/s over {s['counted_steps']}; left out "
              f"{s['excluded']}")  # fmt: skip
    # One attempt count: the manifest's entries, an attempt stopped at compile (which keeps no records) included;
    # at least the attempts whose records the run keeps.
    kept = {r["moekit/attempt"] for r in _rows(run / "metrics.jsonl")}
    entries = json.loads((run / "manifest.json").read_text())["attempts"]
    assert got["missing_steps"] == [] and got["attempts"] == len(entries) >= len(kept), (got["attempts"], kept)
    assert set(got["evidence"].values()) == {"events"}
    # Within RATIO of an uninterrupted run of the same config, measured before or after it in this test.
    ratios = [got["tokens_per_s_per_device"] / r["tokens_per_s_per_device"] for r in refs]
    ratio = min(ratios, key=lambda x: max(x, 1 / x))
    assert 1 / RATIO <= ratio <= RATIO, ratios
    reasons = {e["step"]: e["reason"] for e in got["excluded"]}
    # Each attempt's first step is left out; so is step 1 of the first attempt, which pays the save of step 0 and,
    # when XLA compiles again there (the events record it), is left out as a compile: both reasons are right.
    firsts = sorted({int(r["step"]) for r in _first_of_each_attempt(run)})
    assert all(reasons.get(s) == "attempt start" for s in firsts), reasons
    # Unless step 1 is itself an attempt's first (stops at compile left no steps, a later attempt resumed at step 1).
    assert reasons.get(1) in ("checkpoint save", "compile") or 1 in firsts, reasons
    # `moekit report` recomputes the same figures from the run directory, also after it was moved.
    moved = run.parent / "moved"
    import shutil

    shutil.copytree(run, moved, ignore=shutil.ignore_patterns("smoke"))
    baseline = (reference, reference_after)[ratios.index(ratio)]
    proc = moekit("report", str(baseline), str(moved), "--out", str(run.parent / "report"))
    assert proc.returncode == 0, proc.stderr
    line = next(
        ln
        for ln in proc.stdout.splitlines()
        if ln.startswith("| ") and "moved" in ln and ("ratio" in ln or "x |" in ln)
    )
    # A speed-up, or its ratio where the runs' spread or host load rules it out (observe/reports/comparable.py).
    assert f"{ratio:.2f}x" in line or f"ratio {ratio:.2f}" in line, line


def _plain(smoke_run) -> tuple[dict, Path]:
    """The plain run's summary and directory (test_train_cpu adds a 2-step run under the same base directory: not
    that one)."""
    base, proc = smoke_run
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    found = [(json.loads((p / "summary.json").read_text()), p) for p in (base / "smoke").iterdir()]
    return next((s, p) for s, p in found if s["steps"] == 10)


def _others_share(run: Path) -> float | None:
    """The share of the host's CPU other processes took during the run (its manifest's host_load)."""
    return (json.loads((run / "manifest.json").read_text()).get("host_load") or {}).get("others_share")


@pytest.mark.integration
def test_a_profiled_run_leaves_the_trace_window_out_of_its_rate(profiled_smoke):
    """experiment=smoke profile=on (a fixture other tests share): the trace edges and the two steps after each are
    left out of the rate by the trace events. (Its rate beside a plain run's: tests/test_rates.py.)"""
    run, proc = profiled_smoke
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((run / "summary.json").read_text())
    reasons = {e["step"]: e["reason"] for e in got["excluded"]}
    # MaxText traces steps 3..5: starting the trace falls in step 3, stopping it in step 6.
    assert reasons.get(3) == reasons.get(6) == "profile window edge", reasons
    # The two steps after each edge refill the pipeline: no step from the edges to the second refill counts.
    assert all(reasons.get(s) == "pipeline refill" for s in (4, 5, 7, 8)), reasons
    assert not set(got["counted_steps"]) & set(range(3, 9)), got["counted_steps"]
    assert got["missing_steps"] == [] and got["steps"] == 10


@pytest.mark.integration
def test_a_sweep_member_measures_what_a_plain_run_measures(smoke_run, smoke_sweep):
    """experiment=smoke plain and as run 0 of a `train -m` sweep (fixtures other tests share), made minutes apart:
    the member's rate is held to DRIFT of the plain run's where both ran under like host load. Where the loads
    differ by more than `moekit report`'s LOAD_GAP, no rate says what the other should measure: the test says so
    as a skip, not as a pass."""
    plain, plain_dir = _plain(smoke_run)
    folder, sweep = smoke_sweep
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    member = json.loads((folder / "0" / "summary.json").read_text())
    print(f"\nsweep run 0: {member['tokens_per_s_per_device']:.1f} tokens/s over {member['counted_steps']}; plain "
          f"{plain['tokens_per_s_per_device']:.1f} over {plain['counted_steps']}")  # fmt: skip
    assert member["missing_steps"] == [] and member["steps"] == 10 and member["counted_steps"]
    # Only a reference measured under like host load says what this run should measure (the rule of `moekit
    # report`, observe/reports/comparable.py): another test's processes beside one of them move its rate.
    from moekit.observe.reports.comparable import LOAD_GAP

    mine, theirs = _others_share(folder / "0"), _others_share(plain_dir)
    print(f"others' share of the CPU: this run {mine:.2f}, the plain run {theirs:.2f}")
    if abs(mine - theirs) > LOAD_GAP:
        pytest.skip(f"host loads differ: others took {mine:.2f} of the CPU beside the member, {theirs:.2f} beside "
                    f"the plain run (more than LOAD_GAP={LOAD_GAP})")  # fmt: skip
    ratio = member["tokens_per_s_per_device"] / plain["tokens_per_s_per_device"]
    assert 1 / DRIFT <= ratio <= DRIFT, (ratio, mine, theirs)


@pytest.mark.integration
@pytest.mark.soak
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
    sent = interrupt([*command, port], run, 1, Stop(SIGTERM, "during a save", save_of=3), 6, processes=2)
    assert (sent.where, sent.replanned) == ("during a save", False), (sent, sent.output[-3000:])
    first = sent.output
    stop = json.loads((run / "manifest.json").read_text()).get("preemption") or {}
    assert sent.returncode == 128 + signal.SIGTERM and stop.get("checkpoint_saved"), (stop, first[-3000:])
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


# The 2-process chain (6 steps, checkpoints at 0, 3 and 5), against the uninterrupted 2-process run.
TWO_CHAIN = [
    Stop(WORKER, "compile"),
    Stop(KILL_MOEKIT, "compile"),
    Stop(WORKER, "during a save", save_of=3),
    Stop(KILL_MOEKIT, "between steps"),
    Stop(SIGTERM, "right after a save"),
]


def _two_command() -> list[str]:
    from conftest import TWO_PROCESS_OVERRIDES, free_port

    return ["train", "experiment=smoke", *TWO_PROCESS_OVERRIDES, "cluster.processes_per_node=2", "checkpoint.every=3",
            f"cluster.coordinator_port={free_port()}"]  # fmt: skip


@pytest.fixture(scope="module")
def two_chain(tmp_path_factory) -> tuple[Path, list[Stop], subprocess.CompletedProcess]:
    run = tmp_path_factory.mktemp("integrity") / "two_chain"
    stops, unplaced = [], []
    for n, stop in enumerate(TWO_CHAIN, 1):  # 6 steps leave no room to place a stop again: each attempt has one go
        got = interrupt(_two_command(), run, n, dataclasses.replace(stop), 6, processes=2)
        stops.append(got)
        if got.replanned:
            unplaced.append(stop)
    return run, stops, to_the_end(_two_command(), run, stops), unplaced


@pytest.mark.integration
@pytest.mark.soak
def test_two_processes_stopped_five_ways_resume_with_every_step_once(local_two_process_run, two_chain):
    """2 processes, 6 steps, checkpoints at 0, 3 and 5: process 1 SIGKILLed while compiling (moekit stops process
    0), SIGKILL of moekit while compiling (both workers die with it), process 1 SIGKILLed during the save of step
    3, SIGKILL of moekit between steps, SIGTERM right after a save; then to the end. Both processes' records hold
    every step once, with the uninterrupted 2-process run's losses."""
    ref_dir, ref = local_two_process_run
    assert ref.returncode == 0, ref.stderr[-2000:]
    run, stops, last, unplaced = two_chain
    assert not unplaced, f"went past the point of {[(s.how, s.meant) for s in unplaced]}"
    attempts = check_stops(run, stops)
    stop, sent = attempts[-1 if last is None else -2]["preemption"], stops[-1]
    # The workers save again at a later step boundary, unless the save was already the last step's (the steps
    # after a periodic save are dispatched faster than the preemption sync lands: mostly it saves at step 5).
    assert last is None or stop["checkpoint_step"] > sent.save or sent.save == 5, (stop, sent)
    # The stop landed in the last step's save: then the run is finished, or its relaunch trains nothing.
    if last is not None:
        assert ("nothing left to train" in last.stdout) == (stop["checkpoint_step"] == 5), last.stdout[-2000:]
    for name in ("metrics.jsonl", "metrics.1.jsonl"):
        assert recorded_steps(run / name) == list(range(6)), name
        records_reconciled(run, 6, name)
        a, b = losses(ref_dir, name), losses(run, name)
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-3, (name, a, b)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["missing_steps"] == [], summary


def test_a_saved_steps_record_is_written_before_the_next_step(tmp_path):
    """MaxText writes step s's record once step s + 1 is queued, while the checkpoint of s commits in the
    background: step_events writes a saved step's record as soon as it is queued (MaxText's own MetricLogger
    here; the checkpointing stand-in saves at steps 0 and 3)."""
    import datetime
    import types

    from maxtext.common import metric_logger

    from moekit.worker import step_events

    class Config(types.SimpleNamespace):
        def __getattr__(self, name):  # every switch MaxText's logger reads and this test leaves unset: off
            return 0

    metrics_file = tmp_path / "metrics.jsonl"
    config = Config(metrics_file=str(metrics_file), run_name="t", rampup_end_step=10**9)

    class Logger(metric_logger.MetricLogger):  # a subclass: MaxText's own class stays unwrapped
        pass

    saving = types.SimpleNamespace(save_checkpoint=lambda *a, **k: True, load_state_if_possible=lambda *a, **k: None)
    saving.maybe_save_checkpoint = lambda m, s, c, d, step=None: step in (0, 3) and saving.save_checkpoint()
    step_events._wrap_checkpointing(saving, RuntimeError)
    step_events._wrap_metric_logger(Logger)
    logger = Logger(config, learning_rate_schedule=lambda step: 0.1)
    written = []
    for step in range(5):
        saving.maybe_save_checkpoint(None, None, None, None, step)
        scalars = {"learning/loss": 1.0 + step, "learning/total_weights": 8}
        logger.buffer_and_write_metrics({"scalar": scalars}, step, datetime.timedelta(seconds=1))
        written.append([json.loads(line)["step"] for line in metrics_file.read_text().splitlines()])
    # steps 0 and 3 (saved) are on disk when they are queued; the others one step later, as MaxText writes them
    assert written == [[0], [0], [0, 1], [0, 1, 2, 3], [0, 1, 2, 3]], written
