"""Ask the installed MaxText whether it accepts a translated command line, without training.

Runs MaxText's own validator (maxtext.configs.pyconfig.initialize) in a subprocess on CPU with as many
forced host devices as the job has, so mesh and sharding checks run as they would on the cluster. Several
command lines of one device count share one subprocess (importing MaxText is most of the cost).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence

from moekit.errors import MoekitError

_PROBE = r"""
import json, sys
from maxtext.configs import pyconfig
for argv in json.loads(sys.stdin.read()):
    try:
        pyconfig.initialize(["train"] + argv)
        result = {"ok": True}
    except BaseException as exc:  # MaxText raises ValueError, pydantic errors or SystemExit
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print("MOEKIT-RESULT " + json.dumps(result), flush=True)
"""


class MaxTextRejected(MoekitError):
    """MaxText's validator refused the translated arguments."""


def _argv(args: Sequence[str], num_slices: int) -> list[str]:
    keep = [a for a in args if not a.startswith(("skip_jax_distributed_system=", "num_slices="))]
    return [*keep, "skip_jax_distributed_system=true", f"num_slices={num_slices}"]


def rejections(
    arg_lists: Sequence[Sequence[str]], num_devices: int, num_slices: int = 1, timeout_s: float = 600
) -> list[str | None]:
    """MaxText's refusal of each argument list (key=value strings), or None where it accepts it; one subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={num_devices}"}
    payload = json.dumps([_argv(a, num_slices) for a in arg_lists])
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], input=payload, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    results = [
        json.loads(line.removeprefix("MOEKIT-RESULT "))
        for line in proc.stdout.splitlines()
        if line.startswith("MOEKIT-RESULT ")
    ]
    if len(results) != len(arg_lists):
        raise MaxTextRejected(f"MaxText's validator did not run (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return [None if r["ok"] else f"MaxText's validator rejected the arguments: {r['error']}" for r in results]


def validate(args: Sequence[str], num_devices: int, num_slices: int = 1, timeout_s: float = 300) -> None:
    """Raise MaxTextRejected with MaxText's message if it does not accept `args` (key=value strings)."""
    [refusal] = rejections([args], num_devices, num_slices, timeout_s)
    if refusal:
        raise MaxTextRejected(refusal)
