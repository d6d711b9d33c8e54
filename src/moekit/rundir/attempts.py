"""Reusing a run directory (run.dir=PATH): check it can be resumed, lock it, keep each attempt's outputs.

MaxText resumes by itself from the latest checkpoint under <run.dir>/<run_name>/checkpoints. What it
does not do is keep the run's metrics whole: it appends to metrics_file (truncating it at step 0), so an
attempt killed after its last checkpoint leaves steps that the next attempt runs again. moekit moves
each earlier attempt's metrics and logs to attempts/<n>/ before relaunching, and afterwards merges
them into one metrics file with one record per step (a later attempt replaces the steps it re-ran).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import bounded, parse
from moekit.base.errors import MoekitError
from moekit.rundir import records

ATTEMPTS = "attempts"
METRICS_MAX_BYTES = 512 * bounded.MiB  # a metrics file: about a million steps of MaxText's records
LOCK = ".moekit.lock"
# Top-level outputs of one attempt (per process: metrics.1.jsonl, maxtext.1.log, ...).
ATTEMPT_FILES = ("metrics*.jsonl", "events*.jsonl", "routing*.jsonl", "maxtext*.log", "stacks*.txt", "stop.json")
# Keys that may differ between attempts of one run.
# A moved run directory resumes too; the coordinator port may be held by something else when the run is relaunched;
# the routing load's sampling changes what is recorded, not what is trained.
MAY_DIFFER = ("run.base_dir", "run.dir", "cluster.coordinator_port", "run.routing_every")


class RunDirError(MoekitError):
    """run.dir cannot be used for this run."""


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= _flat(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: node}


def check_reusable(run: Path, config: Mapping[str, Any], fix_new: str | None = None) -> records.Manifest | None:
    """Raise RunDirError unless `run` is new, empty or an unfinished run of the same config.

    Returns the previous manifest (None for a new directory). Reads only: nothing is written.
    `config` is the resolved config as config.yaml records it (redacted); `fix_new` says how to get a new one.
    """
    fix_new = fix_new or "leave run.dir unset (a new directory per run) or choose a new run.dir"
    if run.exists() and not run.is_dir():
        raise RunDirError(f"run.dir={run} is a file, not a directory; {fix_new}.")
    if not run.is_dir() or not [p for p in run.iterdir() if p.name not in (LOCK, rundir.LAUNCHERS)]:
        return None
    try:
        manifest = records.read_manifest(run)
    except records.Unreadable as exc:
        raise RunDirError(
            f"{exc.path} is corrupt (not a moekit manifest), so run.dir={run} cannot be resumed; "
            f"nothing was written to it. Fix: {fix_new}."
        ) from None
    if manifest is None:
        raise RunDirError(
            f"run.dir={run} is not empty and is not a moekit run directory (no {rundir.MANIFEST}); "
            f"nothing was written to it. Fix: {fix_new}."
        )
    if manifest.status == records.OK:
        raise RunDirError(
            f"run.dir={run} holds a finished run (status ok); it is never overwritten. Fix: {fix_new}, "
            "or `moekit report` it."
        )
    try:
        before = records.read_config(run)
    except records.Unreadable:
        before = None
    if not isinstance(before, Mapping):
        raise RunDirError(f"run.dir={run} has no readable {rundir.CONFIG}, so it cannot be resumed. Fix: {fix_new}.")
    old, new = _flat(before), _flat(config)
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in MAY_DIFFER)
    if differ:
        shown = "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in differ[:8])
        raise RunDirError(
            f"run.dir={run} holds an unfinished run of a different configuration ({shown}); its checkpoints "
            f"would not fit. Fix: resume with the overrides it was started with ({manifest.overrides}), "
            f"or {fix_new}."
        )
    return manifest


@contextmanager
def locked(run: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run directory; the kernel drops it when this process dies."""
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(
                f"run.dir={run} is in use by another `moekit train` right now; wait for it to end, "
                "or choose another run.dir."
            ) from None
        yield
    finally:
        os.close(fd)


def _attempt_dirs(run: Path) -> list[Path]:
    folder = rundir.confined(run, run / ATTEMPTS)
    found = [p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()] if folder.is_dir() else []
    return sorted(found, key=lambda p: int(p.name))


def attempt_dirs(run: Path) -> list[Path]:
    """attempts/<n>/ of the run directory's earlier attempts, oldest first."""
    return _attempt_dirs(run)


def set_aside(run: Path) -> int:
    """Move a previous attempt's metrics and logs to attempts/<n>/; return this attempt's number (1 = first)."""
    files = sorted({p for pattern in ATTEMPT_FILES for p in run.glob(pattern) if p.is_file()})
    done = len(_attempt_dirs(run))
    if not files:
        return done + 1
    target = rundir.confined(run, run / ATTEMPTS / str(done + 1))
    target.mkdir(parents=True)
    for p in files:
        p.rename(target / p.name)
    return done + 2


def latest_checkpoint(run: Path, run_name: str) -> int | None:
    """Step of the newest committed Orbax checkpoint (unfinished saves have non-numeric names)."""
    folder = rundir.confined(run, Path(run_name) / "checkpoints")  # a link there would resume from elsewhere
    steps = [int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()] if folder.is_dir() else []
    return max(steps, default=None)


def _records(path: Path) -> list[dict]:
    """Per-step records of one file; a line cut off by a kill (or otherwise unreadable) is skipped."""
    out = []
    try:
        with bounded.lines(path, METRICS_MAX_BYTES, "metrics file") as lines:  # streamed, one line at a time
            for line in lines:
                try:
                    row = parse.json_line(line, str(path), finite=False)  # a NaN loss is kept: it is measured
                    int(row["step"])
                except (ValueError, KeyError, TypeError, OverflowError):  # Infinity: OverflowError
                    continue
                out.append(row)
    except (OSError, bounded.TooLarge):
        return out
    return out


ATTEMPT_KEY = "moekit/attempt"  # added to each merged record: the attempt whose record it is


def merge_metrics(run: Path) -> list[str]:
    """Rewrite every metrics*.jsonl of the run as the union of all attempts, one record per step.

    An attempt that starts at step s (it resumed from the checkpoint before s) replaces every earlier
    record from s on. Each record gets ATTEMPT_KEY, the attempt that wrote it (attempts/<n>/ holds attempt n's
    files, the run directory the last one's), so the summary can judge it by that attempt's events. Returns the
    names of the files written.
    """
    attempts = _attempt_dirs(run)
    if not attempts:
        return []
    current = int(attempts[-1].name) + 1
    names = sorted({p.name for d in [*attempts, run] for p in d.glob("metrics*.jsonl")})
    for name in names:
        merged: dict[int, dict] = {}
        for d in [*attempts, run]:
            rows = _records(d / name)
            if not rows:
                continue
            n = current if d == run else int(d.name)
            first = min(int(r["step"]) for r in rows)
            merged = {s: r for s, r in merged.items() if s < first}
            for r in rows:
                merged[int(r["step"])] = {**r, ATTEMPT_KEY: r.get(ATTEMPT_KEY, n)}  # a merged file keeps its own
        rundir.write_atomic(run / name, "".join(json.dumps(merged[s]) + "\n" for s in sorted(merged)))
    return names
