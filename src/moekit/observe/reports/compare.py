"""Compare two runs' per-step trajectories (the numerical-equivalence gate; pure).

A step agrees when |candidate - reference| <= atol + rtol * |reference| (numpy.isclose's rule), for the
loss and for the raw (pre-clipping) gradient norm. The gradient norm reacts to a changed update before
the loss does, so a math change shows up at least as early in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moekit.observe.runs.metrics import Metrics, series

LOSS = "learning/loss"
GRAD_NORM = "learning/raw_grad_norm"
COMPARED = (LOSS, GRAD_NORM)


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How close two trajectories must be for one purpose: |c - r| <= atol + rtol * |r| at every step."""

    rtol: float
    atol: float


# `moekit verify`: fp32 runs that only change how the math is computed; docs/metrics.md explains the numbers.
VERIFY = Tolerance(rtol=1e-5, atol=1e-6)
# `moekit tune` and the preset benchmarks: bf16 runs on the GPU. Measured on one H200 (2026-12-02, MaxText 0.2.5,
# jax 0.11.2; docs/metrics.md): dense, tokamax, remat and XLA-flag variants agree to 1e-3 over 12 bf16 steps
# (loss ~10.3 -> 7.68), while a host-offload split was 0.027 off at the second step and 0.16 at the twelfth.
# 2e-3 relative (0.015-0.02 absolute here) passes the first and rejects the second.
TUNE = Tolerance(rtol=2e-3, atol=0.0)
RTOL, ATOL = VERIFY.rtol, VERIFY.atol  # verify's defaults (its --rtol/--atol)


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first disagreement: which key, at which step, and both runs' values there."""

    key: str
    step: int
    reference: float | None
    candidate: float | None
    """None when that run has no value at this step (it stopped early or skipped the key)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The result of comparing two runs: steps compared, largest differences and the first divergence."""

    steps: int
    """Steps compared."""
    max_abs_diff: dict[str, float]
    """Largest |candidate - reference| per compared key."""
    first: Divergence | None
    """The earliest step where any compared key differs beyond tolerance (None: equivalent)."""

    @property
    def ok(self) -> bool:
        """Whether the runs agree within tolerance at every compared step."""
        return self.first is None


def close(a: float, b: float, rtol: float, atol: float) -> bool:
    """The gate's one rule: |a - b| <= atol + rtol * |b| (b: the reference)."""
    return abs(a - b) <= atol + rtol * abs(b)


def compare_losses(reference: Sequence[float], candidate: Sequence[float], tol: Tolerance = TUNE):
    """(ok, max_abs_diff, first_bad_step) of two loss lists over the steps both ran; fewer than 2 is not ok."""
    n = min(len(reference), len(candidate))
    diffs = [abs(c - r) for r, c in zip(reference[:n], candidate[:n], strict=True)]
    bad = next((i for i in range(n) if not close(candidate[i], reference[i], tol.rtol, tol.atol)), None)
    return (n >= 2 and bad is None), max(diffs, default=float("nan")), bad


def compare(reference: Metrics, candidate: Metrics, rtol: float = RTOL, atol: float = ATOL) -> Verdict:
    """Loss and gradient norm of two runs step by step; the first step beyond tolerance, if any."""
    found: list[Divergence] = []
    max_diff: dict[str, float] = {}
    steps = 0
    for key in COMPARED:
        ref, cand = dict(series(reference, key)), dict(series(candidate, key))
        diffs = [abs(cand[s] - ref[s]) for s in ref if s in cand]
        max_diff[key] = max(diffs, default=0.0)
        steps = max(steps, len(ref))
        for step in sorted(ref.keys() | cand.keys()):
            r, c = ref.get(step), cand.get(step)
            if r is None or c is None or not close(c, r, rtol, atol):
                found.append(Divergence(key, step, r, c))
                break
    first = min(found, key=lambda d: (d.step, COMPARED.index(d.key)), default=None)
    if steps == 0 and first is None:
        first = Divergence(LOSS, 0, None, None)  # nothing to compare is never a pass
    return Verdict(steps, max_diff, first)


def describe(v: Verdict, rtol: float, atol: float) -> str:
    """The verdict in one line: equivalent over N steps, or where and by how much it diverges."""
    diffs = ", ".join(f"max |diff| {k.split('/')[-1]} {d:.3g}" for k, d in v.max_abs_diff.items())
    if v.ok:
        return f"equivalent over {v.steps} steps (rtol {rtol:g}, atol {atol:g}; {diffs})"
    d = v.first
    assert d is not None
    ref = "missing" if d.reference is None else f"{d.reference:.6f}"
    cand = "missing" if d.candidate is None else f"{d.candidate:.6f}"
    return (
        f"diverges at step {d.step}: {d.key} reference {ref} vs candidate {cand} "
        f"(rtol {rtol:g}, atol {atol:g}; {diffs})"
    )
