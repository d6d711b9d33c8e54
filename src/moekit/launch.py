"""Start the processes of one job on this host and supervise them (effects at the edge).

Process 0's output is streamed line by line to a callback (progress) and to its log; the others go
to their own logs. When any process fails, the rest are stopped: a JAX job cannot go on without one
of its members, and a process left waiting at a collective would hang forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    argv: Sequence[str]
    env: Mapping[str, str]
    log: Path


@dataclass(frozen=True, slots=True)
class Outcome:
    returncodes: list[int]
    failed_rank: int | None
    """The first process that exited non-zero (None when all succeeded)."""
    wall_s: float


def _pump(stream, log: Path, on_line: Callable[[str], None] | None, scrub: Callable[[str], str] | None) -> None:
    with open(log, "a", encoding="utf8", errors="replace") as fh:
        for raw in stream:
            line = raw.decode("utf8", errors="replace") if isinstance(raw, bytes) else raw
            if scrub is not None:
                line = scrub(line)
            fh.write(line)
            fh.flush()
            if on_line is not None:
                on_line(line.rstrip("\n"))


def run(
    specs: Sequence[ProcessSpec],
    on_line: Callable[[str], None] | None = None,
    grace_s: float = 10.0,
    scrub: Callable[[str], str] | None = None,
) -> Outcome:
    """Run every process to completion; stop the group as soon as one fails.

    `scrub` rewrites each output line before it reaches a log or `on_line` (secrets never land on disk).
    """
    start = time.monotonic()
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    try:
        for rank, spec in enumerate(specs):
            proc = subprocess.Popen(
                list(spec.argv),
                env=dict(spec.env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, so a stop reaches its children too
            )
            procs.append(proc)
            t = threading.Thread(
                target=_pump, args=(proc.stdout, spec.log, on_line if rank == 0 else None, scrub), daemon=True
            )
            t.start()
            pumps.append(t)
        failed: int | None = None
        while True:
            codes = [p.poll() for p in procs]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad and failed is None:
                failed = bad[0]
                _stop(procs, grace_s)
            if all(c is not None for c in codes):
                break
            time.sleep(0.2)
    except BaseException:
        _stop(procs, grace_s)
        raise
    finally:
        for t in pumps:
            t.join(timeout=5)
    return Outcome([p.returncode for p in procs], failed, time.monotonic() - start)


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
