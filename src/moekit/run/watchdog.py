"""Hang watchdog: when no step has finished for the stall bound, ask every worker for its Python stacks, stop
the job and record it as `hang`.

A stuck collective (a lost peer, an NCCL deadlock) blocks every process forever without an error; only the
steps stop coming. The bound (run.stall_timeout_s) counts from the last finished step, so start-up and the
first compile, which have their own bounds (cluster.rendezvous_timeout_s), are never cut short. Its default
follows what the run has shown so far: the first step's time (start-up and compile: any recompile takes no
longer), ten times the slowest later step (checkpoint saves and evaluation included), and never below
STALL_FLOOR_S. JAX's own heartbeat ends the peers of a process that stopped answering after 100 s, so the
floor stays below that: the watchdog speaks first, with stacks.

A checkpoint save or restore is not a stall: its time grows with the model and the storage (a 33 GiB state
saved to host memory on an H200 took over a minute), and no step finishes meanwhile. While process 0's events
say one is under way, the clock waits, up to IO_BOUND_S; it restarts when the save or restore ends.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from moekit.base import failures

STACKS = "stacks.txt"  # per process in the run directory (stacks.<i>.txt for process i), written on a hang
STALL_FLOOR_S = 60.0
IO_BOUND_S = 1800.0
"""The longest a single checkpoint save or restore may take before the run counts as hung."""
SLOW_STEP_FACTOR = 10
STACKS_WAIT_S = 3.0
"""How long the workers get to write their stacks before they are stopped."""


def bound(configured: float | None, first_step_s: float | None, step_gaps_s: Sequence[float]) -> float | None:
    """Seconds without a finished step after which the run counts as hung (None: not watched yet or off).

    configured: run.stall_timeout_s (None = derived, 0 = off). first_step_s: launch to the first finished step.
    step_gaps_s: the times between later steps."""
    if configured == 0 or first_step_s is None:
        return None
    if configured is not None:
        return float(configured)
    return max(STALL_FLOOR_S, first_step_s, SLOW_STEP_FACTOR * max(step_gaps_s, default=0.0))


class Watchdog:
    """Step times seen so far (fed from process 0's output) and the stall decision."""

    def __init__(
        self,
        configured: float | None,
        started: float | None = None,
        io: Callable[[], tuple[str, float, bool] | None] = lambda: None,
    ) -> None:
        """io: the last checkpoint save or restore, seconds since it began (under way) or ended, and whether it is
        under way; None when there was none (events.last_io, read from process 0's events)."""
        self.configured = configured
        self.io = io
        self.started = time.monotonic() if started is None else started
        self.last: float | None = None
        self.first_step_s: float | None = None
        self.gaps: list[float] = []

    def step_done(self, now: float | None = None) -> None:
        """Note a finished step at `now` (monotonic seconds): the first sets the start-up time, later ones add a gap."""
        now = time.monotonic() if now is None else now
        if self.last is None:
            self.first_step_s = now - self.started
        else:
            self.gaps.append(now - self.last)
        self.last = now

    def bound(self) -> float | None:
        """The stall bound from what has been seen so far, s (None: off, or no step finished yet)."""
        return bound(self.configured, self.first_step_s, self.gaps)

    def stalled(self, now: float | None = None) -> str | None:
        """Why the run counts as hung now, or None."""
        limit = self.bound()
        if limit is None or self.last is None:
            return None
        idle = (time.monotonic() if now is None else now) - self.last
        if idle <= limit:
            return None
        how = "run.stall_timeout_s" if self.configured is not None else "derived from the step times so far"
        io = self.io()  # read only once the steps are late: a save or restore in between is not a stall
        if io is not None and io[2]:
            kind, seconds, _ = io
            if seconds <= max(IO_BOUND_S, limit):
                return None
            return f"a checkpoint {kind} has not finished for {seconds:.0f} s (bound {max(IO_BOUND_S, limit):.0f} s)"
        if io is not None and io[1] < idle:  # the clock counts from the end of a save or restore after the step
            if io[1] <= limit:
                return None
            return f"no step finished for {io[1]:.0f} s after a checkpoint {io[0]} ended (bound {limit:.0f} s, {how})"
        return f"no step finished for {idle:.0f} s (bound {limit:.0f} s, {how})"


def dump_stacks(pids: Sequence[int], files: Sequence[Path], wait_s: float = STACKS_WAIT_S) -> list[Path]:
    """Ask every worker (moekit.worker's SIGUSR1 handler) for its Python stacks; return the files written.

    A stopped process (SIGSTOP, a debugger) gets SIGCONT first: a pending signal is handled only once it runs."""
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGUSR1):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(_written(f) for f in files):
        time.sleep(0.1)
    time.sleep(0.2)  # let the last lines land
    return [f for f in files if _written(f)]


def remove_unused(files: Sequence[Path]) -> None:
    """Each worker opens its stacks file at start (faulthandler needs the descriptor then); drop the empty ones."""
    for f in files:
        try:
            if f.stat().st_size == 0:
                f.unlink()
        except OSError:
            pass


def _written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def failure(reason: str, stacks: Sequence[str], returncode: int) -> failures.Failure:
    """The `hang` record of a run the watchdog stopped."""
    where = f"; Python stacks in {', '.join(stacks)}" if stacks else "; no process wrote its stacks"
    return failures.HANG.failure(returncode, reason + where)
