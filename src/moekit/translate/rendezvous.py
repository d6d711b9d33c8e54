"""Who is who in a multi-process job: coordinator, process count, process id, local devices.

One function per environment (local, JobSet, Slurm), chosen by cluster.kind in FROM_CLUSTER. Each takes the
environment as an argument (never reads os.environ itself) and returns the Rendezvous of every process this
host must start.
`process_env` turns one into the variables moekit's worker reads before MaxText starts; `processes` does both for
a config and holds the rules that tie the environment to it (process count, one run directory for Slurm's tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moekit.base.errors import MoekitError

if TYPE_CHECKING:  # annotations only: the worker imports this module before anything else
    from moekit.config.schema import Cluster, Config

# The variables moekit.worker reads; JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS are also JAX's own.
COORDINATOR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"
LOCAL_DEVICES = "JAX_LOCAL_DEVICE_IDS"
TIMEOUT = "MOEKIT_RENDEZVOUS_TIMEOUT_S"

# What the JobSet pod template exports (render/jobset.py writes these names).
JOBSET_COORDINATOR_HOST = "MOEKIT_COORDINATOR_HOST"
JOBSET_COORDINATOR_PORT = "MOEKIT_COORDINATOR_PORT"
JOBSET_NUM_NODES = "MOEKIT_NUM_NODES"
JOBSET_NODE_RANK = "JOB_COMPLETION_INDEX"  # set by the Indexed Job controller in every pod


class RendezvousError(MoekitError):
    """The environment does not describe a consistent multi-process job."""


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """Who one process is in the job, as the environment of its cluster says."""

    coordinator: str
    """host:port of process 0's coordinator service."""
    num_processes: int
    process_id: int
    node_rank: int
    local_rank: int
    local_device_ids: tuple[int, ...] | None
    """GPU ids this process drives; None = all visible devices (one process per node, or CPU)."""


def _node_processes(
    coordinator: str, nodes: int, node_rank: int, processes_per_node: int, gpus_per_node: int, gpu: bool
) -> list[Rendezvous]:
    if not 0 <= node_rank < nodes:
        raise RendezvousError(f"node rank {node_rank} is outside 0..{nodes - 1}; check the node count and index.")
    per_gpu = gpu and processes_per_node > 1
    return [
        Rendezvous(
            coordinator=coordinator,
            num_processes=nodes * processes_per_node,
            process_id=node_rank * processes_per_node + local,
            node_rank=node_rank,
            local_rank=local,
            local_device_ids=(local,) if per_gpu else None,
        )
        for local in range(processes_per_node)
    ]


# What a local run's coordinator address shows before its launch picks the port (--dry-run, host probes).
PORT_AT_LAUNCH = "<free port, chosen at launch>"


def local(processes: int, port: int | str, gpus_per_node: int = 1, gpu: bool = False) -> list[Rendezvous]:
    """Every process of a job on this one host, coordinated over loopback."""
    return _node_processes(f"127.0.0.1:{port}", 1, 0, processes, gpus_per_node, gpu)


def _int(env: Mapping[str, str], name: str, hint: str) -> int:
    value = env.get(name)
    if value is None or not value.strip().lstrip("-").isdigit():
        raise RendezvousError(f"{name}={value!r} is missing or not an integer; {hint}")
    return int(value)


def from_jobset(env: Mapping[str, str], processes_per_node: int, gpus_per_node: int, gpu: bool) -> list[Rendezvous]:
    """A JobSet pod: node rank from the Indexed Job's completion index, coordinator from the rendered env."""
    hint = "render the manifest with `moekit render … target=jobset`, which sets it."
    host = env.get(JOBSET_COORDINATOR_HOST)
    if not host:
        raise RendezvousError(f"{JOBSET_COORDINATOR_HOST} is not set; {hint}")
    port = _int(env, JOBSET_COORDINATOR_PORT, hint)
    nodes = _int(env, JOBSET_NUM_NODES, hint)
    rank = _int(env, JOBSET_NODE_RANK, "the pod must belong to an Indexed Job (completionMode: Indexed).")
    return _node_processes(f"{host}:{port}", nodes, rank, processes_per_node, gpus_per_node, gpu)


def _first_slurm_host(nodelist: str) -> str:
    """First host of a Slurm node list: 'gpu[003-005,9],cpu1' -> 'gpu003'."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist[: nodelist.index("]") + 1]
    if "[" not in head:
        return head
    prefix, ranges = head[:-1].split("[", 1)
    return prefix + ranges.split(",")[0].split("-")[0]


def _slurm_coordinator(env: Mapping[str, str], port: int, hint: str) -> str:
    # The step's node list (what srun ran on) names process 0's host; the job's is the same for a full-size step.
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise RendezvousError(f"SLURM_JOB_NODELIST is not set; {hint}")
    return f"{_first_slurm_host(nodelist)}:{port}"


def _slurm_nodes(env: Mapping[str, str], hint: str) -> int:
    name = "SLURM_JOB_NUM_NODES" if "SLURM_JOB_NUM_NODES" in env else "SLURM_NNODES"
    return _int(env, name, hint)


def from_slurm(
    env: Mapping[str, str],
    port: int,
    processes_per_node: int,
    gpus_per_node: int,
    gpu: bool,
    layout: str,
) -> list[Rendezvous]:
    """An srun task: one per node (moekit starts the node's processes) or one per process (layout per_process).

    per_node takes the node rank from SLURM_NODEID; per_process is one process whose id, local rank and count
    are SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS. The coordinator is the first host of the step.
    """
    if layout == "per_process":
        return [_slurm_task(env, port, processes_per_node, gpu)]
    hint = "run moekit under `srun` with one task per node (cluster.task_layout=per_node)."
    nodes = _slurm_nodes(env, hint)
    tasks = env.get("SLURM_NTASKS") or env.get("SLURM_STEP_NUM_TASKS")
    if tasks and tasks.isdigit() and int(tasks) != nodes:
        raise RendezvousError(
            f"cluster.task_layout=per_node wants one srun task per node, but this step has {tasks} tasks on "
            f"{nodes} node(s); srun --ntasks-per-node=1 (the rendered script does), or cluster.task_layout=per_process."
        )
    rank = _int(env, "SLURM_NODEID", hint)
    return _node_processes(_slurm_coordinator(env, port, hint), nodes, rank, processes_per_node, gpus_per_node, gpu)


def _slurm_task(env: Mapping[str, str], port: int, processes_per_node: int, gpu: bool) -> Rendezvous:
    hint = f"run moekit under `srun --ntasks-per-node={processes_per_node}` (cluster.task_layout=per_process)."
    nodes = _slurm_nodes(env, hint)
    tasks = _int(env, "SLURM_NTASKS", hint)
    proc, local, node = (_int(env, v, hint) for v in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"))
    if tasks != nodes * processes_per_node or not 0 <= local < processes_per_node:
        raise RendezvousError(
            f"this step has {tasks} tasks on {nodes} node(s) (task {proc} is local task {local}), but "
            f"cluster.processes_per_node={processes_per_node} wants {processes_per_node} per node; {hint}"
        )
    device: tuple[int, ...] | None = None
    if gpu and processes_per_node > 1:
        # A task Slurm bound to one GPU (--gpus-per-task=1, --gpu-bind) sees only that one, as device 0.
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        device = (0,) if len(visible) == 1 else (local,)
    return Rendezvous(
        coordinator=_slurm_coordinator(env, port, hint),
        num_processes=tasks,
        process_id=proc,
        node_rank=node,
        local_rank=local,
        local_device_ids=device,
    )


def process_env(r: Rendezvous, timeout_s: int) -> dict[str, str]:
    """Variables for one process; a single-process job needs none."""
    if r.num_processes == 1:
        return {}
    env = {
        COORDINATOR: r.coordinator,
        NUM_PROCESSES: str(r.num_processes),
        PROCESS_ID: str(r.process_id),
        TIMEOUT: str(timeout_s),
    }
    if r.local_device_ids is not None:
        env[LOCAL_DEVICES] = ",".join(map(str, r.local_device_ids))
    return env


def _local_cluster(c: Cluster, env: Mapping[str, str], gpu: bool) -> list[Rendezvous]:
    if c.nodes != 1:
        raise RendezvousError(
            f"cluster=local runs on one host but cluster.nodes={c.nodes}; use cluster=jobset or cluster=slurm."
        )
    port = PORT_AT_LAUNCH if c.coordinator_port is None else c.coordinator_port
    return local(c.processes_per_node, port, c.gpus_per_node, gpu)


def _jobset_cluster(c: Cluster, env: Mapping[str, str], gpu: bool) -> list[Rendezvous]:
    return from_jobset(env, c.processes_per_node, c.gpus_per_node, gpu)


def _slurm_cluster(c: Cluster, env: Mapping[str, str], gpu: bool) -> list[Rendezvous]:
    return from_slurm(env, c.coordinator_port, c.processes_per_node, c.gpus_per_node, gpu, c.task_layout)


# cluster.kind -> how that environment says who is who. A new kind of cluster adds one entry here.
FROM_CLUSTER: dict[str, Callable[[Cluster, Mapping[str, str], bool], list[Rendezvous]]] = {
    "local": _local_cluster,
    "jobset": _jobset_cluster,
    "slurm": _slurm_cluster,
}


def for_cluster(c: Cluster, env: Mapping[str, str], gpu: bool) -> list[Rendezvous]:
    """The processes this host starts for a job on cluster `c`, read from the launcher's environment `env`."""
    return FROM_CLUSTER[c.kind](c, env, gpu)


def node0_placeholders(c: Cluster, num_processes: int, gpu: bool) -> list[Rendezvous]:
    """Node 0's processes of a multi-node job seen from outside its cluster (--dry-run): node ranks and the
    coordinator's host name exist only where the job runs, so the coordinator is a placeholder."""
    return [
        Rendezvous(
            coordinator=f"<node-0>:{c.coordinator_port}",
            num_processes=num_processes,
            process_id=local,
            node_rank=0,
            local_rank=local,
            local_device_ids=(local,) if gpu and c.processes_per_node > 1 else None,
        )
        for local in range(c.processes_per_node)
    ]


def processes(
    cfg: Config, environ: Mapping[str, str], rendezvous_timeout_s: int | None = None, port: int | None = None
) -> list[dict[str, str]]:
    """Per-process rendezvous env for the processes this host starts, read from the launcher's environment.

    rendezvous_timeout_s defaults to cluster.rendezvous_timeout_s: how long a process waits for the others;
    `port` (launch_port's) replaces cluster.coordinator_port.
    """
    timeout = rendezvous_timeout_s or cfg.cluster.rendezvous_timeout_s
    c, gpu = cfg.cluster, cfg.hardware.platform == "gpu"
    if port is not None:
        c = c.model_copy(update={"coordinator_port": port})
    found = for_cluster(c, environ, gpu)
    if c.row.shared_paths and len(found) < cfg.num_processes and not cfg.run.dir:
        # Every node sees the same paths: launchers that each start part of the job would each make a run
        # directory of their own beside the others.
        raise RendezvousError(
            f"this {c.row.launcher} starts only some of the job's processes, and without run.dir each would "
            f"make a run directory of its own; give them one: run.dir=PATH ({c.row.run_dir_rule})."
        )
    if found[0].num_processes != cfg.num_processes:
        raise RendezvousError(
            f"the environment describes {found[0].num_processes} processes but the config {cfg.num_processes} "
            f"(cluster.nodes={c.nodes} x cluster.processes_per_node={c.processes_per_node}); make them agree."
        )
    return [process_env(r, timeout) for r in found]


def dry_run_processes(cfg: Config, environ: Mapping[str, str]) -> list[dict[str, str]]:
    """What --dry-run shows: this host's processes; for a cluster job (one node or many) outside its cluster, node
    0's.

    Node ranks and the coordinator's host name exist only where the job runs, so they are shown as placeholders.
    """
    try:
        return processes(cfg, environ)
    except RendezvousError:
        if cfg.cluster.row.one_host:
            raise
    c, gpu = cfg.cluster, cfg.hardware.platform == "gpu"
    node0 = node0_placeholders(c, cfg.num_processes, gpu)
    return [process_env(r, c.rendezvous_timeout_s) for r in node0]
