"""What each training process runs: join the rendezvous, then run MaxText's trainer as `python -m` would.

MaxText skips its own jax.distributed set-up when JAX is already initialized, so one rendezvous
contract (rendezvous.process_env) serves CPU, one-process-per-node GPU and one-process-per-GPU runs.
Usage: python -m moekit.worker <module> key=value ...
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import runpy
import signal
import sys

from moekit import rendezvous as rz
from moekit.failures import JOINED, JOINING
from moekit.redact import is_secret_name

_PR_SET_PDEATHSIG = 1
LAUNCHER_PID = "MOEKIT_LAUNCHER_PID"  # set by `moekit train` for the processes it starts


def die_with_parent(environ: dict[str, str]) -> None:
    """Get SIGKILL when the launching moekit dies, even by SIGKILL: no orphan left holding devices or ports."""
    launcher = environ.get(LAUNCHER_PID)
    if not launcher:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the launcher's own stop still applies
        return
    if os.getppid() != int(launcher):  # it died before prctl took effect
        os._exit(137)


def join(environ: dict[str, str]) -> None:
    if rz.NUM_PROCESSES not in environ:
        return
    import jax

    ids = environ.get(rz.LOCAL_DEVICES)
    timeout = int(environ.get(rz.TIMEOUT, "300"))
    # The two marker lines let moekit.failures tell a rendezvous that never completed from other deaths.
    print(
        f"{JOINING} at {environ[rz.COORDINATOR]} as process {environ[rz.PROCESS_ID]} of "
        f"{environ[rz.NUM_PROCESSES]} (timeout {timeout} s)",
        flush=True,
    )
    jax.distributed.initialize(
        coordinator_address=environ[rz.COORDINATOR],
        num_processes=int(environ[rz.NUM_PROCESSES]),
        process_id=int(environ[rz.PROCESS_ID]),
        local_device_ids=[int(i) for i in ids.split(",")] if ids else None,
        initialization_timeout=timeout,
    )
    print(JOINED, flush=True)


def keep_secrets_out_of_tensorboard() -> None:
    """MaxText 0.2.5 keeps hf_access_token out of its log but writes every config key, that one included (it
    is filled from $HF_TOKEN), into TensorBoard under the run directory; skip credential-looking keys there."""
    try:
        from maxtext.utils import max_utils, maxtext_utils
    except ImportError:
        return

    import jax

    def add_config(config, summary_writer) -> None:  # maxtext_utils.add_config_to_summary_writer, filtered
        if jax.process_index() != 0:
            return
        if hasattr(config, "get_keys"):
            keys = config.get_keys()
        elif hasattr(config, "model_dump"):
            keys = config.model_dump()
        else:
            keys = dict(config)
        for key, value in keys.items():
            if not is_secret_name(str(key)):
                max_utils.add_text_to_summary_writer(key, str(value), summary_writer)

    maxtext_utils.add_config_to_summary_writer = add_config


def point_maxtext_at_its_assets(environ: dict[str, str]) -> dict[str, str]:
    """MaxText 0.2.5 looks for its shipped tokenizers under <repository>/src/maxtext/assets, which an installed
    wheel does not have; its own folder does. Name it, unless the environment already does (NGC image: source)."""
    if "MAXTEXT_ASSETS_ROOT" in environ:
        return {}
    spec = importlib.util.find_spec("maxtext")
    folder = next(iter(spec.submodule_search_locations or []), None) if spec else None
    assets = os.path.join(folder, "assets") if folder else None
    return {"MAXTEXT_ASSETS_ROOT": assets} if assets and os.path.isdir(os.path.join(assets, "tokenizers")) else {}


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m moekit.worker <module> key=value ...")
    module = sys.argv[1]
    die_with_parent(dict(os.environ))
    join(dict(os.environ))
    os.environ.update(point_maxtext_at_its_assets(dict(os.environ)))  # before anything imports maxtext
    keep_secrets_out_of_tensorboard()
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
