"""profile=on -> MaxText's own profiler keys and the folder each process traces into (pure)."""

from __future__ import annotations

from moekit.config.schema import Config, Scalar
from moekit.rundir import PROFILE_DIR_ENV
from moekit.translate.env import EnvVar


def maxtext_keys(cfg: Config) -> dict[str, Scalar]:
    """MaxText keys that trace profile.steps steps after profile.skip_steps; empty when profiling is off."""
    p = cfg.profile
    if not p.enabled:
        return {}
    return {
        "profiler": "xplane",
        "skip_first_n_steps_for_profiler": p.skip_steps,
        "profiler_steps": p.steps,
        "upload_all_profiler_results": True,  # every process traces its own devices, not only process 0
        # A step restored from the persistent compilation cache is not compiled, so XLA would dump no HLO.
        "jax_cache_dir": "",
    }


def env_vars(cfg: Config, profile_dir: str) -> list[EnvVar]:
    """The worker's switch: where this run's traces and HLO dump go (nothing when profiling is off)."""
    return [EnvVar(PROFILE_DIR_ENV, profile_dir, "profile=on")] if cfg.profile.enabled else []
