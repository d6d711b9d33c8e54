"""The routing load: what a run's routing records say (observe/runs/routing.py), and a real CPU run that
records them (worker/routing.py) for every dropless back end this host trains."""

from __future__ import annotations

import json
import random

import pytest

from moekit.observe.runs import routing


def test_a_layers_load():
    even = routing.load([4, 4, 4, 4])
    assert even == {"max_over_mean": 1.0, "busiest_share": 0.25, "cv": 0.0, "rank_max_over_mean": None, "rank_cv": None}
    skewed = routing.load([10, 2, 2, 2], ep=2)
    assert skewed["max_over_mean"] == 2.5 and skewed["busiest_share"] == 10 / 16
    assert skewed["cv"] == pytest.approx(3.4641 / 4, abs=1e-4)  # pstdev of (10, 2, 2, 2) over their mean 4
    assert skewed["rank_max_over_mean"] == 12 * 2 / 16  # ranks hold experts {0, 1} and {2, 3}
    assert skewed["rank_cv"] == pytest.approx(0.5)  # ranks 12 and 4 around 8
    assert set(routing.load([0, 0]).values()) == {None}


def _cases(n: int = 400) -> list[tuple[int, list[int]]]:
    """Seeded random loads: EP 1-4, 1-8 experts per rank, counts from all-zero to one hot expert."""
    rng = random.Random(55)
    out = []
    for _ in range(n):
        ep = rng.randint(1, 4)
        e = ep * rng.randint(1, 8)
        skew = rng.choice([0, 1, 10, 10_000])
        out.append((ep, [rng.randint(0, skew) for _ in range(e)]))
    return out


def test_load_bounds():
    """Property: max/mean lies in [1, experts], the busiest share in [1/experts, 1], and a rank's max/mean and cv
    never exceed an expert's (a block's sum is at most block x the busiest expert; Cauchy-Schwarz for the cv)."""
    for ep, counts in _cases():
        _check_bounds(ep, counts)


def _check_bounds(ep: int, counts: list[int]) -> None:
    got = routing.load(counts, ep)
    if sum(counts) == 0:
        assert set(got.values()) == {None}
        return
    e = len(counts)
    assert 1 - 1e-9 <= got["max_over_mean"] <= e + 1e-9
    assert 1 / e - 1e-9 <= got["busiest_share"] <= 1 + 1e-9
    assert got["cv"] >= 0
    if ep > 1:
        assert 1 - 1e-9 <= got["rank_max_over_mean"] <= got["max_over_mean"] + 1e-9
        assert got["rank_cv"] <= got["cv"] + 1e-9
    else:
        assert got["rank_max_over_mean"] is None and got["rank_cv"] is None


def test_records_of_one_step_add_up_and_bad_lines_are_skipped(tmp_path):
    path = tmp_path / routing.FILE
    rec = {"step": 0, "t": 1.0, "ep": 1, "layers": ["moe[0]", "moe[1]"], "counts": [[3, 1], [2, 2]]}
    lines = [
        json.dumps(rec),
        json.dumps(rec | {"t": 2.0}),  # a second microbatch of the same step
        json.dumps(rec | {"step": 5, "counts": [[1, 3], [4, 0]]}),
        json.dumps(rec | {"step": 6, "counts": [[1, -3], [4, 0]]}),  # a negative count: not a record
        json.dumps(rec | {"step": 7, "counts": [[1, 3]]}),  # layers and counts disagree
        '{"step": 8, "coun',  # cut off by a kill
    ]
    path.write_text("\n".join(lines))
    got = routing.read(path)
    assert sorted(got) == [0, 5]
    assert got[0]["counts"] == [[6, 2], [4, 4]]
    section = routing.summarize(got, every=5)
    assert section["sampled_steps"] == [0, 5] and section["experts"] == 2 and section["moe_layers"] == 2
    assert section["max_over_mean"] == {"median": 1.5, "max": 2.0, "min": 1.0}
    assert section["per_layer"]["moe[1]"]["busiest_share"]["max"] == 1.0
    assert "rank_max_over_mean" not in section
