"""Preemption: SIGTERM (Slurm before the time limit, scancel, scontrol requeue, Kubernetes pod deletion),
SIGHUP (a closed terminal or SSH session) or Ctrl-C asks the run to stop at a step boundary with a checkpoint,
so a relaunch loses at most one step.

With checkpoints on, moekit decides the step itself: at the signal it reads the step-end stamps its workers have
written so far (events.jsonl) and writes its stop flag (stop.json: stop_step() of the last one), which every
worker reads at its next step boundary (worker/step_events.py); MaxText (enable_autocheckpoint=true) saves that
step and stops with "Training stopped: Job received termination signal", exit status 0. So the save lands at
most one step after the last step stamped before the signal, however busy the host (JAX's preemption sync
point, which decided alone before, once took 20 s under load and came after the last step). moekit also passes
the signal on (as SIGTERM) to every worker's process group: JAX's preemption service (moekit.worker joins
jax.distributed for it) stays the fallback, and the only rule where this launcher does not hold every process
of the job (several nodes: their launchers are signalled at different times, and only JAX's sync point makes
them agree). moekit then records the attempt as
`preempted` (never ok: the steps are not all done) and exits 128 + the signal, so a scheduler sees that the job
did not finish. Without checkpoints the workers end at once and the next attempt starts again from step 0.

A second Ctrl-C stops the workers at once (SIGKILL); everything else waits `grace_s` for them.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from moekit.base import bounded, failures, parse
from moekit.base.errors import MoekitError
from moekit.rundir import attempts

# SIGHUP (the terminal or SSH session that started moekit went away) is a stop request like SIGTERM: by default it
# would end moekit at once, with no save and the manifest left `running`.
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# MaxText 0.2.5 (trainers/pre_train/train.py) logs this when it stopped at the preemption sync step.
STOPPED = "Training stopped: Job received termination signal"


class Notice:
    """The stop request moekit received: set from a signal handler, read by the supervising loop."""

    def __init__(self, saves: bool = True, on_stop: Callable[[int], None] | None = None) -> None:
        self.saves = saves
        """Whether the run checkpoints (what the workers do with the signal)."""
        self.on_stop = on_stop
        """Called with the signal at the first one (before anything else): moekit's stop flag for the workers."""
        self.signum: int | None = None
        self.at: float | None = None
        """time.monotonic() of the first signal."""
        self.wall: float | None = None
        """time.time() of the first signal (the clock the run's events use)."""
        self.hard = False
        """A second SIGINT: stop the workers now."""
        self._old: dict[int, object] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum, self.at, self.wall = signum, time.monotonic(), time.time()
            if self.on_stop is not None:
                try:
                    self.on_stop(signum)
                except OSError:  # no flag (a full disk): the workers stop at JAX's sync point instead
                    pass
            what = "save a checkpoint at the next step and stop" if self.saves else "stop (no checkpoints to save)"
            again = " (Ctrl-C again to stop them now)" if signum == signal.SIGINT and self.saves else ""
            try:  # after SIGHUP the terminal may be gone: the stop must not fail on its message
                print(f"\nmoekit: got {signal.Signals(signum).name}: the workers {what}{again}", flush=True)
            except (OSError, ValueError):
                pass
        elif signum == signal.SIGINT:
            self.hard = True

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Ask for a stop as if `signum` had arrived (e.g. from another thread)."""
        self._handle(signum, None)

    def __enter__(self) -> Notice:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            for sig in SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}


@dataclass(frozen=True, slots=True)
class Stop:
    """What a preempted attempt left behind (pure record; run/preemption decides, commands/train records)."""

    signal: str
    signal_to_exit_s: float | None
    """None when the workers got the signal from elsewhere (moekit saw only MaxText's stop line)."""
    last_step: int | None
    """The last step this attempt's metrics record (the records only: a step without one is not counted)."""
    checkpoint_step: int | None
    """The newest committed checkpoint after the attempt (the next attempt resumes after it)."""
    saved: bool
    """Whether this attempt wrote that checkpoint (vs. an older one, or none)."""
    saved_before_signal_s: float | None = None
    """How long before the signal that checkpoint's save began (the events' clock); None when it began after the
    signal or nobody knows when the signal came."""

    @property
    def saved_after_signal(self) -> bool:
        """Whether this attempt saved its checkpoint in answer to the signal (not before it)."""
        return self.saved and self.saved_before_signal_s is None

    @property
    def steps_lost(self) -> int | None:
        """Recorded steps that the next attempt runs again: those after the checkpoint it resumes from."""
        if self.last_step is None:
            return None
        return max(0, self.last_step - (self.checkpoint_step if self.checkpoint_step is not None else -1))

    def failure(self, returncode: int) -> failures.Failure:
        """The attempt as a `preempted` failure with exit status `returncode`; its evidence names the signal, the
        checkpoint a relaunch resumes from and the steps lost."""
        where = (
            f"checkpoint of step {self.checkpoint_step} saved after the signal"
            if self.saved_after_signal
            else f"checkpoint of step {self.checkpoint_step} saved {self.saved_before_signal_s:.1f} s before the "
            "signal, none after it"
            if self.saved
            else (
                f"no checkpoint saved after the signal; resumes from step {self.checkpoint_step}"
                if self.checkpoint_step is not None
                else "no checkpoint (checkpoint.every=0): a relaunch starts again from step 0"
            )
        )
        took = (
            "" if self.signal_to_exit_s is None else f"; workers exited {self.signal_to_exit_s:.1f} s after the signal"
        )
        lost = "no step had finished" if self.steps_lost is None else f"{self.steps_lost} step(s) lost"
        evidence = f"{self.signal}; {where}; {lost}{took}"
        return failures.PREEMPTED.failure(returncode, evidence)

    def to_dict(self) -> dict[str, object]:
        """The stop as the manifest records it (`preemption`)."""
        return {
            "signal": self.signal,
            "signal_to_exit_s": None if self.signal_to_exit_s is None else round(self.signal_to_exit_s, 2),
            "last_step": self.last_step,
            "checkpoint_step": self.checkpoint_step,
            "checkpoint_saved": self.saved,
            "checkpoint_saved_after_signal": self.saved_after_signal,
            "steps_lost": self.steps_lost,
        }


def stop(
    notice: Notice,
    ended_at: float | None,
    last_step: int | None,
    before: int | None,
    after: int | None,
    log: Iterable[str] = (),
    save_began: float | None = None,
) -> Stop | None:
    """The preemption record of an attempt, or None when it was not asked to stop.

    It was when moekit got a signal (`notice`), or when MaxText says it stopped for one (`log`: process 0's
    output; a scheduler may signal the workers directly). `before`/`after`: the newest checkpoint step when
    the attempt started and when it ended; `save_began`: when the save of `after` began (time.time(), from the
    attempt's events), to tell a checkpoint saved before the signal from one saved in answer to it."""
    saved = after is not None and after != before
    before_s = None
    if saved and save_began is not None and notice.wall is not None and save_began < notice.wall:
        before_s = notice.wall - save_began
    # last_step is what the records hold: the step saved at a preemption has its record (moekit.worker.step_events).
    told = notice.signum is not None and notice.at is not None
    if told and (ended_at is None or notice.at <= ended_at):
        took = (ended_at or notice.at) - notice.at
        return Stop(f"moekit received {signal.Signals(notice.signum).name}", took, last_step, after, saved, before_s)
    if any(STOPPED in line for line in log):
        # Signalled directly, or by a peer's notice through JAX's preemption service (the workers had ended
        # before any signal reached moekit).
        return Stop("the workers got a preemption notice", None, last_step, after, saved)
    if told:
        return Stop(f"moekit received {signal.Signals(notice.signum).name}", 0.0, last_step, after, saved, before_s)
    return None


def after_the_last_step(stop: Stop | None, last_step: int | None, planned_steps: int) -> bool:
    """Whether a stop came when every step had already run and been recorded: the run is finished, not preempted
    (nothing is left for a relaunch to train)."""
    return stop is not None and last_step is not None and last_step >= planned_steps - 1


def stop_step(last_stamped: int | None, processes: int) -> int:
    """The step moekit's flag stops the workers at (pure): the one after the last stamped step. With several
    processes one more: a process may have stamped the next step between moekit's read of the stamps and its
    write of the flag, and every process must stop at the same step (their saves are collectives)."""
    return (-1 if last_stamped is None else last_stamped) + (1 if processes == 1 else 2)


def last_step(metrics: Path) -> int | None:
    """The highest step in a metrics file (a line cut short by a kill is skipped)."""
    last = None
    try:
        with bounded.lines(metrics, attempts.METRICS_MAX_BYTES, "metrics file") as lines:
            for line in lines:
                try:
                    # finite=False: a line whose loss is NaN (the run diverged) is a step all the same
                    step = int(parse.json_line(line, str(metrics), finite=False)["step"])
                except (ValueError, KeyError, TypeError, OverflowError):
                    continue
                last = step if last is None else max(last, step)
    except (OSError, MoekitError):
        return None
    return last
