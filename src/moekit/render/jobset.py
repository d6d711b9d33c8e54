"""Render a composed config as a Kubernetes JobSet (jobset.x-k8s.io/v1alpha2), as plain data (pure).

One replicated job `workers` of cluster.nodes pods (Indexed, backoffLimit 0, restartPolicy Never: a lone
restarted JAX process cannot rejoin its peers, so the whole group restarts through failurePolicy, once the old pods
are gone; a process that waited out cluster.rendezvous_timeout_s fails the set instead: docs/known-issues.md). Each
pod runs `moekit train` with the same overrides; rendezvous.from_jobset derives rank and coordinator from
the environment written here. The coordinator host comes from the annotation the JobSet controller puts
on every pod (spec.coordinator), so renaming the JobSet (kustomize) keeps it right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from moekit.base import failures
from moekit.config import formats
from moekit.config.schema import Config, Volume
from moekit.translate import rendezvous as rz

API_VERSION = "jobset.x-k8s.io/v1alpha2"
WORKERS = "workers"  # the replicated job's name; pod hostnames are <jobset>-workers-0-<node>.<jobset>
CONTAINER = "train"
COORDINATOR_KEY = "jobset.sigs.k8s.io/coordinator"  # label + annotation: <jobset>-workers-0-0.<subdomain>
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
DISRUPTION_RULE = "NodeDisruption"
RENDEZVOUS_RULE = "RendezvousTimeout"
BIND_ADDRESS = "JAX_COORDINATOR_BIND_ADDRESS"  # read by jax.distributed.initialize (jax/_src/distributed.py)


def rendezvous_exit_message(cfg: Config) -> str:
    """What the Job controller writes when a pod fails the Job through the rendezvous rule of its podFailurePolicy
    (Kubernetes: "Container <c> for pod <ns>/<pod> failed with exit code <n> matching FailJob rule at index <i>")."""
    return f"exit code {failures.RENDEZVOUS_TIMEOUT.exit_status} matching FailJob rule"


def job_name(cfg: Config) -> str:
    """The JobSet name (formats.job_name: the one rule for JobSet, pod and Slurm job names)."""
    return formats.job_name(cfg)


def kube_literal(text: str) -> str:
    """`text` as Kubernetes must receive it to pass it on unchanged: it expands $(VAR) in command, args and env
    values, and reads $$ as one $, so every $ is doubled."""
    return text.replace("$", "$$")


def pod_args(cfg: Config, overrides: Sequence[str]) -> list[str]:
    """What every pod runs: the same experiment and overrides, with cluster=jobset so ranks come from the env.

    Given as container args, not command, so the image's entrypoint runs first (it checks that the MaxText
    inside knows every key, then execs `moekit train ...`).
    """
    # Kubernetes expands $(VAR) in args: an override such as cluster.env.X='$(Y)' must reach moekit as typed.
    rest = [kube_literal(o) for o in overrides if not o.startswith(("experiment=", "cluster="))]
    return ["train", f"experiment={cfg.experiment_name}", "cluster=jobset", *rest]


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def pod_env(cfg: Config) -> list[dict[str, Any]]:
    """Rendezvous first (rendezvous.from_jobset reads these), then secrets by reference, then cluster.env."""
    c = cfg.cluster
    env: list[dict[str, Any]] = [
        {"name": rz.JOBSET_COORDINATOR_HOST, **_field(f"metadata.annotations['{COORDINATOR_KEY}']")},
        {"name": rz.JOBSET_COORDINATOR_PORT, "value": str(c.coordinator_port)},
        {"name": rz.JOBSET_NUM_NODES, "value": str(c.nodes)},
        {"name": rz.JOBSET_NODE_RANK, **_field(f"metadata.annotations['{COMPLETION_INDEX_KEY}']")},
    ]
    if cfg.network.host_network:
        # JAX binds the coordinator to [::]:<port> by default: on a node whose IPv6 is off or bindv6only, peers
        # dialing its IPv4 address are refused. The port must be given too, or the service binds elsewhere.
        env.append({"name": BIND_ADDRESS, "value": f"0.0.0.0:{c.coordinator_port}"})
    env += [{"name": s.env, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}} for s in c.secrets]
    env += [{"name": k, "value": v} for k, v in c.env.items()]
    return env


def _container(cfg: Config, overrides: Sequence[str]) -> dict[str, Any]:
    c, net = cfg.cluster, cfg.network
    limits: dict[str, Any] = {}
    if cfg.hardware.platform == "gpu":
        limits[GPU_RESOURCE] = c.gpus_per_node
    limits |= dict(net.resources)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": c.image,
        "args": pod_args(cfg, overrides),
        "env": pod_env(cfg),
    }
    if limits or net.resource_claim_template:
        container["resources"] = {"limits": limits} if limits else {}
        if net.resource_claim_template:
            container["resources"]["claims"] = [{"name": "compute-domain"}]
    if net.capabilities:
        container["securityContext"] = {"capabilities": {"add": list(net.capabilities)}}
    container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}] + [
        {"name": v.name, "mountPath": v.path, **({"readOnly": True} if v.read_only else {})} for v in c.volumes
    ]
    return container


def _volume(v: Volume) -> dict[str, Any]:
    """A cluster.volumes entry as a pod volume: a PersistentVolumeClaim, or a directory of the node."""
    if v.claim:
        return {
            "name": v.name,
            "persistentVolumeClaim": {"claimName": v.claim, **({"readOnly": True} if v.read_only else {})},
        }
    return {"name": v.name, "hostPath": {"path": v.host_path, "type": "Directory"}}


def _pod_spec(cfg: Config, overrides: Sequence[str]) -> dict[str, Any]:
    c, net = cfg.cluster, cfg.network
    # Pod deletion (preemption, eviction, a JobSet restart) sends SIGTERM, then SIGKILL after this long: moekit's
    # workers save a checkpoint at the next step within it (run/preemption.py).
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": c.signal_grace_s}
    if c.service_account:
        spec["serviceAccountName"] = c.service_account
    if net.host_network:
        spec |= {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    if c.node_selector:
        spec["nodeSelector"] = dict(c.node_selector)
    if c.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in c.tolerations]
    if net.resource_claim_template:
        spec["resourceClaims"] = [{"name": "compute-domain", "resourceClaimTemplateName": net.resource_claim_template}]
    spec["containers"] = [_container(cfg, overrides)]
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{c.shm_gib}Gi"}}]
    spec["volumes"] += [_volume(v) for v in c.volumes]
    return spec


def jobset(cfg: Config, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The JobSet for this config; `overrides` are the user's Hydra overrides, passed on to every pod."""
    c, name = cfg.cluster, job_name(cfg)
    pod_labels = {"app.kubernetes.io/name": "moekit", "moekit/experiment": name}
    # Kueue admits the JobSet as one workload; the queue label stays off the pods.
    labels = pod_labels | ({QUEUE_LABEL: c.queue} if c.queue else {})
    spec: dict[str, Any] = {}
    if c.queue:
        spec["suspend"] = True  # Kueue admits (unsuspends) it when quota is free
    spec |= {
        "coordinator": {"replicatedJob": WORKERS, "jobIndex": 0, "podIndex": 0},
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "failurePolicy": {
            "maxRestarts": c.max_restarts,
            # No new pod while an old one still runs: a restarted group never meets the last attempt's processes.
            "restartStrategy": "BlockingRecreate",
            # A rendezvous that timed out (a pod never came) fails the set: a restart would recreate the same
            # unschedulable pod. A Job that failed through its other podFailurePolicy rule (node drained or
            # preempted) restarts the group without spending maxRestarts; any other failure spends one restart.
            "rules": [
                {
                    "name": RENDEZVOUS_RULE,
                    "action": "FailJobSet",
                    "onJobFailureMessagePatterns": [rendezvous_exit_message(cfg)],  # only that podFailurePolicy rule's
                },
                {
                    "name": DISRUPTION_RULE,
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "onJobFailureMessagePatterns": ["condition DisruptionTarget matching FailJob rule"],
                },
            ],
        },
        "successPolicy": {"operator": "All"},
        "replicatedJobs": [
            {
                "name": WORKERS,
                "replicas": 1,
                "template": {
                    "spec": {
                        "parallelism": c.nodes,
                        "completions": c.nodes,
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "podFailurePolicy": {
                            "rules": [
                                {
                                    "action": "FailJob",
                                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                                },
                                {
                                    "action": "FailJob",
                                    "onExitCodes": {
                                        "operator": "In",
                                        "values": [failures.RENDEZVOUS_TIMEOUT.exit_status],
                                    },
                                },
                            ]
                        },
                        "template": {"metadata": {"labels": pod_labels}, "spec": _pod_spec(cfg, overrides)},
                    }
                },
            }
        ],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": c.namespace, "labels": labels},
        "spec": spec,
    }


def coordinator_endpoint(manifest: dict[str, Any]) -> str:
    """What the JobSet controller writes into the coordinator label: <jobset>-<rjob>-<job>-<pod>.<subdomain>."""
    name = manifest["metadata"]["name"]
    co = manifest["spec"]["coordinator"]
    subdomain = manifest["spec"].get("network", {}).get("subdomain") or name
    return f"{name}-{co['replicatedJob']}-{co.get('jobIndex', 0)}-{co.get('podIndex', 0)}.{subdomain}"


_JOB = ("spec", "replicatedJobs", 0, "template", "spec")
_POD = (*_JOB, "template", "spec")
_CONTAINER = (*_POD, "containers", 0)
DIGEST_HOWTO = (
    "pin a digest to repeat a run: cluster.image=REGISTRY/moekit@sha256:DIGEST (docker inspect --format "
    "'{{index .RepoDigests 0}}' REGISTRY/moekit:TAG, after the push)"
)


def _axes(axes: dict[str, int]) -> str:
    return " x ".join(f"{k} {v}" for k, v in axes.items() if v != 1) or "1"


def _failure_comments(cfg: Config) -> list[tuple[tuple[str | int, ...], str]]:
    """The reasons of the start-up and failure contract: restarts, the rendezvous timeout's rule, the bind address
    on hostNetwork (docs/known-issues.md)."""
    out: list[tuple[tuple[str | int, ...], str]] = [
        (
            ("spec", "failurePolicy", "maxRestarts"),
            f"cluster.max_restarts; a drained or preempted node ({DISRUPTION_RULE}) restarts the group for free; "
            "new pods start once the old are gone (no old process meets the new coordinator: marin PR #7651)",
        ),
        (
            (*_JOB, "podFailurePolicy", "rules", 1, "action"),
            f"moekit exits {failures.RENDEZVOUS_TIMEOUT.exit_status} when a pod never joined within "
            f"cluster.rendezvous_timeout_s={cfg.cluster.rendezvous_timeout_s} s: the set fails ({RENDEZVOUS_RULE}) "
            "rather than recreate a pod that could not be scheduled (marin #5480)",
        ),
    ]
    if cfg.network.host_network:
        out.append(
            (
                (*_CONTAINER, "env", 4, "name"),
                "hostNetwork: bind the coordinator on IPv4, port included (JAX's default [::] fails where the node's "
                "IPv6 is off or bindv6only is set; marin #8244)",
            )
        )
    return out


def comments(cfg: Config) -> list[tuple[tuple[str | int, ...], str]]:
    """(path, text) for each field whose value a rule sets: the reason, or the arithmetic, at the field."""
    c, net = cfg.cluster, cfg.network
    unit = "GPUs" if cfg.hardware.platform == "gpu" else "CPU devices"
    mesh = f"ici {_axes(cfg.ici_filled)}, dcn {_axes(dict(cfg.parallelism.dcn.items()))}"
    out: list[tuple[tuple[str | int, ...], str]] = [
        (
            ("spec", "suspend"),
            "cluster.queue: Kueue admits the JobSet (unsuspends it) when its LocalQueue has quota",
        ),
        *_failure_comments(cfg),
        (
            (*_JOB, "parallelism"),
            f"cluster.nodes: one pod per node, all at once. The mesh ({mesh}) has {cfg.num_devices} devices = "
            f"{c.nodes} nodes x {c.gpus_per_node} {unit}; completions = parallelism, each pod's completion index is "
            "its node rank",
        ),
        (
            (*_JOB, "backoffLimit"),
            "a restarted lone JAX process cannot rejoin its peers: the whole set restarts (failurePolicy)",
        ),
        (
            (*_POD, "terminationGracePeriodSeconds"),
            "cluster.signal_grace_s: SIGTERM to SIGKILL when a pod is deleted; "
            + (
                f"the workers save a checkpoint at the next step within it (checkpoint.every={cfg.checkpoint.every}) "
                "and a restart resumes there"
                if cfg.checkpoint.every
                else "the workers stop at the next step (checkpoint.every=0: nothing to save)"
            ),
        ),
        ((*_POD, "hostNetwork"), f"network={net.name}: the pods use the node's network (its NICs for NCCL)"),
        (
            (*_POD, "resourceClaims"),
            f"network={net.name}: every pod claims a channel of one DRA ResourceClaimTemplate (an NVIDIA "
            "ComputeDomain: NVLink across the nodes of a rack)",
        ),
        (
            (*_CONTAINER, "image"),
            "cluster.image: a digest is pinned" if "@sha256:" in c.image else f"cluster.image; {DIGEST_HOWTO}",
        ),
        (
            (*_CONTAINER, "env", 0, "name"),
            "the coordinator (process 0) is pod 0 of workers: <jobset>-workers-0-0.<jobset>, a stable DNS hostname "
            "the JobSet controller writes into this annotation",
        ),
        ((*_CONTAINER, "env", 1, "name"), "cluster.coordinator_port: process 0's jax.distributed service"),
        (
            (*_CONTAINER, "env", 3, "name"),
            f"node rank = the completion index; process id = rank x {c.processes_per_node} process(es) per node "
            "+ local rank",
        ),
    ]
    limits = []
    if cfg.hardware.platform == "gpu":
        limits.append(f"{GPU_RESOURCE}: cluster.gpus_per_node")
    if net.resources:
        limits.append(f"{', '.join(net.resources)}: network={net.name}'s RDMA devices (NCCL between nodes)")
    if net.resource_claim_template:
        limits.append("claims: the pod's ComputeDomain channel (resourceClaims)")
    if limits:
        out.append(((*_CONTAINER, "resources"), "; ".join(limits)))
    if net.capabilities:
        out.append(
            (
                (*_CONTAINER, "securityContext"),
                f"network={net.name}: {', '.join(net.capabilities)} (pinned memory for RDMA), never privileged",
            )
        )
    out.append(((*_POD, "volumes", 0, "name"), "cluster.shm_gib: a memory-backed /dev/shm (NCCL and host buffers)"))
    return out
