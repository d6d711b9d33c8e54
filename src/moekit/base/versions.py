"""Versions of the training stack, recorded in every run directory (effect: imports, host name)."""

from __future__ import annotations

import platform
import socket
import sys
from importlib import metadata

import moekit

PACKAGES = ("jax", "jaxlib", "maxtext", "flax", "transformer-engine", "tokamax")


def versions() -> dict[str, str]:
    """Versions of Python, moekit and the stack's packages that are installed (absent ones left out), plus the host
    name and platform."""
    out = {"python": sys.version.split()[0], "moekit": moekit.__version__}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    out["host"] = socket.gethostname()
    out["platform"] = platform.platform()
    return out
