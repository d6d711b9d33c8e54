"""An attempt's launch: its processes run to their end while the host's load is sampled, their phases and step
progress shown; a signal to moekit becomes the stop flag, and the watchdog stops a stalled run."""

from __future__ import annotations

import functools
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import failures
from moekit.observe.runs import events, progress
from moekit.run import compiling, host_load, launch, preemption, watchdog
from moekit.run.before_launch import Prepared
from moekit.run.setup import Run
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz


@dataclass
class Launched:
    """What the launch left: the processes' outcome, the stop request, and how busy the host was."""

    outcome: launch.Outcome
    notice: preemption.Notice
    launched: bool = True
    not_started: failures.Failure | None = None
    host_load: dict[str, Any] | None = None


def run(ctx: Run, prep: Prepared) -> Launched:
    """Run the processes to their end while the host's load is sampled; nothing when every step is saved."""
    n, steps = len(prep.specs), ctx.cfg.train.steps
    if prep.resume_step is not None and prep.resume_step >= steps - 1:
        # A stop that landed in the last step's save: every step is trained and saved, and MaxText would refuse to
        # train "up to" a step it has already passed. Finish the run from its records instead of launching.
        print(
            f"moekit: the checkpoint of the last step ({prep.resume_step}) is saved: nothing left to train", flush=True
        )
        return Launched(launch.Outcome([0] * n, None, 0.0, ended_at=time.monotonic()), preemption.Notice(False), False)
    with host_load.Sampler().running() as load:
        try:
            outcome, notice = _follow(ctx, prep.specs)
            not_started = None
        except launch.LaunchError as exc:  # recorded as the attempt's failure: the manifest never stays `running`
            not_started = failures.NOT_STARTED.failure(1, str(exc))
            outcome = launch.Outcome([1] * n, None, 0.0, ended_at=time.monotonic())
            notice = preemption.Notice(saves=False)
    return Launched(outcome, notice, True, not_started, load.result)


def _follow(ctx: Run, specs: list[launch.ProcessSpec]) -> tuple[launch.Outcome, preemption.Notice]:
    """Run the processes to their end, showing phases and step progress. A signal to moekit is passed on to the
    workers (they save at the next step when they can: run/preemption.py); the watchdog stops a stalled run."""
    started = time.monotonic()
    tty = sys.stdout.isatty()
    cfg, phase, steps = ctx.cfg, ctx.phase, ctx.cfg.train.steps
    first = ctx.run / jobmod.per_process(events.FILE, int(ctx.procs[0].get(rz.PROCESS_ID, 0)))
    watch = watchdog.Watchdog(cfg.run.stall_timeout_s, started, functools.partial(_last_io, first))
    pace = progress.Pace()
    ticker = compiling.Ticker()

    def on_line(line: str) -> None:
        for p in progress.parse_phase(line):
            ticker.stop()
            phase(p)
            if p.startswith("compiling"):
                ticker.start()
        s = progress.parse(line)
        if s is not None:
            ticker.stop()
            watch.step_done()
            pace.add(s)
            text = progress.format_progress(s, steps, phase.elapsed(), pace)  # the phase lines' clock
            print(("\r" + text) if tty else text, end="" if tty else "\n", flush=True)

    if cfg.fabric.only:  # no MaxText: the rendezvous, then the collectives of the mesh
        phase(f"launching {len(specs)} process(es) for the fabric check: rendezvous, then each collective")
    else:
        phase(f"launching {len(specs)} process(es): MaxText starts, then compiles; the first step follows")
    scrub = ctx.scrub
    stacks = [ctx.run / jobmod.per_process(watchdog.STACKS, int(p.get(rz.PROCESS_ID, 0))) for p in ctx.procs]
    flag = None
    if cfg.checkpoint.every > 0 and cfg.num_processes == len(ctx.procs):  # this launcher holds every process
        flag = functools.partial(_write_stop_flag, ctx)
    with preemption.Notice(saves=cfg.checkpoint.every > 0, on_stop=flag) as notice:
        outcome = launch.run(
            specs,
            on_line,
            scrub=scrub if scrub else None,
            notice=notice,
            stop_grace_s=cfg.cluster.signal_grace_s,
            watch=watch,
            stack_files=stacks,
        )
    ticker.stop()
    if tty:
        print()
    return outcome, notice


def _last_io(path: Path) -> tuple[str, float, bool] | None:
    """This host's first process's last checkpoint save or restore: its kind, seconds since it began (under way)
    or ended, and whether it is under way (the watchdog's events.last_io, in seconds ago)."""
    try:
        lines = path.read_text(encoding="utf8", errors="replace").splitlines()
    except OSError:
        return None
    io = events.last_io(lines)
    return None if io is None else (io[0], time.time() - io[1], io[2])


def _write_stop_flag(ctx: Run, signum: int) -> None:
    """moekit's stop flag (events.STOP_FILE): the step every worker stops at, after the last one they stamped."""
    stamped = [
        max(events.read(ctx.run / jobmod.per_process(events.FILE, int(p.get(rz.PROCESS_ID, 0)))).step_end, default=-1)
        for p in ctx.procs
    ]
    last = max(stamped, default=-1)
    step = preemption.stop_step(None if last < 0 else last, len(ctx.procs))
    record = {"step": step, "last_stamped": None if last < 0 else last, "signal": signal.Signals(signum).name}
    rundir.write_json(ctx.run / events.STOP_FILE, record | {"t": time.time()})
