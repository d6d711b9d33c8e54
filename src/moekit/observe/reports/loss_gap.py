"""The loss gap of a quantized run (FP8) to its bf16 twin on real text: the mean relative gap over the last steps.

The rule (docs/metrics.md, "FP8 against its bf16 twin"): both runs train the same model on the same data (the same
corpus shards), seed, tokens per step and step count (the learning-rate schedule), and differ only in precision
(and in keys that never reach the training step: config/training_step.py).
Over the last WINDOW of the steps, gap_i = (loss_q[i] - loss_bf16[i]) / loss_bf16[i]; the mean of gap_i is the
number, and |mean| <= GOAL passes. Early steps are left out: there the losses fall fast and a one-step lag in an
otherwise equal trajectory reads as a large gap. Pure: the caller reads the run directories (observe.runs.rundata).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from moekit.config import training_step as training

WINDOW = 0.2  # the last fifth of the steps
GOAL = 0.01  # |mean relative gap| at most 1%
MIN_STEPS = 5
# What may differ between the twins besides what never reaches the training step (config/training_step.py): precision.
MAY_DIFFER = ("precision",)


@dataclass(frozen=True, slots=True)
class Gap:
    """The loss gap of a candidate to its reference over the window, with what was compared."""

    steps: int
    window_steps: tuple[int, int]
    """First and last step (0-based, inclusive) of the window."""
    mean_relative_gap: float
    """Mean of (candidate - reference) / reference over the window; > 0: the candidate's loss is higher."""
    max_abs_relative_gap: float
    final_losses: tuple[float, float]
    """(candidate, reference) at the last step."""
    goal: float
    meets_goal: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return asdict(self)


def not_comparable(
    candidate_cfg: Mapping[str, Any],
    reference_cfg: Mapping[str, Any],
    candidate_corpus: Mapping[str, Any] | None = None,
    reference_corpus: Mapping[str, Any] | None = None,
) -> list[str]:
    """Why the two runs are not twins (empty when they are): every key that reaches the training step
    (config/training_step.py) and differs, precision aside (model, MoE path, tokens per step, steps, seed, data, ...),
    and different corpus shards."""
    # A corpus's files sit in each machine's cache: its digest below says whether they are the same.
    both = bool(candidate_corpus and reference_corpus)
    reasons = training.differences(candidate_cfg, reference_cfg, MAY_DIFFER + (("data.files",) if both else ()))
    a, b = (training.flatten(c).get("precision.name") for c in (candidate_cfg, reference_cfg))
    if a == b:
        reasons.append("the same precision: nothing to compare")
    if bool(candidate_corpus) != bool(reference_corpus):
        reasons.append("one run has a corpus record (corpus.json) and the other none")
    elif both and candidate_corpus.get("sha256") != reference_corpus.get("sha256"):
        reasons.append(
            f"different corpus shards: sha256 {str(candidate_corpus.get('sha256'))[:16]} vs "
            f"{str(reference_corpus.get('sha256'))[:16]} (another Python or tokenizer)"
        )
    return reasons


def loss_gap(candidate: Sequence[float], reference: Sequence[float], window: float = WINDOW, goal: float = GOAL) -> Gap:
    """The gap over the last `window` of the steps; ValueError when the trajectories cannot be compared."""
    n = len(reference)
    if len(candidate) != n:
        raise ValueError(f"{len(candidate)} steps vs {n}: compare runs of the same length (one schedule)")
    if n < MIN_STEPS:
        raise ValueError(f"{n} steps: at least {MIN_STEPS} are needed")
    bad = [i for i in range(n) if not (math.isfinite(candidate[i]) and math.isfinite(reference[i]))]
    if bad:
        raise ValueError(f"a loss is not finite at step {bad[0]}: the run diverged")
    k = max(1, math.ceil(window * n))
    gaps = [(candidate[i] - reference[i]) / reference[i] for i in range(n - k, n)]
    mean = sum(gaps) / k
    return Gap(
        steps=n,
        window_steps=(n - k, n - 1),
        mean_relative_gap=mean,
        max_abs_relative_gap=max(map(abs, gaps)),
        final_losses=(candidate[-1], reference[-1]),
        goal=goal,
        meets_goal=abs(mean) <= goal,
    )


def describe(g: Gap, candidate: str, reference: str) -> str:
    """One line: the gap, the window and the verdict."""
    verdict = "meets" if g.meets_goal else "**misses**"
    return (
        f"{candidate} vs its bf16 twin {reference}: mean relative loss gap {g.mean_relative_gap:+.2%} over steps "
        f"{g.window_steps[0]}..{g.window_steps[1]} (the last {WINDOW:.0%} of {g.steps}), max |gap| "
        f"{g.max_abs_relative_gap:.2%}, final loss {g.final_losses[0]:.4f} vs {g.final_losses[1]:.4f}: {verdict} the "
        f"goal |gap| <= {g.goal:.0%}"
    )
