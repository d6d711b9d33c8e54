"""Render a composed config as a Docker Compose project, as plain data (pure).

One service per node, each the pod a JobSet would run (render/jobset.py): the same image, entrypoint and
command, the pod's host name <job>-workers-0-<node>.<job> and the rendezvous environment that
rendezvous.from_jobset reads. So a multi-node job can be wired and tested on one host, CPU included.
On GPU hardware each service gets its own cluster.gpus_per_node GPUs of the host (by device id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from moekit.config.schema import Config
from moekit.render import jobset
from moekit.translate import rendezvous as rz

NETWORK = "jobset"
STACK_BYTES = 64 * 2**20  # NVIDIA's JAX containers recommend a 64 MiB stack
RUNS_MOUNT = "/workspace/outputs"  # the image's run directories (Dockerfile WORKDIR /workspace)
HOST_GPUS = 8  # the GPUs of one HGX/DGX host: a project reserving more cannot start on one host


def literal(text: str) -> str:
    """`text` as a Compose file must hold it: Compose interpolates $VAR and ${VAR} and reads $$ as one $."""
    return text.replace("$", "$$")


def host(cfg: Config, node: int) -> str:
    """The host name of node `node`'s service: what the JobSet's pod of that index is called."""
    return f"{jobset.job_name(cfg)}-{jobset.WORKERS}-0-{node}"


def volumes(cfg: Config, node: int) -> list[Any]:
    """Each node's own ./outputs/node-N (the image's run directories), unless cluster.volumes mounts something
    there; then cluster.volumes, in compose's long syntax (a path holding ':' stays one path): a claim becomes
    a named Docker volume that the nodes share, a host path a bind mount."""
    c = cfg.cluster
    own = (
        []
        if any(v.path == RUNS_MOUNT for v in c.volumes)
        else [f"${{MOEKIT_RUNS:-./outputs}}/node-{node}:{RUNS_MOUNT}"]
    )
    return own + [
        {"type": "volume" if v.claim else "bind", "source": v.claim or v.host_path, "target": v.path}
        | ({"read_only": True} if v.read_only else {})
        for v in c.volumes
    ]


def service(cfg: Config, overrides: Sequence[str], node: int) -> dict[str, Any]:
    """The Compose service of node `node`: the JobSet pod's image, command and rendezvous environment, its host name
    and network alias, volumes, and on GPU hardware its own GPUs of the host."""
    c, name = cfg.cluster, jobset.job_name(cfg)
    env: dict[str, str | None] = {
        rz.JOBSET_COORDINATOR_HOST: f"{host(cfg, 0)}.{name}",
        rz.JOBSET_COORDINATOR_PORT: str(c.coordinator_port),
        rz.JOBSET_NUM_NODES: str(c.nodes),
        rz.JOBSET_NODE_RANK: str(node),
    }
    env |= {s.env: None for s in c.secrets}  # null: taken from the shell that runs `docker compose`
    env |= {k: literal(str(v)) for k, v in c.env.items()}
    svc: dict[str, Any] = {
        "image": f"${{MOEKIT_IMAGE:-{c.image}}}",
        "hostname": host(cfg, node),
        "domainname": name,
        # The image's entrypoint runs moekit. pod_args doubles every $ (Kubernetes' escape), which is Compose's too.
        "command": jobset.pod_args(cfg, overrides),
        "environment": env,
        "networks": {NETWORK: {"aliases": [f"{host(cfg, node)}.{name}"]}},
        "ulimits": {"memlock": -1, "stack": STACK_BYTES},
        "volumes": volumes(cfg, node),
    }
    if cfg.hardware.platform == "gpu":
        ids = [str(node * c.gpus_per_node + i) for i in range(c.gpus_per_node)]
        svc["ipc"] = "host"
        gpus = {"driver": "nvidia", "device_ids": ids, "capabilities": ["gpu"]}
        svc["deploy"] = {"resources": {"reservations": {"devices": [gpus]}}}
    return svc


def one_host_warning(cfg: Config) -> str | None:
    """What a GPU project of more GPUs than one host has asks of the host that runs it (None: it may fit)."""
    c = cfg.cluster
    total = c.nodes * c.gpus_per_node
    if cfg.hardware.platform != "gpu" or total <= HOST_GPUS:
        return None
    return (
        f"this project runs all {c.nodes} nodes on the one host that runs `docker compose` and reserves its GPUs "
        f"0-{total - 1} ({HOST_GPUS} is the most an HGX host has): `docker compose up` fails on any host with fewer. "
        "Compose wires a multi-node job on one host (hardware=cpu, or cluster.nodes x cluster.gpus_per_node <= "
        f"{HOST_GPUS}); for {c.nodes} nodes render target=jobset or target=slurm"
    )


def project(cfg: Config, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The compose project for this config; `overrides` are the user's Hydra overrides, passed to every node."""
    out = {
        "name": f"moekit-{jobset.job_name(cfg)}",
        "services": {f"node-{n}": service(cfg, overrides, n) for n in range(cfg.cluster.nodes)},
        "networks": {NETWORK: {}},
    }
    if claims := [v.claim for v in cfg.cluster.volumes if v.claim]:
        out["volumes"] = {c: {} for c in claims}
    return out
