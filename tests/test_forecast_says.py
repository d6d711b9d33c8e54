"""A forecast says what it knows, from `moekit plan` as a user types it: the printed band and the line saying how it
was chosen agree; outside what the validation spans the band is "not validated"; a configuration that does not fit
is a hypothetical forecast; the domain lists each difference on a line of its own; --search names its ties; and
`plan --help` explains all of it."""

from __future__ import annotations

import functools
import json
import re

from conftest import moekit


@functools.cache  # one text and one JSON run per command line, shared by the tests that read it
def _plan(*args: str) -> tuple[str, dict]:
    text, js = moekit("plan", *args), moekit("plan", *args, "--format", "json")
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    return text.stdout, json.loads(js.stdout)


def _section(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("## forecast"))
    return lines[start : start + 1 + next(i for i, x in enumerate(lines[start + 1 :]) if x.startswith("  other GEMMs"))]


def test_the_printed_band_and_the_line_that_explains_it_agree():
    """dsv3_proxy_h200 is a calibration point: its band is the parameters' (-6.2%/+7.9%), wider than the level's
    +-4.9%; the band line says those numbers, not the level's width alone. dsv3_blog's is the level's +-28.7%."""
    for args in (["experiment=dsv3_proxy_h200"], ["experiment=dsv3_blog"]):
        text, out = _plan(*args)
        f = out["forecast"]
        band = next(x for x in _section(text) if x.startswith("  band "))
        low, high = 1 - f["step_low_s"] / f["step_s"], f["step_high_s"] / f["step_s"] - 1
        got = re.match(r"  band (?:\+-(\S+)%|-(\S+)%/\+(\S+)%) of the step: ", band)
        assert got, band
        lo, hi = (got[1], got[1]) if got[1] else (got[2], got[3])
        assert (float(lo), float(hi)) == (round(100 * low, 1), round(100 * high, 1)), band
        assert f"{f['band_width']:.1%}" in band  # the level's width is named beside it
        assert band == f"  {f['band_text']}" and len(band) < 200


def test_differences_one_per_line_never_x_not_x():
    """dsv3_blog against its nearest calibration point: each difference is 'key: this (te_gmm: that)', and a
    model of the same name shows only the parts that differ."""
    text, out = _plan("experiment=dsv3_blog")
    section = _section(text)
    i = next(i for i, x in enumerate(section) if x.startswith("  domain: "))
    assert section[i - 1].startswith("  band ") and len(section[i]) < 200  # two short lines
    differs = [x.strip() for x in section[i + 1 :] if x.startswith("    ")]
    assert differs == out["forecast"]["domain_differs"] and len(differs) >= 5
    assert all(re.fullmatch(r"[a-z x]+: .+ \(te_gmm: .+\)|work per step: .+", d) for d in differs), differs
    assert "model: 61 layers, 256 experts top-8 (te_gmm: 4 layers, 32 experts top-8)" in differs
    assert not any(", not " in x for x in section)


def test_beyond_the_validation_the_band_is_not_validated():
    """smoke_gpu (0.95 TFLOP/s measured, 85 forecast): no bracketed band that would read as calibrated."""
    text, out = _plan("experiment=smoke_gpu")
    step = next(x for x in _section(text) if x.startswith("  step "))
    assert "[" not in step and step.endswith("(band not validated)")
    assert out["forecast"]["band_validated"] is False


def test_a_configuration_that_does_not_fit_is_forecast_as_hypothetical():
    text, out = _plan("experiment=dsv3_proxy_h200", "train.per_device_batch_size=24")
    assert "WARNING: will not fit" in text
    head = _section(text)[0]
    assert head.startswith("## forecast per device") and ": does not fit: hypothetical" in head
    f = out["forecast"]
    assert (f["fits"], f["status"]) == (False, "does not fit: hypothetical")
    assert _plan("experiment=dsv3_proxy_h200")[1]["forecast"]["status"] == "fits"


def test_search_marks_layouts_inside_the_band_as_ties():
    """The blog's 12 layouts lie within 4% of each other inside a +-28.7% band: every one ties with the first."""
    text, out = _plan("experiment=dsv3_blog", "--search")
    rows, ties = out["search"], out["search_ties"]
    assert ties["tied"] == sum(r["tie_with_first"] for r in rows) and rows[0]["tie_with_first"]
    assert ties["spread"] < ties["high"]
    line = next(x for x in text.splitlines() if x.startswith("  ties: "))
    assert f"{ties['tied']} of {len(rows)} layouts" in line and "the forecast does not order them" in line
    ranked = [x for x in text.splitlines() if re.match(r"\s+\d+\. \d+ devices", x)]
    assert sum(x.endswith("  tie") for x in ranked) == ties["tied"]


def test_plan_help_describes_the_forecast_band_and_domain():
    got = moekit("plan", "--help")
    assert got.returncode == 0
    for needle in ("the forecast:", "band", "domain", "band not validated", "does not fit: hypothetical", "example:"):
        assert needle in got.stdout, needle
