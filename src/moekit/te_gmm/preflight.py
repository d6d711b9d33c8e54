"""Host probes for moe=te_gmm: one row of preflight/host.py's table, run before anything launches (nothing here
imports MaxText or TE).

The config checks (config/checks/) already refused what the config alone shows (no GPU, SM < 90, MXFP8
off Blackwell); these look at the host: TransformerEngine importable, the installed MaxText the known source,
and the GPUs' compute capability where nvidia-smi can tell it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Callable

from moekit.config.schema import Config
from moekit.te_gmm import call_site


def compute_capabilities() -> list[float] | None:
    """Each visible GPU's compute capability (9.0 for H100/H200), or None where nvidia-smi cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        return [float(line) for line in out.stdout.split()] if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def problems(
    cfg: Config,
    te_present: Callable[[], bool] = lambda: importlib.util.find_spec("transformer_engine") is not None,
    maxtext: Callable[[], str | None] = lambda: call_site.problem(
        call_site.moe_source(), call_site.installed_version()
    ),
    capabilities: Callable[[], list[float] | None] = compute_capabilities,
) -> list[str]:
    """What keeps moe=te_gmm from running on this host, each with its fix (empty: ready, or another back end)."""
    if not cfg.backend.hook:
        return []
    found = []
    if not te_present():
        found.append(
            "transformer_engine is not importable here. Fix: run in moekit's image (its NGC JAX base ships TE), "
            "install TE for JAX (transformer-engine[jax]; no NCCL EP needed), or use moe=tokamax"
        )
    site = maxtext()
    if site:
        found.append(f"{site}. Fix: {call_site.FIX}")
    caps = capabilities()
    if caps and min(caps) < 9.0:
        found.append(
            f"this host's GPUs have compute capability {', '.join(map(str, caps))}; TE's grouped GEMM path of "
            "moe=te_gmm needs SM >= 90 (Hopper or Blackwell). Fix: run on H100/H200/B200/GB200/GB300 nodes, or "
            "moe=tokamax"
        )
    return found
