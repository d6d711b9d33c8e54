"""The cluster kinds (cluster=<kind>): one row each, read by the checks, the typed config and the render targets.

A row says how many hosts the kind has, where its run directories live and what its job file carries. Each kind's
own code sits in the room that owns the concern: how its processes learn their ranks (translate/rendezvous.py,
FROM_CLUSTER) and the file that starts its job (render/targets.py, TARGETS); tests/test_clusters.py ties all to
the rows. Adding a kind (docs/extending.md): its conf/cluster/<kind>.yaml, its row here, the schema's choice, its
rendezvous, its target and its page.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterKind:
    """One cluster kind: its hosts, where its run directories live, what its job file carries."""

    name: str
    """The option name (cluster=<kind>, conf/cluster/<kind>.yaml)."""
    one_host: bool = False
    """`moekit train` starts every process on this host: one node, a multi-process run takes a free coordinator
    port at each launch, and no job file is written (no job name; secrets stay in the processes' environment)."""
    pods: bool = False
    """Processes run in Kubernetes pods: each volume has one source (a claim or a node path), a run directory
    outlives the pods only on such a volume, and the pods' network carries the collectives."""
    shared_paths: bool = False
    """Every node sees the same paths (a shared file system): a run directory is one for all nodes wherever it
    lies, and volumes mount nothing."""
    lost_where: str = ""
    """Where a cluster job's run directory is without cluster.output (a restart cannot resume from there)."""
    volume_source: str = ""
    """What a volume for run directories gives besides its path (the fix of checks/cluster.py)."""
    job_env: str = ""
    """A variable the cluster sets in every process of a job of this kind and nowhere else: a host that has it is
    where the job runs (preflight's is_target); empty for a one-host kind (it runs where `moekit train` runs)."""
    runs_in: str = ""
    """Where the job's processes run, for messages ("the JobSet's pods")."""
    launcher: str = "host"
    """What starts one share of the job's processes (one `moekit train`), for messages ("Slurm task")."""
    run_dir_rule: str = ""
    """shared_paths kinds: how the rendered job gives all its launchers one run directory (run.dir)."""
    doc: str = ""
    """The page that documents running on this kind and each of its `keys` (a cluster job's kind has one)."""
    keys: tuple[str, ...] = ()
    """The cluster.* keys only this kind reads (the Cluster section keeps one flat set of user-facing keys; this
    says whose each is: docs/extending.md, tests/test_clusters.py)."""


CLUSTER_KINDS: dict[str, ClusterKind] = {
    k.name: k
    for k in (
        ClusterKind(name="local", one_host=True),
        ClusterKind(
            name="jobset",
            pods=True,
            lost_where="each pod's own filesystem, lost with the pod",
            volume_source="claim: PVC_NAME",
            job_env="MOEKIT_COORDINATOR_HOST",  # set by the pod template (render/jobset.py, translate/rendezvous.py)
            runs_in="the JobSet's pods",
            launcher="JobSet pod",
            doc="docs/kubernetes.md",
            keys=(
                "namespace",
                "queue",
                "max_restarts",
                "tolerations",
                "node_selector",
                "service_account",
                "secrets",
                "shm_gib",
            ),
        ),
        ClusterKind(
            name="slurm",
            shared_paths=True,
            lost_where="a new folder on every node",
            volume_source="no claim: a path every node sees",
            job_env="SLURM_JOB_ID",
            runs_in="a Slurm allocation",
            launcher="Slurm task",
            doc="docs/slurm.md",
            run_dir_rule="the rendered script sets run.dir=<run.base_dir>/<experiment>/slurm-$SLURM_JOB_ID",
            keys=(
                "partition",
                "account",
                "time_limit",
                "task_layout",
                "container",
                "container_mounts",
                "container_workdir",
                "requeue",
            ),
        ),
    )
}
