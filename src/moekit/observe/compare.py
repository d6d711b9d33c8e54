"""Compare two runs' per-step trajectories (the numerical-equivalence gate; pure).

A step agrees when |candidate - reference| <= atol + rtol * |reference| (numpy.isclose's rule), for the
loss and for the raw (pre-clipping) gradient norm. The gradient norm reacts to a changed update before
the loss does, so a math change shows up at least as early in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from moekit.observe.metrics import Metrics, series

LOSS = "learning/loss"
GRAD_NORM = "learning/raw_grad_norm"
COMPARED = (LOSS, GRAD_NORM)

# Defaults for fp32 runs; docs/metrics.md explains the numbers behind them.
RTOL = 1e-5
ATOL = 1e-6


@dataclass(frozen=True, slots=True)
class Divergence:
    key: str
    step: int
    reference: float | None
    candidate: float | None
    """None when that run has no value at this step (it stopped early or skipped the key)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    steps: int
    """Steps compared."""
    max_abs_diff: dict[str, float]
    """Largest |candidate - reference| per compared key."""
    first: Divergence | None
    """The earliest step where any compared key differs beyond tolerance (None: equivalent)."""

    @property
    def ok(self) -> bool:
        return self.first is None


def close(a: float, b: float, rtol: float, atol: float) -> bool:
    return abs(a - b) <= atol + rtol * abs(b)


def compare(reference: Metrics, candidate: Metrics, rtol: float = RTOL, atol: float = ATOL) -> Verdict:
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
