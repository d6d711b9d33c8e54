"""A checkpoint that does not restore: set it aside, so the next attempt resumes from the newest one that does.

MaxText restores the newest committed checkpoint under <run.dir>/<run.name>/checkpoints/ by itself, and fails
the same way on every relaunch when that one is damaged (files lost or cut short, a copy that stopped half way).
After an attempt failed while restoring (failure class corrupt_checkpoint, read from MaxText's log), moekit moves
that step's folder to <run.dir>/corrupt_checkpoints/<step> (kept for inspection, out of Orbax's sight) and
relaunches; the next-newest checkpoint is tried the same way.
"""

from __future__ import annotations

from pathlib import Path

from moekit import rundir
from moekit.base import failures
from moekit.rundir import attempts
from moekit.rundir import records as records_

CLASS = failures.CORRUPT_CHECKPOINT.name
SET_ASIDE = "corrupt_checkpoints"


def set_aside(run: Path, run_name: str, step: int) -> Path:
    """Move checkpoint `step` to <run>/corrupt_checkpoints/<step>[-n]; returns where it went."""
    src = rundir.confined(run, Path(run_name) / "checkpoints" / str(step))
    folder = rundir.confined(run, run / SET_ASIDE)
    folder.mkdir(exist_ok=True)
    dst = folder / str(step)
    n = 1
    while dst.exists():
        dst, n = folder / f"{step}-{n}", n + 1
    src.rename(dst)
    return dst


def after_attempt(records: Path, run: Path, run_name: str) -> tuple[records_.Manifest, str, bool] | None:
    """When the attempt just recorded in the manifest (in `records`, this launcher's folder of run directory
    `run`) failed restoring its checkpoint: set that checkpoint aside, note it in the manifest, and return
    (manifest, message, whether an older checkpoint is left to resume from). None when there is nothing to fall
    back from."""
    manifest = records_.try_manifest(records)
    if manifest is None:
        return None
    failure, step = manifest.failure or {}, manifest.resumed_from_checkpoint
    if failure.get("class") != CLASS or step is None or not (run / run_name / "checkpoints" / str(step)).is_dir():
        return None
    moved = set_aside(run, run_name, step)
    older = attempts.latest_checkpoint(run, run_name)
    note = {"checkpoint": step, "moved_to": str(moved)}
    manifest.failure["set_aside"] = note
    if manifest.attempts:
        manifest.attempts[-1].setdefault("failure", {})["set_aside"] = note
    records_.write_manifest(records, manifest)
    message = f"moekit: the checkpoint of step {step} does not restore; it is kept aside in {moved}."
    if older is None:
        return manifest, message + " No older checkpoint is left: relaunch to start again from step 0.", False
    return manifest, message + f" Resuming from the checkpoint of step {older} instead.", True
