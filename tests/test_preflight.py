"""Host probes before launch (moekit.preflight.host): the same table for a real run and for --dry-run, fatal only
where this host is the job's target; the XLA flags the installed XLA knows; MaxText's validator and its cache."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import compose, moekit, mount_tmpfs
from moekit.base import cache
from moekit.config.checks import checkpoint as checkpoint_checks
from moekit.preflight import checkpoint as checkpoint_preflight
from moekit.preflight import host as preflight
from moekit.preflight import maxtext_validate, xla_flags
from moekit.translate.job import build


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB file system with no space left."""
    where = tmp_path / "full"
    mount_tmpfs(where, "64k")
    try:
        try:
            with open(where / "filler", "wb") as fh:
                while True:
                    fh.write(b"x" * 4096)
                    fh.flush()
        except OSError:  # ENOSPC: full
            pass
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


# ---- which host is the target ----


@pytest.mark.parametrize(
    "overrides, environ, target",
    [
        ([], {}, True),
        (["hardware=h200", "moe=tokamax"], {}, False),  # this host has no GPU
        (["cluster=jobset"], {}, False),
        (["cluster=jobset"], {"MOEKIT_COORDINATOR_HOST": "x-workers-0-0.x"}, True),
        (["cluster=slurm"], {}, False),
        (["cluster=slurm"], {"SLURM_JOB_ID": "7"}, True),
    ],
)
def test_the_target_host(overrides, environ, target, tmp_path):
    cfg = compose("smoke", overrides)
    assert preflight.is_target(cfg, preflight.Host(environ, dev=tmp_path))[0] is target


def test_dry_run_reports_what_the_target_would_refuse(tmp_path):
    """The GPU probe the real run fails on runs in --dry-run too, reported since this host is not the target."""
    if Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    args = ["train", "experiment=smoke", "hardware=h200", "moe=tokamax", f"run.base_dir={tmp_path}"]
    dry = moekit(*args, "--dry-run", "--format", "json", timeout=300)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)["preflight"]
    assert report["target"] is False and "has none" in report["why"]
    assert [p["key"] for p in report["problems"]] == ["hardware=h200"]  # the validator ran too, and passed
    real = moekit(*args, timeout=300)
    assert real.returncode == 2 and "needs NVIDIA GPUs" in real.stderr and not list(tmp_path.iterdir())


def test_dry_run_of_a_jobset_outside_its_pod(tmp_path):
    dry = moekit("train", "experiment=smoke", "cluster=jobset", "--dry-run", timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert "# preflight (this host is not the target" in dry.stdout
    assert "cluster=jobset: MOEKIT_COORDINATOR_HOST is not set" in dry.stdout


# ---- the run directory ----


def test_run_dir_on_a_full_disk(full_disk):
    cfg = compose("smoke", [f"run.dir={full_disk}/run"])
    (found,) = preflight.run_dir_usable(cfg, preflight.Host({}))
    assert found.key == "run.dir" and "no free space left" in found.what
    proc = moekit("train", "experiment=smoke", f"run.dir={full_disk}/run")
    assert proc.returncode == 2 and "no free space left" in proc.stderr and "Traceback" not in proc.stderr
    assert not (full_disk / "run").exists()


def test_run_dir_probe_leaves_nothing_behind(tmp_path):
    cfg = compose("smoke", [f"run.base_dir={tmp_path}/base"])
    assert list(preflight.run_dir_usable(cfg, preflight.Host({}))) == []
    assert list(tmp_path.iterdir()) == []


# ---- checkpoint.init_from ----


def test_init_from_that_does_not_exist_is_refused_before_launch(tmp_path):
    missing = tmp_path / "no-such-import"
    proc = moekit("train", "experiment=smoke", f"checkpoint.init_from={missing}", f"run.base_dir={tmp_path}/runs")
    assert proc.returncode == 2 and f"checkpoint.init_from: {missing} does not exist" in proc.stderr, proc.stderr
    assert "fix: checkpoint.init_from=<the --out folder of `moekit checkpoint import" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def test_init_from_must_be_the_folder_an_import_wrote(tmp_path):
    (tmp_path / "hf").mkdir()  # a Hugging Face folder, say: no 0/items
    (tmp_path / "step" / "items").mkdir(parents=True)  # a run's checkpoints/<step>
    (tmp_path / "ckpt" / "0" / "items").mkdir(parents=True)
    (tmp_path / "file").write_text("x")

    def found(path):
        cfg = compose("smoke", [f"checkpoint.init_from={path}"])
        problems, notes = checkpoint_preflight.problems(cfg)
        return [f"{p.what} | {p.fix}" for p in problems], notes

    assert "has no 0/items: it is not a checkpoint `moekit checkpoint import` wrote" in found(tmp_path / "hf")[0][0]
    assert "holds items/ but no 0/items" in found(tmp_path / "step")[0][0]
    assert "is a file" in found(tmp_path / "file")[0][0]
    assert found(tmp_path / "ckpt/0/items")[0][0].endswith(f"| checkpoint.init_from={tmp_path / 'ckpt'}")
    # The layout alone, when no import record says what model it holds: a note says the model is not checked.
    problems, notes = found(tmp_path / "ckpt")
    assert problems == [] and "no moekit-import.json, so its model is not checked" in notes[0]
    (tmp_path / "ckpt" / "moekit-import.json").write_text("{")
    problems, notes = found(tmp_path / "ckpt")
    assert problems == [] and "moekit-import.json cannot be read" in notes[0]
    # The probe is in the table a real run and --dry-run run.
    assert "checkpoint.init_from" in [p.name for p in preflight.PROBES if not p.costly]


@pytest.mark.parametrize("given", ["/ckpt/dsv2/0/items", "/ckpt/dsv2/0/items/", "  "])
def test_init_from_naming_the_items_folder_is_a_config_problem(given):
    """Pure: refused on any host, the folder seen or not (MaxText appends 0/items itself)."""
    (found,) = checkpoint_checks.init_from_names_the_import(compose("smoke", [f"checkpoint.init_from='{given}'"]))
    assert found.key == "checkpoint.init_from"
    assert found.fix.startswith("checkpoint.init_from=/ckpt/dsv2 ") if given.strip() else "is empty" in found.what


# ---- the XLA flags the installed XLA knows ----


def test_xla_knows_the_blog_flags_and_names_unknown_ones(tmp_path):
    """A real XLA start per question; GPU flags are answered by the CPU jaxlib (it registers every DebugOptions)."""
    env = {"MOEKIT_CACHE_DIR": str(tmp_path)}
    blog = build(compose("smoke", ["xla=blog"]), "/r", "/r/m").xla_flags
    assert any(f.startswith("--xla_gpu_") for f in blog)
    flags = [*blog, "--xla_gpu_no_such_flag=true", "--xla_gpu_enable_latency_hiding_scheduler=maybe"]
    start = time.monotonic()
    version, found = xla_flags.verdicts(flags, env)
    first = time.monotonic() - start
    assert {f: v for f, v in found.items() if v != xla_flags.OK} == {
        "--xla_gpu_no_such_flag=true": xla_flags.UNKNOWN,
        "--xla_gpu_enable_latency_hiding_scheduler=maybe": xla_flags.BAD_VALUE,
    }
    assert version == xla_flags.jaxlib_version()
    stored = json.loads((tmp_path / f"xla-flags-jaxlib-{version}.json").read_text())
    assert stored == found
    start = time.monotonic()
    assert xla_flags.verdicts(flags, env) == (version, found)  # from the cache: no XLA started
    assert time.monotonic() - start < min(0.5, first / 4)


def test_cached_verdicts_are_what_the_probe_uses(tmp_path):
    """The cache is per jaxlib version and is believed: a verdict planted there is the answer (nothing runs)."""
    env = {"MOEKIT_CACHE_DIR": str(tmp_path)}
    version = xla_flags.jaxlib_version()
    cache.write(f"xla-flags-jaxlib-{version}.json", {"--xla_planted=1": xla_flags.UNKNOWN}, env)
    assert xla_flags.verdicts(["--xla_planted=1"], env) == (version, {"--xla_planted=1": xla_flags.UNKNOWN})


def test_without_jaxlib_the_probe_says_it_cannot_answer(monkeypatch):
    monkeypatch.setattr(xla_flags, "jaxlib_version", lambda: None)
    cfg = compose("smoke", ["xla=blog"])
    (found,) = preflight.xla_flags_known(cfg, preflight.Host({}))
    assert found.key == "xla.flags" and "cannot check the XLA flags on this host" in found.what
    assert "moekit train checks them there before it launches" in found.fix


def test_inherited_xla_flags_are_checked_too(tmp_path):
    host = preflight.Host(
        {"XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_inherited_typo=1", "MOEKIT_CACHE_DIR": str(tmp_path)}
    )
    (found,) = preflight.xla_flags_known(compose("smoke"), host)
    assert found.key == "XLA_FLAGS (environment)" and "has no flag xla_inherited_typo" in found.what


# ---- MaxText's validator, cached by config hash ----


def test_validator_answers_once_per_config(tmp_path):
    env = {**os.environ, "MOEKIT_CACHE_DIR": str(tmp_path)}
    cfg = compose("smoke", ["train.steps=7"])
    args = build(cfg, preflight.VALIDATE_DIR, f"{preflight.VALIDATE_DIR}/m.jsonl").maxtext_args
    start = time.monotonic()
    assert maxtext_validate.validate(args, cfg.num_devices, cfg.num_slices, environ=env) is False  # ran MaxText
    cold = time.monotonic() - start
    start = time.monotonic()
    assert maxtext_validate.validate(args, cfg.num_devices, cfg.num_slices, environ=env) is True  # the cache
    warm = time.monotonic() - start
    assert warm < 0.2 < cold, (cold, warm)
    other = [a if not a.startswith("steps=") else "steps=8" for a in args]
    assert maxtext_validate.cache_key(other, 1, 1) != maxtext_validate.cache_key(args, 1, 1)


def test_validator_errors_name_the_key():
    cfg = compose("smoke", ["maxtext.extra.per_device_batch_sizee=2", "data.dataset_type=hf"])
    found = list(preflight.maxtext_accepts(cfg, preflight.Host(dict(os.environ))))
    assert [p.key for p in found] == ["maxtext.extra.per_device_batch_sizee"]
    assert "did you mean per_device_batch_size?" in found[0].fix
