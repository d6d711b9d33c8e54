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


PNG = b"\x89PNG\r\n\x1a\n"


def _check_recorded(run, steps: list[int], layers: int = 3, experts: int = 8, assignments: int = 512) -> dict:
    """The run's routing records: the sampled steps, every MoE layer's counts (smoke: 3 MoE layers of 8 experts;
    2 sequences x 128 tokens x top-2 = 512 assignments a step), and its summary section."""
    records = routing.read(run / routing.FILE)
    assert sorted(records) == steps, records.keys()
    for rec in records.values():
        assert len(rec["layers"]) == layers and rec["ep"] == 1
        assert all(len(c) == experts and sum(c) == assignments for c in rec["counts"]), rec["counts"]
    section = json.loads((run / "summary.json").read_text())[routing.KEY]
    assert section["sampled_steps"] == steps and section["experts"] == experts and section["moe_layers"] == layers
    assert 1.0 <= section["max_over_mean"]["median"] <= experts
    return records


@pytest.mark.integration
def test_ragged_dot_and_dense_runs_record_their_routing_and_the_report_draws_it(smoke_sweep):
    """The shared sweep (moe=ragged_dot, moe=dense; 10 steps, run.routing_every's default 5): both record steps 0
    and 5, and at step 0 the first MoE layer (same weights, same batch, same code before it) routes alike."""
    folder, proc = smoke_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    ragged, dense = (_check_recorded(folder / str(i), [0, 5]) for i in (0, 1))
    assert ragged[0]["counts"][0] == dense[0]["counts"][0]
    assert (folder / "routing.png").read_bytes()[:8] == PNG
    assert "routing.png" in (folder / "report.md").read_text()


@pytest.mark.integration
@pytest.mark.soak
@pytest.mark.parametrize("backend", ["megablox"])
def test_the_other_dropless_back_ends_record_their_routing(tmp_path, backend):
    """The CPU back ends the sweep does not train (te_gmm's CPU wiring: tests/test_te_gmm.py; moe=tokamax runs on GPU
    only, refused on CPU: tests/test_checks.py): 2 steps, each sampled."""
    from conftest import moekit

    run = tmp_path / backend
    command = ["train", "experiment=smoke", f"moe={backend}", "train.steps=2", "run.routing_every=1"]
    proc = moekit(*command, f"run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    _check_recorded(run, [0, 1])
