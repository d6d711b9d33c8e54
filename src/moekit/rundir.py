"""Run directories: one per run, never overwritten; every file written atomically."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from moekit.errors import MoekitError

CONFIG = "config.yaml"  # resolved moekit config
JOB = "job.json"  # MaxText command, XLA flags, env, per-process rendezvous env
VERSIONS = "versions.json"  # python, jax, jaxlib, maxtext, moekit, host
METRICS = "metrics.jsonl"  # MaxText's per-step metrics (metrics_file=)
LOG = "maxtext.log"  # process 0's output (others: maxtext.<rank>.log)
SUMMARY = "summary.json"  # steady-state summary with provenance
MANIFEST = "manifest.json"  # status of the run: ok | failed (with class) | running


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


FULL = (errno.ENOSPC, errno.EDQUOT)


def write_record(path: Path, data: Any) -> None:
    """write_json, and on a full disk a rewrite in place: the blocks of the record it replaces are reused, so the
    outcome of a run still lands when there is no room for a second copy (atomicity is what is given up)."""
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    try:
        write_atomic(path, text)
    except OSError as exc:
        if exc.errno not in FULL or not path.is_file():
            raise
        with open(path, "r+", encoding="utf8") as fh:
            fh.truncate(0)
            fh.write(text)


class RecordError(MoekitError):
    """The run directory cannot take the run's records."""


@contextmanager
def records_before_launch(run: Path) -> Iterator[None]:
    """Writing config, command and manifest before the processes start: a failure stops the run, cleanly."""
    try:
        yield
    except OSError as exc:
        full = " (the disk is full)" if exc.errno in FULL else ""
        raise RecordError(
            f"cannot write the run's records to {run}: {exc.strerror}{full}; nothing was launched. "
            "Fix: free space there, or run.dir=<a folder with space> (or leave run.dir unset)."
        ) from None


def write_yaml(path: Path, data: Any) -> None:
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))


def new_run_dir(base: Path, experiment: str, now: datetime) -> Path:
    """<base>/<experiment>/<timestamp>[-N]: created exclusively, so two runs never share one."""
    parent = base / experiment
    parent.mkdir(parents=True, exist_ok=True)
    stamp = now.strftime("%Y-%m-%d_%H-%M-%S")
    for n in range(1000):
        candidate = parent / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run directory under {parent}")
