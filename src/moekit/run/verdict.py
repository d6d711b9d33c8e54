"""How an attempt ended: its records merged, then preempted (or stopped after its last step), hung, crashed,
unfinished, or ok."""

from __future__ import annotations

import contextlib
import itertools
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import bounded, failures
from moekit.base.errors import MoekitError
from moekit.observe.runs import events
from moekit.run import checkpoints, launch, preemption, watchdog
from moekit.run.before_launch import Prepared
from moekit.run.follow import Launched
from moekit.run.setup import Run
from moekit.rundir import attempts
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz


@dataclass
class Verdict:
    """How the attempt ended: its failure (None: ok), a preemption or a stop after the last step, and what could
    not be recorded."""

    failure: failures.Failure | None
    stopped: preemption.Stop | None
    late: dict[str, Any] | None
    unrecorded: list[str]


def decide(ctx: Run, prep: Prepared, done: Launched) -> Verdict:
    """Merge the attempt's records, then decide how it ended: preempted (or stopped after its last step), hung,
    crashed, unfinished, or ok."""
    cfg, run, outcome, specs = ctx.cfg, ctx.run, done.outcome, prep.specs
    unrecorded: list[str] = []  # what could not be written after the run (a full disk): said, never fatal
    # This attempt's own records, before they join the earlier ones: those of this launcher's first process (a
    # launcher of another node holds no process 0 and so no metrics.jsonl).
    last = preemption.last_step(run / jobmod.per_process(rundir.METRICS, int(ctx.procs[0].get(rz.PROCESS_ID, 0))))
    survive(unrecorded, "the merged metrics", attempts.merge_metrics, run)
    screen = (prep.manifest, ctx.root, run, cfg.run_name, int(ctx.procs[0].get(rz.PROCESS_ID, 0)) == 0)
    survive(unrecorded, "the checkpoints set aside", checkpoints.screen_into, *screen)  # saves after a NaN
    saved = attempts.latest_checkpoint(ctx.root, cfg.run_name)
    began = [
        t for kind, t, _, step in events.read(run / events.FILE).intervals if kind == events.SAVE and step == saved
    ]
    with log_lines(specs[0].log, outcome, 0) as lines:
        stopped = preemption.stop(
            done.notice, outcome.ended_at, last, prep.resume_step, saved, lines, max(began, default=None)
        )
    late = None  # a stop that came after every step had run: the run is finished, and says when the stop came
    if preemption.after_the_last_step(stopped, last, cfg.train.steps):
        late, stopped = stopped.to_dict() | {"after_the_last_step": True}, None
        said = late["signal"].removeprefix("moekit received ")
        print(f"moekit: {said} came after the last step: the run is finished", flush=True)
    # A worker ended by the stop that came after its last step did not crash.
    by_stop = (
        late is not None
        and outcome.failed_rank is not None
        and outcome.returncodes[outcome.failed_rank]
        in (-signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGINT)
    )

    def crashed(rank: int) -> failures.Failure:
        with log_lines(specs[rank].log, outcome, rank) as lines:  # the whole log: a full disk may be far up
            return failures.classify(outcome.returncodes[rank], lines)

    failure = done.not_started or failures.attempt(
        stopped.failure(128 + (done.notice.signum or signal.SIGTERM)) if stopped is not None else None,
        watchdog.failure(outcome.hang, outcome.stacks, 128 + signal.SIGKILL) if outcome.hang is not None else None,
        (lambda: crashed(outcome.failed_rank)) if outcome.failed_rank is not None and not by_stop else None,
    )
    if failure is None and done.launched and not cfg.fabric.only:  # all exited 0: did they train every step given?
        with log_lines(specs[0].log, outcome, 0) as lines:
            failure = failures.unfinished(lines, last, cfg.train.steps, int(ctx.procs[0].get(rz.PROCESS_ID, 0)) == 0)
    return Verdict(failure, stopped, late, unrecorded)


@contextlib.contextmanager
def log_lines(log: Path, outcome: launch.Outcome, rank: int) -> Iterator[Iterable[str]]:
    """Every line a process wrote: its log file, then what could not be written to it (and why)."""
    unlogged = outcome.unlogged[rank] if outcome.unlogged else []
    error = [f"moekit: {outcome.log_errors[rank]}"] if outcome.log_errors and outcome.log_errors[rank] else []
    try:
        fh = bounded.open_text(log, None, "log", errors="replace")  # streamed; a pipe planted there is refused
    except (OSError, MoekitError):
        fh = None
    try:
        yield itertools.chain(fh or (), unlogged, error)
    finally:
        if fh is not None:
            fh.close()


def survive(problems: list[str], what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args); an OSError (a full disk) is noted in `problems` instead of ending moekit before it records."""
    try:
        return fn(*args)
    except OSError as exc:
        problems.append(f"could not record {what}: {exc}")
        return None
