"""Ask the installed MaxText whether it accepts a translated command line, without training.

Runs MaxText's own validator (maxtext.configs.pyconfig.initialize) in a subprocess on CPU with as many
forced host devices as the job has, so mesh and sharding checks run as they would on the cluster.
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
try:
    cfg = pyconfig.initialize(["train"] + sys.argv[1:])
except BaseException as exc:  # MaxText raises ValueError, pydantic errors or SystemExit
    print("MOEKIT-RESULT " + json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
print("MOEKIT-RESULT " + json.dumps({"ok": True}))
"""


class MaxTextRejected(MoekitError):
    """MaxText's validator refused the translated arguments."""


def validate(args: Sequence[str], num_devices: int, num_slices: int = 1, timeout_s: float = 300) -> None:
    """Raise MaxTextRejected with MaxText's message if it does not accept `args` (key=value strings)."""
    keep = [a for a in args if not a.startswith(("skip_jax_distributed_system=", "num_slices="))]
    argv = [*keep, "skip_jax_distributed_system=true", f"num_slices={num_slices}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={num_devices}"}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    for line in proc.stdout.splitlines():
        if line.startswith("MOEKIT-RESULT "):
            result = json.loads(line.removeprefix("MOEKIT-RESULT "))
            if not result["ok"]:
                raise MaxTextRejected(f"MaxText's validator rejected the arguments: {result['error']}")
            return
    raise MaxTextRejected(f"MaxText's validator did not run (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
