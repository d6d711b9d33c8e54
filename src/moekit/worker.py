"""What each training process runs: join the rendezvous, then run MaxText's trainer as `python -m` would.

MaxText skips its own jax.distributed set-up when JAX is already initialized, so one rendezvous
contract (rendezvous.process_env) serves CPU, one-process-per-node GPU and one-process-per-GPU runs.
Usage: python -m moekit.worker <module> key=value ...
"""

from __future__ import annotations

import os
import runpy
import sys

from moekit import rendezvous as rz


def join(environ: dict[str, str]) -> None:
    if rz.NUM_PROCESSES not in environ:
        return
    import jax

    ids = environ.get(rz.LOCAL_DEVICES)
    jax.distributed.initialize(
        coordinator_address=environ[rz.COORDINATOR],
        num_processes=int(environ[rz.NUM_PROCESSES]),
        process_id=int(environ[rz.PROCESS_ID]),
        local_device_ids=[int(i) for i in ids.split(",")] if ids else None,
        initialization_timeout=int(environ.get(rz.TIMEOUT, "300")),
    )


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m moekit.worker <module> key=value ...")
    module = sys.argv[1]
    join(dict(os.environ))
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
