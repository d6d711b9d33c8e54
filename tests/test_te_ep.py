"""The TE MoE block's NCCL EP receive buffers (plan/te_ep.py): TransformerEngine 2.20.2's capacity formula, the
no-drop worst case beside it in `moekit plan`, and a moe=te layout whose estimate does not fit refused before
`moekit train` and `moekit render` with its fix."""

from __future__ import annotations

import json
import random

import pytest

from conftest import compose, moekit
from moekit import plan
from moekit.base.errors import ConfigError
from moekit.config.kinds.families import FAMILIES
from moekit.plan import launch, tables, te_ep


def test_capacity_matches_the_numbers_tes_formula_gives_for_the_blog():
    """DeepSeek-V3 at the blog's layout: 256 experts top-8, EP 8, 6 x 4096 tokens per rank. Worked from TE 2.20.2's
    get_moe_recv_capacity_per_rank by hand: balanced ceil(24,576 x 8 / 32) = 6,144 per local expert, x 32 experts
    x factor 2 = 393,216; worst case min(32 x align(196,608), align(196,608 x 8 + 127 x 32)) = 1,576,960."""
    assert te_ep.capacity(256, 8, 24576, 8, 2.0) == 393_216
    assert te_ep.capacity(256, 8, 24576, 8) == 1_576_960
    # PR #3116's review example: 16 local experts, top-8: the worst case counts top-k, not every local expert
    assert te_ep.capacity(128, 8, 4096, 8) == 264_192  # 8 x 32,768 + 127 x 16 = 264,176, aligned up to 128
    assert te_ep.capacity(256, 8, 24576, 8, 100.0) == te_ep.capacity(256, 8, 24576, 8)  # capped at the worst case


def _routings(n: int, seed: int = 7):
    """n random small cases: (ep, local experts, top_k, tokens per rank, each EP-group token's top_k distinct
    experts), skewed toward this rank's experts half of the time (the load that overflows a capped buffer)."""
    rng = random.Random(seed)
    for _ in range(n):
        ep, local = rng.choice([1, 2, 4]), rng.randint(1, 6)
        top_k, tokens = rng.randint(1, min(4, local * ep)), rng.randint(1, 300)
        experts = range(local * ep)
        skew = rng.random() < 0.5
        picks = []
        for _ in range(ep * tokens):
            mine = rng.sample(range(local), min(top_k, local)) if skew else []
            rest = rng.sample([e for e in experts if e not in mine], top_k - len(mine))
            picks.append(mine + rest)
        yield ep, local, top_k, tokens, picks


@pytest.mark.parametrize("factor", [None, 1.0, 2.0, 3.5])
def test_no_routing_overflows_the_worst_case(factor):
    """Whatever the router picks, the padded demand NCCL EP's expert-major buffer needs on one rank (each non-empty
    local expert's rows aligned to 128) fits the worst-case capacity; a factor's capacity never exceeds it."""
    for ep, local, top_k, tokens, picks in _routings(150):
        counts = [sum(e in p for p in picks) for e in range(local)]
        demand = sum(-(-c // te_ep.ALIGN) * te_ep.ALIGN for c in counts if c)
        worst = te_ep.capacity(local * ep, top_k, tokens, ep)
        assert demand <= worst, (ep, local, top_k, tokens)
        assert te_ep.capacity(local * ep, top_k, tokens, ep, factor) <= worst
        assert worst <= te_ep.ALIGN * (-(-(ep * tokens * top_k + (te_ep.ALIGN - 1) * local) // te_ep.ALIGN))


def test_plan_shows_the_te_buffers_for_the_blogs_layouts_and_a_family_layout():
    text = moekit("plan", "experiment=dsv3_blog")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert "TE NCCL EP receive buffer + expert GEMMs" in out
    assert "TE NCCL EP receive buffer per rank and MoE layer: 393,216 rows" in out and "5.25 GiB" in out
    assert "no-drop worst case: 1,576,960 rows = 21.06 GiB (EP 8 x 24,576 tokens per rank x top_k 8" in out
    assert "get_moe_recv_capacity_per_rank" in out and "an overflowing step: NCCL EP drops the tokens" in out
    for experiment in ("dsv3_blog_1024", "mixtral_8x22b_32gpu ladder=5_nccl_ep"):
        got = moekit("plan", *f"experiment={experiment}".split(), "--format", "json")
        assert got.returncode == 0, got.stderr
        te = json.loads(got.stdout)["memory"]["te_ep"]
        assert te["capacity_rows"] <= te["worst_case_rows"] and te["source"] == te_ep.SOURCE
        assert te["worst_case_gib"] > 0 and te["drop_on_overflow"] == (te["capacity_rows"] < te["worst_case_rows"])


def test_a_layout_whose_te_buffers_do_not_fit_is_refused_before_launch_with_its_fix():
    """The blog's layout with the worst case reserved (ragged_buffer_factor -1: 21 GiB per MoE layer) does not fit a
    GB300; train (even --dry-run) and render refuse it, naming the buffer and the factor that fits."""
    worst = ["experiment=dsv3_blog", "moe.ragged_buffer_factor=-1"]
    dry = moekit("train", *worst, "--dry-run")
    assert dry.returncode == 2, dry.stdout
    assert "moe=te: this layout does not fit a device with the TE block's NCCL EP receive buffers" in dry.stderr
    assert "1,576,960 rows" in dry.stderr and "fix: moe.ragged_buffer_factor=2 " in dry.stderr
    rendered = moekit("render", "experiment=dsv2_lite_8gpu", "ladder=5_nccl_ep", "target=jobset")
    assert rendered.returncode == 2 and not rendered.stdout
    assert "fix: train.per_device_batch_size=" in rendered.stderr and "moe.force=true" in rendered.stderr
    forced = moekit("render", "experiment=dsv2_lite_8gpu", "ladder=5_nccl_ep", "target=jobset", "moe.force=true")
    assert forced.returncode == 0 and "kind: JobSet" in forced.stdout, forced.stderr


def _layouts() -> list[str]:
    return sorted({lay.experiment for f in FAMILIES.values() for lay in f.layouts})


@pytest.mark.parametrize("experiment", ["dsv3_blog", "dsv3_blog_1024", *_layouts()])
def test_every_te_layout_shows_its_buffers_and_is_refused_exactly_when_its_estimate_does_not_fit(experiment):
    """Each family layout on the ladder's TE rung (and the blog's two): the family checks refuse it, or the plan's
    memory fit counts TE's receive buffers and the check before launch refuses it exactly when that fit fails."""
    overrides = [] if experiment.startswith("dsv3_blog") else ["ladder=5_nccl_ep"]
    try:
        cfg = compose(experiment, overrides)
    except ConfigError as refused:  # MaxText's TE block does not run this family's routing (kinds/families.py)
        assert "moe=te with the" in str(refused)
        return
    mem = plan.build(cfg, tables.shipped())["memory"]
    te = mem["te_ep"]
    assert te and te["capacity_rows"] <= te["worst_case_rows"]
    assert any(i["name"] == "TE NCCL EP receive buffer + expert GEMMs" for i in mem["items"])
    fits = mem["device_gib"] <= mem["device_limit_gib"]
    assert (launch.refusal(cfg, tables.shipped()) is None) == fits, mem["device_gib"]
