"""An attempt's outcome, recorded and told: summary.json and the finished manifest (one wall time and one host load
over every attempt), the summary printed, and a failure reported with its evidence, fix and log tail."""

from __future__ import annotations

import collections
import functools
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import console, failures
from moekit.observe.profiles import profile
from moekit.observe.runs import events, metrics, routing, summary
from moekit.run import checkpoints, host_load, launch
from moekit.run.before_launch import Prepared
from moekit.run.follow import Launched
from moekit.run.setup import Run
from moekit.run.verdict import Verdict, log_lines, survive
from moekit.rundir import attempts, records


def record(ctx: Run, prep: Prepared, done: Launched, verdict: Verdict) -> tuple[dict[str, Any], records.Summary]:
    """Summarize the merged metrics and write summary.json and the finished manifest: one wall time over every
    attempt (a killed one's from its events, a lower bound) and one host load, in both."""
    cfg, run, manifest = ctx.cfg, ctx.run, prep.manifest
    stats: dict[str, Any] = {}
    if (run / rundir.METRICS).is_file():
        starts = summary.attempt_starts([*prep.history, {"resumed_from_checkpoint": prep.resume_step}])
        read = functools.partial(metrics.read, run / rundir.METRICS)
        stats = survive(
            verdict.unrecorded,
            "the metrics summary",
            lambda: summary.summarize(
                read(),
                cfg.hardware.peak_tflops.model_dump(),
                cfg.checkpoint.every,
                starts,
                events.per_attempt(run, attempts.ATTEMPTS),
                cfg.train.steps,
                [*prep.history, {"attempt": manifest.attempt}],  # every attempt, this one too
            ),
        )
    own = {"wall_s": round(done.outcome.wall_s, 2), "host_load": done.host_load}
    walls = [*(a.get("wall_s") for a in prep.history), own["wall_s"]]  # each attempt's; None: it recorded none
    wall = {
        "wall_s": round(sum(w for w in walls if w is not None), 2),
        "lower_bound": any(a.get("wall_s_lower_bound") or a.get("wall_s") is None for a in prep.history),
    }
    manifest.host_load = host_load.over_attempts(
        [*((a.get("host_load"), a.get("wall_s")) for a in prep.history), (done.host_load, own["wall_s"])]
    )
    record = records.Summary(
        experiment=cfg.experiment_name,
        run_dir=str(run),
        hardware=cfg.hardware.name,
        devices=cfg.num_devices,
        provenance={
            "kind": "measured",
            "date": prep.now.date().isoformat(),
            "hardware": cfg.hardware.name,
            "host": prep.versions.get("host"),
            "versions": prep.versions,
        },
        peak_tflops=cfg.hardware.peak_tflops.model_dump(),
        peak_source=cfg.hardware.peak_source,
        wall_s=wall["wall_s"],
        wall_s_lower_bound=wall["lower_bound"],
        wall_s_attempts=walls,
        stats=(stats or {}) | checkpoints.summary_notes(manifest) | routing.summary_section(run, cfg.run.routing_every),
    )
    survive(verdict.unrecorded, rundir.SUMMARY, records.write_summary, run, record)
    _record_outcome(manifest, done.outcome, verdict, wall, own)
    survive(verdict.unrecorded, rundir.MANIFEST, records.write_manifest, run, manifest)
    return stats or {}, record


def tell(
    ctx: Run, prep: Prepared, done: Launched, verdict: Verdict, stats: dict[str, Any], record: records.Summary
) -> int:
    """Print the attempt's summary (and profile), then its outcome; return moekit train's exit status."""
    cfg, run, outcome, failure = ctx.cfg, ctx.run, done.outcome, verdict.failure
    for problem in [e for e in outcome.log_errors if e] + verdict.unrecorded:
        print(f"moekit: warning: {problem}", file=sys.stderr)
    if stats.get("steps"):
        print(summary.format_summary(stats, cfg.hardware.name, cfg.hardware.peak_source))
    if cfg.profile.enabled:
        first = cfg.profile.skip_steps + (0 if prep.resume_step is None else prep.resume_step + 1)  # MaxText's start
        print(profile.report_run(run, first, cfg.profile.steps, record.provenance, stats.get("counted_steps")))
    if failure is None:
        print(f"moekit: run directory {run}")
        return 0
    if verdict.stopped is not None:
        resume = f"the same command with run.dir={ctx.root}"
        print(f"moekit: preempted: {failure.evidence}. Resume: {resume}", file=sys.stderr)
        return failure.returncode
    _report_failure(failure, outcome, prep.specs, ctx.root)
    return failures.exit_status(failure)


def _record_outcome(
    manifest: records.Manifest, outcome: launch.Outcome, verdict: Verdict, wall: dict[str, Any], own: dict[str, Any]
) -> None:
    """Turn the running manifest into the finished one: status, exit codes, failure, the run's wall time (every
    attempt's) and this attempt's entry with its own wall time and host load (`verdict.late`: the record of a stop
    that came after the last step, kept on a finished run)."""
    failure, stopped = verdict.failure, verdict.stopped
    manifest.status = records.OK if failure is None else records.PREEMPTED if stopped else records.FAILED
    manifest.ended = datetime.now(UTC).isoformat()
    manifest.returncodes = outcome.returncodes
    manifest.failed_rank = outcome.failed_rank
    manifest.failure = failure.to_dict() if failure else None
    manifest.preemption = stopped.to_dict() if stopped is not None else verdict.late
    manifest.wall_s, manifest.wall_s_lower_bound = wall["wall_s"], wall["lower_bound"]
    if any(outcome.log_errors) or verdict.unrecorded:
        manifest.incomplete = [e for e in outcome.log_errors if e] + verdict.unrecorded
    kept = (*records.Manifest._OUTCOME, "preemption", "incomplete")
    status = {k: v for k, v in manifest.to_dict().items() if k in kept and k != "wall_s_lower_bound"}
    this = {
        "attempt": manifest.attempt,
        "started": manifest.started,
        "resumed_from_checkpoint": manifest.resumed_from_checkpoint,
        **status,
        **own,
    }
    manifest.attempts = [*manifest.attempts, this]


def _report_failure(failure: failures.Failure, outcome: launch.Outcome, specs: list, run: Path) -> None:
    who = (
        f"process {outcome.failed_rank} exited {failure.returncode}"
        if outcome.failed_rank is not None
        else "every process exited 0"
        if failure.returncode == 0
        else "stopped before the processes ended"
    )
    print(f"moekit: training failed: {failure.title} ({who})", file=sys.stderr)
    print(f"  evidence: {failure.evidence}", file=sys.stderr)
    print(f"  causes and fixes: {failure.doc}", file=sys.stderr)
    if failure.name == failures.DISK_FULL.name:  # the same ENOSPC for bytes and for inodes: say which
        cause, free = rundir.full_cause(run)
        print(f"  here: {cause}; fix: {free}, then resume with run.dir={run}", file=sys.stderr)
    print(f"  run directory (resume with run.dir={run}): {run}", file=sys.stderr)
    rank = outcome.failed_rank if outcome.failed_rank is not None else 0 if failure.returncode == 0 else None
    if rank is not None:
        log = specs[rank].log
        with log_lines(log, outcome, rank) as lines:
            shown = (ln.rstrip("\n") for ln in lines if not console.is_noise(ln))  # the log keeps them all
            tail = list(collections.deque(shown, maxlen=15))
        print(f"  log: {log} (last lines, library notices left out)", file=sys.stderr)
        print("\n".join("  | " + t for t in tail), file=sys.stderr)
