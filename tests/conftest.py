"""Shared fixtures: compose the real config tree, run the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from moekit.config.compose import compose as _compose
from moekit.config.schema import Config

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))

# moekit's cache (MaxText's verdict per config hash, XLA's per jaxlib version) for every moekit the tests start:
# kept beside pytest's own cache, so a user's ~/.cache/moekit is never touched and reruns are quick. Only
# accepted configs are cached; every refusal is asked again.
os.environ.setdefault("MOEKIT_CACHE_DIR", str(REPO / ".pytest_cache" / "moekit"))

# MaxText's environment override of its jax_cache_dir key (pyconfig: M_<KEY>; the key's default is ~/jax_cache).
JAX_CACHE_ENV = "M_JAX_CACHE_DIR"


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory) -> Iterator[Path]:
    """One JAX persistent compilation cache for every training this session starts: the tiny configs the suite
    trains again and again compile their train step once per session (on 2 cores, 25-40 s each). A folder of the
    session's own: nothing is read from or left in a user's ~/jax_cache or another session's cache. Runs that keep
    the cache off (profile=on, CPU runs of several processes) say so on MaxText's command line, which wins
    (moekit.worker.process.drop_env_overrides_of)."""
    path = tmp_path_factory.mktemp("jax_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(JAX_CACHE_ENV, str(path))
        yield path


def compose(experiment: str | None = None, overrides: Sequence[str] = ()) -> Config:
    """The composed, typed config of an experiment plus overrides (through Hydra's compose API)."""
    ov = ([f"experiment={experiment}"] if experiment else []) + list(overrides)
    return _compose(ov)


def moekit(*args: str, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path | None = None):
    """Run the installed `moekit` command line as a user would; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "moekit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=(os.environ | (env or {})),
        cwd=cwd or REPO,
    )


def losses(run_dir: Path, name: str = "metrics.jsonl") -> list[float]:
    return [json.loads(line)["learning/loss"] for line in (run_dir / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`moekit train experiment=smoke` as the README gives it (10 steps, a new directory under run.base_dir),
    shared by the CPU training and integrity tests (the plain run the others are measured against)."""
    base = tmp_path_factory.mktemp("plain")
    return base, moekit("train", "experiment=smoke", f"run.base_dir={base}")


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One real 2-run sweep (moe=ragged_dot,dense; 10 steps: run 0 is experiment=smoke's own config), shared by
    the multirun, report and integrity tests."""
    folder = tmp_path_factory.mktemp("sweep") / "smoke"
    proc = moekit("train", "-m", "experiment=smoke", "train.steps=10", "moe=ragged_dot,dense", f"run.dir={folder}")
    return folder, proc


@pytest.fixture(scope="session")
def profiled_smoke(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The documented command: `moekit train experiment=smoke profile=on` (traces steps 3..5 of 10), shared by the
    profiling and integrity tests."""
    run = tmp_path_factory.mktemp("profile") / "one"
    return run, moekit("train", "experiment=smoke", "profile=on", f"run.dir={run}", timeout=1200)


VERIFY_STEPS = 4


@pytest.fixture(scope="session")
def dense_vs_grouped(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`moekit verify experiment=smoke --candidate moe=dense --steps 4`: the kernel-path candidate (dense masked
    compute) against the default grouped GEMM (ragged_dot), both fp32. Its reference/ and candidate-1/ runs are
    also test_optimizations' ragged_dot and dense runs."""
    out = tmp_path_factory.mktemp("verify") / "dense"
    proc = moekit(
        "verify", "experiment=smoke", "--candidate", "moe=dense", "--steps", str(VERIFY_STEPS), "--out", str(out)
    )
    return out, proc


# The local 2-process run the Slurm layouts must reproduce: fp32 (reduction order is not a wiring difference),
# 1 sequence per device, 6 steps. test_train_cpu compares it with one process.
TWO_PROCESS_OVERRIDES = ("precision=fp32", "train.steps=6", "train.per_device_batch_size=1")


@pytest.fixture(scope="session")
def local_two_process_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One real `moekit train experiment=smoke` with 2 local processes (FSDP=2), shared by the tests."""
    run = tmp_path_factory.mktemp("local2") / "two"
    port = f"cluster.coordinator_port={free_port()}"  # other runs on this machine may hold the default
    proc = moekit(
        "train", "experiment=smoke", *TWO_PROCESS_OVERRIDES, "cluster.processes_per_node=2", port, f"run.dir={run}"
    )
    return run, proc


def start_moekit(command: Sequence[str], run: Path) -> subprocess.Popen:
    """`moekit <command> run.dir=<run>` in a session of its own (signals reach moekit only), output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "moekit", *command, f"run.dir={run}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_until(proc: subprocess.Popen, ready: Callable[[], bool], what: str, timeout_s: float = 400) -> None:
    """Poll `ready` while the run `proc` lives; fail the test (and SIGKILL the run's session) if it ends first or
    `what` does not come within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}:\n{proc.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"not {what} within {timeout_s} s")
        time.sleep(0.05)


def _stopped(pid: int) -> bool:
    """Whether every thread of process `pid` is stopped (or the process is gone)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return all((t / "stat").read_text().split(") ", 1)[1][0] in "tTZX" for t in tasks)
    except (OSError, IndexError):
        return True


def pending(pid: int, sig: int) -> bool:
    """Whether signal `sig` waits for process `pid` (sent to the process, not yet taken: a stopped process keeps
    it until SIGCONT); true once the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("ShdPnd:", "SigPnd:"))]
    return any(m >> (sig - 1) & 1 for m in masks)


@contextlib.contextmanager
def frozen(pids: Iterable[int]) -> Iterator[None]:
    """SIGSTOP the processes `pids` and wait until all their threads stopped; SIGCONT them on the way out. What a
    frozen run has written (records, events, committed checkpoints) cannot change while the caller reads it and
    sends a stop, so a stop lands exactly in the state read: a slow machine changes when, never where."""
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 60
    while not all(_stopped(p) for p in pids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {pids} did not stop within 60 s")
        time.sleep(0.002)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _stamps(events: Path) -> tuple[int, bool]:
    """From a training process's events file: how many steps it stamped done, and whether it stopped for a
    preemption notice (observe/events.py)."""
    ends, stopped = 0, False
    for line in events.read_text().splitlines() if events.is_file() else []:
        try:
            kind = json.loads(line)["event"]
        except (ValueError, KeyError, TypeError):
            continue
        ends, stopped = ends + (kind == "step_end"), stopped or kind == "stop"
    return ends, stopped


def _caught(logs: Sequence[Path]) -> bool:
    """Whether JAX's SIGTERM notifier has taken the signal in every training process (it writes "SIGTERM caught"
    to the process's log)."""
    return all(p.is_file() and "SIGTERM caught" in p.read_text(errors="replace") for p in logs)


def hold_steps_until_stopped(proc: subprocess.Popen, pids: Iterable[int], run: Path, pause_s: float = 1.0) -> None:
    """After a SIGTERM reached the workers `pids` of the run in `run`: keep them frozen `pause_s` after each step
    they finish, until JAX's notifier took the signal in each of them, or process 0 stopped for the notice, or they
    ended. The notifier polls once a second on wall-clock time (a SIGTERM sent right after step 10 of a loaded
    2-core machine was acted on at step 39, 73 s later, on 2026-12-05); held like this it takes the signal within
    a step or two on any machine. Then the workers run free: the sync step that follows needs CPU, not time, and
    a step held longer would only be a slow step in the records the measurement tests read."""
    pids = list(pids)
    logs = [run / "maxtext.log", *(run / f"maxtext.{rank}.log" for rank in range(1, len(pids)))]
    events = run / "events.jsonl"
    seen = _stamps(events)[0]
    while proc.poll() is None:
        with frozen(pids):
            ends, stopped = _stamps(events)
            if stopped or all(_gone(p) for p in pids) or _caught(logs):
                return
            if ends > seen:
                seen = ends
                time.sleep(pause_s)
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] in "ZX"
    except (OSError, IndexError):
        return True


def free_port() -> int:
    """A TCP port nothing listens on right now (for a coordinator)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def slurm():
    """A one-host Slurm cluster (tests/slurm_cluster.py) for the whole session; skipped where it cannot run."""
    import slurm_cluster

    reason = slurm_cluster.unavailable()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.Cluster()
    cluster.start()
    yield cluster
    cluster.stop()


def mount_tmpfs(path: Path, size: str) -> None:
    """A tmpfs of `size` at `path` (the caller unmounts it); skips the test where mounting needs root."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip()}); root is needed to test a full disk")


def recorded_steps(path: Path) -> list[int]:
    """The steps of a metrics file being written: absent files and lines not yet whole count as nothing."""
    out = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            out.append(int(json.loads(line)["step"]))
        except (ValueError, KeyError):
            continue
    return out


def dependency_closure(roots: Sequence[str]) -> set[str]:
    """The distributions `roots` depend on (no extras; markers read for this host), transitively, canonical names,
    from the metadata installed here."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def live_workers(run: Path) -> dict[int, int]:
    """moekit worker processes of a run directory still alive (not zombies): JAX process id -> pid."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(") ", 1)[1][0]
            env = dict(
                e.split("=", 1)
                for e in (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in e
            )
        except (OSError, IndexError):
            continue
        if "moekit.worker" in cmd and str(run) in cmd and state != "Z":
            found[int(env.get("JAX_PROCESS_ID", env.get("MOEKIT_PROCESS_ID", "0")))] = int(proc.name)
    return found
