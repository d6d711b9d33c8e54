"""benchmarks/run_portability.py without a GPU: every run composes and fits, the table arithmetic, --record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import run_portability  # noqa: E402
import run_presets  # noqa: E402


def test_rows_take_any_overrides():
    rows = run_presets.parse_rows(["dense", "tokamax"], ["te_gmm=moe=tokamax train.seed=1"])
    assert list(rows) == ["dense", "tokamax", "te_gmm"]
    assert rows["te_gmm"][0] == ["moe=tokamax", "train.seed=1"]
    with pytest.raises(SystemExit, match="NAME=OVERRIDES"):
        run_presets.parse_rows(["dense"], ["dense=moe=dense"])


@pytest.mark.integration  # spawns the script
def test_dry_run_checks_every_run_and_estimates_the_batch():
    proc = subprocess.run(
        [sys.executable, "benchmarks/run_portability.py", "--dry-run", "--row", "grouped=moe=tokamax"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if "moekit train" in ln]
    assert len(lines) == 2 * 3 and all("(fits)" in ln for ln in lines), proc.stdout
    assert "experiment=qwen3_235b_proxy_h200" in proc.stdout and "experiment=mixtral_8x22b_proxy_h200" in proc.stdout
    assert "# estimated GPU time: ~" in proc.stdout


def _row(step, losses, tflops, batch=(4, 4096), spread=0.02, others=0.0):
    return {
        "spread": spread,
        "others_share": others,
        "overrides": ["experiment=x", "train.steps=3"],
        "status": "ok",
        "step_time_s": step,
        "tokens_per_s_per_device": batch[0] * batch[1] / step,
        "losses": losses,
        "tflops_per_device": tflops,
        "mfu_bf16": tflops / 989,
        "batch": list(batch),
        "versions": {"jax": "0"},
        "date": "2026-12-03",
    }


def test_table_speed_up_and_loss_check_against_the_family_baseline(tmp_path):
    results = {
        "qwen3": {
            "experiment": "qwen3_235b_proxy_h200",
            "reference": "dense",
            "presets": {
                "dense": _row(2.0, [10.0, 9.0, 8.0], 100.0),
                "tokamax": _row(0.5, [10.0, 9.001, 8.0], 400.0),
                "bad": _row(1.0, [10.0, 9.5, 8.0], 200.0),
                "batch8": _row(1.0, [10.0, 9.0, 8.0], 200.0, batch=(8, 4096)),
                "close": _row(1.98, [10.0, 9.0, 8.0], 101.0, spread=0.03),
                "unmeasured": _row(1.0, [10.0, 9.0, 8.0], 200.0, others=None),
            },
        }
    }
    text = run_portability.table(results)
    row = {line.split("|")[3].strip(): line for line in text.splitlines() if line.startswith("| qwen3")}
    assert "| 4.00x |" in row["tokamax"] and "ok (max diff" in row["tokamax"]
    assert "| baseline | reference |" in row["dense"]
    # the speed-up rule of report and tune (observe/reports/comparable.py): beyond the noise both runs measured
    assert "| n/a (within noise (±3%); ratio 1.01) |" in row["close"]
    assert "n/a (host load unknown for this run" in row["unmeasured"]
    assert "**diverges** at step 1" in row["bad"]
    assert "| n/a (other tokens/step) |" in row["batch8"]  # a speed-up only at the same tokens per step
    doc = tmp_path / "performance.md"
    main, own = (run_presets.markers(s, "portability", "run_portability.py") for s in ("", "gpt_oss"))
    doc.write_text(f"before\n{main[0]}\nold\n{main[1]}\n{own[0]}\nkept\n{own[1]}\nafter\n")
    (tmp_path / "p.json").write_text(json.dumps(results))
    run_portability.record([tmp_path / "p.json"], doc)
    assert "old" not in doc.read_text() and "| qwen3 |" in doc.read_text() and doc.read_text().endswith("after\n")
    assert "kept" in doc.read_text()  # a named section is another table
    run_portability.record([tmp_path / "p.json"], doc, "gpt_oss")
    assert "kept" not in doc.read_text() and doc.read_text().count("| qwen3 |") == 2 * len(row)


def test_a_failed_row_whose_error_holds_a_pipe_stays_one_row_of_the_table():
    failed = {
        "overrides": ["experiment=x", "train.steps=3", "moe=te_gmm", "precision=fp8"],
        "status": "failed",
        "error": "| RuntimeError: generator didn't stop after throw()",
        "batch": [4, 4096],
    }
    results = {"mixtral": {"experiment": "mixtral_8x22b_proxy_h200", "reference": "fp8", "presets": {"fp8": failed}}}
    text = run_portability.table(results, "NVIDIA H100 80GB HBM3")
    row = next(line for line in text.splitlines() if line.startswith("| mixtral"))
    header = next(line for line in text.splitlines() if line.startswith("| family"))
    assert "failed: \\| RuntimeError" in row
    assert row.replace("\\|", "").count("|") == header.count("|")  # the escaped pipe opens no cell
    assert "(H100 SXM datasheet)" in text and "one NVIDIA H100 80GB HBM3" in text
