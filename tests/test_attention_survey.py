"""benchmarks/attention_survey.py's wiring on CPU (the kernels are timed on the GPU machine): MaxText's dot_product
and tokamax's chunked XLA attention match the fp32 reference, a GPU-only kernel is an error row rather than the end
of the table, the FLOPs are MaxText's causal count, and the recorded table puts the fastest same-model row first."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SPEC = importlib.util.spec_from_file_location("attention_survey", REPO / "benchmarks" / "attention_survey.py")
survey = importlib.util.module_from_spec(SPEC)
sys.path.insert(0, str(REPO / "benchmarks"))
SPEC.loader.exec_module(survey)


def test_flops_are_maxtexts_causal_count():
    # MaxText's calculate_mla_tflops_per_device: 2 * B*S * S * H * (dqk + dv), halved for the causal mask
    assert survey.attention_flops(6, 4096, 128, 192, 128) == 2 * 6 * 4096 * 4096 * 128 * 320 / 2


@pytest.mark.integration  # imports MaxText and runs attention on CPU (about 30 s)
def test_cpu_rows_match_the_reference_and_a_gpu_kernel_is_an_error_row(tmp_path):
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "attention_survey.py"),
        "--out",
        str(tmp_path),
        "--seq",
        "64",
        "--shapes",
        "mla:2:2:24:16",
        "--repeats",
        "1",
        "--implementations",
        "maxtext:dot_product,tokamax:xla_chunked,tokamax:mosaic",
    ]
    proc = subprocess.run(cmd, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "attention_survey.json").read_text())
    rows = {r["implementation"]: r for r in result["rows"]}
    for name in ("maxtext:dot_product", "tokamax:xla_chunked"):
        assert rows[name]["status"] == "same" and rows[name]["fwd_ms"] > 0 and rows[name]["train_tflops"] > 0
    assert rows["tokamax:mosaic"]["status"] == "error" and rows["tokamax:mosaic"]["error"]
    result["provenance"]["device"] = "NVIDIA H200"  # the table's percentage column reads the device's peak
    table = survey.table(result)
    body = [line for line in table.splitlines() if line.startswith("| ") and "implementation" not in line]
    assert body[-1].startswith("| tokamax:mosaic") and "error" in body[-1]  # errors last, same-model rows first
    fastest = max(("maxtext:dot_product", "tokamax:xla_chunked"), key=lambda n: rows[n]["train_tflops"])
    assert body[0].startswith(f"| {fastest} ")
