"""benchmarks/attention_parity.py's wiring on CPU (the kernels themselves are measured on the GPU machine): MaxText's
dot_product attention matches the fp32 reference in every layout, a kernel that cannot run here becomes an error row
rather than the end of the table, and the lengths TE would read from MaxText's dense mask are printed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SPEC = importlib.util.spec_from_file_location("attention_parity", REPO / "benchmarks" / "attention_parity.py")
parity = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(parity)


@pytest.mark.integration  # imports MaxText and runs its attention op on CPU (about 30 s)
def test_dot_product_matches_the_fp32_reference_in_every_layout(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "attention_parity.py"),
        "--out",
        str(tmp_path),
        "--seq",
        "64",
        "--shapes",
        "mla:2:2:24:16,gqa:4:2:16:16",
        "--kernels",
        "dot_product,cudnn_flash_jax",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "attention_parity.json").read_text())
    rows = {(r["kernel"], r["shape"], r["layout"]): r for r in result["rows"]}
    assert len(rows) == 2 * 2 * len(parity.LAYOUTS)
    for (kernel, _, _), row in rows.items():
        if kernel == "dot_product":
            assert row["status"] == "same" and row["zero_rows"] == 0, row
            assert max(row[n] for n in ("forward", "dq", "dk", "dv")) < parity.TOLERANCE
        else:  # cuDNN is not on this machine: an error row, named
            assert row["status"] == "error" and row["error"], row
    lengths = result["te_lengths_from_dense_mask"]
    assert lengths["bshd"]["q_seqlen"] == [64]  # one segment: TE sees the whole row
    packed = lengths["bshd_packed"]
    assert packed["segments"][0] >= 2 and packed["q_seqlen"][0] < 64  # several: only the first one's length


def test_the_reference_keeps_tokens_inside_their_segment():
    """Discriminating power: with two segments, a token of the second attends to none of the first."""
    import jax.numpy as jnp

    s = 8
    q = jnp.ones((1, s, 1, 4))
    k = jnp.ones((1, s, 1, 4))
    v = jnp.broadcast_to(jnp.arange(s, dtype=jnp.float32)[None, :, None, None], (1, s, 1, 4))
    one = parity._reference(q, k, v, jnp.ones((1, s), jnp.int32), jnp.ones((1, s, 1, 4)))["forward"]
    two = parity._reference(q, k, v, jnp.array([[1] * 4 + [2] * 4]), jnp.ones((1, s, 1, 4)))["forward"]
    # equal logits: a token's output is the mean of the values it may see
    assert float(one[0, 4, 0, 0]) == pytest.approx(2.0)  # positions 0..4
    assert float(two[0, 4, 0, 0]) == pytest.approx(4.0)  # its own segment only: position 4


def test_the_table_names_each_row_and_its_loss_check():
    result = {
        "tolerance": 0.05,
        "provenance": {"device": "NVIDIA H200", "date": "2026-12-07", "jax": "0.11.2", "maxtext": "0.2.5"},
        "rows": [
            {
                "kernel": "cudnn_flash_te",
                "shape": "mla",
                "layout": "bshd_packed",
                "seq": 4096,
                "status": "differs",
                "dims": [128, 128, 192, 128],
                "forward": 0.9,
                "dq": 0.8,
                "dk": 0.7,
                "dv": 0.6,
                "zero_rows": 0.93,
            },
            {
                "kernel": "cudnn_flash_jax",
                "shape": "gqa",
                "layout": "thd",
                "seq": 4096,
                "status": "error",
                "dims": [64, 8, 128, 128],
                "error": "RuntimeError: cuDNN is not detected.",
            },
        ],
    }
    text = parity.table(result, {"cudnn_flash_te/mla/bshd_packed": "fail (verify.json)"})
    assert "| cudnn_flash_te | mla: heads 128/128, q/k 192, v 128 | bshd_packed | 9.0e-01 |" in text
    assert "| 93% | differs | fail (verify.json) |" in text
    assert "| cudnn_flash_jax | gqa: heads 64/8, q/k 128, v 128 | thd | error |" in text and "not run |" in text
