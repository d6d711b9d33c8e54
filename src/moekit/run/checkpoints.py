"""A checkpoint that does not restore: set it aside, so the next attempt resumes from the newest one that does.

MaxText restores the newest committed checkpoint under <run.dir>/<run.name>/checkpoints/ by itself, and fails
the same way on every relaunch when that one is damaged (files lost or cut short, a copy that stopped half way).
After an attempt failed while restoring (failure class corrupt_checkpoint, read from MaxText's log), moekit moves
that step's folder to <run.dir>/corrupt_checkpoints/<step> (kept for inspection, out of Orbax's sight) and
relaunches; the next-newest checkpoint is tried the same way.
"""

from __future__ import annotations

import math
from pathlib import Path

from moekit import rundir
from moekit.base import bounded, failures
from moekit.observe.runs import metrics
from moekit.rundir import attempts
from moekit.rundir import records as records_

CLASS = failures.CORRUPT_CHECKPOINT.name
SET_ASIDE = "corrupt_checkpoints"


def set_aside(run: Path, run_name: str, step: int) -> Path:
    """Move checkpoint `step` to <run>/corrupt_checkpoints/<step>[-n]; returns where it went."""
    return _move_aside(run, run / run_name / "checkpoints" / str(step))


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


# ---------- checkpoints that are not trusted before a resume ----------
#
# Two kinds are set aside before an attempt launches (and named in the manifest and the summary), so that MaxText
# resumes from the newest one that is both complete and saved before anything went non-finite:
# - an incomplete save (AI-Hypercomputer/maxtext PR #5260: a restore picked up a step whose commit never
#   finished). Orbax writes a step into <step>.orbax-checkpoint-tmp-<time> and renames it when done (local
#   storage), or writes commit_success.txt into the step's folder last (object stores, CommitFileTemporaryPath).
#   A folder with the temporary suffix, and where the checkpoints carry commit files a step without one, is a save
#   that never finished: orbax's own rule (orbax/checkpoint/_src/path/atomicity.py, orbax-checkpoint 0.12.8).
# - a save after a non-finite loss or gradient norm (marin-community/marin #7271: a NaN in the first backward, the
#   job reported as a success and the poisoned checkpoint restored by the next run). The checkpoint of step s
#   holds the state after step s's update, so it is poisoned when any step <= s recorded a non-finite
#   learning/loss or learning/grad_norm.

TMP_SUFFIX = ".orbax-checkpoint-tmp"
COMMIT_FILE = "commit_success.txt"
INCOMPLETE = "incomplete save"
NON_FINITE = "saved after a non-finite loss"
WATCHED = ("learning/loss", "learning/grad_norm", "learning/raw_grad_norm")  # MaxText 0.2.5's metric keys
NOTES = "checkpoints_set_aside"  # the manifest's and the summary's list of what was set aside, and why


def incomplete(folder: Path) -> list[Path]:
    """The saves under `folder` (a run's checkpoints/) that never finished, by orbax's rule: a temporary folder,
    and where any step carries a commit file, a step without one."""
    if not folder.is_dir():
        return []
    entries = [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    steps = [p for p in entries if p.name.isdigit()]
    committing = any((p / COMMIT_FILE).is_file() for p in steps)
    return sorted(
        [p for p in entries if TMP_SUFFIX in p.name]
        + [p for p in steps if committing and not (p / COMMIT_FILE).is_file()]
    )


def first_non_finite(rows: list[dict]) -> tuple[int, str] | None:
    """The first step whose record holds a non-finite loss or gradient norm, and which key; None when all are
    finite (or absent)."""
    for row in sorted(rows, key=lambda r: int(r["step"])):
        for key in WATCHED:
            value = row.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and not math.isfinite(value):
                return int(row["step"]), key
    return None


def recorded_rows(records: Path) -> list[dict]:
    """Every step record of the run's first process, over all its attempts (attempts/<n>/ and the run directory);
    a later attempt's record of a step replaces an earlier one's."""
    by_step: dict[int, dict] = {}
    folders = [*attempts.attempt_dirs(records), records]  # oldest first
    for folder in folders:
        path = folder / rundir.METRICS
        if not path.is_file():
            continue
        try:
            rows = metrics.read(path).rows
        except (metrics.MetricsError, bounded.TooLarge):
            continue  # judged by what can be read; the summary says what could not
        if rows:
            first = int(rows[0]["step"])
            by_step = {s: r for s, r in by_step.items() if s < first}
            by_step |= {int(r["step"]): r for r in rows}
    return list(by_step.values())


def untrusted(folder: Path, rows: list[dict]) -> list[tuple[Path, str]]:
    """Each checkpoint under `folder` (a run's checkpoints/) that a resume must not use, with the reason."""
    out = [(p, INCOMPLETE) for p in incomplete(folder)]
    bad = first_non_finite(rows)
    if bad is not None:
        step, key = bad
        poisoned = [p for p in folder.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) >= step]
        done = {p for p, _ in out}
        out += [(p, f"{NON_FINITE} ({key} at step {step})") for p in sorted(poisoned) if p not in done]
    return out


def screen(run: Path, records: Path, run_name: str) -> list[dict]:
    """Set aside every checkpoint of run directory `run` a resume must not use (incomplete, or saved after a
    non-finite loss in this launcher's `records`), each to <run>/corrupt_checkpoints/; returns one note per
    checkpoint moved: its folder's name, the reason, where it went."""
    folder = run / run_name / "checkpoints"
    if not folder.is_dir():
        return []
    notes = []
    for path, reason in untrusted(folder, recorded_rows(records)):
        moved = _move_aside(run, path)
        note = {"checkpoint": path.name, "reason": reason, "moved_to": str(moved)}
        notes.append(note)
        print(
            f"moekit: the checkpoint {path.name} is not resumed from ({reason}); it is kept aside in {moved}.",
            flush=True,
        )
    return notes


def _move_aside(run: Path, path: Path) -> Path:
    folder = rundir.confined(run, run / SET_ASIDE)
    folder.mkdir(exist_ok=True)
    dst, n = folder / path.name, 1
    while dst.exists():
        dst, n = folder / f"{path.name}-{n}", n + 1
    rundir.confined(run, path).rename(dst)
    return dst


def screen_into(manifest: records_.Manifest, run: Path, records: Path, run_name: str, first: bool) -> None:
    """Screen run directory `run`'s checkpoints (only the launcher of process 0, `first`, moves anything: every
    launcher shares them) and add what was set aside to `manifest`'s list (NOTES)."""
    notes = screen(run, records, run_name) if first else []
    if notes:
        manifest.extra[NOTES] = [*(manifest.extra.get(NOTES) or []), *notes]


def known(manifest: records_.Manifest | None) -> records_.Manifest:
    """A holder of what the run set aside so far, as `manifest` (the previous attempt's) records it."""
    held = records_.Manifest(status=records_.RUNNING)
    if manifest is not None and manifest.extra.get(NOTES):
        held.extra[NOTES] = list(manifest.extra[NOTES])
    return held


def summary_notes(manifest: records_.Manifest) -> dict[str, list[dict]]:
    """The summary's entry naming every checkpoint set aside so far (incomplete, non-finite, or failed to
    restore), empty when none was."""
    notes = list(manifest.extra.get(NOTES) or [])
    for entry in manifest.attempts:  # checkpoints that failed to restore (after_attempt)
        aside = (entry.get("failure") or {}).get("set_aside")
        if aside:
            notes.append(
                {
                    "checkpoint": str(aside["checkpoint"]),
                    "reason": "failed to restore",
                    "moved_to": aside.get("moved_to"),
                }
            )
    return {NOTES: notes} if notes else {}
