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

from moekit.base import bounded, redact
from moekit.base.errors import MoekitError

CONFIG = "config.yaml"  # resolved moekit config
JOB = "job.json"  # MaxText command, XLA flags, env, per-process rendezvous env
VERSIONS = "versions.json"  # python, jax, jaxlib, maxtext, moekit, host
METRICS = "metrics.jsonl"  # MaxText's per-step metrics (metrics_file=)
LOG = "maxtext.log"  # process 0's output (others: maxtext.<rank>.log)
SUMMARY = "summary.json"  # steady-state summary with provenance
MANIFEST = "manifest.json"  # status of the run: ok | failed (with class) | running
PROFILE = "profile.json"  # step-time breakdown from the trace (profile=on)
PROFILE_DIR = "profile"  # raw traces (trace/process_<i>/) and the train step's HLO dump (hlo/), profile=on
PROFILE_DIR_ENV = "MOEKIT_PROFILE_DIR"  # tells each process (moekit.worker) where that folder is
PEAK_MEMORY = "peak_memory.json"  # peak device memory, read by trials when a memory probe wrote it
LAUNCHERS = "launchers"  # records of the other moekit launchers of a multi-launcher job (launchers/<first id>/)


def absolute(path: str | Path, cwd: Path) -> Path:
    """`path` as an absolute path, a relative one taken from `cwd` (MaxText's Orbax checkpointer refuses relative
    paths, and a process started elsewhere must find the same directory). Symbolic links are kept as given."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(os.path.normpath(cwd / p))


def umask() -> int:
    """This process's file mode creation mask (read without changing it for long)."""
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file. The file gets the mode any new
    file gets here (0644 under the usual umask; mkstemp alone would leave 0600), and no URL password: every record
    moekit writes passes through redact_urls."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "w", encoding="utf8") as fh:
            fh.write(redact.redact_urls(text))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class OutsideRunDir(MoekitError):
    """A folder moekit writes into under a run directory leads elsewhere through a symbolic link."""


def confined(run: Path, path: Path | str) -> Path:
    """`path` (absolute, or relative to `run`), a place under the run directory `run` that moekit writes to or moves
    things in, once it stays inside `run` (no `..` or absolute part leads out) and no folder between them, nor
    `path` itself, is a symbolic link: a link planted in a run directory (at <run.name>/checkpoints, attempts/, a
    log) must not carry its logs, metrics or checkpoints elsewhere. The one rule of every such path; raises
    OutsideRunDir naming the link, or the path that leaves."""
    full = Path(os.path.normpath(run / path))
    if not full.is_relative_to(os.path.normpath(run)) or full == Path(os.path.normpath(run)):
        raise OutsideRunDir(
            f"{bounded.shown(path)} is not inside the run directory {bounded.shown(run)}; moekit writes only inside "
            "it, so it stopped before writing anything.\n  fix: name a place inside the run directory"
        )
    here = Path(os.path.normpath(run))
    for part in full.relative_to(here).parts:
        here = here / part
        if here.is_symlink():
            raise OutsideRunDir(
                f"{bounded.shown(here)} is a symbolic link (to {bounded.shown(os.readlink(here))}); moekit writes only "
                f"inside the run directory {bounded.shown(run)}, so it stopped before moving or writing anything "
                f"there.\n  fix: remove the link (rm {bounded.shown(here)}); move what it points to back into the "
                "run directory first if it belongs to this run"
            )
    return full


MAXTEXT_OUTPUTS = ("", "checkpoints", "tensorboard", "metrics")
"""What MaxText writes under <run dir>/<run.name>/ (base_output_directory/run_name): its checkpoints (saved and
restored), tensorboard events (and xplane traces), metrics."""


def maxtext_outputs(run: Path, run_name: str) -> list[Path]:
    """Every folder MaxText writes under the run directory `run` for `run_name`, and moekit's profile folder, each
    checked by confined(): a link planted at <run>/<run.name>/checkpoints must not carry restores and saves out."""
    return [confined(run, Path(run_name) / sub if sub else Path(run_name)) for sub in MAXTEXT_OUTPUTS] + [
        confined(run, PROFILE_DIR)
    ]


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON, written atomically."""
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
            fh.write(redact.redact_urls(text))


class RecordError(MoekitError):
    """The run directory cannot take the run's records."""


@contextmanager
def records_before_launch(run: Path) -> Iterator[None]:
    """Writing config, command and manifest before the processes start: a failure stops the run, cleanly."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in FULL:
            raise RecordError(
                f"cannot write the run's records to {run}: {exc.strerror}; nothing was launched. "
                "Fix: make it writable, or run.dir=<a folder you can write to> (or leave run.dir unset)."
            ) from None
        cause, free = full_cause(run)
        resumes = (run / MANIFEST).is_file()
        again = (
            f"then run the same command again (with run.dir={run}): it resumes this run from its checkpoints"
            if resumes
            else "then run the same command again"
        )
        raise RecordError(
            f"cannot write the run's records to {run}: {exc.strerror} ({cause}); nothing was launched. "
            f"Fix: {free}, {again}."
        ) from None


def full_cause(path: Path) -> tuple[str, str]:
    """(why writes under `path` fail with ENOSPC, what frees room): no inodes left (the file system holds as many
    files as it can, though bytes remain), or no bytes left. statvfs of `path` or the nearest folder above it."""
    here = path
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        st = os.statvfs(here)
    except OSError:
        return "the disk is full", "free space there"
    if st.f_files and st.f_favail == 0:
        free_bytes = st.f_bavail * st.f_frsize / 1e9
        return (
            f"no inodes left: the file system holds as many files as it can, with {free_bytes:.1f} GB still free",
            f"delete files there (many small ones count most: old runs, caches; `df -i {here}` shows the inodes)",
        )
    return "the disk is full", f"free space there (`df -h {here}`)"


def write_yaml(path: Path, data: Any) -> None:
    """`data` as YAML in the given key order, written atomically."""
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))


def for_launcher(run: Path, first_process: int) -> Path:
    """Where one launcher of a job keeps its records when every launcher was given the same run.dir.

    A job started by several moekits (one per Slurm task or node) on a shared filesystem must not have them
    write one manifest: the launcher of process 0 owns `run`; the one whose first process is k keeps its
    logs, metrics and manifest in `run`/launchers/k.
    """
    return run if first_process == 0 else run / LAUNCHERS / str(first_process)


def lock_held(lock: Path) -> bool:
    """Whether a process holds the flock on `lock` now (a missing file: no). Probes without taking it for long
    and without creating the file; the kernel drops a dead process's lock, so a killed run reads as not held."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


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
