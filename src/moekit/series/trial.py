"""Run one `moekit train` as a child process and read back what it measured (effects): the one runner of a series.

`moekit train -m` (series/sweep.py), `moekit tune` and the benchmark runners run each configuration through `run`:
a real `moekit train` in its own run directory, so every number stays traceable to a run directory with its
config, command and versions, a run that crashes or hangs cannot take the series down with it, and every run of
every series gets the same record (status, failure class, summary numbers).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import bounded, failures, parse
from moekit.base.errors import MoekitError
from moekit.observe.reports import comparable
from moekit.rundir import records
from moekit.series import tuning

# MaxText's compile-time memory estimate line (max_utils.print_compiled_memory_stats).
JSON_MAX_BYTES = 64 * bounded.MiB  # a run record is far smaller
_ESTIMATE = re.compile(r"\[train\] Total estimated memory size: ([\d.]+) GB")


def run(
    overrides: list[str],
    run_dir: Path,
    timeout_s: float | None,
    env: dict[str, str] | None = None,
    echo: bool = False,
) -> dict[str, Any]:
    """Train once; returns status (ok|oom|timeout|failed), the summary numbers, peak memory and losses.

    The child's output goes to `<run_dir>.out`, and with `echo` also to this process's standard output as it comes.
    `timeout_s` None waits as long as the run takes.
    """
    run_dir = rundir.absolute(run_dir, Path.cwd())  # as `moekit train` passes it to MaxText (see _reap)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    console = run_dir.parent / f"{run_dir.name}.out"  # beside it: moekit train wants run.dir new or its own
    argv = [sys.executable, "-m", "moekit", "train", *overrides, f"run.dir={run_dir}"]
    start = time.monotonic()
    returncode, timed_out = _train(argv, run_dir, console, timeout_s, env, echo)
    wall = time.monotonic() - start
    log = _tail(run_dir / rundir.LOG) + _tail(console)
    manifest = records.try_manifest(run_dir)
    failure = failures.of_child(
        returncode, timeout_s, timed_out, manifest.failure if manifest else None, _tail(console)
    )
    result: dict[str, Any] = {
        "overrides": overrides,
        "run_dir": str(run_dir),
        "status": tuning.classify(failure),
        "returncode": returncode,
        "wall_s": round(wall, 1),
    }
    result |= _measured(run_dir, manifest)
    result["console"] = str(console)
    if failure is not None:
        result["error"] = next((ln.strip()[:300] for ln in reversed(log.splitlines()) if ln.strip()), "")
        result["failure"] = {"class": failure.name, "title": failure.title, "evidence": failure.evidence}
        result["failure"]["help"] = failure.doc
    return result


def _train(
    argv: list[str],
    run_dir: Path,
    console: Path,
    timeout_s: float | None,
    env: dict[str, str] | None,
    echo: bool,
) -> tuple[int | None, bool]:
    """Run the child `moekit train` to its end or its timeout; returns its exit status and whether it timed out.

    On a timeout, and also when this process is interrupted, the child gets an interrupt (then a kill) and the
    MaxText workers it left are reaped, so that no worker keeps holding the GPU.
    """
    timed_out = False
    with open(console, "w") as out:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if echo else out,
            stderr=subprocess.STDOUT,
            env=os.environ | (env or {}),
            start_new_session=True,
        )
        pump = threading.Thread(target=_tee, args=(proc.stdout, out), daemon=True) if echo else None
        if pump:
            pump.start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also when this process is interrupted: never leave a worker holding the GPU
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # moekit train stops its MaxText processes on an interrupt
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            _reap(run_dir)
            if pump:
                pump.join(timeout=10)
    return proc.returncode, timed_out


def _measured(run_dir: Path, manifest: records.Manifest | None) -> dict[str, Any]:
    """What the run directory says the run measured: the steady-state numbers (from the steps logged when moekit
    did not summarize), the host's load from others, peak memory and MaxText's compile-time estimate."""
    result: dict[str, Any] = {}
    recorded = records.read_summary(run_dir) or records.Summary()
    stats, provenance = recorded.stats, recorded.provenance or {}
    if not recorded.steady and (run_dir / rundir.METRICS).is_file():
        stats = _summarize_partial(run_dir)  # stopped before moekit summarized: use the steps it logged
    if stats.get("step_time_s"):  # enough steady steps for a number (observe/runs/steady.py)
        result |= {
            "steps": stats["steps"],
            "step_time_s": stats["step_time_s"]["median"],
            "tflops_per_device": stats.get("tflops_per_device"),
            "tokens_per_s_per_device": stats.get("tokens_per_s_per_device"),
            "mfu_bf16": (stats.get("mfu") or {}).get("bf16"),
            "losses": stats.get("losses", []),
            "versions": provenance.get("versions"),
            "date": provenance.get("date"),
            "devices": recorded.devices,
            "spread": comparable.Measured.of(stats, None).spread,
        }
    if manifest is not None and manifest.host_load:
        result["others_share"] = manifest.host_load.get("others_share")
    peak = _json(run_dir / rundir.PEAK_MEMORY)
    if peak.get("peak_bytes_in_use"):
        result["peak_memory_gib"] = round(peak["peak_bytes_in_use"] / 2**30, 2)
        result["memory_limit_gib"] = round(peak.get("bytes_limit", 0) / 2**30, 2)
    found = _ESTIMATE.findall(_tail(run_dir / rundir.LOG, 2_000_000))
    if found:
        result["compiled_estimate_gib"] = round(float(found[-1]) * 1.0, 2)  # MaxText's "GB" are GiB (2**30)
    return result


def _summarize_partial(run_dir: Path) -> dict[str, Any]:
    from moekit.observe.runs import metrics, rundata

    try:
        cfg = records.read_config(run_dir) or {}
        return rundata.summarize(metrics.read(run_dir / rundir.METRICS), cfg, records.try_manifest(run_dir))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, metrics.MetricsError, records.Unreadable):
        return {}


def _tee(stream, out) -> None:
    """Copy the child's output to its console file and to standard output, line by line."""
    for line in iter(stream.readline, b""):
        text = line.decode("utf8", errors="replace")
        out.write(text)
        out.flush()
        sys.stdout.write(text)
        sys.stdout.flush()


def _reap(run_dir: Path) -> None:
    """Kill what this trial started and left behind (a MaxText worker runs in its own session)."""
    mark = f"base_output_directory={run_dir}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "cmdline").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _tail(path: Path, size: int = 20_000) -> str:
    try:
        with bounded.open_regular(path, None, "log") as fh:  # one handle: its size from fstat, then its tail
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - size))
            return fh.read(size).decode("utf8", errors="replace")
    except (OSError, MoekitError):
        return ""


def _json(path: Path) -> dict[str, Any]:
    try:
        data = parse.json_file(path, JSON_MAX_BYTES, "run record", finite=False)
    except (OSError, MoekitError):
        return {}
    return data if isinstance(data, dict) else {}
