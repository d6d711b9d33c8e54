"""What each training process runs: join the rendezvous, then run MaxText's trainer as `python -m` would.

MaxText skips its own jax.distributed set-up when JAX is already initialized, so one rendezvous
contract (rendezvous.process_env) serves CPU, one-process-per-node GPU and one-process-per-GPU runs.
Usage: python -m moekit.worker <module> key=value ...
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib.util
import json
import os
import runpy
import signal
import socket
import sys
from collections.abc import Collection, Sequence

import yaml

from moekit.base import parse
from moekit.base.failures import JOINED, JOINING
from moekit.base.redact import is_secret_name
from moekit.config.kinds.backends import BACKENDS
from moekit.rundir import PROFILE_DIR_ENV
from moekit.translate import rendezvous as rz
from moekit.translate.env import maxtext_env_overrides
from moekit.worker import routing, step_events

_PR_SET_PDEATHSIG = 1
LAUNCHER_PID = "MOEKIT_LAUNCHER_PID"  # set by `moekit train` for the processes it starts
# MaxText arguments with secret values (JSON list of key=value), kept off the command line: every user of the
# host can read a process's argv (ps, /proc/PID/cmdline), while its environment is readable by its owner only.
SECRET_ARGS = "MOEKIT_SECRET_ARGS"
PREEMPTIBLE = "MOEKIT_PREEMPTIBLE"  # "1": the run checkpoints, so SIGTERM saves at the next step boundary
STACKS = "MOEKIT_STACKS"  # file that SIGUSR1 dumps this process's Python stacks to
# Secret MaxText keys that MaxText itself reads from a variable (pyconfig: hf_access_token from HF_TOKEN).
MAXTEXT_READS_FROM_ENV = {"hf_access_token": "HF_TOKEN"}


def hide_secrets(argv: Sequence[str], secret_keys: Collection[str]) -> tuple[list[str], dict[str, str]]:
    """Split a worker command line into the part that may be shown and the environment that carries the rest.

    `argv` is `python -m moekit.worker <module> key=value ...`; an argument whose key is in `secret_keys` moves
    to the environment, where the worker (or MaxText) reads it inside the process.
    """
    shown, env, hidden = [], {}, []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq or key not in secret_keys:
            shown.append(arg)
        elif key in MAXTEXT_READS_FROM_ENV:
            env[MAXTEXT_READS_FROM_ENV[key]] = str(yaml.safe_load(value) if value else "")
        else:
            hidden.append(arg)
    if hidden:
        env[SECRET_ARGS] = json.dumps(hidden)
    return shown, env


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
    """Join the job's rendezvous; a lone process whose run saves on preemption joins a job of one on loopback.

    JAX's preemption notice (SIGTERM -> a checkpoint at the next step boundary) lives in the coordination
    service, so it needs jax.distributed even for one process. Without checkpoints there is nothing to save:
    the service stays off and SIGTERM ends the process at once.
    """
    preemptible = environ.get(PREEMPTIBLE) == "1"
    if rz.NUM_PROCESSES not in environ:
        if preemptible:
            import jax

            jax.distributed.initialize(coordinator_address=f"127.0.0.1:{_free_port()}", num_processes=1, process_id=0)
        return
    import jax

    if not preemptible:
        jax.config.update("jax_enable_preemption_service", False)

    ids = environ.get(rz.LOCAL_DEVICES)
    timeout = int(environ.get(rz.TIMEOUT, "300"))
    # The two marker lines let moekit.base.failures tell a rendezvous that never completed from other deaths.
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
    if environ.get("JAX_PLATFORMS") == "cpu":
        # XLA:CPU makes the gloo communicator of a device group at its first collective and gives the other
        # processes a fixed 30 s to arrive; on a busy host their compile times differ by more. One collective
        # now, while the processes are in step, makes the all-devices communicator that training reuses.
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("moekit rendezvous")
    print(JOINED, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_stack_file = None  # kept open for the life of the process: faulthandler writes to its descriptor


def dump_stacks_on_request(environ: dict[str, str]) -> None:
    """SIGUSR1 writes every thread's Python stack to the file moekit named (the hang watchdog asks for it).

    faulthandler writes from the signal handler itself, so a process blocked in a collective answers too."""
    global _stack_file
    path = environ.get(STACKS)
    if not path:
        return
    _stack_file = open(path, "a", encoding="utf8")  # noqa: SIM115 (must outlive this function)
    faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)


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


def quiet_grain_shutdown(argv: Sequence[str]) -> None:
    """MaxText 0.2.5 closes a Grain iterator at exit (MultiHostDataLoadIterator.__del__) by asking `hasattr(it,
    "_parent")`; Grain's source iterators answer that with an AssertionError (no parent), which hasattr does not
    catch, so every successful data=grain run ended with a traceback in its log. The closing is kept; only that
    question, when it raises, counts as "no parent"."""
    if "dataset_type=grain" not in argv:
        return
    try:
        from maxtext.input_pipeline import multihost_dataloading as loading
    except ImportError:
        return
    terminate = loading._terminate_iterator_workers

    def terminate_workers(obj) -> None:
        try:
            terminate(obj)
        except AssertionError:  # Grain's `_parent` of an iterator without one, closed just before (_close_iterator)
            pass

    loading._terminate_iterator_workers = terminate_workers


def trace_per_process(environ: dict[str, str]) -> None:
    """profile=on: this process traces into <profile dir>/trace/process_<i>/ and dumps the train step's HLO.

    MaxText's xplane profiler makes every process write <tensorboard_dir>/plugins/profile/<second>/<host>.xplane.pb,
    so processes of one host that stop tracing in the same second overwrite each other. The HLO dump (op metadata
    and Python source frames of every instruction) is what the breakdown classifies trace events by; XLA reads
    XLA_FLAGS when it first compiles, so they are set before anything runs.
    """
    folder = environ.get(PROFILE_DIR_ENV)
    if not folder:
        return
    own = f"process_{environ.get(rz.PROCESS_ID, '0')}"
    dump = f"--xla_dump_to={os.path.join(folder, 'hlo', own)} --xla_dump_hlo_module_re=jit_train_step"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {dump}".strip()
    import jax.profiler

    start_trace = jax.profiler.start_trace

    def start_own_trace(log_dir, *args, **kwargs):
        return start_trace(os.path.join(folder, "trace", own), *args, **kwargs)

    jax.profiler.start_trace = start_own_trace


def point_maxtext_at_its_assets(environ: dict[str, str]) -> dict[str, str]:
    """MaxText 0.2.5 looks for its shipped tokenizers under <repository>/src/maxtext/assets, which an installed
    wheel does not have; its own folder does. Name it, unless the environment already does (NGC image: source)."""
    if "MAXTEXT_ASSETS_ROOT" in environ:
        return {}
    spec = importlib.util.find_spec("maxtext")
    folder = next(iter(spec.submodule_search_locations or []), None) if spec else None
    assets = os.path.join(folder, "assets") if folder else None
    return {"MAXTEXT_ASSETS_ROOT": assets} if assets and os.path.isdir(os.path.join(assets, "tokenizers")) else {}


def install_backend_hooks(environ: dict[str, str]) -> None:
    """Put in place the hook of each back end whose package (its row's `hook`, config/kinds/backends.py) this worker's
    environment engages; a hook that refuses stops the worker with its reason."""
    for name in sorted({b.hook for b in BACKENDS.values() if b.hook}):
        if importlib.import_module(f"moekit.{name}").engaged(environ):
            hook = importlib.import_module(f"moekit.{name}.hook")
            try:
                hook.install_from_env(environ)
            except hook.HookError as exc:
                raise SystemExit(f"moekit: {exc}") from None


def install_attention_hook(environ: dict[str, str]) -> None:
    """Put moekit's attention kernel behind MaxText's attention call when the environment asks (moekit.attention)."""
    from moekit import attention

    if attention.engaged(environ):
        from moekit.attention import hook

        try:
            hook.install_from_env(environ)
        except hook.HookError as exc:
            raise SystemExit(f"moekit: {exc}") from None


def main() -> None:
    """Join the rendezvous, prepare the process for MaxText (assets, te_gmm hook, secret arguments), check the
    fabric (moekit.worker.fabric), then run the module named by the first argument as `python -m` would, with the
    remaining arguments."""
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m moekit.worker <module> key=value ...")
    module = sys.argv[1]
    die_with_parent(dict(os.environ))
    from moekit.worker import fabric  # after the line above: its imports take a moment a dead launcher must not outlive

    dump_stacks_on_request(dict(os.environ))
    trace_per_process(dict(os.environ))
    join(fabric.misdirect(dict(os.environ)))  # (misdirect: a test-only fault switch, a no-op otherwise)
    os.environ.update(point_maxtext_at_its_assets(dict(os.environ)))  # before anything imports maxtext
    keep_secrets_out_of_tensorboard()
    step_events.install(dict(os.environ))  # when saves, restores, compiles and trace edges happened (summary)
    install_backend_hooks(dict(os.environ))  # e.g. moe=te_gmm: MaxText's ragged_dot call -> TE's grouped GEMM
    install_attention_hook(dict(os.environ))  # e.g. model.attention=tokamax_mosaic: MaxText's attention call
    routing.install(dict(os.environ))  # tokens per expert of each MoE layer at sampled steps (routing.jsonl)
    quiet_grain_shutdown(sys.argv)
    if not fabric.phase(dict(os.environ)):  # the job's collectives checked and timed before MaxText builds the model
        return  # fabric.only: the check was the job
    secret = parse.json_text(
        os.environ.pop(SECRET_ARGS, "[]"), SECRET_ARGS, finite=False
    )  # not inherited by what MaxText starts
    for name in maxtext_env_overrides([*sys.argv[2:], *secret]):  # the command line wins (translate/env.py)
        os.environ.pop(name, None)
    # sys.argv lives in this process's memory: what ps and /proc/PID/cmdline show stays the original argv.
    sys.argv = [module, *sys.argv[2:], *secret]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
