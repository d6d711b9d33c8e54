"""Start the processes of one job on this host and supervise them (effects at the edge).

Process 0's output is streamed line by line to a callback (progress) and to its log; the others go
to their own logs. When any process fails, the rest are stopped: a JAX job cannot go on without one
of its members, and a process left waiting at a collective would hang forever.

A pump never dies while its process lives: when its log cannot be written (disk full) or the callback fails
(stdout closed), it keeps reading, so the process never blocks on a full pipe. A full disk can still hang the
process itself (MaxText 0.2.5 waits forever once its TensorBoard writer thread died of ENOSPC), so a group
whose log has hit a full disk is given `full_disk_grace_s` to end on its own, then stopped.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from moekit.config.schema import Cluster
from moekit.run import preemption, watchdog


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process to start: its argv, its whole environment and the file its output goes to."""

    argv: Sequence[str]
    env: Mapping[str, str]
    log: Path


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the group ended: each process's exit status, the first to fail, wall time (s), what could not be logged,
    and whether the watchdog stopped it."""

    returncodes: list[int]
    failed_rank: int | None
    """The first process that exited non-zero (None when all succeeded)."""
    wall_s: float
    log_errors: list[str | None] = field(default_factory=list)
    """Per process: why its log could not be written in full (None: it was)."""
    unlogged: list[list[str]] = field(default_factory=list)
    """Per process: the last lines that did not reach its log (kept in memory instead)."""
    ended_at: float | None = None
    """time.monotonic() when the last process had exited."""
    hang: str | None = None
    """Why the watchdog stopped the group (None: it did not)."""
    stacks: list[str] = field(default_factory=list)
    """Files the processes wrote their Python stacks to before a watchdog stop."""


class LaunchError(Exception):
    """A process could not be started (its environment or arguments refused by the kernel or Python)."""

    def __init__(self, rank: int, reason: str):
        super().__init__(f"process {rank} could not be started: {reason}")
        self.rank = rank


KEEP_UNLOGGED = 200


class _Pump:
    """Copy one process's output to its log (and process 0's to a callback), surviving a failing log or callback."""

    def __init__(self, stream, log: Path, on_line: Callable[[str], None] | None, scrub: Callable[[str], str] | None):
        self.stream, self.log, self.on_line, self.scrub = stream, log, on_line, scrub
        self.error: str | None = None
        self.disk_full_at: float | None = None  # when a write to the log failed for lack of space
        self.unlogged: deque[str] = deque(maxlen=KEEP_UNLOGGED)

    def __call__(self) -> None:
        try:
            fh = open(self.log, "a", encoding="utf8", errors="replace")
        except OSError as exc:
            fh, self.error = None, f"cannot open {self.log}: {exc}"
        try:
            for raw in self.stream:
                line = raw.decode("utf8", errors="replace") if isinstance(raw, bytes) else raw
                if self.scrub is not None:
                    line = self.scrub(line)
                fh = self._write(fh, line)
                if self.on_line is not None:
                    try:
                        self.on_line(line.rstrip("\n"))
                    except Exception:  # stdout closed or full: progress is optional, the run is not
                        self.on_line = None
        finally:
            if fh is not None:
                try:
                    fh.close()
                except OSError as exc:
                    self.error = self.error or f"cannot write {self.log}: {exc}"

    def _write(self, fh, line: str):
        if fh is not None:
            try:
                fh.write(line)
                fh.flush()
                return fh
            except OSError as exc:  # ENOSPC, EDQUOT, EIO: stop writing, keep reading
                self.error = f"cannot write {self.log}: {exc}"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    self.disk_full_at = time.monotonic()
                try:
                    fh.close()
                except OSError:
                    pass
        self.unlogged.append(line.rstrip("\n"))
        return None


def run(
    specs: Sequence[ProcessSpec],
    on_line: Callable[[str], None] | None = None,
    grace_s: float = 10.0,
    scrub: Callable[[str], str] | None = None,
    full_disk_grace_s: float = 30.0,
    notice: preemption.Notice | None = None,
    stop_grace_s: float = Cluster.model_fields["signal_grace_s"].default,
    watch: watchdog.Watchdog | None = None,
    stack_files: Sequence[Path] = (),
) -> Outcome:
    """Run every process to completion; stop the group as soon as one fails, or `full_disk_grace_s` after a log
    could not be written for lack of space (that process then counts as the failed one).

    `scrub` rewrites each output line before it reaches a log or `on_line` (secrets never land on disk).
    Once `notice` holds a stop request, every process gets SIGTERM and `stop_grace_s` to save and exit (then
    SIGKILL). When `watch` finds the steps stalled, the processes write their stacks to `stack_files` and
    are killed.
    """
    start = time.monotonic()
    procs: list[subprocess.Popen] = []
    pumps: list[_Pump] = []
    threads: list[threading.Thread] = []
    try:
        for rank, spec in enumerate(specs):
            try:
                proc = subprocess.Popen(
                    list(spec.argv),
                    env=dict(spec.env),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group, so a stop reaches its children too
                )
            except (OSError, ValueError) as exc:  # E2BIG (Argument list too long), a name Python refuses, ...
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise LaunchError(rank, reason) from None
            procs.append(proc)
            pump = _Pump(proc.stdout, spec.log, on_line if rank == 0 else None, scrub)
            t = threading.Thread(target=pump, daemon=True)
            t.start()
            pumps.append(pump)
            threads.append(t)
        failed: int | None = None
        forwarded: float | None = None
        hang: str | None = None
        stacks: list[Path] = []
        while True:
            codes = [p.poll() for p in procs]
            if notice is not None and notice.signum is not None and hang is None:
                if forwarded is None:
                    forwarded = time.monotonic()
                    for p in procs:
                        if p.poll() is None:
                            _signal(p, signal.SIGTERM)
                elif notice.hard or time.monotonic() - forwarded > stop_grace_s:
                    for p in procs:
                        _signal(p, signal.SIGKILL)
            if watch is not None and forwarded is None and failed is None and hang is None:
                hang = watch.stalled()
                if hang is not None:
                    stacks = watchdog.dump_stacks([p.pid for p in procs if p.poll() is None], stack_files)
                    for p in procs:  # not SIGTERM: that would start a preemption save inside the stuck collective
                        _signal(p, signal.SIGKILL)
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad and failed is None:
                failed = bad[0]
                if forwarded is None:  # while stopping, the others still get their grace to save
                    _stop(procs, grace_s)
            full = [i for i, p in enumerate(pumps) if p.disk_full_at is not None and codes[i] is None]
            if full and failed is None and time.monotonic() - pumps[full[0]].disk_full_at > full_disk_grace_s:
                failed = full[0]
                _stop(procs, grace_s)
            if all(c is not None for c in codes):
                break
            time.sleep(0.2)
    except BaseException:
        _stop(procs, grace_s)
        raise
    finally:
        for t in threads:
            t.join(timeout=5)
    ended = time.monotonic()
    watchdog.remove_unused(stack_files)
    return Outcome(
        [p.returncode for p in procs],
        failed,
        ended - start,
        [p.error for p in pumps],
        [list(p.unlogged) for p in pumps],
        ended,
        hang,
        [str(f) for f in stacks],
    )


def _stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    for p in procs:
        if p.poll() is None:
            _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(p, signal.SIGKILL)
            p.wait()


def _signal(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass
