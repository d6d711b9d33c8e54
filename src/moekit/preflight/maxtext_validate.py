"""Ask the installed MaxText whether it accepts a translated command line, without training.

Runs MaxText's own validator (maxtext.configs.pyconfig.initialize) in a subprocess on CPU with as many
forced host devices as the job has, so mesh and sharding checks run as they would on the cluster. Starting
it costs seconds (importing jax and MaxText's config schema: 4-6 s of CPU time on this 2-core machine), so
several command lines of one device count share one subprocess, and an accepted command line is remembered
in moekit's cache under the hash of what decides the answer: the arguments, the device and slice counts, and
the MaxText, jax and Python versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from moekit.base import cache, parse
from moekit.base.errors import MoekitError
from moekit.translate.env import maxtext_env_overrides

# Reads a JSON list of argument lists on stdin; prints one MOEKIT-RESULT line per list.
_PROBE = r"""
import difflib, json, re, sys
from maxtext.configs import pyconfig, types

def keys(model):  # every key MaxText's config accepts, nested sections included
    out, todo = set(), [model]
    while todo:
        for name, f in todo.pop().model_fields.items():
            out.add(name)
            if hasattr(f.annotation, "model_fields"):
                todo.append(f.annotation)
    return out

known = None
for argv in json.loads(sys.stdin.read()):
    try:
        pyconfig.initialize(["train"] + argv)
        result = {"ok": True}
    except BaseException as exc:  # MaxText raises ValueError, pydantic errors or SystemExit
        known = known or keys(types.MaxTextConfig)
        given = [a.split("=", 1)[0] for a in argv]
        unknown = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in given if k not in known}
        problems = []
        for err in getattr(exc, "errors", lambda: [])():
            msg = str(err.get("msg", ""))
            loc = [str(p) for p in err.get("loc", ())]
            named = [k for k in sorted(known) if k in loc or re.search(r"\b%s\b" % re.escape(k), msg)]
            problems.append({"msg": msg, "keys": named})
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "unknown": unknown, "problems": problems}
    print("MOEKIT-RESULT " + json.dumps(result), flush=True)
"""


@dataclass
class MaxTextRejected(MoekitError):
    """MaxText's validator refused the translated arguments."""

    error: str
    unknown: dict[str, list[str]] = field(default_factory=dict)
    """Keys MaxText does not know, each with its closest known key (if any)."""
    problems: list[dict] = field(default_factory=list)
    """Its validation errors: {msg, keys it names}."""

    def __post_init__(self) -> None:
        super().__init__(f"MaxText's validator rejected the arguments: {self.error[:4000]}")


class ValidatorUnavailable(MoekitError):
    """MaxText's validator could not run here."""


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in ("maxtext", "jax", "jaxlib", "pydantic"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cache_key(args: Sequence[str], num_devices: int, num_slices: int) -> str:
    """What decides MaxText's answer, hashed."""
    blob = json.dumps([list(args), num_devices, num_slices, _versions()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _argv(args: Sequence[str], num_slices: int) -> list[str]:
    keep = [a for a in args if not a.startswith(("skip_jax_distributed_system=", "num_slices="))]
    return [*keep, "skip_jax_distributed_system=true", f"num_slices={num_slices}"]


def rejections(
    arg_lists: Sequence[Sequence[str]],
    num_devices: int,
    num_slices: int = 1,
    timeout_s: float = 600,
    environ: Mapping[str, str] | None = None,
) -> list[MaxTextRejected | None]:
    """MaxText's refusal of each argument list (key=value strings), or None where it accepts it; one subprocess."""
    base = os.environ if environ is None else environ
    # One process judges every list: the M_<KEY> overrides of keys any of them sets stay out (translate/env.py).
    overridden = set().union(*(maxtext_env_overrides(a) for a in arg_lists))
    env = {k: v for k, v in base.items() if not k.startswith(("JAX_", "XLA_")) and k not in overridden}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={num_devices}"}
    payload = json.dumps([_argv(a, num_slices) for a in arg_lists])
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], input=payload, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise ValidatorUnavailable(f"MaxText's validator did not answer within {timeout_s:.0f} s") from None
    results = [
        parse.json_line(line.removeprefix("MOEKIT-RESULT "), "MaxText's validator", finite=False)
        for line in proc.stdout.splitlines()
        if line.startswith("MOEKIT-RESULT ")
    ]
    if len(results) != len(arg_lists):
        if "No module named 'maxtext'" in proc.stderr:
            raise ValidatorUnavailable("MaxText is not installed in this Python (import maxtext failed)")
        raise ValidatorUnavailable(f"MaxText's validator did not run (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return [
        None if r["ok"] else MaxTextRejected(r["error"], r.get("unknown", {}), r.get("problems", [])) for r in results
    ]


def validate(
    args: Sequence[str],
    num_devices: int,
    num_slices: int = 1,
    timeout_s: float = 300,
    environ: Mapping[str, str] | None = None,
    use_cache: bool = True,
) -> bool:
    """Raise MaxTextRejected with MaxText's findings if it does not accept `args` (key=value strings).

    Returns True when the answer came from the cache (no subprocess ran).
    """
    name = f"maxtext-accepted/{cache_key(_argv(args, num_slices), num_devices, num_slices)}"
    if use_cache and cache.read(name, environ):
        return True
    [refusal] = rejections([args], num_devices, num_slices, timeout_s, environ)
    if refusal:
        raise refusal
    if use_cache:
        cache.write(name, {"accepted": True, "versions": _versions()}, environ)
    return False
