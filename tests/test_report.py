"""`moekit report` on real smoke runs: tables, speed-ups, reference numbers, plots, damaged inputs."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import yaml

from conftest import REPO, moekit
from moekit.observe.reports import published
from moekit.observe.reports import report as rep
from moekit.observe.runs import rundata

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(smoke_sweep):
    folder, proc = smoke_sweep
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    return folder / "0", folder / "1"


def _steady_median(run_dir) -> float:
    """The steady median `moekit train` recorded (summary.json); the report reads the same records again."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["counted_steps"]) >= 3, summary["counted_steps"]
    return summary["step_time_s"]["median"]


@pytest.mark.integration
def test_report_on_two_runs(runs, tmp_path):
    a, b = runs
    proc = moekit("report", str(a), str(b), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "report.md").read_text()
    for section in ("## Runs (measured)", "## Comparison", "## Against reference numbers", "## Plots", "## Notes"):
        assert section in text
    for png in ("step_time.png", "tflops.png", "loss.png"):
        assert (tmp_path / png).read_bytes()[:8] == PNG and f"]({png})" in text
    # The table carries the windows' time per step and the steady median read from the metrics files, hardware and
    # versions.
    ta = _steady_median(a)
    _steady_median(b)  # it has its steady steps too
    row_a = next(line for line in text.splitlines() if line.startswith("| moe=ragged_dot | smoke |"))
    windows = json.loads((a / "summary.json").read_text())["step_time_s"]["per_window"]  # the rates' own time
    assert f"| {windows:.4f} ({ta:.4f}) |" in row_a and "| cpu x1 |" in row_a and "maxtext 0.2.5" in row_a
    comparison = text.split("## Comparison")[1].split("##")[0]
    # Run 2 against run 1: a speed-up, or its ratio where the runs' own spread swallows it (observe/reports/comparable)
    last = comparison.strip().splitlines()[-1]
    rate = [json.loads((r / "summary.json").read_text())["tokens_per_s_per_device"] for r in (a, b)]
    assert f"| {rate[1] / rate[0]:.2f}x |" in last or f"ratio {rate[1] / rate[0]:.2f})" in last, last
    # The CPU has no peak, and tiny models have no published number: both said, nothing invented.
    assert "MFU" in text and "no peak" in text
    assert "No reference number concerns these runs' model (deepseek3-tiny)" in text
    assert "| moe=dense |" in proc.stdout  # the table is printed too


@pytest.mark.integration
def test_single_run_report_goes_into_the_run_dir(runs, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(runs[0], run)
    proc = moekit("report", str(run))
    assert proc.returncode == 0, proc.stderr
    assert (run / "report.md").is_file() and (run / "loss.png").is_file()
    assert "## Comparison" not in (run / "report.md").read_text()


@pytest.mark.integration
def test_truncated_last_line_is_tolerated_and_reported(runs, tmp_path):
    run = tmp_path / "cut"
    shutil.copytree(runs[0], run)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    proc = moekit("report", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "truncated" in proc.stdout
    text = (run / "report.md").read_text()
    assert "was cut off" in text and f"| {len(lines) - 1} (" in text


@pytest.mark.integration
def test_damaged_inputs_are_clear_errors(runs, tmp_path):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(runs[0], corrupt)
    lines = (corrupt / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:20]
    (corrupt / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    missing = tmp_path / "missing"
    shutil.copytree(runs[0], missing)
    (missing / "metrics.jsonl").unlink()
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (corrupt, "metrics.jsonl:2 is not a MaxText metrics record"),
        (missing, "no metrics file"),
        (tmp_path / "nowhere", "is not a directory"),
        (tmp_path, "is a sweep folder, not one run; its runs"),  # a folder of runs: it lists them
        (empty, "not a moekit run directory"),
    ]
    for path, message in cases:
        proc = moekit("report", str(path), "--out", str(tmp_path / "out"))
        assert proc.returncode == 2, (path, proc.stdout)
        assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing written when an input is bad


@pytest.mark.integration
def test_mfu_and_published_comparison_use_the_measured_number(runs):
    run = rundata.load(runs[0])
    measured = run.summary["tflops_per_device"]
    assert measured > 0
    peaks = {"hardware": run.config["hardware"] | {"peak_tflops": {"bf16": 989.0, "fp8": 1979.0}}}
    with_peak = rundata.summarize(run.metrics, run.config | peaks, run.manifest, run.path)  # same steps, its events
    assert with_peak["mfu"] == {"bf16": measured / 989.0, "fp8": measured / 1979.0}
    # The same measurement, as if it came from the 671B model: each published entry gets one "x% of" row.
    cfg = run.config | {"model": run.config["model"] | {"name": "deepseek3-671b"}}
    as_671b = dataclasses.replace(run, config=cfg)
    entries = published.load()
    rows = rep.reference_rows([as_671b], ["r"], entries)
    assert len(rows) == len(published.for_model(entries, "deepseek3-671b")) >= 1
    blog = next(r for r in rows if "Transformer Engine" in r[-1])
    assert blog[2] == "1068" and blog[-1].startswith(f"{measured / 1068:.1%} of NVIDIA technical blog")
    # An experiment's expect: block is a reference too, and keeps its own kind (here: measured elsewhere).
    expect = {"tflops_per_gpu": 2 * measured, "provenance": {"kind": "measured", "source": "earlier H200 run"}}
    rows = rep.reference_rows([dataclasses.replace(run, config=run.config | {"expect": expect})], ["r"], entries)
    assert rows == [
        [
            "r",
            f"{measured:.4g} (cpu x1)",
            f"{2 * measured:g}",
            "measured (experiment expect:)",
            "?",
            "50.0% of earlier H200 run",
        ]
    ]


def test_published_numbers_each_name_their_source(tmp_path, monkeypatch):
    entries = published.load()
    assert len({e["id"] for e in entries}) == len(entries)
    for e in entries:
        assert e["source"] and e["hardware"] in {p.stem for p in (REPO / "conf" / "hardware").glob("*.yaml")}, e["id"]
    assert not any("peak" in k for e in entries for k in e)  # peaks live in conf/hardware only
    assert published.entry(entries, "blog_gb300_1024")["tflops_per_gpu"] == 1068
    # An entry without its source is refused, so none slips into a report bare.
    bare = [e for e in yaml.safe_load((REPO / "src/moekit/data/published.yaml").read_text())] + [{"id": "x"}]
    monkeypatch.setattr(published.resources, "files", lambda _: tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "published.yaml").write_text(yaml.safe_dump(bare))
    with pytest.raises(ValueError, match="x lacks"):
        published.load()


def test_docs_peak_table_matches_the_hardware_files():
    docs = (REPO / "docs" / "metrics.md").read_text()
    for path in sorted((REPO / "conf" / "hardware").glob("*.yaml")):
        hw = yaml.safe_load(path.read_text())
        bf16, fp8 = hw["peak_tflops"]["bf16"], hw["peak_tflops"]["fp8"]
        cells = f"| {hw['name']} | {'-' if bf16 is None else f'{bf16:g}'} | {'-' if fp8 is None else f'{fp8:g}'} |"
        assert cells in docs, f"docs/metrics.md peak table disagrees with {path.name}: want {cells}"
