"""Ask the installed XLA which flags of an XLA_FLAGS set it accepts (effects: a subprocess, the cache).

XLA reads XLA_FLAGS when its first client starts, and aborts on a flag it does not register ("Unknown flags in
XLA_FLAGS: --a --b") or a value it cannot read ("Couldn't interpret value V for flag NAME."). So the probe
starts a CPU client once, in a subprocess, with the flags in question, and reads XLA's own complaint; the
verdicts are cached per jaxlib version. jaxlib's CPU client registers every DebugOptions flag, the GPU ones
(xla_gpu_*) included (checked with jaxlib 0.12.0.1 on CPU, 2026-12-03: the blog's xla_gpu_* flags pass,
misspelled ones are named), and jaxlib's CUDA plugin is built from the same XLA, so a host without GPUs
answers for a GPU job that runs the same jaxlib version.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata

from moekit.base import cache

OK, UNKNOWN, BAD_VALUE = "ok", "unknown", "bad value"
_PROBE = "import jax; jax.devices()"  # starting a client parses XLA_FLAGS
_UNKNOWN = re.compile(r"Unknown flags? in XLA_FLAGS: (.*)")
_BAD_VALUE = re.compile(r"Couldn't interpret value (.*) for flag (\S+?)\.?$")


class Unanswered(Exception):
    """This host cannot say which flags its XLA accepts (no jaxlib, or XLA failed for another reason)."""


def jaxlib_version() -> str | None:
    """The installed jaxlib's version (the key of the cached verdicts), or None without jaxlib."""
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def flag_name(flag: str) -> str:
    """--xla_foo=1 -> xla_foo"""
    return flag.removeprefix("--").split("=", 1)[0]


def verdicts(
    flags: Sequence[str], environ: Mapping[str, str] | None = None, timeout_s: float = 180
) -> tuple[str, dict[str, str]]:
    """(jaxlib version, {flag: OK | UNKNOWN | BAD_VALUE}) for flags written as in XLA_FLAGS (--name=value)."""
    version = jaxlib_version()
    if version is None:
        raise Unanswered("jaxlib is not installed in this Python, so this host cannot tell which XLA flags exist")
    name = f"xla-flags-jaxlib-{version}.json"
    known: dict[str, str] = cache.read(name, environ) or {}
    pending = [f for f in dict.fromkeys(flags) if f not in known]
    asked = False
    while pending:
        asked = True
        found = _ask(pending, environ, timeout_s)
        if found is None:
            known |= dict.fromkeys(pending, OK)
            break
        known |= found
        pending = [f for f in pending if f not in found]
    if asked:
        cache.write(name, known, environ)
    return version, {f: known[f] for f in flags}


def _ask(flags: list[str], environ: Mapping[str, str] | None, timeout_s: float) -> dict[str, str] | None:
    """None when XLA accepts every flag; else the verdicts its complaint gives (at least one)."""
    base = os.environ if environ is None else environ
    env = {k: v for k, v in base.items() if not k.startswith(("JAX_", "XLA_", "TF_CPP_"))}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(flags)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise Unanswered(f"starting XLA with these flags took over {timeout_s:.0f} s") from None
    if proc.returncode == 0:
        return None
    out = proc.stdout + proc.stderr
    unknown = {flag_name(w) for m in _UNKNOWN.finditer(out) for w in m.group(1).split()}
    bad = {f"--{m.group(2)}={m.group(1)}" for line in out.splitlines() if (m := _BAD_VALUE.search(line.strip()))}
    found = {f: UNKNOWN for f in flags if flag_name(f) in unknown}
    found |= {f: BAD_VALUE for f in flags if f in bad and f not in found}
    if not found:
        tail = "\n".join(out.strip().splitlines()[-5:])
        raise Unanswered(f"XLA failed to start with these flags, for a reason other than a flag:\n{tail}")
    return found
