"""`moekit verify`: real fp32 training of a reference and candidates, compared step by step."""

from __future__ import annotations

import json

import pytest

from conftest import VERIFY_STEPS, moekit
from moekit.observe.reports import compare
from moekit.observe.runs import metrics

STEPS = VERIFY_STEPS


@pytest.mark.integration
def test_kernel_path_change_passes(dense_vs_grouped):
    out, proc = dense_vs_grouped
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    assert "PASS  moe=dense: equivalent over 4 steps" in proc.stdout
    result = json.loads((out / "verify.json").read_text())
    assert result["reference"]["overrides"] == ["precision=fp32", "experiment=smoke", f"train.steps={STEPS}"]
    assert result["candidates"][0]["ok"] is True
    ref = metrics.read(out / "reference" / "metrics.jsonl")
    cand = metrics.read(out / "candidate-1" / "metrics.jsonl")
    assert len(ref.rows) == len(cand.rows) == STEPS
    # Measured 2026-12-03 (2-core CPU, fp32, MaxText 0.2.5, jax 0.12.0.1): dense identical to ragged_dot; a training
    # step moves the loss by ~1e-2 (tests/test_optimizations.py).
    for key in compare.COMPARED:
        for (s, r), (_, c) in zip(metrics.series(ref, key), metrics.series(cand, key), strict=True):
            assert abs(c - r) <= 1e-4, (key, s, r, c)


@pytest.mark.integration
def test_math_change_fails_at_the_first_diverging_step(dense_vs_grouped, tmp_path):
    out, _ = dense_vs_grouped
    proc = moekit(
        "verify", "--reference", str(out / "reference"), "--candidate", "train.learning_rate=3e-4",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr + proc.stdout[-3000:]
    ref = metrics.read(out / "reference" / "metrics.jsonl")
    cand = metrics.read(tmp_path / "candidate-1" / "metrics.jsonl")
    # The first step where loss or grad norm leaves the tolerance, found here from the two files.
    first = min(
        s
        for key in compare.COMPARED
        for (s, r), (_, c) in zip(metrics.series(ref, key), metrics.series(cand, key), strict=True)
        if abs(c - r) > compare.ATOL + compare.RTOL * abs(r)
    )
    assert first >= 1  # step 0's loss is computed before any update: equal for every learning rate
    assert f"FAIL  train.learning_rate=3e-4: diverges at step {first}:" in proc.stdout
    assert json.loads((tmp_path / "verify.json").read_text())["candidates"][0]["first_diverging_step"] == first
    # The reference was reused, not trained again.
    assert not (tmp_path / "reference").exists()


def test_compare_finds_the_first_step_and_missing_steps():
    rows = [{"step": s, compare.LOSS: 12.0 - s * 0.1, compare.GRAD_NORM: 2.0} for s in range(5)]
    ref = metrics.Metrics(rows)
    assert compare.compare(ref, metrics.Metrics([dict(r) for r in rows])).ok
    bumped = [dict(r) for r in rows]
    bumped[3][compare.GRAD_NORM] += 1e-3  # grad norm alone moves at step 3
    v = compare.compare(ref, metrics.Metrics(bumped))
    assert (v.first.step, v.first.key) == (3, compare.GRAD_NORM)
    short = compare.compare(ref, metrics.Metrics(rows[:2]))
    assert short.first.step == 2 and short.first.candidate is None
    assert not compare.compare(metrics.Metrics([]), metrics.Metrics([])).ok


@pytest.mark.parametrize(
    "args,message",
    [
        (["--candidate", "train.per_device_batch_size=1"], "other tokens per step"),
        (["--candidate", "model.num_layers=2"], "changes the model (model.num_layers)"),
        (["--candidate", ""], "empty --candidate"),
        (["--candidate", "moe=capacity"], "drops tokens"),
        (["train.steps=4", "--candidate", "moe=dense", "--steps", "3"], "both --steps and train.steps"),
    ],
)
def test_bad_requests_stop_before_training(args, message, tmp_path):
    proc = moekit("verify", "experiment=smoke", *args, "--out", str(tmp_path / "v"))
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "v").exists()


def test_a_refusal_names_only_what_differs(tmp_path):
    """A candidate with the reference's steps is refused for its setup alone ("6 steps vs the reference's 6" is
    no difference); one that changes the steps is told about them."""
    proc = moekit("verify", "experiment=smoke", "--candidate", "train.per_device_batch_size=1", "--out", str(tmp_path))
    assert proc.returncode == 2 and "other tokens per step" in proc.stderr and "steps vs" not in proc.stderr
    proc = moekit("verify", "experiment=smoke", "--candidate", "train.steps=4", "--out", str(tmp_path / "v"))
    assert proc.returncode == 2 and "(4 steps vs the reference's 6)" in proc.stderr, proc.stderr


def test_out_folder_in_use_is_refused(tmp_path):
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "verify.json").write_text("{}")
    proc = moekit("verify", "experiment=smoke", "--candidate", "moe=dense", "--out", str(tmp_path / "v"))
    assert proc.returncode == 2 and "is not empty" in proc.stderr
    assert [p.name for p in (tmp_path / "v").iterdir()] == ["verify.json"]
