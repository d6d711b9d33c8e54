"""Which checkpoints a resume may use: an incomplete save (orbax's temporary folder, or a step without its commit
file where the checkpoints carry them) and a save after a non-finite loss are set aside, named, and the resume
takes the newest one left. The rule on made-up folders here; a real interrupted save and a real NaN below."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from conftest import moekit
from moekit.run import checkpoints
from moekit.rundir import attempts


def _steps(folder: Path, names: list[str], commit: set[str] = frozenset()) -> None:
    for name in names:
        (folder / name / "items").mkdir(parents=True)
        if name in commit:
            (folder / name / checkpoints.COMMIT_FILE).write_text("")


def test_orbax_temporary_folders_and_uncommitted_steps_are_incomplete(tmp_path):
    _steps(tmp_path, ["2", "4", "6.orbax-checkpoint-tmp-1765132800"])
    assert [p.name for p in checkpoints.incomplete(tmp_path)] == ["6.orbax-checkpoint-tmp-1765132800"]
    other = tmp_path / "gcs_like"
    _steps(other, ["2", "4", "6"], commit={"2", "4"})  # commit files in use: 6 never finished
    assert [p.name for p in checkpoints.incomplete(other)] == ["6"]


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([{"step": 0, "learning/loss": 9.1}, {"step": 1, "learning/loss": 8.7}], None),
        ([{"step": 0, "learning/loss": 9.1}, {"step": 1, "learning/loss": math.nan}], (1, "learning/loss")),
        ([{"step": 3, "learning/grad_norm": math.inf}, {"step": 1, "learning/loss": -math.inf}], (1, "learning/loss")),
        ([{"step": 2, "learning/loss": 1.0, "learning/grad_norm": math.nan}], (2, "learning/grad_norm")),
    ],
    ids=["finite", "nan-loss", "first-of-several", "nan-grad-norm"],
)
def test_the_first_non_finite_step(rows, expected):
    assert checkpoints.first_non_finite(rows) == expected


def test_the_resume_takes_the_newest_checkpoint_that_is_complete_and_before_any_non_finite_step():
    """Property, over seeded random layouts: after the screen, the checkpoint MaxText resumes from (the newest step
    folder left) is the newest saved step below the first non-finite one, and everything moved aside is named."""
    rng = random.Random(55)
    for _ in range(60):
        saved = set(rng.sample(range(41), rng.randint(1, 8)))
        bad = rng.choice([None, rng.randint(0, 40)])
        _check_screen(saved, bad, set(rng.sample(range(41), rng.randint(0, 3))))


def _check_screen(saved: set[int], bad: int | None, tmp: set[int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        run = Path(d)
        folder = run / "smoke" / "checkpoints"
        _steps(folder, [str(s) for s in sorted(saved)] + [f"{s}.orbax-checkpoint-tmp-7" for s in sorted(tmp)])
        rows = [{"step": s, "learning/loss": math.nan if bad is not None and s >= bad else 2.0} for s in range(41)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        notes = checkpoints.screen(run, run, "smoke")
        good = [s for s in saved if bad is None or s < bad]
        assert attempts.latest_checkpoint(run, "smoke") == max(good, default=None)
        moved = sorted(n["checkpoint"] for n in notes)
        expected = sorted([str(s) for s in saved if s not in good] + [f"{s}.orbax-checkpoint-tmp-7" for s in tmp])
        assert moved == expected
        assert all(Path(n["moved_to"]).parent == run / checkpoints.SET_ASIDE for n in notes)


def test_records_of_every_attempt_are_judged_together(tmp_path):
    """The NaN was recorded by an earlier attempt (its records moved to attempts/1/) and the later one re-ran
    nothing of it: the checkpoint saved after it is still poisoned."""
    (tmp_path / "attempts" / "1").mkdir(parents=True)
    (tmp_path / "attempts" / "1" / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "learning/loss": 3.0}) + "\n" + json.dumps({"step": 1, "learning/loss": math.nan}) + "\n"
    )
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 2, "learning/loss": 3.0}) + "\n")
    assert checkpoints.first_non_finite(checkpoints.recorded_rows(tmp_path)) == (1, "learning/loss")
    # A later attempt that re-ran step 1 (it resumed from step 0) replaces the NaN record.
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "learning/loss": 3.0}) + "\n")
    assert checkpoints.first_non_finite(checkpoints.recorded_rows(tmp_path)) is None


# A learning rate this large sends the loss to NaN at step 1, after warm-up's step 0 (a real non-finite loss, not a
# planted one); checkpoint.every=2 leaves a save before it and saves after it. MaxText 0.2.5 stops on a NaN or inf
# loss by default (abort_on_nan_loss), but only when it logs that step, after the next one has run and maybe saved;
# with the stop off the run trains on and saves poisoned checkpoints every time, as marin #7271's run did.
NAN_RUN = ["train", "experiment=smoke", "train.steps=6", "checkpoint.every=2", "train.learning_rate=1e12"]
NAN_RUN += ["maxtext.extra.abort_on_nan_loss=false", "maxtext.extra.abort_on_inf_loss=false"]


@pytest.mark.integration
def test_a_relaunch_resumes_from_the_last_good_checkpoint_after_a_nan_and_an_interrupted_save(tmp_path):
    run = tmp_path / "run"
    first = moekit(*NAN_RUN, f"run.dir={run}")
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    bad = checkpoints.first_non_finite(rows)
    assert bad is not None, [r.get("learning/loss") for r in rows]
    summary = json.loads((run / "summary.json").read_text())
    aside = {n["checkpoint"]: n for n in summary[checkpoints.NOTES]}
    saved_after = sorted(int(c) for c in aside)
    assert saved_after and min(saved_after) >= bad[0], (bad, aside)
    assert all(n["reason"].startswith(checkpoints.NON_FINITE) for n in aside.values())
    assert all((run / checkpoints.SET_ASIDE / c).is_dir() for c in aside)
    good = attempts.latest_checkpoint(run, "smoke")
    assert good is not None and good < bad[0], (good, bad)
    print(f"\nfirst non-finite: {bad}; set aside after the run: {saved_after}; newest good checkpoint: {good}")

    # An interrupted save: what orbax leaves when a save of a later step is killed before its rename.
    import shutil

    partial = run / "smoke" / "checkpoints" / f"{good + 1}.orbax-checkpoint-tmp-1765132800"
    shutil.copytree(run / "smoke" / "checkpoints" / str(good), partial)
    next(p for p in partial.rglob("*") if p.is_file()).unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"status": "preempted"}))  # as a stop records it

    again = moekit(*NAN_RUN, f"run.dir={run}")
    assert again.returncode == 0, again.stderr[-3000:] + again.stdout[-2000:]
    assert f"the checkpoint {partial.name} is not resumed from ({checkpoints.INCOMPLETE})" in again.stdout
    assert f"(attempt 2, resuming from the checkpoint of step {good})" in again.stdout
    summary = json.loads((run / "summary.json").read_text())
    named = [n["checkpoint"] for n in summary[checkpoints.NOTES]]
    assert partial.name in named and set(aside) <= set(named), named
    assert not partial.exists() and attempts.latest_checkpoint(run, "smoke") == good
