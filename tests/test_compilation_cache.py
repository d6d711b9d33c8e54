"""The suite's JAX persistent compilation cache (conftest.jax_compilation_cache): every training of a session
writes to and reads from the session's own folder, and a run whose translation keeps the cache off keeps it off."""

from __future__ import annotations

import os
import re

import pytest

from conftest import JAX_CACHE_ENV
from moekit.translate.env import maxtext_env_overrides


def _cache_dir_of(run_log: str) -> str:
    """The jax_cache_dir MaxText ran with (its config log line)."""
    found = re.findall(r"Config param jax_cache_dir: ?(.*)$", run_log, flags=re.M)
    assert len(found) == 1, found
    return found[0].strip()


def test_the_command_line_wins_over_maxtexts_environment_override():
    """MaxText refuses a key set both ways; what starts MaxText (the worker, the validator) leaves out the M_<KEY>
    of each key on the command line, and only those."""
    assert maxtext_env_overrides(["jax_cache_dir=", "steps=10", "flag"]) == {"M_JAX_CACHE_DIR", "M_STEPS"}


@pytest.mark.integration
def test_the_validator_judges_with_the_command_line_value(tmp_path):
    """MaxText's validator (a costly preflight probe) runs beside an M_JAX_CACHE_DIR, as every check of the suite
    does: a job whose translation turns the cache off is still accepted."""
    from moekit.preflight.maxtext_validate import rejections

    environ = dict(os.environ) | {JAX_CACHE_ENV: str(tmp_path), "MOEKIT_CACHE_DIR": str(tmp_path / "moekit")}
    assert rejections([["jax_cache_dir=", "steps=3"]], num_devices=1, environ=environ) == [None]


@pytest.mark.integration
def test_a_plain_run_compiles_into_the_sessions_cache(smoke_run, jax_compilation_cache):
    base, proc = smoke_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    (log,) = base.rglob("maxtext.log")
    assert _cache_dir_of(log.read_text(errors="replace")) == str(jax_compilation_cache)
    assert list(jax_compilation_cache.glob("jit_train_step-*")), sorted(p.name for p in jax_compilation_cache.iterdir())


@pytest.mark.integration
def test_a_profiled_run_keeps_the_cache_off(profiled_smoke, jax_compilation_cache):
    """profile=on needs the train step compiled (XLA dumps HLO only then): MaxText's M_JAX_CACHE_DIR, set for the
    whole session, gives way to the translation's jax_cache_dir=''."""
    run, proc = profiled_smoke
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _cache_dir_of((run / "maxtext.log").read_text(errors="replace")) == ""


def test_the_session_cache_is_set_for_what_the_tests_start(jax_compilation_cache):
    assert os.environ[JAX_CACHE_ENV] == str(jax_compilation_cache)
    assert jax_compilation_cache.is_dir() and "jax_cache" in jax_compilation_cache.name
