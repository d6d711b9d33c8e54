"""One attempt of a run in its phases (before launch, launch, verdict, outcome), and a run's attempts until one ends
it: when an attempt failed restoring a damaged checkpoint, that checkpoint is set aside and the run relaunched from
the one before (run.checkpoints)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from moekit.run import before_launch, checkpoints, follow, outcome, verdict
from moekit.run.setup import Run
from moekit.rundir import attempts, records


def until_done(ctx: Run, previous: records.Manifest | None, now: datetime) -> int:
    """Attempt the run until an attempt ends it (no checkpoint to fall back to), holding the records' lock (one
    moekit at a time runs a run directory); moekit train's exit status."""
    with attempts.locked(ctx.run):
        while True:
            rc = one(ctx, previous, now)
            fallback = checkpoints.after_attempt(ctx.run, ctx.root, ctx.cfg.run_name)
            if fallback is None:
                return rc
            previous, message, again = fallback
            print(message, file=sys.stderr, flush=True)
            if not again:
                return rc
            now = datetime.now(UTC)


def one(ctx: Run, previous: records.Manifest | None, now: datetime) -> int:
    """One launch of the run's processes, in its phases: before launch (records written), launch, verdict (how it
    ended), record (summary and manifest); returns moekit train's exit status."""
    prep = before_launch.begin(ctx, previous, now)
    done = follow.run(ctx, prep)
    ended = verdict.decide(ctx, prep, done)
    stats, summary_record = outcome.record(ctx, prep, done, ended)
    return outcome.tell(ctx, prep, done, ended, stats, summary_record)
