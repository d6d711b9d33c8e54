"""Hugging Face checkpoints in and out, and every family's logits against its transformers reference.

The reference models come from .venv-ref (torch + transformers on CPU, `make venv-ref`; `make test` builds it):
tests/reference/hf_tiny.py runs there in a subprocess. Without it these tests fail, saying how to build it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, losses, moekit

sys.path.insert(0, str(REPO / "tests" / "reference"))
import parity  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("hf")


def reference(family: str, out, tokens=None):
    parity.reference(family, out, tokens)
    return json.loads((out / "reference.json").read_text()) if tokens is not None else None


def imported(family: str, option: str, work):
    ref = work / family
    if not ref.exists():
        reference(family, ref)
    out = work / f"{family}-ckpt"
    if not out.exists():
        p = moekit("checkpoint", "import", "--family", option, str(ref), "precision=fp32", "--out", str(out))
        assert p.returncode == 0, p.stderr[-3000:]
        assert re.search(r"imported .*: \d+ tensors, [\d,]+ parameters, [\d.]+ MiB in [\d.]+ s", p.stdout), p.stdout
    return ref, out


def test_import_refuses_another_family_before_writing(work):
    ref = work / "mixtral"
    reference("mixtral", ref)
    out = work / "refused"
    p = moekit("checkpoint", "import", "--family", "qwen3_30b_a3b", str(ref), "--out", str(out))
    assert p.returncode == 2 and "family mismatch: the checkpoint is mixtral" in p.stderr, p.stderr[-2000:]
    assert not out.exists()


def test_an_import_onto_a_disk_without_room_is_refused_before_converting(work, tmp_path):
    """A 128 KiB disk for a 0.4 MiB checkpoint: one line with what it needs and what is free, exit 2, nothing left
    there (mid-write, the writers' background threads printed ~20 tracebacks before the one line)."""
    from conftest import mount_tmpfs

    ref = work / "mixtral"
    if not ref.exists():
        reference("mixtral", ref)
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "128k")
    try:
        p = moekit("checkpoint", "import", "--family", "mixtral_8x22b", str(ref), "--out", str(disk / "ck"))
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert re.search(r"import writes about 0\.4 MiB into .*disk, whose disk has 0\.\d MiB free", p.stderr), p.stderr
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_import_refuses_a_tensor_of_another_shape_naming_it(work):
    from safetensors.numpy import load_file, save_file

    bad = work / "qwen3-bad"
    reference("qwen3_moe", bad)
    tensors = load_file(str(bad / "model.safetensors"))
    name = "model.layers.1.self_attn.k_proj.weight"
    tensors[name] = np.zeros((16, 64), np.float32)
    save_file(tensors, str(bad / "model.safetensors"))
    out = work / "refused-shape"
    p = moekit("checkpoint", "import", "--family", "qwen3_30b_a3b", str(bad), "--out", str(out))
    assert p.returncode == 2 and f"tensor {name}: shape (16, 64)" in p.stderr, p.stderr[-2000:]
    assert not out.exists()


@pytest.mark.parametrize(
    ("family", "option"),
    [("deepseek3", "deepseek3_671b"), pytest.param("qwen3_moe", "qwen3_30b_a3b", marks=pytest.mark.soak)],
)
def test_step0_loss_of_a_run_from_the_import_is_the_reference_loss(family, option, work, tmp_path):
    ref, ckpt = imported(family, option, work)
    record = json.loads((ckpt / "moekit-import.json").read_text())
    # MaxText's synthetic batch: randint(PRNGKey(0)) under the unsafe_rbg PRNG its trainer selects (train.py).
    probe = (
        "import jax, numpy as np; jax.config.update('jax_default_prng_impl', 'unsafe_rbg');"
        f"np.save('{tmp_path}/t.npy', np.asarray(jax.random.randint(jax.random.PRNGKey(0), (2, 17), 0, 256)))"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin"})
    expected = reference(family, tmp_path / "ref", tmp_path / "t.npy")["loss"]
    run = moekit(
        "train",
        "experiment=smoke",
        f"model={option}",
        f"checkpoint.init_from={ckpt}",
        *record["overrides"],
        "precision=fp32",
        "train.steps=1",
        "train.seq_len=16",
        f"run.base_dir={tmp_path}/runs",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (metrics,) = (tmp_path / "runs").rglob("metrics.jsonl")
    assert losses(metrics.parent)[0] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    ("family", "option"),
    [pytest.param("qwen3_moe", "qwen3_30b_a3b", marks=pytest.mark.soak), ("deepseek3", "deepseek3_671b")],
)
def test_import_then_export_gives_every_tensor_bit_for_bit(family, option, work):
    """deepseek3 carries the selection bias (MoEBiasVar, stacked on axis 0 of a scanned model, not the params'
    scan axis), which MaxText's to_huggingface alone cuts per expert."""
    from safetensors.numpy import load_file

    ref, ckpt = imported(family, option, work)
    out = work / f"{family}-exported"
    shutil.rmtree(out, ignore_errors=True)
    p = moekit("checkpoint", "export", str(ckpt), "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = load_file(str(ref / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name


def test_init_from_an_import_of_another_model_is_refused_before_launch(work, tmp_path):
    """The import's record (moekit-import.json: family, overrides, the checkpoint's config.json, scan_layers) is
    compared with the configured model by the host probe, before MaxText starts: another family, or any value that
    sets a parameter's shape, is refused with the overrides that give the import's model; a value that changes only
    what the model computes is a note."""
    from conftest import compose
    from moekit.preflight import checkpoint as checkpoint_preflight

    _, ckpt = imported("qwen3_moe", "qwen3_30b_a3b", work)
    record = json.loads((ckpt / "moekit-import.json").read_text())
    assert record["family"] == "qwen3_30b_a3b" and record["scan_layers"] is True and record["tensors"] > 0
    same = ["model=qwen3_30b_a3b", f"checkpoint.init_from={ckpt}", *record["overrides"]]

    def check(*overrides):
        return checkpoint_preflight.problems(compose("smoke", [*same, *overrides]))

    problems, notes = check()
    assert problems == [] and "(qwen3_moe, " in notes[0] and "fits model=qwen3-30b-a3b" in notes[0]
    ((p,), _) = check("model.num_experts=16")
    assert p.key == "checkpoint.init_from"
    assert "at 'experts' the configured model has 16, the imported checkpoint 8" in p.what, p.what
    assert p.fix.startswith("give the run the import's model: model=qwen3_30b_a3b ")
    ((p,), _) = check("model=mixtral_8x7b")
    assert "holds a qwen3_moe checkpoint (imported with --family qwen3_30b_a3b" in p.what, p.what
    assert "configured model is decoder mixtral" in p.what
    ((p,), _) = check("maxtext.extra.scan_layers=false")
    assert "imported with scan_layers=True, the run has scan_layers=False" in p.what, p.what
    problems, notes = check("model.extra.rope_max_timescale=500000")
    assert problems == [] and "computes otherwise than the imported model at rope_theta" in notes[1], notes
    run = moekit(
        "train", "experiment=smoke", *same, "model.num_experts=16", f"run.base_dir={tmp_path}/runs", "--dry-run"
    )
    assert run.returncode == 2 and "at 'experts' the configured model has 16" in run.stderr, run.stderr[-2000:]


def _numbers(cells: list[str]) -> list[str]:
    """The numbers of a parity row's cells, in order ("2.80e-06 (9.5e-07)", "1.3e-13" -> three)."""
    return [m for c in cells for m in re.findall(r"[\d.]+e[+-]\d+", c)]


def test_logits_parity_table_is_measured():
    """docs/adapting.md's table is what tests/reference/parity.py measures now (numbers to 1 significant digit
    of their exponent band, status exactly)."""
    doc = (REPO / "docs" / "adapting.md").read_text(encoding="utf8")
    pinned = doc.split(parity.BEGIN)[1].split(parity.END)[0].strip().splitlines()[2:]
    measured = parity.main(write=False).splitlines()[2:]
    assert len(pinned) == len(measured)
    for old, new in zip(pinned, measured, strict=True):
        o, n = [c.strip() for c in old.split("|")], [c.strip() for c in new.split("|")]
        assert o[1:4] == n[1:4] and o[6] == n[6], (old, new)
        # The numbers (max abs diff, its relative size, KL) float with threads and BLAS from machine to machine,
        # within a decade of what was pinned; a diff computed wrongly (a scale, a slice) moves them further.
        numbers = [(float(a), float(b)) for a, b in zip(_numbers(o[4:6]), _numbers(n[4:6]), strict=True)]
        assert all(b == a or 0.1 <= b / a <= 10 for a, b in numbers), (old, new)
        if o[6] == "match":
            rel = float(re.search(r"\(([\d.e+-]+)\)", n[4]).group(1))
            assert rel <= parity.TOLERANCE, new
